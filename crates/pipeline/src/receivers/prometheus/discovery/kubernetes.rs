//! `kubernetes_sd_configs`: targets from the Kubernetes API, as Prometheus
//! 2.42's `discovery/kubernetes` produces them (roles `pod` and `node`).
//!
//! - **Watch, not poll**: one `kube` watcher per namespace (list, then watch
//!   from the listed `resourceVersion`). A dropped watch is resumed from the
//!   last version seen; a `410 Gone` (history compacted) re-lists. Errors back
//!   off exponentially and are counted in
//!   `infertel_receiver_discovery_errors_total`.
//! - **Resync**: every `resync_interval` the watch is restarted with a fresh
//!   list, and the listed set replaces the known set, so an event missed by
//!   any path cannot leave a stale target behind.
//! - **Auth**: `kubeconfig_file`, or `api_server` (+ `bearer_token_file`,
//!   `tls_config.ca_file`), or in-cluster (the service-account token is
//!   re-read before it expires and the CA file is re-read on rotation by
//!   `kube`'s in-cluster config).
//! - **Labels**: the exact `__meta_kubernetes_*` names Prometheus emits, with
//!   label and annotation keys sanitized the same way (every character
//!   outside `[a-zA-Z0-9_]` becomes `_`), so `prometheus.io/scrape`,
//!   `prometheus.io/port` and `prometheus.io/path` recipes work unchanged.

use super::TargetGroup;
use crate::config::Duration;
use crate::telemetry::Counter;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, watch as tokio_watch};

const META: &str = "__meta_kubernetes_";

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Pod,
    Node,
    Endpointslice,
    Endpoints,
    Service,
    Ingress,
}

