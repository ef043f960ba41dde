//! End to end: the Collector's `resourcedetection` processor as a Collector
//! user configures it (`env`, `system`, `k8snode`/`k8s_api`, `override`),
//! in the real binary, into a real Prometheus. The node's and the cluster's
//! uids come from a stub Kubernetes API server found through a kubeconfig
//! (`auth_type: kubeConfig`), which records that the agent asked for its own
//! node with the kubeconfig's token; the host name expected is the kernel's
//! (`/proc/sys/kernel/hostname`), read here, not by the agent.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

const NODE_UID: &str = "6f1c2a7e-8d0b-4c35-9b3e-2b8f4e1d9a01";
const CLUSTER_UID: &str = "0d7e3b2c-1f4a-4e8b-a6c9-5e2f7d1b3c44";

/// Answers GET of one node and of the kube-system namespace as the API
/// server does (404 with a Status object for anything else); records
/// `(path, authorization)`.
fn stub_api(node: &'static str, namespace_status: u16) -> (String, Arc<Mutex<Vec<(String, String)>>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut r = BufReader::new(s.try_clone().expect("clone"));
            let mut line = String::new();
            if r.read_line(&mut line).is_err() {
                continue;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut auth = String::new();
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.strip_prefix("authorization: ").or_else(|| h.strip_prefix("Authorization: ")) {
                    auth = v.trim().to_string();
                }
            }
            log.lock().unwrap().push((path.clone(), auth));
            let (code, body) = if path == format!("/api/v1/nodes/{node}") {
                (
                    200,
                    format!(
                        r#"{{"kind":"Node","apiVersion":"v1","metadata":{{"name":"{node}","uid":"{NODE_UID}","labels":{{"nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"NVIDIA-L4","topology.kubernetes.io/zone":"eu-west-1a"}}}}}}"#
                    ),
                )
            } else if path == "/api/v1/namespaces/kube-system" && namespace_status == 200 {
                (
                    200,
                    format!(
                        r#"{{"kind":"Namespace","apiVersion":"v1","metadata":{{"name":"kube-system","uid":"{CLUSTER_UID}"}}}}"#
                    ),
                )
            } else {
                let code = if path == "/api/v1/namespaces/kube-system" { namespace_status } else { 404 };
                (
                    code,
                    format!(
                        r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"{path} refused","reason":"Forbidden","code":{code}}}"#
                    ),
                )
            };
            let mut s = s;
            let _ = write!(
                s,
                "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, seen)
}

fn kubeconfig(dir: &std::path::Path, addr: &str) -> std::path::PathBuf {
    let p = dir.join("kubeconfig");
    std::fs::write(
        &p,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stub\n  cluster: {{server: 'http://{addr}'}}\nusers:\n- name: agent\n  user: {{token: node-reader}}\ncontexts:\n- name: gpu\n  context: {{cluster: stub, user: agent}}\n- name: other\n  context: {{cluster: nowhere, user: agent}}\ncurrent-context: other\n"
        ),
    )
    .expect("kubeconfig");
    p
}

