//! The pipeline graph, built once from the config, as in the Collector:
//! exporters are built once and shared by the pipelines that list them;
//! each pipeline gets its own processor chain ending in a fan-out to its
//! exporters; each receiver feeds the first processor of every pipeline
//! that lists it. Every component's output goes through a [`Relay`], so a
//! reload rewires what it keeps instead of restarting it.
//!
//! - this file: [`Service::build`], the graph a config describes, reusing
//!   the running components whose configuration did not change;
//! - `live.rs`: [`Live`], the running graph: start, reload, shutdown.

mod live;

pub use live::Live;

use crate::config::{ComponentId, Config};
use crate::consumer::{Consumer, FanOut, Relay};
use crate::exporters::ExporterConfig;
use crate::exporters::debug::DebugExporter;
use crate::exporters::probe::{ProbeResult, StartupCheck, Verdict};
use crate::exporters::queue::QueuedExporter;
use crate::extensions::ExtensionConfig;
use crate::extensions::health_check::Readiness;
use crate::processors::ProcessorConfig;
use crate::processors::batch::BatchProcessor;
use crate::processors::filter::FilterProcessor;
use crate::processors::inference::InferenceProcessor;
use crate::processors::memory_limiter::{Backpressure, MemoryLimiter, Pressure};
use crate::receivers::ReceiverConfig;
use crate::receivers::prometheus::PrometheusReceiver;
use crate::receivers::prometheus::handover::Handover;
use crate::telemetry::Telemetry;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
enum Exporter {
    /// Remote write, OTLP gRPC, OTLP HTTP: the shared sending queue.
    Queued(Arc<dyn QueuedExporter>),
    Debug(Arc<DebugExporter>),
    /// The `prometheus` pull exporter: serves what reaches it.
    Pull(Arc<crate::exporters::prometheus::PrometheusExporter>),
    /// The `file` exporter: OTLP to a file.
    File(Arc<crate::exporters::file::FileExporter>),
}

impl Exporter {
    /// The consumer a pipeline feeds; `naming` is Preserve when the
    /// pipeline lists the `preserve_names` processor.
    fn consumer(&self, naming: infertel_otlp::Naming) -> Arc<dyn Consumer> {
        match self {
            Exporter::Queued(e) => e.clone().consumer(naming),
            Exporter::Debug(e) => e.clone(),
            Exporter::Pull(e) => e.clone(),
            Exporter::File(e) => e.clone().consumer(naming),
        }
    }

    fn queued(&self) -> Option<&Arc<dyn QueuedExporter>> {
        match self {
            Exporter::Queued(q) => Some(q),
            Exporter::Debug(_) | Exporter::Pull(_) | Exporter::File(_) => None,
        }
    }
}

/// A component's identity across reloads: its id and everything that
/// configures it (for an exporter, also the storage and authenticator
/// extensions it names). Equal keys: the running component is kept.
type Key = String;

struct ExporterSlot {
    id: ComponentId,
    key: Key,
    exporter: Exporter,
    /// Taken from the running graph (unchanged).
    kept: bool,
}

/// The task a processor runs beside its consumer, if any.
#[derive(Clone)]
enum ProcessorTask {
    None,
    Batch(Arc<BatchProcessor>),
    Limiter(Arc<MemoryLimiter>),
}

struct ProcessorSlot {
    key: Key,
    consumer: Arc<dyn Consumer>,
    /// Where the processor sends its output.
    output: Arc<Relay>,
    /// What `output` leads to in this graph.
    next: Arc<dyn Consumer>,
    task: ProcessorTask,
    kept: bool,
}

/// A built receiver, not yet running.
enum Receiver {
    Prometheus(PrometheusReceiver),
    Otlp(crate::receivers::otlp::OtlpReceiver),
}

