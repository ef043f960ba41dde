//! The running graph: [`Service::start`] starts it, [`Live::reload`]
//! applies the next configuration to it, changing what changed and nothing
//! else, and [`Live::shutdown`] stops it in order (receivers first, without
//! staleness markers; then processors flush; then exporters drain).
//!
//! A reload, as Prometheus and the Collector do it where they do it well:
//! - a component whose configuration did not change keeps running (scrape
//!   loops keep their schedule and series cache, a batch buffer its data, a
//!   queue its backlog); only its output is rewired;
//! - a changed exporter hands its queue to its replacement: on disk the log
//!   itself, in memory the queued batches and the requests it held, ahead
//!   of anything newer; what still reaches the old one is forwarded;
//! - a changed receiver's loops hand their state to the new receiver's
//!   loops for the same target (no markers, same schedule); a target no
//!   longer configured, or a removed receiver's, gets staleness markers;
//! - a removed exporter drains as at shutdown.
//!
//! Every wait is bounded by `service.shutdown_timeout` and ends at once when
//! the agent is told to stop meanwhile; nothing of a replaced component
//! runs on after the reload.

use super::{Exporter, Key, ProcessorTask, Service};
use crate::config::{ComponentId, Config};
use crate::consumer::{Consumer, Relay};
use crate::exporters::queue::QueuedExporter;
use crate::extensions::health_check::Readiness;
use crate::processors::memory_limiter::Backpressure;
use crate::receivers::prometheus::handover::Handover;
use crate::receivers::prometheus::scrape::Stop;
use crate::telemetry::Telemetry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

struct LiveExporter {
    id: ComponentId,
    key: Key,
    exporter: Exporter,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    prober: Option<JoinHandle<()>>,
}

struct LiveProcessor {
    key: Key,
    consumer: Arc<dyn Consumer>,
    output: Arc<Relay>,
    kind: ProcessorTask,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

struct LiveReceiver {
    id: String,
    key: Key,
    output: Arc<Relay>,
    backpressure: Backpressure,
    stop: watch::Sender<Stop>,
    task: JoinHandle<()>,
}

/// A running agent.
pub struct Live {
    exporters: Vec<LiveExporter>,
    processors: Vec<LiveProcessor>,
    receivers: Vec<LiveReceiver>,
    telemetry: Telemetry,
    readiness: Arc<Readiness>,
    health_addr: Option<SocketAddr>,
    health: Option<JoinHandle<()>>,
    shutdown_timeout: Duration,
    handover: Arc<Handover>,
    /// The status page: its server's key (rebound when it changes) and task.
    status_key: Vec<String>,
    status: Vec<JoinHandle<()>>,
    pprof: Option<crate::extensions::pprof::Pprof>,
}

/// What a reload did, per kind of component.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadSummary {
    pub kept: usize,
    pub replaced: usize,
    pub added: usize,
    pub removed: usize,
}

impl std::fmt::Display for ReloadSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} component(s) kept running, {} replaced, {} added, {} removed",
            self.kept, self.replaced, self.added, self.removed
        )
    }
}

/// Runs `fut` until `deadline` or until `cancel` turns true; `false` when
/// it did not finish.
async fn bounded(
    fut: impl std::future::Future<Output = ()>,
    deadline: Instant,
    cancel: &mut watch::Receiver<bool>,
) -> bool {
    if *cancel.borrow() {
        return false;
    }
    tokio::select! {
        _ = fut => true,
        _ = tokio::time::sleep_until(deadline) => false,
        _ = cancelled(cancel) => false,
    }
}

/// Waits for `task` until `deadline` or `cancel`; a task that did not end
/// is aborted (`false`), so nothing of a replaced component runs on.
async fn join_within(task: JoinHandle<()>, deadline: Instant, cancel: &mut watch::Receiver<bool>) -> bool {
    let abort = task.abort_handle();
    let done = bounded(
        async {
            let _ = task.await;
        },
        deadline,
        cancel,
    )
    .await;
    if !done {
        abort.abort();
    }
    done
}

