//! OTLP/HTTP: `POST` on `protocols.http.metrics_url_path` (`/v1/metrics`)
//! with a binary protobuf (`application/x-protobuf`) or JSON
//! (`application/json`) body, compressed with gzip, deflate, zstd or snappy
//! or not; answered as the OTLP specification says: 200 with an
//! `ExportMetricsServiceResponse` (its partial success) in the request's
//! encoding; 400 with a `google.rpc.Status` for a body that does not
//! decode, 413 past `max_request_body_size`, 415 for another content type,
//! 503 while a memory limiter refuses. CORS preflights are answered for
//! `cors.allowed_origins`.

use super::config::{Cors, Http};
use super::ingest::{Ingest, Refusal};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use infertel_otlp::opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;
use std::io::Read;
use std::sync::Arc;

/// `google.rpc.Status`, the error body of OTLP/HTTP.
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

#[derive(Clone, Copy, PartialEq)]
enum Encoding {
    Proto,
    Json,
}

struct Ctx {
    ingest: Arc<Ingest>,
    cfg: Http,
}

fn reply(status: StatusCode, enc: Encoding, body: Vec<u8>) -> Response {
    let ct = match enc {
        Encoding::Proto => "application/x-protobuf",
        Encoding::Json => "application/json",
    };
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

fn error(status: StatusCode, enc: Encoding, grpc_code: i32, message: String) -> Response {
    let s = RpcStatus { code: grpc_code, message };
    let body = match enc {
        Encoding::Proto => s.encode_to_vec(),
        Encoding::Json => serde_json::to_vec(&s).unwrap_or_default(),
    };
    reply(status, enc, body)
}

fn decompress(encoding: &str, body: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let read = |r: &mut dyn Read, out: &mut Vec<u8>| -> Result<(), String> {
        let n = r.take(limit + 1).read_to_end(out).map_err(|e| format!("{encoding}: {e}"))?;
        if n as u64 > limit {
            return Err("too large".into());
        }
        Ok(())
    };
    match encoding {
        "" | "identity" => return Ok(body.to_vec()),
        "gzip" | "x-gzip" => read(&mut flate2::read::GzDecoder::new(body), &mut out)?,
        "deflate" | "zlib" => read(&mut flate2::read::ZlibDecoder::new(body), &mut out)?,
        "zstd" => {
            let mut d = zstd::stream::read::Decoder::new(body).map_err(|e| format!("zstd: {e}"))?;
            read(&mut d, &mut out)?
        }
        "snappy" => {
            let n = snap::raw::decompress_len(body).map_err(|e| format!("snappy: {e}"))?;
            if n as u64 > limit {
                return Err("too large".into());
            }
            out = snap::raw::Decoder::new().decompress_vec(body).map_err(|e| format!("snappy: {e}"))?;
        }
        other => return Err(format!("unsupported Content-Encoding {other:?} (gzip, deflate, zstd, snappy)")),
    }
    Ok(out)
}

/// OTLP/JSON. Enum fields are integers in the specification; the
/// Collector also reads their names (`"AGGREGATION_TEMPORALITY_DELTA"`, as
/// protobuf's own JSON printers write them by default), and so does this.
fn decode_json(raw: &[u8]) -> Result<ExportMetricsServiceRequest, String> {
    let mut v: serde_json::Value = serde_json::from_slice(raw).map_err(|e| format!("JSON: {e}"))?;
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if k == "aggregationTemporality"
                        && let Some(s) = x.as_str()
                    {
                        let n = match s {
                            "AGGREGATION_TEMPORALITY_DELTA" => 1,
                            "AGGREGATION_TEMPORALITY_CUMULATIVE" => 2,
                            _ => 0,
                        };
                        *x = serde_json::Value::from(n);
                    } else {
                        walk(x);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    serde_json::from_value(v).map_err(|e| format!("JSON: {e}"))
}

async fn export(State(ctx): State<Arc<Ctx>>, headers: HeaderMap, body: Bytes) -> Response {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let enc = match mime.as_str() {
        "application/x-protobuf" | "application/protobuf" => Encoding::Proto,
        "application/json" => Encoding::Json,
        _ => {
            ctx.ingest.refused("http", "unsupported_media_type");
            let mut r = error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Encoding::Json,
                3,
                format!("{ct:?} is not supported, supported types: [application/json application/x-protobuf]"),
            );
            r.headers_mut()
                .insert(header::ACCEPT, HeaderValue::from_static("application/x-protobuf, application/json"));
            return cors_headers(r, &ctx.cfg.cors, &headers);
        }
    };
    let limit = ctx.cfg.max_request_body_size;
    let encoding =
        headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("").trim().to_ascii_lowercase();
    let raw = match decompress(&encoding, &body, limit) {
        Ok(b) => b,
        Err(e) if e == "too large" => {
            ctx.ingest.refused("http", "too_large");
            return cors_headers(
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    enc,
                    8,
                    format!("the request body is over max_request_body_size ({limit} bytes)"),
                ),
                &ctx.cfg.cors,
                &headers,
            );
        }
        Err(e) => {
            ctx.ingest.refused("http", "bad_request");
            return cors_headers(error(StatusCode::BAD_REQUEST, enc, 3, e), &ctx.cfg.cors, &headers);
        }
    };
    let req = match enc {
        Encoding::Proto => ExportMetricsServiceRequest::decode(raw.as_slice()).map_err(|e| format!("protobuf: {e}")),
        Encoding::Json => decode_json(&raw),
    };
    let req = match req {
        Ok(r) => r,
        Err(e) => {
            ctx.ingest.refused("http", "bad_request");
            return cors_headers(error(StatusCode::BAD_REQUEST, enc, 3, e), &ctx.cfg.cors, &headers);
        }
    };
    let r = match ctx.ingest.export(req, "http").await {
        Ok(resp) => {
            let body = match enc {
                Encoding::Proto => resp.encode_to_vec(),
                Encoding::Json => serde_json::to_vec(&resp).unwrap_or_default(),
            };
            reply(StatusCode::OK, enc, body)
        }
        Err(Refusal::Busy) => {
            let mut r = error(StatusCode::SERVICE_UNAVAILABLE, enc, 14, "data refused due to high memory usage".into());
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            r
        }
    };
    cors_headers(r, &ctx.cfg.cors, &headers)
}

