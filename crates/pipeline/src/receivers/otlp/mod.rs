//! Receiver `otlp`, as the Collector's `otlpreceiver` for metrics: OTLP over
//! gRPC (`grpc.rs`) and HTTP (`http.rs`), each request translated onto
//! Prometheus series as Prometheus' own OTLP endpoint translates it
//! (`translate.rs`, with delta streams made cumulative in `delta.rs`) and
//! answered with its partial success (`ingest.rs`).
//!
//! The listeners are bound when the agent starts, so a port in use stops
//! the start with the address; a receiver a reload adds or changes binds
//! when it starts, after the receiver it replaces has let go of the port.

pub mod config;
pub mod delta;
pub mod grpc;
pub mod http;
pub mod ingest;
pub mod names;
pub mod translate;

use crate::consumer::Consumer;
use crate::processors::memory_limiter::Backpressure;
use crate::receivers::prometheus::scrape::Stop;
use crate::telemetry::Telemetry;
use config::OtlpReceiverConfig;
use std::sync::Arc;
use tokio::sync::watch;

pub struct OtlpReceiver {
    pub id: String,
    cfg: OtlpReceiverConfig,
    grpc: Option<std::net::TcpListener>,
    http: Option<std::net::TcpListener>,
    pub backpressure: Backpressure,
}

fn bind(endpoint: &str, key: &str) -> Result<std::net::TcpListener, String> {
    let addr = crate::primitives::listen_addr(endpoint).map_err(|e| format!("{key} {e}"))?;
    let l = std::net::TcpListener::bind(addr).map_err(|e| format!("{key} {addr}: cannot listen: {e}"))?;
    l.set_nonblocking(true).map_err(|e| format!("{key} {addr}: {e}"))?;
    Ok(l)
}

impl OtlpReceiver {
    /// Builds the receiver; with `bind_now`, binds its listeners.
    pub fn new(id: String, cfg: OtlpReceiverConfig, bind_now: bool) -> Result<OtlpReceiver, String> {
        cfg.validate()?;
        let (mut grpc, mut http) = (None, None);
        if bind_now {
            if let Some(g) = &cfg.protocols.grpc {
                grpc = Some(bind(&g.endpoint, "protocols.grpc.endpoint")?);
            }
            if let Some(h) = &cfg.protocols.http {
                http = Some(bind(&h.endpoint, "protocols.http.endpoint")?);
            }
        }
        Ok(OtlpReceiver { id, cfg, grpc, http, backpressure: Backpressure::default() })
    }

    /// Serves until `stop` changes.
    pub async fn run(self, next: Arc<dyn Consumer>, telemetry: Telemetry, mut stop: watch::Receiver<Stop>) {
        let translator = translate::Translator::new(&self.cfg);
        let ingest = ingest::Ingest::new(self.id.clone(), translator, next, self.backpressure.clone(), telemetry);
        let mut tasks = Vec::new();
        let listener = |pre: Option<std::net::TcpListener>, endpoint: &str, key: &str| {
            let l = match pre {
                Some(l) => l,
                None => bind(endpoint, key)?,
            };
            tokio::net::TcpListener::from_std(l).map_err(|e| format!("{key}: {e}"))
        };
        if let Some(g) = self.cfg.protocols.grpc.clone() {
            match listener(self.grpc, &g.endpoint, "protocols.grpc.endpoint") {
                Ok(l) => tasks.push(tokio::spawn(grpc::serve(g, l, ingest.clone()))),
                Err(e) => tracing::error!(receiver = %self.id, "{e}: OTLP/gRPC is not served"),
            }
        }
        if let Some(h) = self.cfg.protocols.http.clone() {
            match listener(self.http, &h.endpoint, "protocols.http.endpoint") {
                Ok(l) => tasks.push(tokio::spawn(http::serve(h, l, ingest.clone()))),
                Err(e) => tracing::error!(receiver = %self.id, "{e}: OTLP/HTTP is not served"),
            }
        }
        while *stop.borrow() == Stop::Running {
            if stop.changed().await.is_err() {
                break;
            }
        }
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
    }
}
