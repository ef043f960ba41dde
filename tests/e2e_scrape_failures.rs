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
