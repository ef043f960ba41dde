//! What drives the remote-write exporter: series are sharded by label hash
//! over `sending_queue.num_consumers` queues, so each series' samples leave
//! in timestamp order even with parallel senders; each consumer drains its
//! queue into requests and sends them one at a time (a retry holds its
//! shard, which is what keeps the order). A full queue drops its oldest
//! batch, counted and logged, never silently.

use super::config::RemoteWriteConfig;
use super::request_builder::RequestBuilder;
use super::service::{Outcome, RemoteWriteService};
use crate::consumer::{BoxFuture, Consumer};
use crate::extensions::ExtensionConfig;
use crate::telemetry::{Counter, Gauge, Telemetry};
use infertel_model::{Batch, Label, Series};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{watch, Notify};

struct Shard {
    queue: Mutex<VecDeque<Batch>>,
    notify: Notify,
    cap: usize,
}

pub struct RemoteWriteExporter {
    id: String,
    cfg: RemoteWriteConfig,
    shards: Vec<Arc<Shard>>,
    service: Arc<RemoteWriteService>,
    telemetry: Telemetry,
    sent: Arc<Counter>,
    queued: Arc<AtomicI64>,
    queue_size: Arc<Gauge>,
    last_full_log: Mutex<Option<Instant>>,
}

impl RemoteWriteExporter {
    pub fn new(id: String, cfg: RemoteWriteConfig, auth: Option<ExtensionConfig>, telemetry: Telemetry) -> Result<Arc<Self>, String> {
        cfg.validate()?;
        let client = crate::http::build_client(&cfg.tls.settings(), Some(cfg.timeout.get()))?;
        let mut headers = HeaderMap::new();
        for (k, v) in &cfg.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| format!("headers: invalid name {k:?}"))?;
            let mut value = HeaderValue::from_str(v).map_err(|_| format!("headers: invalid value for {k:?}"))?;
            if name == reqwest::header::AUTHORIZATION {
                value.set_sensitive(true);
            }
            headers.insert(name, value);
        }
        let service = Arc::new(RemoteWriteService::new(
            id.clone(),
            cfg.endpoint.clone(),
            client,
            headers,
            auth,
            cfg.retry_on_failure.clone(),
            telemetry.clone(),
        ));
        let n = if cfg.sending_queue.enabled { cfg.sending_queue.num_consumers } else { 1 };
        let per_shard = if cfg.sending_queue.enabled { cfg.sending_queue.queue_size.div_ceil(n).max(1) } else { 1 };
        let shards = (0..n).map(|_| Arc::new(Shard { queue: Mutex::new(VecDeque::new()), notify: Notify::new(), cap: per_shard })).collect();
        let l = [("exporter", id.as_str())];
        telemetry
            .gauge("infertel_exporter_queue_capacity", "Batches the sending queue can hold.", &l)
            .set((per_shard * n) as f64);
        Ok(Arc::new(RemoteWriteExporter {
            sent: telemetry.counter("infertel_exporter_sent_samples_total", "Samples the backend accepted.", &l),
            queue_size: telemetry.gauge("infertel_exporter_queue_size", "Batches waiting in the sending queue.", &l),
            queued: Arc::new(AtomicI64::new(0)),
            telemetry,
            shards,
            service,
            cfg,
            id,
            last_full_log: Mutex::new(None),
        }))
    }

    fn dropped(&self, reason: &str) -> Arc<Counter> {
        self.telemetry.counter(
            "infertel_exporter_dropped_samples_total",
            "Samples given up on, by reason.",
            &[("exporter", &self.id), ("reason", reason)],
        )
    }

    fn external(&self) -> Vec<Label> {
        self.cfg.external_labels.iter().map(|(k, v)| Label::new(k.as_str(), v.as_str())).collect()
    }

    fn push(&self, shard: usize, batch: Batch) {
        let s = &self.shards[shard];
        let evicted = {
            let mut q = s.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.push_back(batch);
            if q.len() > s.cap { q.pop_front() } else { None }
        };
        match evicted {
            Some(old) => {
                let n = old.sample_count() as u64;
                self.dropped("queue_full").add(n);
                let mut last = self.last_full_log.lock().unwrap_or_else(|p| p.into_inner());
                if last.is_none_or(|t| t.elapsed().as_secs() >= 10) {
                    *last = Some(Instant::now());
                    tracing::error!(
                        exporter = %self.id, endpoint = %self.cfg.endpoint,
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

    fn pop_all(&self, shard: &Shard) -> Option<Batch> {
        let mut q = shard.queue.lock().unwrap_or_else(|p| p.into_inner());
        let n = q.len();
        let mut out = q.pop_front()?;
        while let Some(b) = q.pop_front() {
            out.series.extend(b.series);
            out.metadata.extend(b.metadata);
        }
        drop(q);
        let left = self.queued.fetch_sub(n as i64, Ordering::Relaxed) - n as i64;
        self.queue_size.set(left.max(0) as f64);
        Some(out)
    }

    async fn deliver(&self, builder: &mut RequestBuilder, batch: Batch) {
        for req in builder.build(batch.series, &batch.metadata) {
            match self.service.send(&req).await {
                Outcome::Sent => self.sent.add(req.samples as u64),
                Outcome::Dropped(reason) => self.dropped(reason).add(req.samples as u64),
            }
        }
    }

    /// Runs the consumers; after `stop`, drains what is queued and returns.
    pub async fn run(self: Arc<Self>, stop: watch::Receiver<bool>) {
        if !self.cfg.sending_queue.enabled {
            return;
        }
        let mut tasks = Vec::new();
        for i in 0..self.shards.len() {
            let me = self.clone();
            let mut stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                let shard = me.shards[i].clone();
                let mut builder = RequestBuilder::new(me.cfg.max_batch_size_bytes.0 as usize, me.cfg.send_metadata, me.external());
                loop {
                    if let Some(b) = me.pop_all(&shard) {
                        me.deliver(&mut builder, b).await;
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
    }

    /// What is still queued (counted as dropped when shutdown runs out of time).
    pub fn abandon_queued(&self) {
        let mut n = 0;
        for s in &self.shards {
            let mut q = s.queue.lock().unwrap_or_else(|p| p.into_inner());
            n += q.drain(..).map(|b| b.sample_count() as u64).sum::<u64>();
        }
        if n > 0 {
            self.dropped("shutdown").add(n);
            tracing::error!(exporter = %self.id, "shutdown timeout: dropped {n} queued samples");
        }
    }
}

impl Consumer for RemoteWriteExporter {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if !self.cfg.sending_queue.enabled {
                let mut builder = RequestBuilder::new(self.cfg.max_batch_size_bytes.0 as usize, self.cfg.send_metadata, self.external());
                self.deliver(&mut builder, batch).await;
                return;
            }
            let n = self.shards.len();
            if n == 1 {
                self.push(0, batch);
                return;
            }
            let mut parts: Vec<Vec<Series>> = (0..n).map(|_| Vec::new()).collect();
            for s in batch.series {
                parts[(s.labels.stable_hash() % n as u64) as usize].push(s);
            }
            let mut metadata = Some(batch.metadata);
            for (i, series) in parts.into_iter().enumerate() {
                let md = if i == 0 { metadata.take().unwrap_or_default() } else { Vec::new() };
                if !series.is_empty() || !md.is_empty() {
                    self.push(i, Batch { series, metadata: md });
                }
            }
        })
    }
}
