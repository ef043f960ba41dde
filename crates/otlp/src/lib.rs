//! Prometheus → OTLP metrics, in two naming modes.
//!
//! **[`Naming::Otel`] (default)** follows the OpenTelemetry Prometheus
//! compatibility spec:
//! - counter → monotonic cumulative Sum; gauge and untyped → Gauge; info and
//!   stateset → non-monotonic cumulative Sum; gaugehistogram is dropped;
//! - histogram → Histogram: explicit bounds are the `le` values without
//!   `+Inf`, bucket counts are per bucket (differences of the cumulative
//!   Prometheus buckets, `len(bounds) + 1` of them, the last from `_count`);
//!   a histogram without `_count` is dropped, one without `_sum` has no sum;
//! - summary → Summary; without `_count` it is dropped, without `_sum` sum = 0;
//! - HELP → description, UNIT → UCUM unit, TYPE → metric metadata
//!   `prometheus.type`;
//! - a staleness marker → a point with the NoRecordedValue flag and no value;
//! - `job`/`instance` → resource `service.name`/`service.instance.id` (not
//!   data-point attributes); `target_info` → resource attributes, not a metric;
//! - one instrumentation scope named `infertel`;
//! - `start_time_unix_nano` of cumulative points: the `_created` series of the
//!   same family and labels when there is one (those `_created` gauges are then
//!   not forwarded), else the time this agent first saw the stream; when a
//!   counter (or a histogram's/summary's count) goes down, the stream was
//!   reset and the start moves to 1 ms after the last point before the reset.
//!   A staleness marker forgets the stream. Gauges have no start time.
//! - names are kept as scraped (a 0.0.4 counter keeps `_total`, a histogram
//!   is named after its family); `trim_metric_suffixes` removes a counter's
//!   `_total` and a unit suffix named by `# UNIT`, as the Collector does.
//!
//! **[`Naming::Preserve`]** (the `preserve_names` processor) keeps every
//! scraped series under its exact Prometheus name: one OTLP metric per series
//! name. Counters, a histogram's `_bucket` and `_count` and a summary's
//! `_count` are monotonic cumulative Sums; `_sum` is a non-monotonic
//! cumulative Sum; gauges, untyped series, summary quantiles, `_created`
//! series and `target_info` are Gauges. Every label (`job`, `instance`, `le`,
//! `quantile` included) stays a data-point attribute; the family's type is
//! kept as `prometheus.type` metadata. The resource still carries
//! `service.name`/`service.instance.id` as the spec requires.

use infertel_model::{Labels, METRIC_NAME, Metadata, MetricType, Series, is_stale_nan};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum, Summary, SummaryDataPoint, metric, number_data_point, summary_data_point::ValueAtQuantile,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub use opentelemetry_proto;

/// The instrumentation scope every converted metric gets.
pub const SCOPE_NAME: &str = "infertel";
pub const SCOPE_VERSION: &str = env!("CARGO_PKG_VERSION");
/// `DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK`.
pub const NO_RECORDED_VALUE: u32 = 1;

/// How Prometheus names become OTLP metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Naming {
    /// The OTel Prometheus compatibility mapping.
    #[default]
    Otel,
    /// One OTLP metric per exact Prometheus series name.
    Preserve,
}

/// What a series is within its family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A counter, gauge, untyped, info or stateset sample, or a summary quantile.
    Value,
    Bucket,
    Sum,
    Count,
    /// `X_created`: the start time of a counter, histogram or summary.
    Created,
}

/// A series name resolved against the metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Classified {
    pub family: String,
    pub kind: MetricType,
    pub role: Role,
}

/// Family metadata, remembered across batches (the receiver sends it about
/// once a minute, not with every scrape).
#[derive(Default, Clone, Debug)]
pub struct MetadataStore {
    families: HashMap<Arc<str>, Metadata>,
}

fn cumulative(k: MetricType) -> bool {
    matches!(k, MetricType::Counter | MetricType::Histogram | MetricType::Summary)
}

