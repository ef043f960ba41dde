//! Processor `filter`, as contrib's `filterprocessor` for metrics.
//!
//! - `metrics.include` / `metrics.exclude` (the legacy match properties,
//!   `matching.rs`): only the series of a metric `include` matches are
//!   kept, then those `exclude` matches are dropped.
//! - `metrics.resource` / `metrics.metric` / `metrics.datapoint` (OTTL
//!   conditions, `ottl.rs`): a target for which any `resource` condition is
//!   true loses every series; a metric for which any `metric` condition is
//!   true is dropped whole (every series of its family from that target); a
//!   series (data point) for which any `datapoint` condition is true is
//!   dropped.
//! - `metric_conditions`, contrib's newer form: a list of condition strings
//!   whose context is inferred from their paths' prefixes, or of groups
//!   `{context, conditions, error_mode}`; the same verdicts.
//! - `error_mode` (`propagate`, `ignore`, `silent`) is accepted as in contrib;
//!   the conditions this build evaluates cannot fail at run time (a type
//!   mismatch is `false`, as in OTTL), so it changes nothing.
//!
//! Conditions are evaluated per series; a scraped series carries one
//! sample, and a condition on `value_double` reads its latest.
//!
//! What it drops is counted in
//! `infertel_processor_filter_dropped_samples_total{processor}` and logged
//! once per metric name (at most 1000 names).

pub mod ottl;

use crate::consumer::{BoxFuture, Consumer};
use crate::processors::matching::{MatchConfig, Matcher};
use crate::processors::pdata::{self, MetricView};
use crate::processors::series_cache::SeriesCache;
use crate::telemetry::{Counter, Telemetry};
use infertel_model::{Batch, Labels, Metadata, MetricType, Series, is_stale_nan};
use infertel_otlp::MetadataStore;
use ottl::{Condition, Context, Path, Subject, Value};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    #[serde(default)]
    pub error_mode: Option<String>,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub metric_conditions: Vec<ConditionGroup>,
}

/// contrib's keys for the other signals.
const OTHER_SIGNALS: &[&str] = &[
    "logs",
    "traces",
    "spans",
    "profiles",
    "log_conditions",
    "trace_conditions",
    "span_conditions",
    "profile_conditions",
];

impl FilterConfig {
    /// Reads the config, refusing the other signals' keys by name.
    pub fn from_value(v: serde_yaml::Value) -> Result<FilterConfig, String> {
        let why = "infertel carries metrics: filter the other signals in a Collector running beside it";
        let refused: Vec<(&str, &str)> = OTHER_SIGNALS.iter().map(|k| (*k, why)).collect();
        crate::processors::refusing(v, &refused)
    }
}

#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    #[serde(default, deserialize_with = "crate::processors::matching::deserialize_metric_match")]
    pub include: Option<MatchConfig>,
    #[serde(default, deserialize_with = "crate::processors::matching::deserialize_metric_match")]
    pub exclude: Option<MatchConfig>,
    #[serde(default)]
    pub resource: Vec<String>,
    #[serde(default)]
    pub metric: Vec<String>,
    #[serde(default)]
    pub datapoint: Vec<String>,
}

/// One entry of `metric_conditions`.
#[derive(Debug, Clone, PartialEq)]
pub enum ConditionGroup {
    /// A condition whose paths name their context.
    Inferred(String),
    Group(GroupConfig),
}

impl<'de> Deserialize<'de> for ConditionGroup {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_yaml::Value::deserialize(d)? {
            serde_yaml::Value::String(s) => Ok(ConditionGroup::Inferred(s)),
            v => serde_yaml::from_value(v).map(ConditionGroup::Group).map_err(serde::de::Error::custom),
        }
    }
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    #[serde(default)]
    pub context: Option<String>,
    pub conditions: Vec<String>,
    #[serde(default)]
    pub error_mode: Option<String>,
}

