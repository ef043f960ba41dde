//! The `memory_limiter` processor on the real binary: with a limit below
//! the agent's resident set, scrapes are skipped and counted (no `up`
//! sample for them, never `up=0`) and resume when a reload raises the
//! limit; against a backend that answers only after 2 s, the agent's
//! resident memory stays under the limit and the skipped scrapes are counted.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

fn config(target: &str, endpoint: &str, limiter: &str, series_path: &str) -> String {
    format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 200ms, scrape_timeout: 200ms}}
      scrape_configs:
        - job_name: m
          metrics_path: {series_path}
          static_configs: [{{targets: ['{target}']}}]
processors:
  memory_limiter: {limiter}
exporters:
  prometheusremotewrite:
    endpoint: {endpoint}
    retry_on_failure: {{initial_interval: 100ms, max_interval: 500ms, max_elapsed_time: 0s}}
service:
  shutdown_timeout: 3s
  pipelines:
    metrics: {{receivers: [prometheus], processors: [memory_limiter], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#
    )
}

fn skipped(agent: &Agent) -> f64 {
    agent.self_metric("infertel_receiver_skipped_scrapes_total", &[("reason", "memory_limit"), ("job", "m")])
}

#[test]
fn a_limit_below_the_resident_set_skips_scrapes_without_up_0_and_a_raised_limit_resumes() {
    let t = Targets::start();
    t.set_counter("/c", "ml_total", 10);
    let prom = Prometheus::start("");
    let target = t.addr.to_string();
    // 1 MiB: the agent is always above it.
    let low = config(&target, &prom.write_url(), "{check_interval: 100ms, limit_mib: 1}", "/c");
    let mut agent = Agent::start(&low);
    wait_until("skipped scrapes counted", Duration::from_secs(20), || (skipped(&agent) >= 10.0).then_some(()));
    assert_eq!(t.hits("/c"), 0, "no scrape was made while the limiter refuses");
    let rss = agent.self_metric("infertel_processor_memory_limiter_rss_bytes", &[]);
    assert!(rss > 1024.0 * 1024.0, "the limiter measured the resident set: {rss}");
    // No `up` at all for the skipped scrapes (not up=0), no data.
    assert!(prom.raw("up", "5m").is_empty(), "a skipped scrape produces no up sample: {:?}", prom.raw("up", "5m"));
    assert!(prom.raw("ml_total", "5m").is_empty());
    let log = agent.proc.log_text();
    assert!(log.contains("memory above the soft limit"), "{log}");
    assert!(log.contains("skipping scrapes"), "{log}");
    let skipped_low = skipped(&agent);

    // A reload raises the limit: scraping resumes.
    agent.write_config(&config(&target, &prom.write_url(), "{check_interval: 100ms, limit_mib: 100000}", "/c"));
    agent.reload();
    wait_until("scrapes resumed after the reload", Duration::from_secs(30), || {
        (prom.raw("ml_total", "5m").len() == 10 && t.hits("/c") >= 5).then_some(())
    });
    assert_eq!(agent.self_metric("infertel_config_reloads_total", &[("result", "success")]), 1.0);
    let ups: Vec<f64> = prom.raw("up", "5m").into_iter().flat_map(|(_, v)| v).filter(|v| !v.is_nan()).collect();
    assert!(!ups.is_empty() && ups.iter().all(|v| *v == 1.0), "every up sample is 1: {ups:?}");
    let skipped_after = skipped(&agent);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(skipped(&agent), skipped_after, "no scrape skipped under the raised limit");
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    eprintln!(
        "memory_limiter: {skipped_low} scrapes skipped at limit_mib 1 (resident {} MiB), 0 after raising it",
        rss / 1048576.0
    );
}

#[test]
fn a_slow_backend_keeps_memory_under_the_limit_and_counts_what_is_dropped() {
    const LIMIT_MIB: u64 = 64;
    let t = Targets::start();
    t.set_counter("/c", "slow_total", 5000);
    let rx = RwReceiver::start(Arc::new(|_| (200, Duration::from_secs(2))));
    let target = t.addr.to_string();
    let lim = format!("{{check_interval: 100ms, limit_mib: {LIMIT_MIB}, spike_limit_mib: 16}}");
    let mut agent = Agent::start(&config(&target, &rx.url(), &lim, "/c"));
    let start = Instant::now();
    let mut max_rss = 0;
    let mut samples = Vec::new();
    while start.elapsed() < Duration::from_secs(20) {
        let r = agent.rss_bytes();
        max_rss = max_rss.max(r);
        samples.push(r / 1048576);
        std::thread::sleep(Duration::from_millis(250));
    }
    let m = agent.self_metrics();
    let skipped = m.sum("infertel_receiver_skipped_scrapes_total", &[("reason", "memory_limit")]);
    let refused = m.sum("infertel_processor_memory_limiter_refused_total", &[]);
    let dropped = m.sum("infertel_exporter_dropped_samples_total", &[]);
    let scraped = m.sum("infertel_receiver_scraped_samples_total", &[]);
    let sent = m.sum("infertel_exporter_sent_samples_total", &[]);
    eprintln!(
        "slow backend: max RSS {} MiB (limit {LIMIT_MIB} MiB), RSS over time (MiB) {samples:?}; {} scrapes, {skipped} skipped, {refused} samples refused, {scraped} scraped, {sent} sent, {dropped} dropped by the exporter",
        max_rss / 1048576,
        t.hits("/c")
    );
    assert!(max_rss > 0, "read the agent's VmRSS");
    // The spike headroom (limit - soft limit, 16 MiB) is the margin: the
    // resident set stays under the hard limit. Without the limiter (limit
    // 100000 MiB) the same run reached 66 MiB here (debug build).
    assert!(max_rss < LIMIT_MIB * 1048576, "RSS {} MiB over the limit {LIMIT_MIB} MiB", max_rss / 1048576);
    assert!(skipped > 0.0, "the limiter engaged: scrapes were skipped and counted");
    assert!(scraped > 0.0 && sent > 0.0);
    let _ = agent.proc.terminate(Duration::from_secs(20));
}
