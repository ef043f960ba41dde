//! Endpoint checks for the network exporters: the startup probe (a real
//! write with nothing in it, never a GET: remote write POSTs an empty
//! snappy WriteRequest, otlphttp an empty ExportMetricsServiceRequest, otlp
//! an empty Export call, each with the exporter's real headers and auth),
//! its classification into one line that says what is wrong and what to
//! check, and the per-exporter endpoint state that pauses delivery while the
//! endpoint is down and holds the data instead of dropping it.
//!
//! Verdicts: [`Verdict::Ok`] (2xx, or a 400 to the empty body: reachable and
//! authorized); [`Verdict::Config`] (401, 403, 404, 405, 415, TLS failures,
//! a name that does not resolve, gRPC UNAUTHENTICATED / PERMISSION_DENIED /
//! UNIMPLEMENTED): a configuration fault that stops `infertel run` with exit
//! 78 when `startup_check: fail`; [`Verdict::Transient`] (connection
//! refused, timeout, 429, 5xx, UNAVAILABLE): the exporter starts paused,
//! queues and keeps probing.
//!
//! Self-metrics, labelled `{exporter}`: `infertel_exporter_endpoint_up`
//! (1 when the last probe or request succeeded, 0 while paused) and
//! `infertel_exporter_held_samples` (samples held by paused senders, on top
//! of `infertel_exporter_queue_size`).

use crate::exporters::shared::RetryConfig;
use crate::telemetry::{Gauge, Telemetry};
use serde::Deserialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// `startup_check`: what `infertel run` does with a configuration fault
/// found by the startup probe.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum StartupCheck {
    /// Refuse to start (exit 78).
    #[default]
    Fail,
    /// Log it and start with the exporter paused (it keeps probing).
    Warn,
    /// Do not probe at startup.
    Off,
}

/// The protocol an exporter speaks, for protocol-specific advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    RemoteWrite,
    OtlpHttp,
    OtlpGrpc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Reachable and authorized.
    Ok,
    /// The configuration is wrong; retrying will not help.
    Config,
    /// Reachable later, perhaps: keep probing.
    Transient,
}

/// One probe's result.
#[derive(Debug, Clone)]
pub struct ProbeResult {
    pub verdict: Verdict,
    /// Short machine-friendly class: `ok`, `reachable`, `unauthorized`,
    /// `forbidden`, `not_found`, `method_not_allowed`,
    /// `unsupported_media_type`, `throttled`, `server_error`,
    /// `tls_unknown_ca`, `tls_name_mismatch`, `tls_expired`, `tls`, `dns`,
    /// `refused`, `timeout`, `network`, `unimplemented`, `unauthenticated`,
    /// `permission_denied`, `unavailable`, `rejected`, `skipped`.
    pub class: &'static str,
    /// What was seen: `HTTP 403`, `gRPC PERMISSION_DENIED`, `connect`.
    pub status: String,
    /// One line: what is wrong and what to check.
    pub message: String,
    /// The receiver's own words or the error chain (redacted, one line).
    pub detail: String,
}

impl ProbeResult {
    pub fn is_ok(&self) -> bool {
        self.verdict == Verdict::Ok
    }

    fn new(
        verdict: Verdict,
        class: &'static str,
        status: impl Into<String>,
        message: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        ProbeResult {
            verdict,
            class,
            status: status.into(),
            message: message.into(),
            detail: one_line(&redact_text(&detail.into()), 300),
        }
    }

    pub fn skipped() -> Self {
        ProbeResult::new(Verdict::Ok, "skipped", "-", "not probed (startup_check: off)", "")
    }

    /// `class (status): message; detail`, for logs.
    pub fn line(&self) -> String {
        let mut s = format!("{} ({}): {}", self.class, self.status, self.message);
        if !self.detail.is_empty() {
            s.push_str("; ");
            s.push_str(
                if self.verdict == Verdict::Ok || self.status.starts_with("HTTP") || self.status.starts_with("gRPC") {
                    "receiver said: "
                } else {
                    "error: "
                },
            );
            s.push_str(&self.detail);
        }
        s
    }
}

