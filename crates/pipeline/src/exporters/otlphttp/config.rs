//! `exporters.otlphttp`: keys shaped like the Collector's `otlphttp` exporter.

use crate::exporters::otlp::config::{Compression, default_timeout, validate_common};
use crate::exporters::shared::{QueueConfig, RetryConfig};
use crate::primitives::Duration;
use crate::primitives::{AuthRef, ExporterTls};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct OtlpHttpConfig {
    /// Base URL; `/v1/metrics` is appended (never doubled).
    pub endpoint: Option<String>,
    /// The full metrics URL, used as given.
    pub metrics_endpoint: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub auth: Option<AuthRef>,
    #[serde(default)]
    pub tls: ExporterTls,
    #[serde(default)]
    pub compression: Compression,
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    #[serde(default)]
    pub retry_on_failure: RetryConfig,
    #[serde(default)]
    pub sending_queue: QueueConfig,
    #[serde(default)]
    pub trim_metric_suffixes: bool,
    /// Probe the endpoint before starting: `fail` (default), `warn`, `off`.
    #[serde(default)]
    pub startup_check: crate::exporters::probe::StartupCheck,
    /// Also send one real `infertel_canary` data point at startup (default off).
    #[serde(default)]
    pub canary: bool,
    /// Requests are cut at data-point boundaries to at most this many bytes
    /// of uncompressed protobuf (default 4,000,000: under gRPC's default
    /// 4 MiB receive limit); a request the receiver still refuses as too
    /// large is split in halves down to one data point.
    #[serde(default = "crate::exporters::otlp::config::default_max_request_bytes")]
    pub max_request_bytes: crate::primitives::ByteSize,
}

/// `base` + `/v1/metrics`, without a double slash and without doubling a
/// path that already ends in `/v1/metrics`.
pub fn metrics_url(base: &str) -> String {
    let b = base.trim_end_matches('/');
    if b.ends_with("/v1/metrics") { b.to_string() } else { format!("{b}/v1/metrics") }
}

impl OtlpHttpConfig {
    pub fn url(&self) -> Result<String, String> {
        let u = match (&self.metrics_endpoint, &self.endpoint) {
            (Some(m), _) if !m.is_empty() => {
                // As given; only an empty path becomes "/" (url does that).
                m.clone()
            }
            (_, Some(e)) if !e.is_empty() => metrics_url(e),
            _ => return Err("set endpoint (base URL, e.g. https://otlp.example:4318) or metrics_endpoint".into()),
        };
        let parsed = url::Url::parse(&u).map_err(|e| format!("endpoint {u:?}: {e}"))?;
        if parsed.scheme() != "http" && parsed.scheme() != "https" {
            return Err(format!("endpoint {u:?}: scheme must be http or https"));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(format!("endpoint {u:?}: no host"));
        }
        Ok(if parsed.path().is_empty() { parsed.to_string() } else { u })
    }

    pub fn validate(&self) -> Result<(), String> {
        self.url()?;
        validate_common(&self.headers, &self.auth, &self.retry_on_failure, &self.sending_queue, &self.tls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(y: &str) -> OtlpHttpConfig {
        serde_yaml::from_str(y).unwrap()
    }

    #[test]
    fn v1_metrics_is_appended_never_doubled() {
        assert_eq!(cfg("endpoint: https://x.example:443").url().unwrap(), "https://x.example:443/v1/metrics");
        assert_eq!(cfg("endpoint: https://x.example/").url().unwrap(), "https://x.example/v1/metrics");
        assert_eq!(cfg("endpoint: https://x.example/otlp").url().unwrap(), "https://x.example/otlp/v1/metrics");
        assert_eq!(cfg("endpoint: https://x.example/v1/metrics").url().unwrap(), "https://x.example/v1/metrics");
        assert_eq!(cfg("endpoint: https://x.example/v1/metrics/").url().unwrap(), "https://x.example/v1/metrics");
        assert_eq!(
            cfg("metrics_endpoint: http://h:1/custom/path\nendpoint: http://ignored").url().unwrap(),
            "http://h:1/custom/path"
        );
        assert!(cfg("headers: {}").validate().is_err());
        assert!(cfg("endpoint: ftp://h").validate().is_err());
    }
}
