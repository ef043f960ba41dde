//! How one OTLP request is sent over gRPC, and the retry loop both OTLP
//! exporters share, per the OTLP spec:
//! - gRPC: CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE
//!   and DATA_LOSS are retried; RESOURCE_EXHAUSTED only when the status
//!   carries a `google.rpc.RetryInfo`; every other code is dropped and
//!   counted. A `RetryInfo` delay is waited at least, then backoff goes on.
//! - HTTP (see `otlphttp/service.rs`): 429, 502, 503 and 504 are retried
//!   (honouring `Retry-After`), every other status is dropped and counted.
//! - Network failures are retried with exponential backoff and jitter.
//! - Partial success (`rejected_data_points`, `error_message`) is logged and
//!   counted in `infertel_exporter_rejected_points_total`, never retried.

use super::request_builder::Request;
use crate::consumer::BoxFuture;
use crate::exporters::otlp::config::{Compression, OtlpConfig};
use crate::exporters::probe::{self, EndpointState, ProbeResult, Protocol};
use crate::exporters::shared::RetryConfig;
use crate::extensions::ExtensionConfig;
use crate::telemetry::{DURATION_BOUNDS, Histogram, Telemetry};
use infertel_otlp::opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess;
use infertel_otlp::opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use prost::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::codec::CompressionEncoding;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// What one attempt came to.
pub enum Attempt {
    Ok(Option<ExportMetricsPartialSuccess>),
    /// Retry, after at least `delay` when the server said so.
    Retry {
        status: String,
        delay: Option<Duration>,
        message: String,
    },
    Fail {
        status: String,
        message: String,
    },
}

/// Sends one request (one attempt).
pub trait Transport: Send + Sync + 'static {
    fn attempt<'a>(&'a self, req: &'a Request, attempt: u32) -> BoxFuture<'a, Attempt>;
    fn endpoint(&self) -> &str;
    /// One attempt, classified with the error's full detail (the probe).
    fn probe<'a>(&'a self, req: &'a Request) -> BoxFuture<'a, ProbeResult>;
}

/// The outcome of a request after retries: `None` sent, `Some(reason)` dropped.
pub struct Sender<T: Transport> {
    pub exporter: String,
    pub transport: T,
    pub retry: RetryConfig,
    pub telemetry: Telemetry,
    pub state: Arc<EndpointState>,
    send_duration: Arc<Histogram>,
}

impl<T: Transport> Sender<T> {
    pub fn new(
        exporter: String,
        transport: T,
        retry: RetryConfig,
        telemetry: Telemetry,
        state: Arc<EndpointState>,
    ) -> Self {
        let send_duration = telemetry.histogram(
            "infertel_exporter_send_duration_seconds",
            "Time to send one request (each attempt), seconds.",
            &[("exporter", &exporter)],
            DURATION_BOUNDS,
        );
        Sender { exporter, transport, retry, telemetry, state, send_duration }
    }

    fn failed(&self, status: &str) {
        self.telemetry
            .counter(
                "infertel_exporter_failed_requests_total",
                "Requests that did not succeed, by HTTP status or gRPC code (or network, timeout).",
                &[("exporter", &self.exporter), ("status", status)],
            )
            .inc();
    }