/// Collapses whitespace (HTML error pages) and bounds the length.
pub fn one_line(s: &str, max: usize) -> String {
    let t = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if t.len() <= max {
        return t;
    }
    let mut end = max;
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &t[..end])
}

/// A URL without its userinfo (`https://user:pass@host` → `https://***@host`)
/// and with the values of credential-like query parameters hidden.
pub fn redact_url(u: &str) -> String {
    let Ok(mut url) = url::Url::parse(u) else {
        return redact_text(u);
    };
    let secret_param = |k: &str| {
        ["key", "token", "secret", "password", "auth", "signature"].iter().any(|w| k.to_ascii_lowercase().contains(w))
    };
    let has_userinfo = !url.username().is_empty() || url.password().is_some();
    let has_secret_query = url.query_pairs().any(|(k, _)| secret_param(&k));
    // Nothing to hide: the URL as written (parsing would normalise it,
    // e.g. add a trailing slash, and a label would change).
    if !has_userinfo && !has_secret_query {
        return u.to_string();
    }
    if has_userinfo {
        let _ = url.set_username("***");
        let _ = url.set_password(None);
    }
    if url.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let hide = secret_param(&k);
                (k.into_owned(), if hide { "***".into() } else { v.into_owned() })
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

/// Hides credentials that may appear in free text (error chains, echoed
/// requests): `Authorization: <scheme> <value>`, `ApiKey ...`,
/// `Bearer ...`, `Basic ...`, and URL userinfo.
pub fn redact_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let words: Vec<&str> = s.split(' ').collect();
    let mut hide_next = false;
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if hide_next && !w.is_empty() {
            out.push_str("***");
            hide_next = false;
            continue;
        }
        let lw = w.to_ascii_lowercase();
        if matches!(lw.trim_end_matches(':'), "apikey" | "bearer" | "basic" | "token" | "authorization") {
            hide_next = !matches!(lw.trim_end_matches(':'), "authorization");
            if lw.trim_end_matches(':') == "authorization" && w.ends_with(':') {
                // `Authorization: Scheme value`: the scheme stays, the value goes.
                out.push_str(w);
                continue;
            }
            out.push_str(w);
            continue;
        }
        if let Some(p) = w.find("://")
            && let Some(at) = w[p + 3..].find('@')
            && !w[p + 3..p + 3 + at].contains('/')
        {
            out.push_str(&w[..p + 3]);
            out.push_str("***");
            out.push_str(&w[p + 3 + at..]);
            continue;
        }
        out.push_str(w);
    }
    out
}

/// What a non-2xx HTTP status means for an exporter, in one line.
pub fn explain_http(status: u16, endpoint: &str, protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::RemoteWrite => crate::exporters::prometheusremotewrite::service::explain_status(status, endpoint),
        Protocol::OtlpHttp | Protocol::OtlpGrpc => match status {
            400 => "the receiver rejected the data as invalid",
            401 => "credentials were rejected: check the Authorization header or authenticator",
            403 => {
                "authenticated but not allowed to write: the credentials lack write permission (for Elastic: an API key with write privileges on metrics-*)"
            }
            404 => {
                "nothing at this URL: wrong host or path (OTLP/HTTP is POST <base>/v1/metrics, usually port 4318; set endpoint to the base URL or metrics_endpoint to the full URL)"
            }
            405 => {
                "the URL does not accept POST: wrong path (is this a UI or query URL rather than the OTLP endpoint?)"
            }
            413 => "request too large: lower the batch size",
            415 => "the receiver does not accept OTLP protobuf (application/x-protobuf): is this an OTLP endpoint?",
            _ => "the receiver refused the request",
        },
    }
}