/// A checked filter: any condition that holds drops the series.
pub struct Rules {
    include: Option<Matcher>,
    exclude: Option<Matcher>,
    conditions: Vec<Condition>,
}

fn error_mode(m: &Option<String>, key: &str) -> Result<(), (String, String)> {
    match m.as_deref() {
        None | Some("propagate" | "ignore" | "silent") => Ok(()),
        Some(other) => Err((key.into(), format!("{other:?} is not propagate, ignore or silent"))),
    }
}

impl FilterConfig {
    /// Errors as `(key relative to the processor, message)`.
    pub fn check(&self) -> Result<Rules, (String, String)> {
        error_mode(&self.error_mode, "error_mode")?;
        let m = &self.metrics;
        let matcher = |c: &Option<MatchConfig>, k: &str| -> Result<Option<Matcher>, (String, String)> {
            c.as_ref()
                .map(|c| {
                    Matcher::compile(c, false).map_err(|(p, e)| {
                        (if p.is_empty() { format!("metrics.{k}") } else { format!("metrics.{k}.{p}") }, e)
                    })
                })
                .transpose()
        };
        let include = matcher(&m.include, "include")?;
        let exclude = matcher(&m.exclude, "exclude")?;
        let parse = |c: &str, at: String, ctx| ottl::parse(c, ctx).map_err(|e| (at, format!("{c:?}: {e}")));
        let mut conditions = Vec::new();
        for (k, list, ctx) in [
            ("resource", &m.resource, Context::Resource),
            ("metric", &m.metric, Context::Metric),
            ("datapoint", &m.datapoint, Context::Datapoint),
        ] {
            for (i, c) in list.iter().enumerate() {
                conditions.push(parse(c, format!("metrics.{k}[{i}]"), ctx)?);
            }
        }
        let legacy_ottl = !conditions.is_empty();
        let legacy_match = include.is_some() || exclude.is_some();
        if legacy_match && legacy_ottl {
            return Err((
                "metrics".into(),
                "cannot use \"metrics.resource\", \"metrics.metric\", \"metrics.datapoint\" and the settings \"metrics.include\", \"metrics.exclude\" at the same time".into(),
            ));
        }
        if !self.metric_conditions.is_empty() && (legacy_match || legacy_ottl) {
            return Err((
                "metric_conditions".into(),
                "cannot use context inferred metric conditions \"metric_conditions\" and the settings \"metrics.resource\", \"metrics.metric\", \"metrics.datapoint\", \"metrics.include\", \"metrics.exclude\" at the same time".into(),
            ));
        }
        let flat = self.metric_conditions.iter().any(|g| matches!(g, ConditionGroup::Inferred(_)));
        let grouped = self.metric_conditions.iter().any(|g| matches!(g, ConditionGroup::Group(_)));
        if flat && grouped {
            return Err((
                "metric_conditions".into(),
                "configuring multiple configuration styles is not supported, please use only Basic configuration or only Advanced configuration".into(),
            ));
        }
        for (i, g) in self.metric_conditions.iter().enumerate() {
            match g {
                ConditionGroup::Inferred(c) => {
                    let at = format!("metric_conditions[{i}]");
                    let ctx = ottl::infer_context(c).map_err(|e| (at.clone(), format!("{c:?}: {e}")))?;
                    conditions.push(parse(c, at, ctx)?);
                }
                ConditionGroup::Group(g) => {
                    error_mode(&g.error_mode, &format!("metric_conditions[{i}].error_mode"))?;
                    let given = match g.context.as_deref() {
                        None => None,
                        Some(c) => Some(Context::parse(c).ok_or_else(|| {
                            (
                                format!("metric_conditions[{i}].context"),
                                format!("{c:?} is not resource, metric or datapoint"),
                            )
                        })?),
                    };
                    for (j, c) in g.conditions.iter().enumerate() {
                        let at = format!("metric_conditions[{i}].conditions[{j}]");
                        let ctx = match given {
                            Some(ctx) => ctx,
                            None => ottl::infer_context(c).map_err(|e| (at.clone(), format!("{c:?}: {e}")))?,
                        };
                        conditions.push(parse(c, at, ctx)?);
                    }
                }
            }
        }
        if include.is_none() && exclude.is_none() && conditions.is_empty() {
            return Err(("metrics".into(), "filters nothing: give include, exclude, or conditions (metrics.metric, metrics.datapoint, metric_conditions)".into()));
        }
        Ok(Rules { include, exclude, conditions })
    }
}

