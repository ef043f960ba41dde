//! The Collector processors (`attributes`, `resource`, `filter`) on whole
//! batches, and their configs as public Collector configs write them.

use super::attributes::AttributesConfig;
use super::filter::{FilterConfig, FilterProcessor};
use super::resource::ResourceConfig;
use crate::consumer::{BoxFuture, Consumer};
use crate::telemetry::Telemetry;
use infertel_model::{Batch, Labels, Metadata, MetricType, Sample, Series, stale_nan};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Capture(Mutex<Vec<Batch>>);

impl Consumer for Capture {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(batch);
        Box::pin(async {})
    }
}

impl Capture {
    fn last(&self) -> Batch {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).last().cloned().unwrap_or_default()
    }
}

fn series(pairs: &[(&str, &str)], v: f64) -> Series {
    Series {
        labels: Labels::from_pairs(pairs.iter().copied()),
        samples: infertel_model::samples![Sample { timestamp_ms: 1_000, value: v }],
    }
}

fn md(family: &str, kind: MetricType) -> Metadata {
    Metadata { family: family.into(), kind, help: "".into(), unit: "".into() }
}

fn run(c: &dyn Consumer, b: Batch) {
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    rt.block_on(c.consume(b));
}

fn names(b: &Batch) -> Vec<String> {
    b.series.iter().map(|s| s.labels.to_string()).collect()
}

/// A DCGM scrape: two GPUs, a histogram family from vLLM, metadata.
fn scrape() -> Batch {
    let g = |gpu: &str, uuid: &str| {
        series(
            &[
                ("__name__", "DCGM_FI_DEV_POWER_USAGE"),
                ("job", "dcgm"),
                ("instance", "10.0.0.7:9400"),
                ("gpu", gpu),
                ("UUID", uuid),
                ("modelName", "NVIDIA L4"),
            ],
            70.0,
        )
    };
    let b = |le: &str, v: f64| {
        series(
            &[
                ("__name__", "vllm:e2e_request_latency_seconds_bucket"),
                ("job", "vllm"),
                ("instance", "10.0.0.7:8000"),
                ("le", le),
                ("model_name", "m"),
            ],
            v,
        )
    };
    Batch {
        series: vec![
            g("0", "GPU-aaaa"),
            g("1", "GPU-bbbb"),
            b("0.5", 3.0),
            b("+Inf", 5.0),
            series(
                &[
                    ("__name__", "vllm:e2e_request_latency_seconds_count"),
                    ("job", "vllm"),
                    ("instance", "10.0.0.7:8000"),
                    ("model_name", "m"),
                ],
                5.0,
            ),
            series(
                &[
                    ("__name__", "vllm:num_requests_running"),
                    ("job", "vllm"),
                    ("instance", "10.0.0.7:8000"),
                    ("model_name", "m"),
                ],
                2.0,
            ),
        ],
        metadata: vec![
            md("DCGM_FI_DEV_POWER_USAGE", MetricType::Gauge),
            md("vllm:e2e_request_latency_seconds", MetricType::Histogram),
            md("vllm:num_requests_running", MetricType::Gauge),
        ],
    }
}

fn attributes(yaml: &str, next: Arc<dyn Consumer>) -> Arc<dyn Consumer> {
    let c: AttributesConfig = serde_yaml::from_str(yaml).expect("yaml");
    c.build("attributes".into(), next, &Telemetry::new()).unwrap_or_else(|e| panic!("{e}"))
}