impl MetadataStore {
    pub fn update(&mut self, md: &[Metadata]) {
        for m in md {
            match self.families.get(&m.family) {
                Some(prev) if prev == m => {}
                _ => {
                    self.families.insert(m.family.clone(), m.clone());
                }
            }
        }
    }

    pub fn get(&self, family: &str) -> Option<&Metadata> {
        self.families.get(family)
    }

    pub fn len(&self) -> usize {
        self.families.len()
    }

    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    fn kind(&self, family: &str) -> Option<MetricType> {
        self.families.get(family).map(|m| m.kind)
    }

    /// Finds the family of a series name as Prometheus and the Collector do:
    /// `_created` of a counter/histogram/summary first (prometheus_client
    /// writes those as separate gauge families), then the exact name, then
    /// the type suffixes.
    pub fn classify(&self, name: &str) -> Classified {
        let c = |family: &str, kind, role| Classified { family: family.to_string(), kind, role };
        if let Some(base) = name.strip_suffix("_created") {
            if let Some(k) = self.kind(base).filter(|k| cumulative(*k)) {
                return c(base, k, Role::Created);
            }
            let total = format!("{base}_total");
            if self.kind(&total) == Some(MetricType::Counter) {
                return c(&total, MetricType::Counter, Role::Created);
            }
        }
        if let Some(k) = self.kind(name)
            && !matches!(k, MetricType::Histogram | MetricType::GaugeHistogram)
        {
            return c(name, k, Role::Value);
        }
        let suffixes: [(&str, Role, &[MetricType]); 6] = [
            ("_bucket", Role::Bucket, &[MetricType::Histogram, MetricType::GaugeHistogram]),
            ("_sum", Role::Sum, &[MetricType::Histogram, MetricType::Summary]),
            ("_count", Role::Count, &[MetricType::Histogram, MetricType::Summary]),
            ("_gsum", Role::Sum, &[MetricType::GaugeHistogram]),
            ("_gcount", Role::Count, &[MetricType::GaugeHistogram]),
            ("_total", Role::Value, &[MetricType::Counter]),
        ];
        for (suffix, role, kinds) in suffixes {
            if let Some(base) = name.strip_suffix(suffix)
                && let Some(k) = self.kind(base).filter(|k| kinds.contains(k))
            {
                return c(base, k, role);
            }
        }
        if let Some(base) = name.strip_suffix("_info")
            && self.kind(base) == Some(MetricType::Info)
        {
            return c(base, MetricType::Info, Role::Value);
        }
        c(name, MetricType::Unknown, Role::Value)
    }
}

/// Prometheus unit → UCUM, for the common ones (others pass unchanged).
pub fn ucum_unit(unit: &str) -> String {
    let u = match unit {
        "seconds" => "s",
        "milliseconds" => "ms",
        "microseconds" => "us",
        "nanoseconds" => "ns",
        "minutes" => "min",
        "hours" => "h",
        "days" => "d",
        "bytes" => "By",
        "kilobytes" => "kBy",
        "megabytes" => "MBy",
        "gigabytes" => "GBy",
        "bits" => "bit",
        "percent" => "%",
        "ratio" => "1",
        "celsius" => "Cel",
        "hertz" => "Hz",
        "joules" => "J",
        "watts" => "W",
        "volts" => "V",
        "amperes" => "A",
        "meters" => "m",
        other => other,
    };
    u.to_string()
}

/// The Collector's `trim_metric_suffixes`: drops a counter's `_total` and
/// then a `_<unit>` suffix named by `# UNIT`; never leaves an empty name.
pub fn trim_suffixes(name: &str, kind: MetricType, unit: &str) -> String {
    let mut n = name;
    if kind == MetricType::Counter
        && let Some(b) = n.strip_suffix("_total").filter(|b| !b.is_empty())
    {
        n = b;
    }
    if !unit.is_empty()
        && let Some(b) = n.strip_suffix(unit).and_then(|b| b.strip_suffix('_')).filter(|b| !b.is_empty())
    {
        n = b;
    }
    n.to_string()
}

