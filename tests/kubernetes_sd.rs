//! End to end: `kubernetes_sd_configs` against a stub Kubernetes API server
//! that serves pod LIST and chunked WATCH streams the way the real one does
//! (resourceVersions, `410 Gone` once history is compacted, streams that
//! end). The real binary finds the stub through a kubeconfig, scrapes the
//! pods the standard `prometheus.io/*` recipe keeps, and remote-writes into
//! a real Prometheus; the test checks there that targets appear with the
//! exact `__meta_kubernetes_pod_*`-derived labels, and that their series go
//! stale when a pod is modified, deleted, deleted during a watch outage, or
//! silently vanishes (caught by the periodic resync).

mod support;

use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

#[derive(Default)]
struct State {
    rv: u64,
    /// (resource, namespace, name) → object
    objects: BTreeMap<(String, String, String), Value>,
    /// (resourceVersion, type, object)
    events: Vec<(u64, &'static str, Value)>,
    /// Watches from a resourceVersion below this get `410 Gone`.
    compacted: u64,
    /// Bumped to end every open watch stream.
    generation: u64,
    /// (kind, path, query, authorization)
    requests: Vec<(String, String, HashMap<String, String>, String)>,
    gone_answers: u64,
}

/// A stub API server: LIST and WATCH of pods, nodes, services, endpoints,
/// endpointslices and ingresses, field and label selectors.
struct StubApi {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    wake: tokio::sync::broadcast::Sender<()>,
    _rt: std::thread::JoinHandle<()>,
}

fn matches(pod: &Value, q: &HashMap<String, String>, ns: Option<&str>) -> bool {
    if let Some(ns) = ns
        && pod["metadata"]["namespace"] != ns
    {
        return false;
    }
    for term in q.get("fieldSelector").map(|s| s.as_str()).unwrap_or("").split(',').filter(|t| !t.is_empty()) {
        let (k, v) = term.split_once('=').expect("field selector k=v");
        let got = match k {
            "spec.nodeName" => pod["spec"]["nodeName"].as_str(),
            "metadata.name" => pod["metadata"]["name"].as_str(),
            "metadata.namespace" => pod["metadata"]["namespace"].as_str(),
            other => panic!("stub: unsupported field selector {other}"),
        };
        if got.unwrap_or("") != v {
            return false;
        }
    }
    for term in q.get("labelSelector").map(|s| s.as_str()).unwrap_or("").split(',').filter(|t| !t.is_empty()) {
        let (k, v) = term.split_once('=').expect("label selector k=v");
        if pod["metadata"]["labels"][k].as_str() != Some(v) {
            return false;
        }
    }
    true
}

impl StubApi {
    fn start() -> StubApi {
        let state: Arc<Mutex<State>> = Arc::default();
        let (wake, _) = tokio::sync::broadcast::channel(1024);
        let l = TcpListener::bind("127.0.0.1:0").expect("bind stub api");
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let (st, wk) = (state.clone(), wake.clone());
        let rt = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(l).unwrap();
                let app = axum::Router::new().fallback(
                    move |uri: axum::http::Uri,
                          headers: axum::http::HeaderMap,
                          axum::extract::Query(q): axum::extract::Query<HashMap<String, String>>| {
                        let (st, wk) = (st.clone(), wk.clone());
                        async move { serve(st, wk, uri.path().to_string(), headers, q).await }
                    },
                );
                let _ = axum::serve(listener, app).await;
            });
        });
        StubApi { addr, state, wake, _rt: rt }
    }

    fn record(&self, kind: &'static str, mut obj: Value) {
        let mut s = self.state.lock().unwrap();
        s.rv += 1;
        let rv = s.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = key_of(&obj);
        if kind == "DELETED" {
            s.objects.remove(&key);
        } else {
            s.objects.insert(key, obj.clone());
        }
        s.events.push((rv, kind, obj));
        drop(s);
        let _ = self.wake.send(());
    }

    fn add(&self, obj: Value) {
        self.record("ADDED", obj);
    }

    fn modify(&self, ns: &str, name: &str, f: impl FnOnce(&mut Value)) {
        self.modify_in("pods", ns, name, f)
    }

    fn modify_in(&self, resource: &str, ns: &str, name: &str, f: impl FnOnce(&mut Value)) {
        let mut obj =
            self.state.lock().unwrap().objects[&(resource.to_string(), ns.to_string(), name.to_string())].clone();
        f(&mut obj);
        self.record("MODIFIED", obj);
    }

    fn delete(&self, ns: &str, name: &str) {
        let pod = self.state.lock().unwrap().objects[&("pods".to_string(), ns.to_string(), name.to_string())].clone();
        self.record("DELETED", pod);
    }

    /// Ends every open watch; with `compact`, the history up to now is gone,
    /// so resuming from any version seen so far answers `410 Gone`.
    fn drop_watches(&self, compact: bool) {
        let mut s = self.state.lock().unwrap();
        s.generation += 1;
        if compact {
            s.compacted = s.rv + 1;
        }
        drop(s);
        let _ = self.wake.send(());
    }

    /// Removes a pod from the store without any watch event (a lost event).
    fn vanish(&self, ns: &str, name: &str) {
        let mut s = self.state.lock().unwrap();
        s.objects.remove(&("pods".to_string(), ns.to_string(), name.to_string()));
        s.rv += 1;
    }

    fn requests(&self, kind: &str) -> Vec<(String, HashMap<String, String>, String)> {
        self.state
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|r| r.0 == kind)
            .map(|r| (r.1.clone(), r.2.clone(), r.3.clone()))
            .collect()
    }

    fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let p = dir.join("kubeconfig");
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: stub\n  cluster: {{server: 'http://{}'}}\nusers:\n- name: agent\n  user: {{token: stub-token}}\n\
                 contexts:\n- name: stub\n  context: {{cluster: stub, user: agent, namespace: inference}}\ncurrent-context: stub\n",
                self.addr
            ),
        )
        .unwrap();
        p
    }
}

