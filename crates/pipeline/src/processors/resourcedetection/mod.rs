//! Processor `resourcedetection` (the Collector's newer name
//! `resource_detection` is the same processor), as contrib's: `detectors`
//! run in order at start (`env`, `system`, `k8s_api`/`k8snode`, see their
//! files), the first detector to give a key wins, and the result is written
//! onto every series' resource (its target, see `pdata.rs`): with `override:
//! true` (the default) over what the series has, with `override: false`
//! only where it has nothing. `service.name` is `job`, so an
//! `OTEL_RESOURCE_ATTRIBUTES=service.name=x` renames the job with override on,
//! as the Collector's remote write would.
//!
//! Detection is bounded by `timeout` (default 5s). A detector that fails
//! stops the agent from starting with the detector's reason, as a failed
//! `Start` stops the Collector; `refresh_interval` re-runs detection while
//! running, and a failed refresh keeps the last resource and is logged.
//! Cloud detectors (`ec2`, `eks`, `gcp`, `azure`, ...) are errors naming
//! the detector until they are built; their config sections are accepted.

pub mod env;
pub mod k8s_api;
pub mod system;

use crate::consumer::{BoxFuture, Consumer};
use crate::primitives::Duration;
use crate::processors::actions::{self, ActionConfig};
use crate::processors::rewrite::{Rewrite, Scope};
use crate::telemetry::Telemetry;
use infertel_model::Batch;
use serde::Deserialize;
use std::sync::{Arc, RwLock, Weak};

/// Detected attributes, in the order found.
pub type Detected = Vec<(String, String)>;
/// How detectors read the environment (tests pass their own).
pub type Env = dyn Fn(&str) -> Option<String> + Sync;

/// `resource_attributes.<key>.enabled`, as contrib's generated configs.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Enabled {
    pub enabled: bool,
}

/// Detector names contrib has that this build does not.
const CLOUD: &[&str] = &[
    "aks",
    "akamai",
    "alibaba_ecs",
    "azure",
    "azurecontainerapps",
    "consul",
    "digitalocean",
    "docker",
    "ec2",
    "ecs",
    "eks",
    "elastic_beanstalk",
    "elasticbeanstalk",
    "gcp",
    "heroku",
    "hetzner",
    "ibmcloud_classic",
    "ibmcloud_vpc",
    "kubeadm",
    "lambda",
    "nova",
    "openshift",
    "oraclecloud",
    "scaleway",
    "tencent_cvm",
    "upcloud",
    "vultr",
];

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResourceDetectionConfig {
    #[serde(default = "default_detectors")]
    pub detectors: Vec<String>,
    #[serde(default = "yes", rename = "override")]
    pub override_: bool,
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    #[serde(default)]
    pub refresh_interval: Duration,
    /// For cloud metadata services, which this build does not query.
    #[serde(default)]
    pub fail_on_missing_metadata: bool,
    #[serde(default)]
    pub env: env::EnvConfig,
    #[serde(default)]
    pub system: system::SystemConfig,
    #[serde(default)]
    pub k8s_api: k8s_api::K8sApiConfig,
    #[serde(default)]
    pub k8snode: k8s_api::K8sApiConfig,
}

fn default_detectors() -> Vec<String> {
    vec!["env".into()]
}
fn yes() -> bool {
    true
}
fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

impl Default for ResourceDetectionConfig {
    fn default() -> Self {
        ResourceDetectionConfig {
            detectors: default_detectors(),
            override_: true,
            timeout: default_timeout(),
            refresh_interval: Duration::default(),
            fail_on_missing_metadata: false,
            env: Default::default(),
            system: Default::default(),
            k8s_api: Default::default(),
            k8snode: Default::default(),
        }
    }
}

impl ResourceDetectionConfig {
    /// Reads the processor's section: the cloud detectors' sections are
    /// accepted as written (they matter only once those detectors exist).
    pub fn from_value(v: serde_yaml::Value) -> Result<ResourceDetectionConfig, String> {
        let mut v = v;
        if let Some(m) = v.as_mapping_mut() {
            for c in CLOUD {
                m.remove(*c);
            }
        }
        if v.is_null() {
            return Ok(ResourceDetectionConfig::default());
        }
        serde_yaml::from_value(v).map_err(|e| e.to_string())
    }

