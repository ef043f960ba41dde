//! The sending queue every network exporter shares (remote write, OTLP gRPC,
//! OTLP HTTP): series are sharded by a key the exporter chooses over
//! `sending_queue.num_consumers` queues, so one series' samples (for OTLP:
//! one data point's buckets, sum, count and `_created`) always meet the same
//! consumer and leave in timestamp order even with parallel senders; each
//! consumer drains its queue and hands the merged batch to the exporter's
//! [`Deliver`] implementation, one request at a time (a retry holds its
//! shard, which is what keeps the order). A full queue drops its oldest
//! batch, counted and logged, never silently.
//!
//! Self-metrics, labelled `{exporter}`: `infertel_exporter_sent_samples_total`,
//! `infertel_exporter_dropped_samples_total{reason}`,
//! `infertel_exporter_queue_size`, `infertel_exporter_queue_capacity`.

use crate::consumer::{BoxFuture, Consumer};
use crate::exporters::probe::{EndpointState, ProbeResult};
use crate::exporters::shared::QueueConfig;
use crate::telemetry::{Counter, Gauge, Telemetry};
use infertel_model::{Batch, Series};
use infertel_otlp::Naming;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use tokio::sync::{Notify, watch};

/// What one delivery did with the samples it was given: `(samples, None)`
/// sent, `(samples, Some(reason))` dropped for `reason`.
pub type Delivered = Vec<(usize, Option<&'static str>)>;

/// An exporter's protocol side: how a consumer's batch becomes requests.
pub trait Deliver: Send + Sync + 'static {
    /// Per-consumer state (a request builder, a converter with start times).
    type State: Send + 'static;
    fn new_state(&self) -> Self::State;
    /// Sees every batch before it is sharded (shared metadata caches).
    fn observe(&self, _batch: &Batch, _naming: Naming) {}
    /// The shard key of a series; by default its label hash.
    fn shard_key(&self, s: &Series, _naming: Naming) -> u64 {
        s.labels.stable_hash()
    }
    fn deliver<'a>(
        &'a self,
        state: &'a mut Self::State,
        batch: Batch,
        naming: Naming,
    ) -> BoxFuture<'a, Delivered>;
    /// The startup probe (`exporters/probe.rs`): an empty write with the
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
    /// stays queued); see `exporters/probe.rs`.
    endpoint_state: OnceLock<Arc<EndpointState>>,
}

impl<D: Deliver> SendingQueue<D> {
    pub fn new(
        id: String,
        endpoint: String,
        cfg: QueueConfig,
        deliver: D,
        telemetry: Telemetry,
    ) -> Arc<Self> {
        let n = if cfg.enabled { cfg.num_consumers } else { 1 };
        let per_shard = if cfg.enabled {
            cfg.queue_size.div_ceil(n).max(1)
        } else {
            1
        };
        let shards = (0..n)
            .map(|_| {
                Arc::new(Shard {
                    queue: Mutex::new(VecDeque::new()),
                    notify: Notify::new(),
                    cap: per_shard,
                })
            })
            .collect();
        let l = [("exporter", id.as_str())];
        telemetry
            .gauge(
                "infertel_exporter_queue_capacity",
                "Batches the sending queue can hold.",
                &l,
            )
            .set((per_shard * n) as f64);
        Arc::new(SendingQueue {
            sent: telemetry.counter(
                "infertel_exporter_sent_samples_total",
                "Samples the backend accepted.",
                &l,
            ),
            queue_size: telemetry.gauge(
                "infertel_exporter_queue_size",
                "Batches waiting in the sending queue.",
                &l,
            ),
            queued: Arc::new(AtomicI64::new(0)),
            telemetry,
            shards,
            deliver: Arc::new(deliver),
            cfg,
            endpoint,
            id,
            last_full_log: Mutex::new(None),
            endpoint_state: OnceLock::new(),
        })
    }

    /// Attaches the endpoint state whose gate the consumers wait on.
    pub fn set_endpoint_state(&self, state: Arc<EndpointState>) {
        let _ = self.endpoint_state.set(state);
    }

    pub fn endpoint_state(&self) -> Option<Arc<EndpointState>> {
        self.endpoint_state.get().cloned()
    }

    pub fn dropped(&self, reason: &str) -> Arc<Counter> {
        self.telemetry.counter(
            "infertel_exporter_dropped_samples_total",
            "Samples given up on, by reason.",
            &[("exporter", &self.id), ("reason", reason)],
        )
    }

    fn push(&self, shard: usize, item: Item) {
        let s = &self.shards[shard];
        let evicted = {
            let mut q = s.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.push_back(item);
            if q.len() > s.cap { q.pop_front() } else { None }
        };
        match evicted {
            Some(old) => {
                let n = old.batch.sample_count() as u64;
                self.dropped("queue_full").add(n);
                let mut last = self.last_full_log.lock().unwrap_or_else(|p| p.into_inner());
                if last.is_none_or(|t| t.elapsed().as_secs() >= 10) {
                    *last = Some(Instant::now());
                    tracing::error!(
                        exporter = %self.id, endpoint = %self.endpoint,
                        "sending queue full: dropped the oldest batch ({n} samples); the backend is slower than the scrapes (raise sending_queue.queue_size or num_consumers)"
                    );
                }
            }
            None => {
                let q = self.queued.fetch_add(1, Ordering::Relaxed) + 1;
                self.queue_size.set(q as f64);
            }
        }
        s.notify.notify_one();
    }

