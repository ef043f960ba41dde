//! `infertel run --config FILE`: the agent.

use crate::cli::LogArgs;
use crate::exit;
use infertel_pipeline::{Service, Telemetry};
use std::path::Path;
use tokio::sync::watch;

pub async fn run(log: &LogArgs, path: &Path) -> u8 {
    let loaded = match super::load_file(path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let logs = &loaded.config.service.telemetry.logs;
    crate::logging::init(log, &logs.level, logs.encoding == "json");
    let mut service = match Service::build(loaded.config, Telemetry::new(), None) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            return exit::CONFIG;
        }
    };
    // /healthz answers (and /readyz says not ready) while the probes run.
    match service.bind_health().await {
        Ok(_) => {}
        Err(e) => {
            tracing::error!("{e}");
            return exit::FAILURE;
        }
    }
    if let Err(faults) = service.startup_checks().await {
        for f in &faults {
            eprintln!("error: {f}");
        }
        eprintln!(
            "{}: refusing to start: {} exporter endpoint{} misconfigured (startup_check: fail; set it to warn to start anyway, or run `infertel check --config {}`)",
            path.display(),
            faults.len(),
            if faults.len() == 1 { " is" } else { "s are" },
            path.display()
        );
        return exit::CONFIG;
    }
    serve(service).await
}

/// Runs a built service until SIGINT/SIGTERM.
pub async fn serve(service: Service) -> u8 {
    let listener = match service.bind_telemetry().await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return exit::FAILURE;
        }
    };
    if let Some(l) = &listener
        && let Ok(a) = l.local_addr() {
            tracing::info!("self-metrics at http://{a}/metrics");
        }
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "infertel started");
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn(service.run(listener, rx));
    super::shutdown_signal().await;
    tracing::info!("signal received");
    let _ = tx.send(true);
    let _ = task.await;
    exit::OK
}
