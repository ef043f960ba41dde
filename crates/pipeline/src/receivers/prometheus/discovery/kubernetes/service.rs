//! Roles `service` and `ingress`: a target per service port
//! (`<name>.<namespace>.svc:<port>`, for blackbox probing) and per ingress
//! rule path (the host), labelled as Prometheus' `service.go` and
//! `ingress.go` label them.

use super::meta::{Labels, META, add_object_meta, join_host_port, service_labels};
use crate::receivers::prometheus::discovery::TargetGroup;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;

/// Role `service`: one target per port.
pub fn build_service(svc: &Service) -> Vec<TargetGroup> {
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    let base = service_labels(svc);
    let spec = svc.spec.clone().unwrap_or_default();
    let kind = spec.type_.clone().unwrap_or_default();
    let mut out = Vec::new();
    for p in spec.ports.iter().flatten() {
        let mut ls = base.clone();
        let port = p.port.to_string();
        ls.insert(format!("{META}service_port_name"), p.name.clone().unwrap_or_default());
        ls.insert(format!("{META}service_port_number"), port.clone());
        ls.insert(format!("{META}service_port_protocol"), p.protocol.clone().unwrap_or_default());
        ls.insert(format!("{META}service_type"), kind.clone());
        if kind == "ExternalName" {
            ls.insert(format!("{META}service_external_name"), spec.external_name.clone().unwrap_or_default());
        } else {
            ls.insert(format!("{META}service_cluster_ip"), spec.cluster_ip.clone().unwrap_or_default());
        }
        if kind == "LoadBalancer" {
            ls.insert(format!("{META}service_loadbalancer_ip"), spec.load_balancer_ip.clone().unwrap_or_default());
        }
        out.push(TargetGroup {
            source: format!("svc/{ns}/{name}/{port}"),
            targets: vec![join_host_port(&format!("{name}.{ns}.svc"), &port)],
            labels: ls,
        });
    }
    out
}

/// Prometheus' `matchesHostnamePattern`: equal, or a `*` first label
/// standing for exactly one label.
fn matches_host(pattern: &str, host: &str) -> bool {
    if pattern == host {
        return true;
    }
    let (p, h): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), host.split('.').collect());
    p.len() == h.len() && p.len() > 1 && p[0] == "*" && p[1..] == h[1..]
}