    pub async fn send(&self, req: &Request) -> Option<&'static str> {
        let mut started = Instant::now();
        let mut attempt: u32 = 0;
        // Re-sends while paused on a configuration fault.
        let mut held: u32 = 0;
        let release = |held: u32| {
            if held > 0 {
                self.state.hold(-(req.samples as f64));
            }
        };
        loop {
            let t0 = Instant::now();
            let res = self.transport.attempt(req, attempt).await;
            self.send_duration.observe(t0.elapsed().as_secs_f64());
            let shown = |s: &str| if s.parse::<u16>().is_ok() { format!("HTTP {s}") } else { s.to_string() };
            match &res {
                Attempt::Ok(p) => {
                    self.state.note_response("OK", p.as_ref().map(|p| p.error_message.as_str()).unwrap_or(""))
                }
                Attempt::Fail { status, message } | Attempt::Retry { status, message, .. } => {
                    self.state.note_response(shown(status), message)
                }
            }
            let hint = match res {
                Attempt::Ok(partial) => {
                    release(held);
                    self.state.set_up();
                    if let Some(p) = partial.filter(|p| p.rejected_data_points != 0 || !p.error_message.is_empty()) {
                        self.telemetry
                            .counter(
                                "infertel_exporter_rejected_points_total",
                                "Data points the backend rejected in a partial success (not retried).",
                                &[("exporter", &self.exporter)],
                            )
                            .add(p.rejected_data_points.max(0) as u64);
                        if p.rejected_data_points > 0 {
                            tracing::warn!(
                                exporter = %self.exporter, endpoint = %self.state.endpoint,
                                "partial success: the backend rejected {} of {} data points (not retried): {}", p.rejected_data_points, req.points, p.error_message
                            );
                        } else {
                            tracing::warn!(exporter = %self.exporter, "the backend accepted everything with a warning: {}", p.error_message);
                        }
                    }
                    return None;
                }
                Attempt::Fail { status, message } if probe::holds(&status) => {
                    self.failed(&status);
                    if held == 0 {
                        self.state.hold(req.samples as f64);
                    }
                    held += 1;
                    let protocol = if status.parse::<u16>().is_ok() { Protocol::OtlpHttp } else { Protocol::OtlpGrpc };
                    self.state.pause(&probe::classify_status_str(
                        &status,
                        &message,
                        self.transport.endpoint(),
                        protocol,
                    ));
                    if !self.state.sleep_unless_stopping(self.state.backoff(held)).await {
                        release(held);
                        // The queue keeps it on disk, or counts it as
                        // dropped (reason shutdown) in memory.
                        if self.state.is_retired() {
                            tracing::info!(exporter = %self.exporter, endpoint = %self.state.endpoint, "reload: {} held samples go to the exporter that replaces this one ({status})", req.samples);
                        } else {
                            tracing::warn!(exporter = %self.exporter, endpoint = %self.state.endpoint, "shutdown while paused: {} held samples not delivered ({status})", req.samples);
                        }
                        return Some(crate::exporters::queue::SHUTDOWN);
                    }
                    started = Instant::now();
                    attempt = 0;
                    continue;
                }
                Attempt::Fail { status, message } if too_large(&status, &message) => {
                    release(held);
                    self.failed(&status);
                    self.state.set_up();
                    // The caller splits the request and sends the halves.
                    return Some(TOO_LARGE);
                }
                Attempt::Fail { status, message } => {
                    release(held);
                    self.failed(&status);
                    // The server refused the content, not the credentials
                    // or the URL: reachable and authorized, the flow resumes.
                    self.state.set_up();
                    tracing::error!(
                        exporter = %self.exporter, endpoint = %self.state.endpoint, status = %status,
                        "dropping {} samples ({} points): {status} is not retryable; receiver said: {}", req.samples, req.points, probe::redact_text(&message)
                    );
                    return Some("rejected");
                }
                Attempt::Retry { status, delay, message } => {
                    self.failed(&status);
                    tracing::warn!(exporter = %self.exporter, endpoint = %self.state.endpoint, status = %status, attempt, "OTLP export failed, will retry: {message}");
                    delay
                }
            };
            if !self.retry.enabled {
                release(held);
                tracing::error!(exporter = %self.exporter, "dropping {} samples: request failed and retry_on_failure is disabled", req.samples);
                return Some("retry_disabled");
            }
            attempt += 1;
            let backoff = self.retry.backoff(attempt);
            // A server-given delay is waited at least (capped by max_interval).
            let wait = hint.map(|h| h.min(self.retry.max_interval.get()).max(backoff)).unwrap_or(backoff);
            let max = self.retry.max_elapsed();
            if !max.is_zero() && started.elapsed() + wait > max {
                release(held);
                tracing::error!(
                    exporter = %self.exporter, endpoint = %self.state.endpoint,
                    "dropping {} samples: still failing after {:?} ({} attempts; retry_on_failure.max_elapsed_time)", req.samples, started.elapsed(), attempt
                );
                return Some("retries_exhausted");
            }
            if !self.state.sleep_unless_retired(wait).await {
                release(held);
                return Some(crate::exporters::queue::SHUTDOWN);
            }
        }
    }
}

// google.rpc.Status and RetryInfo, enough to read a throttling delay from
// `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The `RetryInfo.retry_delay` in a serialized `google.rpc.Status`, if any.
pub fn retry_info(details: &[u8]) -> Option<Duration> {
    let st = RpcStatus::decode(details).ok()?;
    let any = st.details.iter().find(|a| a.type_url.ends_with("/google.rpc.RetryInfo"))?;
    let ri = RetryInfo::decode(&any.value[..]).ok()?;
    let d = ri.retry_delay.unwrap_or_default();
    Some(Duration::from_secs(d.seconds.max(0) as u64) + Duration::from_nanos(d.nanos.max(0) as u64))
}

/// The message of a serialized `google.rpc.Status` (an OTLP/HTTP error body).
pub fn status_message(body: &[u8]) -> Option<String> {
    RpcStatus::decode(body).ok().map(|s| s.message).filter(|m| !m.is_empty())
}

/// What [`Sender::send`] returns for a request refused as too large: not a
/// drop yet, the caller splits it.
pub const TOO_LARGE: &str = "too_large";