    /// Errors as `(key relative to the processor, message)`.
    pub fn check(&self) -> Result<(), (String, String)> {
        for (i, d) in self.detectors.iter().enumerate() {
            match d.as_str() {
                "env" | "system" | "k8s_api" | "k8snode" => {}
                c if CLOUD.contains(&c) => {
                    return Err((
                        format!("detectors[{i}]"),
                        format!(
                            "detector {c:?} is not built yet (env, system, k8s_api): set what it would detect with the resource processor or OTEL_RESOURCE_ATTRIBUTES"
                        ),
                    ));
                }
                other => return Err((format!("detectors[{i}]"), format!("invalid detector key: {other}"))),
            }
        }
        if self.timeout.get().is_zero() {
            return Err(("timeout".into(), "must be greater than 0".into()));
        }
        self.system.check().map_err(|(k, e)| (format!("system.{k}"), e))?;
        self.k8s_api.check().map_err(|(k, e)| (format!("k8s_api.{k}"), e))?;
        self.k8snode.check().map_err(|(k, e)| (format!("k8snode.{k}"), e))?;
        Ok(())
    }

    /// Runs the detectors in order, bounded by `timeout`; the first to give
    /// a key wins.
    pub async fn detect(&self, env: &Env) -> Result<Detected, String> {
        let run = async {
            let mut out: Detected = Vec::new();
            for d in &self.detectors {
                let got = match d.as_str() {
                    "env" => env::detect(&self.env, env),
                    "system" => system::detect(&self.system).await,
                    "k8s_api" => k8s_api::detect(&self.k8s_api, env).await,
                    "k8snode" => {
                        tracing::warn!(
                            "resourcedetection: the k8snode detector name is deprecated, use k8s_api instead"
                        );
                        k8s_api::detect(&self.k8snode, env).await
                    }
                    other => Err(format!("invalid detector key: {other}")),
                }
                .map_err(|e| format!("detector {d}: {e}"))?;
                for (k, v) in got {
                    if !out.iter().any(|(n, _)| *n == k) {
                        out.push((k, v));
                    }
                }
            }
            Ok(out)
        };
        match tokio::time::timeout(self.timeout.get(), run).await {
            Ok(r) => r,
            Err(_) => Err(format!("detection did not finish within the timeout ({})", self.timeout)),
        }
    }

    /// The resource processor's actions that write `found`.
    fn actions(&self, found: &Detected) -> Result<Vec<actions::Action>, String> {
        let list: Vec<ActionConfig> = found
            .iter()
            .filter(|(k, _)| crate::processors::pdata::resource_label(k) != infertel_model::METRIC_NAME)
            .map(|(k, v)| ActionConfig {
                key: k.clone(),
                value: Some(serde_yaml::Value::String(v.clone())),
                pattern: None,
                from_attribute: None,
                from_context: None,
                converted_type: None,
                action: if self.override_ { "upsert" } else { "insert" }.into(),
            })
            .collect();
        actions::compile(&list).map_err(|(_, e)| e)
    }

    pub fn build(
        &self,
        id: String,
        next: Arc<dyn Consumer>,
        telemetry: &Telemetry,
        dry: bool,
    ) -> Result<Arc<ResourceDetection>, String> {
        // `validate` and `check` do not detect: they touch no network.
        let found = if dry { Vec::new() } else { block_on(self.detect(&|k| std::env::var(k).ok()))?? };
        tracing::info!(processor = %id, "resource detected: {}", describe(&found));
        let rewrite =
            Rewrite::new(id.clone(), Scope::Resource, self.actions(&found)?, None, None, next.clone(), telemetry);
        let p = Arc::new(ResourceDetection {
            id,
            cfg: self.clone(),
            next,
            telemetry: telemetry.clone(),
            found: RwLock::new(found),
            current: RwLock::new(rewrite),
        });
        if !dry
            && !self.refresh_interval.get().is_zero()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(refresh(Arc::downgrade(&p), self.refresh_interval.get()));
        }
        Ok(p)
    }
}

fn describe(found: &Detected) -> String {
    if found.is_empty() {
        return "nothing".into();
    }
    found.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// Runs `f` to completion on a runtime of its own, on a thread of its own,
/// so graph building (which is synchronous, and may run inside the agent's
/// runtime on a reload) can wait for detection as the Collector's `Start`
/// does.
fn block_on<F>(f: F) -> Result<F::Output, String>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(f))
                .map_err(|e| format!("detection runtime: {e}"))
        })
        .join()
        .unwrap_or_else(|_| Err("detection failed unexpectedly".into()))
    })
}

