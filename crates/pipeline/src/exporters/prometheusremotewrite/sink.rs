//! What drives the remote-write exporter: the shared sending queue
//! (`exporters/queue.rs`: sharding by series hash, consumers, a bounded
//! queue, self-metrics) with a [`Deliver`] that turns each consumer's batch
//! into size-bounded WriteRequests and sends them one at a time. Remote
//! write always keeps Prometheus names, so the naming mode is ignored.

use super::config::RemoteWriteConfig;
use super::request_builder::RequestBuilder;
use super::service::{Outcome, RemoteWriteService};
use crate::consumer::BoxFuture;
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
}

/// The remote-write exporter: the shared queue over [`RemoteWriteDeliver`].
pub type RemoteWriteExporter = SendingQueue<RemoteWriteDeliver>;

impl RemoteWriteDeliver {
    fn external(&self) -> Vec<Label> {
        self.cfg
            .external_labels
            .iter()
            .map(|(k, v)| Label::new(k.as_str(), v.as_str()))
            .collect()
    }
}

/// Configured headers as a map (Authorization marked sensitive).
pub fn header_map(
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<HeaderMap, String> {
    let mut out = HeaderMap::new();
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("headers: invalid name {k:?}"))?;
        let mut value =
            HeaderValue::from_str(v).map_err(|_| format!("headers: invalid value for {k:?}"))?;
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
    let client = crate::http::build_client(&cfg.tls.settings(), Some(cfg.timeout.get()))?;
    let headers = header_map(&cfg.headers)?;
    let service = RemoteWriteService::new(
        id.clone(),
        cfg.endpoint.clone(),
        client,
        headers,
        auth,
        cfg.retry_on_failure.clone(),
        telemetry.clone(),
    );
    let endpoint = cfg.endpoint.clone();
    let queue = cfg.sending_queue.clone();
    Ok(SendingQueue::new(
        id,
        endpoint,
        queue,
        RemoteWriteDeliver { cfg, service },
        telemetry,
    ))
}

impl Deliver for RemoteWriteDeliver {
    type State = RequestBuilder;

    fn new_state(&self) -> RequestBuilder {
        RequestBuilder::new(
            self.cfg.max_batch_size_bytes.0 as usize,
            self.cfg.send_metadata,
            self.external(),
        )
    }

    fn deliver<'a>(
        &'a self,
        builder: &'a mut RequestBuilder,
        batch: Batch,
        _naming: Naming,
    ) -> BoxFuture<'a, Delivered> {
        Box::pin(async move {
            let mut out = Vec::new();
            let requests = match builder.build(batch.series, &batch.metadata) {
                Ok(r) => r,
                Err((lost, e)) => {
                    tracing::error!(exporter = %self.service.exporter, "dropping {lost} samples: cannot encode the request: {e}");
                    return vec![(lost, Some("encode"))];
                }
            };
            for req in requests {
                match self.service.send(&req).await {
                    Outcome::Sent => out.push((req.samples, None)),
                    Outcome::Dropped(reason) => out.push((req.samples, Some(reason))),
                }
            }
            out
        })
    }
}