/// A series as OTTL sees it, with its metric (and, for the metric-context
/// functions, the other series of that metric in the batch).
struct Point<'a> {
    labels: &'a Labels,
    metric: &'a MetricView,
    value: Option<f64>,
    siblings: &'a [&'a Labels],
}

impl Subject for Point<'_> {
    fn path(&self, p: &Path) -> Value<'_> {
        fn s(v: Option<&str>) -> Value<'_> {
            v.map_or(Value::Nil, |v| Value::Str(Cow::Borrowed(v)))
        }
        match p {
            Path::Name => Value::Str(Cow::Borrowed(&self.metric.name)),
            Path::Type => Value::Int(self.metric.data_type.code()),
            // Scraped sums and histograms are cumulative; a counter is
            // monotonic, an info or stateset sum is not.
            Path::AggregationTemporality => match self.metric.data_type {
                pdata::DataType::Sum | pdata::DataType::Histogram => Value::Int(2),
                _ => Value::Nil,
            },
            Path::IsMonotonic => match self.metric.data_type {
                pdata::DataType::Sum => Value::Bool(self.metric.kind == MetricType::Counter),
                _ => Value::Nil,
            },
            Path::Unit => Value::Str(Cow::Borrowed(&self.metric.unit)),
            Path::Description => Value::Str(Cow::Borrowed(&self.metric.description)),
            Path::Attribute(k) => s(pdata::attribute(self.labels, k, self.metric.point_label)),
            Path::ResourceAttribute(k) => s(pdata::resource_attribute(self.labels, k)),
            // Scraped points are doubles; a histogram or summary point has
            // neither (OTTL gives nil there).
            Path::ValueDouble => match (self.metric.data_type, self.value) {
                (pdata::DataType::Gauge | pdata::DataType::Sum, Some(v)) => Value::Float(v),
                _ => Value::Nil,
            },
            Path::ValueInt => match self.metric.data_type {
                pdata::DataType::Gauge | pdata::DataType::Sum => Value::Int(0),
                _ => Value::Nil,
            },
        }
    }

    fn has_attr_key(&self, key: &str) -> bool {
        self.siblings.iter().any(|l| pdata::attribute(l, key, self.metric.point_label).is_some())
    }

    /// As contrib: the first point that has the key decides.
    fn has_attr(&self, key: &str, value: &str) -> bool {
        self.siblings.iter().find_map(|l| pdata::attribute(l, key, self.metric.point_label)) == Some(value)
    }
}

pub struct FilterProcessor {
    id: String,
    rules: Rules,
    next: Arc<dyn Consumer>,
    metadata: Mutex<MetadataStore>,
    /// Whether a series is dropped, for rules that read only its labels and
    /// metric.
    memo: SeriesCache<bool>,
    /// The verdict depends on more than the series' labels.
    per_batch: bool,
    dropped: Arc<Counter>,
    logged: Mutex<BTreeSet<String>>,
}

