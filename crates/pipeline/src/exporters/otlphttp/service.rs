//! How one OTLP/HTTP request is sent: POST `application/x-protobuf` to the
//! metrics URL, body gzip- or zstd-compressed with `Content-Encoding`, and
//! what each status means per the OTLP spec: 200 is success (the body may
//! carry a partial success); 429, 502, 503 and 504 are retried, honouring
//! `Retry-After` (seconds or an HTTP date); every other status (400, 401,
//! 403, 404, 408, 413, 500, 501, ...) is dropped and counted, with the
//! `google.rpc.Status` message the receiver sent; network errors are retried.

use crate::consumer::BoxFuture;
use crate::exporters::otlp::config::Compression;
use crate::exporters::otlp::request_builder::Request;
use crate::exporters::otlp::service::{Attempt, Transport, status_message};
use crate::exporters::probe::{self, ProbeResult, Protocol};
use crate::exporters::shared::retry_after;
use crate::extensions::ExtensionConfig;
use crate::http::describe_error;
use infertel_otlp::opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use prost::Message;
use reqwest::header::{HeaderMap, HeaderName};
use std::io::Write;

/// The response body we read at most (the spec's default cap).
pub const MAX_RESPONSE: usize = 4 * 1024 * 1024;
/// The spec's cap on a request before compression.
pub const MAX_REQUEST: usize = 64 * 1024 * 1024;

pub struct HttpTransport {
    pub url: String,
    pub client: reqwest::Client,
    pub headers: HeaderMap,
    pub auth: Option<ExtensionConfig>,
    pub compression: Compression,
}

/// Compresses an encoded request as configured.
pub fn compress(body: Vec<u8>, c: Compression) -> std::io::Result<Vec<u8>> {
    match c {
        Compression::None => Ok(body),
        Compression::Gzip => {
            let mut e =
                flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 4), flate2::Compression::default());
            e.write_all(&body)?;
            e.finish()
        }
        Compression::Zstd => zstd::encode_all(&body[..], 3),
    }
}

fn snippet(b: &[u8]) -> String {
    if let Some(m) = status_message(b) {
        return m;
    }
    let t = String::from_utf8_lossy(&b[..b.len().min(512)]).trim().to_string();
    if t.is_empty() { "(empty body)".into() } else { t }
}

impl HttpTransport {
    /// The POST of one request with compression, headers and auth.
    fn request(&self, req: &Request) -> Result<reqwest::RequestBuilder, Attempt> {
        {
            let raw = req.body.encode_to_vec();
            if raw.len() > MAX_REQUEST {
                return Err(Attempt::Fail {
                    status: "too_large".into(),
                    message: format!("request of {} bytes is over the 64 MiB OTLP cap", raw.len()),
                });
            }
            let body = match compress(raw, self.compression) {
                Ok(b) => b,
                Err(e) => {
                    return Err(Attempt::Fail { status: "encode".into(), message: e.to_string() });
                }
            };
            let mut r = self
                .client
                .post(&self.url)
                .headers(self.headers.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
                .header(reqwest::header::USER_AGENT, format!("{} OTel-OTLP-Exporter-Rust", crate::http::user_agent()));
            if let Some(enc) = self.compression.header() {
                r = r.header(reqwest::header::CONTENT_ENCODING, enc);
            }
            if let Some(a) = &self.auth {
                match a.header() {
                    Ok((name, v)) => {
                        if let Ok(n) = HeaderName::from_bytes(name.as_bytes()) {
                            r = r.header(n, v);
                        }
                    }
                    Err(e) => {
                        tracing::error!(endpoint = %probe::redact_url(&self.url), "authenticator: {}", probe::redact_text(&e))
                    }
                }
            }
            Ok(r.body(body))
        }
    }
}

impl Transport for HttpTransport {
    fn endpoint(&self) -> &str {
        &self.url
    }

    fn probe<'a>(&'a self, req: &'a Request) -> BoxFuture<'a, ProbeResult> {
        Box::pin(async move {
            let r = match self.request(req) {
                Ok(r) => r,
                Err(Attempt::Fail { status, message } | Attempt::Retry { status, message, .. }) => {
                    return probe::classify_text(&format!("{status}: {message}"), false, false);
                }
                Err(Attempt::Ok(_)) => return probe::classify_http(200, &self.url, Protocol::OtlpHttp, ""),
            };
            match r.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let bytes = resp.bytes().await.unwrap_or_default();
                    probe::classify_http(status, &self.url, Protocol::OtlpHttp, &snippet(&bytes))
                }
                Err(e) => probe::classify_error(&e, e.is_timeout()),
            }
        })
    }

    fn attempt<'a>(&'a self, req: &'a Request, _attempt: u32) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let r = match self.request(req) {
                Ok(r) => r,
                Err(a) => return a,
            };
            let resp = match r.send().await {
                Ok(resp) => resp,
                Err(e) => {
                    let status = if e.is_timeout() { "timeout" } else { "network" };
                    return Attempt::Retry { status: status.into(), delay: None, message: describe_error(&e) };
                }
            };
            let status = resp.status().as_u16();
            let hint =
                resp.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(retry_after);
            let too_big = resp.content_length().is_some_and(|n| n as usize > MAX_RESPONSE);
            let bytes = if too_big { Default::default() } else { resp.bytes().await.unwrap_or_default() };
            if too_big || bytes.len() > MAX_RESPONSE {
                return Attempt::Fail { status: status.to_string(), message: "response over the 4 MiB cap".into() };
            }
            match status {
                200..=299 => {
                    let partial = ExportMetricsServiceResponse::decode(&bytes[..]).ok().and_then(|r| r.partial_success);
                    Attempt::Ok(partial)
                }
                429 | 502 | 503 | 504 => {
                    Attempt::Retry { status: status.to_string(), delay: hint, message: snippet(&bytes) }
                }
                _ => Attempt::Fail { status: status.to_string(), message: snippet(&bytes) },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn gzip_and_zstd_round_trip() {
        let body = b"hello otlp hello otlp hello otlp".to_vec();
        let gz = compress(body.clone(), Compression::Gzip).unwrap();
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut out).unwrap();
        assert_eq!(out, body);
        let z = compress(body.clone(), Compression::Zstd).unwrap();
        assert_eq!(zstd::decode_all(&z[..]).unwrap(), body);
        assert_eq!(compress(body.clone(), Compression::None).unwrap(), body);
    }
}
