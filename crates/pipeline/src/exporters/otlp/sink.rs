//! What drives both OTLP exporters: the shared sending queue
//! (`exporters/exporterhelper/queue.rs`) with a [`Deliver`] that converts each consumer's
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
    /// Uncompressed protobuf bytes a request may hold (`max_request_bytes`).
    pub max_request_bytes: usize,
}

impl<T: Transport> OtlpDeliver<T> {
    pub fn new(sender: Sender<T>, trim: bool, max_request_bytes: usize) -> Self {
        OtlpDeliver { sender, shared: Shared::default(), trim, max_request_bytes }
    }

    /// Sends the series of `groups` (two or more data points: all series of
    /// one point stay together), known too large as a whole: in halves, cut further to
    /// `max_request_bytes` and split again when the receiver refuses a
    /// request as too large; a single data point still too large is
    /// dropped, counted as `too_large` and named.
    async fn send_groups(
        &self,
        builder: &mut RequestBuilder,
        groups: Vec<Vec<Series>>,
        metadata: &[infertel_model::Metadata],
        naming: Naming,
    ) -> Delivered {
        let mut out = Delivered::default();
        let split = |gs: Vec<Vec<Series>>, pending: &mut Vec<Vec<Vec<Series>>>| {
            let mut a = gs;
            let b = a.split_off(a.len() / 2);
            pending.push(b);
            pending.push(a);
        };
        let mut pending: Vec<Vec<Vec<Series>>> = Vec::new();
        split(groups, &mut pending);
        while let Some(gs) = pending.pop() {
            let batch = Batch { series: gs.iter().flatten().cloned().collect(), metadata: metadata.to_vec() };
            let samples = super::request_builder::scraped_samples(&batch);
            let Some(req) = builder.build(&self.shared, &batch, naming) else {
                // Only series that map to nothing (e.g. `_created` start times).
                out.push(samples, None);
                continue;
            };
            if gs.len() > 1 && prost::Message::encoded_len(&req.body) > self.max_request_bytes {
                split(gs, &mut pending);
                continue;
            }
            match self.sender.send(&req).await {
                Some(super::service::TOO_LARGE) if gs.len() > 1 => {
                    tracing::warn!(exporter = %self.sender.exporter, "the receiver refused a request of {} data points as too large: splitting it in halves", gs.len());
                    split(gs, &mut pending);
                }
                Some(super::service::TOO_LARGE) => {
                    let name = gs.first().and_then(|g| g.first()).map(|s| s.labels.to_string()).unwrap_or_default();
                    tracing::error!(exporter = %self.sender.exporter, "dropping {samples} samples: a single data point too large for the receiver: {name}");
                    out.push(samples, Some("too_large"));
                }
                Some(crate::exporters::queue::SHUTDOWN) => {
                    out.held.extend(gs.into_iter().flatten());
                    out.push(samples, Some(crate::exporters::queue::SHUTDOWN));
                }
                outcome => out.push(samples, outcome),
            }
        }
        out
    }
}

impl<T: Transport> Deliver for OtlpDeliver<T> {
    type State = RequestBuilder;

    fn new_state(&self) -> RequestBuilder {
        RequestBuilder::new(self.trim)
    }

    fn observe(&self, batch: &Batch, _naming: Naming) {
        self.shared.observe(batch);
    }

    fn for_disk(&self, batch: &Batch, naming: Naming) -> Option<Batch> {
        // Preserve mode keeps names and types from the labels alone.
        (naming == Naming::Otel).then(|| self.shared.self_describing(batch))
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
            // A record replayed from disk carries its metadata and
            // target_info (see `for_disk`): learn them before converting.
            self.shared.observe(&batch);
            // The whole batch first: the common case costs one conversion.
            let samples = super::request_builder::scraped_samples(&batch);
            let Some(req) = builder.build(&self.shared, &batch, naming) else {
                // Only series that map to nothing (e.g. `_created` start times).
                return Delivered::one(samples, None);
            };
            let fits = prost::Message::encoded_len(&req.body) <= self.max_request_bytes;
            if fits {
                match self.sender.send(&req).await {
                    Some(super::service::TOO_LARGE) => {}
                    Some(crate::exporters::queue::SHUTDOWN) => {
                        let mut d = Delivered::one(samples, Some(crate::exporters::queue::SHUTDOWN));
                        d.held = batch.series;
                        return d;
                    }
                    outcome => return Delivered::one(samples, outcome),
                }
            }
            // Too large to send, or refused as too large: split at data
            // points (the series that convert into one OTLP point, buckets,
            // sum, count, _created, are never split apart).
            let mut order: Vec<u64> = Vec::new();
            let mut groups: std::collections::HashMap<u64, Vec<Series>> = std::collections::HashMap::new();
            {
                let store = self.shared.metadata.lock().unwrap_or_else(|p| p.into_inner());
                for s in batch.series {
                    let k = Converter::shard_key(&store, naming, &s);
                    groups
                        .entry(k)
                        .or_insert_with(|| {
                            order.push(k);
                            Vec::new()
                        })
                        .push(s);
                }
            }
            let groups: Vec<Vec<Series>> = order.into_iter().filter_map(|k| groups.remove(&k)).collect();
            if groups.len() > 1 {
                return self.send_groups(builder, groups, &batch.metadata, naming).await;
            }
            // One data point: over the bound it is still tried once; refused
            // as too large, it is dropped and named.
            let outcome = if fits { Some(super::service::TOO_LARGE) } else { self.sender.send(&req).await };
            match outcome {
                Some(super::service::TOO_LARGE) => {
                    let name = groups.first().and_then(|g| g.first()).map(|s| s.labels.to_string()).unwrap_or_default();
                    tracing::error!(exporter = %self.sender.exporter, "dropping {samples} samples: a single data point too large for the receiver: {name}");
                    Delivered::one(samples, Some("too_large"))
                }
                Some(crate::exporters::queue::SHUTDOWN) => {
                    let mut d = Delivered::one(samples, Some(crate::exporters::queue::SHUTDOWN));
                    d.held = groups.into_iter().flatten().collect();
                    d
                }
                outcome => Delivered::one(samples, outcome),
            }
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
                    samples: infertel_model::samples![infertel_model::Sample { timestamp_ms: now, value: 1.0 }],
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
    // Resolved once for the queue it serves (see RetryConfig::for_queue).
    let retry = cfg.retry_on_failure.clone().for_queue(cfg.sending_queue.storage.is_some());
    let state = EndpointState::new(&id, transport.endpoint(), cfg.startup_check, cfg.canary, retry.clone(), &telemetry);
    let sender = Sender::new(id.clone(), transport, retry, telemetry.clone(), state.clone());
    let deliver = OtlpDeliver::new(sender, cfg.trim_metric_suffixes, cfg.max_request_bytes.0 as usize);
    let q = SendingQueue::new(id, endpoint, cfg.sending_queue.clone(), deliver, telemetry);
    q.set_endpoint_state(state);
    Ok(q)
}