    /// Takes the queued batches of one naming mode, merged into one.
    fn pop_all(&self, shard: &Shard) -> Option<Item> {
        let mut q = shard.queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = q.pop_front()?;
        let mut n = 1;
        while q.front().is_some_and(|i| i.naming == out.naming) {
            let Some(b) = q.pop_front() else { break };
            out.batch.series.extend(b.batch.series);
            out.batch.metadata.extend(b.batch.metadata);
            n += 1;
        }
        drop(q);
        let left = self.queued.fetch_sub(n, Ordering::Relaxed) - n;
        self.queue_size.set(left.max(0) as f64);
        Some(out)
    }

    async fn deliver_one(&self, state: &mut D::State, item: Item) {
        for (n, outcome) in self.deliver.deliver(state, item.batch, item.naming).await {
            match outcome {
                None => self.sent.add(n as u64),
                Some(reason) => self.dropped(reason).add(n as u64),
            }
        }
    }

    /// Runs the consumers; after `stop`, drains what is queued and returns.
    pub async fn run(self: Arc<Self>, stop: watch::Receiver<bool>) {
        if !self.cfg.enabled {
            return;
        }
        let mut tasks = Vec::new();
        for i in 0..self.shards.len() {
            let me = self.clone();
            let mut stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                let shard = me.shards[i].clone();
                let mut state = me.deliver.new_state();
                loop {
                    // Paused endpoint: leave the data queued; at shutdown
                    // while paused, what is queued is counted as dropped.
                    if let Some(gate) = me.endpoint_state.get()
                        && !gate.wait_open(&mut stop).await
                    {
                        break;
                    }
                    if let Some(b) = me.pop_all(&shard) {
                        me.deliver_one(&mut state, b).await;
                        continue;
                    }
                    if *stop.borrow() {
                        break;
                    }
                    tokio::select! {
                        _ = shard.notify.notified() => {}
                        _ = stop.changed() => {}
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        if self.endpoint_state.get().is_some_and(|g| !g.is_open()) {
            self.abandon_queued();
        }
    }

    /// What is still queued (counted as dropped when shutdown runs out of time).
    pub fn abandon_queued(&self) {
        let mut n = 0;
        for s in &self.shards {
            let mut q = s.queue.lock().unwrap_or_else(|p| p.into_inner());
            n += q
                .drain(..)
                .map(|b| b.batch.sample_count() as u64)
                .sum::<u64>();
        }
        if n > 0 {
            self.dropped("shutdown").add(n);
            tracing::error!(exporter = %self.id, "shutdown timeout: dropped {n} queued samples");
        }
    }

    /// Accepts a batch in a naming mode: queued (sharded) or, with the queue
    /// disabled, sent before returning.
    pub async fn consume_named(&self, batch: Batch, naming: Naming) {
        self.deliver.observe(&batch, naming);
        if !self.cfg.enabled {
            let mut state = self.deliver.new_state();
            self.deliver_one(&mut state, Item { batch, naming }).await;
            return;
        }
        let n = self.shards.len();
        if n == 1 {
            self.push(0, Item { batch, naming });
            return;
        }
        let mut parts: Vec<Vec<Series>> = (0..n).map(|_| Vec::new()).collect();
        for s in batch.series {
            let k = self.deliver.shard_key(&s, naming);
            parts[(k % n as u64) as usize].push(s);
        }
        let mut metadata = Some(batch.metadata);
        for (i, series) in parts.into_iter().enumerate() {
            let md = if i == 0 {
                metadata.take().unwrap_or_default()
            } else {
                Vec::new()
            };
            if !series.is_empty() || !md.is_empty() {
                self.push(
                    i,
                    Item {
                        batch: Batch {
                            series,
                            metadata: md,
                        },
                        naming,
                    },
                );
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
    fn start(self: Arc<Self>, stop: watch::Receiver<bool>) -> BoxFuture<'static, ()>;
    fn abandon(&self);
    /// The consumer a pipeline hands its batches to.
    fn consumer(self: Arc<Self>, naming: Naming) -> Arc<dyn Consumer>;
    fn endpoint_state(&self) -> Option<Arc<EndpointState>>;
    /// The startup probe (canary as the endpoint state says).
    fn probe(&self) -> BoxFuture<'_, ProbeResult>;
}

impl<D: Deliver> QueuedExporter for SendingQueue<D> {
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
        if naming == Naming::Otel {
            self
        } else {
            Arc::new(Named {
                queue: self,
                naming,
            })
        }
    }
}
