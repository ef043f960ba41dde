//! The sending queue every network exporter shares (remote write, OTLP gRPC,
//! OTLP HTTP): series are sharded by a key the exporter chooses over
//! `sending_queue.num_consumers` queues, so one series' samples (for OTLP:
//! one data point's buckets, sum, count and `_created`) always meet the same
//! consumer and leave in timestamp order even with parallel senders; each
//! consumer drains its queue, oldest first, in merged batches of at most
//! [`MERGE_MAX_SAMPLES`], and hands each to the exporter's [`Deliver`]
//! implementation, one request at a time (a retry holds its shard, which is
//! what keeps the order). A full queue drops its oldest
//! batch, counted and logged, never silently.
//!
//! With `sending_queue.storage` naming a `file_storage` extension, each
//! consumer's FIFO is a segment log on disk instead (`persistent.rs`): a
//! batch is appended before `consume` returns, read back, delivered and
//! acknowledged; it survives restarts and crashes (replayed oldest first,
//! so per series the backlog goes before newer samples), and the byte
//! budget drops the oldest unread batches, counted as `queue_full`.
//!
//! Self-metrics, labelled `{exporter}`: `infertel_exporter_sent_samples_total`,
//! `infertel_exporter_dropped_samples_total{reason}`,
//! `infertel_exporter_queue_size`, `infertel_exporter_queue_capacity`; with
//! storage also `infertel_exporter_queue_bytes`,
//! `infertel_exporter_queue_samples`, `infertel_exporter_queue_oldest_age_seconds`,
//! `infertel_exporter_queue_replayed_samples_total`,
//! `infertel_exporter_queue_truncated_bytes_total`.

use crate::consumer::{BoxFuture, Consumer};
use crate::exporters::persistent::{DiskQueue, Storage};
use crate::exporters::probe::{EndpointState, ProbeResult};
use crate::exporters::shared::QueueConfig;
use crate::status::trace::{ExportState, Trace};
use crate::telemetry::{Counter, Gauge, Telemetry};
use infertel_model::{Batch, Labels, Series};
use infertel_otlp::Naming;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use tokio::sync::{Notify, watch};

/// What one delivery did with the samples it was given: in `outcomes`,
/// `(samples, None)` sent, `(samples, Some(reason))` dropped for `reason`
/// (or, for [`SHUTDOWN`], not delivered because the exporter stopped); in
/// `held`, the series of the requests that ended with [`SHUTDOWN`], so that
/// an exporter a reload replaces hands them to its successor.
#[derive(Default)]
pub struct Delivered {
    pub outcomes: Vec<(usize, Option<&'static str>)>,
    pub held: Vec<Series>,
}

impl Delivered {
    pub fn one(samples: usize, outcome: Option<&'static str>) -> Self {
        Delivered { outcomes: vec![(samples, outcome)], held: Vec::new() }
    }

    pub fn push(&mut self, samples: usize, outcome: Option<&'static str>) {
        self.outcomes.push((samples, outcome));
    }
}

/// Runs disk I/O (appends, reads, fsync) off the async worker: on the
/// multi-threaded runtime the worker hands its other tasks over while this
/// blocks, so a slow or full disk does not stall scrapes and sends.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Aborts the task when dropped (a task owned by the future that spawned it).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The outcome reason of a request still held when shutdown began.
pub const SHUTDOWN: &str = "shutdown";

/// An exporter's protocol side: how a consumer's batch becomes requests.
pub trait Deliver: Send + Sync + 'static {
    /// Per-consumer state (a request builder, a converter with start times).
    type State: Send + 'static;
    fn new_state(&self) -> Self::State;
    /// Sees every batch before it is sharded (shared metadata caches).
    fn observe(&self, _batch: &Batch, _naming: Naming) {}
    /// What of a batch is queued at all (remote write's
    /// `write_relabel_configs`); by default all of it.
    fn admit(&self, batch: Batch, _naming: Naming) -> Batch {
        batch
    }
    /// The batch as it is written to a persistent queue: what it needs to
    /// be delivered after a restart as it would have been live (OTLP adds
    /// its families' metadata and its targets' `target_info`). `None`: as is.
    fn for_disk(&self, _batch: &Batch, _naming: Naming) -> Option<Batch> {
        None
    }
    /// The shard key of a series; by default its label hash.
    fn shard_key(&self, s: &Series, _naming: Naming) -> u64 {
        s.labels.stable_hash()
    }
    fn deliver<'a>(&'a self, state: &'a mut Self::State, batch: Batch, naming: Naming) -> BoxFuture<'a, Delivered>;
    /// The startup probe (`exporters/exporterhelper/probe.rs`): an empty write with the
    /// real headers and auth, plus one `infertel_canary` sample when
    /// `canary` is set.
    fn probe(&self, _canary: bool) -> BoxFuture<'_, ProbeResult> {
        Box::pin(async { ProbeResult::skipped() })
    }
}

struct Item {
    batch: Batch,
    naming: Naming,
}

struct Shard {
    queue: Mutex<VecDeque<Item>>,
    notify: Notify,
    cap: usize,
    /// Set while the queue's storage is open: the FIFO is on disk.
    disk: Mutex<Option<DiskQueue>>,
}