fn filter(yaml: &str, next: Arc<dyn Consumer>, t: &Telemetry) -> Arc<dyn Consumer> {
    let c: FilterConfig = serde_yaml::from_str(yaml).expect("yaml");
    FilterProcessor::new("filter".into(), &c, next, t).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn attributes_edit_point_attributes_of_the_metrics_include_selects() {
    let cap = Arc::new(Capture::default());
    let p = attributes(
        r#"
include: {match_type: regexp, metric_names: ['^DCGM_']}
actions:
  - {key: gpu.index, from_attribute: gpu, action: insert}
  - {key: modelName, pattern: '^NVIDIA (?P<gpu_family>\w+)$', action: extract}
  - {key: UUID, action: hash}
  - {key: le, value: "9", action: upsert}
"#,
        cap.clone(),
    );
    run(&*p, scrape());
    let out = cap.last();
    let first = &out.series[0].labels;
    assert_eq!(first.get("gpu_index"), Some("0"));
    assert_eq!(first.get("gpu_family"), Some("L4"));
    // echo -n GPU-aaaa | sha256sum
    assert_eq!(first.get("UUID"), Some("6cd51d044073a8062b884092e0ddca48fff3cab2a83ec90754f3960ef13ffa94"));
    assert_eq!(first.get("le"), Some("9"), "DCGM has no le: upsert adds it");
    // The vLLM series are not selected: untouched, their le too.
    assert_eq!(
        names(&out)[2],
        r#"vllm:e2e_request_latency_seconds_bucket{instance="10.0.0.7:8000",job="vllm",le="0.5",model_name="m"}"#
    );
}

#[test]
fn a_bucket_keeps_its_le_and_job_is_not_a_point_attribute() {
    let cap = Arc::new(Capture::default());
    let p = attributes("actions: [{pattern: '.*', action: delete}]", cap.clone());
    run(&*p, scrape());
    let out = names(&cap.last());
    assert!(
        out.contains(
            &r#"vllm:e2e_request_latency_seconds_bucket{instance="10.0.0.7:8000",job="vllm",le="+Inf"}"#.to_string()
        ),
        "{out:?}"
    );
    // Deleting every attribute makes the two GPUs' series equal: the second
    // is dropped and counted, not sent as a duplicate.
    assert_eq!(out.iter().filter(|n| n.starts_with("DCGM_FI_DEV_POWER_USAGE")).count(), 1, "{out:?}");
}

#[test]
fn duplicates_made_by_actions_are_counted() {
    let cap = Arc::new(Capture::default());
    let t = Telemetry::new();
    let c: AttributesConfig =
        serde_yaml::from_str("actions: [{key: gpu, action: delete}, {key: UUID, action: delete}]").expect("yaml");
    let p = c.build("attributes/strip".into(), cap.clone(), &t).expect("build");
    run(&*p, scrape());
    run(&*p, scrape());
    let text = t.render();
    assert!(
        text.contains(
            r#"infertel_processor_dropped_samples_total{processor="attributes/strip",reason="duplicate_series"} 2"#
        ),
        "{text}"
    );
}

#[test]
fn resource_attributes_are_target_labels() {
    let cap = Arc::new(Capture::default());
    let c: ResourceConfig = serde_yaml::from_str(
        r#"
attributes:
  - {key: k8s.cluster.name, value: gpu-east, action: insert}
  - {key: service.name, value: not-this, action: insert}
  - {key: service.namespace, from_attribute: service.name, action: upsert}
  - {key: host.port, from_attribute: server.port, action: insert}
"#,
    )
    .expect("yaml");
    let p = c.build("resource".into(), cap.clone(), &Telemetry::new()).expect("build");
    run(&*p, scrape());
    let l = &cap.last().series[5].labels;
    assert_eq!(l.get("k8s_cluster_name"), Some("gpu-east"));
    assert_eq!(l.get("job"), Some("vllm"), "insert does not replace the job");
    assert_eq!(l.get("service_namespace"), Some("vllm"));
    assert_eq!(l.get("host_port"), Some("8000"));
}

#[test]
fn filter_drops_metrics_whole_and_points_one_by_one() {
    let cap = Arc::new(Capture::default());
    let t = Telemetry::new();
    let p = filter(
        r#"
error_mode: ignore
metrics:
  metric:
    - 'type == METRIC_DATA_TYPE_HISTOGRAM'
  datapoint:
    - 'metric.name == "DCGM_FI_DEV_POWER_USAGE" and attributes["gpu"] == "1"'
"#,
        cap.clone(),
        &t,
    );
    run(&*p, scrape());
    let out = names(&cap.last());
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out[0].contains(r#"gpu="0""#) && out[1].starts_with("vllm:num_requests_running"), "{out:?}");
    assert!(t.render().contains(r#"infertel_processor_filter_dropped_samples_total{processor="filter"} 4"#));
}

#[test]
fn filter_reads_metadata_sent_in_an_earlier_batch() {
    // The receiver sends family metadata about once a minute, not with
    // every scrape: the filter remembers it.
    let cap = Arc::new(Capture::default());
    let p = filter("metrics: {metric: ['type == METRIC_DATA_TYPE_HISTOGRAM']}", cap.clone(), &Telemetry::new());
    run(&*p, scrape());
    let mut later = scrape();
    later.metadata.clear();
    run(&*p, later);
    assert_eq!(cap.last().series.len(), 3);
}

#[test]
fn has_attr_on_datapoint_looks_at_the_metric_of_that_target() {
    let cap = Arc::new(Capture::default());
    let p = filter(r#"metrics: {metric: ['HasAttrOnDatapoint("gpu", "1")']}"#, cap.clone(), &Telemetry::new());
    run(&*p, scrape());
    let out = names(&cap.last());
    // gpu="0" comes first and decides, as contrib's first-point rule reads.
    assert_eq!(out.iter().filter(|n| n.starts_with("DCGM")).count(), 2, "{out:?}");
    let p = filter(r#"metrics: {metric: ['HasAttrKeyOnDatapoint("UUID")']}"#, cap.clone(), &Telemetry::new());
    run(&*p, scrape());
    assert_eq!(cap.last().series.len(), 4, "both GPU series go with their metric");
}

#[test]
fn value_conditions_let_staleness_markers_through() {
    let cap = Arc::new(Capture::default());
    let p = filter("metrics: {datapoint: ['value_double < 3']}", cap.clone(), &Telemetry::new());
    let mut b = scrape();
    b.series[5].samples[0].value = stale_nan();
    run(&*p, b);
    let out = names(&cap.last());
    assert!(out.iter().any(|n| n.starts_with("vllm:num_requests_running")), "the marker follows its series: {out:?}");
    // The histogram's points have no value_double (nil): kept.
    assert_eq!(out.iter().filter(|n| n.contains("e2e_request")).count(), 3, "{out:?}");
}

#[test]
fn legacy_include_exclude() {
    let cap = Arc::new(Capture::default());
    let p = filter(
        r#"
metrics:
  include: {match_type: regexp, metric_names: ['^vllm:']}
  exclude: {match_type: strict, metric_names: ['vllm:num_requests_running']}
"#,
        cap.clone(),
        &Telemetry::new(),
    );
    run(&*p, scrape());
    let out = names(&cap.last());
    assert_eq!(out.len(), 3, "{out:?}");
    assert!(out.iter().all(|n| n.starts_with("vllm:e2e_request_latency_seconds")), "{out:?}");
}

/// The processors block of the Collector's configuration page
/// (opentelemetry.io/docs/collector/configuration/, "Processors"), as
/// published; its `traces` and `logs` parts are other signals and refused
/// with their line, the rest loads.
#[test]
fn the_collector_docs_processors_block() {
    let published = r#"
receivers: {prometheus: {config: {scrape_configs: [{job_name: a, static_configs: [{targets: ['h:1']}]}]}}}
processors:
  # Data sources: traces
  attributes:
    actions:
      - key: environment
        value: production
        action: insert
      - key: db.statement
        action: delete
      - key: email
        action: hash

  # Data sources: traces, metrics, logs
  filter/ottl:
    error_mode: ignore
    metrics:
      metric:
        - 'name == "my.metric" and resource.attributes["my_label"] == "abc123"'
        - 'type == METRIC_DATA_TYPE_HISTOGRAM'
      datapoint:
        - 'metric.type == METRIC_DATA_TYPE_SUMMARY'
        - 'resource.attributes["service.name"] == "my_service_name"'
    logs:
      log_record:
        - 'IsMatch(body, ".*password.*")'
        - 'severity_number < SEVERITY_NUMBER_WARN'

  # Data sources: traces
  resource:
    attributes:
      - key: cloud.zone
        value: zone-1
        action: upsert
      - key: k8s.cluster.name
        from_attribute: k8s-cluster
        action: insert
      - key: redundant-attribute
        action: delete
exporters: {debug: {}}
service:
  pipelines: {metrics: {receivers: [prometheus], processors: [attributes, filter/ottl, resource], exporters: [debug]}}
"#;
    let refused = crate::load_str("c.yaml", published, &|_| None).err().map(|r| r.errors).unwrap_or_default();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].path, "processors.filter/ottl.logs");
    assert_eq!(refused[0].line, Some(25));
    assert!(refused[0].message.contains("infertel carries metrics"), "{}", refused[0].message);
    let metrics_only = published
        .lines()
        .filter(|l| {
            !l.contains("logs:") && !l.contains("log_record") && !l.contains("password") && !l.contains("SEVERITY")
        })
        .collect::<Vec<_>>()
        .join("\n");
    crate::load_str("c.yaml", &metrics_only, &|_| None).unwrap_or_else(|r| panic!("{:?}", r.errors));
}

#[test]
fn every_processor_error_in_one_run_at_its_line() {
    let text = r#"
receivers: {prometheus: {config: {scrape_configs: [{job_name: a, static_configs: [{targets: ['h:1']}]}]}}}
processors:
  attributes:
    actions:
      - key: a
        action: upsert
  resource:
    attributes:
      - key: b
        value: x
        action: rename
  filter:
    metrics:
      datapoint:
        - 'metric.name == "x"'
        - 'Len(attributes["a"]) > 3'
exporters: {debug: {}}
service:
  pipelines: {metrics: {receivers: [prometheus], processors: [attributes, resource, filter], exporters: [debug]}}
"#;
    let errors = crate::load_str("c.yaml", text, &|_| None).err().map(|r| r.errors).unwrap_or_default();
    let got: Vec<(String, Option<usize>)> = errors.iter().map(|e| (e.path.clone(), e.line)).collect();
    assert!(got.contains(&("processors.attributes.actions[0]".into(), Some(6))), "{got:?}");
    assert!(got.contains(&("processors.resource.attributes[0].action".into(), Some(12))), "{got:?}");
    assert!(got.contains(&("processors.filter.metrics.datapoint[1]".into(), Some(17))), "{got:?}");
    let len = errors.iter().find(|e| e.path.ends_with("datapoint[1]")).map(|e| e.message.clone()).unwrap_or_default();
    assert!(len.contains("\"Len\" is not supported") && len.contains("IsMatch"), "{len}");
}

/// resourcedetection: what a refresh detects replaces the resource on the
/// series that follow (here the detected set is given directly: detection
/// itself is tested in its detectors and end to end).
#[test]
fn a_refreshed_resource_applies_to_the_next_batches() {
    let cfg = super::resourcedetection::ResourceDetectionConfig::default();
    let out = Arc::new(Capture::default());
    let p = cfg.build("resourcedetection".into(), out.clone(), &Telemetry::new(), true).unwrap();
    let batch = || Batch {
        series: vec![series(&[("__name__", "x"), ("job", "vllm"), ("instance", "h:1")], 1.0)],
        metadata: vec![],
    };
    run(p.as_ref(), batch());
    assert_eq!(out.last().series[0].labels.get("host_name"), None, "a dry build detects nothing");
    p.replace(vec![("host.name".into(), "gpu-1".into())]);
    run(p.as_ref(), batch());
    assert_eq!(out.last().series[0].labels.get("host_name"), Some("gpu-1"));
    p.replace(vec![("host.name".into(), "gpu-2".into())]);
    run(p.as_ref(), batch());
    assert_eq!(out.last().series[0].labels.get("host_name"), Some("gpu-2"));
}
