//! Processor `batch`, as in the Collector: collects samples until
//! `send_batch_size` is reached or `timeout` passes since the first buffered
//! one, then passes them on; `send_batch_max_size` caps a batch.

use crate::consumer::{BoxFuture, Consumer};
use crate::primitives::Duration;
use infertel_model::Batch;
use serde::Deserialize;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, watch};

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// Samples that trigger a send.
    pub send_batch_size: usize,
    /// Upper bound on samples per batch; 0 = no bound.
    pub send_batch_max_size: usize,
    /// Longest time a sample waits in the buffer.
    pub timeout: Duration,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig { send_batch_size: 8192, send_batch_max_size: 0, timeout: Duration::from_millis(200) }
    }
}

impl BatchConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.send_batch_max_size > 0 && self.send_batch_max_size < self.send_batch_size {
            return Err("send_batch_max_size must be 0 or at least send_batch_size".into());
        }
        if self.send_batch_size == 0 {
            return Err("send_batch_size must be greater than 0".into());
        }
        Ok(())
    }
}

pub struct BatchProcessor {
    cfg: BatchConfig,
    buf: Mutex<Batch>,
    next: Arc<dyn Consumer>,
    first_buffered: Notify,
}

impl BatchProcessor {
    pub fn new(cfg: BatchConfig, next: Arc<dyn Consumer>) -> Arc<Self> {
        Arc::new(BatchProcessor { cfg, buf: Mutex::new(Batch::default()), next, first_buffered: Notify::new() })
    }

    fn take(&self) -> Batch {
        std::mem::take(&mut *self.buf.lock().unwrap_or_else(|p| p.into_inner()))
    }

    async fn send(&self, mut batch: Batch) {
        let max = self.cfg.send_batch_max_size;
        if max == 0 || batch.sample_count() <= max {
            if !batch.is_empty() {
                self.next.consume(batch).await;
            }
            return;
        }
        // Split, keeping every series whole.
        let metadata = std::mem::take(&mut batch.metadata);
        let mut part = Batch { series: Vec::new(), metadata };
        let mut n = 0;
        for s in batch.series {
            if n > 0 && n + s.samples.len() > max {
                self.next.consume(std::mem::take(&mut part)).await;
                n = 0;
            }
            n += s.samples.len();
            part.series.push(s);
        }
        if !part.is_empty() {
            self.next.consume(part).await;
        }
    }

    /// Flushes on `timeout`; returns after a final flush once `stop` is set.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = self.first_buffered.notified() => {}
                _ = stop.changed() => break,
            }
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.timeout.get()) => {}
                _ = stop.changed() => break,
            }
            let b = self.take();
            self.send(b).await;
            if *stop.borrow() {
                break;
            }
        }
        let b = self.take();
        self.send(b).await;
    }
}

impl Consumer for BatchProcessor {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let full = {
                let mut buf = self.buf.lock().unwrap_or_else(|p| p.into_inner());
                let was_empty = buf.is_empty();
                buf.series.extend(batch.series);
                buf.metadata.extend(batch.metadata);
                if was_empty {
                    self.first_buffered.notify_one();
                }
                if buf.sample_count() >= self.cfg.send_batch_size { Some(std::mem::take(&mut *buf)) } else { None }
            };
            if let Some(b) = full {
                self.send(b).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_model::{Labels, Sample, Series};

    struct Collect(Mutex<Vec<usize>>);
    impl Consumer for Collect {
        fn consume(&self, b: Batch) -> BoxFuture<'_, ()> {
            self.0.lock().unwrap().push(b.sample_count());
            Box::pin(async {})
        }
    }

    fn batch(n: usize) -> Batch {
        Batch {
            series: (0..n)
                .map(|i| Series {
                    labels: Labels::from_pairs([("__name__", "x"), ("i", &i.to_string())]),
                    samples: infertel_model::samples![Sample { timestamp_ms: 1, value: 1.0 }],
                })
                .collect(),
            metadata: vec![],
        }
    }

    #[tokio::test]
    async fn sends_on_size_and_on_timeout_and_on_stop() {
        let c = Arc::new(Collect(Mutex::new(vec![])));
        let cfg = BatchConfig { send_batch_size: 10, send_batch_max_size: 10, timeout: Duration::from_millis(50) };
        let p = BatchProcessor::new(cfg, c.clone());
        let (tx, rx) = watch::channel(false);
        let h = tokio::spawn(p.clone().run(rx));
        p.consume(batch(25)).await; // over the max: split into 10 + 10 + 5
        assert_eq!(*c.0.lock().unwrap(), vec![10, 10, 5]);
        p.consume(batch(3)).await;
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        assert_eq!(*c.0.lock().unwrap(), vec![10, 10, 5, 3]);
        p.consume(batch(2)).await;
        tx.send(true).unwrap();
        h.await.unwrap();
        assert_eq!(*c.0.lock().unwrap(), vec![10, 10, 5, 3, 2]);
    }
}