/// HTTP 413, or gRPC RESOURCE_EXHAUSTED saying the message is larger than
/// the receiver's maximum (grpc-go: "grpc: received message larger than
/// max (N vs. M)"; tonic: "decoded message length too large").
pub fn too_large(status: &str, message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    status == "413"
        || (status == "ResourceExhausted"
            && (m.contains("larger than max") || m.contains("too large") || m.contains("message length")))
}

/// The spec's table: what a gRPC status means for a retry. Only a status
/// the server sent is read by its code: one the transport made (a
/// connection reset, a GOAWAY or RST_STREAM mid-call during a collector
/// rollout, surfacing as UNKNOWN or INTERNAL) carries its cause as
/// `source()` and is retried whatever its code.
pub fn classify_grpc(status: &tonic::Status) -> Attempt {
    use tonic::Code::*;
    let code = status.code();
    let name = format!("{code:?}");
    let message = status.message().to_string();
    let info = retry_info(status.details());
    if std::error::Error::source(status).is_some() {
        return Attempt::Retry { status: name, delay: info, message: format!("transport failure: {message}") };
    }
    match code {
        Cancelled | DeadlineExceeded | Aborted | OutOfRange | Unavailable | DataLoss => {
            Attempt::Retry { status: name, delay: info, message }
        }
        ResourceExhausted if info.is_some() => Attempt::Retry { status: name, delay: info, message },
        _ => Attempt::Fail { status: name, message },
    }
}

pub struct GrpcTransport {
    endpoint: String,
    /// Made on first use, inside the runtime (`infertel validate` builds
    /// exporters without one).
    channel: Endpoint,
    compression: Compression,
    client: std::sync::OnceLock<MetricsServiceClient<Channel>>,
    metadata: Vec<(MetadataKey<tonic::metadata::Ascii>, MetadataValue<tonic::metadata::Ascii>)>,
    auth: Option<ExtensionConfig>,
    timeout: Duration,
}

impl GrpcTransport {
    pub fn new(cfg: &OtlpConfig, auth: Option<ExtensionConfig>) -> Result<Self, String> {
        crate::http::ensure_crypto_provider();
        let uri = cfg.uri()?;
        let mut ep = Endpoint::from_shared(uri.clone())
            .map_err(|e| format!("endpoint {uri:?}: {e}"))?
            .timeout(cfg.timeout.get())
            .connect_timeout(cfg.timeout.get())
            .user_agent(format!("{} OTel-OTLP-Exporter-Rust", crate::http::user_agent()))
            .map_err(|e| format!("user agent: {e}"))?;
        if uri.starts_with("https://") {
            let mut tls = ClientTlsConfig::new();
            match &cfg.tls.ca_file {
                Some(ca) => {
                    let pem = std::fs::read(ca).map_err(|e| format!("tls.ca_file {}: {e}", ca.display()))?;
                    tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
                }
                None => tls = tls.with_native_roots(),
            }
            if let (Some(c), Some(k)) = (&cfg.tls.cert_file, &cfg.tls.key_file) {
                let cert = std::fs::read(c).map_err(|e| format!("tls.cert_file {}: {e}", c.display()))?;
                let key = std::fs::read(k).map_err(|e| format!("tls.key_file {}: {e}", k.display()))?;
                tls = tls.identity(tonic::transport::Identity::from_pem(cert, key));
            }
            if let Some(sn) = &cfg.tls.server_name_override {
                tls = tls.domain_name(sn.clone());
            }
            ep = ep.tls_config(tls).map_err(|e| format!("tls: {e}"))?;
        }
        let mut metadata = Vec::new();
        for (k, v) in &cfg.headers {
            let key = MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("headers: {k:?} is not a valid gRPC metadata key"))?;
            let val = MetadataValue::try_from(v.as_str())
                .map_err(|_| format!("headers: value of {k:?} is not valid gRPC metadata"))?;
            metadata.push((key, val));
        }
        Ok(GrpcTransport {
            endpoint: uri,
            channel: ep,
            compression: cfg.compression,
            client: Default::default(),
            metadata,
            auth,
            timeout: cfg.timeout.get(),
        })
    }
}

impl Transport for GrpcTransport {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn attempt<'a>(&'a self, req: &'a Request, _attempt: u32) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            match self.call(req).await {
                Ok(partial) => Attempt::Ok(partial),
                Err(status) => classify_grpc(&status),
            }
        })
    }

    fn probe<'a>(&'a self, req: &'a Request) -> BoxFuture<'a, ProbeResult> {
        Box::pin(async move {
            match self.call(req).await {
                Ok(_) => probe::classify_grpc(&tonic::Status::new(tonic::Code::Ok, "")),
                Err(status) => probe::classify_grpc(&status),
            }
        })
    }
}