/// Classifies an HTTP answer to the probe (or to a real request).
pub fn classify_http(status: u16, endpoint: &str, protocol: Protocol, body: &str) -> ProbeResult {
    let st = format!("HTTP {status}");
    let body = body.to_string();
    match status {
        200..=299 => ProbeResult::new(Verdict::Ok, "ok", st, "reachable and authorized", ""),
        400 => ProbeResult::new(
            Verdict::Ok,
            "reachable",
            st,
            "reachable and authorized: the receiver answered 400 to an empty request (it refuses empty bodies; real data goes through)",
            body,
        ),
        401 => ProbeResult::new(Verdict::Config, "unauthorized", st, explain_http(401, endpoint, protocol), body),
        403 => ProbeResult::new(Verdict::Config, "forbidden", st, explain_http(403, endpoint, protocol), body),
        404 => ProbeResult::new(Verdict::Config, "not_found", st, explain_http(404, endpoint, protocol), body),
        405 => ProbeResult::new(Verdict::Config, "method_not_allowed", st, explain_http(405, endpoint, protocol), body),
        415 => {
            ProbeResult::new(Verdict::Config, "unsupported_media_type", st, explain_http(415, endpoint, protocol), body)
        }
        429 => ProbeResult::new(
            Verdict::Transient,
            "throttled",
            st,
            "reachable, but throttling (429): transient, will keep probing",
            body,
        ),
        500..=599 => ProbeResult::new(
            Verdict::Transient,
            "server_error",
            st,
            "reachable, but the receiver failed (5xx): transient (starting, overloaded or a proxy without its upstream), will keep probing",
            body,
        ),
        _ => ProbeResult::new(Verdict::Transient, "rejected", st, explain_http(status, endpoint, protocol), body),
    }
}

/// The statuses that pause an exporter at run time (configuration faults)
/// instead of dropping the batch: HTTP 401, 403, 404, 405, 415 and gRPC
/// UNAUTHENTICATED, PERMISSION_DENIED, UNIMPLEMENTED. A 400 (bad data) is
/// still dropped and counted.
pub fn holds(status: &str) -> bool {
    matches!(status, "401" | "403" | "404" | "405" | "415" | "Unauthenticated" | "PermissionDenied" | "Unimplemented")
}

/// The whole error chain in one line.
pub fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let cs = c.to_string();
        if !s.contains(&cs) {
            s.push_str(": ");
            s.push_str(&cs);
        }
        src = c.source();
    }
    s
}

/// Classifies a failure to get any answer: TLS, DNS, refused, timeout.
pub fn classify_error(e: &(dyn std::error::Error + 'static), timed_out: bool) -> ProbeResult {
    let text = chain_text(e);
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut refused = false;
    while let Some(c) = src {
        if let Some(r) = c.downcast_ref::<rustls::Error>() {
            return classify_tls(r, &text);
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                refused = true;
            }
            if let Some(r) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                return classify_tls(r, &text);
            }
        }
        src = c.source();
    }
    classify_text(&text, timed_out, refused)
}

fn classify_tls(r: &rustls::Error, text: &str) -> ProbeResult {
    use rustls::CertificateError as C;
    match r {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => ProbeResult::new(
            Verdict::Config,
            "tls_unknown_ca",
            "TLS",
            "TLS: the server's certificate is not signed by a CA this agent trusts: set tls.ca_file to the CA that issued it (or check this is the right host)",
            text,
        ),
        rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => ProbeResult::new(
            Verdict::Config,
            "tls_name_mismatch",
            "TLS",
            "TLS: the certificate is not valid for this host name: use the name it was issued for in endpoint, or set tls.server_name_override",
            text,
        ),
        rustls::Error::InvalidCertificate(
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
        ) => ProbeResult::new(
            Verdict::Config,
            "tls_expired",
            "TLS",
            "TLS: the server's certificate has expired or is not yet valid: renew it (or check this machine's clock)",
            text,
        ),
        _ => ProbeResult::new(
            Verdict::Config,
            "tls",
            "TLS",
            "TLS handshake failed: check the scheme (https against a plain-HTTP port?), tls.ca_file and client certificates",
            text,
        ),
    }
}

