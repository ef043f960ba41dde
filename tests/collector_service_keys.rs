//! End to end: the Collector's `service.telemetry` and `prometheus`
//! receiver keys that public configs use. A `pull` reader serves the
//! agent's own metrics at its host:port, with `service.telemetry.resource`
//! as `target_info`; `report_extra_scrape_metrics` adds Prometheus' extra
//! report series, checked in a real Prometheus against the body the target
//! served (its length counted here) and the job's limits; the Collector's
//! keys whose behaviour differs here are warnings at their line.

mod support;

use std::process::Command;
use std::time::Duration;
use support::*;

#[test]
fn pull_reader_resource_and_extra_scrape_metrics() {
    let prom = Prometheus::start("");
    let targets = Targets::start();
    let body = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n";
    targets.set("/metrics", TEXT_004, body);
    let port = free_port();
    let cfg = format!(
        r#"
receivers:
  prometheus:
    report_extra_scrape_metrics: true
    trim_metric_suffixes: true
    config:
      scrape_configs:
        - job_name: vllm
          scrape_interval: 1s
          scrape_timeout: 800ms
          sample_limit: 500
          static_configs: [{{targets: ['{t}']}}]
exporters:
  prometheusremotewrite: {{endpoint: "{rw}"}}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry:
    resource:
      service.instance.id: node-7
      deployment.environment: prod
      service.version: null
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: {port}
                without_units: true
"#,
        t = targets.addr,
        rw = prom.write_url()
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, &cfg).unwrap();

    let out = Command::new(infertel_bin()).arg("validate").arg("--config").arg(&path).output().expect("validate");
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("c.yaml:5:5: receivers.prometheus.trim_metric_suffixes: names stay as scraped"), "{text}");

    let mut cmd = Command::new(infertel_bin());
    cmd.arg("run").arg("--config").arg(&path);
    let mut agent = Proc::spawn("infertel", &mut cmd, dir.path().join("infertel.log"));
    let page = wait_until("the pull reader's /metrics", Duration::from_secs(20), || {
        match http_get(&format!("http://127.0.0.1:{port}/metrics")) {
            Ok((200, b)) => Some(b),
            _ => None,
        }
    });
    let info =
        page.lines().find(|l| l.starts_with("target_info{")).unwrap_or_else(|| panic!("no target_info:\n{page}"));
    for want in ["service_name=\"infertel\"", "service_instance_id=\"node-7\"", "deployment_environment=\"prod\""] {
        assert!(info.contains(want), "{info}");
    }
    assert!(!info.contains("service_version"), "null removes a default attribute: {info}");
    // The default address is not served when a pull reader says where.
    assert!(http_get("http://127.0.0.1:8888/metrics").map_or(true, |(c, b)| c != 200 || !b.contains("node-7")));

    let q = |expr: &str| prom.query(expr).first().map(|(_, v)| parse_prom_float(v));
    wait_until("the extra report series", Duration::from_secs(30), || {
        q(r#"scrape_body_size_bytes{job="vllm"}"#).map(|_| ())
    });
    assert_eq!(q(r#"scrape_body_size_bytes{job="vllm"}"#), Some(body.len() as f64));
    assert_eq!(q(r#"scrape_timeout_seconds{job="vllm"}"#), Some(0.8));
    assert_eq!(q(r#"scrape_sample_limit{job="vllm"}"#), Some(500.0));
    agent.terminate(Duration::from_secs(10));
}
