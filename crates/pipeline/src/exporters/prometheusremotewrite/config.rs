//! `exporters.prometheusremotewrite`: keys shaped like the Collector's
//! exporter of the same name.

use crate::config::{ByteSize, Duration};
use crate::exporters::probe::StartupCheck;
use crate::exporters::shared::{AuthRef, ExporterTls, QueueConfig, RetryConfig};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Headers the protocol owns; user `headers` may not override them.
pub const RESERVED_HEADERS: &[&str] =
    &["content-encoding", "content-type", "x-prometheus-remote-write-version", "user-agent"];

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RemoteWriteConfig {
    /// The full write URL, e.g. `http://prometheus:9090/api/v1/write`.
    pub endpoint: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub auth: Option<AuthRef>,
    #[serde(default)]
    pub tls: ExporterTls,
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    /// Upper bound on one request's uncompressed protobuf size.
    #[serde(default = "default_max_batch")]
    pub max_batch_size_bytes: ByteSize,
    /// Send HELP/TYPE/UNIT as WriteRequest metadata.
    #[serde(default)]
    pub send_metadata: bool,
    /// Labels added to every series that does not have them.
    #[serde(default)]
    pub external_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub retry_on_failure: RetryConfig,
    #[serde(default, alias = "remote_write_queue")]
    pub sending_queue: QueueConfig,
    /// Probe the endpoint before starting: `fail` (default), `warn`, `off`.
    #[serde(default)]
    pub startup_check: StartupCheck,
    /// Also write one real `infertel_canary` sample at startup; default on
    /// for Elasticsearch endpoints (`/_prometheus/` in the path).
    pub canary: Option<bool>,
    /// Prometheus' `write_relabel_configs`: applied to every series before
    /// it is queued; a series they drop is not sent (counted in
    /// `infertel_exporter_relabel_dropped_samples_total`).
    #[serde(default)]
    pub write_relabel_configs: Vec<infertel_relabel::RelabelConfig>,
    /// An HTTP proxy for the requests (`http://host:port`).
    pub proxy_url: Option<String>,
    #[serde(default = "yes")]
    pub follow_redirects: bool,
    /// `false`: HTTP/1.1 only (over TLS, HTTP/2 is otherwise negotiated).
    #[serde(default = "yes")]
    pub enable_http2: bool,
}

fn yes() -> bool {
    true
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_max_batch() -> ByteSize {
    ByteSize(3_000_000)
}

impl RemoteWriteConfig {
    pub fn client_options(&self) -> crate::http::ClientOptions {
        crate::http::ClientOptions {
            proxy_url: self.proxy_url.clone(),
            follow_redirects: self.follow_redirects,
            enable_http2: self.enable_http2,
            env_proxy: true,
        }
    }

    pub fn canary(&self) -> bool {
        self.canary.unwrap_or(self.endpoint.contains("/_prometheus/"))
    }

    pub fn validate(&self) -> Result<(), String> {
        if let Some((_, after)) = self.endpoint.split_once("://")
            && (after.is_empty() || after.starts_with('/'))
        {
            return Err(format!("endpoint {:?}: no host (is an environment variable in it empty?)", self.endpoint));
        }
        let url = url::Url::parse(&self.endpoint).map_err(|e| format!("endpoint {:?}: {e}", self.endpoint))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(format!("endpoint {:?}: scheme must be http or https", self.endpoint));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("endpoint {:?}: no host", self.endpoint));
        }
        for k in self.headers.keys() {
            if RESERVED_HEADERS.contains(&k.to_ascii_lowercase().as_str()) {
                return Err(format!("headers: {k:?} is set by the remote-write protocol and cannot be overridden"));
            }
            reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("headers: {k:?} is not a valid header name"))?;
        }
        for (k, v) in &self.headers {
            reqwest::header::HeaderValue::from_str(v)
                .map_err(|_| format!("headers: value of {k:?} has characters not allowed in a header"))?;
        }
        if self.max_batch_size_bytes.0 == 0 {
            return Err("max_batch_size_bytes must be greater than 0".into());
        }
        if self.auth.is_some() && self.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) {
            return Err("set either auth.authenticator or an Authorization header, not both".into());
        }
        infertel_relabel::Relabeler::new(&self.write_relabel_configs)
            .map_err(|e| format!("write_relabel_configs: {e}"))?;
        if let Some(p) = self.proxy_url.as_deref().filter(|p| !p.is_empty())
            && url::Url::parse(p).is_err()
        {
            return Err(format!("proxy_url {p:?}: not a URL"));
        }
        self.retry_on_failure.validate()?;
        self.sending_queue.validate()?;
        self.tls.settings().validate_present().map_err(|e| format!("tls: {e}"))?;
        Ok(())
    }
}
