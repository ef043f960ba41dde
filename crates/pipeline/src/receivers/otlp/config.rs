//! The `otlp` receiver's config: the Collector's `otlpreceiver` keys
//! (`protocols.grpc`, `protocols.http`), and how OTLP is mapped onto
//! Prometheus series (`otlp_translation_strategy`, `delta`, `max_stale`),
//! named as Prometheus names them.

use crate::primitives::Duration;
use crate::primitives::ServerTls;
use serde::Deserialize;

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct OtlpReceiverConfig {
    #[serde(default)]
    pub protocols: Protocols,
    /// `UnderscoreEscapingWithSuffixes` (Prometheus' default) or
    /// `NoTranslation` (names and attribute keys kept as sent).
    #[serde(default)]
    pub otlp_translation_strategy: Strategy,
    /// Delta sums and histograms: `cumulate` (default, per stream) or
    /// `reject` (refused in the partial success).
    #[serde(default)]
    pub delta: Delta,
    /// A delta stream not seen for this long is forgotten (its next point
    /// starts from zero); default 5m.
    #[serde(default = "five_minutes")]
    pub max_stale: Duration,
    /// Delta streams remembered at most; beyond, new delta streams are
    /// refused in the partial success; default 100000.
    #[serde(default = "max_streams")]
    pub max_delta_streams: usize,
}

fn five_minutes() -> Duration {
    Duration::from_secs(300)
}
fn max_streams() -> usize {
    100_000
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    #[default]
    UnderscoreEscapingWithSuffixes,
    UnderscoreEscapingWithoutSuffixes,
    NoTranslation,
    NoUTF8EscapingWithSuffixes,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Delta {
    #[default]
    Cumulate,
    Reject,
}

/// `protocols`: a protocol named (even with no settings) is served.
#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Protocols {
    #[serde(default, deserialize_with = "present")]
    pub grpc: Option<Grpc>,
    #[serde(default, deserialize_with = "present")]
    pub http: Option<Http>,
}

/// `grpc:` with no value is `grpc: {}`, as in the Collector.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    let v: Option<T> = Option::deserialize(d)?;
    Ok(Some(v.unwrap_or_default()))
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Grpc {
    #[serde(default = "grpc_endpoint")]
    pub endpoint: String,
    #[serde(default = "tcp")]
    pub transport: String,
    /// Largest request accepted, in MiB; default 4.
    #[serde(default = "four")]
    pub max_recv_msg_size_mib: u64,
    #[serde(default)]
    pub max_concurrent_streams: Option<u32>,
    /// Accepted (the Collector's socket tuning).
    #[serde(default)]
    pub read_buffer_size: Option<u64>,
    #[serde(default)]
    pub write_buffer_size: Option<u64>,
    /// Accepted: client metadata is not carried on series.
    #[serde(default)]
    pub include_metadata: bool,
    #[serde(default)]
    pub tls: Option<ServerTls>,
    #[serde(default)]
    pub keepalive: Option<Keepalive>,
}

/// The Collector's gRPC keepalive settings. `server_parameters.time` and
/// `.timeout` set the HTTP/2 pings; the others are accepted (tonic keeps
/// connections until the client closes them).
#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Keepalive {
    #[serde(default)]
    pub server_parameters: Option<ServerParameters>,
    #[serde(default)]
    pub enforcement_policy: Option<EnforcementPolicy>,
}

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct ServerParameters {
    #[serde(default)]
    pub max_connection_idle: Option<Duration>,
    #[serde(default)]
    pub max_connection_age: Option<Duration>,
    #[serde(default)]
    pub max_connection_age_grace: Option<Duration>,
    /// Ping an idle connection this often.
    #[serde(default)]
    pub time: Option<Duration>,
    /// Close a connection whose ping is not answered within this.
    #[serde(default)]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct EnforcementPolicy {
    #[serde(default)]
    pub min_time: Option<Duration>,
    #[serde(default)]
    pub permit_without_stream: bool,
}

