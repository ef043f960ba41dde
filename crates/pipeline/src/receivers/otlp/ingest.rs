//! What both transports do with an `ExportMetricsServiceRequest`: refuse
//! it while a memory limiter refuses, translate it (see `translate.rs`),
//! hand the batch on and answer with the partial success: how many data
//! points were refused and why, as the OTLP specification asks.

use super::translate::Translator;
use crate::consumer::Consumer;
use crate::processors::memory_limiter::Backpressure;
use crate::telemetry::{Counter, Telemetry};
use infertel_otlp::opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Why a whole request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A memory limiter refuses: retryable (gRPC UNAVAILABLE, HTTP 503).
    Busy,
}

pub struct Ingest {
    pub id: String,
    translator: Mutex<Translator>,
    next: Arc<dyn Consumer>,
    backpressure: Backpressure,
    telemetry: Telemetry,
    accepted: BTreeMap<&'static str, Arc<Counter>>,
}

impl Ingest {
    pub fn new(
        id: String,
        translator: Translator,
        next: Arc<dyn Consumer>,
        backpressure: Backpressure,
        telemetry: Telemetry,
    ) -> Arc<Ingest> {
        let accepted = ["grpc", "http"]
            .into_iter()
            .map(|t| {
                let c = telemetry.counter(
                    "infertel_receiver_otlp_accepted_samples_total",
                    "Samples the otlp receiver made of the data points it accepted.",
                    &[("receiver", &id), ("transport", t)],
                );
                (t, c)
            })
            .collect();
        Arc::new(Ingest { id, translator: Mutex::new(translator), next, backpressure, telemetry, accepted })
    }

    /// Counts a request refused before translation (`reason`: busy,
    /// bad_request, too_large, unsupported_media_type, ...).
    pub fn refused(&self, transport: &str, reason: &str) {
        self.telemetry
            .counter(
                "infertel_receiver_otlp_refused_requests_total",
                "Requests the otlp receiver refused whole, by reason.",
                &[("receiver", &self.id), ("transport", transport), ("reason", reason)],
            )
            .add(1);
    }

    pub async fn export(
        &self,
        req: ExportMetricsServiceRequest,
        transport: &'static str,
    ) -> Result<ExportMetricsServiceResponse, Refusal> {
        if self.backpressure.refusing() {
            self.refused(transport, "memory_limit");
            return Err(Refusal::Busy);
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let t = self.translator.lock().unwrap_or_else(|p| p.into_inner()).translate(&req, now_ms);
        for (reason, n) in &t.rejected_by {
            self.telemetry
                .counter(
                    "infertel_receiver_otlp_rejected_points_total",
                    "Data points the otlp receiver refused in a partial success, by reason.",
                    &[("receiver", &self.id), ("reason", reason)],
                )
                .add(*n);
        }
        let samples = t.batch.sample_count() as u64;
        if !t.batch.is_empty() {
            self.next.consume(t.batch).await;
        }
        if let Some(c) = self.accepted.get(transport) {
            c.add(samples);
        }
        let partial_success = (t.rejected > 0).then(|| {
            tracing::warn!(receiver = %self.id, "{} data points refused: {}", t.rejected, t.message);
            ExportMetricsPartialSuccess { rejected_data_points: t.rejected as i64, error_message: t.message }
        });
        Ok(ExportMetricsServiceResponse { partial_success })
    }
}
