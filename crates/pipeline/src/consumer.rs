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