/// Role `ingress`: one target per rule and path, at the rule's host.
pub fn build_ingress(ing: &Ingress) -> Vec<TargetGroup> {
    let ns = ing.metadata.namespace.clone().unwrap_or_default();
    let name = ing.metadata.name.clone().unwrap_or_default();
    let spec = ing.spec.clone().unwrap_or_default();
    let mut base = Labels::new();
    add_object_meta(&mut base, &ing.metadata, "ingress");
    base.insert(format!("{META}namespace"), ns.clone());
    if let Some(c) = &spec.ingress_class_name {
        base.insert(format!("{META}ingress_class_name"), c.clone());
    }
    let tls_hosts: Vec<String> = spec.tls.iter().flatten().flat_map(|t| t.hosts.clone().unwrap_or_default()).collect();
    let mut out = Vec::new();
    for (r, rule) in spec.rules.iter().flatten().enumerate() {
        let host = rule.host.clone().unwrap_or_default();
        let paths: Vec<String> = match &rule.http {
            None => vec!["/".into()],
            Some(h) => {
                h.paths.iter().map(|p| p.path.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "/".into())).collect()
            }
        };
        let scheme = if tls_hosts.iter().any(|p| matches_host(p, &host)) { "https" } else { "http" };
        for (i, path) in paths.into_iter().enumerate() {
            let mut ls = base.clone();
            ls.insert(format!("{META}ingress_scheme"), scheme.into());
            ls.insert(format!("{META}ingress_host"), host.clone());
            ls.insert(format!("{META}ingress_path"), path);
            out.push(TargetGroup {
                source: format!("ingress/{ns}/{name}/{r}/{i}"),
                targets: vec![host.clone()],
                labels: ls,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_targets() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vllm", "namespace": "inference", "labels": {"app": "vllm"}, "annotations": {"prometheus.io/probe": "true"}},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.7", "loadBalancerIP": "1.2.3.4",
                "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}, {"port": 9000, "protocol": "UDP"}]}
        }))
        .unwrap();
        let g = build_service(&svc);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].targets, ["vllm.inference.svc:8000"]);
        let l = &g[0].labels;
        for (k, v) in [
            ("__meta_kubernetes_namespace", "inference"),
            ("__meta_kubernetes_service_name", "vllm"),
            ("__meta_kubernetes_service_label_app", "vllm"),
            ("__meta_kubernetes_service_annotation_prometheus_io_probe", "true"),
            ("__meta_kubernetes_service_port_name", "http"),
            ("__meta_kubernetes_service_port_number", "8000"),
            ("__meta_kubernetes_service_port_protocol", "TCP"),
            ("__meta_kubernetes_service_type", "LoadBalancer"),
            ("__meta_kubernetes_service_cluster_ip", "10.96.0.7"),
            ("__meta_kubernetes_service_loadbalancer_ip", "1.2.3.4"),
        ] {
            assert_eq!(l.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert_eq!(g[1].labels["__meta_kubernetes_service_port_name"], "");
        let ext: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db", "namespace": "d"},
            "spec": {"type": "ExternalName", "externalName": "db.example.com", "ports": [{"port": 5432}]}
        }))
        .unwrap();
        let g = build_service(&ext);
        assert_eq!(g[0].labels["__meta_kubernetes_service_external_name"], "db.example.com");
        assert!(!g[0].labels.contains_key("__meta_kubernetes_service_cluster_ip"));
        assert!(!g[0].labels.contains_key("__meta_kubernetes_service_loadbalancer_ip"));
    }

    #[test]
    fn ingress_targets_and_schemes() {
        let ing: Ingress = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "inference", "annotations": {"kubernetes.io/ingress.class": "nginx"}},
            "spec": {"ingressClassName": "nginx",
                "tls": [{"hosts": ["*.example.com"]}],
                "rules": [
                    {"host": "api.example.com", "http": {"paths": [
                        {"path": "/v1", "pathType": "Prefix", "backend": {"service": {"name": "vllm", "port": {"number": 8000}}}},
                        {"pathType": "Prefix", "backend": {"service": {"name": "vllm", "port": {"number": 8000}}}}]}},
                    {"host": "example.com"},
                    {"host": "a.b.example.com"}]}
        }))
        .unwrap();
        let g = build_ingress(&ing);
        assert_eq!(g.len(), 4);
        assert_eq!(g[0].targets, ["api.example.com"]);
        assert_eq!(g[0].labels["__meta_kubernetes_ingress_scheme"], "https");
        assert_eq!(g[0].labels["__meta_kubernetes_ingress_path"], "/v1");
        assert_eq!(g[1].labels["__meta_kubernetes_ingress_path"], "/", "an empty path is /");
        assert_eq!(g[2].labels["__meta_kubernetes_ingress_scheme"], "http", "*.example.com does not cover example.com");
        assert_eq!(g[2].labels["__meta_kubernetes_ingress_path"], "/", "a rule without http: /");
        assert_eq!(g[3].labels["__meta_kubernetes_ingress_scheme"], "http", "* stands for one label");
        assert_eq!(g[0].labels["__meta_kubernetes_ingress_class_name"], "nginx");
        assert_eq!(g[0].labels["__meta_kubernetes_ingress_name"], "web");
        assert_eq!(g[0].labels["__meta_kubernetes_ingress_host"], "api.example.com");
        assert_eq!(g[0].labels["__meta_kubernetes_ingress_annotation_kubernetes_io_ingress_class"], "nginx");
    }
}
