//! Roles `endpoints` and `endpointslice`: a target per address and port of
//! a service's endpoints, with the service's labels, the pod's when the
//! address belongs to one (and targets for the pod's other container
//! ports), and the node's with `attach_metadata`. Labels as Prometheus'
//! `endpoints.go` and `endpointslice.go` give them (2.42), plus the later
//! additions that cost nothing to a 2.42 config: endpoints annotations and
//! endpointslice labels and annotations (2.46), the endpoint's node name
//! and zone (2.52), no targets for a pod without an IP (2.46).

use super::meta::{
    Labels, META, add_labels_and_annotations, add_node_labels, join_host_port, pod_labels, service_labels,
};
use crate::receivers::prometheus::discovery::TargetGroup;
use k8s_openapi::api::core::v1::{Endpoints, Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The objects an endpoints target is joined with, by `namespace/name`
/// (nodes by `/name`).
pub struct Related<'a> {
    pub services: &'a BTreeMap<String, Arc<Service>>,
    pub pods: &'a BTreeMap<String, Arc<Pod>>,
    pub nodes: Option<&'a BTreeMap<String, Arc<Node>>>,
}

impl Related<'_> {
    fn pod(&self, r: &ObjectReference, default_ns: &str) -> Option<Arc<Pod>> {
        if r.kind.as_deref() != Some("Pod") {
            return None;
        }
        let ns = r.namespace.as_deref().unwrap_or(default_ns);
        self.pods.get(&format!("{ns}/{}", r.name.as_deref().unwrap_or(""))).cloned()
    }
}

/// Pods seen behind addresses, with the ports their endpoints cover.
#[derive(Default)]
struct SeenPods(BTreeMap<String, (Arc<Pod>, Vec<i32>)>);

impl SeenPods {
    fn saw(&mut self, pod: &Arc<Pod>, port: Option<i32>) {
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or("")
        );
        let e = self.0.entry(key).or_insert_with(|| (pod.clone(), Vec::new()));
        e.1.extend(port);
    }

    /// A target for every container port no endpoint covers (Prometheus
    /// adds these so a pod's metrics port is scraped even when the service
    /// exposes another).
    fn uncovered(self, source: &str, base: &Labels, out: &mut Vec<TargetGroup>) {
        for (key, (pod, covered)) in self.0 {
            let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).filter(|s| !s.is_empty()) else {
                continue;
            };
            let labels = pod_labels(&pod);
            for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
                for cp in c.ports.iter().flatten().filter(|cp| !covered.contains(&cp.container_port)) {
                    let mut ls = base.clone();
                    ls.extend(labels.clone());
                    container_labels(&mut ls, c, cp, cp.protocol.as_deref().unwrap_or("TCP"));
                    out.push(TargetGroup {
                        source: format!("{source}/pod/{key}/{}/{}", c.name, cp.container_port),
                        targets: vec![join_host_port(&ip, cp.container_port)],
                        labels: ls,
                    });
                }
            }
        }
    }
}

fn container_labels(
    ls: &mut Labels,
    c: &k8s_openapi::api::core::v1::Container,
    cp: &k8s_openapi::api::core::v1::ContainerPort,
    protocol: &str,
) {
    ls.insert(format!("{META}pod_container_name"), c.name.clone());
    ls.insert(format!("{META}pod_container_image"), c.image.clone().unwrap_or_default());
    ls.insert(format!("{META}pod_container_port_name"), cp.name.clone().unwrap_or_default());
    ls.insert(format!("{META}pod_container_port_number"), cp.container_port.to_string());
    ls.insert(format!("{META}pod_container_port_protocol"), protocol.to_string());
}

/// The pod's labels, and its container's for the container declaring
/// `port` (the last one, as in Prometheus); `endpoint_protocol` is the
/// protocol the role reports for that container port (the endpoint's for
/// `endpoints`, the container's for `endpointslice`).
fn add_pod(ls: &mut Labels, pod: &Pod, port: Option<i32>, endpoint_protocol: Option<&str>) {
    ls.extend(pod_labels(pod));
    let Some(port) = port else { return };
    let mut found = None;
    for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        for cp in c.ports.iter().flatten() {
            if cp.container_port == port {
                found = Some((c, cp));
                break;
            }
        }
    }
    if let Some((c, cp)) = found {
        let protocol = endpoint_protocol
            .map(str::to_string)
            .unwrap_or_else(|| cp.protocol.clone().unwrap_or_else(|| "TCP".into()));
        container_labels(ls, c, cp, &protocol);
    }
}

