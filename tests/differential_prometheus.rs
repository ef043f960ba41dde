//! Differential: a real Prometheus scrapes the same targets itself, with the
//! same scrape configs (relabel_configs and metric_relabel_configs
//! exercising every action, a file_sd target list, an OpenMetrics target,
//! honor_labels on and off, broken targets); the series it stores (names,
//! labels, values, `up`) must equal what infertel delivered to a second
//! Prometheus over remote write.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;
use support::*;

type LabelSet = BTreeMap<String, String>;

const OPENMETRICS_BODY: &str = r#"# TYPE om_requests counter
# HELP om_requests Requests served.
om_requests_total{code="200"} 1027
om_requests_created{code="200"} 1.7e+09
om_requests_total{code="500"} 3 # {trace_id="abc"} 1.0
# TYPE om_temperature_celsius gauge
# UNIT om_temperature_celsius celsius
om_temperature_celsius 21.5
# TYPE om_latency_seconds histogram
om_latency_seconds_bucket{le="0.1"} 5
om_latency_seconds_bucket{le="1.0"} 9
om_latency_seconds_bucket{le="+Inf"} 10
om_latency_seconds_sum 4.5
om_latency_seconds_count 10
# TYPE om_rpc summary
om_rpc{quantile="0.5"} 0.2
om_rpc_sum 12.0
om_rpc_count 40
# TYPE om_build info
om_build_info{version="1.2.3"} 1
# TYPE om_state stateset
om_state{om_state="ready"} 1
om_state{om_state="busy"} 0
# EOF
"#;

const CLASHING_BODY: &str =
    "# TYPE clash gauge\nclash{job=\"original\",instance=\"foo\",kind=\"x\"} 7\nclash{kind=\"y\"} 8\n";

fn scrape_configs(addr: &str, sd_file: &str) -> String {
    format!(
        r#"
  - job_name: vllm-static
    metrics_path: /vllm
    static_configs:
      - targets: ['{addr}']
        labels: {{node: gpu-1, Env: PROD}}
    relabel_configs:
      - {{source_labels: [__address__], modulus: 8, target_label: __tmp_hash, action: hashmod}}
      - {{source_labels: [__tmp_hash], regex: '.*', target_label: addr_hash, replacement: 'h$1'}}
      - {{source_labels: [Env], target_label: env, action: lowercase}}
      - {{regex: Env, action: labeldrop}}
    metric_relabel_configs:
      - {{source_labels: [__name__], regex: 'python_.*|process_.*', action: drop}}
      - {{source_labels: [__name__], regex: 'vllm:(.*)', target_label: vllm_metric, replacement: '$1'}}
      - {{regex: 'model_(.*)', replacement: 'm_$1', action: labelmap}}
      - {{regex: 'engine|model_name', action: labeldrop}}
      - {{source_labels: [handler], target_label: handler_upper, action: uppercase}}
      - {{source_labels: [method], target_label: method_lower, action: lowercase}}
      - {{source_labels: [__name__], modulus: 4, target_label: shard, action: hashmod}}
      - {{source_labels: [finished_reason], regex: 'abort', action: drop}}
  - job_name: dcgm-keep
    metrics_path: /dcgm
    static_configs: [{{targets: ['{addr}']}}]
    metric_relabel_configs:
      - {{source_labels: [__name__], regex: 'DCGM_FI_(DEV|PROF)_.*', action: keep}}
      - {{regex: '__name__|gpu|UUID|Hostname|modelName|device|instance|job', action: labelkeep}}
      - {{source_labels: [__name__], regex: 'DCGM_FI_DEV_GPU_TEMP', target_label: gpu_copy, replacement: '${{1}}0'}}
      - {{source_labels: [gpu], target_label: gpu_copy, action: dropequal}}
      - {{source_labels: [__name__], regex: 'DCGM_FI_DEV_SM_CLOCK|DCGM_FI_DEV_MEM_CLOCK', target_label: same, replacement: 'x'}}
      - {{source_labels: [same], regex: 'x', target_label: same2, replacement: 'x'}}
      - {{source_labels: [same], target_label: same2, action: keepequal}}
  - job_name: fixtures-file-sd
    file_sd_configs:
      - files: ['{sd_file}']
        refresh_interval: 1m
    relabel_configs:
      - {{source_labels: [fixture], regex: 'skip-.*', action: drop}}
      - {{source_labels: [__meta_filepath], regex: '.*/(.*)', target_label: sd_file, replacement: '$1'}}
  - job_name: openmetrics
    metrics_path: /om
    static_configs: [{{targets: ['{addr}']}}]
  - job_name: honor
    honor_labels: true
    metrics_path: /clash
    static_configs: [{{targets: ['{addr}']}}]
  - job_name: clash
    metrics_path: /clash
    static_configs: [{{targets: ['{addr}']}}]
  - job_name: broken-body
    metrics_path: /broken
    static_configs: [{{targets: ['{addr}']}}]
  - job_name: not-found
    metrics_path: /nothing-here
    static_configs: [{{targets: ['{addr}']}}]
"#
    )
}

