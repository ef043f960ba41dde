//! How a scraped series looks to a Collector component: the processors that
//! come from the Collector (`attributes`, `resource`, `filter`) speak of
//! resources, metrics, data points and attribute keys, and infertel carries
//! Prometheus series. This file is the one mapping between the two, the one
//! the Collector's own `prometheus` receiver and Prometheus' OTLP translator
//! (`otlptranslator`) agree on:
//!
//! - **Resource**: the target. `service.name` is the `job` label,
//!   `service.instance.id` the `instance` label. infertel has no separate
//!   resource: any other resource attribute a processor sets becomes a label
//!   on every series of the target, as the Collector's remote-write exporter
//!   sends it with `resource_to_telemetry_conversion` enabled.
//! - **Metric**: a family. A histogram's or summary's `_bucket`, `_sum`,
//!   `_count` (and `_created`) series are one metric named after the family;
//!   a counter keeps its `_total`; `type` is the Collector's data type
//!   (counter → Sum, gauge and untyped → Gauge, histogram → Histogram,
//!   summary → Summary, info and stateset → Sum).
//! - **Data point attributes**: the series' other labels, without
//!   `__name__`, `job`, `instance` and a bucket's `le` or a quantile's
//!   `quantile` (the Collector keeps those inside the point).
//! - **Attribute keys** become label names as Prometheus escapes them:
//!   every character outside `[a-zA-Z0-9_]` becomes `_`, a leading digit
//!   gets `key_` in front (`k8s.pod.name` → `k8s_pod_name`).

use infertel_model::{Labels, METRIC_NAME, MetricType};
use infertel_otlp::{MetadataStore, Role};
use std::borrow::Cow;

/// The Collector's metric data types, as OTTL names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    Gauge,
    Sum,
    Histogram,
    ExponentialHistogram,
    Summary,
    Empty,
}

impl DataType {
    /// The OTTL enum (`METRIC_DATA_TYPE_SUM`, ...).
    pub fn from_enum(s: &str) -> Option<DataType> {
        Some(match s {
            "METRIC_DATA_TYPE_GAUGE" => DataType::Gauge,
            "METRIC_DATA_TYPE_SUM" => DataType::Sum,
            "METRIC_DATA_TYPE_HISTOGRAM" => DataType::Histogram,
            "METRIC_DATA_TYPE_EXPONENTIAL_HISTOGRAM" => DataType::ExponentialHistogram,
            "METRIC_DATA_TYPE_SUMMARY" => DataType::Summary,
            "METRIC_DATA_TYPE_NONE" => DataType::Empty,
            _ => return None,
        })
    }

    /// The data type the Collector's `prometheus` receiver makes of a family.
    pub fn of(kind: MetricType) -> DataType {
        match kind {
            MetricType::Counter | MetricType::Info | MetricType::StateSet => DataType::Sum,
            MetricType::Histogram => DataType::Histogram,
            MetricType::Summary => DataType::Summary,
            // The receiver has no gauge histogram: each of its series
            // becomes a gauge point, `le` included.
            MetricType::Gauge | MetricType::Unknown | MetricType::GaugeHistogram => DataType::Gauge,
        }
    }

    /// pmetric.MetricType's number, which OTTL compares.
    pub fn code(self) -> i64 {
        match self {
            DataType::Empty => 0,
            DataType::Gauge => 1,
            DataType::Sum => 2,
            DataType::Histogram => 3,
            DataType::ExponentialHistogram => 4,
            DataType::Summary => 5,
        }
    }

    /// How the Collector's `debug` exporter and OTTL write it.
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::Gauge => "Gauge",
            DataType::Sum => "Sum",
            DataType::Histogram => "Histogram",
            DataType::ExponentialHistogram => "ExponentialHistogram",
            DataType::Summary => "Summary",
            DataType::Empty => "Empty",
        }
    }
}

/// The metric a series belongs to, as the Collector would name and type it.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricView {
    pub name: String,
    pub data_type: DataType,
    /// The Prometheus family type it came from.
    pub kind: MetricType,
    pub unit: String,
    pub description: String,
    /// The label the metric keeps inside its points (`le`, `quantile`).
    pub point_label: Option<&'static str>,
}

