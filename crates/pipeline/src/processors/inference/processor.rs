//! Processor `inference`: passes every batch on unchanged and appends the
//! derived `infertel_*` series of the targets the batch came from, stamped
//! with the scrape time, at most once per `evaluation_interval`. Derived series whose inputs went away get a
//! staleness marker; values that cannot be computed are not emitted and the
//! reason is counted in `infertel_processor_inference_skipped_total`.

use super::config::InferenceConfig;
use crate::consumer::{BoxFuture, Consumer};
use crate::telemetry::{Counter, Telemetry};
use infertel_inference::{Engine, Evaluation, Skip, TargetKey, catalog};
use infertel_model::{Batch, Labels, Metadata, MetricType, Sample, Series, stale_nan};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

pub struct InferenceProcessor {
    id: String,
    engine: Mutex<Engine>,
    next: Arc<dyn Consumer>,
    telemetry: Telemetry,
    /// The processor's counters, found in the registry once rather than on
    /// every evaluation (a registry lookup builds its label key).
    derived_samples: Arc<Counter>,
    skipped: Mutex<FxHashMap<(&'static str, Skip), Arc<Counter>>>,
}

fn series(labels: &Labels, ts: i64, v: f64) -> Series {
    Series { labels: labels.clone(), samples: infertel_model::samples![Sample { timestamp_ms: ts, value: v }] }
}

impl InferenceProcessor {
    pub fn new(id: String, cfg: &InferenceConfig, next: Arc<dyn Consumer>, telemetry: Telemetry) -> Arc<Self> {
        let p = Arc::new(InferenceProcessor {
            id: id.clone(),
            engine: Mutex::new(Engine::new(cfg.settings())),
            next,
            derived_samples: telemetry.counter(
                "infertel_processor_inference_derived_samples_total",
                "Derived samples emitted (staleness markers included).",
                &[("processor", &id)],
            ),
            skipped: Mutex::default(),
            telemetry: telemetry.clone(),
        });
        telemetry.status().register_inference(&id, &p);
        p
    }

    /// What `infertel report` would print of this processor's data at
    /// `end_ms`, computed on a copy of its state so the processor's own
    /// evaluations (their cadence, their staleness markers) are untouched.
    pub fn report(&self, end_ms: i64) -> infertel_inference::report::Report {
        let mut copy = self.engine.lock().unwrap_or_else(|p| p.into_inner()).clone();
        infertel_inference::report::build(&mut copy, end_ms)
    }