/// The OTLP metric name and type a series gets: used by the converter and by
/// `infertel names`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub name: String,
    /// `gauge`, `sum(monotonic)`, `sum`, `histogram`, `summary`, or `dropped: why`.
    pub otlp_type: String,
    /// The Prometheus family type kept as `prometheus.type`.
    pub prometheus_type: &'static str,
    /// Labels that become data-point attributes (`__name__` excluded).
    pub attributes: Vec<String>,
    /// Labels that become resource attributes.
    pub resource: Vec<String>,
}

/// How one series name is exported in `naming` (labels are its label names).
pub fn plan(store: &MetadataStore, naming: Naming, trim: bool, name: &str, labels: &[&str]) -> Plan {
    let c = store.classify(name);
    let md = store.get(&c.family);
    let unit = md.map(|m| &*m.unit).unwrap_or("");
    let attrs = |skip: &[&str]| {
        labels.iter().filter(|l| **l != METRIC_NAME && !skip.contains(l)).map(|l| l.to_string()).collect::<Vec<_>>()
    };
    match naming {
        Naming::Preserve => {
            let t = match (c.kind, c.role) {
                (MetricType::Counter, Role::Value) => "sum(monotonic)",
                (MetricType::Histogram | MetricType::Summary, Role::Count | Role::Bucket) => "sum(monotonic)",
                (MetricType::Histogram | MetricType::Summary, Role::Sum) => "sum",
                _ => "gauge",
            };
            Plan {
                name: name.to_string(),
                otlp_type: t.into(),
                prometheus_type: c.kind.as_str(),
                attributes: attrs(&[]),
                resource: vec![],
            }
        }
        Naming::Otel => {
            let res = vec!["job→service.name".to_string(), "instance→service.instance.id".to_string()];
            if name == "target_info" {
                return Plan {
                    name: name.into(),
                    otlp_type: "dropped: labels become resource attributes".into(),
                    prometheus_type: c.kind.as_str(),
                    attributes: vec![],
                    resource: attrs(&["job", "instance"]),
                };
            }
            let (base, t) = match (c.kind, c.role) {
                (_, Role::Created) => {
                    return Plan {
                        name: name.into(),
                        otlp_type: format!("dropped: start time of {}", c.family),
                        prometheus_type: c.kind.as_str(),
                        attributes: vec![],
                        resource: vec![],
                    };
                }
                (MetricType::GaugeHistogram, _) => {
                    return Plan {
                        name: name.into(),
                        otlp_type: "dropped: gaugehistogram has no OTLP mapping".into(),
                        prometheus_type: c.kind.as_str(),
                        attributes: vec![],
                        resource: vec![],
                    };
                }
                (MetricType::Counter, _) => (name.to_string(), "sum(monotonic)"),
                (MetricType::Histogram, _) => (c.family.clone(), "histogram"),
                (MetricType::Summary, _) => (c.family.clone(), "summary"),
                (MetricType::Info | MetricType::StateSet, _) => (name.to_string(), "sum"),
                _ => (name.to_string(), "gauge"),
            };
            let final_name = if trim { trim_suffixes(&base, c.kind, unit) } else { base };
            Plan {
                name: final_name,
                otlp_type: t.into(),
                prometheus_type: c.kind.as_str(),
                attributes: attrs(&["job", "instance", "le", "quantile"]),
                resource: res,
            }
        }
    }
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_string(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(v.to_string())) }),
        ..Default::default()
    }
}

fn ms_to_ns(ms: i64) -> u64 {
    (ms.max(0) as u64).saturating_mul(1_000_000)
}

fn secs_to_ns(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 { (s * 1e9).round() as u64 } else { 0 }
}

/// Start-time state of one cumulative stream.
#[derive(Clone, Copy, Debug)]
struct Track {
    start_ns: u64,
    last: f64,
    last_ts_ms: i64,
    /// Wall-clock time (ms) the stream was last converted, for forgetting.
    seen_ms: i64,
}

