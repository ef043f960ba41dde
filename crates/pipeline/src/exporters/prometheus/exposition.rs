//! Writes the store out as the Prometheus text format 0.0.4, or as
//! OpenMetrics 1.0 when enabled and asked for: families grouped, each with
//! its `# HELP` and `# TYPE` (OpenMetrics: `# UNIT` too, and `# EOF`),
//! series sorted, a histogram's buckets in `le` order before its `_count`
//! and `_sum`. Names and labels are the scraped ones, with the namespace
//! before every name and the constant labels added.
//!
//! The two formats name a counter differently: the text format's family is
//! the sample name (`x_total`), OpenMetrics' the name without `_total`.
//! A counter without `_total` (TGI's) cannot be an OpenMetrics counter, so it
//! is served there as `unknown`, under its own name. `_created` series are
//! their own gauges in the text format.

use super::store::{Latest, Store};
use infertel_exposition::format_value;
use infertel_model::{Labels, METRIC_NAME, MetricType};
use infertel_otlp::Role;
use std::collections::BTreeMap;
use std::fmt::Write;

pub struct Options<'a> {
    pub namespace: &'a str,
    pub const_labels: &'a BTreeMap<String, String>,
    pub send_timestamps: bool,
    pub openmetrics: bool,
}

/// One `# TYPE` block.
struct Group<'s> {
    kind: &'static str,
    /// The name whose metadata gives HELP and UNIT.
    meta: String,
    rows: Vec<(&'s Labels, &'s Latest, Role)>,
}

fn is_legacy_name(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_' || ch == ':')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
}

/// The page, and how many series it left out for a name neither format can
/// carry unquoted.
pub fn render(store: &Store, o: &Options) -> (String, usize) {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut skipped = 0;
    for (labels, latest) in &store.series {
        let name = labels.metric_name();
        if !is_legacy_name(name) {
            skipped += 1;
            continue;
        }
        let c = store.metadata.classify(name);
        let (family, kind, meta) = if o.openmetrics { om_family(name, &c) } else { text_family(name, &c) };
        let g = groups.entry(family).or_insert_with(|| Group { kind, meta, rows: Vec::new() });
        g.rows.push((labels, latest, c.role));
    }
    let mut out = String::with_capacity(store.series.len() * 96);
    for (family, mut g) in groups {
        g.rows.sort_by(|a, b| row_key(a.0, a.2).partial_cmp(&row_key(b.0, b.2)).unwrap_or(std::cmp::Ordering::Equal));
        let md = store.metadata.get(&g.meta);
        let full = prefixed(o.namespace, &family);
        if let Some(m) = md
            && !m.help.is_empty()
        {
            let _ = writeln!(out, "# HELP {full} {}", escape_help(&m.help, o.openmetrics));
        }
        let _ = writeln!(out, "# TYPE {full} {}", g.kind);
        if o.openmetrics
            && let Some(m) = md
            && !m.unit.is_empty()
            && family.ends_with(&format!("_{}", m.unit))
        {
            let _ = writeln!(out, "# UNIT {full} {}", m.unit);
        }
        for (labels, latest, _) in &g.rows {
            write_sample(&mut out, labels, latest, o);
        }
    }
    if o.openmetrics {
        out.push_str("# EOF\n");
    }
    (out, skipped)
}

fn text_family(name: &str, c: &infertel_otlp::Classified) -> (String, &'static str, String) {
    match (c.kind, c.role) {
        (_, Role::Created) => (name.to_string(), "gauge", name.to_string()),
        (MetricType::Histogram, _) => (c.family.clone(), "histogram", c.family.clone()),
        (MetricType::Summary, _) => (c.family.clone(), "summary", c.family.clone()),
        (MetricType::Counter, _) => (name.to_string(), "counter", c.family.clone()),
        (MetricType::Gauge | MetricType::Info | MetricType::StateSet, _) => {
            (name.to_string(), "gauge", c.family.clone())
        }
        _ => (name.to_string(), "untyped", c.family.clone()),
    }
}

