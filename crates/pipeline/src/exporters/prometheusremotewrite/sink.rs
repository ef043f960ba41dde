//! What drives the remote-write exporter: the shared sending queue
//! (`exporters/exporterhelper/queue.rs`: sharding by series hash, consumers, a bounded
//! queue, self-metrics) with a [`Deliver`] that turns each consumer's batch
//! into size-bounded WriteRequests and sends them one at a time. Remote
//! write always keeps Prometheus names, so the naming mode is ignored.

use super::config::RemoteWriteConfig;
use super::request_builder::Request;
use super::request_builder::RequestBuilder;
use super::service::{Outcome, RemoteWriteService};
use crate::consumer::BoxFuture;
use crate::exporters::probe::{EndpointState, ProbeResult};
use crate::exporters::queue::{Deliver, Delivered, SendingQueue};
use crate::extensions::ExtensionConfig;
use crate::telemetry::Telemetry;
use infertel_model::{Batch, Label};
use infertel_otlp::Naming;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::sync::Arc;

pub struct RemoteWriteDeliver {
    cfg: RemoteWriteConfig,
    service: RemoteWriteService,
    /// `write_relabel_configs`, and what they dropped.
    write_relabel: infertel_relabel::Relabeler,
    relabel_dropped: Arc<crate::telemetry::Counter>,
}

/// The remote-write exporter: the shared queue over [`RemoteWriteDeliver`].
pub type RemoteWriteExporter = SendingQueue<RemoteWriteDeliver>;

impl RemoteWriteDeliver {
    fn external(&self) -> Vec<Label> {
        self.cfg.external_labels.iter().map(|(k, v)| Label::new(k.as_str(), v.as_str())).collect()
    }
}

/// Configured headers as a map (Authorization marked sensitive).
pub fn header_map(headers: &std::collections::BTreeMap<String, String>) -> Result<HeaderMap, String> {
    let mut out = HeaderMap::new();
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| format!("headers: invalid name {k:?}"))?;
        let mut value = HeaderValue::from_str(v).map_err(|_| format!("headers: invalid value for {k:?}"))?;
        if name == reqwest::header::AUTHORIZATION {
            value.set_sensitive(true);
        }
        out.insert(name, value);
    }
    Ok(out)
}

/// Builds the exporter (not yet running).
pub fn new_exporter(
    id: String,
    cfg: RemoteWriteConfig,
    auth: Option<ExtensionConfig>,
    telemetry: Telemetry,
) -> Result<Arc<RemoteWriteExporter>, String> {
    cfg.validate()?;
    let (tls, timeout, options) = (cfg.tls.settings(), cfg.timeout.get(), cfg.client_options());
    let client = Arc::new(crate::http::LazyClient::new(format!("exporter {id}"), move || {
        crate::http::build_client_with(&tls, Some(timeout), &options).map_err(|e| format!("tls: {e}"))
    }));
    if let Some(e) = client.error() {
        tracing::error!(exporter = %id, "{e}: each send fails (and is retried) until it can be read");
    }
    let write_relabel = infertel_relabel::Relabeler::new(&cfg.write_relabel_configs)
        .map_err(|e| format!("write_relabel_configs: {e}"))?;
    let relabel_dropped = telemetry.counter(
        "infertel_exporter_relabel_dropped_samples_total",
        "Samples write_relabel_configs dropped before queueing (by configuration, not a delivery failure).",
        &[("exporter", id.as_str())],
    );
    let headers = header_map(&cfg.headers)?;
    // Resolved once for the queue it serves (see RetryConfig::for_queue).
    let retry = cfg.retry_on_failure.clone().for_queue(cfg.sending_queue.storage.is_some());
    let state = EndpointState::new(&id, &cfg.endpoint, cfg.startup_check, cfg.canary(), retry.clone(), &telemetry);
    let service = RemoteWriteService::new(
        id.clone(),
        cfg.endpoint.clone(),
        client,
        headers,
        auth,
        retry,
        telemetry.clone(),
        state.clone(),
    );
    let endpoint = crate::exporters::probe::redact_url(&cfg.endpoint);
    let queue = cfg.sending_queue.clone();
    let deliver = RemoteWriteDeliver { cfg, service, write_relabel, relabel_dropped };
    let q = SendingQueue::new(id, endpoint, queue, deliver, telemetry);
    q.set_endpoint_state(state);
    Ok(q)
}

impl Deliver for RemoteWriteDeliver {
    type State = RequestBuilder;

    /// `write_relabel_configs`, as Prometheus applies them when a sample is
    /// enqueued (after external labels, which the receiver attached):
    /// rewritten labels, dropped series left out and counted; a series
    /// whose labels the rules emptied is dropped too.
    fn admit(&self, mut batch: Batch, _naming: Naming) -> Batch {
        if !self.cfg.namespace.is_empty() {
            batch = namespaced(batch, &self.cfg.namespace);
        }
        if self.write_relabel.is_empty() {
            return batch;
        }
        let mut dropped = 0u64;
        batch.series.retain_mut(|s| match self.write_relabel.process(&s.labels) {
            Some(l) if !l.is_empty() => {
                s.labels = l;
                true
            }
            _ => {
                dropped += s.samples.len() as u64;
                false
            }
        });
        if dropped > 0 {
            self.relabel_dropped.add(dropped);
        }
        batch
    }

