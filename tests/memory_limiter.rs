//! The `memory_limiter` processor on the real binary: with a limit below
//! the agent's heap in use, scrapes are skipped and counted (no `up`
//! sample for them, never `up=0`) and resume when a reload raises the
//! limit; against a backend that answers slowly, the heap in use stays
//! under the limit (the resident set grows by less than the limit) and
//! the skipped scrapes are counted, and once the backend is fast again
//! the backlog drains and scraping resumes by itself.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::*;

fn config(target: &str, endpoint: &str, limiter: &str, series_path: &str) -> String {
    config_with(target, endpoint, limiter, series_path, "")
}

/// `exporter_extra`: more settings of the exporter, one flow-style line each.
fn config_with(target: &str, endpoint: &str, limiter: &str, series_path: &str, exporter_extra: &str) -> String {
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
    {exporter_extra}
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

/// Scrapes made so far, and the `up` values that reached Prometheus.
fn ups(prom: &Prometheus) -> Vec<f64> {
    prom.raw("up", "5m").into_iter().flat_map(|(_, v)| v).filter(|v| !v.is_nan()).collect()
}

#[test]
fn a_limit_below_the_heap_in_use_skips_scrapes_without_up_0_and_a_raised_limit_resumes() {
    const SERIES: usize = 2000;
    let t = Targets::start();
    t.set_counter("/c", "ml_total", SERIES);
    let prom = Prometheus::start("");
    let target = t.addr.to_string();
    // 1 MiB (soft limit 0.8 MiB): an idle agent's heap may be under it, but
    // not once it holds the series of a scrape (its cache keeps them).
    let low = config(&target, &prom.write_url(), "{check_interval: 100ms, limit_mib: 1}", "/c");
    let mut agent = Agent::start(&low);
    wait_until("skipped scrapes counted", Duration::from_secs(20), || (skipped(&agent) >= 10.0).then_some(()));
    let (hits_low, skipped0) = (t.hits("/c"), skipped(&agent));
    std::thread::sleep(Duration::from_secs(1));
    assert!(skipped(&agent) >= skipped0 + 3.0, "scrapes go on being skipped");
    assert_eq!(t.hits("/c"), hits_low, "no scrape is made while the limiter refuses");
    let m = agent.self_metrics();
    let used = m.sum("infertel_processor_memory_limiter_used_bytes", &[]);
    let rss = m.sum("infertel_processor_memory_limiter_rss_bytes", &[]);
    let refused = m.sum("infertel_processor_memory_limiter_refused_total", &[]);
    assert!(used > 0.8 * 1048576.0, "the limiter measured the heap in use: {used}");
    assert!(rss > used, "and the resident set: {rss}");
    // A scrape reaches Prometheus whole or (in flight when the limit was
    // crossed) is refused whole: the counter's series plus the 5 report
    // series. The skipped ones produce nothing: no `up` at all, not up=0.
    let per_scrape = (SERIES + 5) as f64;
    assert_eq!(refused % per_scrape, 0.0, "whole scrapes refused: {refused}");
    let delivered = hits_low - (refused / per_scrape) as u64;
    let up_low = wait_until("the scrapes made to reach Prometheus", Duration::from_secs(10), || {
        let u = ups(&prom);
        (u.len() as u64 >= delivered).then_some(u)
    });
    assert_eq!(up_low.len() as u64, delivered, "one up sample per scrape made, none for a skipped one");
    assert!(up_low.iter().all(|v| *v == 1.0), "no up=0: {up_low:?}");
    let log = agent.proc.log_text();
    assert!(log.contains("memory above the soft limit"), "{log}");
    assert!(log.contains("skipping scrapes"), "{log}");
    let skipped_low = skipped(&agent);

    // A reload raises the limit: scraping resumes.
    agent.write_config(&config(&target, &prom.write_url(), "{check_interval: 100ms, limit_mib: 100000}", "/c"));
    agent.reload();
    wait_until("scrapes resumed after the reload", Duration::from_secs(30), || {
        (prom.raw("ml_total", "5m").len() == SERIES && t.hits("/c") >= hits_low + 5).then_some(())
    });
    assert_eq!(agent.self_metric("infertel_config_reloads_total", &[("result", "success")]), 1.0);
    let up_all = ups(&prom);
    assert!(up_all.len() > up_low.len() && up_all.iter().all(|v| *v == 1.0), "every up sample is 1: {up_all:?}");
    let skipped_after = skipped(&agent);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(skipped(&agent), skipped_after, "no scrape skipped under the raised limit");
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    eprintln!(
        "memory_limiter: at limit_mib 1, {hits_low} scrapes made ({refused} samples refused in flight), then {skipped_low} skipped (heap in use {:.1} MiB, resident {:.1} MiB); 0 skipped after raising it",
        used / 1048576.0,
        rss / 1048576.0
    );
}

/// A backend that answers only after 4 s, then recovers: while it is slow
/// the backlog grows until the limiter refuses, the heap in use stays under
/// the limit and skipped scrapes are counted; once it answers at once, the
/// queue drains and scraping resumes by itself, with the limit unchanged:
/// the skipped-scrape counter stops and samples flow again.
#[test]
fn a_slow_backend_keeps_memory_under_the_limit_and_scraping_resumes_when_it_recovers() {
    // Soft limit 40 MiB: above the debug binary's resident set once it
    // scrapes 5000 series at 200 ms (~45 MiB, most of it the binary's pages
    // and stacks, not data), well above its heap in use then (~12 MiB). A
    // limiter measuring the resident set would never resume here.
    const LIMIT_MIB: u64 = 48;
    const SPIKE_MIB: u64 = 8;
    let t = Targets::start();
    t.set_counter("/c", "slow_total", 5000);
    let slow = Arc::new(AtomicBool::new(true));
    let s = slow.clone();
    let rx = RwReceiver::start(Arc::new(move |_| {
        (200, if s.load(Ordering::SeqCst) { Duration::from_secs(4) } else { Duration::ZERO })
    }));
    let target = t.addr.to_string();
    let lim = format!("{{check_interval: 100ms, limit_mib: {LIMIT_MIB}, spike_limit_mib: {SPIKE_MIB}}}");
    // One consumer, one request at a time: the backend takes about a
    // scrape a second, the target gives five.
    let extra = "timeout: 30s\n    sending_queue: {num_consumers: 1}";
    let mut agent = Agent::start(&config_with(&target, &rx.url(), &lim, "/c", extra));
    let start_rss = agent.rss_bytes();

    // Slow phase: until the limiter has skipped scrapes for 10 s.
    let start = Instant::now();
    let (mut max_rss, mut max_used) = (0u64, 0f64);
    let mut trace = Vec::new();
    let mut engaged: Option<Instant> = None;
    while engaged.is_none_or(|e| e.elapsed() < Duration::from_secs(10)) {
        assert!(start.elapsed() < Duration::from_secs(90), "the limiter never engaged: (RSS, in use) {trace:?}");
        let r = agent.rss_bytes();
        let m = agent.self_metrics();
        let u = m.sum("infertel_processor_memory_limiter_used_bytes", &[]);
        if engaged.is_none() && m.sum("infertel_receiver_skipped_scrapes_total", &[("reason", "memory_limit")]) > 0.0 {
            engaged = Some(Instant::now());
        }
        max_rss = max_rss.max(r);
        max_used = max_used.max(u);
        if trace.len() < 400 {
            trace.push((r / 1048576, (u / 1048576.0) as u64));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let m = agent.self_metrics();
    let skipped_slow = m.sum("infertel_receiver_skipped_scrapes_total", &[("reason", "memory_limit")]);
    let refused = m.sum("infertel_processor_memory_limiter_refused_total", &[]);
    let dropped = m.sum("infertel_exporter_dropped_samples_total", &[]);
    let scraped = m.sum("infertel_receiver_scraped_samples_total", &[]);
    let sent_slow = m.sum("infertel_exporter_sent_samples_total", &[]);
    eprintln!(
        "slow backend: RSS at start {} MiB; max in use {} MiB, max RSS {} MiB (limit {LIMIT_MIB} MiB); (RSS, in use) over time (MiB) {trace:?}; {} scrapes, {skipped_slow} skipped, {refused} samples refused, {scraped} scraped, {sent_slow} sent, {dropped} dropped by the exporter",
        start_rss / 1048576,
        (max_used / 1048576.0) as u64,
        max_rss / 1048576,
        t.hits("/c")
    );
    assert!(max_rss > 0 && max_used > 0.0, "read the agent's VmRSS and the limiter's measure");
    assert!(skipped_slow > 0.0, "the limiter engaged: scrapes were skipped and counted");
    assert!(scraped > 0.0 && sent_slow > 0.0);
    // The spike headroom (limit - soft limit) is the margin: what the
    // limiter measures (the heap in use) stays under the hard limit.
    assert!(max_used < (LIMIT_MIB * 1048576) as f64, "in use {} MiB over the limit", max_used / 1048576.0);
    // The resident set adds the binary's pages, stacks and what the
    // allocator keeps to the heap; those were resident before any data
    // arrived.
    assert!(
        max_rss < LIMIT_MIB * 1048576 + start_rss,
        "RSS {} MiB over the limit + the resident set at start ({} MiB)",
        max_rss / 1048576,
        start_rss / 1048576
    );

    // The backend recovers: scraping resumes without a reload.
    slow.store(false, Ordering::SeqCst);
    let recovered = Instant::now();
    let resumed_at = wait_until("scraping to resume after the backend recovered", Duration::from_secs(90), || {
        let before = skipped(&agent);
        std::thread::sleep(Duration::from_secs(3));
        (skipped(&agent) == before).then_some(before)
    });
    let took = recovered.elapsed();
    let (hits0, sent0) = (t.hits("/c"), agent.self_metric("infertel_exporter_sent_samples_total", &[]));
    let flowing_since = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let m = agent.self_metrics();
    let skipped_after = m.sum("infertel_receiver_skipped_scrapes_total", &[("reason", "memory_limit")]);
    let sent1 = m.sum("infertel_exporter_sent_samples_total", &[]);
    let used_after = m.sum("infertel_processor_memory_limiter_used_bytes", &[]);
    let rss_after = m.sum("infertel_processor_memory_limiter_rss_bytes", &[]);
    let hits = t.hits("/c") - hits0;
    eprintln!(
        "recovered: skipped scrapes stopped at {resumed_at} within {took:?}; over the next {:?}: {hits} scrapes, {} samples sent, {} more skipped; in use {} MiB, RSS {} MiB",
        flowing_since.elapsed(),
        sent1 - sent0,
        skipped_after - resumed_at,
        (used_after / 1048576.0) as u64,
        (rss_after / 1048576.0) as u64
    );
    assert_eq!(skipped_after, resumed_at, "no scrape skipped once the backend is fast again");
    // 25 scrapes at 200 ms in 5 s; a loaded machine may miss some ticks.
    assert!(hits >= 10, "scrapes resumed: {hits} in 5 s");
    assert!(sent1 - sent0 >= 10.0 * 5000.0, "samples flow again: {} sent in 5 s", sent1 - sent0);
    assert!(used_after <= ((LIMIT_MIB - SPIKE_MIB) * 1048576) as f64, "in use back under the soft limit");
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    let log = agent.proc.log_text();
    assert!(log.contains("memory back under the soft limit"), "{log}");
    assert!(log.contains("scraping again"), "{log}");
}
