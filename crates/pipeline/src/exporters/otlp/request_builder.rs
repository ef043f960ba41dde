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

/// The timestamp of a `target_info` added for the disk (no scrape makes
/// it): only its labels are read (resource attributes), and it is not
/// counted as a delivered sample.
const SYNTHETIC_TS: i64 = i64::MIN;

/// A `target_info` added by [`Shared::self_describing`].
pub fn is_synthetic_target_info(s: &infertel_model::Series) -> bool {
    s.labels.metric_name() == "target_info" && s.samples.len() == 1 && s.samples[0].timestamp_ms == SYNTHETIC_TS
}

/// The scraped samples of a batch: without the `target_info` added for the
/// disk, which no scrape produced.
pub fn scraped_samples(batch: &Batch) -> usize {
    batch.sample_count() - batch.series.iter().filter(|s| is_synthetic_target_info(s)).count()
}

#[derive(Default)]
pub struct Shared {
    pub metadata: Mutex<MetadataStore>,
    pub targets: Mutex<TargetInfo>,
}

impl Shared {
    /// `batch` made self-describing for the disk queue: the metadata of the
    /// families it holds and the `target_info` of the targets it holds, as
    /// known now. A record replayed after a restart then converts as it
    /// would have live (counters stay sums, histograms histograms, the
    /// resource keeps its attributes), although metadata and `target_info`
    /// arrive only about once a minute and with one shard's part.
    pub fn self_describing(&self, batch: &Batch) -> Batch {
        let store = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        let targets = self.targets.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = batch.clone();
        let mut families: Vec<String> = Vec::new();
        let mut resources: Vec<(String, String)> = Vec::new();
        for s in &batch.series {
            let family = store.classify(s.labels.metric_name()).family;
            if !families.contains(&family) {
                families.push(family);
            }
            let r = (s.labels.get("job").unwrap_or("").to_string(), s.labels.get("instance").unwrap_or("").to_string());
            if !resources.contains(&r) {
                resources.push(r);
            }
        }
        for f in &families {
            if let Some(m) = store.get(f)
                && !out.metadata.iter().any(|x| x.family == m.family)
            {
                out.metadata.push(m.clone());
            }
        }
        let has_info = |r: &(String, String)| {
            batch.series.iter().any(|s| {
                s.labels.metric_name() == "target_info"
                    && s.labels.get("job").unwrap_or("") == r.0
                    && s.labels.get("instance").unwrap_or("") == r.1
            })
        };
        for r in resources.iter().filter(|r| !has_info(r)) {
            if let Some(attrs) = targets.0.get(r) {
                let mut l: Vec<(&str, &str)> = vec![("__name__", "target_info"), ("job", &r.0), ("instance", &r.1)];
                l.extend(attrs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                out.series.push(infertel_model::Series {
                    labels: infertel_model::Labels::from_pairs(l),
                    samples: infertel_model::samples![infertel_model::Sample {
                        timestamp_ms: SYNTHETIC_TS,
                        value: 1.0
                    }],
                });
            }
        }
        out
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporters::persistent;
    use infertel_model::{Labels, Metadata, MetricType, Sample, Series};
    use prost::Message;

    fn s(labels: &[(&str, &str)], t: i64, v: f64) -> Series {
        Series {
            labels: Labels::from_pairs(labels.iter().copied()),
            samples: infertel_model::samples![Sample { timestamp_ms: t, value: v }],
        }
    }

    fn md(family: &str, kind: MetricType) -> Metadata {
        Metadata { family: family.into(), kind, help: format!("{family} help").into(), unit: "".into() }
    }

    /// Sorted so that two requests with the same content compare equal
    /// whatever the order of resources, metrics and attributes.
    fn normalized(mut r: ExportMetricsServiceRequest) -> Vec<u8> {
        for rm in &mut r.resource_metrics {
            if let Some(res) = &mut rm.resource {
                res.attributes.sort_by(|a, b| a.key.cmp(&b.key));
            }
            for sm in &mut rm.scope_metrics {
                sm.metrics.sort_by(|a, b| a.name.cmp(&b.name));
            }
        }
        r.resource_metrics.sort_by_key(|rm| format!("{:?}", rm.resource));
        r.encode_to_vec()
    }

    /// Issue 12 §8: a batch replayed from the disk queue after a restart
    /// produces the same OTLP as it did live: counters stay sums,
    /// histograms histograms, the resource keeps its target_info attributes,
    /// although the batch itself carries neither metadata nor target_info.
    #[test]
    fn a_replayed_batch_converts_as_it_did_live() {
        let t = [("instance", "10.0.1.23:8000"), ("job", "vllm")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v: Vec<(&str, &str)> = t.to_vec();
            v.extend_from_slice(extra);
            v
        };
        let live = Shared::default();
        // Earlier scrapes brought the metadata and target_info.
        live.observe(&Batch {
            series: vec![s(&with(&[("__name__", "target_info"), ("k8s.pod.name", "vllm-0")]), 1, 1.0)],
            metadata: vec![
                md("vllm:generation_tokens", MetricType::Counter),
                md("vllm:ttft_seconds", MetricType::Histogram),
            ],
        });
        let batch = Batch {
            series: vec![
                s(&with(&[("__name__", "vllm:generation_tokens_total")]), 60_000, 500.0),
                s(&with(&[("__name__", "vllm:ttft_seconds_bucket"), ("le", "0.1")]), 60_000, 3.0),
                s(&with(&[("__name__", "vllm:ttft_seconds_bucket"), ("le", "+Inf")]), 60_000, 4.0),
                s(&with(&[("__name__", "vllm:ttft_seconds_sum")]), 60_000, 0.5),
                s(&with(&[("__name__", "vllm:ttft_seconds_count")]), 60_000, 4.0),
            ],
            metadata: vec![],
        };
        let live_req = RequestBuilder::new(false).build(&live, &batch, Naming::Otel).unwrap();
        // Written to disk, read back by a new process (nothing remembered).
        let payload = persistent::encode(&live.self_describing(&batch), Naming::Otel, 0);
        let (back, naming) = persistent::decode(&payload).unwrap();
        let fresh = Shared::default();
        fresh.observe(&back);
        let replayed = RequestBuilder::new(false).build(&fresh, &back, naming).unwrap();
        assert_eq!(
            replayed.samples - back.series.iter().filter(|s| is_synthetic_target_info(s)).count(),
            batch.sample_count()
        );
        assert_eq!(
            normalized(replayed.body.clone()),
            normalized(live_req.body.clone()),
            "{:#?}\nvs\n{:#?}",
            replayed.body,
            live_req.body
        );
        // Without the metadata (as before), the counter would be a gauge.
        let bare = Shared::default();
        let wrong = RequestBuilder::new(false).build(&bare, &batch, Naming::Otel).unwrap();
        assert_ne!(normalized(wrong.body), normalized(live_req.body));
    }
}
