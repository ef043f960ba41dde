//! What drives both OTLP exporters: the shared sending queue
//! (`exporters/queue.rs`) with a [`Deliver`] that converts each consumer's
//! batch (in the pipeline's naming mode) and sends it through a
//! [`Transport`] (gRPC here, HTTP in `otlphttp`). Series are sharded by data
//! point, so a histogram's buckets, sum, count and `_created` and every
//! stream's start-time state stay on one consumer.

use super::config::OtlpConfig;
use super::request_builder::{RequestBuilder, Shared};
use super::service::{GrpcTransport, Sender, Transport};
use crate::consumer::BoxFuture;
use crate::exporters::probe::{EndpointState, ProbeResult};
use crate::exporters::queue::{Deliver, Delivered, SendingQueue};
use crate::extensions::ExtensionConfig;
use crate::telemetry::Telemetry;
use infertel_model::{Batch, Series};
use infertel_otlp::{Converter, Naming};
use std::sync::Arc;

pub struct OtlpDeliver<T: Transport> {
    pub sender: Sender<T>,
    pub shared: Shared,
    pub trim: bool,
}

impl<T: Transport> Deliver for OtlpDeliver<T> {
    type State = RequestBuilder;

    fn new_state(&self) -> RequestBuilder {
        RequestBuilder::new(self.trim)
    }

    fn observe(&self, batch: &Batch, _naming: Naming) {
        self.shared.observe(batch);
    }

    fn shard_key(&self, s: &Series, naming: Naming) -> u64 {
        let store = self.shared.metadata.lock().unwrap_or_else(|p| p.into_inner());
        Converter::shard_key(&store, naming, s)
    }

    fn deliver<'a>(
        &'a self,
        builder: &'a mut RequestBuilder,
        batch: Batch,
        naming: Naming,
    ) -> BoxFuture<'a, Delivered> {
        Box::pin(async move {
            let samples = batch.sample_count();
            let Some(req) = builder.build(&self.shared, &batch, naming) else {
                // Only series that map to nothing (e.g. `_created` start times).
                return vec![(samples, None)];
            };
            vec![(samples, self.sender.send(&req).await)]
        })
    }

    /// An empty ExportMetricsServiceRequest with the real headers and auth;
    /// with `canary`, then one `infertel_canary` gauge point.
    fn probe(&self, canary: bool) -> BoxFuture<'_, ProbeResult> {
        Box::pin(async move {
            let empty = super::request_builder::Request { body: Default::default(), samples: 0, points: 0 };
            let r = self.sender.transport.probe(&empty).await;
            if !canary || !r.is_ok() {
                return r;
            }
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis()
                as i64;
            let batch = Batch {
                series: vec![Series {
                    labels: infertel_model::Labels::from_pairs([
                        ("__name__", "infertel_canary"),
                        ("exporter", self.sender.exporter.as_str()),
                    ]),
                    samples: vec![infertel_model::Sample { timestamp_ms: now, value: 1.0 }],
                }],
                metadata: vec![],
            };
            let shared = super::request_builder::Shared::default();
            let Some(req) = RequestBuilder::new(self.trim).build(&shared, &batch, Naming::Otel) else { return r };
            let mut c = self.sender.transport.probe(&req).await;
            if c.is_ok() {
                c.message = format!("{} (canary point infertel_canary written)", c.message);
            } else {
                c.message =
                    format!("the empty request passed but the canary point infertel_canary did not: {}", c.message);
            }
            c
        })
    }
}

pub type OtlpExporter = SendingQueue<OtlpDeliver<GrpcTransport>>;

/// Builds the gRPC exporter (not yet running). Must be called inside a
/// Tokio runtime (the channel connects lazily on it).
pub fn new_exporter(
    id: String,
    cfg: OtlpConfig,
    auth: Option<ExtensionConfig>,
    telemetry: Telemetry,
) -> Result<Arc<OtlpExporter>, String> {
    cfg.validate()?;
    let transport = GrpcTransport::new(&cfg, auth)?;
    let endpoint = crate::exporters::probe::redact_url(transport.endpoint());
    let state = EndpointState::new(
        &id,
        transport.endpoint(),
        cfg.startup_check,
        cfg.canary,
        cfg.retry_on_failure.clone().for_queue(cfg.sending_queue.storage.is_some()),
        &telemetry,
    );
    let sender = Sender::new(
        id.clone(),
        transport,
        cfg.retry_on_failure.clone().for_queue(cfg.sending_queue.storage.is_some()),
        telemetry.clone(),
        state.clone(),
    );
    let deliver = OtlpDeliver { sender, shared: Shared::default(), trim: cfg.trim_metric_suffixes };
    let q = SendingQueue::new(id, endpoint, cfg.sending_queue.clone(), deliver, telemetry);
    q.set_endpoint_state(state);
    Ok(q)
}
