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
use crate::exporters::queue::QueuedExporter;
use crate::extensions::ExtensionConfig;
use crate::processors::ProcessorConfig;
use crate::processors::batch::BatchProcessor;
use crate::processors::inference::InferenceProcessor;
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
    exporters: Vec<(ComponentId, Exporter)>,
    telemetry: Telemetry,
    metrics_addr: Option<SocketAddr>,
    shutdown_timeout: Duration,
}

impl Service {
    /// Builds every component; `tap`, when given, also receives everything
    /// every receiver emits (used by `infertel demo`).
    pub fn build(cfg: Config, telemetry: Telemetry, tap: Option<Arc<dyn Consumer>>) -> Result<Service, String> {
        let extensions: BTreeMap<String, ExtensionConfig> = cfg.extensions.0.iter().map(|(id, c)| (id.to_string(), c.clone())).collect();
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
                Some(s) => Some(
                    extensions
                        .get(s)
                        .and_then(|e| e.storage())
                        .ok_or_else(|| format!("exporter {id}: sending_queue.storage {s:?} is not a file_storage extension"))?,
                ),
                None => None,
            };
            let auth = match ec.authenticator() {
                Some(a) => Some(extensions.get(a).cloned().ok_or_else(|| format!("exporter {id}: authenticator {a:?} not defined"))?),
                None => None,
            };
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
        for (pname, p) in &cfg.service.pipelines {
            let preserve = p.processors.iter().any(|r| ComponentId::parse(r).is_ok_and(|id| id.kind == "preserve_names"));
            let naming = if preserve { infertel_otlp::Naming::Preserve } else { infertel_otlp::Naming::Otel };
            let outs: Vec<Arc<dyn Consumer>> = p
                .exporters
                .iter()
                .filter_map(|r| exporters.iter().find(|(id, _)| id.to_string() == *r).map(|(_, e)| e.consumer(naming)))
                .collect();
            let mut next: Arc<dyn Consumer> = if outs.len() == 1 { outs[0].clone() } else { Arc::new(FanOut(outs)) };
            for r in p.processors.iter().rev() {
                let id = ComponentId::parse(r)?;
                let pc = cfg.processors.get(&id).ok_or_else(|| format!("pipeline {pname}: processor {r} not defined"))?;
                match pc {
                    ProcessorConfig::Batch(c) => {
                        let bp = BatchProcessor::new(c.clone(), next);
                        processors.push(bp.clone());
                        next = bp;
                    }
                    ProcessorConfig::Inference(c) => {
                        next = InferenceProcessor::new(id.to_string(), c, next, telemetry.clone());
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
                    receivers.push((PrometheusReceiver::new(id.to_string(), c).map_err(|e| format!("receiver {id}: {e}"))?, next));
                }
            }
        }
        let metrics_addr = cfg.service.telemetry.metrics.socket_addr()?;
        let shutdown_timeout = cfg.service.shutdown_timeout();
        Ok(Service { receivers, processors, exporters, telemetry, metrics_addr, shutdown_timeout })
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
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let t = t.clone();
                async move { ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], t.render()) }
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
        let mut exporter_tasks = Vec::new();
        let mut rw = Vec::new();
        for (_, e) in &self.exporters {
            if let Exporter::Queued(x) = e {
                rw.push(x.clone());
                exporter_tasks.push(tokio::spawn(x.clone().start(exp_stop.clone())));
            }
        }
        let processor_tasks: Vec<_> = self.processors.iter().map(|p| tokio::spawn(p.clone().run(proc_stop.clone()))).collect();
        let receiver_tasks: Vec<_> =
            self.receivers.into_iter().map(|(r, next)| tokio::spawn(r.run(next, telemetry.clone(), stop.clone()))).collect();
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
        // One budget for the whole shutdown (service.shutdown_timeout).
        let deadline = tokio::time::Instant::now() + self.shutdown_timeout;
        tracing::info!("shutting down: stopping receivers");
        let aborts: Vec<_> = exporter_tasks.iter().map(|t| t.abort_handle()).collect();
        let ordered = async {
            for t in receiver_tasks {
                let _ = t.await;
            }
            let _ = proc_stop_tx.send(true);
            for t in processor_tasks {
                let _ = t.await;
            }
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
            for a in &aborts {
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
        tracing::info!("shutdown complete");
    }
}
