//! The translation, on a request written in OTLP/JSON as the OTLP
//! specification's examples write it, against what Prometheus' translator
//! produces for it (its documented rules; see `translate.rs`).

use super::*;
use infertel_model::is_stale_nan;

fn req(json: &str) -> ExportMetricsServiceRequest {
    serde_json::from_str(json).expect("OTLP/JSON")
}

fn translator(yaml: &str) -> Translator {
    let cfg: OtlpReceiverConfig = serde_yaml::from_str(yaml).unwrap();
    Translator::new(&cfg)
}

fn find<'a>(b: &'a Batch, name: &str, extra: &[(&str, &str)]) -> Option<&'a Series> {
    b.series.iter().find(|s| s.labels.metric_name() == name && extra.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
}

const RESOURCE: &str = r#"{"attributes":[
  {"key":"service.name","value":{"stringValue":"vllm"}},
  {"key":"service.namespace","value":{"stringValue":"llm"}},
  {"key":"service.instance.id","value":{"stringValue":"pod-1"}},
  {"key":"k8s.node.name","value":{"stringValue":"gpu-3"}}]}"#;

fn one(metric: &str) -> String {
    format!(
        r#"{{"resourceMetrics":[{{"resource":{RESOURCE},"scopeMetrics":[{{"scope":{{"name":"vllm"}},"metrics":[{metric}]}}]}}]}}"#
    )
}

#[test]
fn types_names_and_the_resource_as_prometheus_maps_them() {
    let text = format!(
        r#"{{"resourceMetrics":[{{"resource":{RESOURCE},"scopeMetrics":[{{"metrics":[
  {{"name":"gen_ai.server.request.duration","unit":"s","description":"Request duration.","histogram":{{"aggregationTemporality":2,"dataPoints":[
    {{"attributes":[{{"key":"gen_ai.request.model","value":{{"stringValue":"llama"}}}}],"timeUnixNano":"1700000000123000000","count":"6","sum":4.5,"bucketCounts":["1","2","3"],"explicitBounds":[0.5,1000000]}}]}}}},
  {{"name":"vllm:generation_tokens","unit":"{{token}}","sum":{{"aggregationTemporality":2,"isMonotonic":true,"dataPoints":[
    {{"asInt":"1234","timeUnixNano":"1700000000123000000","attributes":[{{"key":"job","value":{{"stringValue":"not-this"}}}}]}}]}}}},
  {{"name":"queue.depth","sum":{{"aggregationTemporality":2,"isMonotonic":false,"dataPoints":[{{"asDouble":3,"timeUnixNano":"1700000000123000000"}}]}}}},
  {{"name":"gpu.utilization","unit":"1","gauge":{{"dataPoints":[{{"asDouble":0.25,"timeUnixNano":"1700000000123000000"}},{{"flags":1,"timeUnixNano":"1700000001123000000","attributes":[{{"key":"gpu","value":{{"intValue":"1"}}}}]}}]}}}},
  {{"name":"latency","summary":{{"dataPoints":[{{"timeUnixNano":"1700000000123000000","count":"3","sum":1.5,"quantileValues":[{{"quantile":0.5,"value":0.4}},{{"quantile":0.99,"value":0.9}}]}}]}}}}
]}}]}}]}}"#
    );
    let t = translator("protocols: {http: {}}").translate(&req(&text), 0);
    assert_eq!(t.rejected, 0, "{}", t.message);
    let b = &t.batch;
    let base = [("job", "llm/vllm"), ("instance", "pod-1")];
    let h = "gen_ai_server_request_duration_seconds";
    let bucket = |le: &str| {
        find(b, &format!("{h}_bucket"), &[("le", le), ("gen_ai_request_model", "llama")]).map(|s| s.samples[0].value)
    };
    assert_eq!(bucket("0.5"), Some(1.0));
    assert_eq!(bucket("1000000"), Some(3.0), "cumulative, le as a plain decimal");
    assert_eq!(bucket("+Inf"), Some(6.0), "+Inf is the point's count");
    assert_eq!(find(b, &format!("{h}_sum"), &base).map(|s| s.samples[0].value), Some(4.5));
    assert_eq!(
        find(b, &format!("{h}_count"), &base).map(|s| (s.samples[0].value, s.samples[0].timestamp_ms)),
        Some((6.0, 1_700_000_000_123))
    );
    let c = find(b, "vllm:generation_tokens_total", &base).expect("counter");
    assert_eq!(c.samples[0].value, 1234.0);
    assert_eq!(c.labels.get("job"), Some("llm/vllm"), "the resource's job wins over a point attribute");
    assert!(find(b, "queue_depth", &[]).is_some(), "a non-monotonic sum is a gauge without _total");
    assert_eq!(find(b, "gpu_utilization_ratio", &[]).map(|s| s.samples[0].value), Some(0.25));
    let stale = find(b, "gpu_utilization_ratio", &[("gpu", "1")]).expect("flagged point");
    assert!(is_stale_nan(stale.samples[0].value), "NoRecordedValue is a staleness marker");
    assert_eq!(find(b, "latency", &[("quantile", "0.99")]).map(|s| s.samples[0].value), Some(0.9));
    assert_eq!(find(b, "latency_count", &[]).map(|s| s.samples[0].value), Some(3.0));
    // The resource's other attributes: target_info, not every series.
    let ti = find(b, "target_info", &base).expect("target_info");
    assert_eq!(ti.labels.get("k8s_node_name"), Some("gpu-3"));
    assert!(c.labels.get("k8s_node_name").is_none());
    let md =
        |f: &str| b.metadata.iter().find(|m| &*m.family == f).map(|m| (m.kind, m.unit.to_string(), m.help.to_string()));
    assert_eq!(md(h), Some((MetricType::Histogram, "seconds".into(), "Request duration.".into())));
    assert_eq!(md("vllm:generation_tokens_total").map(|m| m.0), Some(MetricType::Counter));
    assert_eq!(md("queue_depth").map(|m| m.0), Some(MetricType::Gauge));
    assert_eq!(md("target_info").map(|m| m.2), Some("Target metadata".into()));
}