async fn refresh(p: Weak<ResourceDetection>, every: std::time::Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(p) = p.upgrade() else { return };
        match p.cfg.detect(&|k| std::env::var(k).ok()).await {
            Ok(found) => p.replace(found),
            Err(e) => tracing::warn!(processor = %p.id, "resource refresh failed, the last resource stays: {e}"),
        }
    }
}

pub struct ResourceDetection {
    id: String,
    cfg: ResourceDetectionConfig,
    next: Arc<dyn Consumer>,
    telemetry: Telemetry,
    found: RwLock<Detected>,
    current: RwLock<Arc<Rewrite>>,
}

impl ResourceDetection {
    pub(crate) fn replace(&self, found: Detected) {
        if *self.found.read().unwrap_or_else(|p| p.into_inner()) == found {
            return;
        }
        match self.cfg.actions(&found) {
            Ok(list) => {
                tracing::info!(processor = %self.id, "resource changed: {}", describe(&found));
                let r = Rewrite::new(
                    self.id.clone(),
                    Scope::Resource,
                    list,
                    None,
                    None,
                    self.next.clone(),
                    &self.telemetry,
                );
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = r;
                *self.found.write().unwrap_or_else(|p| p.into_inner()) = found;
            }
            Err(e) => {
                tracing::warn!(processor = %self.id, "resource refresh gave unusable attributes, the last resource stays: {e}")
            }
        }
    }
}

impl Consumer for ResourceDetection {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        let r = self.current.read().unwrap_or_else(|p| p.into_inner()).clone();
        Box::pin(async move { r.consume(batch).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> ResourceDetectionConfig {
        ResourceDetectionConfig::from_value(serde_yaml::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn defaults_are_contribs() {
        let c = cfg("{}");
        assert_eq!(c.detectors, vec!["env"]);
        assert!(c.override_);
        assert_eq!(c.timeout.get(), std::time::Duration::from_secs(5));
        assert!(c.refresh_interval.get().is_zero());
        assert_eq!(ResourceDetectionConfig::from_value(serde_yaml::Value::Null).unwrap(), c);
    }

    #[test]
    fn detectors_are_checked_by_name() {
        let c = cfg("{detectors: [env, system, k8snode, k8s_api], ec2: {tags: ['^x$']}, eks: {}}");
        assert!(c.check().is_ok());
        let e = cfg("{detectors: [env, ec2]}").check().unwrap_err();
        assert_eq!(e.0, "detectors[1]");
        assert!(e.1.contains("\"ec2\" is not built yet"), "{e:?}");
        assert_eq!(cfg("{detectors: [envv]}").check().unwrap_err().1, "invalid detector key: envv");
        assert!(
            ResourceDetectionConfig::from_value(serde_yaml::from_str("{detector: [env]}").unwrap())
                .unwrap_err()
                .contains("unknown field `detector`")
        );
        assert_eq!(
            cfg("{detectors: [k8s_api], k8s_api: {auth_type: kubeconfig}}").check().unwrap_err().0,
            "k8s_api.auth_type"
        );
    }

    #[tokio::test]
    async fn the_first_detector_to_give_a_key_wins() {
        let env = |k: &str| match k {
            "OTEL_RESOURCE_ATTRIBUTES" => Some("host.name=from-env,team=ml".to_string()),
            "K8S_NODE_NAME" => Some("gpu-node-3".to_string()),
            _ => None,
        };
        let c = cfg(
            "{detectors: [env, system, k8snode], system: {hostname_sources: [os]}, k8snode: {resource_attributes: {k8s.node.uid: {enabled: false}, k8s.cluster.uid: {enabled: false}}}}",
        );
        let got = c.detect(&env).await.unwrap();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_ne!(kernel.trim(), "from-env");
        assert_eq!(
            got,
            vec![
                ("host.name".to_string(), "from-env".to_string()),
                ("team".to_string(), "ml".to_string()),
                ("os.type".to_string(), "linux".to_string()),
                ("k8s.node.name".to_string(), "gpu-node-3".to_string()),
            ]
        );
        let missing = |_: &str| None;
        let e = cfg("{detectors: [k8s_api]}").detect(&missing).await.unwrap_err();
        assert!(e.starts_with("detector k8s_api: node name can't be found: set K8S_NODE_NAME"), "{e}");
    }
}