impl Default for Grpc {
    fn default() -> Self {
        Grpc {
            endpoint: grpc_endpoint(),
            transport: tcp(),
            max_recv_msg_size_mib: 4,
            max_concurrent_streams: None,
            read_buffer_size: None,
            write_buffer_size: None,
            include_metadata: false,
            tls: None,
            keepalive: None,
        }
    }
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Http {
    #[serde(default = "http_endpoint")]
    pub endpoint: String,
    #[serde(default = "metrics_path")]
    pub metrics_url_path: String,
    /// Accepted; infertel carries metrics, so these paths answer 404.
    #[serde(default)]
    pub traces_url_path: Option<String>,
    #[serde(default)]
    pub logs_url_path: Option<String>,
    #[serde(default)]
    pub cors: Option<Cors>,
    #[serde(default)]
    pub include_metadata: bool,
    #[serde(default)]
    pub tls: Option<ServerTls>,
    /// Largest request body accepted (after decompression too); default 20 MiB.
    #[serde(default = "twenty_mib")]
    pub max_request_body_size: u64,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            endpoint: http_endpoint(),
            metrics_url_path: metrics_path(),
            traces_url_path: None,
            logs_url_path: None,
            cors: None,
            include_metadata: false,
            tls: None,
            max_request_body_size: twenty_mib(),
        }
    }
}

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Cors {
    /// Origins allowed, `*` matching any run of characters.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Request headers allowed beyond the CORS-safelisted ones.
    #[serde(default)]
    pub allowed_headers: Vec<String>,
    /// Seconds a browser may cache a preflight answer.
    #[serde(default)]
    pub max_age: Option<u64>,
}

fn grpc_endpoint() -> String {
    "localhost:4317".into()
}
fn http_endpoint() -> String {
    "localhost:4318".into()
}
fn metrics_path() -> String {
    "/v1/metrics".into()
}
fn tcp() -> String {
    "tcp".into()
}
fn four() -> u64 {
    4
}
fn twenty_mib() -> u64 {
    20 * 1024 * 1024
}

impl OtlpReceiverConfig {
    pub fn validate(&self) -> Result<(), String> {
        let p = &self.protocols;
        if p.grpc.is_none() && p.http.is_none() {
            return Err(
                "protocols: must specify at least one protocol when using the OTLP receiver (grpc, http)".into()
            );
        }
        if let Some(g) = &p.grpc {
            crate::primitives::listen_addr(&g.endpoint).map_err(|e| format!("protocols.grpc.endpoint {e}"))?;
            if g.transport != "tcp" {
                return Err(format!("protocols.grpc.transport {:?}: only tcp is built", g.transport));
            }
            if g.max_recv_msg_size_mib == 0 {
                return Err("protocols.grpc.max_recv_msg_size_mib must be greater than 0".into());
            }
            check_tls(&g.tls, "protocols.grpc.tls")?;
        }
        if let Some(h) = &p.http {
            crate::primitives::listen_addr(&h.endpoint).map_err(|e| format!("protocols.http.endpoint {e}"))?;
            if !h.metrics_url_path.starts_with('/') {
                return Err(format!("protocols.http.metrics_url_path {:?} must start with /", h.metrics_url_path));
            }
            check_tls(&h.tls, "protocols.http.tls")?;
        }
        if self.otlp_translation_strategy == Strategy::NoUTF8EscapingWithSuffixes {
            return Err("otlp_translation_strategy NoUTF8EscapingWithSuffixes: UTF-8 names cannot be carried here yet (UnderscoreEscapingWithSuffixes, UnderscoreEscapingWithoutSuffixes, NoTranslation)".into());
        }
        if self.max_stale.get().is_zero() {
            return Err("max_stale must be greater than 0".into());
        }
        Ok(())
    }
}

fn check_tls(t: &Option<ServerTls>, key: &str) -> Result<(), String> {
    if let Some(t) = t
        && (t.cert_file.as_os_str().is_empty() || t.key_file.as_os_str().is_empty())
    {
        return Err(format!("{key}: needs both cert_file and key_file"));
    }
    Ok(())
}