impl Receiver {
    async fn run(
        self,
        next: Arc<dyn Consumer>,
        telemetry: Telemetry,
        stop: tokio::sync::watch::Receiver<crate::receivers::prometheus::scrape::Stop>,
    ) {
        match self {
            Receiver::Prometheus(r) => r.run(next, telemetry, stop).await,
            Receiver::Otlp(r) => r.run(next, telemetry, stop).await,
        }
    }
}

struct ReceiverSlot {
    id: String,
    key: Key,
    /// `None` when the running receiver is kept.
    receiver: Option<Receiver>,
    output: Arc<Relay>,
    next: Arc<dyn Consumer>,
    backpressure: Backpressure,
    flags: Vec<Arc<Pressure>>,
}

/// A built, not yet running, agent (or the next configuration of a running
/// one: see [`Live::reload`]).
pub struct Service {
    receivers: Vec<ReceiverSlot>,
    processors: Vec<ProcessorSlot>,
    exporters: Vec<ExporterSlot>,
    telemetry: Telemetry,
    metrics_addr: Option<SocketAddr>,
    shutdown_timeout: Duration,
    health_addr: Option<SocketAddr>,
    health_listener: Option<tokio::net::TcpListener>,
    readiness: Arc<Readiness>,
    handover: Arc<Handover>,
    /// The `status`/`zpages` extensions listed, and their listeners once bound.
    status: Vec<crate::extensions::status::server::StatusServer>,
    status_listeners: Vec<Option<tokio::net::TcpListener>>,
    /// The `pprof` extension listed, and its listener once bound.
    pprof: Option<crate::extensions::pprof::PprofConfig>,
    pprof_listener: Option<tokio::net::TcpListener>,
}

/// One exporter's probe, for `infertel check` and the startup log.
pub struct ExporterProbe {
    pub id: String,
    pub endpoint: String,
    pub check: StartupCheck,
    pub result: ProbeResult,
}

fn exporter_key(id: &ComponentId, ec: &ExporterConfig, extensions: &BTreeMap<String, ExtensionConfig>) -> Key {
    let storage = ec.queue().and_then(|q| q.storage.as_deref()).and_then(|s| extensions.get(s));
    let auth = ec.authenticator().and_then(|a| extensions.get(a));
    format!("{id}\u{0}{ec:?}\u{0}{storage:?}\u{0}{auth:?}")
}

impl Service {
    /// Builds every component; `tap`, when given, also receives everything
    /// every receiver emits (used by `infertel demo`).
    pub fn build(cfg: Config, telemetry: Telemetry, tap: Option<Arc<dyn Consumer>>) -> Result<Service, String> {
        Self::build_on(cfg, telemetry, tap, None, false)
    }

    /// Builds every component as [`Service::build`] does, for `validate`
    /// and `check`: nothing is bound or detected (the `prometheus`
    /// exporter's endpoint, `resourcedetection`'s detectors), so they run
    /// beside an agent on the same config.
    pub fn build_dry(cfg: Config, telemetry: Telemetry) -> Result<Service, String> {
        Self::build_on(cfg, telemetry, None, None, true)
    }

