//! Serves the simulator over HTTP: vLLM's `/metrics` on one address and
//! dcgm-exporter's on another, like the real pair (`:8000`, `:9400`).
//!
//! The simulator itself never reads a clock; this is the one place that
//! does: every scrape first advances the shared simulator to wall-clock time,
//! so consecutive scrapes see counters grow at the simulated rate.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::SimConfig;
use crate::engine::Simulator;

/// What `prometheus_client` (vLLM sets it explicitly) and dcgm-exporter send.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Lock even if a previous holder panicked: the state is plain numbers and
/// stays usable, and a demo should not die with one bad request.
fn lock(sim: &Mutex<Simulator>) -> MutexGuard<'_, Simulator> {
    sim.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running simulated vLLM + dcgm-exporter. Dropping it (or calling
/// [`SimServer::shutdown`]) stops both listeners.
#[derive(Debug)]
pub struct SimServer {
    /// Where vLLM's `/metrics` is served (the real port when 0 was asked for).
    pub vllm_addr: SocketAddr,
    /// Where dcgm-exporter's `/metrics` is served.
    pub dcgm_addr: SocketAddr,
    sim: Arc<Mutex<Simulator>>,
    stop: Option<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimServer {
    /// Change the client count from now on (advances the simulator to now first).
    pub fn set_concurrency(&self, c: f64) {
        let mut sim = lock(&self.sim);
        sim.advance_to(unix_now());
        sim.set_concurrency(c);
    }

    /// The shared simulator, e.g. to render without HTTP.
    pub fn simulator(&self) -> Arc<Mutex<Simulator>> {
        Arc::clone(&self.sim)
    }

    /// Stop serving gracefully: the listeners close, scrapes in flight finish.
    pub fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        // Detach: the servers wind down on their own; Drop must not abort them.
        self.tasks.clear();
    }
}

impl Drop for SimServer {
    /// Dropping without `shutdown` stops at once: both listeners are closed
    /// when their tasks are aborted.
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn vllm_metrics(State(sim): State<Arc<Mutex<Simulator>>>) -> impl IntoResponse {
    let body = {
        let mut sim = lock(&sim);
        sim.advance_to(unix_now());
        sim.render_server()
    };
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], body)
}

async fn dcgm_metrics(State(sim): State<Arc<Mutex<Simulator>>>) -> impl IntoResponse {
    let body = {
        let mut sim = lock(&sim);
        sim.advance_to(unix_now());
        sim.render_dcgm()
    };
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], body)
}

/// Bind both addresses (port 0 picks a free port) and serve `GET /metrics`
/// on each until the returned [`SimServer`] is shut down or dropped.
/// Must be called inside a Tokio runtime.
pub async fn serve(cfg: SimConfig, vllm: SocketAddr, dcgm: SocketAddr) -> std::io::Result<SimServer> {
    let vllm_listener = TcpListener::bind(vllm).await?;
    let dcgm_listener = TcpListener::bind(dcgm).await?;
    let vllm_addr = vllm_listener.local_addr()?;
    let dcgm_addr = dcgm_listener.local_addr()?;
    let sim = Arc::new(Mutex::new(Simulator::new(cfg, unix_now())));

    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    // One shutdown signal fanned out to both servers.
    let (fan_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let fan = fan_tx.clone();
    let relay = tokio::spawn(async move {
        // Fires on `send` and also when the sender is dropped.
        let _ = stop_rx.await;
        let _ = fan.send(());
    });

    let spawn = |listener: TcpListener, router: Router| {
        let mut rx = fan_tx.subscribe();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = rx.recv().await;
                })
                .await;
        })
    };
    let vllm_router = Router::new().route("/metrics", get(vllm_metrics)).with_state(Arc::clone(&sim));
    let dcgm_router = Router::new().route("/metrics", get(dcgm_metrics)).with_state(Arc::clone(&sim));
    let tasks = vec![relay, spawn(vllm_listener, vllm_router), spawn(dcgm_listener, dcgm_router)];
    Ok(SimServer { vllm_addr, dcgm_addr, sim, stop: Some(stop_tx), tasks })
}
