//! How batches become `ExportMetricsServiceRequest`s, for both OTLP
//! exporters: the pure mapping lives in the `infertel-otlp` crate; this keeps
//! what must outlive one batch. Family metadata and `target_info` resource
//! attributes are shared by all consumers (the receiver sends metadata about
//! once a minute and only with one shard's part of a batch); start-time
//! tracking is per consumer, which is sound because the queue shards by
//! data point ([`infertel_otlp::Converter::shard_key`]).

use infertel_model::Batch;
use infertel_otlp::opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use infertel_otlp::{Converter, MetadataStore, Naming, TargetInfo};
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct Shared {
    pub metadata: Mutex<MetadataStore>,
    pub targets: Mutex<TargetInfo>,
}

impl Shared {
    pub fn observe(&self, batch: &Batch) {
        if !batch.metadata.is_empty() {
            self.metadata.lock().unwrap_or_else(|p| p.into_inner()).update(&batch.metadata);
        }
        if batch.series.iter().any(|s| s.labels.metric_name() == "target_info") {
            self.targets.lock().unwrap_or_else(|p| p.into_inner()).update(&batch.series);
        }
    }
}

/// One encoded-to-be request and what it carries, for accounting.
pub struct Request {
    pub body: ExportMetricsServiceRequest,
    /// Scraped samples it was built from.
    pub samples: usize,
    pub points: usize,
}

/// Per-consumer converters, one per naming mode in use.
pub struct RequestBuilder {
    trim: bool,
    converters: HashMap<Naming, Converter>,
}

impl RequestBuilder {
    pub fn new(trim: bool) -> Self {
        RequestBuilder { trim, converters: HashMap::new() }
    }

    pub fn build(&mut self, shared: &Shared, batch: &Batch, naming: Naming) -> Option<Request> {
        let trim = self.trim;
        let conv = self.converters.entry(naming).or_insert_with(|| Converter::new(naming, trim));
        let store = shared.metadata.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let targets = shared.targets.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let body = conv.convert(&batch.series, &store, &targets)?;
        let points = infertel_otlp::data_points(&body);
        Some(Request { body, samples: batch.sample_count(), points })
    }
}
