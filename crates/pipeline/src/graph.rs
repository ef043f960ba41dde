//! The pipeline graph, built once from the config, as in the Collector:
//! exporters are built once and shared by the pipelines that list them;
//! each pipeline gets its own processor chain ending in a fan-out to its
//! exporters; each receiver feeds the first processor of every pipeline
//! that lists it. Shutdown runs the other way: receivers stop first (and
//! send their stale markers), then processors flush, then exporters drain.

use crate::config::{ComponentId, Config};
use crate::consumer::{Consumer, FanOut};
use crate::exporters::ExporterConfig;
use crate::exporters::debug::DebugExporter;
use crate::exporters::probe::{ProbeResult, StartupCheck, Verdict};
use crate::exporters::queue::QueuedExporter;
use crate::extensions::ExtensionConfig;
use crate::extensions::health_check::Readiness;
use crate::processors::ProcessorConfig;
use crate::processors::batch::BatchProcessor;
use crate::processors::inference::InferenceProcessor;
use crate::processors::memory_limiter::{Backpressure, MemoryLimiter};
use crate::receivers::ReceiverConfig;
use crate::receivers::prometheus::PrometheusReceiver;
use crate::telemetry::Telemetry;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

enum Exporter {
    /// Remote write, OTLP gRPC, OTLP HTTP: the shared sending queue.
    Queued(Arc<dyn QueuedExporter>),
    Debug(Arc<DebugExporter>),
}

impl Exporter {
    /// The consumer a pipeline feeds; `naming` is Preserve when the
    /// pipeline lists the `preserve_names` processor.
    fn consumer(&self, naming: infertel_otlp::Naming) -> Arc<dyn Consumer> {
        match self {
            Exporter::Queued(e) => e.clone().consumer(naming),
            Exporter::Debug(e) => e.clone(),
        }
    }
}

/// A built, not yet running, agent.
pub struct Service {
    receivers: Vec<(PrometheusReceiver, Arc<dyn Consumer>)>,
    processors: Vec<Arc<BatchProcessor>>,
    memory_limiters: Vec<Arc<MemoryLimiter>>,
    exporters: Vec<(ComponentId, Exporter)>,
    telemetry: Telemetry,
    metrics_addr: Option<SocketAddr>,
    shutdown_timeout: Duration,
    health_addr: Option<SocketAddr>,
    health_listener: Option<tokio::net::TcpListener>,
    readiness: Arc<Readiness>,
}

/// One exporter's probe, for `infertel check` and the startup log.
pub struct ExporterProbe {
    pub id: String,
    pub endpoint: String,
    pub check: StartupCheck,
    pub result: ProbeResult,
}

