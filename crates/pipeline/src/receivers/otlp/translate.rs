//! An `ExportMetricsServiceRequest` onto Prometheus series, as Prometheus'
//! OTLP endpoint translates it (`storage/remote/otlptranslator`):
//!
//! - **Resource**: `service.namespace/service.name` is `job`,
//!   `service.instance.id` is `instance` (both override point attributes of
//!   those names); the resource's other attributes go to one `target_info`
//!   series per resource (value 1, metadata "Target metadata"), not onto
//!   every series. Scope attributes are not labels.
//! - **Points**: attributes are labels (names per `names.rs`; two keys that
//!   escape to one label name join their values with `;`, in key order); the
//!   timestamp is `time_unix_nano` in milliseconds; a point flagged
//!   `NoRecordedValue` is a staleness marker on each of its series.
//! - **Types**: a gauge is a gauge; a monotonic cumulative sum a counter
//!   (`_total`), a non-monotonic one a gauge; a histogram `_bucket` series
//!   with cumulative counts (`le` as plain decimals, `+Inf` from the point's
//!   count), `_sum` when it has one and `_count`; a summary its quantiles,
//!   `_sum` and `_count`.
//! - **Refused, in the partial success** (counted by reason): delta points
//!   with `delta: reject` (else made cumulative, see `delta.rs`), points of
//!   unspecified temporality, exponential histograms (they need native
//!   histograms, which infertel does not carry yet), names or label names
//!   nothing valid is left of, points without a value.

use super::config::{Delta, OtlpReceiverConfig, Strategy};
use super::delta::{Deltas, Refused, Total};
use super::names::{self, Kind};
use infertel_model::{Batch, Label, Labels, METRIC_NAME, Metadata, MetricType, Sample, Series, stale_nan};
use infertel_otlp::opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use infertel_otlp::opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use infertel_otlp::opentelemetry_proto::tonic::metrics::v1::{Metric, metric, number_data_point};
use std::collections::{BTreeMap, BTreeSet};

const NO_RECORDED_VALUE: u32 = 1;
const DELTA: i32 = 1;
const CUMULATIVE: i32 = 2;

pub struct Translator {
    strategy: Strategy,
    reject_delta: bool,
    deltas: Deltas,
}

#[derive(Default, Debug)]
pub struct Translated {
    pub batch: Batch,
    pub rejected: u64,
    pub rejected_by: BTreeMap<&'static str, u64>,
    pub message: String,
}

#[derive(Default)]
struct Out {
    series: Vec<Series>,
    metadata: BTreeMap<String, Metadata>,
    rejected: u64,
    rejected_by: BTreeMap<&'static str, u64>,
    errors: BTreeSet<String>,
}

impl Out {
    fn reject(&mut self, reason: &'static str, n: u64, message: String) {
        if n == 0 {
            return;
        }
        self.rejected += n;
        *self.rejected_by.entry(reason).or_default() += n;
        self.errors.insert(message);
    }

    fn push(&mut self, labels: Labels, ts_ms: i64, value: f64) {
        self.series.push(Series { labels, samples: infertel_model::samples![Sample { timestamp_ms: ts_ms, value }] });
    }

    fn describe(&mut self, family: &str, kind: MetricType, help: &str, unit: &str) {
        self.metadata.entry(family.to_string()).or_insert_with(|| Metadata {
            family: family.into(),
            kind,
            help: help.into(),
            unit: unit.into(),
        });
    }
}

/// An attribute value as a label value, as pdata's `AsString` writes it.
fn value_text(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => names::plain_float(*d),
        Some(any_value::Value::BytesValue(b)) => base64(b),
        Some(other) => format!("{other:?}"),
    }
}

fn base64(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a KeyValue> {
    attrs.iter().find(|kv| kv.key == key)
}

/// `(label name, value)` of attributes: sorted by key, escaped, colliding
/// names' values joined with `;`.
fn labels_of(attrs: &[KeyValue], strategy: Strategy) -> Result<Vec<(String, String)>, String> {
    let mut sorted: Vec<&KeyValue> = attrs.iter().filter(|kv| kv.key != METRIC_NAME).collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut out: Vec<(String, String)> = Vec::with_capacity(sorted.len());
    for kv in sorted {
        let name = names::label_name(&kv.key, strategy)?;
        let value = value_text(&kv.value);
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => {
                slot.1.push(';');
                slot.1.push_str(&value);
            }
            None => out.push((name, value)),
        }
    }
    Ok(out)
}