/// Role `endpoints`: for every subset, port and address (ready or not).
pub fn build_endpoints(ep: &Endpoints, rel: &Related) -> Vec<TargetGroup> {
    let ns = ep.metadata.namespace.clone().unwrap_or_default();
    let name = ep.metadata.name.clone().unwrap_or_default();
    let source = format!("endpoints/{ns}/{name}");
    let mut base = Labels::new();
    base.insert(format!("{META}namespace"), ns.clone());
    base.insert(format!("{META}endpoints_name"), name.clone());
    if let Some(svc) = rel.services.get(&format!("{ns}/{name}")) {
        base.extend(service_labels(svc));
    }
    add_labels_and_annotations(&mut base, &ep.metadata, "endpoints", true);
    let mut out = Vec::new();
    let mut seen = SeenPods::default();
    for subset in ep.subsets.iter().flatten() {
        for port in subset.ports.iter().flatten() {
            let ready = subset.addresses.iter().flatten().map(|a| (a, "true"));
            let not_ready = subset.not_ready_addresses.iter().flatten().map(|a| (a, "false"));
            for (addr, ready) in ready.chain(not_ready) {
                let mut ls = base.clone();
                let protocol = port.protocol.clone().unwrap_or_default();
                ls.insert(format!("{META}endpoint_port_name"), port.name.clone().unwrap_or_default());
                ls.insert(format!("{META}endpoint_port_protocol"), protocol.clone());
                ls.insert(format!("{META}endpoint_ready"), ready.into());
                if let Some(r) = &addr.target_ref {
                    ls.insert(format!("{META}endpoint_address_target_kind"), r.kind.clone().unwrap_or_default());
                    ls.insert(format!("{META}endpoint_address_target_name"), r.name.clone().unwrap_or_default());
                }
                if let Some(n) = &addr.node_name {
                    ls.insert(format!("{META}endpoint_node_name"), n.clone());
                }
                if let Some(h) = addr.hostname.as_ref().filter(|h| !h.is_empty()) {
                    ls.insert(format!("{META}endpoint_hostname"), h.clone());
                }
                add_node_labels(&mut ls, addr.node_name.as_deref(), rel.nodes);
                if let Some(pod) = addr.target_ref.as_ref().and_then(|r| rel.pod(r, &ns)) {
                    add_pod(&mut ls, &pod, Some(port.port), Some(&protocol));
                    seen.saw(&pod, Some(port.port));
                }
                out.push(TargetGroup {
                    source: format!("{source}/{}/{}", addr.ip, port.port),
                    targets: vec![join_host_port(&addr.ip, port.port)],
                    labels: ls,
                });
            }
        }
    }
    seen.uncovered(&source, &base, &mut out);
    out
}