impl GrpcTransport {
    /// One Export call with the configured metadata, auth and compression.
    async fn call(&self, req: &Request) -> Result<Option<ExportMetricsPartialSuccess>, tonic::Status> {
        {
            let mut r = tonic::Request::new(req.body.clone());
            r.set_timeout(self.timeout);
            for (k, v) in &self.metadata {
                r.metadata_mut().insert(k.clone(), v.clone());
            }
            if let Some(a) = &self.auth {
                match a.header() {
                    Ok((name, v)) => {
                        if let (Ok(k), Some(v)) = (
                            MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes()),
                            v.to_str().ok().and_then(|v| MetadataValue::try_from(v).ok()),
                        ) {
                            r.metadata_mut().insert(k, v);
                        }
                    }
                    Err(e) => {
                        tracing::error!(endpoint = %probe::redact_url(&self.endpoint), "authenticator: {}", probe::redact_text(&e))
                    }
                }
            }
            let mut client = self
                .client
                .get_or_init(|| {
                    let mut c = MetricsServiceClient::new(self.channel.connect_lazy())
                        .max_decoding_message_size(4 * 1024 * 1024);
                    match self.compression {
                        Compression::Gzip => {
                            c = c
                                .send_compressed(CompressionEncoding::Gzip)
                                .accept_compressed(CompressionEncoding::Gzip)
                        }
                        Compression::Zstd => {
                            c = c
                                .send_compressed(CompressionEncoding::Zstd)
                                .accept_compressed(CompressionEncoding::Zstd)
                        }
                        Compression::None => {}
                    }
                    c
                })
                .clone();
            client.export(r).await.map(|resp| resp.into_inner().partial_success)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn details(delay: Option<(i64, i32)>) -> Vec<u8> {
        let mut st = RpcStatus { code: 8, message: "slow down".into(), details: vec![] };
        if let Some((s, n)) = delay {
            let ri = RetryInfo { retry_delay: Some(ProtoDuration { seconds: s, nanos: n }) };
            st.details.push(ProtoAny {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: ri.encode_to_vec(),
            });
        }
        st.encode_to_vec()
    }

    fn is_retry(a: &Attempt) -> Option<Option<Duration>> {
        match a {
            Attempt::Retry { delay, .. } => Some(*delay),
            _ => None,
        }
    }

    /// An error whose cause is a status, as a transport layer wraps one
    /// (tonic then finds the status in the chain and keeps the chain).
    #[derive(Debug)]
    struct Wrapped(tonic::Status);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "transport: {}", self.0.message())
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// A connection reset mid-call surfaces as UNKNOWN (no status in the
    /// chain) and a reset stream as INTERNAL, both with the cause attached:
    /// retried. The same codes sent by a server are not.
    #[test]
    fn transport_made_statuses_are_retried_whatever_their_code() {
        let reset = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        )));
        assert_eq!(reset.code(), tonic::Code::Unknown);
        assert!(is_retry(&classify_grpc(&reset)).is_some(), "{reset:?}");
        let internal = tonic::Status::from_error(Box::new(Wrapped(tonic::Status::internal("stream reset"))));
        assert_eq!(internal.code(), tonic::Code::Internal);
        assert!(is_retry(&classify_grpc(&internal)).is_some(), "{internal:?}");
        for sent in [tonic::Status::unknown("x"), tonic::Status::internal("x")] {
            assert!(is_retry(&classify_grpc(&sent)).is_none(), "server-sent {sent:?} is not retried");
        }
    }

    #[test]
    fn grpc_codes_follow_the_spec_table() {
        use tonic::Code::*;
        for c in [Cancelled, DeadlineExceeded, Aborted, OutOfRange, Unavailable, DataLoss] {
            assert!(is_retry(&classify_grpc(&tonic::Status::new(c, "x"))).is_some(), "{c:?} is retryable");
        }
        for c in [
            Unknown,
            InvalidArgument,
            NotFound,
            AlreadyExists,
            PermissionDenied,
            Unauthenticated,
            FailedPrecondition,
            Unimplemented,
            Internal,
            ResourceExhausted,
        ] {
            assert!(is_retry(&classify_grpc(&tonic::Status::new(c, "x"))).is_none(), "{c:?} is not retryable");
        }
        let st = tonic::Status::with_details(ResourceExhausted, "slow down", details(Some((2, 500_000_000))).into());
        assert_eq!(is_retry(&classify_grpc(&st)), Some(Some(Duration::from_millis(2500))));
        let st = tonic::Status::with_details(ResourceExhausted, "no info", details(None).into());
        assert!(is_retry(&classify_grpc(&st)).is_none());
        let st = tonic::Status::with_details(Unavailable, "x", details(Some((1, 0))).into());
        assert_eq!(is_retry(&classify_grpc(&st)), Some(Some(Duration::from_secs(1))));
    }
}
