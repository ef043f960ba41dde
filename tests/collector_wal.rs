//! End to end: the Collector's `prometheusremotewrite.wal`, mapped onto the
//! persistent queue, against a real Prometheus that is down for the whole
//! life of a first agent. The target's counters count its scrapes, so the
//! first agent's values are 1, 2, 3, ...: after it stops and a second agent
//! starts on the same `wal.directory` with Prometheus back, they are all in
//! Prometheus, which only the disk could have kept.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;
use support::*;

fn config(target: &str, endpoint: &str, wal: &str) -> String {
    format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 250ms, scrape_timeout: 200ms}}
      scrape_configs:
        - {{job_name: t, metrics_path: /c, static_configs: [{{targets: ['{target}']}}]}}
exporters:
  prometheusremotewrite:
    endpoint: {endpoint}
    retry_on_failure: {{initial_interval: 100ms, max_interval: 500ms, max_elapsed_time: 0s}}
    wal:
      directory: {wal}
      buffer_size: 100
      truncate_frequency: 45s
service:
  shutdown_timeout: 3s
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#
    )
}

#[test]
fn what_the_wal_kept_through_an_outage_and_a_restart_arrives() {
    let mut prom = Prometheus::start("");
    prom.stop();
    let targets = Targets::start();
    targets.set_counter("/c", "served_total", 3);
    let dir = tempfile::tempdir().unwrap();
    let wal = dir.path().join("wal");
    let cfg = config(&targets.addr.to_string(), &prom.write_url(), &wal.to_string_lossy());

    let mut first = Agent::start(&cfg);
    wait_until("a dozen scrapes with the backend down", Duration::from_secs(30), || {
        (targets.hits("/c") >= 12).then_some(())
    });
    assert!(first.proc.terminate(Duration::from_secs(20)).is_some(), "the first agent stops");
    let during = targets.hits("/c");
    let on_disk: u64 = walk(&wal);
    assert!(on_disk > 0, "the queue is on disk in wal.directory");

    prom.restart();
    let _second = Agent::start(&cfg);
    let got = wait_until("the first agent's samples in Prometheus", Duration::from_secs(60), || {
        let rows = prom.raw("served_total", "10m");
        let by: BTreeMap<String, Vec<u64>> = rows
            .into_iter()
            .filter_map(|(l, v)| {
                Some((l.get("series")?.clone(), v.into_iter().filter(|x| !x.is_nan()).map(|x| x as u64).collect()))
            })
            .collect();
        (by.len() == 3 && by.values().all(|v| (1..=during).all(|n| v.contains(&n)))).then_some(by)
    });
    for (s, v) in &got {
        assert!(v.windows(2).all(|w| w[0] < w[1]), "{s}: in order, no duplicates: {v:?}");
    }
}

fn walk(p: &std::path::Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
        let path = e.path();
        if path.is_dir() {
            n += walk(&path);
        } else {
            n += e.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    n
}