/// Classification from the text of an error chain (tonic hides the typed
/// cause behind its own error types).
pub fn classify_text(text: &str, timed_out: bool, refused: bool) -> ProbeResult {
    let l = text.to_ascii_lowercase();
    if l.contains("unknownissuer") || l.contains("unknown issuer") {
        return classify_tls(&rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer), text);
    }
    if l.contains("notvalidforname") || l.contains("not valid for name") {
        return classify_tls(&rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName), text);
    }
    if l.contains("certificate expired") || l.contains("expired") && l.contains("certificate") {
        return classify_tls(&rustls::Error::InvalidCertificate(rustls::CertificateError::Expired), text);
    }
    if l.contains("dns error")
        || l.contains("failed to lookup address")
        || l.contains("name or service not known")
        || l.contains("no address associated")
    {
        if l.contains("temporary failure") {
            return ProbeResult::new(
                Verdict::Transient,
                "dns",
                "connect",
                "DNS: the resolver could not answer right now (temporary failure): will keep probing",
                text,
            );
        }
        return ProbeResult::new(
            Verdict::Config,
            "dns",
            "connect",
            "DNS: the host name in endpoint does not resolve: check it (an empty or wrong environment variable? a cluster-internal name used outside the cluster?)",
            text,
        );
    }
    if refused || l.contains("connection refused") {
        return ProbeResult::new(
            Verdict::Transient,
            "refused",
            "connect",
            "connection refused: nothing listens on that host and port (yet): check the port, or the backend is still starting; will keep probing",
            text,
        );
    }
    if timed_out || l.contains("timed out") || l.contains("timeout") || l.contains("deadline") {
        return ProbeResult::new(
            Verdict::Transient,
            "timeout",
            "connect",
            "timeout: no answer within the exporter's timeout (a firewall dropping packets, a wrong port, or an overloaded backend); will keep probing",
            text,
        );
    }
    if l.contains("tls") || l.contains("certificate") || l.contains("handshake") {
        return classify_tls(&rustls::Error::General(String::new()), text);
    }
    ProbeResult::new(Verdict::Transient, "network", "connect", "network error: will keep probing", text)
}

/// Classifies a gRPC status from the empty Export call (or a real one).
pub fn classify_grpc(status: &tonic::Status) -> ProbeResult {
    use tonic::Code::*;
    let name = grpc_name(status.code());
    let st = format!("gRPC {name}");
    let msg = status.message().to_string();
    match status.code() {
        Ok => ProbeResult::new(Verdict::Ok, "ok", st, "reachable and authorized", ""),
        InvalidArgument => ProbeResult::new(
            Verdict::Ok,
            "reachable",
            st,
            "reachable and authorized: the receiver refused an empty request as invalid (real data goes through)",
            msg,
        ),
        Unauthenticated => ProbeResult::new(
            Verdict::Config,
            "unauthenticated",
            st,
            "credentials were rejected: check the Authorization header or authenticator",
            msg,
        ),
        PermissionDenied => ProbeResult::new(
            Verdict::Config,
            "permission_denied",
            st,
            "authenticated but not allowed to write: the credentials lack write permission",
            msg,
        ),
        Unimplemented => ProbeResult::new(
            Verdict::Config,
            "unimplemented",
            st,
            "no OTLP metrics service at this endpoint: wrong host or port (OTLP/gRPC is usually 4317; 4318 is OTLP/HTTP, use the otlphttp exporter there)",
            msg,
        ),
        Unavailable | Unknown => {
            // Transport failures arrive as UNAVAILABLE (or UNKNOWN) with the
            // cause in the source chain.
            let text = chain_text(status);
            let r = classify_text(&text, false, false);
            if r.class != "network" {
                return r;
            }
            ProbeResult::new(
                Verdict::Transient,
                "unavailable",
                st,
                "the receiver is unavailable (starting, overloaded or restarting): transient, will keep probing",
                text,
            )
        }
        DeadlineExceeded => ProbeResult::new(
            Verdict::Transient,
            "timeout",
            st,
            "timeout: no answer within the exporter's timeout; will keep probing",
            msg,
        ),
        ResourceExhausted => ProbeResult::new(
            Verdict::Transient,
            "throttled",
            st,
            "reachable, but throttling: transient, will keep probing",
            msg,
        ),
        _ => ProbeResult::new(Verdict::Transient, "rejected", st, "the receiver refused the request", msg),
    }
}