    /// Keeps the derived values for the status page's charts.
    fn remember(&self, ev: &Evaluation) {
        let h = &self.telemetry.status().history;
        for d in &ev.derived {
            let get = |k: &str| d.labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).unwrap_or("");
            let others: Vec<String> = d
                .labels
                .iter()
                .filter(|(n, _)| n != "job" && n != "instance")
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            let key = crate::status::history::SeriesKey {
                processor: self.id.clone(),
                target: format!("{}/{}", get("job"), get("instance")),
                name: d.name.to_string(),
                labels: others.join(","),
            };
            h.push_derived(key, ev.at_ms, d.value);
        }
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
            for (derived, why) in s.schema.not_derived() {
                tracing::info!(processor = %self.id, job = %t.job, instance = %t.instance, "{derived} is not derived for this target: {why}");
            }
            for (family, derived) in &s.missing {
                tracing::warn!(processor = %self.id, job = %t.job, instance = %t.instance, "target does not expose {family}: a dashboard on {derived} will be empty");
            }
        }
        if !ev.skipped.is_empty() {
            let mut skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
            for &(name, reason) in &ev.skipped {
                skipped
                    .entry((name, reason))
                    .or_insert_with(|| {
                        self.telemetry.counter("infertel_processor_inference_skipped_total", "Derived values not emitted, by derived series and reason (missing_input, stale_input, first_window, zero_denominator).", &[("processor", &self.id), ("series", name), ("reason", reason.as_str())])
                    })
                    .inc();
            }
        }
        self.derived_samples.add((ev.derived.len() + ev.stale.len()) as u64);
    }

    /// The derived series for one batch (pure apart from logging and counters).
    pub fn derive(&self, batch: &Batch) -> Batch {
        let mut out = Batch::default();
        let evals: Vec<Evaluation> = {
            let mut e = self.engine.lock().unwrap_or_else(|p| p.into_inner());
            let touched = e.ingest(&batch.series);
            let every = e.settings.evaluation_interval_ms;
            let due: Vec<(&TargetKey, i64)> =
                touched.iter().filter(|(k, t)| *t != i64::MIN && e.due(k, *t, every)).map(|(k, t)| (k, *t)).collect();
            due.into_iter().map(|(k, t)| e.evaluate(k, t)).collect()
        };
        let mut families = BTreeSet::new();
        let remember = self.telemetry.status().enabled();
        for ev in &evals {
            self.account(ev);
            if remember {
                self.remember(ev);
            }
            for (d, labels) in ev.derived.iter().zip(&ev.series) {
                out.series.push(series(labels, ev.at_ms, d.value));
                families.insert(d.name);
            }
            for labels in &ev.stale_series {
                out.series.push(series(labels, ev.at_ms, stale_nan()));
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Sink;
    impl Consumer for Sink {
        fn consume(&self, _: Batch) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
    }

    /// One scrape of a V1 vLLM target at `t` (ms): a token counter and the
    /// KV-cache gauge.
    fn scrape(instance: &str, t: i64) -> Batch {
        let s = |name: &str, v: f64| Series {
            labels: Labels::from_pairs([
                ("__name__", name),
                ("engine", "0"),
                ("instance", instance),
                ("job", "vllm"),
                ("model_name", "m"),
            ]),
            samples: infertel_model::samples![Sample { timestamp_ms: t, value: v }],
        };
        Batch {
            series: vec![s("vllm:generation_tokens_total", t as f64 / 10.0), s("vllm:kv_cache_usage_perc", 0.5)],
            metadata: vec![],
        }
    }

    /// Times (s) at which `instance` got derived series, over 1 s scrapes.
    fn evaluations(yaml: &str, scrapes: i64) -> Vec<i64> {
        let cfg: InferenceConfig = serde_yaml::from_str(yaml).expect("config");
        cfg.validate().expect("valid");
        let p = InferenceProcessor::new("inference".into(), &cfg, Arc::new(Sink), Telemetry::new());
        let mut at = Vec::new();
        for i in 0..scrapes {
            let t = 1_000_000 + i * 1000;
            let out = p.derive(&scrape("a:8000", t));
            if out.series.iter().any(|s| s.labels.metric_name() == "infertel_target_schema_info") {
                at.push((t - 1_000_000) / 1000);
            }
        }
        at
    }

    #[test]
    fn evaluates_once_per_interval_on_its_grid() {
        // 1_000_000 ms is a multiple of 10 s: evaluations at 0, 10, 20 s.
        assert_eq!(evaluations("evaluation_interval: 10s", 25), vec![0, 10, 20]);
        // Default: a quarter of the window (40 s / 4).
        assert_eq!(evaluations("window: 40s", 25), vec![0, 10, 20]);
        assert_eq!(evaluations("evaluation_interval: 0s", 5), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn rates_are_right_when_evaluated_sparsely() {
        let cfg: InferenceConfig = serde_yaml::from_str("evaluation_interval: 5s").expect("config");
        let p = InferenceProcessor::new("inference".into(), &cfg, Arc::new(Sink), Telemetry::new());
        let mut last = None;
        for i in 0..12 {
            let out = p.derive(&scrape("a:8000", 1_000_000 + i * 1000));
            if let Some(s) =
                out.series.iter().find(|s| s.labels.metric_name() == "infertel_generation_tokens_per_second")
            {
                last = Some(s.samples[0].value);
            }
        }
        // The counter grows by 100 per 1 s scrape.
        assert_eq!(last, Some(100.0));
    }

    #[test]
    fn evaluation_interval_longer_than_window_is_refused() {
        let cfg: InferenceConfig = serde_yaml::from_str("{window: 10s, evaluation_interval: 20s}").expect("parses");
        assert!(cfg.validate().unwrap_err().contains("evaluation_interval"));
    }
}