#[test]
fn no_translation_keeps_names_and_keys() {
    let m = r#"{"name":"vllm:num_requests_running","gauge":{"dataPoints":[{"asDouble":2,"timeUnixNano":"1","attributes":[{"key":"model.name","value":{"stringValue":"m"}}]}]}}"#;
    let t = translator("protocols: {http: {}}\notlp_translation_strategy: NoTranslation").translate(&req(&one(m)), 0);
    let s = find(&t.batch, "vllm:num_requests_running", &[("model.name", "m")]).expect("kept");
    assert_eq!(s.samples[0].timestamp_ms, 0, "1 ns is 0 ms");
}

#[test]
fn deltas_are_cumulated_or_refused_and_the_rest_is_said_in_the_partial_success() {
    let delta = |v: i64, t: u64| {
        one(&format!(
            r#"{{"name":"tokens","sum":{{"aggregationTemporality":1,"isMonotonic":true,"dataPoints":[{{"asInt":"{v}","timeUnixNano":"{t}000000000"}}]}}}}"#
        ))
    };
    let mut tr = translator("protocols: {http: {}}");
    let totals: Vec<f64> = [(3, 1), (4, 2), (5, 3)]
        .iter()
        .map(|(v, t)| find(&tr.translate(&req(&delta(*v, *t)), 0).batch, "tokens_total", &[]).unwrap().samples[0].value)
        .collect();
    assert_eq!(totals, vec![3.0, 7.0, 12.0]);
    let late = tr.translate(&req(&delta(1, 2)), 0);
    assert_eq!((late.rejected, late.rejected_by.get("delta_out_of_order").copied()), (1, Some(1)), "{}", late.message);

    let mut strict = translator("protocols: {http: {}}\ndelta: reject");
    let t = strict.translate(&req(&delta(3, 1)), 0);
    assert_eq!(t.rejected, 1);
    assert!(t.message.contains("delta temporality refused"), "{}", t.message);
    assert!(t.batch.series.is_empty());

    let mixed = format!(
        r#"{{"resourceMetrics":[{{"resource":{RESOURCE},"scopeMetrics":[{{"metrics":[
  {{"name":"ok","gauge":{{"dataPoints":[{{"asDouble":1,"timeUnixNano":"1"}}]}}}},
  {{"name":"eh","exponentialHistogram":{{"aggregationTemporality":2,"dataPoints":[{{"count":"1","scale":2}},{{"count":"2","scale":2}}]}}}},
  {{"name":"unspec","sum":{{"aggregationTemporality":0,"dataPoints":[{{"asDouble":1}}]}}}},
  {{"name":"@#$%","gauge":{{"dataPoints":[{{"asDouble":1}}]}}}}
]}}]}}]}}"#
    );
    let t = translator("protocols: {http: {}}").translate(&req(&mixed), 0);
    assert_eq!(t.rejected, 4, "{}", t.message);
    assert_eq!(t.rejected_by.get("exponential_histogram"), Some(&2));
    assert!(t.message.contains("invalid temporality and type combination for metric \"unspec\""), "{}", t.message);
    assert!(t.message.contains("resulted in empty name"), "{}", t.message);
    assert!(find(&t.batch, "ok", &[]).is_some());
}
