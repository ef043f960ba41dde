//! The consumer interface that chains components, as in the Collector: a
//! receiver hands each scrape to the first processor, which hands its output
//! to the next, and the last hands it to every exporter of the pipeline.

use infertel_model::Batch;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Takes batches. Returning means the batch was accepted (queued or passed
/// on); exporters account for what happens to it afterwards.
pub trait Consumer: Send + Sync {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()>;
}

/// Hands every batch to several consumers (pipelines sharing a receiver,
/// pipelines with several exporters).
pub struct FanOut(pub Vec<Arc<dyn Consumer>>);

impl Consumer for FanOut {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let n = self.0.len();
            for (i, c) in self.0.iter().enumerate() {
                // The last consumer takes the batch itself; the others a copy
                // (labels are reference counted, so copies are cheap).
                if i + 1 == n {
                    c.consume(batch).await;
                    break;
                }
                c.consume(batch.clone()).await;
            }
        })
    }
}

/// A consumer whose downstream can be replaced while batches flow: every
/// component's output goes through one, so that a reload rewires a
/// component that keeps running (its scrape loops, its batch buffer, its
/// queue) to the next pipeline instead of restarting it.
pub struct Relay(std::sync::RwLock<Arc<dyn Consumer>>);

impl Relay {
    pub fn new(next: Arc<dyn Consumer>) -> Arc<Relay> {
        Arc::new(Relay(std::sync::RwLock::new(next)))
    }

    /// Sends what comes from now on to `next` (a batch already handed to
    /// the previous downstream finishes there).
    pub fn set(&self, next: Arc<dyn Consumer>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = next;
    }
}

impl Consumer for Relay {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        let next = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        Box::pin(async move { next.consume(batch).await })
    }
}

/// Takes batches and forgets them (the downstream of a relay not yet wired).
pub struct Discard;

impl Consumer for Discard {
    fn consume(&self, _batch: Batch) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