impl Service {
    /// Builds every component; `tap`, when given, also receives everything
    /// every receiver emits (used by `infertel demo`).
    pub fn build(cfg: Config, telemetry: Telemetry, tap: Option<Arc<dyn Consumer>>) -> Result<Service, String> {
        let extensions: BTreeMap<String, ExtensionConfig> =
            cfg.extensions.0.iter().map(|(id, c)| (id.to_string(), c.clone())).collect();
        let mut exporters: Vec<(ComponentId, Exporter)> = Vec::new();
        let used = |section: &str, id: &ComponentId| {
            cfg.service.pipelines.values().any(|p| {
                let list = match section {
                    "receivers" => &p.receivers,
                    "processors" => &p.processors,
                    _ => &p.exporters,
                };
                list.iter().any(|r| *r == id.to_string())
            })
        };
        for (id, ec) in cfg.exporters.0 {
            if !used("exporters", &id) {
                continue;
            }
            let storage = match ec.queue().and_then(|q| q.storage.as_deref()) {
                Some(s) => Some(extensions.get(s).and_then(|e| e.storage()).ok_or_else(|| {
                    format!("exporter {id}: sending_queue.storage {s:?} is not a file_storage extension")
                })?),
                None => None,
            };
            let auth = match ec.authenticator() {
                Some(a) => Some(
                    extensions
                        .get(a)
                        .cloned()
                        .ok_or_else(|| format!("exporter {id}: authenticator {a:?} not defined"))?,
                ),
                None => None,
            };
            if let Some(a) = &auth
                && !a.is_authenticator()
            {
                return Err(format!(
                    "exporter {id}: {:?} is not an authenticator extension",
                    ec.authenticator().unwrap_or_default()
                ));
            }
            let e = match ec {
                ExporterConfig::PrometheusRemoteWrite(c) => Exporter::Queued(
                    crate::exporters::prometheusremotewrite::new_exporter(id.to_string(), c, auth, telemetry.clone())
                        .map_err(|e| format!("exporter {id}: {e}"))?,
                ),
                ExporterConfig::Otlp(c) => Exporter::Queued(
                    crate::exporters::otlp::new_exporter(id.to_string(), c, auth, telemetry.clone())
                        .map_err(|e| format!("exporter {id}: {e}"))?,
                ),
                ExporterConfig::OtlpHttp(c) => Exporter::Queued(
                    crate::exporters::otlphttp::new_exporter(id.to_string(), c, auth, telemetry.clone())
                        .map_err(|e| format!("exporter {id}: {e}"))?,
                ),
                ExporterConfig::Debug(c) => Exporter::Debug(Arc::new(DebugExporter { id: id.to_string(), cfg: c })),
            };
            if let (Exporter::Queued(q), Some(s)) = (&e, storage) {
                q.set_storage(s);
            }
            exporters.push((id, e));
        }
        let mut processors = Vec::new();
        let mut entries: BTreeMap<String, Vec<Arc<dyn Consumer>>> = BTreeMap::new();
        // The memory limiters' flags, per receiver feeding their pipelines.
        let mut memory_limiters = Vec::new();
        let mut pressure: BTreeMap<String, Backpressure> = BTreeMap::new();
        for (pname, p) in &cfg.service.pipelines {
            let preserve =
                p.processors.iter().any(|r| ComponentId::parse(r).is_ok_and(|id| id.kind == "preserve_names"));
            let naming = if preserve { infertel_otlp::Naming::Preserve } else { infertel_otlp::Naming::Otel };
            let outs: Vec<Arc<dyn Consumer>> = p
                .exporters
                .iter()
                .filter_map(|r| exporters.iter().find(|(id, _)| id.to_string() == *r).map(|(_, e)| e.consumer(naming)))
                .collect();
            let mut next: Arc<dyn Consumer> = if outs.len() == 1 { outs[0].clone() } else { Arc::new(FanOut(outs)) };
            for r in p.processors.iter().rev() {
                let id = ComponentId::parse(r)?;
                let pc =
                    cfg.processors.get(&id).ok_or_else(|| format!("pipeline {pname}: processor {r} not defined"))?;
                match pc {
                    ProcessorConfig::Batch(c) => {
                        let bp = BatchProcessor::new(c.clone(), next);
                        processors.push(bp.clone());
                        next = bp;
                    }
                    ProcessorConfig::Inference(c) => {
                        next = InferenceProcessor::new(id.to_string(), c, next, telemetry.clone());
                    }
                    ProcessorConfig::MemoryLimiter(c) => {
                        let ml = MemoryLimiter::new(id.to_string(), c, next, &telemetry)
                            .map_err(|e| format!("processor {id}: {e}"))?;
                        for r in &p.receivers {
                            pressure.entry(r.clone()).or_default().0.push(ml.pressure());
                        }
                        memory_limiters.push(ml.clone());
                        next = ml;
                    }
                    // A pipeline-level naming contract, applied above when
                    // the exporters' consumers were made; batches pass as is.
                    ProcessorConfig::PreserveNames(_) => {}
                }
            }
            for r in &p.receivers {
                entries.entry(r.clone()).or_default().push(next.clone());
            }
        }
        let mut receivers = Vec::new();
        for (id, rc) in cfg.receivers.0 {
            let Some(mut outs) = entries.remove(&id.to_string()) else {
                continue;
            };
            if let Some(t) = &tap {
                outs.push(t.clone());
            }
            let next: Arc<dyn Consumer> = if outs.len() == 1 { outs.remove(0) } else { Arc::new(FanOut(outs)) };
            match rc {
                ReceiverConfig::Prometheus(c) => {
                    let mut r =
                        PrometheusReceiver::new(id.to_string(), c).map_err(|e| format!("receiver {id}: {e}"))?;
                    r.backpressure = pressure.remove(&id.to_string()).unwrap_or_default();
                    receivers.push((r, next));
                }
            }
        }
        let metrics_addr = cfg.service.telemetry.metrics.socket_addr()?;
        let shutdown_timeout = cfg.service.shutdown_timeout();
        let mut health_addr = None;
        for name in &cfg.service.extensions {
            if let Some(ExtensionConfig::HealthCheck(h)) = extensions.get(name) {
                health_addr = Some(h.socket_addr()?);
            }
        }
        let readiness = Arc::new(Readiness {
            receivers_started: Default::default(),
            exporters: exporters
                .iter()
                .filter_map(|(_, e)| match e {
                    Exporter::Queued(x) => x.endpoint_state(),
                    Exporter::Debug(_) => None,
                })
                .collect(),
        });
        Ok(Service {
            receivers,
            processors,
            memory_limiters,
            exporters,
            telemetry,
            metrics_addr,
            shutdown_timeout,
            health_addr,
            health_listener: None,
            readiness,
        })
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Binds the self-metrics endpoint; separate from `run` so a port
    /// conflict is reported before anything starts.
    pub async fn bind_telemetry(&self) -> Result<Option<tokio::net::TcpListener>, String> {
        match self.metrics_addr {
            None => Ok(None),
            Some(a) => tokio::net::TcpListener::bind(a)
                .await
                .map(Some)
                .map_err(|e| format!("service.telemetry.metrics.address {a}: cannot listen: {e}")),
        }
    }

    /// Binds the `health_check` extension's endpoint, when configured, so
    /// `/healthz` answers while the startup probes run.
    pub async fn bind_health(&mut self) -> Result<Option<SocketAddr>, String> {
        let Some(a) = self.health_addr else { return Ok(None) };
        let l = tokio::net::TcpListener::bind(a)
            .await
            .map_err(|e| format!("extensions.health_check.endpoint {a}: cannot listen: {e}"))?;
        let local = l.local_addr().ok();
        self.health_listener = Some(l);
        Ok(local)
    }

    /// Probes every network exporter (all of them: `infertel check`; or
    /// only those without `startup_check: off`), concurrently.
    pub async fn probe_exporters(&self, include_off: bool) -> Vec<ExporterProbe> {
        let probes = self.exporters.iter().filter_map(|(id, e)| {
            let Exporter::Queued(x) = e else { return None };
            let st = x.endpoint_state()?;
            if !include_off && st.check == StartupCheck::Off {
                return None;
            }
            let x = x.clone();
            let id = id.to_string();
            Some(async move {
                let result = x.probe().await;
                ExporterProbe { id, endpoint: st.endpoint.clone(), check: st.check, result }
            })
        });
        futures_util::future::join_all(probes).await
    }

    /// The startup check of `infertel run`: probes, logs one line per
    /// exporter, pauses those not reachable (they queue and keep probing)
    /// and returns the configuration faults of `startup_check: fail`
    /// exporters, which refuse the start.
    pub async fn startup_checks(&self) -> Result<(), Vec<String>> {
        let mut fatal = Vec::new();
        for p in self.probe_exporters(false).await {
            let states = &self.readiness.exporters;
            let Some(st) = states.iter().find(|s| s.exporter == p.id) else { continue };
            let r = &p.result;
            match r.verdict {
                Verdict::Ok => tracing::info!(exporter = %p.id, endpoint = %p.endpoint, "startup check: {}", r.line()),
                Verdict::Config if p.check == StartupCheck::Fail => {
                    tracing::error!(exporter = %p.id, endpoint = %p.endpoint, "startup check failed: {}", r.line());
                    fatal.push(format!("exporter {} ({}): {}", p.id, p.endpoint, r.line()));
                }
                _ => {
                    tracing::warn!(exporter = %p.id, endpoint = %p.endpoint, "startup check: {}; starting paused: data is queued and the endpoint re-probed", r.line());
                    st.pause(r);
                }
            }
        }
        if fatal.is_empty() { Ok(()) } else { Err(fatal) }
    }

    /// Opens the exporters' persistent queues (recovering and counting
    /// what a previous run left); separate from `run` so a storage problem
    /// (a directory in use by another agent) is reported before anything
    /// starts. Idempotent.
    pub fn open(&self) -> Result<(), String> {
        for (id, e) in &self.exporters {
            if let Exporter::Queued(x) = e {
                x.open().map_err(|e| format!("exporter {id}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Serves `/metrics` from `telemetry` on `l` (outside `run` when the
    /// endpoint must outlive one service: reloads).
    pub fn serve_telemetry(l: tokio::net::TcpListener, telemetry: Telemetry) -> tokio::task::JoinHandle<()> {
        let t = telemetry;
        let app =
            axum::Router::new().route(
                "/metrics",
                axum::routing::get(move || {
                    let t = t.clone();
                    async move {
                        ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], t.render())
                    }
                }),
            );
        tokio::spawn(async move {
            if let Err(e) = axum::serve(l, app).await {
                tracing::error!("self-metrics endpoint stopped: {e}");
            }
        })
    }

    /// Runs until `stop` turns true, then shuts down in order.
    pub async fn run(self, listener: Option<tokio::net::TcpListener>, mut stop: watch::Receiver<bool>) {
        let telemetry = self.telemetry.clone();
        let server = listener.map(|l| Self::serve_telemetry(l, telemetry.clone()));
        if let Err(e) = self.open() {
            tracing::error!("{e}");
        }
        let (exp_stop_tx, exp_stop) = watch::channel(false);
        let (proc_stop_tx, proc_stop) = watch::channel(false);
        let health = self.health_listener.map(|l| {
            tracing::info!(
                "health_check: /healthz and /readyz at http://{}",
                l.local_addr().map(|a| a.to_string()).unwrap_or_default()
            );
            tokio::spawn(crate::extensions::health_check::serve(l, self.readiness.clone()))
        });
        let mut exporter_tasks = Vec::new();
        let mut rw = Vec::new();
        let mut probers = Vec::new();
        for (_, e) in &self.exporters {
            if let Exporter::Queued(x) = e {
                rw.push(x.clone());
                exporter_tasks.push(tokio::spawn(x.clone().start(exp_stop.clone())));
                // Paused (at startup, or at run time by a 401/403/404/...):
                // probe on its own schedule until the endpoint answers, then
                // open the gate, whatever became of the request that paused
                // it. One watchdog for the life of the exporter.
                if let Some(st) = x.endpoint_state() {
                    let x = x.clone();
                    probers.push(tokio::spawn(async move {
                        while st.wait_closed().await {
                            let mut n = 0;
                            while !st.is_up() {
                                n += 1;
                                if !st.sleep_unless_stopping(st.probe_backoff(n)).await {
                                    return;
                                }
                                if st.is_up() {
                                    break;
                                }
                                let r = x.probe().await;
                                if r.is_ok() {
                                    st.set_up();
                                } else {
                                    st.pause(&r);
                                }
                            }
                        }
                    }));
                }
            }
        }
        let processor_tasks: Vec<_> =
            self.processors.iter().map(|p| tokio::spawn(p.clone().run(proc_stop.clone()))).collect();
        // On the service stop (not after the receivers): their stale markers pass.
        let limiter_tasks: Vec<_> =
            self.memory_limiters.iter().map(|m| tokio::spawn(m.clone().run(stop.clone()))).collect();
        // The receivers stop on their own signal, sent once the queues wait
        // for room instead of dropping (their staleness markers come then).
        let (recv_stop_tx, recv_stop) = watch::channel(false);
        let receiver_tasks: Vec<_> = self
            .receivers
            .into_iter()
            .map(|(r, next)| tokio::spawn(r.run(next, telemetry.clone(), recv_stop.clone())))
            .collect();
        self.readiness.receivers_started.store(true, std::sync::atomic::Ordering::Relaxed);
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
        // One budget for the whole shutdown (service.shutdown_timeout).
        let deadline = tokio::time::Instant::now() + self.shutdown_timeout;
        tracing::info!("shutting down: stopping receivers");
        for x in &rw {
            x.begin_drain();
        }
        let _ = recv_stop_tx.send(true);
        let aborts: Vec<_> = exporter_tasks.iter().map(|t| t.abort_handle()).collect();
        let prober_aborts: Vec<_> = probers.iter().map(|t| t.abort_handle()).collect();
        let ordered = async {
            for t in receiver_tasks {
                let _ = t.await;
            }
            let _ = proc_stop_tx.send(true);
            for t in processor_tasks {
                let _ = t.await;
            }
            for t in limiter_tasks {
                let _ = t.await;
            }
            // Paused exporters stop waiting for their endpoint (in memory,
            // what they hold is counted as dropped; on disk it stays).
            for st in &self.readiness.exporters {
                st.stop();
            }
            for p in probers {
                p.abort();
            }
            self.readiness.receivers_started.store(false, std::sync::atomic::Ordering::Relaxed);
            let _ = exp_stop_tx.send(true);
            for t in exporter_tasks {
                let _ = t.await;
            }
        };
        if tokio::time::timeout_at(deadline, ordered).await.is_err() {
            tracing::error!(
                "shutdown took longer than service.shutdown_timeout ({:?}): giving up on what is still in flight",
                self.shutdown_timeout
            );
            let _ = exp_stop_tx.send(true);
            // Nothing of this pipeline runs on after it (a reload starts
            // the next one): exporters, their consumers, the probers.
            for st in &self.readiness.exporters {
                st.stop();
            }
            for a in aborts.iter().chain(&prober_aborts) {
                a.abort();
            }
            for x in &rw {
                x.abandon();
            }
        }
        for x in &rw {
            x.close();
        }
        if let Some(s) = server {
            s.abort();
        }
        if let Some(h) = health {
            h.abort();
        }
        tracing::info!("shutdown complete");
    }
}