pub struct SendingQueue<D: Deliver> {
    id: String,
    endpoint: String,
    cfg: QueueConfig,
    shards: Vec<Arc<Shard>>,
    pub deliver: Arc<D>,
    telemetry: Telemetry,
    sent: Arc<Counter>,
    queued: Arc<AtomicI64>,
    queue_size: Arc<Gauge>,
    last_full_log: Mutex<Option<Instant>>,
    /// The endpoint's state: consumers wait while it is paused (the data
    /// stays queued); see `exporters/exporterhelper/probe.rs`.
    endpoint_state: OnceLock<Arc<EndpointState>>,
    storage: Mutex<Option<Storage>>,
    /// Set once the agent shuts down (see [`SendingQueue::begin_drain`]).
    draining: AtomicBool,
    /// Set when a reload replaces this exporter: the consumers stop after
    /// the request in hand and leave the rest to the successor.
    handing_over: AtomicBool,
    /// In memory: what requests held when the exporter stopped gave back,
    /// oldest first (counted as dropped at shutdown, handed over at reload).
    /// With each, the samples its outcome counted.
    returned: Mutex<Vec<(Item, u64)>>,
    /// Set when a reload replaced this exporter: a batch that still reaches
    /// it (from a pipeline being retired) goes to the successor.
    successor: OnceLock<Arc<dyn QueuedExporter>>,
}

impl<D: Deliver> SendingQueue<D> {
    pub fn new(id: String, endpoint: String, cfg: QueueConfig, deliver: D, telemetry: Telemetry) -> Arc<Self> {
        let n = if cfg.enabled { cfg.num_consumers } else { 1 };
        let per_shard = if cfg.enabled { cfg.queue_size.div_ceil(n).max(1) } else { 1 };
        let shards = (0..n)
            .map(|_| {
                Arc::new(Shard {
                    queue: Mutex::new(VecDeque::new()),
                    notify: Notify::new(),
                    cap: per_shard,
                    disk: Mutex::new(None),
                })
            })
            .collect();
        let l = [("exporter", id.as_str())];
        telemetry
            .gauge("infertel_exporter_queue_capacity", "Batches the sending queue can hold.", &l)
            .set((per_shard * n) as f64);
        Arc::new(SendingQueue {
            sent: telemetry.counter("infertel_exporter_sent_samples_total", "Samples the backend accepted.", &l),
            queue_size: telemetry.gauge("infertel_exporter_queue_size", "Batches waiting in the sending queue.", &l),
            queued: Arc::new(AtomicI64::new(0)),
            telemetry,
            shards,
            deliver: Arc::new(deliver),
            cfg,
            endpoint,
            id,
            last_full_log: Mutex::new(None),
            endpoint_state: OnceLock::new(),
            storage: Mutex::new(None),
            draining: AtomicBool::new(false),
            handing_over: AtomicBool::new(false),
            returned: Mutex::new(Vec::new()),
            successor: OnceLock::new(),
        })
    }

    /// Attaches the endpoint state whose gate the consumers wait on.
    pub fn set_endpoint_state(&self, state: Arc<EndpointState>) {
        let _ = self.endpoint_state.set(state);
    }

    pub fn endpoint_state(&self) -> Option<Arc<EndpointState>> {
        self.endpoint_state.get().cloned()
    }

    /// Makes the queue persistent (before [`SendingQueue::open_storage`]).
    pub fn set_storage(&self, storage: Storage) {
        *self.storage.lock().unwrap_or_else(|p| p.into_inner()) = Some(storage);
    }

