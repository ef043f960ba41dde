//! Detector `k8s_api` (the deprecated name `k8snode` is the same detector):
//! the node this agent runs on, as contrib's k8s_api detector finds it. The
//! node name comes from the environment variable `node_from_env_var`
//! (default `K8S_NODE_NAME`, set from `spec.nodeName` through the downward
//! API, as `deploy/` does); the node's uid from the API server's node object;
//! `k8s.cluster.uid` from the uid of the `kube-system` namespace, skipped
//! with a warning when the service account may not read it (contrib's
//! behaviour, for deployments without that RBAC rule).
//!
//! `node_labels` is infertel's own key (contrib's detector reads no node
//! labels): the node labels named there (`"*"`: all) become
//! `k8s.node.label.<key>` attributes, the semantic conventions' name, so a
//! GPU node's `nvidia.com/gpu.product` or its zone reaches every series.

use super::{Detected, Enabled, Env};
use k8s_openapi::api::core::v1::{Namespace, Node};
use serde::Deserialize;

#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct K8sApiConfig {
    /// `serviceAccount` (default), `kubeConfig` or `none`.
    #[serde(default)]
    pub auth_type: Option<String>,
    /// The kubeconfig context, with `auth_type: kubeConfig`.
    #[serde(default)]
    pub context: Option<String>,
    #[serde(default)]
    pub node_from_env_var: Option<String>,
    #[serde(default)]
    pub resource_attributes: K8sAttributes,
    /// Accepted as contrib does; two requests at startup need no rate limit.
    #[serde(default)]
    pub kube_api_qps: Option<f64>,
    #[serde(default)]
    pub kube_api_burst: Option<u32>,
    /// Node labels to detect as `k8s.node.label.<key>`; `"*"` for all.
    #[serde(default)]
    pub node_labels: Vec<String>,
}

/// `resource_attributes`, contrib's list for the k8s_api detector.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct K8sAttributes {
    #[serde(rename = "k8s.node.name")]
    node_name: Option<Enabled>,
    #[serde(rename = "k8s.node.uid")]
    node_uid: Option<Enabled>,
    #[serde(rename = "k8s.cluster.uid")]
    cluster_uid: Option<Enabled>,
}

impl K8sApiConfig {
    pub fn check(&self) -> Result<(), (String, String)> {
        match self.auth_type.as_deref() {
            None | Some("serviceAccount" | "kubeConfig" | "none") => {}
            Some("tls") => {
                return Err((
                    "auth_type".into(),
                    "auth_type tls is not built yet (serviceAccount, kubeConfig or none)".into(),
                ));
            }
            Some(other) => {
                return Err((
                    "auth_type".into(),
                    format!("invalid authType for kubernetes: {other} (serviceAccount, kubeConfig, none)"),
                ));
            }
        }
        Ok(())
    }

    fn enabled(&self, attr: &str) -> bool {
        let a = &self.resource_attributes;
        let set = match attr {
            "k8s.node.name" => a.node_name,
            "k8s.node.uid" => a.node_uid,
            _ => a.cluster_uid,
        };
        set.is_none_or(|e| e.enabled)
    }

    fn env_var(&self) -> &str {
        self.node_from_env_var.as_deref().filter(|v| !v.is_empty()).unwrap_or("K8S_NODE_NAME")
    }
}

async fn client(cfg: &K8sApiConfig) -> Result<kube::Client, String> {
    let config = match cfg.auth_type.as_deref().unwrap_or("serviceAccount") {
        "kubeConfig" => {
            let opts = kube::config::KubeConfigOptions {
                context: cfg.context.clone().filter(|c| !c.is_empty()),
                ..Default::default()
            };
            kube::Config::from_kubeconfig(&opts).await.map_err(|e| format!("kubeconfig: {e}"))?
        }
        "none" => {
            let mut c = kube::Config::incluster().map_err(|e| format!("in-cluster configuration: {e}"))?;
            c.auth_info = Default::default();
            c
        }
        _ => kube::Config::incluster()
            .map_err(|e| format!("in-cluster configuration: {e} (outside a cluster, set auth_type: kubeConfig)"))?,
    };
    kube::Client::try_from(config).map_err(|e| format!("kubernetes client: {e}"))
}

fn forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401 || s.code == 403)
}

pub async fn detect(cfg: &K8sApiConfig, env: &Env) -> Result<Detected, String> {
    let var = cfg.env_var();
    let Some(node) = env(var).filter(|v| !v.is_empty()) else {
        return Err(format!(
            "node name can't be found: set {var} to the node's name (env: [{{name: {var}, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}])"
        ));
    };
    let mut out: Detected = Vec::new();
    let wants_node = cfg.enabled("k8s.node.uid") || !cfg.node_labels.is_empty();
    let wants_api = wants_node || cfg.enabled("k8s.cluster.uid");
    let client = if wants_api { Some(client(cfg).await?) } else { None };
    if let Some(c) = &client
        && wants_node
    {
        let api: kube::Api<Node> = kube::Api::all(c.clone());
        let n = api.get(&node).await.map_err(|e| format!("failed getting k8s node UID of {node}: {e}"))?;
        if cfg.enabled("k8s.node.uid") {
            let uid = n.metadata.uid.clone().ok_or_else(|| format!("node {node} has no uid"))?;
            out.push(("k8s.node.uid".into(), uid));
        }
        let labels = n.metadata.labels.unwrap_or_default();
        let all = cfg.node_labels.iter().any(|k| k == "*");
        for (k, v) in &labels {
            if all || cfg.node_labels.contains(k) {
                out.push((format!("k8s.node.label.{k}"), v.clone()));
            }
        }
        for k in cfg.node_labels.iter().filter(|k| *k != "*" && !labels.contains_key(*k)) {
            tracing::info!("resourcedetection k8s_api: node {node} has no label {k:?}");
        }
    }
    if cfg.enabled("k8s.node.name") {
        out.push(("k8s.node.name".into(), node.clone()));
    }
    if let Some(c) = &client
        && cfg.enabled("k8s.cluster.uid")
    {
        let api: kube::Api<Namespace> = kube::Api::all(c.clone());
        match api.get("kube-system").await {
            Ok(ns) => {
                if let Some(uid) = ns.metadata.uid {
                    out.push(("k8s.cluster.uid".into(), uid));
                }
            }
            Err(e) if forbidden(&e) => tracing::warn!(
                "resourcedetection k8s_api: no permission to get the kube-system namespace, skipping k8s.cluster.uid; grant 'get' on namespaces/kube-system to fix ({e})"
            ),
            Err(e) => return Err(format!("failed getting k8s cluster UID: {e}")),
        }
    }
    Ok(out)
}
