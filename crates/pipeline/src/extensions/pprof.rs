//! Extension `pprof` (contrib's pprofextension): the agent's own profiles
//! on Go's `net/http/pprof` paths, so `go tool pprof
//! http://HOST:1777/debug/pprof/profile` works as it does on a Collector:
//!
//! - `/debug/pprof/profile?seconds=N`: a CPU profile over N seconds
//!   (default 30), sampled at 100 Hz;
//! - `/debug/pprof/heap` and `/debug/pprof/allocs`: the heap profile
//!   (in use, and everything allocated since the extension started);
//! - `/debug/pprof/cmdline`, and an index at `/debug/pprof/`.
//!
//! `save_to_file` profiles the CPU from start to shutdown and writes the
//! profile there, as contrib does. `block_profile_fraction` and
//! `mutex_profile_fraction` set Go runtime profiles that a Rust process
//! does not have: accepted with a warning.

use crate::primitives::listen_addr;
use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use infertel_profile::{CpuProfiler, ProfileError, heap};
use serde::Deserialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::task::JoinHandle;

/// Go's CPU sampling rate.
const CPU_HZ: i32 = 100;
/// The longest CPU profile one request may ask for.
const MAX_SECONDS: u64 = 600;

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PprofConfig {
    pub endpoint: String,
    pub block_profile_fraction: i64,
    pub mutex_profile_fraction: i64,
    pub save_to_file: Option<PathBuf>,
}

impl Default for PprofConfig {
    fn default() -> Self {
        PprofConfig {
            endpoint: "localhost:1777".into(),
            block_profile_fraction: 0,
            mutex_profile_fraction: 0,
            save_to_file: None,
        }
    }
}

impl PprofConfig {
    pub fn socket_addr(&self) -> Result<SocketAddr, String> {
        listen_addr(&self.endpoint).map_err(|e| format!("pprof: endpoint {e}"))
    }

    pub fn validate(&self) -> Result<(), String> {
        self.socket_addr()?;
        if let Some(f) = &self.save_to_file {
            if f.as_os_str().is_empty() {
                return Err("pprof: save_to_file must not be empty (leave it out to save nothing)".into());
            }
            let dir = f.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
            if !dir.is_dir() {
                return Err(format!(
                    "pprof: save_to_file {}: the directory {} does not exist",
                    f.display(),
                    dir.display()
                ));
            }
        }
        Ok(())
    }

    /// Keys the Collector honours and infertel cannot: (key, why).
    pub fn warnings(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (key, v, what) in [
            ("block_profile_fraction", self.block_profile_fraction, "blocking"),
            ("mutex_profile_fraction", self.mutex_profile_fraction, "mutex contention"),
        ] {
            if v > 0 {
                out.push((
                    key.to_string(),
                    format!(
                        "{key}: {v} enables the Go runtime's {what} profile, which a Rust process does not have; ignored (CPU and heap profiles are served)"
                    ),
                ));
            }
        }
        out
    }
}

/// The running extension: its server and, with `save_to_file`, the
/// whole-run CPU profile.
pub struct Pprof {
    pub cfg: PprofConfig,
    server: JoinHandle<()>,
    /// Starting pprof-rs symbolizes once (a second in a debug build), so it
    /// starts off the runtime's threads.
    whole_run: Option<tokio::task::JoinHandle<Option<CpuProfiler>>>,
}

impl Pprof {
    pub async fn bind(cfg: &PprofConfig) -> Result<tokio::net::TcpListener, String> {
        let a = cfg.socket_addr()?;
        tokio::net::TcpListener::bind(a).await.map_err(|e| format!("extensions.pprof.endpoint {a}: cannot listen: {e}"))
    }

    /// Starts heap sampling, the whole-run CPU profile when asked, and the
    /// server on `l`.
    pub fn start(cfg: PprofConfig, l: tokio::net::TcpListener) -> Pprof {
        heap::set_rate(heap::DEFAULT_RATE);
        let whole_run = cfg.save_to_file.clone().map(|f| {
            tokio::task::spawn_blocking(move || {
                // A profile asked for over HTTP may be running (taken
                // before a reload): the whole run starts when it ends.
                let mut waited = false;
                loop {
                    match CpuProfiler::start(CPU_HZ) {
                        Ok(p) => return Some(p),
                        Err(ProfileError::CpuBusy) => {
                            if !waited {
                                tracing::info!("pprof: save_to_file waits for the CPU profile in progress");
                                waited = true;
                            }
                            std::thread::sleep(Duration::from_millis(200));
                        }
                        Err(e) => {
                            tracing::error!("pprof: save_to_file {}: {e}", f.display());
                            return None;
                        }
                    }
                }
            })
        });
        tracing::info!(
            "pprof: profiles at http://{}/debug/pprof/",
            l.local_addr().map(|a| a.to_string()).unwrap_or_default()
        );
        let app = router();
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(l, app).await {
                tracing::error!("pprof endpoint stopped: {e}");
            }
        });
        Pprof { cfg, server, whole_run }
    }

    /// Stops the server and heap sampling and writes `save_to_file`.
    pub async fn stop(mut self) {
        self.server.abort();
        let _ = (&mut self.server).await;
        heap::set_rate(0);
        let Some(starting) = self.whole_run.take() else { return };
        let (Ok(Some(p)), Some(f)) = (starting.await, self.cfg.save_to_file.clone()) else { return };
        let written = tokio::task::spawn_blocking(move || {
            let bytes = p.finish().map_err(|e| e.to_string())?;
            std::fs::write(&f, &bytes).map_err(|e| format!("{}: {e}", f.display()))?;
            Ok::<_, String>((f, bytes.len()))
        })
        .await;
        match written {
            Ok(Ok((f, n))) => tracing::info!("pprof: CPU profile of the run written to {} ({n} bytes)", f.display()),
            Ok(Err(e)) => tracing::error!("pprof: save_to_file: {e}"),
            Err(e) => tracing::error!("pprof: save_to_file: {e}"),
        }
    }
}

