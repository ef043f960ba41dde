//! Roles `pod` and `node`: targets from pods' container ports and from
//! nodes' kubelets, labelled as Prometheus' `pod.go` and `node.go` label them.

use super::meta::{META, add_node_labels, add_object_meta, join_host_port, pod_labels};
use crate::receivers::prometheus::discovery::TargetGroup;
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Role `pod`: one target per declared container port, one per container
/// without ports (address = pod IP); nothing while the pod has no IP. With
/// `nodes` (`attach_metadata: {node: true}`), the node's labels on each.
pub fn build_pod(pod: &Pod, nodes: Option<&BTreeMap<String, Arc<Node>>>) -> Vec<TargetGroup> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let source = format!("pod/{ns}/{name}");
    let status = pod.status.clone().unwrap_or_default();
    let Some(ip) = status.pod_ip.clone().filter(|s| !s.is_empty()) else {
        return Vec::new();
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let mut ls = pod_labels(pod);
    ls.insert(format!("{META}namespace"), ns);
    add_node_labels(&mut ls, spec.node_name.as_deref(), nodes);

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
    vec![TargetGroup { source: format!("node/{name}"), targets: vec![join_host_port(addr, port)], labels: ls }]
}

#[cfg(test)]
mod tests {
    use super::super::meta::sanitize_label_name;
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
        let g = build_pod(&p, None);
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
        assert!(build_pod(&pending, None).is_empty());
        let ipv6 = pod(serde_json::json!({"metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}, "status": {"podIP": "fd00::1"}}));
        let g = build_pod(&ipv6, None);
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
}
