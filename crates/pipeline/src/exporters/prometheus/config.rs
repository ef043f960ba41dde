//! The `prometheus` exporter's config, contrib's `prometheusexporter` keys.

use crate::exporters::prometheusremotewrite::config::Toggle;
use crate::primitives::Duration;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    /// host:port to serve `/metrics` on; required, as in contrib.
    #[serde(default)]
    pub endpoint: String,
    /// `NAMESPACE_` before every metric name.
    #[serde(default)]
    pub namespace: String,
    /// Labels added to every series (a series' own label of the same name wins).
    #[serde(default)]
    pub const_labels: BTreeMap<String, String>,
    /// Write each sample's timestamp; default false (the scraper stamps it).
    #[serde(default)]
    pub send_timestamps: bool,
    /// A series not updated for this long is no longer served; default 5m.
    #[serde(default = "default_expiration")]
    pub metric_expiration: Duration,
    /// Scraped series carry their resource as labels already; accepted.
    #[serde(default)]
    pub resource_to_telemetry_conversion: Toggle,
    /// Serve OpenMetrics 1.0 to scrapers that ask for it; default false.
    #[serde(default)]
    pub enable_open_metrics: bool,
    /// Scraped names keep their suffixes; `false` is warned about.
    #[serde(default)]
    pub add_metric_suffixes: Option<bool>,
    #[serde(default)]
    pub tls: Option<crate::primitives::ServerTls>,
}

fn default_expiration() -> Duration {
    Duration::from_secs(300)
}

impl PrometheusConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.endpoint.is_empty() {
            return Err("endpoint: required (host:port to serve /metrics on, e.g. 0.0.0.0:8889)".into());
        }
        crate::primitives::listen_addr(&self.endpoint).map_err(|e| format!("endpoint {e}"))?;
        if !self.namespace.is_empty() && !infertel_relabel::is_valid_label_name(&self.namespace) {
            return Err(format!(
                "namespace {:?}: must be a valid metric name prefix ([a-zA-Z_][a-zA-Z0-9_]*)",
                self.namespace
            ));
        }
        for k in self.const_labels.keys() {
            if !infertel_relabel::is_valid_label_name(k) || k.starts_with("__") {
                return Err(format!("const_labels: {k:?} is not a valid label name"));
            }
        }
        if self.metric_expiration.get().is_zero() {
            return Err("metric_expiration: must be greater than 0".into());
        }
        if let Some(t) = &self.tls
            && (t.cert_file.as_os_str().is_empty() || t.key_file.as_os_str().is_empty())
        {
            return Err("tls: needs both cert_file and key_file".into());
        }
        Ok(())
    }

    /// Keys whose Collector behaviour differs for scraped data: `(key, why)`.
    pub fn warnings(&self) -> Vec<(&'static str, String)> {
        let mut w = Vec::new();
        if self.add_metric_suffixes == Some(false) {
            w.push((
                "add_metric_suffixes",
                "infertel serves scraped names as they are, with their _total and unit suffixes; the Collector would strip them here".to_string(),
            ));
        }
        w
    }
}