fn om_family(name: &str, c: &infertel_otlp::Classified) -> (String, &'static str, String) {
    let meta = c.family.clone();
    match c.kind {
        MetricType::Counter => {
            let base = c.family.strip_suffix("_total").unwrap_or(&c.family).to_string();
            let fits = match c.role {
                Role::Created => name == format!("{base}_created"),
                _ => name == format!("{base}_total"),
            };
            if fits { (base, "counter", meta) } else { (name.to_string(), "unknown", meta) }
        }
        MetricType::Histogram => (c.family.clone(), "histogram", meta),
        MetricType::GaugeHistogram => (c.family.clone(), "gaugehistogram", meta),
        MetricType::Summary => (c.family.clone(), "summary", meta),
        MetricType::Info => (c.family.clone(), "info", meta),
        MetricType::StateSet => (name.to_string(), "stateset", meta),
        MetricType::Gauge => (name.to_string(), "gauge", meta),
        MetricType::Unknown => (name.to_string(), "unknown", meta),
    }
}

/// Series of one family: by their labels (without the name and `le` or
/// `quantile`), then buckets (by `le`), count, sum, created.
fn row_key(labels: &Labels, role: Role) -> (Vec<(&str, &str)>, u8, f64) {
    let rest: Vec<(&str, &str)> = labels
        .iter()
        .filter(|l| &*l.name != METRIC_NAME && &*l.name != "le" && &*l.name != "quantile")
        .map(|l| (&*l.name, &*l.value))
        .collect();
    let rank = match role {
        Role::Bucket | Role::Value => 0,
        Role::Count => 1,
        Role::Sum => 2,
        Role::Created => 3,
    };
    let bound = labels.get("le").or_else(|| labels.get("quantile")).map_or(0.0, parse_bound);
    (rest, rank, bound)
}

fn parse_bound(s: &str) -> f64 {
    match s {
        "+Inf" | "Inf" | "+inf" => f64::INFINITY,
        "-Inf" | "-inf" => f64::NEG_INFINITY,
        other => other.parse().unwrap_or(f64::NAN),
    }
}

fn prefixed(ns: &str, name: &str) -> String {
    if ns.is_empty() { name.to_string() } else { format!("{ns}_{name}") }
}

fn write_sample(out: &mut String, labels: &Labels, latest: &Latest, o: &Options) {
    out.push_str(&prefixed(o.namespace, labels.metric_name()));
    let mut first = true;
    let mut pair = |out: &mut String, n: &str, v: &str| {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(n);
        out.push_str("=\"");
        escape_value(out, v);
        out.push('"');
    };
    // Both lists are sorted by name: merge, the series' own label winning.
    let own: Vec<(&str, &str)> =
        labels.iter().filter(|l| &*l.name != METRIC_NAME).map(|l| (&*l.name, &*l.value)).collect();
    let mut consts = o.const_labels.iter().filter(|(k, _)| labels.get(k).is_none()).peekable();
    for (n, v) in own {
        while let Some((k, cv)) = consts.next_if(|(k, _)| k.as_str() < n) {
            pair(out, k, cv);
        }
        pair(out, n, v);
    }
    for (k, cv) in consts {
        pair(out, k, cv);
    }
    if !first {
        out.push('}');
    }
    out.push(' ');
    out.push_str(&format_value(latest.value));
    if o.send_timestamps {
        if o.openmetrics {
            let _ =
                write!(out, " {}.{:03}", latest.timestamp_ms.div_euclid(1000), latest.timestamp_ms.rem_euclid(1000));
        } else {
            let _ = write!(out, " {}", latest.timestamp_ms);
        }
    }
    out.push('\n');
}