    /// Opens the on-disk queues (when storage is set): recovers torn tails,
    /// counts what will be replayed, and moves a backlog written with a
    /// different `num_consumers` into the current layout.
    pub fn open_storage(&self) -> Result<(), String> {
        let Some(st) = self.storage.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return Ok(());
        };
        if !self.cfg.enabled {
            return Ok(());
        }
        // Opened once per process: `run` opens what the caller has not, and
        // a second open of the same folder would find its own lock held.
        if self.shards.iter().any(|s| s.disk.lock().unwrap_or_else(|p| p.into_inner()).is_some()) {
            return Ok(());
        }
        let n = self.shards.len();
        let safe: String =
            self.id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
        let base = st.directory.join(safe);
        // The name records the sharding: a backlog written with another
        // consumer count, or by a version that sharded with another hash
        // (`consumers-N`: `Labels::stable_hash` was FNV-1a then), is
        // re-sharded below like any other layout.
        let layout = base.join(format!("consumers-{n}-h2"));
        let per_shard = (st.max_bytes / n as u64).max(if st.max_bytes == 0 { 0 } else { 1 });
        let l = [("exporter", self.id.as_str())];
        let mut replayed = 0;
        let mut truncated = 0;
        let mut opened = Vec::new();
        for i in 0..n {
            let dir = layout.join(format!("shard-{i}"));
            let (q, rec) = DiskQueue::open(&dir, per_shard, st.fsync)
                .map_err(|e| format!("sending_queue storage {}: {e}", dir.display()))?;
            if rec.truncated_bytes > 0 {
                tracing::warn!(exporter = %self.id, dir = %dir.display(), "persistent queue: cut {} bytes: torn or zero-filled tails of {} segment(s) and {} corrupt record(s) inside", rec.truncated_bytes, rec.truncated_segments, rec.corrupt_records);
            }
            if rec.corrupt_records > 0 {
                // Counted in samples, from the damaged records' heads where
                // readable (a torn tail is a write that never completed:
                // its scrape was not acknowledged as queued).
                let lost = crate::exporters::persistent::corrupt_samples(&rec.corrupt_heads);
                self.dropped("corrupt").add(lost);
                tracing::error!(exporter = %self.id, dir = %dir.display(), "persistent queue: {} corrupt record(s) skipped ({lost} samples): a disk fault", rec.corrupt_records);
            }
            truncated += rec.truncated_bytes;
            replayed += q.backlog().0;
            opened.push(q);
        }
        // A backlog from another num_consumers: re-shard it, oldest first,
        // before anything new is queued (so per series order holds).
        if let Ok(rd) = std::fs::read_dir(&base) {
            let mut old: Vec<_> = rd
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    *p != layout && p.file_name().is_some_and(|f| f.to_string_lossy().starts_with("consumers-"))
                })
                .collect();
            old.sort();
            for dir in old {
                let mut moved = 0u64;
                let mut shards: Vec<_> = std::fs::read_dir(&dir)
                    .map_err(|e| format!("{}: {e}", dir.display()))?
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .collect();
                shards.sort();
                for sd in shards {
                    let (mut q, _) = DiskQueue::open(&sd, 0, crate::exporters::persistent::Fsync::Never)
                        .map_err(|e| format!("sending_queue storage {}: {e}", sd.display()))?;
                    while let Some(t) = q.take().map_err(|e| format!("{}: {e}", sd.display()))? {
                        moved += t.batch.sample_count() as u64;
                        let mut parts: Vec<Batch> = (0..n).map(|_| Batch::default()).collect();
                        for s in t.batch.series {
                            let k = self.deliver.shard_key(&s, t.naming);
                            parts[(k % n as u64) as usize].series.push(s);
                        }
                        parts[0].metadata = t.batch.metadata;
                        for (i, b) in parts.into_iter().enumerate() {
                            if !b.is_empty() {
                                let lost =
                                    opened[i].push(&b, t.naming).map_err(|e| format!("sending_queue storage: {e}"))?;
                                if lost > 0 {
                                    self.dropped("queue_full").add(lost);
                                }
                            }
                        }
                    }
                }
                std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                tracing::info!(exporter = %self.id, "persistent queue: moved {moved} queued samples from {} to {n} consumers", dir.display());
                replayed += moved;
            }
        }
        for (s, q) in self.shards.iter().zip(opened) {
            *s.disk.lock().unwrap_or_else(|p| p.into_inner()) = Some(q);
        }
        self.telemetry
            .counter(
                "infertel_exporter_queue_replayed_samples_total",
                "Samples found in the persistent queue at start, delivered before newer data.",
                &l,
            )
            .add(replayed);
        self.telemetry
            .counter(
                "infertel_exporter_queue_truncated_bytes_total",
                "Bytes cut from torn or corrupt persistent-queue tails at start.",
                &l,
            )
            .add(truncated);
        if replayed > 0 {
            tracing::info!(exporter = %self.id, "persistent queue: {replayed} samples from before the restart will be sent first");
        }
        self.update_disk_gauges();
        Ok(())
    }

    /// Closes the on-disk queues (releasing their locks); unsent data stays there.
    pub fn close_storage(&self) {
        let mut left = 0;
        let mut any = false;
        for s in &self.shards {
            if let Some(q) = s.disk.lock().unwrap_or_else(|p| p.into_inner()).take() {
                any = true;
                left += q.backlog().0;
            }
        }
        if any && left > 0 {
            tracing::info!(exporter = %self.id, "persistent queue: {left} samples stay on disk for the next start");
        }
    }

    fn is_persistent(&self) -> bool {
        self.shards.first().is_some_and(|s| s.disk.lock().unwrap_or_else(|p| p.into_inner()).is_some())
    }

    fn update_disk_gauges(&self) {
        let mut bytes = 0;
        let mut samples = 0;
        let mut oldest: Option<i64> = None;
        for s in &self.shards {
            if let Some(q) = s.disk.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                // `fsync: interval` also when no append comes.
                q.sync_if_due();
                bytes += q.bytes();
                let (n, o) = q.backlog();
                samples += n;
                if let Some(o) = o {
                    oldest = Some(oldest.map_or(o, |x| x.min(o)));
                }
            }
        }
        let l = [("exporter", self.id.as_str())];
        self.telemetry
            .gauge("infertel_exporter_queue_bytes", "Bytes of the persistent queue on disk.", &l)
            .set(bytes as f64);
        self.telemetry
            .gauge(
                "infertel_exporter_queue_samples",
                "Samples in the persistent queue not yet acknowledged by the backend.",
                &l,
            )
            .set(samples as f64);
        let age = oldest.map(|o| (crate::exporters::persistent::now_ms() - o).max(0) as f64 / 1000.0).unwrap_or(0.0);
        self.telemetry
            .gauge(
                "infertel_exporter_queue_oldest_age_seconds",
                "Age of the oldest unacknowledged batch in the persistent queue.",
                &l,
            )
            .set(age);
    }

    /// Appends to a shard's disk queue; false when the queue is in memory.
    fn push_disk(&self, shard: usize, item: &Item) -> bool {
        let s = &self.shards[shard];
        if s.disk.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return false;
        }
        let enriched = self.deliver.for_disk(&item.batch, item.naming);
        let batch = enriched.as_ref().unwrap_or(&item.batch);
        let res = blocking(|| {
            let mut d = s.disk.lock().unwrap_or_else(|p| p.into_inner());
            d.as_mut().map(|q| q.push(batch, item.naming))
        });
        let Some(res) = res else { return false };
        match res {
            Ok(0) => {}
            Ok(lost) => self.queue_full(lost),
            Err(e) => {
                let n = item.batch.sample_count() as u64;
                self.dropped("storage_error").add(n);
                tracing::error!(exporter = %self.id, "persistent queue: cannot append, dropping {n} samples: {e}");
            }
        }
        s.notify.notify_one();
        true
    }

    fn queue_full(&self, n: u64) {
        self.dropped("queue_full").add(n);
        let mut last = self.last_full_log.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|t| t.elapsed().as_secs() >= 10) {
            *last = Some(Instant::now());
            tracing::error!(
                exporter = %self.id, endpoint = %self.endpoint,
                "sending queue full: dropped the oldest queued data ({n} samples); the backend is slower than the scrapes or down (raise sending_queue.queue_size, num_consumers or the storage's max_bytes)"
            );
        }
    }

    pub fn dropped(&self, reason: &str) -> Arc<Counter> {
        self.telemetry.counter(
            "infertel_exporter_dropped_samples_total",
            "Samples given up on, by reason.",
            &[("exporter", &self.id), ("reason", reason)],
        )
    }

    fn push(&self, shard: usize, item: Item) {
        if self.push_disk(shard, &item) {
            return;
        }
        let s = &self.shards[shard];
        let evicted = {
            let mut q = s.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.push_back(item);
            if q.len() > s.cap { q.pop_front() } else { None }
        };
        match evicted {
            Some(old) => self.queue_full(old.batch.sample_count() as u64),
            None => {
                let q = self.queued.fetch_add(1, Ordering::Relaxed) + 1;
                self.queue_size.set(q as f64);
            }
        }
        s.notify.notify_one();
    }

    /// Takes the oldest queued batches of one naming mode, merged into one
    /// of at most [`MERGE_MAX_SAMPLES`].
    fn pop_merged(&self, shard: &Shard) -> Option<Item> {
        let mut q = shard.queue.lock().unwrap_or_else(|p| p.into_inner());
        let (out, n) = take_merged(&mut q, MERGE_MAX_SAMPLES)?;
        drop(q);
        let n = n as i64;
        let left = self.queued.fetch_sub(n, Ordering::Relaxed) - n;
        self.queue_size.set(left.max(0) as f64);
        Some(out)
    }

    /// Delivers one item; `false` when part of it was held at shutdown and
    /// not delivered: a persistent queue then keeps the record on disk
    /// (unacknowledged, sent after the restart) instead of counting it.
    async fn deliver_one(&self, state: &mut D::State, item: Item) -> bool {
        let mut finished = true;
        let naming = item.naming;
        let traced = self.traced(&item.batch);
        let d = self.deliver.deliver(state, item.batch, naming).await;
        if !traced.is_empty() {
            self.note_delivery(&traced, &d);
        }
        let persistent = self.is_persistent();
        let mut held = 0u64;
        for (n, outcome) in d.outcomes {
            match outcome {
                None => self.sent.add(n as u64),
                Some(SHUTDOWN) if persistent => finished = false,
                Some(SHUTDOWN) => held += n as u64,
                Some(reason) => self.dropped(reason).add(n as u64),
            }
        }
        if !persistent && held > 0 {
            if d.held.is_empty() {
                self.dropped(SHUTDOWN).add(held);
            } else {
                // Kept for a successor, or counted when the exporter ends.
                let batch = Batch { series: d.held, metadata: Vec::new() };
                self.returned.lock().unwrap_or_else(|p| p.into_inner()).push((Item { batch, naming }, held));
            }
        }
        finished
    }

    /// The series of `batch` some open trace follows (none, at the cost of
    /// one atomic load, while no trace is open).
    fn traced(&self, batch: &Batch) -> Vec<(Labels, Vec<Arc<Trace>>, u64)> {
        let tracer = &self.telemetry.status().tracer;
        if !tracer.active() {
            return Vec::new();
        }
        batch
            .series
            .iter()
            .filter(|s| tracer.may_follow(s.labels.metric_name()))
            .filter_map(|s| {
                let t = tracer.following(&s.labels);
                (!t.is_empty()).then(|| (s.labels.clone(), t, s.samples.len() as u64))
            })
            .collect()
    }

    /// Traced series that `admit` (write_relabel_configs, the exporter's
    /// filters) let through are queued, or held while the endpoint is paused.
    fn note_admitted(&self, before: &[(Labels, Vec<Arc<Trace>>, u64)], batch: &Batch) {
        let state = self.endpoint_state();
        for (labels, traces, n) in before {
            let kept = batch.series.iter().any(|s| s.labels == *labels);
            let (st, why) = if !kept {
                (
                    ExportState::Dropped,
                    "dropped before the queue: write_relabel_configs (or the exporter's filter) removed it".to_string(),
                )
            } else {
                match &state {
                    Some(e) if !e.is_up() => (
                        ExportState::Held,
                        format!(
                            "the exporter is paused, data waits in its queue until the endpoint answers: {}",
                            e.last_failure().map(|r| r.line()).unwrap_or_else(|| "endpoint down".into())
                        ),
                    ),
                    _ => (ExportState::Queued, String::new()),
                }
            };
            for t in traces {
                t.exported(&self.id, labels, st, &why, *n);
            }
        }
    }

    /// What became of the traced series of one delivery.
    fn note_delivery(&self, traced: &[(Labels, Vec<Arc<Trace>>, u64)], d: &Delivered) {
        let failed = d.outcomes.iter().find_map(|(_, o)| *o);
        let state = self.endpoint_state();
        let answer = state
            .as_ref()
            .and_then(|e| e.last_response())
            .map(|r| if r.body.is_empty() { r.status } else { format!("{}: {}", r.status, r.body) });
        let (st, why) = match failed {
            None => (ExportState::Delivered, answer.unwrap_or_else(|| "accepted".into())),
            Some(SHUTDOWN) => (
                ExportState::Held,
                "held when the exporter stopped or was replaced: kept for its successor or on disk".into(),
            ),
            Some(reason) => {
                let refusal = state.as_ref().and_then(|e| e.last_failure()).map(|r| r.line());
                (
                    if reason == "rejected" { ExportState::Rejected } else { ExportState::Dropped },
                    format!("{reason}: {}", answer.or(refusal).unwrap_or_default()),
                )
            }
        };
        // A delivery with several outcomes (a split request): the series'
        // own part is not known, the request's worst outcome is shown.
        for (labels, traces, n) in traced {
            for t in traces {
                t.exported(&self.id, labels, st, &why, *n);
            }
        }
    }

    /// A reload replaces this exporter: the consumers stop after the request
    /// in hand (a request held on a paused endpoint gives its series back),
    /// leaving the queue to [`SendingQueue::take_backlog`].
    pub fn hand_over(&self) {
        self.handing_over.store(true, Ordering::Relaxed);
        if let Some(st) = self.endpoint_state.get() {
            st.retire();
        }
        for s in &self.shards {
            s.notify.notify_one();
        }
    }

    fn handing_over(&self) -> bool {
        self.handing_over.load(Ordering::Relaxed)
    }

    /// After [`SendingQueue::hand_over`] and once the consumers stopped:
    /// what is queued in memory, oldest first (held requests first). On disk
    /// nothing: the successor opens the same log.
    pub fn take_backlog(&self) -> Vec<(Batch, Naming)> {
        let mut out: Vec<(Batch, Naming)> =
            std::mem::take(&mut *self.returned.lock().unwrap_or_else(|p| p.into_inner()))
                .into_iter()
                .map(|(i, _)| (i.batch, i.naming))
                .collect();
        for s in &self.shards {
            let mut q = s.queue.lock().unwrap_or_else(|p| p.into_inner());
            out.extend(q.drain(..).map(|i| (i.batch, i.naming)));
        }
        self.queued.store(0, Ordering::Relaxed);
        out
    }

    /// Takes a predecessor's backlog ahead of anything queued since, so per
    /// series the older samples still leave first. On disk it is appended
    /// (a predecessor's log is this one's, so that only happens when the
    /// predecessor was in memory).
    pub fn adopt(&self, backlog: Vec<(Batch, Naming)>) {
        if backlog.is_empty() {
            return;
        }
        let n = self.shards.len();
        let mut parts: Vec<Vec<Item>> = (0..n).map(|_| Vec::new()).collect();
        for (batch, naming) in backlog {
            let mut split: Vec<Batch> = (0..n).map(|_| Batch::default()).collect();
            for s in batch.series {
                let k = if n == 1 { 0 } else { (self.deliver.shard_key(&s, naming) % n as u64) as usize };
                split[k].series.push(s);
            }
            split[0].metadata = batch.metadata;
            for (i, b) in split.into_iter().enumerate() {
                if !b.is_empty() {
                    parts[i].push(Item { batch: b, naming });
                }
            }
        }
        for (i, items) in parts.into_iter().enumerate() {
            if self.shards[i].disk.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
                for it in items {
                    self.push_disk(i, &it);
                }
                continue;
            }
            let s = &self.shards[i];
            let mut evicted = 0u64;
            let mut added = 0i64;
            {
                let mut q = s.queue.lock().unwrap_or_else(|p| p.into_inner());
                for it in items.into_iter().rev() {
                    q.push_front(it);
                    added += 1;
                }
                while q.len() > s.cap {
                    if let Some(old) = q.pop_front() {
                        evicted += old.batch.sample_count() as u64;
                        added -= 1;
                    }
                }
            }
            if evicted > 0 {
                self.queue_full(evicted);
            }
            let q = self.queued.fetch_add(added, Ordering::Relaxed) + added;
            self.queue_size.set(q.max(0) as f64);
            s.notify.notify_one();
        }
    }

    /// Runs the consumers; after `stop`, drains what is queued and returns.
    pub async fn run(self: Arc<Self>, stop: watch::Receiver<bool>) {
        if !self.cfg.enabled {
            return;
        }
        // Owned by this future: when a shutdown or reload that ran out of
        // time aborts it, the consumers and the gauge loop go with it
        // instead of running on (and zeroing a new pipeline's gauges).
        let mut tasks = tokio::task::JoinSet::new();
        let flush = self.cfg.flush_timeout.get();
        for i in 0..self.shards.len() {
            let me = self.clone();
            let mut stop = stop.clone();
            tasks.spawn(async move {
                let shard = me.shards[i].clone();
                let mut state = me.deliver.new_state();
                loop {
                    if me.handing_over() {
                        break;
                    }
                    // Paused endpoint: leave the data queued; at shutdown
                    // while paused, what is queued is counted as dropped.
                    if let Some(gate) = me.endpoint_state.get()
                        && !gate.wait_open(&mut stop).await
                    {
                        break;
                    }
                    match me.take_disk(&shard) {
                        // Persistent: after a stop, keep sending until the
                        // queue is empty; the graph cuts this off at
                        // service.shutdown_timeout, and what is left stays
                        // on disk for the next start.
                        Some(Some((item, end))) => {
                            // Acknowledged only once delivered or rejected
                            // for its own content; a record held at
                            // shutdown stays on disk for the next process.
                            if me.deliver_one(&mut state, item).await {
                                me.ack_disk(&shard, end);
                                continue;
                            }
                            if !me.handing_over() {
                                tracing::info!(exporter = %me.id, "shutdown while paused: the held batch stays on disk and is sent after the restart");
                            }
                            break;
                        }
                        Some(None) => {
                            if *stop.borrow() || me.handing_over() {
                                break;
                            }
                            tokio::select! {
                                _ = shard.notify.notified() => linger(flush, &mut stop).await,
                                _ = stop.changed() => {}
                            }
                            continue;
                        }
                        None => {}
                    }
                    if let Some(b) = me.pop_merged(&shard) {
                        let _ = me.deliver_one(&mut state, b).await;
                        continue;
                    }
                    if *stop.borrow() || me.handing_over() {
                        break;
                    }
                    tokio::select! {
                        _ = shard.notify.notified() => linger(flush, &mut stop).await,
                        _ = stop.changed() => {}
                    }
                }
            });
        }
        let gauges = self.is_persistent().then(|| {
            let me = self.clone();
            AbortOnDrop(tokio::spawn(async move {
                loop {
                    me.update_disk_gauges();
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }))
        });
        while tasks.join_next().await.is_some() {}
        if let Some(g) = gauges {
            drop(g);
            self.update_disk_gauges();
        }
        if self.handing_over() {
            return; // the successor takes the queue
        }
        // Paused at shutdown: what is still queued in memory is counted as
        // dropped (a persistent queue keeps it on disk for the next start).
        if self.endpoint_state.get().is_some_and(|g| !g.is_open()) {
            self.abandon_queued();
        }
        self.count_returned();
    }

    /// Requests held when the exporter stopped, not handed over: dropped.
    fn count_returned(&self) {
        let n: u64 =
            std::mem::take(&mut *self.returned.lock().unwrap_or_else(|p| p.into_inner())).iter().map(|(_, n)| n).sum();
        if n > 0 {
            self.dropped(SHUTDOWN).add(n);
        }
    }

    /// `None`: the shard is in memory; `Some(None)`: nothing on disk.
    #[allow(clippy::option_option)]
    fn take_disk(&self, shard: &Shard) -> Option<Option<(Item, infertel_wal::Position)>> {
        let mut d = shard.disk.lock().unwrap_or_else(|p| p.into_inner());
        let q = d.as_mut()?;
        match blocking(|| q.take()) {
            Ok(Some(t)) => {
                if t.corrupt_samples > 0 {
                    self.dropped("corrupt").add(t.corrupt_samples);
                }
                Some(Some((Item { batch: t.batch, naming: t.naming }, t.end)))
            }
            Ok(None) => Some(None),
            Err(e) => {
                tracing::error!(exporter = %self.id, "persistent queue: cannot read: {e}");
                q.rewind();
                Some(None)
            }
        }
    }

    fn ack_disk(&self, shard: &Shard, end: infertel_wal::Position) {
        if let Some(q) = shard.disk.lock().unwrap_or_else(|p| p.into_inner()).as_mut()
            && let Err(e) = blocking(|| q.ack(end))
        {
            tracing::error!(exporter = %self.id, "persistent queue: cannot record delivery (the batch may be sent again after a restart): {e}");
        }
    }

    /// What is still queued (counted as dropped when shutdown runs out of time).
    pub fn abandon_queued(&self) {
        if self.is_persistent() {
            // Unacknowledged data stays on disk and is sent after the restart.
            self.close_storage();
            return;
        }
        self.count_returned();
        let mut n = 0;
        for s in &self.shards {
            let mut q = s.queue.lock().unwrap_or_else(|p| p.into_inner());
            n += q.drain(..).map(|b| b.batch.sample_count() as u64).sum::<u64>();
        }
        if n > 0 {
            self.dropped(SHUTDOWN).add(n);
            let why = if self.endpoint_state.get().is_some_and(|g| !g.is_open()) {
                "the endpoint is paused and the queue is in memory (configure sending_queue.storage to keep it)"
            } else {
                "service.shutdown_timeout ran out"
            };
            tracing::error!(exporter = %self.id, "shutdown: dropped {n} queued samples: {why}");
        }
    }

    /// Accepts a batch in a naming mode: queued (sharded) or, with the queue
    /// disabled, sent before returning.
    /// From now on a full in-memory queue makes the sender wait for room
    /// instead of dropping its oldest batch. Called when the agent shuts
    /// down: the receivers' last act is a staleness marker for every series
    /// of every target, at once, which would otherwise push the last scraped
    /// data out of a queue sized for one interval's scrapes. The wait is
    /// bounded by `service.shutdown_timeout`, like the whole shutdown.
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Waits, while draining, until shard `i`'s in-memory queue has room.
    async fn room(&self, i: usize) {
        if !self.draining.load(Ordering::Relaxed) {
            return;
        }
        let s = &self.shards[i];
        if s.disk.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return; // on disk the budget is bytes, and the data survives
        }
        while s.queue.lock().unwrap_or_else(|p| p.into_inner()).len() >= s.cap {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    pub async fn consume_named(&self, batch: Batch, naming: Naming) {
        if let Some(next) = self.successor.get() {
            return next.consume_as(batch, naming).await;
        }
        let before = self.traced(&batch);
        let batch = self.deliver.admit(batch, naming);
        if !before.is_empty() {
            self.note_admitted(&before, &batch);
        }
        if batch.is_empty() {
            return;
        }
        self.deliver.observe(&batch, naming);
        if !self.cfg.enabled {
            let mut state = self.deliver.new_state();
            self.deliver_one(&mut state, Item { batch, naming }).await;
            return;
        }
        let n = self.shards.len();
        if n == 1 {
            self.room(0).await;
            self.push(0, Item { batch, naming });
            return;
        }
        // Each part sized for its series up front: grown one push at a
        // time, a scrape's parts were reallocated some ten times each.
        let shards: Vec<u32> =
            batch.series.iter().map(|s| (self.deliver.shard_key(s, naming) % n as u64) as u32).collect();
        let mut counts = vec![0usize; n];
        for &k in &shards {
            counts[k as usize] += 1;
        }
        let mut parts: Vec<Vec<Series>> = counts.into_iter().map(Vec::with_capacity).collect();
        for (s, k) in batch.series.into_iter().zip(shards) {
            parts[k as usize].push(s);
        }
        let mut metadata = Some(batch.metadata);
        for (i, series) in parts.into_iter().enumerate() {
            let md = if i == 0 { metadata.take().unwrap_or_default() } else { Vec::new() };
            if !series.is_empty() || !md.is_empty() {
                self.room(i).await;
                self.push(i, Item { batch: Batch { series, metadata: md }, naming });
            }
        }
    }
}

impl<D: Deliver> Consumer for SendingQueue<D> {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        Box::pin(self.consume_named(batch, Naming::Otel))
    }
}