/// Resolves a series to its metric against the families seen so far.
pub fn metric_of(labels: &Labels, store: &MetadataStore) -> MetricView {
    let name = labels.metric_name();
    // The receiver looks a series' own name up first: an `X_created` that
    // has its own `# TYPE` (prometheus_client writes them as gauges) is a
    // gauge metric of its own, not a part of X.
    if let Some(md) = store.get(name).filter(|m| !matches!(m.kind, MetricType::Histogram | MetricType::GaugeHistogram))
    {
        return MetricView {
            name: name.to_string(),
            data_type: DataType::of(md.kind),
            kind: md.kind,
            unit: md.unit.to_string(),
            description: md.help.to_string(),
            point_label: (md.kind == MetricType::Summary).then_some("quantile"),
        };
    }
    let c = store.classify(name);
    let folded = matches!(c.role, Role::Bucket | Role::Sum | Role::Count | Role::Created)
        && matches!(c.kind, MetricType::Histogram | MetricType::Summary);
    let md = store.get(&c.family);
    let point_label = match (c.kind, c.role) {
        (MetricType::Histogram, Role::Bucket) => Some("le"),
        (MetricType::Summary, Role::Value) => Some("quantile"),
        _ => None,
    };
    MetricView {
        name: if folded { c.family.clone() } else { name.to_string() },
        data_type: DataType::of(c.kind),
        kind: c.kind,
        unit: md.map(|m| m.unit.to_string()).unwrap_or_default(),
        description: md.map(|m| m.help.to_string()).unwrap_or_default(),
        point_label,
    }
}

/// The label a resource attribute lives in.
pub fn resource_label(key: &str) -> Cow<'_, str> {
    match key {
        "service.name" => Cow::Borrowed("job"),
        "service.instance.id" => Cow::Borrowed("instance"),
        k => label_name(k),
    }
}

/// The label a data point attribute lives in.
pub fn attribute_label(key: &str) -> Cow<'_, str> {
    label_name(key)
}

/// An attribute key as a Prometheus label name (Prometheus'
/// `otlptranslator.NormalizeLabel`).
pub fn label_name(key: &str) -> Cow<'_, str> {
    let valid_chars = key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let leading_digit = key.as_bytes().first().is_some_and(u8::is_ascii_digit);
    if valid_chars && !leading_digit {
        return Cow::Borrowed(key);
    }
    let mut out = String::with_capacity(key.len() + 4);
    if leading_digit {
        out.push_str("key_");
    }
    out.extend(key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }));
    Cow::Owned(out)
}

/// True when a label is a data point attribute of a series whose metric keeps
/// `point_label` inside its points.
pub fn is_attribute(label: &str, point_label: Option<&str>) -> bool {
    !matches!(
        label,
        METRIC_NAME | "job" | "instance" | "otel_scope_name" | "otel_scope_version" | "otel_scope_schema_url"
    ) && Some(label) != point_label
}

/// The value of data point attribute `key` of a series.
pub fn attribute<'a>(labels: &'a Labels, key: &str, point_label: Option<&str>) -> Option<&'a str> {
    let l = attribute_label(key);
    if is_attribute(&l, point_label) { labels.get(&l) } else { None }
}

/// `server.address` and `server.port` as the receiver derives them from an
/// `instance` (no address for a loopback or unspecified host).
pub fn server_attribute<'a>(instance: &'a str, key: &str) -> Option<&'a str> {
    let (host, port) = instance.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match key {
        "server.address" => {
            Some(host).filter(|h| !matches!(*h, "localhost" | "0.0.0.0" | "::" | "::1") && !h.starts_with("127."))
        }
        "server.port" => Some(port),
        _ => None,
    }
}

