//! `exporters.otlp` (gRPC): keys shaped like the Collector's `otlp` exporter.

use crate::exporters::shared::{QueueConfig, RetryConfig};
use crate::primitives::Duration;
use crate::primitives::{AuthRef, ExporterTls};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Body compression: gzip (default), zstd or none.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    Gzip,
    Zstd,
    None,
}

impl Compression {
    pub fn header(self) -> Option<&'static str> {
        match self {
            Compression::Gzip => Some("gzip"),
            Compression::Zstd => Some("zstd"),
            Compression::None => None,
        }
    }
}

pub fn default_max_request_bytes() -> crate::primitives::ByteSize {
    crate::primitives::ByteSize(4_000_000)
}

/// Headers OTLP owns; user `headers` may not override them.
pub const RESERVED_HEADERS: &[&str] =
    &["content-encoding", "content-type", "user-agent", "te", "grpc-encoding", "grpc-accept-encoding", "grpc-timeout"];

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// `host:port` (TLS unless `tls.insecure`), or a URL whose `http://` or
    /// `https://` scheme decides.
    pub endpoint: String,
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
    /// Drop a counter's `_total` and a `# UNIT` suffix from names (OTel mode only).
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
    /// The Collector's gRPC client settings (`configgrpc`): accepted so
    /// pasted configs load. One endpoint is one HTTP/2 connection here, so
    /// `balancer_name` has nothing to balance; the others tune sockets and
    /// keepalive tonic sets itself.
    #[serde(default)]
    pub balancer_name: Option<String>,
    #[serde(default)]
    pub authority: Option<String>,
    #[serde(default)]
    pub wait_for_ready: bool,
    #[serde(default)]
    pub read_buffer_size: Option<u64>,
    #[serde(default)]
    pub write_buffer_size: Option<u64>,
    #[serde(default)]
    pub keepalive: Option<ClientKeepalive>,
}

/// `keepalive` of the Collector's gRPC client: accepted.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientKeepalive {
    #[serde(default)]
    pub time: Option<Duration>,
    #[serde(default)]
    pub timeout: Option<Duration>,
    #[serde(default)]
    pub permit_without_stream: bool,
}

pub fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

/// Checks shared by both OTLP exporters.
pub fn validate_common(
    headers: &BTreeMap<String, String>,
    auth: &Option<AuthRef>,
    retry: &RetryConfig,
    queue: &QueueConfig,
    tls: &ExporterTls,
) -> Result<(), String> {
    for (k, v) in headers {
        if RESERVED_HEADERS.contains(&k.to_ascii_lowercase().as_str()) {
            return Err(format!("headers: {k:?} is set by the OTLP protocol and cannot be overridden"));
        }
        reqwest::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("headers: {k:?} is not a valid header name"))?;
        reqwest::header::HeaderValue::from_str(v)
            .map_err(|_| format!("headers: value of {k:?} has characters not allowed in a header"))?;
    }
    if auth.is_some() && headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) {
        return Err("set either auth.authenticator or an Authorization header, not both".into());
    }
    retry.validate()?;
    queue.validate()?;
    tls.settings().validate().map_err(|e| format!("tls: {e}"))?;
    Ok(())
}

impl OtlpConfig {
    /// The URI tonic connects to.
    pub fn uri(&self) -> Result<String, String> {
        let e = self.endpoint.trim();
        if e.is_empty() {
            return Err("endpoint is required (host:port, e.g. localhost:4317)".into());
        }
        let uri = if e.starts_with("http://") || e.starts_with("https://") {
            e.to_string()
        } else if e.contains("://") {
            return Err(format!("endpoint {e:?}: scheme must be http or https"));
        } else if self.tls.insecure {
            format!("http://{e}")
        } else {
            format!("https://{e}")
        };
        let u = url::Url::parse(&uri).map_err(|err| format!("endpoint {e:?}: {err}"))?;
        if u.host_str().is_none_or(str::is_empty) {
            return Err(format!("endpoint {e:?}: no host"));
        }
        Ok(uri)
    }

    pub fn validate(&self) -> Result<(), String> {
        self.uri()?;
        if self.tls.insecure_skip_verify {
            return Err(
                "tls.insecure_skip_verify is not supported by the gRPC exporter; set tls.ca_file instead".into()
            );
        }
        validate_common(&self.headers, &self.auth, &self.retry_on_failure, &self.sending_queue, &self.tls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(y: &str) -> OtlpConfig {
        serde_yaml::from_str(y).unwrap()
    }

    #[test]
    fn endpoint_scheme_and_insecure() {
        assert_eq!(cfg("endpoint: collector:4317").uri().unwrap(), "https://collector:4317");
        assert_eq!(cfg("endpoint: collector:4317\ntls: {insecure: true}").uri().unwrap(), "http://collector:4317");
        assert_eq!(cfg("endpoint: http://c:4317").uri().unwrap(), "http://c:4317");
        assert!(cfg("endpoint: ftp://c:4317").validate().is_err());
        assert_eq!(cfg("endpoint: c:1").compression, Compression::Gzip);
        assert_eq!(cfg("endpoint: c:1\ncompression: zstd").compression, Compression::Zstd);
        assert!(serde_yaml::from_str::<OtlpConfig>("endpoint: c:1\ncompression: br").is_err());
        assert!(cfg("endpoint: c:1\nheaders: {content-type: x}").validate().is_err());
    }
}