/// A pipeline's view of a shared exporter in a given naming mode (the
/// pipeline lists the `preserve_names` processor).
pub struct Named<D: Deliver> {
    pub queue: Arc<SendingQueue<D>>,
    pub naming: Naming,
}

impl<D: Deliver> Consumer for Named<D> {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        Box::pin(self.queue.consume_named(batch, self.naming))
    }
}

/// What the graph needs from a queued exporter, whatever its protocol.
pub trait QueuedExporter: Send + Sync {
    /// Makes the queue persistent (`sending_queue.storage`).
    fn set_storage(&self, storage: Storage);
    /// Opens what must be open before data arrives (the on-disk queue).
    fn open(&self) -> Result<(), String>;
    /// Releases the on-disk queue after the consumers stopped.
    fn close(&self);
    /// The agent is shutting down: wait for room rather than drop.
    fn begin_drain(&self);
    fn start(self: Arc<Self>, stop: watch::Receiver<bool>) -> BoxFuture<'static, ()>;
    fn abandon(&self);
    /// The consumer a pipeline hands its batches to.
    fn consumer(self: Arc<Self>, naming: Naming) -> Arc<dyn Consumer>;
    fn endpoint_state(&self) -> Option<Arc<EndpointState>>;
    /// The startup probe (canary as the endpoint state says).
    fn probe(&self) -> BoxFuture<'_, ProbeResult>;
    /// A reload replaces the exporter (see [`SendingQueue::hand_over`]).
    fn hand_over(&self);
    fn take_backlog(&self) -> Vec<(Batch, Naming)>;
    fn adopt(&self, backlog: Vec<(Batch, Naming)>);
    /// From now on what reaches this exporter goes to `next`.
    fn forward_to(&self, next: Arc<dyn QueuedExporter>);
    fn consume_as(&self, batch: Batch, naming: Naming) -> BoxFuture<'_, ()>;
}

