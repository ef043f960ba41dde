//! The `prometheus` exporter's HTTP server: `GET /metrics` on `endpoint`.
//!
//! One server per endpoint for the life of the process, shared by the
//! exporters configured on it: a reload that changes the exporter (its
//! namespace, say) builds the new one while the old one still serves, so
//! the new one attaches to the same listener instead of failing to bind it,
//! and takes over the old one's values. The server answers with the most
//! recently attached exporter still alive (a reload that fails after
//! building drops its exporter, and the old one answers again), and stops
//! when the last exporter on it is gone.

use super::Shared;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock, Weak};

pub struct Endpoint {
    pub key: String,
    attached: Mutex<Vec<Weak<Shared>>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }
}

fn registry() -> &'static Mutex<HashMap<String, Weak<Endpoint>>> {
    static R: OnceLock<Mutex<HashMap<String, Weak<Endpoint>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

impl Endpoint {
    /// The exporter most recently attached that is still alive.
    pub fn current(&self) -> Option<Arc<Shared>> {
        let mut list = self.attached.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.iter().rev().find_map(Weak::upgrade)
    }

    /// Attaches `shared` to the server for its endpoint, binding it first
    /// when no exporter serves there yet.
    pub fn attach(shared: &Arc<Shared>) -> Result<Arc<Endpoint>, String> {
        let cfg = &shared.cfg;
        let key = format!("{}\u{0}{:?}", cfg.endpoint, cfg.tls);
        let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
        reg.retain(|_, w| w.strong_count() > 0);
        if let Some(e) = reg.get(&key).and_then(Weak::upgrade) {
            if let Some(prev) = e.current() {
                shared.take_over(&prev);
            }
            e.attached.lock().unwrap_or_else(|p| p.into_inner()).push(Arc::downgrade(shared));
            return Ok(e);
        }
        let addr = crate::primitives::listen_addr(&cfg.endpoint).map_err(|e| format!("endpoint {e}"))?;
        let rt = tokio::runtime::Handle::try_current().map_err(|_| "serving needs the agent's runtime".to_string())?;
        let std_listener =
            std::net::TcpListener::bind(addr).map_err(|e| format!("endpoint {addr}: cannot listen: {e}"))?;
        std_listener.set_nonblocking(true).map_err(|e| format!("endpoint {addr}: {e}"))?;
        let tls = match &cfg.tls {
            Some(t) => {
                Some(Arc::new(crate::http::server_config(&t.cert_file, &t.key_file).map_err(|e| format!("tls: {e}"))?))
            }
            None => None,
        };
        let e = Arc::new(Endpoint {
            key: key.clone(),
            attached: Mutex::new(vec![Arc::downgrade(shared)]),
            task: Mutex::new(None),
        });
        let _guard = rt.enter();
        let listener = tokio::net::TcpListener::from_std(std_listener).map_err(|e| format!("endpoint {addr}: {e}"))?;
        let app = axum::Router::new().route("/metrics", axum::routing::get(metrics)).with_state(Arc::downgrade(&e));
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(exporter = %shared.id, "prometheus exporter: serving {scheme}://{}/metrics", listener.local_addr().map(|a| a.to_string()).unwrap_or_default());
        let task = rt.spawn(async move {
            match tls {
                None => {
                    if let Err(err) = axum::serve(listener, app).await {
                        tracing::error!("prometheus exporter stopped: {err}");
                    }
                }
                Some(t) => crate::http::serve_tls("prometheus exporter", listener, app, t).await,
            }
        });
        *e.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        reg.insert(key, Arc::downgrade(&e));
        Ok(e)
    }
}

async fn metrics(State(ep): State<Weak<Endpoint>>, headers: HeaderMap) -> Response {
    let Some(shared) = ep.upgrade().and_then(|e| e.current()) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the exporter is shutting down\n").into_response();
    };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let openmetrics = shared.cfg.enable_open_metrics && accept.contains("application/openmetrics-text");
    let page = shared.page(openmetrics);
    let content_type = if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    };
    let gzip = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.trim().split(';').next() == Some("gzip")));
    let mut resp = if gzip {
        let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(page.len() / 4), flate2::Compression::fast());
        match enc.write_all(page.as_bytes()).and_then(|_| enc.finish()) {
            Ok(body) => {
                let mut r = body.into_response();
                r.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                r
            }
            Err(_) => page.into_response(),
        }
    } else {
        page.into_response()
    };
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