    /// Builds the graph `cfg` describes; with `running`, the components
    /// whose configuration did not change are taken from it instead of
    /// built again.
    fn build_on(
        cfg: Config,
        telemetry: Telemetry,
        tap: Option<Arc<dyn Consumer>>,
        running: Option<&Live>,
        dry: bool,
    ) -> Result<Service, String> {
        let extensions: BTreeMap<String, ExtensionConfig> =
            cfg.extensions.0.iter().map(|(id, c)| (id.to_string(), c.clone())).collect();
        let status =
            crate::extensions::status::server::StatusServer::from_config(&cfg.service.extensions, &extensions)?;
        // What the status page shows of this configuration.
        let view = crate::status::ConfigView {
            effective: crate::status::redact_debug(&format!("{cfg:#?}")),
            pipelines: cfg.service.pipelines.clone(),
            extensions: cfg.service.extensions.clone(),
            write_relabel: cfg
                .exporters
                .0
                .iter()
                .filter_map(|(id, e)| match e {
                    ExporterConfig::PrometheusRemoteWrite(c) if !c.write_relabel_configs.is_empty() => {
                        Some((id.to_string(), c.write_relabel_configs.clone()))
                    }
                    _ => None,
                })
                .collect(),
            loaded_at: Some(std::time::SystemTime::now()),
        };
        let mut exporters: Vec<ExporterSlot> = Vec::new();
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
            let key = exporter_key(&id, &ec, &extensions);
            if let Some(e) = running.and_then(|r| r.exporter(&key)) {
                exporters.push(ExporterSlot { id, key, exporter: e, kept: true });
                continue;
            }
            let storage = match ec.queue().and_then(|q| q.storage.as_deref()) {
                Some(s) => Some(extensions.get(s).and_then(|e| e.storage()).ok_or_else(|| {
                    format!("exporter {id}: sending_queue.storage {s:?} is not a file_storage extension")
                })?),
                None => ec.own_storage(),
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
            if matches!(auth, Some(ExtensionConfig::SigV4Auth(_)))
                && !matches!(ec, ExporterConfig::PrometheusRemoteWrite(_))
            {
                return Err(format!(
                    "exporter {id}: sigv4auth signs remote-write requests (Amazon Managed Prometheus): use it with prometheusremotewrite"
                ));
            }
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
                ExporterConfig::File(c) => Exporter::File(
                    crate::exporters::file::FileExporter::new(id.to_string(), c, &telemetry, !dry)
                        .map_err(|e| format!("exporter {id}: {e}"))?,
                ),
                ExporterConfig::Prometheus(c) => Exporter::Pull(
                    crate::exporters::prometheus::PrometheusExporter::new(id.to_string(), c, &telemetry, !dry)
                        .map_err(|e| format!("exporter {id}: {e}"))?,
                ),
            };
            if let (Exporter::Queued(q), Some(s)) = (&e, storage) {
                q.set_storage(s);
            }
            exporters.push(ExporterSlot { id, key, exporter: e, kept: false });
        }
        let mut processors = Vec::new();
        let mut entries: BTreeMap<String, Vec<Arc<dyn Consumer>>> = BTreeMap::new();
        // The memory limiters' flags, per receiver feeding their pipelines.
        let mut pressure: BTreeMap<String, Vec<Arc<Pressure>>> = BTreeMap::new();
        for (pname, p) in &cfg.service.pipelines {
            let preserve =
                p.processors.iter().any(|r| ComponentId::parse(r).is_ok_and(|id| id.kind == "preserve_names"));
            let naming = if preserve { infertel_otlp::Naming::Preserve } else { infertel_otlp::Naming::Otel };
            let outs: Vec<Arc<dyn Consumer>> = p
                .exporters
                .iter()
                .filter_map(|r| exporters.iter().find(|e| e.id.to_string() == *r).map(|e| e.exporter.consumer(naming)))
                .collect();
            let mut next: Arc<dyn Consumer> = if outs.len() == 1 { outs[0].clone() } else { Arc::new(FanOut(outs)) };
            for r in p.processors.iter().rev() {
                let id = ComponentId::parse(r)?;
                let pc =
                    cfg.processors.get(&id).ok_or_else(|| format!("pipeline {pname}: processor {r} not defined"))?;
                // A pipeline-level naming contract, applied above when the
                // exporters' consumers were made; batches pass as is.
                if let ProcessorConfig::PreserveNames(_) = pc {
                    continue;
                }
                let key = format!("{pname}\u{0}{id}\u{0}{pc:?}");
                let slot = match running.and_then(|l| l.processor(&key)) {
                    Some((consumer, output, task)) => {
                        ProcessorSlot { key, consumer, output, next: next.clone(), task, kept: true }
                    }
                    None => {
                        let output = Relay::new(next.clone());
                        let out: Arc<dyn Consumer> = output.clone();
                        let (consumer, task): (Arc<dyn Consumer>, ProcessorTask) = match pc {
                            ProcessorConfig::Batch(c) => {
                                let bp = BatchProcessor::new(c.clone(), out);
                                (bp.clone(), ProcessorTask::Batch(bp))
                            }
                            ProcessorConfig::Inference(c) => (
                                InferenceProcessor::new(id.to_string(), c, out, telemetry.clone()),
                                ProcessorTask::None,
                            ),
                            ProcessorConfig::MemoryLimiter(c) => {
                                let ml = MemoryLimiter::new(id.to_string(), c, out, &telemetry)
                                    .map_err(|e| format!("processor {id}: {e}"))?;
                                (ml.clone(), ProcessorTask::Limiter(ml))
                            }
                            ProcessorConfig::Attributes(c) => (
                                c.build(id.to_string(), out, &telemetry).map_err(|e| format!("processor {id}: {e}"))?,
                                ProcessorTask::None,
                            ),
                            ProcessorConfig::Resource(c) => (
                                c.build(id.to_string(), out, &telemetry).map_err(|e| format!("processor {id}: {e}"))?,
                                ProcessorTask::None,
                            ),
                            ProcessorConfig::ResourceDetection(c) => (
                                c.build(id.to_string(), out, &telemetry, dry)
                                    .map_err(|e| format!("processor {id}: {e}"))?,
                                ProcessorTask::None,
                            ),
                            ProcessorConfig::Filter(c) => (
                                FilterProcessor::new(id.to_string(), c, out, &telemetry)
                                    .map_err(|e| format!("processor {id}: {e}"))?,
                                ProcessorTask::None,
                            ),
                            ProcessorConfig::PreserveNames(_) => continue,
                        };
                        ProcessorSlot { key, consumer, output, next: next.clone(), task, kept: false }
                    }
                };
                if let ProcessorTask::Limiter(ml) = &slot.task {
                    for r in &p.receivers {
                        pressure.entry(r.clone()).or_default().push(ml.pressure());
                    }
                }
                next = slot.consumer.clone();
                processors.push(slot);
            }
            for r in &p.receivers {
                entries.entry(r.clone()).or_default().push(next.clone());
            }
        }
        let handover = running.map(|l| l.handover()).unwrap_or_default();
        let mut receivers = Vec::new();
        for (id, rc) in cfg.receivers.0 {
            let Some(mut outs) = entries.remove(&id.to_string()) else {
                continue;
            };
            if let Some(t) = &tap {
                outs.push(t.clone());
            }
            let next: Arc<dyn Consumer> = if outs.len() == 1 { outs.remove(0) } else { Arc::new(FanOut(outs)) };
            let flags = pressure.remove(&id.to_string()).unwrap_or_default();
            let key = format!("{id}\u{0}{rc:?}");
            if let Some((output, backpressure)) = running.and_then(|l| l.receiver(&key)) {
                receivers.push(ReceiverSlot {
                    id: id.to_string(),
                    key,
                    receiver: None,
                    output,
                    next,
                    backpressure,
                    flags,
                });
                continue;
            }
            let backpressure = Backpressure::new(flags.clone());
            let receiver = match rc {
                ReceiverConfig::Prometheus(c) => {
                    let mut r =
                        PrometheusReceiver::new(id.to_string(), c).map_err(|e| format!("receiver {id}: {e}"))?;
                    r.backpressure = backpressure.clone();
                    r.handover = handover.clone();
                    Receiver::Prometheus(r)
                }
                ReceiverConfig::Otlp(c) => {
                    // At start the ports are bound now, so one in use stops
                    // the start; a reload binds when the receiver starts,
                    // after the one it replaces let go (`dry`: never).
                    let bind_now = running.is_none() && !dry;
                    let mut r = crate::receivers::otlp::OtlpReceiver::new(id.to_string(), c, bind_now)
                        .map_err(|e| format!("receiver {id}: {e}"))?;
                    r.backpressure = backpressure.clone();
                    Receiver::Otlp(r)
                }
            };
            receivers.push(ReceiverSlot {
                id: id.to_string(),
                key,
                output: Relay::new(next.clone()),
                next,
                backpressure,
                receiver: Some(receiver),
                flags,
            });
        }
        let metrics_addr = cfg.service.telemetry.metrics.socket_addr()?;
        let shutdown_timeout = cfg.service.shutdown_timeout();
        let mut health_addr = None;
        let mut pprof = None;
        for name in &cfg.service.extensions {
            match extensions.get(name) {
                Some(ExtensionConfig::HealthCheck(h)) => health_addr = Some(h.socket_addr()?),
                Some(ExtensionConfig::Pprof(p)) => pprof = Some(p.clone()),
                _ => {}
            }
        }
        // Shown once the whole graph could be built (a refused reload
        // leaves the running configuration on the page).
        let board = telemetry.status();
        board.enable(!status.is_empty());
        board.set_config(view);
        let readiness = Arc::new(Readiness::default());
        readiness.set_exporters(
            exporters.iter().filter_map(|e| e.exporter.queued().and_then(|x| x.endpoint_state())).collect(),
        );
        Ok(Service {
            receivers,
            processors,
            exporters,
            telemetry,
            metrics_addr,
            shutdown_timeout,
            health_addr,
            health_listener: None,
            readiness,
            handover,
            status_listeners: status.iter().map(|_| None).collect(),
            status,
            pprof,
            pprof_listener: None,
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

    /// Binds the `pprof` extension's endpoint, when configured, so a port
    /// conflict is reported before anything starts.
    pub async fn bind_pprof(&mut self) -> Result<Option<SocketAddr>, String> {
        let Some(c) = &self.pprof else { return Ok(None) };
        let l = crate::extensions::pprof::Pprof::bind(c).await?;
        let local = l.local_addr().ok();
        self.pprof_listener = Some(l);
        Ok(local)
    }

    /// Binds the status extension's endpoint, when configured, so a port
    /// conflict is reported before anything starts.
    /// The addresses bound, in the order the extensions are listed.
    pub async fn bind_status(&mut self) -> Result<Vec<SocketAddr>, String> {
        let mut out = Vec::new();
        for (s, slot) in self.status.iter().zip(self.status_listeners.iter_mut()) {
            let l = s.bind().await?;
            out.extend(l.local_addr().ok());
            *slot = Some(l);
        }
        Ok(out)
    }

    /// Probes every network exporter (all of them: `infertel check`; or
    /// only those without `startup_check: off`), concurrently.
    pub async fn probe_exporters(&self, include_off: bool) -> Vec<ExporterProbe> {
        let probes = self.exporters.iter().filter_map(|e| {
            let x = e.exporter.queued()?;
            let st = x.endpoint_state()?;
            if !include_off && st.check == StartupCheck::Off {
                return None;
            }
            let x = x.clone();
            let id = e.id.to_string();
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
        let states = self.readiness.exporters();
        for p in self.probe_exporters(false).await {
            let Some(st) = states.iter().find(|s| s.exporter == p.id) else { continue };
            let r = &p.result;
            st.note_startup(r);
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
    /// starts. Idempotent; kept exporters are open already.
    pub fn open(&self) -> Result<(), String> {
        for e in &self.exporters {
            if let Some(x) = e.exporter.queued()
                && !e.kept
            {
                x.open().map_err(|err| format!("exporter {}: {err}", e.id))?;
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

    /// Runs until `stop` turns true, then shuts down in order (`demo`,
    /// tests: an agent that never reloads).
    pub async fn run(self, listener: Option<tokio::net::TcpListener>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let server = listener.map(|l| Self::serve_telemetry(l, self.telemetry.clone()));
        let live = self.start();
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
        live.shutdown().await;
        if let Some(s) = server {
            s.abort();
        }
    }
}