/// The API resource an object is served under.
fn resource_of(obj: &Value) -> String {
    match obj["kind"].as_str().expect("stub objects have a kind") {
        "Pod" => "pods",
        "Node" => "nodes",
        "Service" => "services",
        "Endpoints" => "endpoints",
        "EndpointSlice" => "endpointslices",
        "Ingress" => "ingresses",
        k => panic!("stub: unknown kind {k}"),
    }
    .to_string()
}

fn key_of(obj: &Value) -> (String, String, String) {
    (
        resource_of(obj),
        obj["metadata"]["namespace"].as_str().unwrap_or("").to_string(),
        obj["metadata"]["name"].as_str().unwrap().to_string(),
    )
}

async fn serve(
    st: Arc<Mutex<State>>,
    wake: tokio::sync::broadcast::Sender<()>,
    path: String,
    headers: axum::http::HeaderMap,
    q: HashMap<String, String>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (ns, resource) = match path.split('/').collect::<Vec<_>>()[..] {
        ["", "api", "v1", r] => (None, r.to_string()),
        ["", "api", "v1", "namespaces", ns, r] => (Some(ns.to_string()), r.to_string()),
        ["", "apis", "discovery.k8s.io", "v1", r] | ["", "apis", "networking.k8s.io", "v1", r] => (None, r.to_string()),
        ["", "apis", "discovery.k8s.io", "v1", "namespaces", ns, r]
        | ["", "apis", "networking.k8s.io", "v1", "namespaces", ns, r] => (Some(ns.to_string()), r.to_string()),
        _ => return (axum::http::StatusCode::NOT_FOUND, "stub: unknown path").into_response(),
    };
    let of_resource = move |o: &Value| resource_of(o) == resource;
    let watch = matches!(q.get("watch").map(|s| s.as_str()), Some("true" | "1"));
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    st.lock().unwrap().requests.push((if watch { "watch" } else { "list" }.into(), path.clone(), q.clone(), auth));
    if !watch {
        let s = st.lock().unwrap();
        let items: Vec<Value> =
            s.objects.values().filter(|p| of_resource(p) && matches(p, &q, ns.as_deref())).cloned().collect();
        let body = json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": s.rv.to_string()}, "items": items});
        return ([("content-type", "application/json")], body.to_string()).into_response();
    }
    let from: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::convert::Infallible>>(64);
    let mut woken = wake.subscribe();
    tokio::spawn(async move {
        let (generation, gone) = {
            let mut s = st.lock().unwrap();
            let gone = from < s.compacted;
            if gone {
                s.gone_answers += 1;
            }
            (s.generation, gone)
        };
        if gone {
            let status = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {from}"), "reason": "Expired", "code": 410}});
            let _ = tx.send(Ok(format!("{status}\n").into())).await;
            return;
        }
        let mut sent = from;
        loop {
            let (lines, ended) = {
                let s = st.lock().unwrap();
                let lines: Vec<String> = s
                    .events
                    .iter()
                    .filter(|(rv, _, o)| *rv > sent && of_resource(o) && matches(o, &q, ns.as_deref()))
                    .map(|(_, t, o)| json!({"type": t, "object": o}).to_string() + "\n")
                    .collect();
                sent = s.rv;
                (lines, s.generation != generation)
            };
            if ended {
                return; // the chunked stream ends: a dropped watch
            }
            for l in lines {
                if tx.send(Ok(l.into())).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                _ = woken.recv() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    });
    let body = axum::body::Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (c, rx))
    }));
    ([("content-type", "application/json")], body).into_response()
}

