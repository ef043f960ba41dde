//! `infertel run --config FILE [--watch-config]`: the agent. SIGTERM and
//! SIGINT shut it down in order (within `service.shutdown_timeout`); SIGHUP,
//! or a change of the file with `--watch-config`, reloads it: the new config
//! is validated and what changed is built while everything runs; then only
//! what changed is replaced (see `pipeline/src/graph/live.rs`): unchanged
//! receivers keep scraping on their schedule, unchanged exporters keep
//! their queues, a changed exporter hands its queue to its replacement. An
//! invalid config is logged and the running one keeps running. The
//! self-metrics endpoint and counters live across reloads.

use crate::cli::LogArgs;
use crate::exit;
use infertel_pipeline::{Service, Telemetry};
use std::path::Path;
use tokio::sync::watch;

pub async fn run(log: &LogArgs, path: &Path, watch_config: bool) -> u8 {
    let loaded = match super::load_file(path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let logs = &loaded.config.service.telemetry.logs;
    crate::logging::init(log, &logs.level, logs.encoding == "json");
    let telemetry = Telemetry::new();
    let readers = loaded.config.service.telemetry.metrics.readers.clone();
    let resource = loaded.config.service.telemetry.resource();
    // The agent's resource, as the Collector serves its own: `target_info`.
    let labels: Vec<(String, String)> = resource
        .iter()
        .map(|(k, v)| {
            (k.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect(), v.clone())
        })
        .collect();
    let refs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    telemetry.gauge("target_info", "Target metadata", &refs).set(1.0);
    let mut service = match Service::build(loaded.config, telemetry.clone(), None) {
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
    if let Err(e) = service.bind_pprof().await {
        tracing::error!("{e}");
        return exit::FAILURE;
    }
    // The status page's port is taken before the probes: a conflict is reported first.
    if let Err(e) = service.bind_status().await {
        tracing::error!("{e}");
        return exit::FAILURE;
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
    // service.telemetry.metrics.readers: the same self-metrics pushed over
    // OTLP; set up once, kept across reloads, flushed on exit.
    let self_otlp = match infertel_pipeline::self_otlp::SelfOtlp::start(&readers, &resource, &telemetry) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            return exit::CONFIG;
        }
    };
    let code = serve_reloading(service, Some((path, watch_config))).await;
    if let Some(s) = self_otlp {
        // The final export is bounded by the exporters' own timeouts; do not
        // hang on a backend that accepts the connection and never answers.
        let flush = tokio::task::spawn_blocking(move || s.shutdown());
        if tokio::time::timeout(std::time::Duration::from_secs(15), flush).await.is_err() {
            tracing::warn!("self-metrics OTLP flush did not finish within 15s; exiting");
        }
    }
    code
}

enum Event {
    Stop,
    Reload(&'static str),
}

/// SIGTERM, SIGINT and SIGHUP, listened to once for the life of the
/// process: tokio keeps a signal that arrives while nobody awaits it only
/// for a listener that already exists, so one made per event would lose a
/// SIGTERM sent during a reload.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
}

/// Resolves when `s` receives its signal (never without a listener).
#[cfg(unix)]
async fn on(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
                hup: signal(SignalKind::hangup()).ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// Resolves on SIGTERM or SIGINT.
    async fn stop(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = on(&mut self.term) => {}
            _ = on(&mut self.int) => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }

    /// The next event: a stop signal (first when several are pending), a
    /// SIGHUP, or a change of the watched config file.
    async fn next(&mut self, watch_config: Option<&Path>, last: &mut Option<Vec<u8>>) -> Event {
        loop {
            #[cfg(unix)]
            let hup = on(&mut self.hup);
            #[cfg(not(unix))]
            let hup = std::future::pending::<()>();
            #[cfg(unix)]
            let stop = async {
                tokio::select! {
                    _ = on(&mut self.term) => {}
                    _ = on(&mut self.int) => {}
                }
            };
            #[cfg(not(unix))]
            let stop = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            tokio::select! {
                biased;
                _ = stop => return Event::Stop,
                _ = hup => return Event::Reload("SIGHUP"),
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)), if watch_config.is_some() => {
                    let now = watch_config.and_then(|p| std::fs::read(p).ok());
                    if now.is_some() && now != *last {
                        *last = now;
                        return Event::Reload("config file changed");
                    }
                }
            }
        }
    }
}

async fn serve_reloading(service: Service, reload: Option<(&Path, bool)>) -> u8 {
    let listener = match service.bind_telemetry().await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return exit::FAILURE;
        }
    };
    if let Some(l) = &listener
        && let Ok(a) = l.local_addr()
    {
        tracing::info!("self-metrics at http://{a}/metrics");
    }
    if let Err(e) = service.open() {
        tracing::error!("{e}");
        return exit::FAILURE;
    }
    let telemetry = service.telemetry().clone();
    let server = listener.map(|l| Service::serve_telemetry(l, telemetry.clone()));
    let reloads_ok =
        telemetry.counter("infertel_config_reloads_total", "Config reloads, by result.", &[("result", "success")]);
    let reloads_failed =
        telemetry.counter("infertel_config_reloads_total", "Config reloads, by result.", &[("result", "failure")]);
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "infertel started");
    let mut signals = Signals::new();
    let mut live = service.start();
    let path = reload.map(|(p, _)| p);
    let watched = reload.and_then(|(p, w)| w.then_some(p));
    let mut last = watched.and_then(|p| std::fs::read(p).ok());
    loop {
        let why = match signals.next(watched, &mut last).await {
            Event::Stop => break,
            Event::Reload(why) => why,
        };
        let Some(path) = path else { continue };
        tracing::info!("reloading {} ({why})", path.display());
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                reloads_failed.inc();
                tracing::error!("reload refused, keeping the running config: cannot read {}: {e}", path.display());
                continue;
            }
        };
        let built = super::load_text(&path.display().to_string(), &text)
            .map_err(|_| "the new config is invalid (errors above)".to_string())
            .and_then(|l| live.prepare(l.config));
        let next = match built {
            Ok(s) => s,
            Err(e) => {
                reloads_failed.inc();
                tracing::error!("reload refused, keeping the running config: {e}");
                continue;
            }
        };
        // What did not change keeps running; the rest is replaced in place.
        // A SIGTERM meanwhile cuts the reload's waits short; the agent then
        // shuts down.
        let (cancel_tx, cancel) = watch::channel(false);
        let mut stopping = false;
        let summary = {
            let reload = live.reload(next, cancel);
            tokio::pin!(reload);
            loop {
                tokio::select! {
                    s = &mut reload => break s,
                    _ = signals.stop(), if !stopping => {
                        stopping = true;
                        tracing::info!("signal received during the reload: exiting once it is cut short");
                        let _ = cancel_tx.send(true);
                    }
                }
            }
        };
        reloads_ok.inc();
        tracing::info!("reloaded {}: {summary}", path.display());
        if stopping {
            live.shutdown().await;
            if let Some(s) = server {
                s.abort();
            }
            return exit::OK;
        }
    }
    tracing::info!("signal received");
    live.shutdown().await;
    if let Some(s) = server {
        s.abort();
    }
    exit::OK
}
