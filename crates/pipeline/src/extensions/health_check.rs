//! Extension `health_check` (the Collector's shape: `endpoint`): serves
//! `/healthz` (the process is alive: always 200) and `/readyz` (200 once the
//! receivers have started and every exporter's endpoint is up; 503 with the
//! reason otherwise: an exporter paused on a 403 is not ready).

use crate::exporters::probe::EndpointState;
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct HealthCheckConfig {
    /// host:port to serve /healthz and /readyz on.
    pub endpoint: String,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        HealthCheckConfig { endpoint: "127.0.0.1:13133".into() }
    }
}

impl HealthCheckConfig {
    pub fn socket_addr(&self) -> Result<SocketAddr, String> {
        crate::primitives::listen_addr(&self.endpoint).map_err(|e| format!("health_check: endpoint {e}"))
    }
}

/// What `/readyz` reports on.
/// One for the life of the process; a reload replaces the exporter list.
#[derive(Default)]
pub struct Readiness {
    pub receivers_started: AtomicBool,
    exporters: std::sync::RwLock<Vec<Arc<EndpointState>>>,
}

impl Readiness {
    pub fn exporters(&self) -> Vec<Arc<EndpointState>> {
        self.exporters.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_exporters(&self, e: Vec<Arc<EndpointState>>) {
        *self.exporters.write().unwrap_or_else(|p| p.into_inner()) = e;
    }

    /// Ready, and why not.
    pub fn check(&self) -> (bool, String) {
        let mut why = Vec::new();
        if !self.receivers_started.load(Ordering::Relaxed) {
            why.push("receivers not started".to_string());
        }
        for e in self.exporters() {
            if !e.is_up() {
                let reason = e.last_failure().map(|r| r.line()).unwrap_or_else(|| "endpoint down".into());
                why.push(format!("exporter {}: paused: {reason}", e.exporter));
            }
        }
        if why.is_empty() { (true, "ready\n".into()) } else { (false, format!("not ready\n{}\n", why.join("\n"))) }
    }
}

/// Serves the two paths on `listener` until the task is aborted.
pub async fn serve(listener: tokio::net::TcpListener, readiness: Arc<Readiness>) {
    use axum::http::StatusCode;
    let app =
        axum::Router::new().route("/healthz", axum::routing::get(|| async { (StatusCode::OK, "alive\n") })).route(
            "/readyz",
            axum::routing::get(move || {
                let r = readiness.clone();
                async move {
                    let (ok, body) = r.check();
                    (if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, body)
                }
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!("health_check endpoint stopped: {e}");
    }
}