/// Role `endpointslice`: for every endpoint, port and address.
pub fn build_endpointslice(slice: &EndpointSlice, rel: &Related) -> Vec<TargetGroup> {
    let ns = slice.metadata.namespace.clone().unwrap_or_default();
    let name = slice.metadata.name.clone().unwrap_or_default();
    let source = format!("endpointslice/{ns}/{name}");
    let mut base = Labels::new();
    base.insert(format!("{META}namespace"), ns.clone());
    base.insert(format!("{META}endpointslice_name"), name.clone());
    base.insert(format!("{META}endpointslice_address_type"), slice.address_type.clone());
    let svc = slice.metadata.labels.as_ref().and_then(|l| l.get("kubernetes.io/service-name"));
    if let Some(svc) = svc.and_then(|s| rel.services.get(&format!("{ns}/{s}"))) {
        base.extend(service_labels(svc));
    }
    add_labels_and_annotations(&mut base, &slice.metadata, "endpointslice", true);
    let mut out = Vec::new();
    let mut seen = SeenPods::default();
    for (e, ep) in slice.endpoints.iter().enumerate() {
        for port in slice.ports.iter().flatten() {
            for addr in &ep.addresses {
                let mut ls = base.clone();
                let p = |k: &str| format!("{META}endpointslice_{k}");
                if let Some(n) = &port.name {
                    ls.insert(p("port_name"), n.clone());
                }
                if let Some(proto) = &port.protocol {
                    ls.insert(p("port_protocol"), proto.clone());
                }
                if let Some(n) = port.port {
                    ls.insert(p("port"), n.to_string());
                }
                if let Some(a) = &port.app_protocol {
                    ls.insert(p("port_app_protocol"), a.clone());
                }
                if let Some(c) = &ep.conditions {
                    for (k, v) in [("ready", c.ready), ("serving", c.serving), ("terminating", c.terminating)] {
                        if let Some(v) = v {
                            ls.insert(p(&format!("endpoint_conditions_{k}")), v.to_string());
                        }
                    }
                }
                if let Some(h) = &ep.hostname {
                    ls.insert(p("endpoint_hostname"), h.clone());
                }
                if let Some(r) = &ep.target_ref {
                    ls.insert(p("address_target_kind"), r.kind.clone().unwrap_or_default());
                    ls.insert(p("address_target_name"), r.name.clone().unwrap_or_default());
                }
                for (k, v) in ep.deprecated_topology.iter().flatten() {
                    let k = super::meta::sanitize_label_name(k);
                    ls.insert(p(&format!("endpoint_topology_{k}")), v.clone());
                    ls.insert(p(&format!("endpoint_topology_present_{k}")), "true".into());
                }
                if let Some(n) = &ep.node_name {
                    ls.insert(p("endpoint_node_name"), n.clone());
                }
                if let Some(z) = &ep.zone {
                    ls.insert(p("endpoint_zone"), z.clone());
                }
                add_node_labels(&mut ls, ep.node_name.as_deref(), rel.nodes);
                if let Some(pod) = ep.target_ref.as_ref().and_then(|r| rel.pod(r, &ns)) {
                    add_pod(&mut ls, &pod, port.port, None);
                    seen.saw(&pod, port.port);
                }
                let target = match port.port {
                    Some(n) => join_host_port(addr, n),
                    None => addr.clone(),
                };
                out.push(TargetGroup { source: format!("{source}/{e}/{target}"), targets: vec![target], labels: ls });
            }
        }
    }
    seen.uncovered(&source, &base, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type By<K> = BTreeMap<String, Arc<K>>;

    fn objects() -> (By<Service>, By<Pod>, By<Node>) {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "dcgm-exporter", "namespace": "gpu-operator", "labels": {"app": "nvidia-dcgm-exporter"}},
            "spec": {"ports": [{"name": "gpu-metrics", "port": 9400}]}
        }))
        .unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "dcgm-x1", "namespace": "gpu-operator", "labels": {"app": "nvidia-dcgm-exporter"}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter",
                "ports": [{"containerPort": 9400, "name": "metrics", "protocol": "TCP"}, {"containerPort": 8080, "name": "debug"}]}]},
            "status": {"podIP": "10.0.1.5", "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "H100"}}}),
        )
        .unwrap();
        (
            BTreeMap::from([("gpu-operator/dcgm-exporter".to_string(), Arc::new(svc))]),
            BTreeMap::from([("gpu-operator/dcgm-x1".to_string(), Arc::new(pod))]),
            BTreeMap::from([("/gpu-1".to_string(), Arc::new(node))]),
        )
    }

    #[test]
    fn endpoints_join_service_pod_and_node() {
        let (services, pods, nodes) = objects();
        let ep: Endpoints = serde_json::from_value(json!({
            "metadata": {"name": "dcgm-exporter", "namespace": "gpu-operator", "labels": {"app": "nvidia-dcgm-exporter"}},
            "subsets": [{"addresses": [{"ip": "10.0.1.5", "nodeName": "gpu-1", "targetRef": {"kind": "Pod", "name": "dcgm-x1", "namespace": "gpu-operator"}}],
                "notReadyAddresses": [{"ip": "10.0.1.9", "hostname": "h9"}],
                "ports": [{"name": "gpu-metrics", "port": 9400, "protocol": "TCP"}]}]
        }))
        .unwrap();
        let g = build_endpoints(&ep, &Related { services: &services, pods: &pods, nodes: Some(&nodes) });
        assert_eq!(g.len(), 3, "{g:#?}");
        assert_eq!(g[0].targets, ["10.0.1.5:9400"]);
        let l = &g[0].labels;
        for (k, v) in [
            ("__meta_kubernetes_namespace", "gpu-operator"),
            ("__meta_kubernetes_endpoints_name", "dcgm-exporter"),
            ("__meta_kubernetes_endpoints_label_app", "nvidia-dcgm-exporter"),
            ("__meta_kubernetes_service_name", "dcgm-exporter"),
            ("__meta_kubernetes_service_label_app", "nvidia-dcgm-exporter"),
            ("__meta_kubernetes_endpoint_port_name", "gpu-metrics"),
            ("__meta_kubernetes_endpoint_port_protocol", "TCP"),
            ("__meta_kubernetes_endpoint_ready", "true"),
            ("__meta_kubernetes_endpoint_address_target_kind", "Pod"),
            ("__meta_kubernetes_endpoint_address_target_name", "dcgm-x1"),
            ("__meta_kubernetes_endpoint_node_name", "gpu-1"),
            ("__meta_kubernetes_pod_name", "dcgm-x1"),
            ("__meta_kubernetes_pod_node_name", "gpu-1"),
            ("__meta_kubernetes_pod_container_name", "exporter"),
            ("__meta_kubernetes_pod_container_port_name", "metrics"),
            ("__meta_kubernetes_pod_container_port_number", "9400"),
            ("__meta_kubernetes_node_name", "gpu-1"),
            ("__meta_kubernetes_node_label_nvidia_com_gpu_product", "H100"),
        ] {
            assert_eq!(l.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert_eq!(g[1].targets, ["10.0.1.9:9400"]);
        assert_eq!(g[1].labels["__meta_kubernetes_endpoint_ready"], "false");
        assert_eq!(g[1].labels["__meta_kubernetes_endpoint_hostname"], "h9");
        assert!(!g[1].labels.contains_key("__meta_kubernetes_pod_name"));
        // The pod's other container port, with pod labels and no endpoint's.
        assert_eq!(g[2].targets, ["10.0.1.5:8080"]);
        assert_eq!(g[2].labels["__meta_kubernetes_pod_container_port_name"], "debug");
        assert_eq!(g[2].labels["__meta_kubernetes_pod_container_port_protocol"], "TCP");
        assert!(!g[2].labels.contains_key("__meta_kubernetes_endpoint_ready"));
        assert!(!g[2].labels.contains_key("__meta_kubernetes_node_name"));
        // Without attach_metadata, no node labels.
        let g = build_endpoints(&ep, &Related { services: &services, pods: &pods, nodes: None });
        assert!(!g[0].labels.contains_key("__meta_kubernetes_node_label_nvidia_com_gpu_product"));
    }

    #[test]
    fn endpointslice_labels() {
        let (services, pods, nodes) = objects();
        let s: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "dcgm-exporter-abc", "namespace": "gpu-operator", "labels": {"kubernetes.io/service-name": "dcgm-exporter"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.1.5"], "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": "gpu-1", "zone": "z1", "deprecatedTopology": {"kubernetes.io/hostname": "gpu-1"},
                "targetRef": {"kind": "Pod", "name": "dcgm-x1", "namespace": "gpu-operator"}}],
            "ports": [{"name": "gpu-metrics", "port": 9400, "protocol": "TCP", "appProtocol": "http"}]
        }))
        .unwrap();
        let g = build_endpointslice(&s, &Related { services: &services, pods: &pods, nodes: Some(&nodes) });
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].targets, ["10.0.1.5:9400"]);
        let l = &g[0].labels;
        for (k, v) in [
            ("__meta_kubernetes_endpointslice_name", "dcgm-exporter-abc"),
            ("__meta_kubernetes_endpointslice_address_type", "IPv4"),
            ("__meta_kubernetes_endpointslice_label_kubernetes_io_service_name", "dcgm-exporter"),
            ("__meta_kubernetes_service_name", "dcgm-exporter"),
            ("__meta_kubernetes_endpointslice_port", "9400"),
            ("__meta_kubernetes_endpointslice_port_name", "gpu-metrics"),
            ("__meta_kubernetes_endpointslice_port_protocol", "TCP"),
            ("__meta_kubernetes_endpointslice_port_app_protocol", "http"),
            ("__meta_kubernetes_endpointslice_endpoint_conditions_ready", "true"),
            ("__meta_kubernetes_endpointslice_endpoint_conditions_serving", "true"),
            ("__meta_kubernetes_endpointslice_endpoint_conditions_terminating", "false"),
            ("__meta_kubernetes_endpointslice_endpoint_topology_kubernetes_io_hostname", "gpu-1"),
            ("__meta_kubernetes_endpointslice_endpoint_topology_present_kubernetes_io_hostname", "true"),
            ("__meta_kubernetes_endpointslice_endpoint_node_name", "gpu-1"),
            ("__meta_kubernetes_endpointslice_endpoint_zone", "z1"),
            ("__meta_kubernetes_endpointslice_address_target_kind", "Pod"),
            ("__meta_kubernetes_pod_container_port_number", "9400"),
            ("__meta_kubernetes_node_label_nvidia_com_gpu_product", "H100"),
        ] {
            assert_eq!(l.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert_eq!(g[1].targets, ["10.0.1.5:8080"]);
    }
}