/// `PERMISSION_DENIED`, as the gRPC spec spells codes.
pub fn grpc_name(c: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match c {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// A runtime status string as the senders report it (`403`,
/// `PermissionDenied`) turned into a result, for the pause log line.
pub fn classify_status_str(status: &str, message: &str, endpoint: &str, protocol: Protocol) -> ProbeResult {
    if let Ok(code) = status.parse::<u16>() {
        return classify_http(code, endpoint, protocol, message);
    }
    let code = match status {
        "Unauthenticated" => tonic::Code::Unauthenticated,
        "PermissionDenied" => tonic::Code::PermissionDenied,
        "Unimplemented" => tonic::Code::Unimplemented,
        _ => tonic::Code::Unknown,
    };
    classify_grpc(&tonic::Status::new(code, message))
}

/// How often a paused exporter repeats its log line.
pub const LOG_EVERY: Duration = Duration::from_secs(30);

/// The longest wait between two probes of a paused endpoint.
pub const PROBE_MAX_INTERVAL: Duration = Duration::from_secs(30);

/// One exporter's endpoint: up or paused, the gate its consumers wait on,
/// and the policy from its config.
pub struct EndpointState {
    pub exporter: String,
    /// The endpoint, redacted, for messages.
    pub endpoint: String,
    pub check: StartupCheck,
    pub canary: bool,
    pub retry: RetryConfig,
    up: AtomicBool,
    gate: watch::Sender<bool>,
    stopping: watch::Sender<bool>,
    /// A reload replaced the exporter: retries end too (see [`EndpointState::retire`]).
    retired: watch::Sender<bool>,
    up_gauge: Arc<Gauge>,
    held: Arc<Gauge>,
    last: Mutex<Option<ProbeResult>>,
    last_log: Mutex<Option<Instant>>,
    /// The last answer the endpoint gave to a request (status page).
    last_response: Mutex<Option<LastResponse>>,
    /// The startup check's result, once made.
    startup: Mutex<Option<ProbeResult>>,
}

/// What the endpoint last answered: `HTTP 204`, `gRPC OK`, `HTTP 403`
/// with the start of the body (redacted, one line).
#[derive(Debug, Clone)]
pub struct LastResponse {
    pub at: std::time::SystemTime,
    pub status: String,
    pub body: String,
}

impl EndpointState {
    pub fn new(
        exporter: &str,
        endpoint: &str,
        check: StartupCheck,
        canary: bool,
        retry: RetryConfig,
        telemetry: &Telemetry,
    ) -> Arc<Self> {
        let l = [("exporter", exporter)];
        let up_gauge = telemetry.gauge(
            "infertel_exporter_endpoint_up",
            "1 when the exporter's endpoint is reachable and authorized, 0 while the exporter is paused.",
            &l,
        );
        up_gauge.set(1.0);
        let held = telemetry.gauge(
            "infertel_exporter_held_samples",
            "Samples held (not dropped) by senders paused on an endpoint fault.",
            &l,
        );
        Arc::new(EndpointState {
            exporter: exporter.into(),
            endpoint: redact_url(endpoint),
            check,
            canary,
            retry,
            up: AtomicBool::new(true),
            gate: watch::channel(true).0,
            stopping: watch::channel(false).0,
            retired: watch::channel(false).0,
            up_gauge,
            held,
            last: Mutex::new(None),
            last_log: Mutex::new(None),
            last_response: Mutex::new(None),
            startup: Mutex::new(None),
        })
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// The last failure seen, for `/readyz`.
    pub fn last_failure(&self) -> Option<ProbeResult> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Notes the endpoint's answer to a request.
    pub fn note_response(&self, status: impl Into<String>, body: &str) {
        let r = LastResponse {
            at: std::time::SystemTime::now(),
            status: status.into(),
            body: one_line(&redact_text(body), 300),
        };
        *self.last_response.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    }

    pub fn last_response(&self) -> Option<LastResponse> {
        self.last_response.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Notes the startup check's result.
    pub fn note_startup(&self, r: &ProbeResult) {
        *self.startup.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.clone());
    }

    pub fn startup(&self) -> Option<ProbeResult> {
        self.startup.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The endpoint answered: open the gate.
    pub fn set_up(&self) {
        if !self.up.swap(true, Ordering::Relaxed) {
            tracing::info!(exporter = %self.exporter, endpoint = %self.endpoint, "endpoint is reachable and authorized again: resuming delivery of what was held");
            *self.last_log.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        self.up_gauge.set(1.0);
        let _ = self.gate.send_if_modified(|g| !std::mem::replace(g, true));
    }

    /// The endpoint failed with `r`: close the gate (consumers keep their
    /// data queued) and log, at most once per [`LOG_EVERY`].
    pub fn pause(&self, r: &ProbeResult) {
        self.up.store(false, Ordering::Relaxed);
        self.up_gauge.set(0.0);
        let _ = self.gate.send_if_modified(|g| std::mem::replace(g, false));
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.clone());
        let mut last = self.last_log.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            *last = Some(Instant::now());
            let held = self.held.get();
            if r.verdict == Verdict::Config {
                tracing::error!(exporter = %self.exporter, endpoint = %self.endpoint, "exporter paused, data held ({held} samples in flight, the rest queued): {}", r.line());
            } else {
                tracing::warn!(exporter = %self.exporter, endpoint = %self.endpoint, "exporter paused, data held ({held} samples in flight, the rest queued): {}", r.line());
            }
        }
    }

    /// Marks `n` samples held by a paused sender (negative to release).
    pub fn hold(&self, n: f64) {
        self.held.add(n);
    }

    /// The wait before re-probe `n` (1-based): the exporter's
    /// retry_on_failure backoff, never less than its initial interval.
    pub fn backoff(&self, n: u32) -> Duration {
        self.retry.backoff(n).max(self.retry.initial_interval.get())
    }

    pub fn is_open(&self) -> bool {
        *self.gate.borrow()
    }

    /// Waits until the gate is open (`true`) or `stop` turns true while it
    /// is closed (`false`).
    pub async fn wait_open(&self, stop: &mut watch::Receiver<bool>) -> bool {
        let mut gate = self.gate.subscribe();
        loop {
            if *gate.borrow_and_update() {
                return true;
            }
            if *stop.borrow() {
                return false;
            }
            tokio::select! {
                r = gate.changed() => if r.is_err() { return true },
                r = stop.changed() => if r.is_err() { return false },
            }
        }
    }

    /// Waits until the gate closes (`true`) or shutdown begins (`false`).
    pub async fn wait_closed(&self) -> bool {
        let mut gate = self.gate.subscribe();
        let mut stopping = self.stopping.subscribe();
        loop {
            if *stopping.borrow_and_update() {
                return false;
            }
            if !*gate.borrow_and_update() {
                return true;
            }
            tokio::select! {
                r = gate.changed() => if r.is_err() { return false },
                r = stopping.changed() => if r.is_err() { return false },
            }
        }
    }

    /// The wait before re-probe `n` of a paused endpoint: the backoff,
    /// capped at [`PROBE_MAX_INTERVAL`] so that a fixed endpoint is found
    /// within half a minute however long it was down.
    pub fn probe_backoff(&self, n: u32) -> Duration {
        self.backoff(n).min(PROBE_MAX_INTERVAL)
    }

    /// The agent is shutting down: paused senders give up waiting (in
    /// memory their data is counted as dropped, reason `shutdown`; on disk
    /// it stays for the next start).
    pub fn stop(&self) {
        let _ = self.stopping.send(true);
    }

    /// A reload replaces the exporter: held requests and retry waits end
    /// now (their series go to the successor), not at the shutdown deadline.
    pub fn retire(&self) {
        let _ = self.retired.send(true);
        let _ = self.stopping.send(true);
    }

    pub fn is_retired(&self) -> bool {
        *self.retired.borrow()
    }

    /// A retry's wait; `false` when a reload retired the exporter meanwhile.
    pub async fn sleep_unless_retired(&self, d: Duration) -> bool {
        let mut s = self.retired.subscribe();
        if *s.borrow_and_update() {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => !*s.borrow(),
            _ = s.changed() => false,
        }
    }

    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Sleeps `d`; `false` when shutdown began meanwhile.
    pub async fn sleep_unless_stopping(&self, d: Duration) -> bool {
        let mut s = self.stopping.subscribe();
        if *s.borrow_and_update() {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => !*s.borrow(),
            _ = s.changed() => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_classes() {
        let es = "https://es.example:443/_prometheus/metrics/vllm/inference/api/v1/write";
        let r = classify_http(403, es, Protocol::RemoteWrite, "");
        assert_eq!((r.verdict, r.class), (Verdict::Config, "forbidden"));
        assert!(r.message.contains("metrics-*"), "{}", r.message);
        let r = classify_http(404, es, Protocol::RemoteWrite, "");
        assert!(r.message.contains("Elasticsearch API host"), "{}", r.message);
        assert_eq!(classify_http(400, es, Protocol::RemoteWrite, "x").verdict, Verdict::Ok);
        assert_eq!(classify_http(204, es, Protocol::RemoteWrite, "").class, "ok");
        for s in [401, 403, 404, 405, 415] {
            assert_eq!(classify_http(s, es, Protocol::OtlpHttp, "").verdict, Verdict::Config, "{s}");
            assert!(holds(&s.to_string()));
        }
        for s in [429, 500, 502, 503] {
            assert_eq!(classify_http(s, es, Protocol::RemoteWrite, "").verdict, Verdict::Transient, "{s}");
            assert!(!holds(&s.to_string()));
        }
        assert!(!holds("400"));
    }

    #[test]
    fn tls_errors_by_type() {
        use rustls::CertificateError as C;
        for (e, class) in [
            (C::UnknownIssuer, "tls_unknown_ca"),
            (C::NotValidForName, "tls_name_mismatch"),
            (C::Expired, "tls_expired"),
            (C::NotValidYet, "tls_expired"),
        ] {
            let io = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls::Error::InvalidCertificate(e));
            let r = classify_error(&io, false);
            assert_eq!((r.verdict, r.class), (Verdict::Config, class));
        }
    }

    #[test]
    fn network_errors_by_text() {
        assert_eq!(
            classify_text("dns error: failed to lookup address information: Name or service not known", false, false)
                .verdict,
            Verdict::Config
        );
        assert_eq!(
            classify_text(
                "dns error: failed to lookup address information: Temporary failure in name resolution",
                false,
                false
            )
            .verdict,
            Verdict::Transient
        );
        assert_eq!(
            classify_text("tcp connect error: Connection refused (os error 111)", false, false).class,
            "refused"
        );
        assert_eq!(classify_text("operation timed out", false, false).class, "timeout");
    }

    #[test]
    fn grpc_codes() {
        use tonic::Code;
        for (c, class, v) in [
            (Code::Unauthenticated, "unauthenticated", Verdict::Config),
            (Code::PermissionDenied, "permission_denied", Verdict::Config),
            (Code::Unimplemented, "unimplemented", Verdict::Config),
            (Code::Unavailable, "unavailable", Verdict::Transient),
            (Code::InvalidArgument, "reachable", Verdict::Ok),
        ] {
            let r = classify_grpc(&tonic::Status::new(c, "x"));
            assert_eq!((r.class, r.verdict), (class, v), "{c:?}");
        }
    }

    #[test]
    fn secrets_are_redacted() {
        assert_eq!(
            redact_url("https://user:pw@h.example/x?api_key=abc&a=1"),
            "https://***@h.example/x?api_key=***&a=1"
        );
        let t = redact_text("sent Authorization: ApiKey c2VjcmV0 to https://u:p@h/x and Bearer tok123");
        assert!(!t.contains("c2VjcmV0") && !t.contains("tok123") && !t.contains("u:p@"), "{t}");
    }
}