impl Role {
    fn name(&self) -> &'static str {
        match self {
            Role::Pod => "pod",
            Role::Node => "node",
            Role::Endpointslice => "endpointslice",
            Role::Endpoints => "endpoints",
            Role::Service => "service",
            Role::Ingress => "ingress",
        }
    }
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct Namespaces {
    /// The namespace the agent runs in (in-cluster namespace file, or the
    /// kubeconfig context's namespace).
    #[serde(default)]
    pub own_namespace: bool,
    #[serde(default)]
    pub names: Vec<String>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    pub role: Role,
    pub label: Option<String>,
    pub field: Option<String>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSdConfig {
    pub role: Role,
    /// Defaults to in-cluster when neither this nor `kubeconfig_file` is set.
    pub api_server: Option<String>,
    pub kubeconfig_file: Option<PathBuf>,
    #[serde(default)]
    pub namespaces: Namespaces,
    #[serde(default)]
    pub selectors: Vec<Selector>,
    /// With `api_server`: the token sent to the API server (re-read before it expires).
    pub bearer_token_file: Option<PathBuf>,
    /// With `api_server`: how to verify it (client certificates: use a kubeconfig).
    #[serde(default)]
    pub tls_config: ApiServerTls,
    /// Re-list everything this often, replacing the known set (infertel extension).
    #[serde(default = "default_resync")]
    pub resync_interval: Duration,
}

fn default_resync() -> Duration {
    Duration::from_secs(600)
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct ApiServerTls {
    pub ca_file: Option<PathBuf>,
    pub server_name: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

impl KubernetesSdConfig {
    pub fn validate(&self) -> Result<(), String> {
        match self.role {
            Role::Pod | Role::Node => {}
            ref r => {
                return Err(format!(
                    "kubernetes_sd_configs: role {:?} is not supported yet (supported: pod, node)",
                    r.name()
                ));
            }
        }
        if self.api_server.is_some() && self.kubeconfig_file.is_some() {
            return Err("kubernetes_sd_configs: at most one of api_server and kubeconfig_file may be set".into());
        }
        if self.api_server.is_none() && (self.bearer_token_file.is_some() || self.tls_config.ca_file.is_some()) {
            return Err("kubernetes_sd_configs: bearer_token_file and tls_config need api_server (in-cluster and kubeconfig bring their own)".into());
        }
        if let Some(s) = &self.api_server {
            let u = url::Url::parse(s).map_err(|e| format!("kubernetes_sd_configs: api_server {s:?}: {e}"))?;
            if u.scheme() != "http" && u.scheme() != "https" {
                return Err(format!("kubernetes_sd_configs: api_server {s:?}: scheme must be http or https"));
            }
        }
        let mut seen = Vec::new();
        for sel in &self.selectors {
            if sel.role != self.role {
                return Err(format!(
                    "kubernetes_sd_configs: role {:?} supports only {:?} selectors, found a {:?} selector",
                    self.role.name(),
                    self.role.name(),
                    sel.role.name()
                ));
            }
            if seen.contains(&sel.role.name()) {
                return Err(format!("kubernetes_sd_configs: duplicated selector role {:?}", sel.role.name()));
            }
            seen.push(sel.role.name());
        }
        if self.resync_interval.get().is_zero() {
            return Err("kubernetes_sd_configs: resync_interval must be greater than 0".into());
        }
        Ok(())
    }

    fn label_selector(&self) -> Option<String> {
        self.selectors.iter().find(|s| s.role == self.role).and_then(|s| s.label.clone()).filter(|s| !s.is_empty())
    }

    fn field_selector(&self) -> Option<String> {
        self.selectors.iter().find(|s| s.role == self.role).and_then(|s| s.field.clone()).filter(|s| !s.is_empty())
    }
}

/// Builds the client configuration: kubeconfig, explicit API server, or in-cluster.
async fn client_config(cfg: &KubernetesSdConfig) -> Result<kube::Config, String> {
    crate::http::ensure_crypto_provider();
    if let Some(path) = &cfg.kubeconfig_file {
        let kc = kube::config::Kubeconfig::read_from(path)
            .map_err(|e| format!("kubeconfig_file {}: {e}", path.display()))?;
        return kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| format!("kubeconfig_file {}: {e}", path.display()));
    }
    if let Some(server) = &cfg.api_server {
        let uri = server.parse().map_err(|e| format!("api_server {server:?}: {e}"))?;
        let mut c = kube::Config::new(uri);
        c.auth_info.token_file = cfg.bearer_token_file.as_ref().map(|p| p.display().to_string());
        c.accept_invalid_certs = cfg.tls_config.insecure_skip_verify;
        c.tls_server_name = cfg.tls_config.server_name.clone();
        if let Some(ca) = &cfg.tls_config.ca_file {
            let pem = std::fs::read(ca).map_err(|e| format!("tls_config.ca_file {}: {e}", ca.display()))?;
            let certs: Vec<Vec<u8>> = rustls_pemfile::certs(&mut &pem[..])
                .map(|c| c.map(|c| c.to_vec()))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("tls_config.ca_file {}: {e}", ca.display()))?;
            if certs.is_empty() {
                return Err(format!("tls_config.ca_file {}: no PEM certificate found", ca.display()));
            }
            c.root_cert = Some(certs);
            // Re-read on rotation, as in-cluster.
            c.root_cert_file = Some(ca.clone());
        }
        return Ok(c);
    }
    kube::Config::incluster()
        .map_err(|e| format!("in-cluster configuration: {e} (outside a cluster, set kubeconfig_file or api_server)"))
}

/// One SD config's live target groups, kept up to date by a background task.
pub struct KubernetesDiscovery {
    state: Shared,
    handle: tokio::task::JoinHandle<()>,
}

impl KubernetesDiscovery {
    /// Starts discovery; `changed` is notified whenever the groups change.
    pub fn spawn(
        cfg: KubernetesSdConfig,
        index: usize,
        job: String,
        changed: Arc<Notify>,
        errors: Arc<Counter>,
        stop: tokio_watch::Receiver<bool>,
    ) -> KubernetesDiscovery {
        let state: Shared = Arc::default();
        let st = state.clone();
        let handle = tokio::spawn(async move { run(cfg, index, job, st, changed, errors, stop).await });
        KubernetesDiscovery { state, handle }
    }

    /// Every group known now, in a stable order.
    pub fn groups(&self) -> Vec<TargetGroup> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.values().flat_map(|objs| objs.values().flatten().cloned()).collect()
    }

    pub async fn join(self) {
        let _ = self.handle.await;
    }
}

/// Per namespace, per object (`namespace/name`), the object's groups.
type Shared = Arc<Mutex<BTreeMap<String, ObjectGroups>>>;
type ObjectGroups = BTreeMap<String, Vec<TargetGroup>>;