fn escape_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(h: &str, openmetrics: bool) -> String {
    let mut s = String::with_capacity(h.len());
    for c in h.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '"' if openmetrics => s.push_str("\\\""),
            c => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_exposition::{Format, parse};
    use infertel_model::{Batch, Label, Metadata, Sample, Series};
    use std::time::Instant;

    /// A scrape of `text`, as the receiver hands it on: series and metadata.
    fn batch_of(text: &str, format: Format) -> Batch {
        let e = parse(text.as_bytes(), format).expect("parse");
        let mut b = Batch::default();
        for f in &e.families {
            b.metadata.push(Metadata {
                family: f.name.to_string().into(),
                kind: f.kind,
                help: f.help.as_deref().unwrap_or("").into(),
                unit: f.unit.as_deref().unwrap_or("").into(),
            });
        }
        for s in &e.samples {
            let mut l: Vec<Label> = e.labels(s).iter().map(|(n, v)| Label::new(&**n, &**v)).collect();
            l.push(Label::new(METRIC_NAME, &*s.name));
            b.series.push(Series {
                labels: Labels::from_vec(l),
                samples: infertel_model::samples![Sample { timestamp_ms: 1_700_000_000_123, value: s.value }],
            });
        }
        b
    }

    const TEXT: &str = "# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"m\"} 1234\n# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.\n# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"10.0\",model_name=\"m\"} 7\nvllm:e2e_request_latency_seconds_bucket{le=\"2.5\",model_name=\"m\"} 5\nvllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 8\nvllm:e2e_request_latency_seconds_sum{model_name=\"m\"} 30.5\nvllm:e2e_request_latency_seconds_count{model_name=\"m\"} 8\n";

    #[test]
    fn text_format_groups_families_and_orders_buckets() {
        let mut st = Store::default();
        st.apply(&batch_of(TEXT, Format::PrometheusText), Instant::now());
        let consts: BTreeMap<String, String> = [("cluster".to_string(), "east".to_string())].into();
        let o = Options { namespace: "", const_labels: &consts, send_timestamps: false, openmetrics: false };
        let (page, skipped) = render(&st, &o);
        assert_eq!(skipped, 0);
        let want = "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.\n# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{cluster=\"east\",le=\"2.5\",model_name=\"m\"} 5\nvllm:e2e_request_latency_seconds_bucket{cluster=\"east\",le=\"10.0\",model_name=\"m\"} 7\nvllm:e2e_request_latency_seconds_bucket{cluster=\"east\",le=\"+Inf\",model_name=\"m\"} 8\nvllm:e2e_request_latency_seconds_count{cluster=\"east\",model_name=\"m\"} 8\nvllm:e2e_request_latency_seconds_sum{cluster=\"east\",model_name=\"m\"} 30.5\n# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{cluster=\"east\",model_name=\"m\"} 3\n# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{cluster=\"east\",model_name=\"m\"} 1234\n";
        assert_eq!(page, want);
        // What it wrote parses back, as Prometheus' parser would read it.
        let again = batch_of(&page, Format::PrometheusText);
        assert_eq!(again.series.len(), 7);
    }

    #[test]
    fn openmetrics_names_counters_without_total_and_ends_with_eof() {
        let mut st = Store::default();
        st.apply(&batch_of(TEXT, Format::PrometheusText), Instant::now());
        st.apply(
            &batch_of("# TYPE tgi_request_count counter\ntgi_request_count 4\n# TYPE weird_label gauge\nweird_label{path=\"a\\\\b \\\"c\\\"\\n\"} 1\n", Format::PrometheusText),
            Instant::now(),
        );
        let none = BTreeMap::new();
        let o = Options { namespace: "gpu", const_labels: &none, send_timestamps: true, openmetrics: true };
        let (page, _) = render(&st, &o);
        assert!(page.contains("# TYPE gpu_vllm:prompt_tokens counter\ngpu_vllm:prompt_tokens_total{model_name=\"m\"} 1234 1700000000.123\n"), "{page}");
        assert!(
            page.contains("# TYPE gpu_tgi_request_count unknown\ngpu_tgi_request_count 4 1700000000.123\n"),
            "{page}"
        );
        assert!(page.contains("gpu_weird_label{path=\"a\\\\b \\\"c\\\"\\n\"} 1"), "{page}");
        assert!(page.ends_with("# EOF\n"));
        // The OpenMetrics parser (the conformance suite's) takes it.
        let back = batch_of(&page, Format::OpenMetrics);
        assert_eq!(back.series.len(), 9, "{page}");
    }
}
