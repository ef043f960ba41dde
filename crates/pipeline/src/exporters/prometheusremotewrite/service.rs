//! How one request is sent: POST with the Remote-Write 1.0 headers, the
//! configured headers and authenticator, and retries as the spec says:
//! 5xx, 429 and network errors are retried with exponential backoff and
//! jitter (honouring `Retry-After`); 401, 403, 404, 405 and 415 are
//! configuration faults: the exporter pauses (`exporters/exporterhelper/probe.rs`), holds
//! the request, re-sends it with backoff and delivers it when the endpoint
//! recovers; any other 4xx (a 400 for bad data) is not retried, and is
//! dropped, counted and logged with the receiver's own words.

use super::request_builder::Request;
use crate::exporters::probe::{self, EndpointState, Protocol};
use crate::exporters::shared::{RetryConfig, retry_after};
use crate::extensions::ExtensionConfig;
use crate::http::describe_error;
use crate::telemetry::{Counter, DURATION_BOUNDS, Histogram, Telemetry};
use infertel_remote_write::{CONTENT_ENCODING, CONTENT_TYPE, VERSION, VERSION_HEADER};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What became of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    /// Dropped, with the `reason` label of `infertel_exporter_dropped_samples_total`.
    Dropped(&'static str),
    /// Elasticsearch stored `delivered` samples (some perhaps earlier: the
    /// duplicates) and refused `rejected` for their own content.
    Partial {
        delivered: usize,
        rejected: usize,
    },
    /// 413: the receiver refused the request's size; the caller splits it.
    TooLarge,
}

/// The most of a response body that is read (an error page, a proxy's
/// HTML): enough for the message, never the whole of a hostile answer.
pub const MAX_BODY: usize = 64 * 1024;

/// The longest `Retry-After` honoured for a 429 or 503 (Elasticsearch and
/// Mimir throttle for minutes; `max_interval` is for our own backoff).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Reads at most [`MAX_BODY`] bytes of a response body as text.
pub async fn capped_text(mut resp: reqwest::Response) -> String {
    let mut buf: Vec<u8> = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        let room = MAX_BODY - buf.len();
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if buf.len() >= MAX_BODY {
            break;
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

pub struct RemoteWriteService {
    pub exporter: String,
    pub endpoint: String,
    pub client: Arc<crate::http::LazyClient>,
    pub headers: HeaderMap,
    pub auth: Option<ExtensionConfig>,
    pub retry: RetryConfig,
    pub telemetry: Telemetry,
    pub state: Arc<EndpointState>,
    send_duration: Arc<Histogram>,
}

/// The response body, shortened for a log line and kept on that line:
/// proxies answer with multi-line HTML (nginx's 401/403 pages), and a
/// newline would split the log record, leaving its fields (exporter,
/// endpoint, status) on a later line than the message.
fn snippet(body: &str) -> String {
    let t = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let t = t.as_str();
    if t.len() <= 512 {
        return t.to_string();
    }
    let mut end = 512;
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &t[..end])
}

/// What a non-retryable status most likely means, for the log line.
pub fn explain_status(status: u16, endpoint: &str) -> &'static str {
    let es = endpoint.contains("/_prometheus/");
    match status {
        400 => "the receiver rejected the data as invalid (out-of-order or duplicate samples, bad labels)",
        401 => "credentials were rejected: check the Authorization header or authenticator",
        403 if es => {
            "authenticated but not allowed to write: the Elasticsearch API key needs write privileges on the metrics-* data streams"
        }
        403 => "authenticated but not allowed to write: the credentials lack write permission",
        404 if es => {
            "nothing at this URL: remote write lives on the Elasticsearch API host (not the OTLP/ingest host), under /_prometheus/..."
        }
        404 => {
            "nothing at this URL: wrong host or path (Prometheus needs --web.enable-remote-write-receiver and /api/v1/write)"
        }
        405 => {
            "the URL does not accept POST: wrong path (a UI, query or health URL rather than the write endpoint; Prometheus: /api/v1/write)"
        }
        413 => {
            "request too large: split in halves and re-sent; lower max_batch_size_bytes (Elasticsearch: http.max_protobuf_expanded_content_length)"
        }
        415 => {
            "the receiver does not accept Remote-Write 1.0 (protobuf + snappy, X-Prometheus-Remote-Write-Version 0.1.0): check the receiver speaks remote write 1.0 at this path"
        }
        _ => "the receiver refused the request",
    }
}