fn pod(name: &str, node: &str, scrape_port: Option<u16>, path: &str) -> Value {
    let mut annotations = json!({});
    if let Some(p) = scrape_port {
        annotations =
            json!({"prometheus.io/scrape": "true", "prometheus.io/port": p.to_string(), "prometheus.io/path": path});
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "inference", "uid": format!("uid-{name}"),
            "labels": {"app.kubernetes.io/name": "vllm"}, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm", "uid": "ss-1", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.17.0",
            "ports": [{"containerPort": 8000, "name": "http", "protocol": "TCP"}]}]},
        "status": {"phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

fn config(kubeconfig: &std::path::Path, sd_extra: &str, write_url: &str) -> String {
    format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
        - job_name: kubernetes-pods
          kubernetes_sd_configs:
            - role: pod
              kubeconfig_file: {kc}
              selectors:
                - role: pod
                  field: spec.nodeName=${{env:K8S_NODE_NAME}}
{sd_extra}
          relabel_configs:
            - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
              action: keep
              regex: "true"
            - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
              action: replace
              target_label: __metrics_path__
              regex: (.+)
            - source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port]
              action: replace
              regex: ([^:]+)(?::\d+)?;(\d+)
              replacement: $1:$2
              target_label: __address__
            - action: labelmap
              regex: __meta_kubernetes_pod_label_(.+)
            - source_labels: [__meta_kubernetes_namespace]
              target_label: namespace
            - source_labels: [__meta_kubernetes_pod_name]
              target_label: pod
            - action: labelmap
              regex: __meta_kubernetes_pod_(node_name|ip|container_name|container_port_number|container_port_name|phase|ready|uid|controller_kind|controller_name|labelpresent_.+|annotationpresent_.+)
              replacement: k8s_$1
processors:
  batch: {{timeout: 100ms}}
exporters:
  prometheusremotewrite:
    endpoint: {write_url}
service:
  pipelines:
    metrics: {{receivers: [prometheus], processors: [batch], exporters: [prometheusremotewrite]}}
  telemetry:
    metrics: {{address: "{{{{TELEMETRY}}}}"}}
"#,
        kc = kubeconfig.display()
    )
}

const BODY: &str = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n";

fn present(prom: &Prometheus, q: &str) -> bool {
    !prom.query(q).is_empty()
}