fn ts_ms(nanos: u64, now_ms: i64) -> i64 {
    if nanos == 0 { now_ms } else { (nanos / 1_000_000) as i64 }
}

impl Translator {
    pub fn new(cfg: &OtlpReceiverConfig) -> Translator {
        Translator {
            strategy: cfg.otlp_translation_strategy,
            reject_delta: cfg.delta == Delta::Reject,
            deltas: Deltas::new(cfg.max_stale.get().as_millis() as i64, cfg.max_delta_streams),
        }
    }

    pub fn delta_streams(&self) -> usize {
        self.deltas.len()
    }

    pub fn translate(&mut self, req: &ExportMetricsServiceRequest, now_ms: i64) -> Translated {
        let mut out = Out::default();
        for rm in &req.resource_metrics {
            let rattrs: &[KeyValue] = rm.resource.as_ref().map_or(&[], |r| r.attributes.as_slice());
            let text = |k: &str| attr(rattrs, k).map(|kv| value_text(&kv.value)).filter(|v| !v.is_empty());
            let job = match (text("service.namespace"), text("service.name")) {
                (Some(ns), Some(n)) => Some(format!("{ns}/{n}")),
                (None, Some(n)) => Some(n),
                _ => None,
            };
            let instance = text("service.instance.id");
            let resource: Vec<(String, String)> = [("job", job.clone()), ("instance", instance.clone())]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
                .collect();
            let before = out.series.len();
            let mut latest = i64::MIN;
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    self.metric(m, &resource, now_ms, &mut out, &mut latest);
                }
            }
            let others: Vec<&KeyValue> = rattrs
                .iter()
                .filter(|kv| !matches!(kv.key.as_str(), "service.name" | "service.namespace" | "service.instance.id"))
                .collect();
            if out.series.len() > before && !others.is_empty() && !resource.is_empty() {
                let owned: Vec<KeyValue> = others.into_iter().cloned().collect();
                match labels_of(&owned, self.strategy) {
                    Ok(mut l) => {
                        l.retain(|(n, _)| n != "job" && n != "instance");
                        l.extend(resource.iter().cloned());
                        l.push((METRIC_NAME.into(), "target_info".into()));
                        let labels = Labels::from_vec(l.into_iter().map(|(n, v)| Label::new(n, v)).collect());
                        out.push(labels, latest, 1.0);
                        out.describe("target_info", MetricType::Gauge, "Target metadata", "");
                    }
                    Err(e) => {
                        out.errors.insert(format!("target_info: {e}"));
                    }
                }
            }
        }
        let mut message: Vec<String> = out.errors.iter().take(10).cloned().collect();
        if out.errors.len() > 10 {
            message.push(format!("and {} more", out.errors.len() - 10));
        }
        Translated {
            batch: Batch { series: out.series, metadata: out.metadata.into_values().collect() },
            rejected: out.rejected,
            rejected_by: out.rejected_by,
            message: message.join("; "),
        }
    }

    fn metric(&mut self, m: &Metric, resource: &[(String, String)], now_ms: i64, out: &mut Out, latest: &mut i64) {
        let Some(data) = &m.data else {
            // A metric whose data did not decode (an unknown type, a field of
            // the wrong kind): nothing to count points by, so one.
            out.reject("no_data", 1, format!("metric {:?} has no data of a known type", m.name));
            return;
        };
        let (kind, temporality, points) = match data {
            metric::Data::Gauge(g) => (Kind::Gauge, None, g.data_points.len()),
            metric::Data::Sum(s) => (
                if s.is_monotonic { Kind::MonotonicCounter } else { Kind::NonMonotonicCounter },
                Some(s.aggregation_temporality),
                s.data_points.len(),
            ),
            metric::Data::Histogram(h) => (Kind::Histogram, Some(h.aggregation_temporality), h.data_points.len()),
            metric::Data::Summary(s) => (Kind::Summary, None, s.data_points.len()),
            metric::Data::ExponentialHistogram(e) => {
                out.reject(
                    "exponential_histogram",
                    e.data_points.len() as u64,
                    format!(
                        "exponential histograms are refused until infertel carries native histograms: metric {:?}",
                        m.name
                    ),
                );
                return;
            }
        };
        if points == 0 {
            return;
        }
        let delta = match temporality {
            None | Some(CUMULATIVE) => false,
            Some(DELTA) if !self.reject_delta => true,
            Some(DELTA) => {
                out.reject(
                    "delta",
                    points as u64,
                    format!("delta temporality refused (delta: reject): metric {:?}", m.name),
                );
                return;
            }
            Some(_) => {
                out.reject(
                    "invalid_temporality",
                    points as u64,
                    format!("invalid temporality and type combination for metric {:?}", m.name),
                );
                return;
            }
        };
        let name = match names::metric_name(&m.name, &m.unit, kind, self.strategy) {
            Ok(n) => n,
            Err(e) => {
                out.reject("invalid_name", points as u64, e);
                return;
            }
        };
        let unit = if matches!(self.strategy, Strategy::NoTranslation) {
            m.unit.clone()
        } else {
            names::metadata_unit(&m.unit)
        };
        let strategy = self.strategy;
        let point_labels = |attrs: &[KeyValue], extra: &[(&str, String)], series: &str| -> Result<Labels, String> {
            let mut l = labels_of(attrs, strategy)?;
            l.retain(|(n, _)| !resource.iter().any(|(r, _)| r == n));
            l.extend(resource.iter().cloned());
            for (k, v) in extra {
                l.retain(|(n, _)| n != k);
                l.push((k.to_string(), v.clone()));
            }
            l.push((METRIC_NAME.into(), series.to_string()));
            Ok(Labels::from_vec(l.into_iter().map(|(n, v)| Label::new(n, v)).collect()))
        };
        match data {
            metric::Data::Gauge(g) => {
                out.describe(&name, MetricType::Gauge, &m.description, &unit);
                for p in &g.data_points {
                    self.number(
                        &name,
                        &p.attributes,
                        p.flags,
                        p.time_unix_nano,
                        p.value,
                        false,
                        &point_labels,
                        now_ms,
                        out,
                        latest,
                    );
                }
            }
            metric::Data::Sum(s) => {
                let mt = if s.is_monotonic { MetricType::Counter } else { MetricType::Gauge };
                out.describe(&name, mt, &m.description, &unit);
                for p in &s.data_points {
                    self.number(
                        &name,
                        &p.attributes,
                        p.flags,
                        p.time_unix_nano,
                        p.value,
                        delta,
                        &point_labels,
                        now_ms,
                        out,
                        latest,
                    );
                }
            }
            metric::Data::Histogram(h) => {
                out.describe(&name, MetricType::Histogram, &m.description, &unit);
                for p in &h.data_points {
                    let t = ts_ms(p.time_unix_nano, now_ms);
                    let stale = p.flags & NO_RECORDED_VALUE != 0;
                    let (mut counts, mut count, mut sum) = (p.bucket_counts.clone(), p.count, p.sum);
                    if delta && !stale {
                        let labels = match point_labels(&p.attributes, &[], &name) {
                            Ok(l) => l,
                            Err(e) => {
                                out.reject("invalid_label", 1, e);
                                continue;
                            }
                        };
                        let point = Total::Histogram {
                            bounds: p.explicit_bounds.clone(),
                            counts: counts.clone(),
                            count,
                            sum: sum.unwrap_or(0.0),
                        };
                        match self.deltas.add(labels.stable_hash(), t, point, now_ms) {
                            Ok(Total::Histogram { counts: c, count: n, sum: s, .. }) => {
                                counts = c;
                                count = n;
                                sum = p.sum.map(|_| s);
                            }
                            Ok(_) => {}
                            Err(r) => {
                                reject_delta(out, r, &m.name, 1);
                                continue;
                            }
                        }
                    }
                    let v = |x: f64| if stale { stale_nan() } else { x };
                    let mut series = Vec::new();
                    let mut cum = 0u64;
                    for (i, b) in p.explicit_bounds.iter().enumerate().take(counts.len()) {
                        cum += counts[i];
                        series.push((format!("{name}_bucket"), vec![("le", names::plain_float(*b))], v(cum as f64)));
                    }
                    series.push((format!("{name}_bucket"), vec![("le", "+Inf".to_string())], v(count as f64)));
                    if let Some(s) = sum {
                        series.push((format!("{name}_sum"), vec![], v(s)));
                    }
                    series.push((format!("{name}_count"), vec![], v(count as f64)));
                    self.emit(series, &p.attributes, t, &point_labels, out, latest);
                }
            }
            metric::Data::Summary(s) => {
                out.describe(&name, MetricType::Summary, &m.description, &unit);
                for p in &s.data_points {
                    let t = ts_ms(p.time_unix_nano, now_ms);
                    let stale = p.flags & NO_RECORDED_VALUE != 0;
                    let v = |x: f64| if stale { stale_nan() } else { x };
                    let mut series = vec![
                        (format!("{name}_sum"), vec![], v(p.sum)),
                        (format!("{name}_count"), vec![], v(p.count as f64)),
                    ];
                    for q in &p.quantile_values {
                        series.push((name.clone(), vec![("quantile", names::plain_float(q.quantile))], v(q.value)));
                    }
                    self.emit(series, &p.attributes, t, &point_labels, out, latest);
                }
            }
            metric::Data::ExponentialHistogram(_) => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn number(
        &mut self,
        name: &str,
        attrs: &[KeyValue],
        flags: u32,
        time: u64,
        value: Option<number_data_point::Value>,
        delta: bool,
        point_labels: &dyn Fn(&[KeyValue], &[(&str, String)], &str) -> Result<Labels, String>,
        now_ms: i64,
        out: &mut Out,
        latest: &mut i64,
    ) {
        let t = ts_ms(time, now_ms);
        let labels = match point_labels(attrs, &[], name) {
            Ok(l) => l,
            Err(e) => {
                out.reject("invalid_label", 1, e);
                return;
            }
        };
        let v = if flags & NO_RECORDED_VALUE != 0 {
            stale_nan()
        } else {
            let raw = match value {
                Some(number_data_point::Value::AsDouble(d)) => d,
                Some(number_data_point::Value::AsInt(i)) => i as f64,
                None => {
                    out.reject("no_value", 1, format!("a data point of metric {name:?} has no value"));
                    return;
                }
            };
            if delta {
                match self.deltas.add(labels.stable_hash(), t, Total::Number(raw), now_ms) {
                    Ok(Total::Number(total)) => total,
                    Ok(_) => raw,
                    Err(r) => {
                        reject_delta(out, r, name, 1);
                        return;
                    }
                }
            } else {
                raw
            }
        };
        *latest = (*latest).max(t);
        out.push(labels, t, v);
    }

    fn emit(
        &self,
        series: Vec<(String, Vec<(&str, String)>, f64)>,
        attrs: &[KeyValue],
        t: i64,
        point_labels: &dyn Fn(&[KeyValue], &[(&str, String)], &str) -> Result<Labels, String>,
        out: &mut Out,
        latest: &mut i64,
    ) {
        let mut built = Vec::with_capacity(series.len());
        for (n, extra, v) in &series {
            match point_labels(attrs, extra, n) {
                Ok(l) => built.push((l, *v)),
                Err(e) => {
                    out.reject("invalid_label", 1, e);
                    return;
                }
            }
        }
        *latest = (*latest).max(t);
        for (l, v) in built {
            out.push(l, t, v);
        }
    }
}

fn reject_delta(out: &mut Out, r: Refused, name: &str, n: u64) {
    match r {
        Refused::OutOfOrder => out.reject(
            "delta_out_of_order",
            n,
            format!("a delta point of metric {name:?} is not after the stream's last one"),
        ),
        Refused::Limit => out.reject(
            "delta_streams_limit",
            n,
            format!("max_delta_streams reached: a new delta stream of metric {name:?} is refused"),
        ),
    }
}

#[cfg(test)]
#[path = "translate_tests.rs"]
mod tests;