/// Start-time state of a stream not seen for this long is forgotten. Stale
/// markers end most streams, but a series with explicit timestamps never
/// gets one (Prometheus semantics), so without this bound the state would
/// grow with series churn. A stream seen again after that long starts anew
/// (its start time is the first point seen again, as after a restart).
pub const FORGET_AFTER_MS: i64 = 10 * 60 * 1000;

/// Converts batches to OTLP requests, remembering start times across calls.
/// One per sending-queue consumer: the queue shards by [`Converter::shard_key`],
/// so a stream always meets the same converter.
#[derive(Default)]
pub struct Converter {
    pub naming: Naming,
    pub trim_metric_suffixes: bool,
    tracks: HashMap<String, Track>,
    /// `_created` value and wall-clock time (ms) last seen, per stream.
    created: HashMap<String, (f64, i64)>,
    /// Wall-clock time of the current `convert` call.
    now_ms: i64,
    /// When the state was last swept for streams not seen for [`FORGET_AFTER_MS`].
    swept_ms: i64,
}

/// The resource a series belongs to: its `job` and `instance`.
type ResourceKey = (String, String);

struct HistAcc {
    attrs: Vec<KeyValue>,
    stream: String,
    ts_ms: i64,
    buckets: Vec<(f64, f64)>,
    sum: Option<f64>,
    count: Option<f64>,
    stale: bool,
    quantiles: Vec<(f64, f64)>,
}

#[derive(Default)]
struct ResourceAcc {
    metrics: Vec<Metric>,
    index: HashMap<String, usize>,
    /// (family, stream, ts) → histogram or summary being assembled.
    hists: BTreeMap<(String, String, i64), HistAcc>,
}

/// The stream identity of a point: resource, family and attributes.
fn stream_key(res: &ResourceKey, family: &str, labels: &Labels, skip: &[&str]) -> String {
    let mut k = format!("{}\u{1}{}\u{1}{}", res.0, res.1, family);
    for l in labels.iter() {
        if &*l.name == METRIC_NAME || skip.contains(&&*l.name) {
            continue;
        }
        k.push('\u{1}');
        k.push_str(&l.name);
        k.push('\u{2}');
        k.push_str(&l.value);
    }
    k
}

fn resource_of(labels: &Labels) -> ResourceKey {
    (labels.get("job").unwrap_or("").to_string(), labels.get("instance").unwrap_or("").to_string())
}

/// Stable FNV-1a, for sharding.
fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Resource attributes per (job, instance) from `target_info` series.
#[derive(Default, Clone, Debug)]
pub struct TargetInfo(pub HashMap<ResourceKey, Vec<(String, String)>>);

impl TargetInfo {
    /// Remembers the `target_info` series of a batch (Otel mode only).
    pub fn update(&mut self, series: &[Series]) {
        for s in series {
            if s.labels.metric_name() != "target_info" || s.samples.iter().all(|x| is_stale_nan(x.value)) {
                continue;
            }
            let attrs = s
                .labels
                .iter()
                .filter(|l| !matches!(&*l.name, METRIC_NAME | "job" | "instance"))
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect();
            self.0.insert(resource_of(&s.labels), attrs);
        }
    }
}

const DP_SKIP: &[&str] = &["job", "instance", "le", "quantile"];

impl Converter {
    pub fn new(naming: Naming, trim_metric_suffixes: bool) -> Self {
        Converter { naming, trim_metric_suffixes, ..Default::default() }
    }

    /// The key series are sharded by: every series of one data point
    /// (buckets, sum, count, `_created`) and of one stream shares it.
    pub fn shard_key(store: &MetadataStore, naming: Naming, s: &Series) -> u64 {
        match naming {
            Naming::Preserve => s.labels.stable_hash(),
            Naming::Otel => {
                let c = store.classify(s.labels.metric_name());
                fnv(&stream_key(&resource_of(&s.labels), &c.family, &s.labels, DP_SKIP))
            }
        }
    }