impl FilterProcessor {
    pub fn new(
        id: String,
        cfg: &FilterConfig,
        next: Arc<dyn Consumer>,
        telemetry: &Telemetry,
    ) -> Result<Arc<Self>, String> {
        let rules = cfg.check().map_err(|(k, e)| format!("{k}: {e}"))?;
        let per_batch = rules.conditions.iter().any(|c| c.reads_value() || c.reads_points());
        let dropped = telemetry.counter(
            "infertel_processor_filter_dropped_samples_total",
            "Samples the filter processor dropped because its include/exclude or conditions said so.",
            &[("processor", &id)],
        );
        Ok(Arc::new(FilterProcessor {
            id,
            rules,
            next,
            metadata: Mutex::new(MetadataStore::default()),
            memo: SeriesCache::default(),
            per_batch,
            dropped,
            logged: Mutex::default(),
        }))
    }

    fn note_metadata(&self, md: &[Metadata]) {
        if md.is_empty() {
            return;
        }
        let mut store = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        if md.iter().any(|m| store.get(&m.family) != Some(m)) {
            store.update(md);
            self.memo.clear();
        }
    }

    /// Whether the series goes: the legacy match or a condition says so.
    fn drops(&self, p: &Point<'_>) -> bool {
        let r = &self.rules;
        if r.include.as_ref().is_some_and(|m| !m.matches(p.labels, p.metric))
            || r.exclude.as_ref().is_some_and(|m| m.matches(p.labels, p.metric))
        {
            return true;
        }
        r.conditions.iter().any(|c| c.eval(p))
    }

    fn process(&self, mut batch: Batch) -> Batch {
        self.note_metadata(&batch.metadata);
        let store = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        let metrics: Vec<MetricView> = batch.series.iter().map(|s| pdata::metric_of(&s.labels, &store)).collect();
        drop(store);
        let mut dropped_names: Vec<String> = Vec::new();
        let mut dropped_samples = 0u64;
        let keep: Vec<bool> = if self.per_batch {
            self.verdicts(&batch.series, &metrics)
        } else {
            let mut memo = self.memo.lock();
            batch
                .series
                .iter()
                .zip(&metrics)
                .map(|(s, m)| {
                    !memo.get_or(&s.labels, || {
                        self.drops(&Point { labels: &s.labels, metric: m, value: None, siblings: &[] })
                    })
                })
                .collect()
        };
        let mut i = 0;
        batch.series.retain(|s| {
            let k = keep[i];
            if !k {
                dropped_samples += s.samples.len() as u64;
                dropped_names.push(metrics[i].name.clone());
            }
            i += 1;
            k
        });
        if dropped_samples > 0 {
            self.dropped.add(dropped_samples);
            let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
            for n in dropped_names {
                if logged.len() < 1000 && logged.insert(n.clone()) {
                    tracing::info!(processor = %self.id, metric = %n, "filter drops {n} (counted in infertel_processor_filter_dropped_samples_total)");
                }
            }
        }
        batch
    }

    /// Verdicts for rules that read values or the other points of a metric:
    /// a metric is the series of one family from one target in this batch.
    fn verdicts(&self, series: &[Series], metrics: &[MetricView]) -> Vec<bool> {
        let mut groups: HashMap<(Option<&str>, Option<&str>, &str), Vec<&Labels>> = HashMap::new();
        for (s, m) in series.iter().zip(metrics) {
            groups.entry((s.labels.get("job"), s.labels.get("instance"), m.name.as_str())).or_default().push(&s.labels);
        }
        series
            .iter()
            .zip(metrics)
            .map(|(s, m)| {
                let siblings = &groups[&(s.labels.get("job"), s.labels.get("instance"), m.name.as_str())];
                // A staleness marker is no recorded value: it carries no
                // value a condition could read, and it must follow its
                // series, so only label conditions decide for it.
                let value = s.samples.last().map(|x| x.value).filter(|v| !is_stale_nan(*v));
                !self.drops(&Point { labels: &s.labels, metric: m, value, siblings })
            })
            .collect()
    }
}

impl Consumer for FilterProcessor {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        let out = self.process(batch);
        Box::pin(async move {
            if !out.is_empty() {
                self.next.consume(out).await
            }
        })
    }
}
