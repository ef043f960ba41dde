//! Prometheus' per-job HTTP options, honoured on the wire (a target that
//! records what it was sent): `scrape_protocols` becomes the Accept header
//! Prometheus' `acceptHeader` builds, `enable_compression: false` asks for
//! identity, `http_headers` (values, secrets, files) are sent, `proxy_url`
//! routes the scrape through a proxy (the target's host does not even
//! resolve), and a global `sample_limit` applies to a job that sets none.

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::*;

#[test]
fn scrape_http_options_reach_the_target() {
    let t = Targets::start();
    t.set_counter("/m", "opt_total", 3);
    t.set_counter("/limited", "lim_total", 5);
    let proxy = Targets::start();
    proxy.set_counter("/via-proxy", "proxied_total", 1);
    let rx = RwReceiver::start(Arc::new(|_| (204, Duration::ZERO)));
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("token");
    std::fs::write(&secret_file, "from-a-file\n").unwrap();
    let cfg = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 300ms, scrape_timeout: 300ms, sample_limit: 4}}
      scrape_configs:
        - job_name: opts
          metrics_path: /m
          sample_limit: 100
          scrape_protocols: [OpenMetricsText1.0.0, PrometheusText0.0.4]
          enable_compression: false
          http_headers:
            X-Tenant: {{values: [team-a]}}
            X-Key: {{secrets: [s3cr3t-value]}}
            X-File: {{files: ['{file}']}}
          static_configs: [{{targets: ['{target}']}}]
        - job_name: limited
          metrics_path: /limited
          static_configs: [{{targets: ['{target}']}}]
        - job_name: proxied
          metrics_path: /via-proxy
          proxy_url: http://{proxy}
          static_configs: [{{targets: ['target.invalid:9']}}]
exporters:
  prometheusremotewrite:
    endpoint: {rw}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        file = secret_file.display(),
        target = t.addr,
        proxy = proxy.addr,
        rw = rx.url()
    );
    let mut agent = Agent::start(&cfg);
    wait_until("all three jobs scraped", Duration::from_secs(20), || {
        (t.hits("/m") >= 2 && t.hits("/limited") >= 2 && proxy.hits("/via-proxy") >= 2).then_some(())
    });
    let h = t.last_headers("/m");
    // Prometheus 3's acceptHeader: weights from 0.(5 protocols + 1) down.
    assert_eq!(
        h.get("accept").map(String::as_str),
        Some("application/openmetrics-text;version=1.0.0;q=0.6,text/plain;version=0.0.4;q=0.5,*/*;q=0.4")
    );
    assert_eq!(h.get("accept-encoding").map(String::as_str), Some("identity"));
    assert_eq!(h.get("x-tenant").map(String::as_str), Some("team-a"));
    assert_eq!(h.get("x-key").map(String::as_str), Some("s3cr3t-value"));
    assert_eq!(h.get("x-file").map(String::as_str), Some("from-a-file"));
    // The default job asks for gzip and text first.
    let d = t.last_headers("/limited");
    assert!(d.get("accept-encoding").is_some_and(|v| v.contains("gzip")), "{d:?}");
    assert!(d.get("accept").is_some_and(|v| v.starts_with("text/plain;version=0.0.4")), "{d:?}");
    wait_until("the proxied job's samples", Duration::from_secs(20), || {
        let (v, _) = accepted_counter_values(&rx.received(), "proxied_total");
        (!v.is_empty()).then_some(())
    });
    // The global sample_limit (4) fails the job with 5 series; the job that
    // sets its own (100) is not limited.
    let failed =
        agent.self_metric("infertel_receiver_scrape_errors_total", &[("job", "limited"), ("reason", "sample_limit")]);
    assert!(failed >= 1.0, "the global sample_limit applies to the job without one");
    assert_eq!(agent.self_metric("infertel_receiver_target_up", &[("job", "opts")]), 1.0);
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0));
}
