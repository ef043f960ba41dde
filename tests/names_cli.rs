//! `infertel names`: the dry run prints final names per exporter and the
//! Elasticsearch suffix-typing warning, from the real fixtures.

mod support;

use std::process::Command;
use support::*;

const CONFIG: &str = r#"
receivers:
  prometheus:
    config:
      scrape_configs:
        - job_name: vllm
          static_configs: [{targets: ['127.0.0.1:1']}]
processors:
  preserve_names:
exporters:
  prometheusremotewrite/elastic:
    endpoint: https://es.example/_prometheus/metrics/vllm/api/v1/write
  otlp:
    endpoint: collector.example:4317
  otlphttp/keep:
    endpoint: https://collector.example:4318
service:
  pipelines:
    metrics/rw: {receivers: [prometheus], exporters: [prometheusremotewrite/elastic]}
    metrics/otel: {receivers: [prometheus], exporters: [otlp]}
    metrics/keep: {receivers: [prometheus], processors: [preserve_names], exporters: [otlphttp/keep]}
"#;

fn names(fixture: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let f = shared_dir().join("fixtures/real").join(fixture);
    let out =
        Command::new(infertel_bin()).arg("names").arg("--config").arg(&cfg).arg("--target").arg(&f).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

fn section<'a>(text: &'a str, exporter: &str) -> &'a str {
    let start =
        text.find(&format!("exporter {exporter} ")).unwrap_or_else(|| panic!("no section for {exporter}:\n{text}"));
    let rest = &text[start..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

fn row<'a>(sec: &'a str, name: &str) -> Option<&'a str> {
    sec.lines().find(|l| l.split_whitespace().next() == Some(name))
}

#[test]
fn dcgm_counters_without_suffix_are_flagged_for_elasticsearch_remote_write() {
    let t = names("dcgm-exporter-kops-l4.prom");
    let rw = section(&t, "prometheusremotewrite/elastic");
    assert!(rw.contains("warning: DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION is a counter"), "{rw}");
    assert!(!rw.contains("warning: DCGM_FI_DEV_GPU_TEMP"), "gauges are not flagged");
    let otel = section(&t, "otlp");
    assert!(row(otel, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION").unwrap().contains("sum(monotonic)"));
    assert!(!otel.contains("warning"), "OTLP carries the type itself");
}

#[test]
fn vllm_names_in_both_otlp_modes() {
    let t = names("vllm-v0.7-v0engine-aibrix-docs.prom");
    let otel = section(&t, "otlp");
    let h = row(otel, "vllm:iteration_tokens_total").expect("histogram under its family name");
    // This capture has no `_count` for it: the spec drops such a histogram, and the dry run says so.
    assert!(h.contains("dropped: histogram without vllm:iteration_tokens_total_count") && !h.contains(",le"), "{h}");
    assert!(row(otel, "vllm:iteration_tokens_total_bucket").is_none());
    assert!(row(otel, "vllm:prompt_tokens_total").unwrap().contains("sum(monotonic)"));
    let keep = section(&t, "otlphttp/keep");
    let b = row(keep, "vllm:iteration_tokens_total_bucket").expect("bucket series kept");
    assert!(b.contains("sum(monotonic)") && b.contains("le") && b.contains("job"), "{b}");
    assert!(row(keep, "vllm:iteration_tokens_total_sum").unwrap().contains("sum "), "_sum is a non-monotonic sum");
    assert!(row(keep, "vllm:num_requests_running").unwrap().contains("gauge"));
}