#[test]
fn pods_come_and_go_with_list_and_watch() {
    let targets = Targets::start();
    for p in ["/a", "/b", "/c", "/d", "/x"] {
        targets.set(p, TEXT_004, BODY);
    }
    let port = targets.addr.port();
    let api = StubApi::start();
    api.add(pod("vllm-a", "gpu-node-1", Some(port), "/a"));
    api.add(pod("elsewhere", "gpu-node-2", Some(port), "/x"));
    api.add(pod("no-scrape", "gpu-node-1", None, "/x"));
    let prom = Prometheus::start("");
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let cfg = config(&kc, "              namespaces: {names: [inference]}", &prom.write_url());
    let agent = Agent::start_with_env(&cfg, &[("K8S_NODE_NAME", "gpu-node-1")]);
    let t = Duration::from_secs(30);

    // 1. The initial LIST: vllm-a is scraped with every label the recipe maps.
    let got = wait_until("vllm-a scraped", t, || {
        let r = prom.query("up{pod=\"vllm-a\"}");
        (!r.is_empty()).then_some(r)
    });
    let instance = format!("127.0.0.1:{port}");
    let want: BTreeMap<String, String> = [
        ("__name__", "up"),
        ("job", "kubernetes-pods"),
        ("instance", instance.as_str()),
        ("namespace", "inference"),
        ("pod", "vllm-a"),
        ("app_kubernetes_io_name", "vllm"),
        ("k8s_node_name", "gpu-node-1"),
        ("k8s_ip", "127.0.0.1"),
        ("k8s_container_name", "engine"),
        ("k8s_container_port_number", "8000"),
        ("k8s_container_port_name", "http"),
        ("k8s_phase", "Running"),
        ("k8s_ready", "true"),
        ("k8s_uid", "uid-vllm-a"),
        ("k8s_controller_kind", "StatefulSet"),
        ("k8s_controller_name", "vllm"),
        ("k8s_labelpresent_app_kubernetes_io_name", "true"),
        ("k8s_annotationpresent_prometheus_io_scrape", "true"),
        ("k8s_annotationpresent_prometheus_io_port", "true"),
        ("k8s_annotationpresent_prometheus_io_path", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, want);
    assert_eq!(got[0].1, "1");
    wait_until("vllm-a's vLLM series", t, || {
        present(&prom, "vllm:num_requests_running{pod=\"vllm-a\",model_name=\"m\"}").then_some(())
    });
    assert!(targets.hits("/a") > 0);

    // The agent asked for its own node's pods in its namespace, with the kubeconfig's token.
    let lists = api.requests("list");
    assert!(!lists.is_empty());
    for (path, q, auth) in lists.iter().chain(api.requests("watch").iter()) {
        assert_eq!(path, "/api/v1/namespaces/inference/pods");
        assert_eq!(q.get("fieldSelector").map(String::as_str), Some("spec.nodeName=gpu-node-1"), "{q:?}");
        assert_eq!(auth, "Bearer stub-token");
    }

    // 2. ADDED over the watch.
    api.add(pod("vllm-b", "gpu-node-1", Some(port), "/b"));
    wait_until("vllm-b scraped", t, || present(&prom, "up{pod=\"vllm-b\"}").then_some(()));
    assert!(api.requests("list").len() == lists.len(), "an ADDED event must not need a re-list");

    // 3. MODIFIED: vllm-b opts out (target gone, series stale); vllm-a turns
    // unready (its labels change: old target stale, new one scraped).
    api.modify("inference", "vllm-b", |p| p["metadata"]["annotations"]["prometheus.io/scrape"] = json!("false"));
    api.modify("inference", "vllm-a", |p| p["status"]["conditions"][0]["status"] = json!("False"));
    wait_until("vllm-b stale", t, || {
        (!present(&prom, "up{pod=\"vllm-b\"}") && !present(&prom, "vllm:num_requests_running{pod=\"vllm-b\"}"))
            .then_some(())
    });
    wait_until("vllm-a relabelled unready", t, || {
        (present(&prom, "up{pod=\"vllm-a\",k8s_ready=\"false\"}")
            && !present(&prom, "up{pod=\"vllm-a\",k8s_ready=\"true\"}"))
        .then_some(())
    });

    // 4. DELETED.
    api.delete("inference", "vllm-a");
    wait_until("vllm-a stale after delete", t, || {
        (!present(&prom, "up{pod=\"vllm-a\"}") && !present(&prom, "vllm:num_requests_running{pod=\"vllm-a\"}"))
            .then_some(())
    });

    // 5. A plain dropped watch resumes from the last version, without a re-list.
    let lists_before = api.requests("list").len();
    api.drop_watches(false);
    api.add(pod("vllm-c", "gpu-node-1", Some(port), "/c"));
    wait_until("vllm-c scraped after a resumed watch", t, || present(&prom, "up{pod=\"vllm-c\"}").then_some(()));
    assert_eq!(api.requests("list").len(), lists_before, "a resumable watch must not re-list");

    // 6. A watch that drops while history is compacted: the resume answers
    // 410 Gone, the agent re-lists, and the listed set replaces the old one:
    // vllm-c (deleted during the outage, its DELETED event lost) goes stale,
    // vllm-d (created during the outage) is scraped.
    api.drop_watches(true);
    {
        let mut s = api.state.lock().unwrap();
        s.objects.remove(&("pods".into(), "inference".into(), "vllm-c".into()));
    }
    api.add(pod("vllm-d", "gpu-node-1", Some(port), "/d"));
    wait_until("vllm-d scraped after re-list", t, || present(&prom, "up{pod=\"vllm-d\"}").then_some(()));
    wait_until("vllm-c stale after re-list", t, || (!present(&prom, "up{pod=\"vllm-c\"}")).then_some(()));
    assert!(api.state.lock().unwrap().gone_answers >= 1, "the stub never answered 410");
    assert!(api.requests("list").len() > lists_before, "no re-list after 410");
    assert!(agent.self_metric("infertel_receiver_discovery_errors_total", &[("job", "kubernetes-pods")]) >= 1.0);

    // Pods on other nodes or without the annotation were never scraped.
    assert!(prom.query("count_over_time(up{pod=~\"elsewhere|no-scrape\"}[10m])").is_empty());
    assert_eq!(targets.hits("/x"), 0);
}

#[test]
fn resync_replaces_a_set_that_missed_an_event() {
    let targets = Targets::start();
    targets.set("/a", TEXT_004, BODY);
    let api = StubApi::start();
    api.add(pod("vllm-a", "gpu-node-1", Some(targets.addr.port()), "/a"));
    let prom = Prometheus::start("");
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    // All namespaces (no `namespaces`), resync every 2 s.
    let cfg = config(&kc, "              resync_interval: 2s", &prom.write_url());
    let _agent = Agent::start_with_env(&cfg, &[("K8S_NODE_NAME", "gpu-node-1")]);
    let t = Duration::from_secs(30);
    wait_until("vllm-a scraped", t, || present(&prom, "up{pod=\"vllm-a\"}").then_some(()));
    assert!(api.requests("list").iter().all(|(p, _, _)| p == "/api/v1/pods"));
    // The pod disappears and no watch event says so: only a resync can notice.
    api.vanish("inference", "vllm-a");
    wait_until("vllm-a stale after resync", t, || (!present(&prom, "up{pod=\"vllm-a\"}")).then_some(()));
    assert!(api.requests("list").len() >= 2);
}

/// The objects a GPU operator's dcgm-exporter deployment has: node, service,
/// pod, endpoints and endpoint slice, plus an ingress in front of vLLM.
fn gpu_operator_objects(metrics_port: u16, debug_port: u16) -> Vec<Value> {
    let pod_ref = json!({"kind": "Pod", "name": "dcgm-x1", "namespace": "gpu-operator"});
    vec![
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "H100"}},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}),
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "dcgm-exporter", "namespace": "gpu-operator",
                "labels": {"app": "nvidia-dcgm-exporter"}, "annotations": {"prometheus.io/probe": "true"}},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.9", "ports": [{"name": "gpu-metrics", "port": 9400, "protocol": "TCP"}]}}),
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "dcgm-x1", "namespace": "gpu-operator", "labels": {"app": "nvidia-dcgm-exporter"}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2",
                "ports": [{"containerPort": metrics_port, "name": "metrics", "protocol": "TCP"},
                          {"containerPort": debug_port, "name": "debug", "protocol": "TCP"}]}]},
            "status": {"phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}]}}),
        json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "dcgm-exporter", "namespace": "gpu-operator", "labels": {"app": "nvidia-dcgm-exporter"}},
            "subsets": [{"addresses": [{"ip": "127.0.0.1", "nodeName": "gpu-1", "targetRef": pod_ref}],
                "ports": [{"name": "gpu-metrics", "port": metrics_port, "protocol": "TCP"}]}]}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "dcgm-exporter-x7k2p", "namespace": "gpu-operator",
                "labels": {"kubernetes.io/service-name": "dcgm-exporter"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": "gpu-1", "targetRef": pod_ref}],
            "ports": [{"name": "gpu-metrics", "port": metrics_port, "protocol": "TCP"}]}),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "vllm", "namespace": "inference", "labels": {"app": "vllm"}},
            "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["*.example.com"]}],
                "rules": [{"host": "api.example.com", "http": {"paths": [{"path": "/v1", "pathType": "Prefix",
                    "backend": {"service": {"name": "vllm", "port": {"number": 8000}}}}]}}]}}),
    ]
}

