//! The `otlphttp` exporter: the OTLP sending queue and conversion of
//! `exporters/otlp/sink.rs` over an HTTP transport.

use super::config::OtlpHttpConfig;
use super::service::HttpTransport;
use crate::exporters::otlp::service::Sender;
use crate::exporters::otlp::sink::OtlpDeliver;
use crate::exporters::prometheusremotewrite::sink::header_map;
use crate::exporters::queue::SendingQueue;
use crate::extensions::ExtensionConfig;
use crate::telemetry::Telemetry;
use std::sync::Arc;

pub type OtlpHttpExporter = SendingQueue<OtlpDeliver<HttpTransport>>;

pub fn new_exporter(
    id: String,
    cfg: OtlpHttpConfig,
    auth: Option<ExtensionConfig>,
    telemetry: Telemetry,
) -> Result<Arc<OtlpHttpExporter>, String> {
    cfg.validate()?;
    let url = cfg.url()?;
    let client = crate::http::build_client(&cfg.tls.settings(), Some(cfg.timeout.get()))?;
    let transport = HttpTransport {
        url: url.clone(),
        client,
        headers: header_map(&cfg.headers)?,
        auth,
        compression: cfg.compression,
    };
    // Resolved once for the queue it serves (see RetryConfig::for_queue).
    let retry = cfg.retry_on_failure.clone().for_queue(cfg.sending_queue.storage.is_some());
    let state = crate::exporters::probe::EndpointState::new(
        &id,
        &url,
        cfg.startup_check,
        cfg.canary,
        retry.clone(),
        &telemetry,
    );
    let sender = Sender::new(id.clone(), transport, retry, telemetry.clone(), state.clone());
    let deliver = OtlpDeliver::new(sender, cfg.trim_metric_suffixes, cfg.max_request_bytes.0 as usize);
    let q =
        SendingQueue::new(id, crate::exporters::probe::redact_url(&url), cfg.sending_queue.clone(), deliver, telemetry);
    q.set_endpoint_state(state);
    Ok(q)
}
