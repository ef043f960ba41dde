//! `kubernetes_sd_configs`: targets from the Kubernetes API, as Prometheus
//! 2.42's `discovery/kubernetes` produces them, every role: `pod` and `node`
//! (`pod.rs`), `service` and `ingress` (`service.rs`), `endpoints` and
//! `endpointslice` (`endpoints.rs`, joined with services, pods and, with
//! `attach_metadata: {node: true}`, nodes).
//!
//! - **Objects, then targets**: watchers keep the objects a role needs
//!   (for `endpoints`: endpoints, services and pods) in stores; the targets
//!   are built from the stores when asked, once every store has listed, so a
//!   change to a service or a pod shows on its endpoints' targets at once
//!   and no target appears half-labelled before the pods are known.
//! - **Watch, not poll**: one `kube` watcher per namespace and kind (list, then watch
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
use crate::primitives::Duration;
use crate::telemetry::Counter;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, watch as tokio_watch};

mod endpoints;
mod meta;
mod pod;
mod service;

pub use endpoints::{Related, build_endpoints, build_endpointslice};
pub use meta::sanitize_label_name;
pub use pod::{build_node, build_pod};
pub use service::{build_ingress, build_service};

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
    /// With `api_server`: the HTTP client keys Prometheus takes here.
    pub bearer_token: Option<String>,
    pub basic_auth: Option<crate::receivers::prometheus::config::BasicAuth>,
    pub authorization: Option<crate::receivers::prometheus::config::Authorization>,
    pub proxy_url: Option<String>,
    /// Accepted, without effect on the API client (warned when set).
    pub follow_redirects: Option<bool>,
    pub enable_http2: Option<bool>,
    /// With `api_server`: how to verify it, and the client certificate.
    #[serde(default)]
    pub tls_config: ApiServerTls,
    /// Re-list everything this often, replacing the known set (infertel extension).
    #[serde(default = "default_resync")]
    pub resync_interval: Duration,
    /// `{node: true}`: the node's name and labels on pod, endpoints and
    /// endpointslice targets.
    #[serde(default)]
    pub attach_metadata: AttachMetadata,
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct AttachMetadata {
    #[serde(default)]
    pub node: bool,
}