/// The jobs: NVIDIA DeepOps' dcgm-exporter job (role endpoints) with
/// attach_metadata, the same on endpoint slices, and Prometheus' own
/// example blackbox jobs for services and ingresses
/// (documentation/examples/prometheus-kubernetes.yml), the blackbox
/// exporter being the test's target server.
fn roles_config(kc: &std::path::Path, blackbox: &str, write_url: &str) -> String {
    let kc = kc.display();
    format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
        - job_name: gpu-metrics
          metrics_path: /metrics
          scheme: http
          kubernetes_sd_configs:
            - role: endpoints
              kubeconfig_file: {kc}
              namespaces: {{names: [gpu-operator, monitoring]}}
              attach_metadata: {{node: true}}
          relabel_configs:
            - source_labels: [__meta_kubernetes_pod_node_name]
              action: replace
              target_label: kubernetes_node
            - {{action: labelmap, regex: __meta_kubernetes_node_label_(.+), replacement: node_$1}}
            - {{action: labelmap, regex: __meta_kubernetes_service_label_(.+), replacement: service_$1}}
            - {{source_labels: [__meta_kubernetes_endpoint_ready], target_label: ready}}
            - {{source_labels: [__meta_kubernetes_pod_container_port_name], target_label: port_name}}
        - job_name: gpu-metrics-slices
          kubernetes_sd_configs:
            - role: endpointslice
              kubeconfig_file: {kc}
              namespaces: {{names: [gpu-operator]}}
          relabel_configs:
            - {{source_labels: [__meta_kubernetes_endpointslice_endpoint_conditions_ready], regex: "true", action: keep}}
            - {{source_labels: [__meta_kubernetes_endpointslice_port_name], regex: gpu-metrics, action: keep}}
            - {{source_labels: [__meta_kubernetes_endpointslice_name], target_label: slice}}
            - {{source_labels: [__meta_kubernetes_endpointslice_endpoint_node_name], target_label: node}}
            - {{source_labels: [__meta_kubernetes_service_name], target_label: service}}
        - job_name: kubernetes-services
          metrics_path: /probe
          params:
            module: [http_2xx]
          kubernetes_sd_configs:
            - role: service
              kubeconfig_file: {kc}
          relabel_configs:
            - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_probe]
              action: keep
              regex: true
            - source_labels: [__address__]
              target_label: __param_target
            - target_label: __address__
              replacement: {blackbox}
            - source_labels: [__param_target]
              target_label: instance
            - action: labelmap
              regex: __meta_kubernetes_service_label_(.+)
            - source_labels: [__meta_kubernetes_namespace]
              target_label: namespace
            - source_labels: [__meta_kubernetes_service_name]
              target_label: service
        - job_name: kubernetes-ingresses
          metrics_path: /probe
          params:
            module: [http_2xx]
          kubernetes_sd_configs:
            - role: ingress
              kubeconfig_file: {kc}
          relabel_configs:
            - source_labels:
                [
                  __meta_kubernetes_ingress_scheme,
                  __address__,
                  __meta_kubernetes_ingress_path,
                ]
              regex: (.+);(.+);(.+)
              replacement: ${{1}}://${{2}}${{3}}
              target_label: __param_target
            - target_label: __address__
              replacement: {blackbox}
            - source_labels: [__param_target]
              target_label: instance
            - action: labelmap
              regex: __meta_kubernetes_ingress_label_(.+)
            - source_labels: [__meta_kubernetes_namespace]
              target_label: namespace
            - source_labels: [__meta_kubernetes_ingress_name]
              target_label: ingress
