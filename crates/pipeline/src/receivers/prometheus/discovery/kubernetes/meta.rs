//! The label sets every role shares, named as Prometheus names them
//! (`discovery/kubernetes/*.go`): object metadata, a pod's, a service's, a
//! node's (for `attach_metadata`), and the sanitizing of keys.

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

pub(super) const META: &str = "__meta_kubernetes_";

pub(super) type Labels = BTreeMap<String, String>;

/// Prometheus's `strutil.SanitizeLabelName`: every character outside
/// `[a-zA-Z0-9_]` becomes `_` (one per character, not per byte).
pub fn sanitize_label_name(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// `<role>_label_*`, `<role>_labelpresent_*`, and with `annotations`
/// `<role>_annotation_*`, `<role>_annotationpresent_*`.
pub(super) fn add_labels_and_annotations(ls: &mut Labels, meta: &ObjectMeta, role: &str, annotations: bool) {
    for (k, v) in meta.labels.iter().flatten() {
        let n = sanitize_label_name(k);
        ls.insert(format!("{META}{role}_label_{n}"), v.clone());
        ls.insert(format!("{META}{role}_labelpresent_{n}"), "true".into());
    }
    if annotations {
        for (k, v) in meta.annotations.iter().flatten() {
            let n = sanitize_label_name(k);
            ls.insert(format!("{META}{role}_annotation_{n}"), v.clone());
            ls.insert(format!("{META}{role}_annotationpresent_{n}"), "true".into());
        }
    }
}

/// `<role>_name` and the object's labels and annotations.
pub(super) fn add_object_meta(ls: &mut Labels, meta: &ObjectMeta, role: &str) {
    ls.insert(format!("{META}{role}_name"), meta.name.clone().unwrap_or_default());
    add_labels_and_annotations(ls, meta, role, true);
}

pub(super) use crate::receivers::prometheus::discovery::join_host_port;

/// Prometheus' `podLabels`: the pod's own labels, without its namespace
/// and containers.
pub(super) fn pod_labels(pod: &Pod) -> Labels {
    let status = pod.status.clone().unwrap_or_default();
    let mut ls = Labels::new();
    ls.insert(format!("{META}pod_ip"), status.pod_ip.clone().unwrap_or_default());
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.to_lowercase())
        .unwrap_or_else(|| "unknown".into());
    ls.insert(format!("{META}pod_ready"), ready);
    ls.insert(format!("{META}pod_phase"), status.phase.clone().unwrap_or_default());
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    ls.insert(format!("{META}pod_node_name"), node);
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
    ls
}

/// Prometheus' `serviceLabels`: name, namespace, labels, annotations.
pub(super) fn service_labels(svc: &Service) -> Labels {
    let mut ls = Labels::new();
    add_object_meta(&mut ls, &svc.metadata, "service");
    ls.insert(format!("{META}namespace"), svc.metadata.namespace.clone().unwrap_or_default());
    ls
}

/// `attach_metadata: {node: true}`: the node's name and labels (not its
/// annotations or addresses), when the node is known.
pub(super) fn add_node_labels(
    ls: &mut Labels,
    node_name: Option<&str>,
    nodes: Option<&BTreeMap<String, std::sync::Arc<Node>>>,
) {
    let (Some(name), Some(nodes)) = (node_name, nodes) else { return };
    let Some(node) = nodes.get(&format!("/{name}")) else { return };
    ls.insert(format!("{META}node_name"), name.to_string());
    add_labels_and_annotations(ls, &node.metadata, "node", false);
}