fn config(processors: &str, target: &str, write_url: &str) -> String {
    format!(
        r#"
receivers:
  prometheus:
    config:
      scrape_configs:
        - {{job_name: vllm, scrape_interval: 1s, scrape_timeout: 900ms, static_configs: [{{targets: ['{target}']}}]}}
processors:
{processors}
exporters:
  prometheusremotewrite: {{endpoint: "{write_url}"}}
service:
  pipelines:
    metrics: {{receivers: [prometheus], processors: [resource_detection], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#
    )
}

#[test]
fn detected_resources_reach_prometheus_as_labels() {
    let prom = Prometheus::start("");
    let targets = Targets::start();
    targets.set(
        "/metrics",
        TEXT_004,
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n",
    );
    let (api, seen) = stub_api("gpu-node-3", 200);
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = kubeconfig(dir.path(), &api);
    let processors = r#"
  resource_detection:
    detectors: [env, system, k8snode]
    timeout: 2s
    override: false
    system: {hostname_sources: [os], resource_attributes: {host.id: {enabled: false}}}
    k8snode: {auth_type: kubeConfig, context: gpu}
    ec2: {tags: ['^kubernetes.io/cluster/.*$']}
"#;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname").trim().to_string();
    let _agent = Agent::start_with_env(
        &config(processors, &targets.addr.to_string(), &prom.write_url()),
        &[
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=not-the-job,deployment.environment=prod%2Deu,team=ml"),
            ("K8S_NODE_NAME", "gpu-node-3"),
            ("KUBECONFIG", kc.to_str().unwrap()),
        ],
    );
    let got = wait_until("the gauge in Prometheus", Duration::from_secs(30), || {
        let r = prom.query("vllm:num_requests_running");
        (!r.is_empty()).then_some(r)
    });
    let l = &got[0].0;
    let want = [
        ("job", "vllm"),
        ("deployment_environment", "prod-eu"),
        ("team", "ml"),
        ("host_name", hostname.as_str()),
        ("os_type", "linux"),
        ("k8s_node_name", "gpu-node-3"),
        ("k8s_node_uid", NODE_UID),
        ("k8s_cluster_uid", CLUSTER_UID),
        ("model_name", "m"),
    ];
    for (k, v) in want {
        assert_eq!(l.get(k).map(String::as_str), Some(v), "{k} in {l:?}");
    }
    assert!(!l.contains_key("host_id"), "host.id was turned off: {l:?}");
    // override: false leaves the job the target gave; the scrape's own series
    // carry the resource too, as every series of the target does.
    let up = prom.query(r#"up{job="vllm"}"#);
    assert_eq!(up.first().and_then(|(l, _)| l.get("k8s_node_name")).map(String::as_str), Some("gpu-node-3"));
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains(&("/api/v1/nodes/gpu-node-3".to_string(), "Bearer node-reader".to_string())), "{seen:?}");
    assert!(seen.iter().any(|(p, _)| p == "/api/v1/namespaces/kube-system"), "{seen:?}");
}

#[test]
fn override_replaces_what_the_target_gave_and_rbac_gaps_are_skipped() {
    let prom = Prometheus::start("");
    let targets = Targets::start();
    targets.set("/metrics", TEXT_004, "# TYPE x gauge\nx 1\n");
    let (api, _) = stub_api("n1", 403);
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = kubeconfig(dir.path(), &api);
    let processors = r#"
  resource_detection:
    detectors: [env, k8s_api]
    k8s_api: {auth_type: kubeConfig, context: gpu, node_from_env_var: MY_NODE, node_labels: [nvidia.com/gpu.product, topology.kubernetes.io/zone, not.there]}
"#;
    let agent = Agent::start_with_env(
        &config(processors, &targets.addr.to_string(), &prom.write_url()),
        &[("OTEL_RESOURCE_ATTRIBUTES", "service.name=llm"), ("MY_NODE", "n1"), ("KUBECONFIG", kc.to_str().unwrap())],
    );
    let got = wait_until("x in Prometheus", Duration::from_secs(30), || {
        let r = prom.query("x");
        (!r.is_empty()).then_some(r)
    });
    let l = &got[0].0;
    assert_eq!(l.get("job").map(String::as_str), Some("llm"), "override renames the job: {l:?}");
    assert_eq!(l.get("k8s_node_uid").map(String::as_str), Some(NODE_UID), "{l:?}");
    assert!(!l.contains_key("k8s_cluster_uid"), "403 on kube-system skips the cluster uid: {l:?}");
    // The node labels asked for, as k8s.node.label.<key> escaped into label names; no other.
    assert_eq!(l.get("k8s_node_label_nvidia_com_gpu_product").map(String::as_str), Some("NVIDIA-L4"), "{l:?}");
    assert_eq!(l.get("k8s_node_label_topology_kubernetes_io_zone").map(String::as_str), Some("eu-west-1a"), "{l:?}");
    assert!(!l.contains_key("k8s_node_label_nvidia_com_gpu_present"), "{l:?}");
    assert!(agent.proc.log_text().contains("has no label \"not.there\""), "{}", agent.proc.log_text());
    assert!(
        agent.proc.log_text().contains("no permission to get the kube-system namespace"),
        "{}",
        agent.proc.log_text()
    );
}

#[test]
fn a_failing_detector_stops_the_start_with_its_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, _) = stub_api("somewhere-else", 200);
    let kc = kubeconfig(dir.path(), &api);
    let processors = r#"
  resource_detection:
    detectors: [k8s_api]
    k8s_api: {auth_type: kubeConfig, context: gpu}
"#;
    let path = dir.path().join("c.yaml");
    let cfg = config(processors, "127.0.0.1:9", "http://127.0.0.1:9/api/v1/write")
        .replace("{{TELEMETRY}}", &format!("127.0.0.1:{}", free_port()));
    std::fs::write(&path, cfg).unwrap();
    let run = |env: &[(&str, &str)]| {
        let out = Command::new(infertel_bin())
            .arg("run")
            .arg("--config")
            .arg(&path)
            .env_remove("K8S_NODE_NAME")
            .envs(env.iter().copied())
            .env("KUBECONFIG", &kc)
            .output()
            .expect("run");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout))
    };
    // No node name: contrib's reason, and what to set.
    let (code, text) = run(&[]);
    assert_ne!(code, Some(0), "{text}");
    assert!(
        text.contains("processor resource_detection: detector k8s_api: node name can't be found: set K8S_NODE_NAME"),
        "{text}"
    );
    // A node the API server does not know: the API's answer.
    let (code, text) = run(&[("K8S_NODE_NAME", "gpu-node-3")]);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("failed getting k8s node UID of gpu-node-3"), "{text}");
    // A cloud detector is refused at validation, at its line.
    std::fs::write(
        &path,
        config("  resourcedetection:\n    detectors: [env, eks]\n", "127.0.0.1:9", "http://127.0.0.1:9/api/v1/write")
            .replace("processors: [resource_detection]", "processors: [resourcedetection]"),
    )
    .unwrap();
    let out = Command::new(infertel_bin()).arg("validate").arg("--config").arg(&path).output().expect("validate");
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(":9:") && text.contains("detector \"eks\" is not built yet"), "{text}");
}