impl<D: Deliver> QueuedExporter for SendingQueue<D> {
    fn set_storage(&self, storage: Storage) {
        SendingQueue::set_storage(self, storage)
    }
    fn open(&self) -> Result<(), String> {
        self.open_storage()
    }
    fn close(&self) {
        self.close_storage()
    }
    fn begin_drain(&self) {
        SendingQueue::begin_drain(self)
    }
    fn start(self: Arc<Self>, stop: watch::Receiver<bool>) -> BoxFuture<'static, ()> {
        Box::pin(self.run(stop))
    }
    fn abandon(&self) {
        self.abandon_queued()
    }
    fn endpoint_state(&self) -> Option<Arc<EndpointState>> {
        SendingQueue::endpoint_state(self)
    }
    fn probe(&self) -> BoxFuture<'_, ProbeResult> {
        let canary = self.endpoint_state.get().is_some_and(|s| s.canary);
        self.deliver.probe(canary)
    }
    fn consumer(self: Arc<Self>, naming: Naming) -> Arc<dyn Consumer> {
        if naming == Naming::Otel { self } else { Arc::new(Named { queue: self, naming }) }
    }
    fn hand_over(&self) {
        SendingQueue::hand_over(self)
    }
    fn take_backlog(&self) -> Vec<(Batch, Naming)> {
        SendingQueue::take_backlog(self)
    }
    fn adopt(&self, backlog: Vec<(Batch, Naming)>) {
        SendingQueue::adopt(self, backlog)
    }
    fn forward_to(&self, next: Arc<dyn QueuedExporter>) {
        let _ = self.successor.set(next);
    }
    fn consume_as(&self, batch: Batch, naming: Naming) -> BoxFuture<'_, ()> {
        Box::pin(self.consume_named(batch, naming))
    }
}