/// The value of resource attribute `key` of a series.
pub fn resource_attribute<'a>(labels: &'a Labels, key: &str) -> Option<&'a str> {
    if matches!(key, "server.address" | "server.port") {
        return server_attribute(labels.get("instance")?, key);
    }
    let l = resource_label(key);
    if l == METRIC_NAME { None } else { labels.get(&l) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_model::Metadata;
    use std::sync::Arc;

    fn md(family: &str, kind: MetricType, unit: &str) -> Metadata {
        Metadata { family: Arc::from(family), kind, help: Arc::from("h"), unit: Arc::from(unit) }
    }

    #[test]
    fn keys_become_prometheus_label_names() {
        assert_eq!(label_name("k8s.pod.name"), "k8s_pod_name");
        assert_eq!(label_name("http-code"), "http_code");
        assert_eq!(label_name("2xx"), "key_2xx");
        assert_eq!(label_name("gpu"), "gpu");
        assert_eq!(resource_label("service.name"), "job");
        assert_eq!(resource_label("service.instance.id"), "instance");
        assert_eq!(resource_label("k8s.cluster.name"), "k8s_cluster_name");
    }

    #[test]
    fn families_fold_as_the_collector_receiver_folds_them() {
        let mut store = MetadataStore::default();
        store.update(&[
            md("vllm:time_to_first_token_seconds", MetricType::Histogram, ""),
            md("vllm:prompt_tokens", MetricType::Counter, "tokens"),
            md("DCGM_FI_DEV_POWER_USAGE", MetricType::Gauge, ""),
            md("rpc", MetricType::Summary, ""),
        ]);
        let l = |n: &str| Labels::from_pairs([("__name__", n), ("job", "vllm"), ("le", "0.1")]);
        let b = metric_of(&l("vllm:time_to_first_token_seconds_bucket"), &store);
        assert_eq!(
            (b.name.as_str(), b.data_type, b.point_label),
            ("vllm:time_to_first_token_seconds", DataType::Histogram, Some("le"))
        );
        let c = metric_of(&l("vllm:prompt_tokens_total"), &store);
        assert_eq!(
            (c.name.as_str(), c.data_type, c.unit.as_str()),
            ("vllm:prompt_tokens_total", DataType::Sum, "tokens")
        );
        assert_eq!(metric_of(&l("DCGM_FI_DEV_POWER_USAGE"), &store).data_type, DataType::Gauge);
        assert_eq!(metric_of(&l("rpc_count"), &store).name, "rpc");
        assert_eq!(metric_of(&l("rpc"), &store).point_label, Some("quantile"));
        // An X_created with its own TYPE line is its own gauge.
        store.update(&[md("vllm:time_to_first_token_seconds_created", MetricType::Gauge, "")]);
        let created = metric_of(&l("vllm:time_to_first_token_seconds_created"), &store);
        assert_eq!(
            (created.name.as_str(), created.data_type),
            ("vllm:time_to_first_token_seconds_created", DataType::Gauge)
        );
        // A series without metadata is an untyped gauge under its own name.
        let u = metric_of(&l("made_up"), &store);
        assert_eq!((u.name.as_str(), u.data_type), ("made_up", DataType::Gauge));
    }

    #[test]
    fn job_and_instance_are_resource_not_point_attributes() {
        let s = Labels::from_pairs([
            ("__name__", "x_bucket"),
            ("job", "j"),
            ("instance", "i:1"),
            ("le", "1"),
            ("model_name", "m"),
        ]);
        assert_eq!(attribute(&s, "job", None), None);
        assert_eq!(attribute(&s, "le", Some("le")), None);
        assert_eq!(attribute(&s, "model_name", Some("le")), Some("m"));
        assert_eq!(resource_attribute(&s, "service.name"), Some("j"));
        assert_eq!(resource_attribute(&s, "service.instance.id"), Some("i:1"));
        assert_eq!(resource_attribute(&s, "server.address"), Some("i"));
        assert_eq!(resource_attribute(&s, "server.port"), Some("1"));
        let local = Labels::from_pairs([("__name__", "x"), ("instance", "127.0.0.1:8000")]);
        assert_eq!(resource_attribute(&local, "server.address"), None);
        assert_eq!(resource_attribute(&local, "server.port"), Some("8000"));
    }
}