async fn run(
    cfg: KubernetesSdConfig,
    index: usize,
    job: String,
    state: Shared,
    changed: Arc<Notify>,
    errors: Arc<Counter>,
    mut stop: tokio_watch::Receiver<bool>,
) {
    let role = cfg.role.name();
    // The client is built once; on failure (e.g. kubeconfig not there yet)
    // retry with backoff until stopped.
    let mut delay = std::time::Duration::from_millis(500);
    let (client, default_ns) = loop {
        let attempt = async {
            let c = client_config(&cfg).await?;
            let ns = c.default_namespace.clone();
            Client::try_from(c).map(|cl| (cl, ns)).map_err(|e| format!("kubernetes client: {e}"))
        };
        match attempt.await {
            Ok(v) => break v,
            Err(e) => {
                errors.inc();
                tracing::error!(job = %job, sd = index, "kubernetes_sd_configs[{index}]: {e}; retrying in {delay:?}");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.changed() => return,
        }
        delay = (delay * 2).min(std::time::Duration::from_secs(30));
    };
    let mut namespaces: Vec<Option<String>> = cfg.namespaces.names.iter().cloned().map(Some).collect();
    if cfg.namespaces.own_namespace {
        namespaces.push(Some(default_ns));
    }
    if namespaces.is_empty() || cfg.role == Role::Node {
        namespaces = vec![None];
    }
    namespaces.dedup();
    let wc = watcher::Config {
        label_selector: cfg.label_selector(),
        field_selector: cfg.field_selector(),
        ..Default::default()
    };
    tracing::info!(
        job = %job, role, namespaces = ?namespaces, label_selector = ?wc.label_selector, field_selector = ?wc.field_selector,
        "kubernetes discovery: watching"
    );
    let mut tasks = Vec::new();
    for ns in namespaces {
        let key = ns.clone().unwrap_or_default();
        let (client, wc, state, changed, errors, stop, job, resync) = (
            client.clone(),
            wc.clone(),
            state.clone(),
            changed.clone(),
            errors.clone(),
            stop.clone(),
            job.clone(),
            cfg.resync_interval.get(),
        );
        let t = match cfg.role {
            Role::Node => {
                let api: Api<Node> = Api::all(client);
                tokio::spawn(watch_loop(api, wc, key, state, changed, errors, stop, job, resync, build_node))
            }
            _ => {
                let api: Api<Pod> = match &ns {
                    Some(n) => Api::namespaced(client, n),
                    None => Api::all(client),
                };
                tokio::spawn(watch_loop(api, wc, key, state, changed, errors, stop, job, resync, build_pod))
            }
        };
        tasks.push(t);
    }
    for t in tasks {
        let _ = t.await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn watch_loop<K>(
    api: Api<K>,
    wc: watcher::Config,
    ns_key: String,
    state: Shared,
    changed: Arc<Notify>,
    errors: Arc<Counter>,
    mut stop: tokio_watch::Receiver<bool>,
    job: String,
    resync: std::time::Duration,
    build: fn(&K) -> Vec<TargetGroup>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let obj_key = |o: &K| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
    let publish = |f: &mut dyn FnMut(&mut ObjectGroups)| {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        f(st.entry(ns_key.clone()).or_default());
        drop(st);
        changed.notify_one();
    };
    loop {
        // Each pass lists afresh; the previous pass's set stays in force until
        // the new list completes (InitDone), then is replaced whole.
        let mut stream = watcher::watcher(api.clone(), wc.clone()).default_backoff().boxed();
        let deadline = tokio::time::sleep(resync);
        tokio::pin!(deadline);
        let mut buffer: Option<BTreeMap<String, Vec<TargetGroup>>> = None;
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = &mut deadline => {
                    tracing::debug!(job = %job, "kubernetes discovery: resync");
                    break;
                }
                ev = stream.next() => match ev {
                    Some(Ok(Event::Init)) => buffer = Some(BTreeMap::new()),
                    Some(Ok(Event::InitApply(o))) => {
                        let groups = build(&o);
                        buffer.get_or_insert_with(BTreeMap::new).insert(obj_key(&o), groups);
                    }
                    Some(Ok(Event::InitDone)) => {
                        let listed = buffer.take().unwrap_or_default();
                        tracing::info!(job = %job, "kubernetes discovery: listed {} objects", listed.len());
                        publish(&mut |m| *m = listed.clone());
                    }
                    Some(Ok(Event::Apply(o))) => {
                        let (k, g) = (obj_key(&o), build(&o));
                        publish(&mut |m| { m.insert(k.clone(), g.clone()); });
                    }
                    Some(Ok(Event::Delete(o))) => {
                        let k = obj_key(&o);
                        publish(&mut |m| { m.remove(&k); });
                    }
                    Some(Err(e)) => {
                        errors.inc();
                        tracing::warn!(job = %job, "kubernetes discovery: {e} (keeping the known targets; retrying with backoff)");
                    }
                    None => break,
                }
            }
        }
    }
}

/// Prometheus's `strutil.SanitizeLabelName`: every character outside
/// `[a-zA-Z0-9_]` becomes `_` (one per character, not per byte).
pub fn sanitize_label_name(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

fn add_object_meta(
    ls: &mut BTreeMap<String, String>,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    role: &str,
) {
    ls.insert(format!("{META}{role}_name"), meta.name.clone().unwrap_or_default());
    for (k, v) in meta.labels.iter().flatten() {
        let n = sanitize_label_name(k);
        ls.insert(format!("{META}{role}_label_{n}"), v.clone());
        ls.insert(format!("{META}{role}_labelpresent_{n}"), "true".into());
    }
    for (k, v) in meta.annotations.iter().flatten() {
        let n = sanitize_label_name(k);
        ls.insert(format!("{META}{role}_annotation_{n}"), v.clone());
        ls.insert(format!("{META}{role}_annotationpresent_{n}"), "true".into());
    }
}

/// Go's `net.JoinHostPort`.
fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// Role `pod`: one target per declared container port, one per container
/// without ports (address = pod IP); nothing while the pod has no IP.
pub fn build_pod(pod: &Pod) -> Vec<TargetGroup> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let source = format!("pod/{ns}/{name}");
    let status = pod.status.clone().unwrap_or_default();
    let Some(ip) = status.pod_ip.clone().filter(|s| !s.is_empty()) else {
        return Vec::new();
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let mut ls: BTreeMap<String, String> = BTreeMap::new();
    ls.insert(format!("{META}pod_ip"), ip.clone());
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.to_lowercase())
        .unwrap_or_else(|| "unknown".into());
    ls.insert(format!("{META}pod_ready"), ready);
    ls.insert(format!("{META}pod_phase"), status.phase.clone().unwrap_or_default());
    ls.insert(format!("{META}pod_node_name"), spec.node_name.clone().unwrap_or_default());
    ls.insert(format!("{META}pod_host_ip"), status.host_ip.clone().unwrap_or_default());
    ls.insert(format!("{META}pod_uid"), pod.metadata.uid.clone().unwrap_or_default());
    add_object_meta(&mut ls, &pod.metadata, "pod");
    if let Some(owner) = pod.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true)) {
        if !owner.kind.is_empty() {
            ls.insert(format!("{META}pod_controller_kind"), owner.kind.clone());
        }
        if !owner.name.is_empty() {
            ls.insert(format!("{META}pod_controller_name"), owner.name.clone());
        }
    }
    ls.insert(format!("{META}namespace"), ns);

    let container_id = |statuses: &Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>, c: &str| {
        statuses.iter().flatten().find(|s| s.name == c).and_then(|s| s.container_id.clone()).unwrap_or_default()
    };
    let mut out = Vec::new();
    let all =
        spec.containers.iter().map(|c| (c, false)).chain(spec.init_containers.iter().flatten().map(|c| (c, true)));
    for (c, init) in all {
        let id = container_id(if init { &status.init_container_statuses } else { &status.container_statuses }, &c.name);
        let mut base = ls.clone();
        base.insert(format!("{META}pod_container_name"), c.name.clone());
        base.insert(format!("{META}pod_container_id"), id);
        base.insert(format!("{META}pod_container_image"), c.image.clone().unwrap_or_default());
        base.insert(format!("{META}pod_container_init"), init.to_string());
        let ports = c.ports.clone().unwrap_or_default();
        if ports.is_empty() {
            out.push(TargetGroup { source: format!("{source}/{}", c.name), targets: vec![ip.clone()], labels: base });
            continue;
        }
        for p in ports {
            let port = p.container_port.to_string();
            let mut l = base.clone();
            l.insert(format!("{META}pod_container_port_number"), port.clone());
            l.insert(format!("{META}pod_container_port_name"), p.name.clone().unwrap_or_default());
            l.insert(format!("{META}pod_container_port_protocol"), p.protocol.clone().unwrap_or_else(|| "TCP".into()));
            out.push(TargetGroup {
                source: format!("{source}/{}/{port}", c.name),
                targets: vec![join_host_port(&ip, &port)],
                labels: l,
            });
        }
    }
    out
}