/// The most samples a consumer merges from its in-memory queue into one
/// delivery: about one remote-write request of the default
/// `max_batch_size_bytes` (3 MB at ~150 bytes a sample). Without a bound, a
/// backlog (a slow or returning backend) would be merged and encoded whole:
/// memory in proportion to the backlog on top of it, past the
/// memory_limiter's headroom, and for OTLP one request over the receiver's
/// size cap. A single batch larger than this still goes alone.
pub const MERGE_MAX_SAMPLES: usize = 20_000;

/// Takes the oldest batch and the ones after it of the same naming mode
/// while the merged batch stays within `max_samples`; returns it and how
/// many batches it took.
fn take_merged(q: &mut VecDeque<Item>, max_samples: usize) -> Option<(Item, usize)> {
    let first = q.front()?;
    let naming = first.naming;
    // How many batches go, and their series, counted first: the merged
    // vector is then sized once. Grown batch by batch, it was reallocated
    // (and copied) some seven times per request, each time a block of tens
    // of KB for which `malloc` sorts its free lists.
    let mut n = 0;
    let mut samples = 0;
    let mut series = 0;
    for next in q.iter() {
        let more = next.batch.sample_count();
        if n > 0 && (next.naming != naming || samples + more > max_samples) {
            break;
        }
        samples += more;
        series += next.batch.series.len();
        n += 1;
    }
    let mut out = q.pop_front()?;
    out.batch.series.reserve_exact(series - out.batch.series.len());
    for _ in 1..n {
        let Some(b) = q.pop_front() else { break };
        out.batch.series.extend(b.batch.series);
        out.batch.metadata.extend(b.batch.metadata);
    }
    Some((out, n))
}

