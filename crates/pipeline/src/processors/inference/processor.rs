//! Processor `inference`: passes every batch on unchanged and appends the
//! derived `infertel_*` series of the targets the batch came from, stamped
//! with the scrape time. Derived series whose inputs went away get a
//! staleness marker; values that cannot be computed are not emitted and the
//! reason is counted in `infertel_processor_inference_skipped_total`.

use super::config::InferenceConfig;
use crate::consumer::{BoxFuture, Consumer};
use crate::telemetry::Telemetry;
use infertel_inference::{Engine, Evaluation, catalog};
use infertel_model::{Batch, Label, Labels, METRIC_NAME, Metadata, MetricType, Sample, Series, stale_nan};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

pub struct InferenceProcessor {
    id: String,
    engine: Mutex<Engine>,
    next: Arc<dyn Consumer>,
    telemetry: Telemetry,
}

fn series(name: &str, labels: &[(String, String)], ts: i64, v: f64) -> Series {
    let mut l: Vec<Label> = labels.iter().map(|(k, x)| Label::new(k.as_str(), x.as_str())).collect();
    l.push(Label::new(METRIC_NAME, name));
    Series { labels: Labels::from_vec(l), samples: vec![Sample { timestamp_ms: ts, value: v }] }
}

impl InferenceProcessor {
    pub fn new(id: String, cfg: &InferenceConfig, next: Arc<dyn Consumer>, telemetry: Telemetry) -> Arc<Self> {
        Arc::new(InferenceProcessor { id, engine: Mutex::new(Engine::new(cfg.settings())), next, telemetry })
    }

    fn account(&self, ev: &Evaluation) {
        if let Some(s) = &ev.schema_event {
            let t = &s.target;
            match s.previous {
                None => {
                    tracing::info!(processor = %self.id, job = %t.job, instance = %t.instance, schema = s.schema.as_str(), "target speaks {}", s.schema.as_str())
                }
                Some(p) => {
                    tracing::warn!(processor = %self.id, job = %t.job, instance = %t.instance, schema = s.schema.as_str(), previous = p.as_str(), "target changed metric schema from {} to {}", p.as_str(), s.schema.as_str())
                }
            }
            for (family, derived) in &s.missing {
                tracing::warn!(processor = %self.id, job = %t.job, instance = %t.instance, "target does not expose {family}: a dashboard on {derived} will be empty");
            }
        }
        for (name, reason) in &ev.skipped {
            self.telemetry
                .counter("infertel_processor_inference_skipped_total", "Derived values not emitted, by derived series and reason (missing_input, stale_input, first_window, zero_denominator).", &[("processor", &self.id), ("series", name), ("reason", reason.as_str())])
                .inc();
        }
        self.telemetry
            .counter(
                "infertel_processor_inference_derived_samples_total",
                "Derived samples emitted (staleness markers included).",
                &[("processor", &self.id)],
            )
            .add((ev.derived.len() + ev.stale.len()) as u64);
    }

    /// The derived series for one batch (pure apart from logging and counters).
    pub fn derive(&self, batch: &Batch) -> Batch {
        let mut out = Batch::default();
        let evals: Vec<Evaluation> = {
            let mut e = self.engine.lock().unwrap_or_else(|p| p.into_inner());
            let touched = e.ingest(&batch.series);
            touched.iter().filter(|(_, t)| **t != i64::MIN).map(|(k, t)| e.evaluate(k, *t)).collect()
        };
        let mut families = BTreeSet::new();
        for ev in &evals {
            self.account(ev);
            for d in &ev.derived {
                out.series.push(series(d.name, &d.labels, ev.at_ms, d.value));
                families.insert(d.name);
            }
            for (name, labels) in &ev.stale {
                out.series.push(series(name, labels, ev.at_ms, stale_nan()));
            }
        }
        for f in families {
            if let Some(d) = catalog::def(f) {
                out.metadata.push(Metadata {
                    family: f.into(),
                    kind: MetricType::Gauge,
                    help: d.help.into(),
                    unit: "".into(),
                });
            }
        }
        out
    }
}

impl Consumer for InferenceProcessor {
    fn consume(&self, mut batch: Batch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let derived = self.derive(&batch);
            batch.series.extend(derived.series);
            batch.metadata.extend(derived.metadata);
            self.next.consume(batch).await;
        })
    }
}