    /// Number of streams whose start time is remembered.
    pub fn tracked(&self) -> usize {
        self.tracks.len()
    }

    /// The start time of a cumulative point, updating the reset tracking.
    fn start_time(&mut self, stream: &str, ts_ms: i64, value: f64, stale: bool) -> u64 {
        if stale {
            self.tracks.remove(stream);
            self.created.remove(stream);
            return 0;
        }
        let created = self.created.get(stream).map(|c| c.0).map(secs_to_ns).filter(|n| *n > 0);
        let t = match self.tracks.get(stream).copied() {
            None => Track {
                start_ns: created.unwrap_or(ms_to_ns(ts_ms)),
                last: value,
                last_ts_ms: ts_ms,
                seen_ms: self.now_ms,
            },
            Some(prev) => {
                let start = if let Some(c) = created {
                    c
                } else if value < prev.last {
                    // A reset: the new series began after the last point we saw.
                    ms_to_ns(prev.last_ts_ms) + 1_000_000
                } else {
                    prev.start_ns
                };
                Track { start_ns: start, last: value, last_ts_ms: ts_ms, seen_ms: self.now_ms }
            }
        };
        self.tracks.insert(stream.to_string(), t);
        t.start_ns
    }

    /// Forgets the start-time state of streams not seen since
    /// `now_ms - FORGET_AFTER_MS` (wall clock); runs from `convert` at most
    /// once a minute.
    pub fn forget_unseen(&mut self, now_ms: i64) {
        let cutoff = now_ms - FORGET_AFTER_MS;
        self.tracks.retain(|_, t| t.seen_ms >= cutoff);
        self.created.retain(|_, c| c.1 >= cutoff);
        self.swept_ms = now_ms;
    }

    /// Number of streams whose `_created` value is remembered.
    pub fn created_tracked(&self) -> usize {
        self.created.len()
    }