/// After new data wakes an idle consumer, waits `flush` (unless stopping) so
/// the batches of other targets scraped in the meantime join the same
/// request: fewer, larger requests cost the agent and the backend less per
/// sample (the Collector's batch timeout, vmagent's flush interval).
async fn linger(flush: std::time::Duration, stop: &mut watch::Receiver<bool>) {
    if flush.is_zero() || *stop.borrow() {
        return;
    }
    tokio::select! {
        _ = tokio::time::sleep(flush) => {}
        _ = stop.changed() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_model::{Labels, Sample};

    fn item(samples: usize, naming: Naming) -> Item {
        let series = (0..samples)
            .map(|i| Series {
                labels: Labels::from_pairs([("__name__", "x"), ("i", &i.to_string())]),
                samples: infertel_model::samples![Sample { timestamp_ms: 1, value: 1.0 }],
            })
            .collect();
        Item { batch: Batch { series, metadata: Vec::new() }, naming }
    }

    #[test]
    fn merges_the_oldest_batches_up_to_the_bound_in_order() {
        let mut q: VecDeque<Item> = (0..10).map(|_| item(300, Naming::Otel)).collect();
        let (b, n) = take_merged(&mut q, 1000).unwrap();
        assert_eq!((n, b.batch.sample_count(), q.len()), (3, 900, 7), "three of 300 fit under 1000, a fourth not");
        assert_eq!(b.batch.series.capacity(), 900, "the merged vector is sized once, for what it holds");
        let (b, n) = take_merged(&mut q, 1000).unwrap();
        assert_eq!((n, b.batch.sample_count()), (3, 900));
        // A batch bigger than the bound goes alone.
        let mut q: VecDeque<Item> = [item(5000, Naming::Otel), item(1, Naming::Otel)].into_iter().collect();
        assert_eq!(take_merged(&mut q, 1000).unwrap().1, 1);
        assert_eq!(take_merged(&mut q, 1000).unwrap().1, 1);
        assert!(take_merged(&mut q, 1000).is_none());
        // Naming modes are not mixed.
        let mut q: VecDeque<Item> =
            [item(1, Naming::Otel), item(1, Naming::Preserve), item(1, Naming::Preserve)].into_iter().collect();
        assert_eq!(take_merged(&mut q, 1000).unwrap().1, 1);
        let (b, n) = take_merged(&mut q, 1000).unwrap();
        assert_eq!((n, b.naming), (2, Naming::Preserve));
    }
}