/// Resolves once `cancel` is true (never when its sender is gone).
async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    while !*cancel.borrow_and_update() {
        if cancel.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Starts a queued exporter's consumers and the watchdog that probes it
/// while it is paused (at startup, or at run time by a 401/403/404/...),
/// opening the gate when the endpoint answers, whatever became of the
/// request that paused it. One watchdog for the life of the exporter.
fn start_exporter(id: ComponentId, key: Key, exporter: Exporter) -> LiveExporter {
    let (stop, rx) = watch::channel(false);
    let mut task = None;
    let mut prober = None;
    if let Exporter::Queued(x) = &exporter {
        task = Some(tokio::spawn(x.clone().start(rx)));
        if let Some(st) = x.endpoint_state() {
            let x = x.clone();
            prober = Some(tokio::spawn(async move {
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
    LiveExporter { id, key, exporter, stop, task, prober }
}

fn start_processor(key: Key, consumer: Arc<dyn Consumer>, output: Arc<Relay>, kind: ProcessorTask) -> LiveProcessor {
    let (stop, rx) = watch::channel(false);
    let task = match &kind {
        ProcessorTask::None => None,
        ProcessorTask::Batch(b) => Some(tokio::spawn(b.clone().run(rx))),
        ProcessorTask::Limiter(m) => Some(tokio::spawn(m.clone().run(rx))),
    };
    LiveProcessor { key, consumer, output, kind, stop, task }
}

/// Starts a newly built receiver (`None` for a kept one: it runs already).
fn start_receiver(r: super::ReceiverSlot, telemetry: &Telemetry) -> Option<LiveReceiver> {
    let rec = r.receiver?;
    let (stop, rx) = watch::channel(Stop::Running);
    let task = tokio::spawn(rec.run(r.output.clone(), telemetry.clone(), rx));
    Some(LiveReceiver { id: r.id, key: r.key, output: r.output, backpressure: r.backpressure, stop, task })
}

/// Binds a server's address from synchronous code (a reload starting an
/// extension whose listener was not bound ahead).
fn bind_now(addr: Result<SocketAddr, String>) -> Result<tokio::net::TcpListener, String> {
    let l = std::net::TcpListener::bind(addr?).map_err(|e| e.to_string())?;
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    tokio::net::TcpListener::from_std(l).map_err(|e| e.to_string())
}

fn serve_health(l: tokio::net::TcpListener, readiness: Arc<Readiness>) -> JoinHandle<()> {
    tracing::info!(
        "health_check: /healthz and /readyz at http://{}",
        l.local_addr().map(|a| a.to_string()).unwrap_or_default()
    );
    tokio::spawn(crate::extensions::health_check::serve(l, readiness))
}

impl Service {
    /// Starts every component (opening the persistent queues first when
    /// [`Service::open`] was not called).
    pub fn start(mut self) -> Live {
        if let Err(e) = self.open() {
            tracing::error!("{e}");
        }
        let health = self.health_listener.take().map(|l| serve_health(l, self.readiness.clone()));
        let status_key = self.status.iter().map(|s| s.key()).collect();
        let status = self.start_status();
        let pprof = self.start_pprof();
        let exporters = self.exporters.into_iter().map(|s| start_exporter(s.id, s.key, s.exporter)).collect();
        let processors =
            self.processors.into_iter().map(|p| start_processor(p.key, p.consumer, p.output, p.task)).collect();
        let mut receivers = Vec::new();
        for r in self.receivers {
            receivers.extend(start_receiver(r, &self.telemetry));
        }
        self.readiness.receivers_started.store(true, Ordering::Relaxed);
        Live {
            exporters,
            processors,
            receivers,
            telemetry: self.telemetry,
            readiness: self.readiness,
            health_addr: self.health_addr,
            health,
            shutdown_timeout: self.shutdown_timeout,
            handover: self.handover,
            status_key,
            status,
            pprof,
        }
    }

    /// Starts the `pprof` extension on the listener bound by
    /// [`Service::bind_pprof`] (binding it when it is not).
    fn start_pprof(&mut self) -> Option<crate::extensions::pprof::Pprof> {
        let cfg = self.pprof.clone()?;
        let l = match self.pprof_listener.take().map(Ok).unwrap_or_else(|| bind_now(cfg.socket_addr())) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("extensions pprof endpoint {}: cannot listen: {e}", cfg.endpoint);
                return None;
            }
        };
        Some(crate::extensions::pprof::Pprof::start(cfg, l))
    }

    /// Serves the status pages on the listeners bound by
    /// [`Service::bind_status`] (binding those that are not).
    fn start_status(&mut self) -> Vec<JoinHandle<()>> {
        let mut out = Vec::new();
        for (s, slot) in self.status.iter().zip(self.status_listeners.iter_mut()) {
            let l = match slot.take().map(Ok).unwrap_or_else(|| bind_now(s.cfg.socket_addr())) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!("extensions status endpoint {}: cannot listen: {e}", s.cfg.endpoint);
                    continue;
                }
            };
            out.push(s.serve(l, self.telemetry.clone(), self.readiness.clone()));
        }
        out
    }
}

impl Live {
    pub(super) fn exporter(&self, key: &str) -> Option<Exporter> {
        self.exporters.iter().find(|e| e.key == key).map(|e| e.exporter.clone())
    }

    pub(super) fn processor(&self, key: &str) -> Option<(Arc<dyn Consumer>, Arc<Relay>, ProcessorTask)> {
        self.processors.iter().find(|p| p.key == key).map(|p| (p.consumer.clone(), p.output.clone(), p.kind.clone()))
    }

    pub(super) fn receiver(&self, key: &str) -> Option<(Arc<Relay>, Backpressure)> {
        self.receivers.iter().find(|r| r.key == key).map(|r| (r.output.clone(), r.backpressure.clone()))
    }

    pub(super) fn handover(&self) -> Arc<Handover> {
        self.handover.clone()
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Builds the graph `cfg` describes on this one: unchanged components
    /// are taken as they run; nothing is started or stopped yet.
    pub fn prepare(&self, cfg: Config) -> Result<Service, String> {
        Service::build_on(cfg, self.telemetry.clone(), None, Some(self), false)
    }

    /// Applies `next` (from [`Live::prepare`]); `cancel` turning true (a
    /// SIGTERM meanwhile) ends every wait at once.
    pub async fn reload(&mut self, mut next: Service, mut cancel: watch::Receiver<bool>) -> ReloadSummary {
        let deadline = Instant::now() + self.shutdown_timeout;
        let mut sum = ReloadSummary::default();
        let mut old_exporters: Vec<LiveExporter> = std::mem::take(&mut self.exporters);
        let mut exporters: Vec<LiveExporter> = Vec::new();
        let mut sweep: Vec<(Arc<dyn QueuedExporter>, ComponentId)> = Vec::new();
        // Exporters first: every consumer of the next graph exists before
        // a batch is routed to it.
        for slot in std::mem::take(&mut next.exporters) {
            if slot.kept {
                if let Some(i) = old_exporters.iter().position(|e| e.key == slot.key) {
                    exporters.push(old_exporters.swap_remove(i));
                    sum.kept += 1;
                }
                continue;
            }
            let before = old_exporters.iter().position(|e| e.id == slot.id);
            let (Some(i), Exporter::Queued(new)) = (before, &slot.exporter) else {
                // New (or a debug exporter): opened and started.
                if let Some(x) = slot.exporter.queued()
                    && let Err(e) = x.open()
                {
                    tracing::error!("reload: exporter {}: {e} (its queue stays in memory)", slot.id);
                }
                sum.added += 1;
                exporters.push(start_exporter(slot.id, slot.key, slot.exporter));
                continue;
            };
            let Exporter::Queued(old) = old_exporters[i].exporter.clone() else {
                sum.added += 1;
                exporters.push(start_exporter(slot.id, slot.key, slot.exporter));
                continue;
            };
            // Replaced: the old one stops after the request in hand (a held
            // one gives its series back), releases its log, and from now on
            // forwards what reaches it; the new one opens the log and takes
            // the in-memory backlog ahead of anything newer.
            let prev = old_exporters.swap_remove(i);
            old.hand_over();
            if let Some(t) = prev.task
                && !join_within(t, deadline, &mut cancel).await
            {
                tracing::warn!(exporter = %slot.id, "reload: the replaced exporter's request in flight did not end in time: cut off");
            }
            if let Some(p) = prev.prober {
                p.abort();
            }
            old.close();
            if let Err(e) = new.open() {
                tracing::error!("reload: exporter {}: {e} (its queue stays in memory)", slot.id);
            }
            old.forward_to(new.clone());
            let backlog = old.take_backlog();
            let n: usize = backlog.iter().map(|(b, _)| b.sample_count()).sum();
            new.adopt(backlog);
            tracing::info!(exporter = %slot.id, "reload: configuration changed: replaced, its queue handed over ({n} samples in memory)");
            sum.replaced += 1;
            // Stragglers (a batch that entered the old queue while it was
            // handed over) are swept again once nothing routes to it.
            sweep.push((old, slot.id.clone()));
            exporters.push(start_exporter(slot.id, slot.key, slot.exporter));
        }
        // Processors: new ones start (their outputs lead into the next
        // graph already); kept ones are rewired.
        let mut old_processors: Vec<LiveProcessor> = std::mem::take(&mut self.processors);
        let mut processors = Vec::new();
        for p in std::mem::take(&mut next.processors) {
            if p.kept
                && let Some(i) = old_processors.iter().position(|o| o.key == p.key)
            {
                let lp = old_processors.swap_remove(i);
                lp.output.set(p.next);
                processors.push(lp);
                sum.kept += 1;
                continue;
            }
            sum.added += 1;
            processors.push(start_processor(p.key, p.consumer, p.output, p.task));
        }
        // Receivers: kept ones are rewired; replaced ones hand their loops
        // over (no markers) to the new ones, started only then; removed ones
        // end their targets with markers.
        let mut old_receivers: Vec<LiveReceiver> = std::mem::take(&mut self.receivers);
        let mut receivers = Vec::new();
        let mut to_start = Vec::new();
        let old_ids: Vec<String> = old_receivers.iter().map(|r| r.id.clone()).collect();
        for r in std::mem::take(&mut next.receivers) {
            if r.receiver.is_none()
                && let Some(i) = old_receivers.iter().position(|o| o.key == r.key)
            {
                let lr = old_receivers.swap_remove(i);
                lr.output.set(r.next);
                lr.backpressure.set(r.flags);
                receivers.push(lr);
                sum.kept += 1;
                continue;
            }
            to_start.push(r);
        }
        for o in old_receivers {
            let replaced = to_start.iter().any(|r| r.id == o.id);
            if replaced {
                sum.replaced += 1;
            } else {
                sum.removed += 1;
                tracing::info!(receiver = %o.id, "reload: receiver removed: its targets' series end (staleness markers)");
            }
            let _ = o.stop.send(if replaced { Stop::Handover } else { Stop::TargetGone });
            if !join_within(o.task, deadline, &mut cancel).await {
                tracing::warn!(receiver = %o.id, "reload: the receiver's scrapes in flight did not end in time: cut off");
            }
        }
        for r in to_start {
            if r.receiver.is_some() && !old_ids.contains(&r.id) {
                sum.added += 1;
            }
            receivers.extend(start_receiver(r, &self.telemetry));
        }
        // Processors no pipeline has any more: they flush into what they
        // led to (a replaced exporter forwards to its successor).
        for p in old_processors {
            sum.removed += 1;
            let _ = p.stop.send(true);
            if let Some(t) = p.task {
                join_within(t, deadline, &mut cancel).await;
            }
        }
        for (old, id) in sweep {
            let late = old.take_backlog();
            if !late.is_empty()
                && let Some(e) = exporters.iter().find(|e| e.id == id)
                && let Some(x) = e.exporter.queued()
            {
                x.adopt(late);
            }
        }
        // Exporters no pipeline lists any more drain as at shutdown.
        for e in old_exporters {
            sum.removed += 1;
            tracing::info!(exporter = %e.id, "reload: exporter removed: draining its queue");
            drain_exporter(e, deadline, &mut cancel).await;
        }
        self.readiness.set_exporters(
            exporters.iter().filter_map(|e| e.exporter.queued().and_then(|x| x.endpoint_state())).collect(),
        );
        self.exporters = exporters;
        self.processors = processors;
        self.receivers = receivers;
        self.shutdown_timeout = next.shutdown_timeout;
        let next_status: Vec<String> = next.status.iter().map(|s| s.key()).collect();
        if next_status != self.status_key {
            for h in self.status.drain(..) {
                h.abort();
                // The old server lets go of its port before the new one binds.
                let _ = h.await;
            }
            self.status_key = next_status;
            // The running agent's readiness (receivers started, the live
            // exporters), not the one the next configuration was built with.
            next.readiness = self.readiness.clone();
            self.status = next.start_status();
        }
        if next.pprof.as_ref() != self.pprof.as_ref().map(|p| &p.cfg) {
            // The old server lets go of its port (and writes its
            // save_to_file) before the new one starts.
            if let Some(p) = self.pprof.take() {
                p.stop().await;
            }
            self.pprof = next.start_pprof();
        }
        if next.health_addr != self.health_addr {
            if let Some(h) = self.health.take() {
                h.abort();
            }
            self.health_addr = next.health_addr;
            if let Err(e) = next.bind_health().await {
                tracing::error!("reload: {e}");
            }
            if let Some(l) = next.health_listener.take() {
                self.health = Some(serve_health(l, self.readiness.clone()));
            }
        }
        sum
    }

    /// Stops everything in order within `service.shutdown_timeout`:
    /// receivers (no staleness markers), processors (flushing), exporters
    /// (draining; a persistent queue keeps what is left on disk).
    pub async fn shutdown(self) {
        let deadline = Instant::now() + self.shutdown_timeout;
        tracing::info!("shutting down: stopping receivers");
        let queued: Vec<_> = self.exporters.iter().filter_map(|e| e.exporter.queued().cloned()).collect();
        for x in &queued {
            x.begin_drain();
        }
        // Memory limiters stop refusing first: the receivers' last data passes.
        for p in &self.processors {
            if matches!(p.kind, ProcessorTask::Limiter(_)) {
                let _ = p.stop.send(true);
            }
        }
        for r in &self.receivers {
            let _ = r.stop.send(Stop::Shutdown);
        }
        let mut aborts: Vec<tokio::task::AbortHandle> = Vec::new();
        aborts.extend(self.receivers.iter().map(|r| r.task.abort_handle()));
        aborts.extend(self.processors.iter().filter_map(|p| p.task.as_ref().map(|t| t.abort_handle())));
        aborts.extend(self.exporters.iter().filter_map(|e| e.task.as_ref().map(|t| t.abort_handle())));
        aborts.extend(self.exporters.iter().filter_map(|e| e.prober.as_ref().map(|t| t.abort_handle())));
        let readiness = self.readiness.clone();
        let states: Vec<_> = queued.iter().filter_map(|x| x.endpoint_state()).collect();
        let exporter_stops: Vec<_> = self.exporters.iter().map(|e| e.stop.clone()).collect();
        let ordered = async {
            for r in self.receivers {
                let _ = r.task.await;
            }
            for p in &self.processors {
                let _ = p.stop.send(true);
            }
            for p in self.processors {
                if let Some(t) = p.task {
                    let _ = t.await;
                }
            }
            // Paused exporters stop waiting for their endpoint (in memory,
            // what they hold is counted as dropped; on disk it stays).
            for st in &states {
                st.stop();
            }
            readiness.receivers_started.store(false, Ordering::Relaxed);
            for s in &exporter_stops {
                let _ = s.send(true);
            }
            for e in self.exporters {
                if let super::Exporter::File(f) = &e.exporter {
                    f.flush();
                }
                if let Some(p) = e.prober {
                    p.abort();
                }
                if let Some(t) = e.task {
                    let _ = t.await;
                }
            }
        };
        if tokio::time::timeout_at(deadline, ordered).await.is_err() {
            tracing::error!(
                "shutdown took longer than service.shutdown_timeout ({:?}): giving up on what is still in flight",
                self.shutdown_timeout
            );
            for s in &exporter_stops {
                let _ = s.send(true);
            }
            // Nothing of this pipeline runs on after it.
            for st in &states {
                st.stop();
            }
            for a in &aborts {
                a.abort();
            }
            for x in &queued {
                x.abandon();
            }
        }
        for x in &queued {
            x.close();
        }
        if let Some(h) = self.health {
            h.abort();
        }
        for h in self.status {
            h.abort();
        }
        if let Some(p) = self.pprof {
            p.stop().await;
        }
        tracing::info!("shutdown complete");
    }
}

/// An exporter leaving the graph: drains what it has to its endpoint
/// within the deadline; what is left stays on disk or is counted.
async fn drain_exporter(e: LiveExporter, deadline: Instant, cancel: &mut watch::Receiver<bool>) {
    let Some(x) = e.exporter.queued().cloned() else { return };
    x.begin_drain();
    if let Some(st) = x.endpoint_state() {
        st.stop();
    }
    let _ = e.stop.send(true);
    if let Some(p) = e.prober {
        p.abort();
    }
    if let Some(t) = e.task
        && !join_within(t, deadline, cancel).await
    {
        x.abandon();
    }
    x.close();
}