fn router() -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/debug/pprof/", get(index))
        .route("/debug/pprof", get(index))
        .route("/debug/pprof/profile", get(cpu))
        .route("/debug/pprof/heap", get(|q: Query<HashMap<String, String>>| heap_profile(q, "inuse_space")))
        .route("/debug/pprof/allocs", get(|q: Query<HashMap<String, String>>| heap_profile(q, "alloc_space")))
        .route("/debug/pprof/cmdline", get(cmdline))
        .route("/debug/pprof/{name}", get(unknown))
}

async fn index() -> Response {
    let body = "<!DOCTYPE html><html><head><title>/debug/pprof/</title></head><body>\
        <p>infertel profiles, in Go's pprof format (<code>go tool pprof URL</code>):</p><ul>\
        <li><a href=\"profile?seconds=30\">profile</a>: CPU, 30 s (<code>?seconds=N</code>)</li>\
        <li><a href=\"heap\">heap</a>: memory in use (sampled, one per 512 KiB on average)</li>\
        <li><a href=\"allocs\">allocs</a>: memory allocated since the extension started</li>\
        <li><a href=\"cmdline\">cmdline</a></li></ul></body></html>";
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

fn profile_response(bytes: Vec<u8>, name: &str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{name}\"")),
            (header::HeaderName::from_static("x-content-type-options"), "nosniff".to_string()),
        ],
        bytes,
    )
        .into_response()
}

fn error(status: StatusCode, message: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], message + "\n").into_response()
}

/// Cancels the profile when the request goes away (the client hung up).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

async fn cpu(Query(q): Query<HashMap<String, String>>) -> Response {
    let seconds = match q.get("seconds").map(|s| s.trim().parse::<u64>()) {
        None => 30,
        Some(Ok(s)) if (1..=MAX_SECONDS).contains(&s) => s,
        Some(_) => {
            return error(StatusCode::BAD_REQUEST, format!("seconds: a whole number from 1 to {MAX_SECONDS}"));
        }
    };
    let cancelled = Arc::new(AtomicBool::new(false));
    let _guard = CancelOnDrop(cancelled.clone());
    let c = cancelled.clone();
    let r = tokio::task::spawn_blocking(move || {
        infertel_profile::cpu::profile_for(Duration::from_secs(seconds), CPU_HZ, &c)
    })
    .await;
    match r {
        Ok(Ok(bytes)) => profile_response(bytes, "profile"),
        Ok(Err(ProfileError::CpuBusy)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Could not enable CPU profiling: {}", ProfileError::CpuBusy),
        ),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("the profiling task failed: {e}")),
    }
}

async fn heap_profile(Query(q): Query<HashMap<String, String>>, default: &'static str) -> Response {
    if q.get("debug").is_some_and(|d| d != "0") {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "debug=1 (Go's text form) is not served: read the profile with go tool pprof".into(),
        );
    }
    match tokio::task::spawn_blocking(move || heap::profile(default)).await {
        Ok(Ok(bytes)) => profile_response(bytes, if default == "alloc_space" { "allocs" } else { "heap" }),
        Ok(Err(e @ ProfileError::HeapNotInstalled)) => error(StatusCode::NOT_IMPLEMENTED, e.to_string()),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("the profiling task failed: {e}")),
    }
}

async fn cmdline() -> Response {
    let args: Vec<String> = std::env::args().collect();
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], args.join("\0")).into_response()
}

async fn unknown(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    let go_only = ["goroutine", "block", "mutex", "threadcreate", "trace", "symbol"];
    if go_only.contains(&name.as_str()) {
        return error(
            StatusCode::NOT_FOUND,
            format!("Unknown profile: {name} is a Go runtime profile; infertel serves profile (CPU), heap and allocs"),
        );
    }
    error(StatusCode::NOT_FOUND, format!("Unknown profile: {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_defaults_as_contrib() {
        let c: PprofConfig = serde_yaml::from_str("{}").unwrap();
        assert_eq!(c.endpoint, "localhost:1777");
        assert_eq!(c.socket_addr().unwrap(), "127.0.0.1:1777".parse().unwrap());
        let c: PprofConfig = serde_yaml::from_str(
            "endpoint: 0.0.0.0:1888\nblock_profile_fraction: 3\nmutex_profile_fraction: 5\nsave_to_file: /tmp/cpu.pprof",
        )
        .unwrap();
        c.validate().unwrap();
        let w = c.warnings();
        assert_eq!(w.len(), 2);
        assert!(w[0].1.contains("Go runtime's blocking profile"), "{w:?}");
        let c: PprofConfig = serde_yaml::from_str("endpoint: \":1777\"").unwrap();
        assert_eq!(c.socket_addr().unwrap(), "0.0.0.0:1777".parse().unwrap(), "Go's :port is every interface");
        let c: PprofConfig = serde_yaml::from_str("save_to_file: /nonexistent-dir/cpu.pprof").unwrap();
        assert!(c.validate().unwrap_err().contains("does not exist"));
        assert!(serde_yaml::from_str::<PprofConfig>("endpont: x").is_err());
    }
}