/// `*` in a pattern matches any run of characters.
fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, tail)) => {
            s.starts_with(head) && {
                let rest = &s[head.len()..];
                (0..=rest.len()).filter(|i| rest.is_char_boundary(*i)).any(|i| glob(tail, &rest[i..]))
            }
        }
    }
}

fn allowed_origin<'a>(cors: &Option<Cors>, headers: &'a HeaderMap) -> Option<&'a str> {
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok())?;
    let c = cors.as_ref()?;
    c.allowed_origins.iter().any(|p| glob(p, origin)).then_some(origin)
}

fn cors_headers(mut r: Response, cors: &Option<Cors>, headers: &HeaderMap) -> Response {
    if let Some(o) = allowed_origin(cors, headers)
        && let Ok(v) = HeaderValue::from_str(o)
    {
        r.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        r.headers_mut().insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    r
}

async fn preflight(State(ctx): State<Arc<Ctx>>, headers: HeaderMap) -> Response {
    let Some(origin) = allowed_origin(&ctx.cfg.cors, &headers) else {
        return StatusCode::FORBIDDEN.into_response();
    };
    let c = ctx.cfg.cors.clone().unwrap_or_default();
    let asked = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS).and_then(|v| v.to_str().ok()).unwrap_or("");
    const SAFE: &[&str] = &["accept", "accept-language", "content-language", "content-type", "content-encoding"];
    let ok = asked.split(',').map(|h| h.trim().to_ascii_lowercase()).filter(|h| !h.is_empty()).all(|h| {
        SAFE.contains(&h.as_str()) || c.allowed_headers.iter().any(|a| a == "*" || a.eq_ignore_ascii_case(&h))
    });
    if !ok {
        return StatusCode::FORBIDDEN.into_response();
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("POST"));
    if let Ok(v) = HeaderValue::from_str(asked)
        && !asked.is_empty()
    {
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
    }
    if let Some(age) = c.max_age
        && let Ok(v) = HeaderValue::from_str(&age.to_string())
    {
        h.insert(header::ACCESS_CONTROL_MAX_AGE, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    r
}

/// Serves until the task is aborted.
pub async fn serve(cfg: Http, listener: tokio::net::TcpListener, ingest: Arc<Ingest>) {
    let tls = match &cfg.tls {
        Some(t) => match crate::http::server_config(&t.cert_file, &t.key_file) {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                tracing::error!(receiver = %ingest.id, "protocols.http.tls: {e}: OTLP/HTTP is not served");
                return;
            }
        },
        None => None,
    };
    let path = cfg.metrics_url_path.clone();
    // The compressed body is bounded here; the decompressed one in `decompress`.
    let limit = usize::try_from(cfg.max_request_body_size).unwrap_or(usize::MAX);
    let ctx = Arc::new(Ctx { ingest: ingest.clone(), cfg });
    let app = axum::Router::new()
        .route(
            &path,
            axum::routing::post(export).options(preflight).fallback(|m: Method| async move {
                (StatusCode::METHOD_NOT_ALLOWED, format!("{m} is not supported, use POST\n"))
            }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .with_state(ctx);
    let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(receiver = %ingest.id, "OTLP/HTTP on {scheme}://{addr}{path}");
    match tls {
        None => {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(receiver = %ingest.id, "OTLP/HTTP stopped: {e}");
            }
        }
        Some(t) => crate::http::serve_tls("otlp receiver", listener, app, t).await,
    }
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn origins_match_as_the_collector_matches_them() {
        assert!(glob("https://*.example.com", "https://ui.example.com"));
        assert!(glob("*", "http://localhost:3000"));
        assert!(glob("http://localhost:3000", "http://localhost:3000"));
        assert!(!glob("https://*.example.com", "https://example.org"));
        assert!(!glob("http://a", "http://ab"));
    }
}