fn stored(p: &Prometheus) -> BTreeMap<LabelSet, String> {
    p.query(r#"{__name__=~".+"}"#).into_iter().collect()
}

#[test]
fn infertel_stores_what_prometheus_stores() {
    let targets = Targets::start();
    let addr = targets.addr.to_string();
    let real = shared_dir().join("fixtures/real");
    let read = |f: &str| std::fs::read(real.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    targets.set("/vllm", TEXT_004, read("vllm-v0.17-cncf-k8s-ai-conformance-kops.prom"));
    targets.set("/dcgm", TEXT_004, read("dcgm-exporter-lke-rtx4000ada-k8s-pod-labels.prom"));
    targets.set("/om", OPENMETRICS, OPENMETRICS_BODY);
    targets.set("/clash", TEXT_004, CLASHING_BODY);
    targets.set("/broken", TEXT_004, "1234notvali}{ 444\n");
    let mut sd = Vec::new();
    for (i, f) in [
        "vllm-v0.5-v0engine-datadog-integrations-core.prom",
        "dcgm-exporter-2.x-nvidia-docs-a100-mig-partial.prom",
        "dcgm-exporter-kops-l4.prom",
    ]
    .iter()
    .enumerate()
    {
        targets.set(&format!("/sd{i}"), TEXT_004, read(f));
        sd.push(format!(r#"{{"targets": ["{addr}"], "labels": {{"__metrics_path__": "/sd{i}", "fixture": "{f}"}}}}"#));
    }
    sd.push(format!(r#"{{"targets": ["{addr}"], "labels": {{"__metrics_path__": "/sd0", "fixture": "skip-me"}}}}"#));
    let sd_dir = tempfile::tempdir().unwrap();
    let sd_file = sd_dir.path().join("targets.json");
    std::fs::write(&sd_file, format!("[{}]", sd.join(","))).unwrap();
    let scrape = scrape_configs(&addr, &sd_file.display().to_string());

    let oracle = Prometheus::start(&scrape);
    let sink = Prometheus::start("");
    let indented: String = scrape.lines().map(|l| format!("      {l}\n")).collect();
    let config = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
{indented}
exporters:
  prometheusremotewrite:
    endpoint: {}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        sink.write_url()
    );
    let agent = Agent::start(&config);

    // Both have scraped every job at least twice once up exists for all 10
    // targets and the counts agree for a while.
    let jobs = 10;
    let (want, got) = wait_until("the same series in both", Duration::from_secs(60), || {
        let a = stored(&oracle);
        let b = stored(&sink);
        let ups = |m: &BTreeMap<LabelSet, String>| m.keys().filter(|l| l["__name__"] == "up").count();
        (ups(&a) == jobs && ups(&b) == jobs && a.len() == b.len()).then_some((a, b))
    });
    let timing = ["scrape_duration_seconds", "scrape_series_added"];
    let mut diffs = Vec::new();
    for (l, v) in &want {
        match got.get(l) {
            None => diffs.push(format!("missing in infertel's: {l:?} = {v}")),
            Some(g) if !timing.contains(&l["__name__"].as_str()) && g != v => {
                diffs.push(format!("value differs: {l:?}: prometheus {v}, infertel {g}"))
            }
            _ => {}
        }
    }
    for l in got.keys().filter(|l| !want.contains_key(*l)) {
        diffs.push(format!("only in infertel's: {l:?}"));
    }
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}\nagent log:\n{}",
        diffs.len(),
        diffs.join("\n"),
        agent.proc.log_text()
    );

    // The cases that must fail the scrape did, in both.
    for job in ["broken-body", "not-found"] {
        let up: Vec<_> =
            want.iter().filter(|(l, _)| l["__name__"] == "up" && l["job"] == job).map(|(_, v)| v.clone()).collect();
        assert_eq!(up, ["0"], "{job}");
    }
    // And the interesting renamings really happened (so the test is not
    // passing on two empty stores).
    assert!(want.keys().any(|l| l.contains_key("exported_job")), "clash job: no exported_job");
    assert!(want.keys().any(|l| l.get("vllm_metric").is_some_and(|v| v == "generation_tokens_total")));
    assert!(want.keys().any(|l| l.contains_key("m_name")));
    assert!(want.keys().any(|l| l.get("sd_file").is_some_and(|v| v == "targets.json")));
    assert!(!want.keys().any(|l| l.get("fixture").is_some_and(|v| v == "skip-me")));
    assert!(want.keys().any(|l| l["__name__"] == "om_requests_total"));
    println!(
        "{} series identical (names, labels, values) in Prometheus's own scrape and infertel's remote write",
        want.len()
    );
    assert!(agent.self_metric("infertel_receiver_scrape_errors_total", &[("reason", "parse")]) >= 1.0);
}