    fn new_state(&self) -> RequestBuilder {
        RequestBuilder::new(self.cfg.max_batch_size_bytes.0 as usize, self.cfg.send_metadata, self.external())
    }

    fn deliver<'a>(
        &'a self,
        builder: &'a mut RequestBuilder,
        batch: Batch,
        _naming: Naming,
    ) -> BoxFuture<'a, Delivered> {
        Box::pin(async move {
            let mut out = Delivered::default();
            let built = match builder.build(batch.series, &batch.metadata) {
                Ok(r) => r,
                Err((lost, e)) => {
                    tracing::error!(exporter = %self.service.exporter, "dropping {lost} samples: cannot encode the request: {e}");
                    return Delivered::one(lost, Some("encode"));
                }
            };
            // Requests refused as too large (413) are split in halves and
            // re-sent, down to one series; a single series still too large
            // is dropped, counted, and named.
            let mut pending: Vec<Request> = built.requests.into_iter().rev().collect();
            while let Some(req) = pending.pop() {
                match self.service.send(&req).await {
                    Outcome::Sent => out.push(req.samples, None),
                    Outcome::Dropped(reason) => {
                        if reason == crate::exporters::queue::SHUTDOWN
                            && let Some(s) = built.series.get(req.range.clone())
                        {
                            out.held.extend_from_slice(s);
                        }
                        out.push(req.samples, Some(reason))
                    }
                    Outcome::Partial { delivered, rejected } => {
                        out.push(delivered, None);
                        if rejected > 0 {
                            out.push(rejected, Some("rejected"));
                        }
                    }
                    Outcome::TooLarge if req.range.len() > 1 => {
                        let mid = req.range.start + req.range.len() / 2;
                        tracing::warn!(exporter = %self.service.exporter, "HTTP 413 for a request of {} series ({} bytes): splitting it in halves", req.range.len(), req.body.len());
                        pending.push(builder.encode_range(&built.series, mid..req.range.end));
                        pending.push(builder.encode_range(&built.series, req.range.start..mid));
                    }
                    Outcome::TooLarge => {
                        let name = built.series.get(req.range.start).map(|s| s.labels.to_string()).unwrap_or_default();
                        tracing::error!(exporter = %self.service.exporter, "dropping {} samples: HTTP 413 for a single series ({} bytes): {name}", req.samples, req.body.len());
                        out.push(req.samples, Some("too_large"));
                    }
                }
            }
            out
        })
    }

    /// POSTs an empty WriteRequest (snappy, real headers and auth); with
    /// `canary`, then one `infertel_canary` sample, which catches a key
    /// that authenticates but may not write (an empty request cannot).
    fn probe(&self, canary: bool) -> BoxFuture<'_, ProbeResult> {
        Box::pin(async move {
            let mut enc = infertel_remote_write::Encoder::new();
            let empty = Request { body: bytes::Bytes::copy_from_slice(enc.encode(&[], &[])), samples: 0, range: 0..0 };
            let r = self.service.probe_once(&empty).await;
            if !canary || !r.is_ok() {
                return r;
            }
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis()
                as i64;
            let series = infertel_model::Series {
                labels: infertel_model::Labels::from_pairs([
                    ("__name__", "infertel_canary"),
                    ("exporter", self.service.exporter.as_str()),
                ]),
                samples: infertel_model::samples![infertel_model::Sample { timestamp_ms: now, value: 1.0 }],
            };
            let mut b = self.new_state();
            let Ok(built) = b.build(vec![series], &[]) else { return r };
            let mut last = r;
            for req in built.requests {
                let c = self.service.probe_once(&req).await;
                let mut c = c;
                if c.is_ok() {
                    c.message = format!("{} (canary sample infertel_canary written)", c.message);
                } else {
                    c.message = format!(
                        "the empty request passed but the canary sample infertel_canary did not: {}",
                        c.message
                    );
                }
                last = c;
            }
            last
        })
    }
}

/// The Collector's `namespace`: `NS_name` for every series and its metadata.
fn namespaced(mut batch: Batch, ns: &str) -> Batch {
    for s in &mut batch.series {
        let name = format!("{ns}_{}", s.labels.metric_name());
        s.labels = s.labels.with(infertel_model::METRIC_NAME, &name);
    }
    for m in &mut batch.metadata {
        m.family = format!("{ns}_{}", m.family).into();
    }
    batch
}

#[cfg(test)]
mod namespace_tests {
    use super::*;
    use infertel_model::{Labels, Metadata, MetricType, Sample, Series};

    #[test]
    fn namespace_prefixes_names_and_metadata_only() {
        let b = Batch {
            series: vec![Series {
                labels: Labels::from_pairs([("__name__", "vllm:num_requests_running"), ("job", "vllm")]),
                samples: infertel_model::samples![Sample { timestamp_ms: 1, value: 2.0 }],
            }],
            metadata: vec![Metadata {
                family: "vllm:num_requests_running".into(),
                kind: MetricType::Gauge,
                help: "h".into(),
                unit: "".into(),
            }],
        };
        let out = namespaced(b, "gpu");
        assert_eq!(out.series[0].labels.to_string(), "gpu_vllm:num_requests_running{job=\"vllm\"}");
        assert_eq!(&*out.metadata[0].family, "gpu_vllm:num_requests_running");
        assert_eq!(out.series[0].samples[0].value, 2.0);
    }
}