exporters:
  prometheusremotewrite:
    endpoint: {write_url}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry:
    metrics: {{address: "{{{{TELEMETRY}}}}"}}
"#
    )
}

fn one(prom: &Prometheus, q: &str) -> BTreeMap<String, String> {
    let r = prom.query(q);
    assert_eq!(r.len(), 1, "{q}: {r:?}");
    r[0].0.clone()
}

#[test]
fn endpoints_slices_services_and_ingresses() {
    let (exporter, debug, blackbox) = (Targets::start(), Targets::start(), Targets::start());
    exporter.set("/metrics", TEXT_004, "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 41\n");
    debug.set("/metrics", TEXT_004, "# TYPE debug_up gauge\ndebug_up 1\n");
    blackbox.set("/probe", TEXT_004, "# TYPE probe_success gauge\nprobe_success 1\n");
    let (mp, dp) = (exporter.addr.port(), debug.addr.port());
    let api = StubApi::start();
    for o in gpu_operator_objects(mp, dp) {
        api.add(o);
    }
    let prom = Prometheus::start("");
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let agent = Agent::start(&roles_config(&kc, &blackbox.addr.to_string(), &prom.write_url()));
    let t = Duration::from_secs(30);
    wait_until("every role's targets in Prometheus", t, || {
        (prom.query("up{job=~\"gpu-metrics|gpu-metrics-slices|kubernetes-services|kubernetes-ingresses\"}").len() == 5)
            .then_some(())
    });

    // endpoints: the service's, the pod's and the node's labels on the target.
    let l = one(&prom, &format!("up{{job=\"gpu-metrics\",instance=\"127.0.0.1:{mp}\"}}"));
    for (k, v) in [
        ("kubernetes_node", "gpu-1"),
        ("node_nvidia_com_gpu_product", "H100"),
        ("service_app", "nvidia-dcgm-exporter"),
        ("ready", "true"),
        ("port_name", "metrics"),
    ] {
        assert_eq!(l.get(k).map(String::as_str), Some(v), "{k}: {l:?}");
    }
    // The scraped series can ride another sending consumer than `up`, so
    // they may land a moment later.
    wait_until("the endpoint target's scraped series in Prometheus", t, || {
        (!prom.query(&format!("DCGM_FI_DEV_GPU_TEMP{{job=\"gpu-metrics\",instance=\"127.0.0.1:{mp}\"}}")).is_empty())
            .then_some(())
    });
    // The pod's other container port, which no endpoint covers, is a target
    // too (pod labels, no endpoint or node labels).
    let l = one(&prom, &format!("up{{job=\"gpu-metrics\",instance=\"127.0.0.1:{dp}\"}}"));
    assert_eq!(l.get("port_name").map(String::as_str), Some("debug"));
    assert_eq!(l.get("kubernetes_node").map(String::as_str), Some("gpu-1"));
    assert!(!l.contains_key("ready") && !l.contains_key("node_nvidia_com_gpu_product"), "{l:?}");
    // endpointslice
    let l = one(&prom, "up{job=\"gpu-metrics-slices\"}");
    assert_eq!(l["instance"], format!("127.0.0.1:{mp}"));
    assert_eq!(l["slice"], "dcgm-exporter-x7k2p");
    assert_eq!(l["node"], "gpu-1");
    assert_eq!(l["service"], "dcgm-exporter");
    // service and ingress, probed through the "blackbox exporter".
    let l = one(&prom, "up{job=\"kubernetes-services\"}");
    assert_eq!(l["instance"], "dcgm-exporter.gpu-operator.svc:9400");
    assert_eq!(
        (l["namespace"].as_str(), l["service"].as_str(), l["app"].as_str()),
        ("gpu-operator", "dcgm-exporter", "nvidia-dcgm-exporter")
    );
    let l = one(&prom, "up{job=\"kubernetes-ingresses\"}");
    assert_eq!(l["instance"], "https://api.example.com/v1", "scheme from the TLS wildcard, host, path");
    assert_eq!((l["ingress"].as_str(), l["app"].as_str()), ("vllm", "vllm"));
    assert!(blackbox.last_headers("/probe").contains_key("user-agent"));

    // A service change alone reaches its endpoints' targets.
    api.modify_in("services", "gpu-operator", "dcgm-exporter", |s| s["metadata"]["labels"]["tier"] = json!("gpu"));
    wait_until("the service's new label on the endpoints target", t, || {
        present(&prom, &format!("up{{job=\"gpu-metrics\",instance=\"127.0.0.1:{mp}\",service_tier=\"gpu\"}}"))
            .then_some(())
    });
    wait_until("the old endpoints target stale", t, || {
        (!present(&prom, &format!("up{{job=\"gpu-metrics\",instance=\"127.0.0.1:{mp}\",service_tier=\"\"}}")))
            .then_some(())
    });

    // The address leaves the endpoints: both of the pod's targets end.
    api.modify_in("endpoints", "gpu-operator", "dcgm-exporter", |e| e["subsets"] = json!([]));
    wait_until("the endpoints' targets stale", t, || {
        (!present(&prom, "up{job=\"gpu-metrics\"}") && !present(&prom, "debug_up{job=\"gpu-metrics\"}")).then_some(())
    });

    // History compacted during an outage (410 Gone, re-list): the ingress
    // deleted meanwhile, its event lost, goes stale; the endpoint slice's
    // endpoint turning unready is seen.
    api.drop_watches(true);
    {
        let mut s = api.state.lock().unwrap();
        s.objects.remove(&("ingresses".into(), "inference".into(), "vllm".into()));
        s.rv += 1;
    }
    api.modify_in("endpointslices", "gpu-operator", "dcgm-exporter-x7k2p", |e| {
        e["endpoints"][0]["conditions"]["ready"] = json!(false)
    });
    wait_until("ingress target stale after the re-list", t, || {
        (!present(&prom, "up{job=\"kubernetes-ingresses\"}")).then_some(())
    });
    wait_until("the unready slice endpoint dropped", t, || {
        (!present(&prom, "up{job=\"gpu-metrics-slices\"}")).then_some(())
    });
    assert!(present(&prom, "up{job=\"kubernetes-services\"}"), "the service's probe is kept");
    assert!(api.state.lock().unwrap().gone_answers >= 1, "the stub never answered 410");

    // What was asked: services, pods and endpoints per namespace for the
    // endpoints role, nodes cluster-wide, endpoint slices and ingresses in
    // their API groups.
    let paths: std::collections::BTreeSet<String> = api.requests("list").into_iter().map(|(p, _, _)| p).collect();
    for p in [
        "/api/v1/namespaces/gpu-operator/endpoints",
        "/api/v1/namespaces/monitoring/services",
        "/api/v1/namespaces/gpu-operator/pods",
        "/api/v1/nodes",
        "/apis/discovery.k8s.io/v1/namespaces/gpu-operator/endpointslices",
        "/apis/networking.k8s.io/v1/ingresses",
        "/api/v1/services",
    ] {
        assert!(paths.contains(p), "{p} not listed: {paths:?}");
    }
    drop(agent);
}
