//! Targets that misbehave: one times out, one sends a 50 MB body (over
//! `body_size_limit`), one exceeds `sample_limit`, one answers 404. Each
//! gives `up=0` in a real Prometheus with the reason counted and logged,
//! forwards nothing of its own, and the healthy target beside them is
//! unaffected.

mod support;

use std::time::Duration;
use support::*;

#[test]
fn failing_targets_are_up_0_with_reasons_and_do_not_disturb_the_healthy_one() {
    let targets = Targets::start();
    targets.set("/healthy", TEXT_004, "# TYPE healthy gauge\nhealthy 1\n");
    targets.set("/slow", TEXT_004, "# TYPE slow gauge\nslow 1\n");
    targets.set_delay("/slow", Duration::from_secs(3));
    let big: String = (0..700_000)
        .map(|i| format!("big_series{{i=\"{i:08}\",pad=\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}} {i}\n"))
        .collect();
    assert!(big.len() > 50_000_000, "{}", big.len());
    targets.set("/big", TEXT_004, big);
    targets.set("/many", TEXT_004, (0..50).map(|i| format!("many{{i=\"{i}\"}} {i}\n")).collect::<String>());
    // "/unavailable" gets no page: the target server answers 404.
    let prom = Prometheus::start("");
    let addr = targets.addr;
    let job = |name: &str, extra: &str| {
        format!(
            "        - job_name: {name}\n          metrics_path: /{name}\n          static_configs: [{{targets: ['{addr}']}}]\n{extra}"
        )
    };
    let cfg = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
{}{}{}{}{}
exporters:
  prometheusremotewrite: {{endpoint: {}}}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        job("healthy", ""),
        job("slow", "          scrape_timeout: 500ms\n"),
        job("big", "          body_size_limit: 10MB\n"),
        job("many", "          sample_limit: 10\n"),
        job("unavailable", ""),
        prom.write_url()
    );
    let agent = Agent::start(&cfg);
    let cases =
        [("slow", "timeout"), ("big", "body_size_limit"), ("many", "sample_limit"), ("unavailable", "http_status")];
    wait_until("every failure counted", Duration::from_secs(30), || {
        let m = agent.self_metrics();
        cases
            .iter()
            .all(|(j, r)| m.sum("infertel_receiver_scrape_errors_total", &[("job", j), ("reason", r)]) >= 1.0)
            .then_some(())
    });
    wait_until("up for all five in Prometheus", Duration::from_secs(30), || {
        (prom.query("up").len() == 5).then_some(())
    });
    let m = agent.self_metrics();
    for (j, reason) in cases {
        let up = prom.query(&format!("up{{job=\"{j}\"}}"));
        assert_eq!(up.len(), 1, "{j}");
        assert_eq!(up[0].1, "0", "{j}: up");
        let all = m.sum("infertel_receiver_scrape_errors_total", &[("job", j)]);
        assert_eq!(
            all,
            m.sum("infertel_receiver_scrape_errors_total", &[("job", j), ("reason", reason)]),
            "{j}: only reason {reason}"
        );
        assert!(
            agent
                .proc
                .log_text()
                .lines()
                .any(|l| l.contains("scrape failed") && l.contains(&format!("job={j}")) && l.contains(reason)),
            "{j}: logged"
        );
    }
    assert!(prom.query("slow").is_empty() && prom.query("many").is_empty(), "nothing forwarded from failed scrapes");
    assert!(prom.query("count(big_series)").is_empty());
    let up = prom.query(r#"up{job="healthy"}"#);
    assert_eq!(up[0].1, "1");
    assert_eq!(prom.query("healthy")[0].1, "1");
    assert_eq!(m.sum("infertel_receiver_scrape_errors_total", &[("job", "healthy")]), 0.0);
    assert_eq!(m.sum("infertel_exporter_dropped_samples_total", &[]), 0.0);
}

/// As Prometheus (issue 13 §4): over `target_limit` every target of the job
/// fails its scrapes (before, the first N were scraped), counted with the
/// reason; and a body of exactly `body_size_limit` bytes fails (Prometheus
/// reads at most the limit and fails when it read that much), one byte less
/// passes. Both limits in Prometheus' units: `body_size_limit` is base 2.
#[test]
fn target_limit_fails_every_target_and_an_exact_body_size_fails() {
    let targets = Targets::start();
    let body = "# TYPE g gauge\ng 1\n";
    targets.set("/g", TEXT_004, body);
    let rx = RwReceiver::start(std::sync::Arc::new(|_| (204, Duration::ZERO)));
    let addr = targets.addr;
    let n = body.len();
    let cfg = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 500ms, scrape_timeout: 500ms}}
      scrape_configs:
        - job_name: limited
          metrics_path: /g
          target_limit: 2
          static_configs: [{{targets: ['{addr}'], labels: {{n: '0'}}}}, {{targets: ['{addr}'], labels: {{n: '1'}}}}, {{targets: ['{addr}'], labels: {{n: '2'}}}}]
        - job_name: exact
          metrics_path: /g
          body_size_limit: {n}
          static_configs: [{{targets: ['{addr}']}}]
        - job_name: room
          metrics_path: /g
          body_size_limit: {room}
          static_configs: [{{targets: ['{addr}']}}]
exporters:
  prometheusremotewrite: {{endpoint: {url}, startup_check: off}}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        room = n + 1,
        url = rx.url()
    );
    let agent = Agent::start(&cfg);
    let ups = || {
        let mut m = std::collections::BTreeMap::new();
        for r in rx.received() {
            for s in &r.series {
                if s.labels.metric_name() == "up" {
                    let key = format!("{}/{}", s.labels.get("job").unwrap_or(""), s.labels.get("n").unwrap_or(""));
                    m.insert(key, s.samples.last().unwrap().value);
                }
            }
        }
        m
    };
    wait_until("every target's up reported", Duration::from_secs(20), || (ups().len() == 5).then_some(()));
    let u = ups();
    for k in ["limited/0", "limited/1", "limited/2"] {
        assert_eq!(u[k], 0.0, "{k}: every target of a job over target_limit fails: {u:?}");
    }
    assert_eq!(u["exact/"], 0.0, "a body of exactly the limit fails");
    assert_eq!(u["room/"], 1.0, "a limit one byte larger passes");
    let errors = |reason: &str| agent.self_metric("infertel_receiver_scrape_errors_total", &[("reason", reason)]);
    assert!(errors("target_limit") >= 3.0, "counted per target");
    assert!(errors("body_size_limit") >= 1.0);
    let data: Vec<String> = rx
        .received()
        .iter()
        .flat_map(|r| r.series.iter())
        .filter(|s| s.labels.metric_name() == "g")
        .map(|s| s.labels.get("job").unwrap_or("").to_string())
        .collect();
    assert!(data.iter().all(|j| j == "room"), "only the passing job forwards data: {data:?}");
}