    /// Converts series into one request (None when nothing is left to send).
    pub fn convert(
        &mut self,
        series: &[Series],
        store: &MetadataStore,
        targets: &TargetInfo,
    ) -> Option<ExportMetricsServiceRequest> {
        self.now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        if self.now_ms - self.swept_ms >= 60_000 {
            self.forget_unseen(self.now_ms);
        }
        let mut resources: BTreeMap<ResourceKey, ResourceAcc> = BTreeMap::new();
        let otel = self.naming == Naming::Otel;
        // Pass 1: `_created` values become start times (both modes; in Otel
        // mode they are not forwarded).
        let mut classified = Vec::with_capacity(series.len());
        for s in series {
            let c = store.classify(s.labels.metric_name());
            if c.role == Role::Created {
                let key = stream_key(&resource_of(&s.labels), &c.family, &s.labels, DP_SKIP);
                if let Some(v) = s.samples.iter().rev().map(|x| x.value).find(|v| !is_stale_nan(*v)) {
                    self.created.insert(key, (v, self.now_ms));
                }
            }
            classified.push(c);
        }
        for (s, c) in series.iter().zip(classified) {
            let res = resource_of(&s.labels);
            let name = s.labels.metric_name();
            let acc = resources.entry(res.clone()).or_default();
            let md = store.get(&c.family);
            if self.naming == Naming::Preserve {
                self.preserve(acc, &res, s, &c, store);
                continue;
            }
            if name == "target_info" || c.role == Role::Created || c.kind == MetricType::GaugeHistogram {
                continue;
            }
            match c.kind {
                MetricType::Histogram | MetricType::Summary => {
                    let stream = stream_key(&res, &c.family, &s.labels, DP_SKIP);
                    let attrs: Vec<KeyValue> = s
                        .labels
                        .iter()
                        .filter(|l| &*l.name != METRIC_NAME && !DP_SKIP.contains(&&*l.name))
                        .map(|l| kv(&l.name, &l.value))
                        .collect();
                    for x in &s.samples {
                        let h =
                            acc.hists.entry((c.family.clone(), stream.clone(), x.timestamp_ms)).or_insert_with(|| {
                                HistAcc {
                                    attrs: attrs.clone(),
                                    stream: stream.clone(),
                                    ts_ms: x.timestamp_ms,
                                    buckets: vec![],
                                    sum: None,
                                    count: None,
                                    stale: false,
                                    quantiles: vec![],
                                }
                            });
                        if is_stale_nan(x.value) {
                            h.stale = true;
                            continue;
                        }
                        match c.role {
                            Role::Bucket => {
                                if let Some(le) = s.labels.get("le").and_then(parse_bound) {
                                    h.buckets.push((le, x.value));
                                }
                            }
                            Role::Sum => h.sum = Some(x.value),
                            Role::Count => h.count = Some(x.value),
                            Role::Value => {
                                if let Some(q) = s.labels.get("quantile").and_then(parse_bound) {
                                    h.quantiles.push((q, x.value));
                                }
                            }
                            Role::Created => {}
                        }
                    }
                }
                _ => {
                    let stream = stream_key(&res, &c.family, &s.labels, &["job", "instance"]);
                    let attrs: Vec<KeyValue> = s
                        .labels
                        .iter()
                        .filter(|l| !matches!(&*l.name, METRIC_NAME | "job" | "instance"))
                        .map(|l| kv(&l.name, &l.value))
                        .collect();
                    let base = if self.trim_metric_suffixes {
                        trim_suffixes(name, c.kind, md.map(|m| &*m.unit).unwrap_or(""))
                    } else {
                        name.to_string()
                    };
                    let sum_kind = match c.kind {
                        MetricType::Counter => Some(true),
                        MetricType::Info | MetricType::StateSet => Some(false),
                        _ => None,
                    };
                    for x in &s.samples {
                        let stale = is_stale_nan(x.value);
                        let start = if sum_kind == Some(true) {
                            self.start_time(&stream, x.timestamp_ms, x.value, stale)
                        } else {
                            0
                        };
                        let p = number_point(attrs.clone(), start, x.timestamp_ms, x.value);
                        push_number(acc, &base, md, c.kind, sum_kind, p);
                    }
                }
            }
        }
        // Assemble histograms and summaries.
        for (_, acc) in resources.iter_mut() {
            let hists = std::mem::take(&mut acc.hists);
            for ((family, _, _), h) in hists {
                let md = store.get(&family);
                let kind = md.map(|m| m.kind).unwrap_or(MetricType::Unknown);
                let name = if self.trim_metric_suffixes {
                    trim_suffixes(&family, kind, md.map(|m| &*m.unit).unwrap_or(""))
                } else {
                    family.clone()
                };
                let ts = ms_to_ns(h.ts_ms);
                if h.stale && h.count.is_none() {
                    self.tracks.remove(&h.stream);
                    self.created.remove(&h.stream);
                    let data = if kind == MetricType::Histogram {
                        Data::H(HistogramDataPoint {
                            attributes: h.attrs,
                            time_unix_nano: ts,
                            flags: NO_RECORDED_VALUE,
                            ..Default::default()
                        })
                    } else {
                        Data::S(SummaryDataPoint {
                            attributes: h.attrs,
                            time_unix_nano: ts,
                            flags: NO_RECORDED_VALUE,
                            ..Default::default()
                        })
                    };
                    push_hist(acc, &name, md, kind, data);
                    continue;
                }
                // Spec: without `_count` the point is dropped.
                let Some(count) = h.count else { continue };
                let start = self.start_time(&h.stream, h.ts_ms, count, false);
                let data = if kind == MetricType::Histogram {
                    let mut b = h.buckets;
                    b.sort_by(|x, y| x.0.total_cmp(&y.0));
                    b.dedup_by(|x, y| x.0 == y.0);
                    let mut bounds = Vec::new();
                    let mut counts = Vec::new();
                    let mut prev = 0.0;
                    for (le, cum) in &b {
                        if le.is_infinite() && *le > 0.0 {
                            continue;
                        }
                        bounds.push(*le);
                        counts.push((cum - prev).max(0.0).round() as u64);
                        prev = *cum;
                    }
                    counts.push((count - prev).max(0.0).round() as u64);
                    Data::H(HistogramDataPoint {
                        attributes: h.attrs,
                        start_time_unix_nano: start,
                        time_unix_nano: ts,
                        count: count.max(0.0).round() as u64,
                        sum: h.sum,
                        bucket_counts: counts,
                        explicit_bounds: bounds,
                        ..Default::default()
                    })
                } else {
                    let mut q = h.quantiles;
                    q.sort_by(|x, y| x.0.total_cmp(&y.0));
                    Data::S(SummaryDataPoint {
                        attributes: h.attrs,
                        start_time_unix_nano: start,
                        time_unix_nano: ts,
                        count: count.max(0.0).round() as u64,
                        sum: h.sum.unwrap_or(0.0),
                        quantile_values: q
                            .into_iter()
                            .map(|(quantile, value)| ValueAtQuantile { quantile, value })
                            .collect(),
                        ..Default::default()
                    })
                };
                push_hist(acc, &name, md, kind, data);
            }
        }
        let mut out = Vec::new();
        for (res, acc) in resources {
            if acc.metrics.is_empty() {
                continue;
            }
            let mut attrs = Vec::new();
            if !res.0.is_empty() {
                attrs.push(kv("service.name", &res.0));
            }
            if !res.1.is_empty() {
                attrs.push(kv("service.instance.id", &res.1));
            }
            if otel && let Some(extra) = targets.0.get(&res) {
                for (k, v) in extra {
                    attrs.push(kv(k, v));
                }
            }
            out.push(ResourceMetrics {
                resource: Some(Resource { attributes: attrs, ..Default::default() }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: SCOPE_NAME.into(),
                        version: SCOPE_VERSION.into(),
                        ..Default::default()
                    }),
                    metrics: acc.metrics,
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        if out.is_empty() { None } else { Some(ExportMetricsServiceRequest { resource_metrics: out }) }
    }

    fn preserve(
        &mut self,
        acc: &mut ResourceAcc,
        res: &ResourceKey,
        s: &Series,
        c: &Classified,
        store: &MetadataStore,
    ) {
        let name = s.labels.metric_name();
        // A `_created` series declared as its own family (prometheus_client
        // writes `# TYPE x_created gauge`) keeps that declared type.
        let (md, kind) = match (c.role, store.get(name)) {
            (Role::Created, Some(m)) => (Some(m), m.kind),
            _ => (store.get(&c.family), c.kind),
        };
        let attrs: Vec<KeyValue> =
            s.labels.iter().filter(|l| &*l.name != METRIC_NAME).map(|l| kv(&l.name, &l.value)).collect();
        let sum_kind = match (c.kind, c.role) {
            (MetricType::Counter, Role::Value) => Some(true),
            (MetricType::Histogram | MetricType::Summary, Role::Count | Role::Bucket) => Some(true),
            (MetricType::Histogram | MetricType::Summary, Role::Sum) => Some(false),
            _ => None,
        };
        // Sums get a start time: the family's `_created` when present, else
        // first seen / reset, tracked per exact series.
        let created_key = stream_key(res, &c.family, &s.labels, DP_SKIP);
        let series_key = format!("{}\u{3}{}", stream_key(res, name, &s.labels, &[]), name);
        for x in &s.samples {
            let stale = is_stale_nan(x.value);
            let start = match sum_kind {
                None => 0,
                Some(_) => {
                    if let (false, Some(cv)) = (stale, self.created.get(&created_key).map(|c| c.0)) {
                        let ns = secs_to_ns(cv);
                        self.tracks.insert(
                            series_key.clone(),
                            Track { start_ns: ns, last: x.value, last_ts_ms: x.timestamp_ms, seen_ms: self.now_ms },
                        );
                        ns
                    } else {
                        self.start_time(&series_key, x.timestamp_ms, x.value, stale)
                    }
                }
            };
            let p = number_point(attrs.clone(), start, x.timestamp_ms, x.value);
            push_number(acc, name, md, kind, sum_kind, p);
        }
    }
}

enum Data {
    H(HistogramDataPoint),
    S(SummaryDataPoint),
}

fn parse_bound(s: &str) -> Option<f64> {
    match s.trim() {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        t => t.parse().ok(),
    }
}

fn number_point(attributes: Vec<KeyValue>, start: u64, ts_ms: i64, v: f64) -> NumberDataPoint {
    let stale = is_stale_nan(v);
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: ms_to_ns(ts_ms),
        flags: if stale { NO_RECORDED_VALUE } else { 0 },
        value: if stale { None } else { Some(number_data_point::Value::AsDouble(v)) },
        ..Default::default()
    }
}

fn new_metric(name: &str, md: Option<&Metadata>, kind: MetricType, data: metric::Data) -> Metric {
    Metric {
        name: name.to_string(),
        description: md.map(|m| m.help.to_string()).unwrap_or_default(),
        unit: md.map(|m| ucum_unit(&m.unit)).unwrap_or_default(),
        metadata: vec![kv("prometheus.type", kind.as_str())],
        data: Some(data),
    }
}

fn metric_slot<'a>(acc: &'a mut ResourceAcc, name: &str, make: impl FnOnce() -> Metric) -> &'a mut Metric {
    let i = match acc.index.get(name) {
        Some(i) => *i,
        None => {
            acc.metrics.push(make());
            acc.index.insert(name.to_string(), acc.metrics.len() - 1);
            acc.metrics.len() - 1
        }
    };
    &mut acc.metrics[i]
}