fn default_resync() -> Duration {
    Duration::from_secs(600)
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct ApiServerTls {
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Accepted (rustls speaks TLS 1.2 and 1.3 to the API server).
    pub min_version: Option<String>,
    pub max_version: Option<String>,
    pub server_name: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

impl KubernetesSdConfig {
    /// The selector roles each role takes, as Prometheus' `kubernetes.go`
    /// (and, as Prometheus 3.11, `node` on role `pod`, filtering the nodes
    /// `attach_metadata` reads).
    fn selector_roles(&self) -> &'static [&'static str] {
        match self.role {
            Role::Pod => &["pod", "node"],
            Role::Node => &["node"],
            Role::Service => &["service"],
            Role::Ingress => &["ingress"],
            Role::Endpoints => &["pod", "service", "endpoints"],
            Role::Endpointslice => &["pod", "service", "endpointslice"],
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.api_server.is_some() && self.kubeconfig_file.is_some() {
            return Err("kubernetes_sd_configs: at most one of api_server and kubeconfig_file may be set".into());
        }
        let client_keys = self.bearer_token_file.is_some()
            || self.bearer_token.is_some()
            || self.basic_auth.is_some()
            || self.authorization.is_some()
            || self.proxy_url.is_some()
            || self.tls_config.ca_file.is_some()
            || self.tls_config.cert_file.is_some();
        if self.api_server.is_none() && client_keys {
            return Err("kubernetes_sd_configs: to use custom HTTP client configuration (bearer_token[_file], basic_auth, authorization, proxy_url, tls_config) please provide the 'api_server' URL explicitly (in-cluster and kubeconfig bring their own)".into());
        }
        let auths = [
            self.basic_auth.is_some(),
            self.authorization.is_some(),
            self.bearer_token.is_some() || self.bearer_token_file.is_some(),
        ];
        if auths.iter().filter(|a| **a).count() > 1 {
            return Err(
                "kubernetes_sd_configs: at most one of basic_auth, authorization and bearer_token[_file] may be set"
                    .into(),
            );
        }
        if let Some(a) = &self.authorization
            && !a.kind.eq_ignore_ascii_case("bearer")
        {
            return Err(format!(
                "kubernetes_sd_configs: authorization type {:?}: the API client sends Bearer credentials only",
                a.kind
            ));
        }
        if self.tls_config.cert_file.is_some() != self.tls_config.key_file.is_some() {
            return Err("kubernetes_sd_configs: tls_config: cert_file and key_file go together".into());
        }
        if let Some(s) = &self.api_server {
            let u = url::Url::parse(s).map_err(|e| format!("kubernetes_sd_configs: api_server {s:?}: {e}"))?;
            if u.scheme() != "http" && u.scheme() != "https" {
                return Err(format!("kubernetes_sd_configs: api_server {s:?}: scheme must be http or https"));
            }
        }
        let mut seen = Vec::new();
        for sel in &self.selectors {
            if seen.contains(&sel.role.name()) {
                return Err(format!("kubernetes_sd_configs: duplicated selector role: {}", sel.role.name()));
            }
            seen.push(sel.role.name());
            let allowed = self.selector_roles();
            if !allowed.contains(&sel.role.name()) {
                return Err(format!(
                    "kubernetes_sd_configs: {} role supports only {} selectors",
                    self.role.name(),
                    allowed.join(", ")
                ));
            }
        }
        if self.attach_metadata.node && !matches!(self.role, Role::Pod | Role::Endpoints | Role::Endpointslice) {
            return Err(format!(
                "kubernetes_sd_configs: attach_metadata.node applies to roles pod, endpoints and endpointslice, not {}",
                self.role.name()
            ));
        }
        if self.resync_interval.get().is_zero() {
            return Err("kubernetes_sd_configs: resync_interval must be greater than 0".into());
        }
        Ok(())
    }

    /// Keys accepted without effect, as (key, why).
    pub fn warnings(&self) -> Vec<(&'static str, String)> {
        let mut w = Vec::new();
        if self.role == Role::Pod && !self.attach_metadata.node && self.selectors.iter().any(|s| s.role == Role::Node) {
            w.push(("selectors", "a node selector on role pod filters only the nodes attach_metadata: {node: true} reads; without it, it has no effect (to select the pods of a node: a pod selector with field: spec.nodeName=...)".to_string()));
        }
        for (k, set) in [
            ("follow_redirects", self.follow_redirects.is_some()),
            ("enable_http2", self.enable_http2.is_some()),
            ("tls_config.min_version", self.tls_config.min_version.is_some() || self.tls_config.max_version.is_some()),
        ] {
            if set {
                w.push((k, format!("{k} has no effect on the Kubernetes API client")));
            }
        }
        w
    }

    /// The list/watch options for objects of `kind` (a selector role name).
    fn watch_config(&self, kind: &str) -> watcher::Config {
        let sel = self.selectors.iter().find(|s| s.role.name() == kind);
        watcher::Config {
            label_selector: sel.and_then(|s| s.label.clone()).filter(|s| !s.is_empty()),
            field_selector: sel.and_then(|s| s.field.clone()).filter(|s| !s.is_empty()),
            ..Default::default()
        }
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
        c.auth_info.token = cfg.bearer_token.clone().map(Into::into);
        if let Some(a) = &cfg.authorization {
            c.auth_info.token = a.credentials.clone().map(Into::into);
            c.auth_info.token_file = a.credentials_file.as_ref().map(|p| p.display().to_string());
        }
        if let Some(b) = &cfg.basic_auth {
            c.auth_info.username = Some(b.username.clone());
            let password = match (&b.password, &b.password_file) {
                (Some(p), _) => p.clone(),
                (None, Some(f)) => crate::http::read_secret_file(f, "basic_auth.password_file")?,
                (None, None) => String::new(),
            };
            c.auth_info.password = Some(password.into());
        }
        c.auth_info.client_certificate = cfg.tls_config.cert_file.as_ref().map(|p| p.display().to_string());
        c.auth_info.client_key = cfg.tls_config.key_file.as_ref().map(|p| p.display().to_string());
        if let Some(p) = &cfg.proxy_url {
            c.proxy_url = Some(p.parse().map_err(|e| format!("proxy_url {p:?}: {e}"))?);
        }
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

/// One kind's objects, by `namespace/name` (`/name` for nodes), per
/// watched namespace (`""` for all), and whether every watcher has listed.
struct Store<K> {
    objects: Mutex<BTreeMap<String, BTreeMap<String, Arc<K>>>>,
    /// Watchers that have not completed their first list yet.
    unlisted: std::sync::atomic::AtomicUsize,
}

impl<K> Store<K> {
    fn new(watchers: usize) -> Arc<Store<K>> {
        Arc::new(Store { objects: Mutex::default(), unlisted: watchers.into() })
    }

    fn listed(&self) -> bool {
        self.unlisted.load(std::sync::atomic::Ordering::Acquire) == 0
    }

    fn update(&self, ns_key: &str, f: impl FnOnce(&mut BTreeMap<String, Arc<K>>)) {
        let mut st = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        f(st.entry(ns_key.to_string()).or_default());
    }

    /// Every object now (shared, not copied).
    fn all(&self) -> BTreeMap<String, Arc<K>> {
        let st = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        st.values().flat_map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone()))).collect()
    }
}

/// The stores a role reads; `None` where the role needs no such objects.
#[derive(Default)]
struct Stores {
    pods: Option<Arc<Store<Pod>>>,
    nodes: Option<Arc<Store<Node>>>,
    services: Option<Arc<Store<Service>>>,
    endpoints: Option<Arc<Store<Endpoints>>>,
    slices: Option<Arc<Store<EndpointSlice>>>,
    ingresses: Option<Arc<Store<Ingress>>>,
}

impl Stores {
    fn for_role(cfg: &KubernetesSdConfig, namespaces: usize) -> Stores {
        let n = Some(namespaces);
        let (pods, services, endpoints, slices, ingresses) = match cfg.role {
            Role::Pod => (n, None, None, None, None),
            Role::Node => (None, None, None, None, None),
            Role::Service => (None, n, None, None, None),
            Role::Ingress => (None, None, None, None, n),
            Role::Endpoints => (n, n, n, None, None),
            Role::Endpointslice => (n, n, None, n, None),
        };
        let nodes = (cfg.role == Role::Node || cfg.attach_metadata.node).then_some(1);
        Stores {
            pods: pods.map(Store::new),
            nodes: nodes.map(Store::new),
            services: services.map(Store::new),
            endpoints: endpoints.map(Store::new),
            slices: slices.map(Store::new),
            ingresses: ingresses.map(Store::new),
        }
    }

    fn listed(&self) -> bool {
        self.pods.as_ref().is_none_or(|s| s.listed())
            && self.nodes.as_ref().is_none_or(|s| s.listed())
            && self.services.as_ref().is_none_or(|s| s.listed())
            && self.endpoints.as_ref().is_none_or(|s| s.listed())
            && self.slices.as_ref().is_none_or(|s| s.listed())
            && self.ingresses.as_ref().is_none_or(|s| s.listed())
    }

    /// The role's target groups from the objects known now; none before
    /// every store has listed.
    fn groups(&self, role: &Role) -> Vec<TargetGroup> {
        if !self.listed() {
            return Vec::new();
        }
        fn all<K>(s: &Option<Arc<Store<K>>>) -> BTreeMap<String, Arc<K>> {
            s.as_ref().map(|s| s.all()).unwrap_or_default()
        }
        let nodes = self.nodes.as_ref().map(|s| s.all());
        match role {
            Role::Pod => all(&self.pods).values().flat_map(|p| build_pod(p, nodes.as_ref())).collect(),
            Role::Node => nodes.unwrap_or_default().values().flat_map(|n| build_node(n)).collect(),
            Role::Service => all(&self.services).values().flat_map(|s| build_service(s)).collect(),
            Role::Ingress => all(&self.ingresses).values().flat_map(|i| build_ingress(i)).collect(),
            Role::Endpoints | Role::Endpointslice => {
                let (services, pods) = (all(&self.services), all(&self.pods));
                let rel = Related { services: &services, pods: &pods, nodes: nodes.as_ref() };
                if *role == Role::Endpoints {
                    all(&self.endpoints).values().flat_map(|e| build_endpoints(e, &rel)).collect()
                } else {
                    all(&self.slices).values().flat_map(|e| build_endpointslice(e, &rel)).collect()
                }
            }
        }
    }
}

/// One SD config's live target groups, kept up to date by background watchers.
pub struct KubernetesDiscovery {
    role: Role,
    stores: Arc<std::sync::OnceLock<Stores>>,
    handle: tokio::task::JoinHandle<()>,
}

impl KubernetesDiscovery {
    /// Starts discovery; `changed` is notified whenever the objects change.
    pub fn spawn(
        cfg: KubernetesSdConfig,
        index: usize,
        job: String,
        changed: Arc<Notify>,
        errors: Arc<Counter>,
        stop: tokio_watch::Receiver<bool>,
    ) -> KubernetesDiscovery {
        let stores: Arc<std::sync::OnceLock<Stores>> = Arc::default();
        let (role, st) = (cfg.role.clone(), stores.clone());
        let handle = tokio::spawn(async move { run(cfg, index, job, st, changed, errors, stop).await });
        KubernetesDiscovery { role, stores, handle }
    }

    /// Every group known now, in a stable order.
    pub fn groups(&self) -> Vec<TargetGroup> {
        self.stores.get().map(|s| s.groups(&self.role)).unwrap_or_default()
    }

    pub async fn join(self) {
        let _ = self.handle.await;
    }
}

/// What every watcher of one SD config shares.
#[derive(Clone)]
struct WatchContext {
    client: Client,
    changed: Arc<Notify>,
    errors: Arc<Counter>,
    stop: tokio_watch::Receiver<bool>,
    job: String,
    resync: std::time::Duration,
}

impl WatchContext {
    /// One watcher per namespace for objects of `K`, into `store`.
    fn watch_all<K>(
        &self,
        store: &Arc<Store<K>>,
        namespaces: &[Option<String>],
        wc: watcher::Config,
    ) -> Vec<tokio::task::JoinHandle<()>>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default,
    {
        namespaces
            .iter()
            .map(|ns| {
                let api: Api<K> = match ns {
                    Some(n) => Api::namespaced(self.client.clone(), n),
                    None => Api::all(self.client.clone()),
                };
                let key = ns.clone().unwrap_or_default();
                tokio::spawn(watch_loop(api, wc.clone(), key, store.clone(), self.clone()))
            })
            .collect()
    }
}

async fn run(
    cfg: KubernetesSdConfig,
    index: usize,
    job: String,
    stores: Arc<std::sync::OnceLock<Stores>>,
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
    if namespaces.is_empty() {
        namespaces = vec![None];
    }
    namespaces.sort();
    namespaces.dedup();
    let st = Stores::for_role(&cfg, namespaces.len());
    let ctx = WatchContext { client, changed, errors, stop, job: job.clone(), resync: cfg.resync_interval.get() };
    let mut tasks = Vec::new();
    if let Some(s) = &st.nodes {
        let api: Api<Node> = Api::all(ctx.client.clone());
        tasks.push(tokio::spawn(watch_loop(api, cfg.watch_config("node"), String::new(), s.clone(), ctx.clone())));
    }
    if let Some(s) = &st.pods {
        tasks.extend(ctx.watch_all(s, &namespaces, cfg.watch_config("pod")));
    }
    if let Some(s) = &st.services {
        tasks.extend(ctx.watch_all(s, &namespaces, cfg.watch_config("service")));
    }
    if let Some(s) = &st.endpoints {
        tasks.extend(ctx.watch_all(s, &namespaces, cfg.watch_config("endpoints")));
    }
    if let Some(s) = &st.slices {
        tasks.extend(ctx.watch_all(s, &namespaces, cfg.watch_config("endpointslice")));
    }
    if let Some(s) = &st.ingresses {
        tasks.extend(ctx.watch_all(s, &namespaces, cfg.watch_config("ingress")));
    }
    tracing::info!(
        job = %job, role, namespaces = ?namespaces, selectors = ?cfg.selectors, attach_node = cfg.attach_metadata.node,
        "kubernetes discovery: watching"
    );
    let _ = stores.set(st);
    for t in tasks {
        let _ = t.await;
    }
}

async fn watch_loop<K>(api: Api<K>, wc: watcher::Config, ns_key: String, store: Arc<Store<K>>, mut ctx: WatchContext)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let kind = std::any::type_name::<K>().rsplit("::").next().unwrap_or("object");
    let obj_key = |o: &K| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
    let mut first_list = true;
    loop {
        // Each pass lists afresh; the previous pass's set stays in force until
        // the new list completes (InitDone), then is replaced whole.
        let mut stream = watcher::watcher(api.clone(), wc.clone()).default_backoff().boxed();
        let deadline = tokio::time::sleep(ctx.resync);
        tokio::pin!(deadline);
        let mut buffer: Option<BTreeMap<String, Arc<K>>> = None;
        loop {
            tokio::select! {
                _ = ctx.stop.changed() => return,
                _ = &mut deadline => {
                    tracing::debug!(job = %ctx.job, "kubernetes discovery: resync");
                    break;
                }
                ev = stream.next() => {
                    match ev {
                        Some(Ok(Event::Init)) => buffer = Some(BTreeMap::new()),
                        Some(Ok(Event::InitApply(o))) => {
                            buffer.get_or_insert_with(BTreeMap::new).insert(obj_key(&o), Arc::new(o));
                            continue;
                        }
                        Some(Ok(Event::InitDone)) => {
                            let listed = buffer.take().unwrap_or_default();
                            tracing::info!(job = %ctx.job, "kubernetes discovery: listed {} {kind} objects", listed.len());
                            store.update(&ns_key, |m| *m = listed);
                            if std::mem::take(&mut first_list) {
                                store.unlisted.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                            }
                        }
                        Some(Ok(Event::Apply(o))) => {
                            let k = obj_key(&o);
                            store.update(&ns_key, |m| {
                                m.insert(k, Arc::new(o));
                            });
                        }
                        Some(Ok(Event::Delete(o))) => {
                            let k = obj_key(&o);
                            store.update(&ns_key, |m| {
                                m.remove(&k);
                            });
                        }
                        Some(Err(e)) => {
                            ctx.errors.inc();
                            tracing::warn!(job = %ctx.job, "kubernetes discovery ({kind}): {e} (keeping the known targets; retrying with backoff)");
                            continue;
                        }
                        None => break,
                    }
                    ctx.changed.notify_one();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        let parse = |y: &str| serde_yaml::from_str::<KubernetesSdConfig>(y).unwrap();
        assert!(parse("role: pod\nselectors: [{role: pod, field: spec.nodeName=n}]").validate().is_ok());
        assert!(parse("role: endpointslice").validate().is_ok());
        let e = parse("role: endpoints\nselectors: [{role: node, label: a=b}]").validate().unwrap_err();
        assert!(e.contains("endpoints role supports only pod, service, endpoints selectors"), "{e}");
        let e = parse("role: pod\nselectors: [{role: pod, label: a=b}, {role: pod}]").validate().unwrap_err();
        assert!(e.contains("duplicated selector role: pod"), "{e}");
        let no_effect = parse("role: pod\nselectors: [{role: node, label: a=b}]");
        assert!(no_effect.validate().is_ok(), "accepted, as Prometheus 3 accepts it");
        assert!(no_effect.warnings()[0].1.contains("no effect"), "and warned");
        assert!(
            parse("role: pod\nattach_metadata: {node: true}\nselectors: [{role: node, label: a=b}]").validate().is_ok()
        );
        assert!(
            parse("role: service\nattach_metadata: {node: true}").validate().unwrap_err().contains("applies to roles")
        );
        assert!(
            parse("role: endpoints\nselectors: [{role: service, label: a=b}, {role: pod, field: spec.nodeName=n}]")
                .validate()
                .is_ok()
        );
        assert!(parse("role: pod\napi_server: https://k\nkubeconfig_file: /k").validate().is_err());
        assert!(parse("role: pod\nbearer_token_file: /t").validate().unwrap_err().contains("provide the 'api_server'"));
        assert!(
            parse("role: pod\napi_server: https://k\nbasic_auth: {username: u, password: p}\nbearer_token: t")
                .validate()
                .unwrap_err()
                .contains("at most one")
        );
        assert!(
            parse("role: pod\napi_server: https://k\ntls_config: {cert_file: /c}")
                .validate()
                .unwrap_err()
                .contains("go together")
        );
        assert!(serde_yaml::from_str::<KubernetesSdConfig>("role: pods").is_err());
        let e =
            serde_yaml::from_str::<KubernetesSdConfig>("role: pod\napi_server: https://k\ntls_config: {crt_file: /c}")
                .unwrap_err()
                .to_string();
        assert!(e.contains("crt_file"), "{e}");
    }
}