impl RemoteWriteService {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        exporter: String,
        endpoint: String,
        client: Arc<crate::http::LazyClient>,
        headers: HeaderMap,
        auth: Option<ExtensionConfig>,
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
        RemoteWriteService { exporter, endpoint, client, headers, auth, retry, telemetry, state, send_duration }
    }

    fn failed(&self, status: &str) -> Arc<Counter> {
        self.telemetry.counter(
            "infertel_exporter_failed_requests_total",
            "Requests that did not succeed, by HTTP status (or network, timeout).",
            &[("exporter", &self.exporter), ("status", status)],
        )
    }

    pub(crate) async fn attempt(&self, req: &Request, attempt: u32) -> Result<reqwest::Response, AttemptError> {
        // TLS files are read when used: until they can be, each attempt fails.
        let client = self.client.get().map_err(AttemptError::Client)?;
        let mut r = client
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .header(reqwest::header::CONTENT_ENCODING, CONTENT_ENCODING)
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .header(VERSION_HEADER, VERSION);
        if attempt > 0 {
            r = r.header("Retry-Attempt", attempt.to_string());
        }
        if let Some(crate::extensions::ExtensionConfig::SigV4Auth(s)) = &self.auth {
            // Signed over what is sent: the body and the headers set here.
            let mut signed: Vec<(String, String)> = self
                .headers
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect();
            signed.push(("content-encoding".into(), CONTENT_ENCODING.into()));
            signed.push(("content-type".into(), CONTENT_TYPE.into()));
            signed.push((VERSION_HEADER.to_ascii_lowercase(), VERSION.into()));
            let refs: Vec<(&str, &str)> = signed.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            match s.sign("POST", &self.endpoint, &refs, &req.body).await {
                Ok(h) => {
                    for (k, v) in h {
                        if let (Ok(n), Ok(mut v)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(&v)) {
                            v.set_sensitive(true);
                            r = r.header(n, v);
                        }
                    }
                }
                Err(e) => tracing::error!(exporter = %self.exporter, "{}", probe::redact_text(&e)),
            }
        } else if let Some(a) = &self.auth {
            match a.header() {
                Ok((name, v)) => {
                    if let Ok(n) = HeaderName::from_bytes(name.as_bytes()) {
                        r = r.header(n, v);
                    }
                }
                Err(e) => tracing::error!(exporter = %self.exporter, "authenticator: {}", probe::redact_text(&e)),
            }
        }
        r.body(req.body.clone()).send().await.map_err(AttemptError::Http)
    }

    /// Sends one request, retrying as configured; a configuration fault
    /// (401, 403, 404, 405, 415) holds it until the endpoint recovers.
    pub async fn send(&self, req: &Request) -> Outcome {
        let endpoint = probe::redact_url(&self.endpoint);
        let mut started = Instant::now();
        let mut attempt: u32 = 0;
        // Re-probes made while held (the held request is the probe).
        let mut held: u32 = 0;
        loop {
            let t0 = Instant::now();
            let res = self.attempt(req, attempt).await;
            self.send_duration.observe(t0.elapsed().as_secs_f64());
            let mut wait_hint: Option<Duration> = None;
            match res {
                Ok(resp) if resp.status().is_success() => {
                    self.state.note_response(format!("HTTP {}", resp.status().as_u16()), "");
                    if held > 0 {
                        self.state.hold(-(req.samples as f64));
                    }
                    self.state.set_up();
                    return Outcome::Sent;
                }
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    self.failed(&status.to_string()).inc();
                    wait_hint = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(retry_after);
                    let body = capped_text(resp).await;
                    self.state.note_response(format!("HTTP {status}"), &body);
                    if probe::holds(&status.to_string()) {
                        if held == 0 {
                            self.state.hold(req.samples as f64);
                        }
                        held += 1;
                        self.state.pause(&probe::classify_http(status, &self.endpoint, Protocol::RemoteWrite, &body));
                        if !self.state.sleep_unless_stopping(self.state.backoff(held)).await {
                            self.state.hold(-(req.samples as f64));
                            // The queue keeps it on disk, or counts it as
                            // dropped (reason shutdown) in memory.
                            if self.state.is_retired() {
                                tracing::info!(exporter = %self.exporter, endpoint = %endpoint, "reload: {} held samples go to the exporter that replaces this one (HTTP {status})", req.samples);
                            } else {
                                tracing::warn!(exporter = %self.exporter, endpoint = %endpoint, "shutdown while paused: {} held samples not delivered (HTTP {status})", req.samples);
                            }
                            return Outcome::Dropped(crate::exporters::queue::SHUTDOWN);
                        }
                        started = Instant::now();
                        attempt = 0;
                        continue;
                    }
                    // Elasticsearch answers 400 when any sample failed (429
                    // when one was throttled: that is retried whole, and
                    // what it had stored comes back as CONFLICT); CONFLICT
                    // means it already had the sample (a retry or a replay).
                    if status == 400
                        && let Some(f) = super::elasticsearch::parse(&body)
                    {
                        if held > 0 {
                            self.state.hold(-(req.samples as f64));
                        }
                        self.state.set_up();
                        let total = f.total.unwrap_or(req.samples).min(req.samples);
                        let rejected = f.others.min(total);
                        if f.conflicts > 0 {
                            self.telemetry
                                .counter(
                                    "infertel_exporter_duplicate_samples_total",
                                    "Samples the backend already had (Elasticsearch: CONFLICT), counted as delivered too.",
                                    &[("exporter", &self.exporter)],
                                )
                                .add(f.conflicts as u64);
                            tracing::info!(exporter = %self.exporter, "{} samples were already stored (CONFLICT: a retry or a replay): counted as delivered", f.conflicts);
                        }
                        if rejected > 0 {
                            tracing::error!(
                                exporter = %self.exporter, endpoint = %endpoint, status,
                                "dropping {rejected} of {} samples: Elasticsearch refused them ({}); receiver said: {}", req.samples, f.other_status.as_deref().unwrap_or("?"), snippet(&body)
                            );
                        }
                        return Outcome::Partial { delivered: req.samples - rejected, rejected };
                    }
                    if status == 413 {
                        if held > 0 {
                            self.state.hold(-(req.samples as f64));
                        }
                        self.state.set_up();
                        return Outcome::TooLarge;
                    }
                    let retryable = status == 429 || status >= 500;
                    if !retryable {
                        if held > 0 {
                            self.state.hold(-(req.samples as f64));
                        }
                        // The endpoint answered and refused the content, not
                        // the credentials or the URL: it is reachable and
                        // authorized, so the flow resumes.
                        self.state.set_up();
                        tracing::error!(
                            exporter = %self.exporter, endpoint = %endpoint, status,
                            "dropping {} samples: HTTP {status}: {}; receiver said: {}", req.samples, explain_status(status, &self.endpoint), snippet(&body)
                        );
                        return Outcome::Dropped("rejected");
                    }
                    tracing::warn!(exporter = %self.exporter, status, attempt, "remote write failed, will retry: {}", snippet(&body));
                }
                Err(AttemptError::Http(e)) => {
                    self.failed(if e.is_timeout() { "timeout" } else { "network" }).inc();
                    self.state.note_response(if e.is_timeout() { "timeout" } else { "network" }, &describe_error(&e));
                    tracing::warn!(exporter = %self.exporter, endpoint = %endpoint, attempt, "remote write failed, will retry: {}", probe::redact_text(&describe_error(&e)));
                }
                Err(AttemptError::Client(e)) => {
                    self.failed("tls").inc();
                    tracing::warn!(exporter = %self.exporter, endpoint = %endpoint, attempt, "remote write cannot send, will retry: {e}");
                }
            }
            if !self.retry.enabled {
                if held > 0 {
                    self.state.hold(-(req.samples as f64));
                }
                tracing::error!(exporter = %self.exporter, "dropping {} samples: request failed and retry_on_failure is disabled", req.samples);
                return Outcome::Dropped("retry_disabled");
            }
            attempt += 1;
            // A server-given Retry-After is honoured up to five minutes.
            let wait = wait_hint
                .map(|h| h.min(MAX_RETRY_AFTER).max(self.retry.backoff(attempt)))
                .unwrap_or_else(|| self.retry.backoff(attempt));
            let max = self.retry.max_elapsed();
            if !max.is_zero() && started.elapsed() + wait > max {
                if held > 0 {
                    self.state.hold(-(req.samples as f64));
                }
                tracing::error!(
                    exporter = %self.exporter, endpoint = %endpoint,
                    "dropping {} samples: still failing after {:?} ({} attempts; retry_on_failure.max_elapsed_time)", req.samples, started.elapsed(), attempt
                );
                return Outcome::Dropped("retries_exhausted");
            }
            if !self.state.sleep_unless_retired(wait).await {
                if held > 0 {
                    self.state.hold(-(req.samples as f64));
                }
                return Outcome::Dropped(crate::exporters::queue::SHUTDOWN);
            }
        }
    }

    /// One attempt of `req` (no retries), classified.
    pub async fn probe_once(&self, req: &Request) -> probe::ProbeResult {
        match self.attempt(req, 0).await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let body = capped_text(resp).await;
                probe::classify_http(status, &self.endpoint, Protocol::RemoteWrite, &body)
            }
            Err(AttemptError::Http(e)) => probe::classify_error(&e, e.is_timeout()),
            Err(AttemptError::Client(e)) => probe::classify_error(&std::io::Error::other(e), false),
        }
    }
}

/// Why an attempt got no answer: the transport, or a client that cannot be
/// built yet (its TLS files are not there).
#[derive(Debug)]
pub(crate) enum AttemptError {
    Http(reqwest::Error),
    Client(String),
}

#[cfg(test)]
mod tests {
    use super::snippet;

    #[test]
    fn snippet_is_one_line_and_bounded() {
        let html = "<html>\r\n<head><title>401 Authorization Required</title></head>\n<body>\n</body>\n</html>\n";
        assert_eq!(
            snippet(html),
            "<html> <head><title>401 Authorization Required</title></head> <body> </body> </html>"
        );
        let long = "é".repeat(400);
        let s = snippet(&long);
        assert!(s.ends_with('…') && s.len() <= 512 + '…'.len_utf8(), "{}", s.len());
    }
}