const CUMULATIVE: i32 = AggregationTemporality::Cumulative as i32;

fn push_number(
    acc: &mut ResourceAcc,
    name: &str,
    md: Option<&Metadata>,
    kind: MetricType,
    sum: Option<bool>,
    p: NumberDataPoint,
) {
    let m = metric_slot(acc, name, || {
        let data = match sum {
            Some(mono) => {
                metric::Data::Sum(Sum { data_points: vec![], aggregation_temporality: CUMULATIVE, is_monotonic: mono })
            }
            None => metric::Data::Gauge(Gauge { data_points: vec![] }),
        };
        new_metric(name, md, kind, data)
    });
    match &mut m.data {
        Some(metric::Data::Sum(s)) => s.data_points.push(p),
        Some(metric::Data::Gauge(g)) => g.data_points.push(p),
        _ => {}
    }
}

fn push_hist(acc: &mut ResourceAcc, name: &str, md: Option<&Metadata>, kind: MetricType, d: Data) {
    let m = metric_slot(acc, name, || {
        let data = match d {
            Data::H(_) => {
                metric::Data::Histogram(Histogram { data_points: vec![], aggregation_temporality: CUMULATIVE })
            }
            Data::S(_) => metric::Data::Summary(Summary { data_points: vec![] }),
        };
        new_metric(name, md, kind, data)
    });
    match (&mut m.data, d) {
        (Some(metric::Data::Histogram(h)), Data::H(p)) => h.data_points.push(p),
        (Some(metric::Data::Summary(s)), Data::S(p)) => s.data_points.push(p),
        _ => {}
    }
}

/// Data points in a request, for accounting.
pub fn data_points(req: &ExportMetricsServiceRequest) -> usize {
    req.resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(metric::Data::Gauge(g)) => g.data_points.len(),
            Some(metric::Data::Sum(s)) => s.data_points.len(),
            Some(metric::Data::Histogram(h)) => h.data_points.len(),
            Some(metric::Data::Summary(s)) => s.data_points.len(),
            Some(metric::Data::ExponentialHistogram(e)) => e.data_points.len(),
            None => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests;