/// Role `node`: one target per node at its first address by Prometheus's
/// priority (InternalIP, InternalDNS, ExternalIP, ExternalDNS, LegacyHostIP,
/// Hostname) and the kubelet port.
pub fn build_node(node: &Node) -> Vec<TargetGroup> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let status = node.status.clone().unwrap_or_default();
    let addrs = status.addresses.clone().unwrap_or_default();
    let mut ls = BTreeMap::new();
    add_object_meta(&mut ls, &node.metadata, "node");
    ls.insert(
        format!("{META}node_provider_id"),
        node.spec.as_ref().and_then(|s| s.provider_id.clone()).unwrap_or_default(),
    );
    let mut first_of: BTreeMap<String, String> = BTreeMap::new();
    for a in &addrs {
        first_of.entry(a.type_.clone()).or_insert_with(|| a.address.clone());
    }
    for (t, a) in &first_of {
        ls.insert(format!("{META}node_address_{t}"), a.clone());
    }
    let order = ["InternalIP", "InternalDNS", "ExternalIP", "ExternalDNS", "LegacyHostIP", "Hostname"];
    let Some(addr) = order.iter().find_map(|t| first_of.get(*t)) else {
        tracing::warn!(node = %name, "kubernetes discovery: node has no address; skipped");
        return Vec::new();
    };
    let port = status.daemon_endpoints.and_then(|d| d.kubelet_endpoint).map(|e| e.port).unwrap_or(10250);
    ls.insert("instance".into(), name.clone());
    vec![TargetGroup {
        source: format!("node/{name}"),
        targets: vec![join_host_port(addr, &port.to_string())],
        labels: ls,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn sanitizes_like_prometheus() {
        assert_eq!(sanitize_label_name("prometheus.io/scrape"), "prometheus_io_scrape");
        assert_eq!(sanitize_label_name("app.kubernetes.io/name"), "app_kubernetes_io_name");
        assert_eq!(sanitize_label_name("a-b_c9"), "a_b_c9");
        // One underscore per character, not per UTF-8 byte.
        assert_eq!(sanitize_label_name("é/x"), "__x");
    }

    #[test]
    fn pod_targets_and_labels() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "vllm-0", "namespace": "inference", "uid": "u-1",
                "labels": {"app.kubernetes.io/name": "vllm"},
                "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8000"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "x"},
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm", "uid": "y", "controller": true}]},
            "spec": {"nodeName": "gpu-1",
                "containers": [
                    {"name": "engine", "image": "vllm/vllm-openai:v0.17.0", "ports": [
                        {"containerPort": 8000, "name": "http"},
                        {"containerPort": 9000, "protocol": "UDP"}]},
                    {"name": "sidecar"}],
                "initContainers": [{"name": "warm", "image": "busybox"}]},
            "status": {"phase": "Running", "podIP": "10.1.2.3", "hostIP": "192.168.0.5",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "engine", "containerID": "containerd://abc", "image": "", "imageID": "", "ready": true, "restartCount": 0}]}
        }));
        let g = build_pod(&p);
        assert_eq!(g.len(), 4);
        assert_eq!(g[0].targets, ["10.1.2.3:8000"]);
        assert_eq!(g[1].targets, ["10.1.2.3:9000"]);
        assert_eq!(g[2].targets, ["10.1.2.3"]);
        assert_eq!(g[3].targets, ["10.1.2.3"]);
        let l = &g[0].labels;
        let want = [
            ("__meta_kubernetes_namespace", "inference"),
            ("__meta_kubernetes_pod_name", "vllm-0"),
            ("__meta_kubernetes_pod_uid", "u-1"),
            ("__meta_kubernetes_pod_ip", "10.1.2.3"),
            ("__meta_kubernetes_pod_host_ip", "192.168.0.5"),
            ("__meta_kubernetes_pod_node_name", "gpu-1"),
            ("__meta_kubernetes_pod_phase", "Running"),
            ("__meta_kubernetes_pod_ready", "true"),
            ("__meta_kubernetes_pod_controller_kind", "StatefulSet"),
            ("__meta_kubernetes_pod_controller_name", "vllm"),
            ("__meta_kubernetes_pod_label_app_kubernetes_io_name", "vllm"),
            ("__meta_kubernetes_pod_labelpresent_app_kubernetes_io_name", "true"),
            ("__meta_kubernetes_pod_annotation_prometheus_io_scrape", "true"),
            ("__meta_kubernetes_pod_annotationpresent_prometheus_io_port", "true"),
            ("__meta_kubernetes_pod_container_name", "engine"),
            ("__meta_kubernetes_pod_container_id", "containerd://abc"),
            ("__meta_kubernetes_pod_container_image", "vllm/vllm-openai:v0.17.0"),
            ("__meta_kubernetes_pod_container_init", "false"),
            ("__meta_kubernetes_pod_container_port_number", "8000"),
            ("__meta_kubernetes_pod_container_port_name", "http"),
            ("__meta_kubernetes_pod_container_port_protocol", "TCP"),
        ];
        for (k, v) in want {
            assert_eq!(l.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert_eq!(g[1].labels["__meta_kubernetes_pod_container_port_protocol"], "UDP");
        assert_eq!(g[1].labels["__meta_kubernetes_pod_container_port_name"], "");
        assert!(!g[2].labels.contains_key("__meta_kubernetes_pod_container_port_number"));
        assert_eq!(g[3].labels["__meta_kubernetes_pod_container_init"], "true");
        assert_eq!(g[3].labels["__meta_kubernetes_pod_container_name"], "warm");
    }

    #[test]
    fn pod_without_ip_or_ready_condition() {
        let pending = pod(
            serde_json::json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}}),
        );
        assert!(build_pod(&pending).is_empty());
        let ipv6 = pod(serde_json::json!({"metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}, "status": {"podIP": "fd00::1"}}));
        let g = build_pod(&ipv6);
        assert_eq!(g[0].targets, ["[fd00::1]:80"]);
        assert_eq!(g[0].labels["__meta_kubernetes_pod_ready"], "unknown");
        assert!(!g[0].labels.contains_key("__meta_kubernetes_pod_controller_kind"));
    }

    #[test]
    fn node_target() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true"}},
            "spec": {"providerID": "aws:///eu-west-1a/i-1"},
            "status": {"addresses": [{"type": "Hostname", "address": "gpu-1"}, {"type": "InternalIP", "address": "10.0.0.7"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}
        }))
        .unwrap();
        let g = build_node(&n);
        assert_eq!(g[0].targets, ["10.0.0.7:10250"]);
        assert_eq!(g[0].labels["instance"], "gpu-1");
        assert_eq!(g[0].labels["__meta_kubernetes_node_label_nvidia_com_gpu_present"], "true");
        assert_eq!(g[0].labels["__meta_kubernetes_node_address_InternalIP"], "10.0.0.7");
        assert_eq!(g[0].labels["__meta_kubernetes_node_provider_id"], "aws:///eu-west-1a/i-1");
    }

    #[test]
    fn validation() {
        let parse = |y: &str| serde_yaml::from_str::<KubernetesSdConfig>(y).unwrap();
        assert!(parse("role: pod\nselectors: [{role: pod, field: spec.nodeName=n}]").validate().is_ok());
        assert!(parse("role: endpointslice").validate().unwrap_err().contains("not supported yet"));
        assert!(parse("role: pod\nselectors: [{role: node, label: a=b}]").validate().unwrap_err().contains("only"));
        assert!(parse("role: pod\napi_server: https://k\nkubeconfig_file: /k").validate().is_err());
        assert!(parse("role: pod\nbearer_token_file: /t").validate().unwrap_err().contains("need api_server"));
        assert!(serde_yaml::from_str::<KubernetesSdConfig>("role: pods").is_err());
        let e =
            serde_yaml::from_str::<KubernetesSdConfig>("role: pod\napi_server: https://k\ntls_config: {cert_file: /c}")
                .unwrap_err()
                .to_string();
        assert!(e.contains("cert_file"), "{e}");
    }
}
