//! Config reload of the real binary: SIGHUP adds a job (its series reach a
//! real Prometheus), an invalid config is refused with the reason logged and
//! the old pipeline keeps delivering, `--watch-config` reloads on a file
//! change without a signal, and a persistent queue's backlog survives a
//! reload, counted sample by sample.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::*;

const SERIES: usize = 5;

/// Scrape jobs `a` (always) and `b` (when `with_b`), remote-written to
/// `endpoint`; `extra` goes under the exporter (e.g. a sending_queue).
fn config(target: &str, endpoint: &str, with_b: bool, exporter_extra: &str, extensions: &str) -> String {
    let b = if with_b {
        format!(
            "\n        - job_name: b\n          metrics_path: /b\n          static_configs: [{{targets: ['{target}']}}]"
        )
    } else {
        String::new()
    };
    format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 200ms, scrape_timeout: 200ms}}
      scrape_configs:
        - job_name: a
          metrics_path: /a
          static_configs: [{{targets: ['{target}']}}]{b}
exporters:
  prometheusremotewrite:
    endpoint: {endpoint}
    retry_on_failure: {{initial_interval: 100ms, max_interval: 500ms, max_elapsed_time: 0s}}
{exporter_extra}
{extensions}
service:
  shutdown_timeout: 5s
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#
    )
}

fn reloads(agent: &Agent, result: &str) -> f64 {
    agent.self_metric("infertel_config_reloads_total", &[("result", result)])
}

/// The newest value of each series of `name` in Prometheus.
fn newest(prom: &Prometheus, name: &str) -> BTreeMap<String, f64> {
    prom.raw(name, "5m")
        .into_iter()
        .filter_map(|(l, v)| Some((l.get("series")?.clone(), v.into_iter().filter(|x| !x.is_nan()).next_back()?)))
        .collect()
}

fn targets() -> Targets {
    let t = Targets::start();
    t.set_counter("/a", "ra_total", SERIES);
    t.set_counter("/b", "rb_total", SERIES);
    t
}

#[test]
fn sighup_adds_a_job_and_an_invalid_config_keeps_the_old_pipeline() {
    let t = targets();
    let prom = Prometheus::start("");
    let target = t.addr.to_string();
    let agent = Agent::start(&config(&target, &prom.write_url(), false, "", ""));
    wait_until("job a in Prometheus", Duration::from_secs(30), || {
        (newest(&prom, "ra_total").len() == SERIES).then_some(())
    });
    assert_eq!(t.hits("/b"), 0, "job b is not configured yet");
    assert_eq!(reloads(&agent, "success"), 0.0);

    // A valid config adding job b, then SIGHUP.
    agent.write_config(&config(&target, &prom.write_url(), true, "", ""));
    agent.reload();
    wait_until("job b in Prometheus after SIGHUP", Duration::from_secs(30), || {
        (newest(&prom, "rb_total").len() == SERIES).then_some(())
    });
    assert_eq!(reloads(&agent, "success"), 1.0);
    assert_eq!(reloads(&agent, "failure"), 0.0);
    // Job a kept going through the reload.
    let a_before = newest(&prom, "ra_total").values().copied().fold(0.0, f64::max);

    // An invalid config: an unknown processor in the pipeline.
    let bad = config(&target, &prom.write_url(), true, "", "")
        .replace("exporters: [prometheusremotewrite]}", "processors: [nosuch], exporters: [prometheusremotewrite]}");
    agent.write_config(&bad);
    agent.reload();
    wait_until("the reload failure counted", Duration::from_secs(10), || {
        (reloads(&agent, "failure") == 1.0).then_some(())
    });
    assert_eq!(reloads(&agent, "success"), 1.0, "the failed reload is not counted as a success");
    let log = agent.proc.log_text();
    assert!(log.contains("reload refused, keeping the running config"), "the log says the reload was refused:\n{log}");
    assert!(log.contains("nosuch"), "the log names what is wrong:\n{log}");
    // The old pipeline (jobs a and b) keeps delivering.
    let b_hits = t.hits("/b");
    let b_before = newest(&prom, "rb_total").values().copied().fold(0.0, f64::max);
    wait_until("jobs a and b still delivering after the refused reload", Duration::from_secs(20), || {
        let a = newest(&prom, "ra_total").values().copied().fold(0.0, f64::max);
        let b = newest(&prom, "rb_total").values().copied().fold(0.0, f64::max);
        (a >= a_before + 5.0 && b >= b_before + 5.0 && t.hits("/b") >= b_hits + 5).then_some(())
    });
    let mut agent = agent;
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
}

#[test]
fn watch_config_reloads_on_a_file_change_without_a_signal() {
    let t = targets();
    let prom = Prometheus::start("");
    let target = t.addr.to_string();
    let mut agent = Agent::start_with(&config(&target, &prom.write_url(), false, "", ""), &[], &["--watch-config"]);
    wait_until("job a in Prometheus", Duration::from_secs(30), || {
        (newest(&prom, "ra_total").len() == SERIES).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(reloads(&agent, "success"), 0.0, "an unchanged file is not reloaded");
    agent.write_config(&config(&target, &prom.write_url(), true, "", ""));
    wait_until("job b in Prometheus after the file changed", Duration::from_secs(30), || {
        (newest(&prom, "rb_total").len() == SERIES).then_some(())
    });
    assert_eq!(reloads(&agent, "success"), 1.0);
    assert!(agent.proc.log_text().contains("config file changed"), "{}", agent.proc.log_text());
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0));
}

#[test]
fn a_persistent_queue_backlog_survives_a_reload() {
    let t = targets();
    let down = Arc::new(AtomicBool::new(false));
    let d = down.clone();
    let rx = RwReceiver::start(Arc::new(move |_| (if d.load(Ordering::SeqCst) { 503 } else { 200 }, Duration::ZERO)));
    let st = tempfile::tempdir().expect("tempdir");
    let queue = "    sending_queue: {num_consumers: 2, storage: file_storage/q}";
    let ext = format!("extensions:\n  file_storage/q: {{directory: \"{}\", max_bytes: 256MiB}}", st.path().display());
    let target = t.addr.to_string();
    let cfg = |with_b| {
        config(&target, &rx.url(), with_b, queue, &ext)
            .replace("service:\n", "service:\n  extensions: [file_storage/q]\n")
    };
    let mut agent = Agent::start(&cfg(false));
    std::thread::sleep(Duration::from_secs(2));
    down.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(6));
    let queued = agent.self_metric("infertel_exporter_queue_samples", &[]);
    assert!(queued > 0.0, "the outage backlog is queued");
    let before_reload = t.hits("/a");
    agent.write_config(&cfg(true));
    agent.reload();
    wait_until("the reload", Duration::from_secs(20), || (reloads(&agent, "success") == 1.0).then_some(()));
    let after_reload = t.hits("/a");
    std::thread::sleep(Duration::from_secs(3));
    let queued_after = agent.self_metric("infertel_exporter_queue_samples", &[]);
    assert!(queued_after >= queued, "the backlog is still queued after the reload: {queued_after} < {queued}");
    down.store(false, Ordering::SeqCst);
    wait_until("the queue to drain", Duration::from_secs(60), || {
        let m = agent.self_metrics();
        (m.sum("infertel_exporter_queue_oldest_age_seconds", &[]) < 1.5 && t.hits("/b") > 0).then_some(())
    });
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    let scrapes = t.hits("/a");
    let (got, dups) = accepted_counter_values(&rx.received(), "ra_total");
    assert_eq!(got.len(), SERIES, "every series arrived");
    let mut missing_total = 0;
    for (s, vals) in &got {
        let missing: Vec<u64> = (1..=scrapes).filter(|i| vals.binary_search(i).is_err()).collect();
        // Only the last scrape (cut by SIGTERM) and one scrape cut by the
        // reload's stop may be missing.
        let around_reload = missing.iter().filter(|m| (before_reload..=after_reload).contains(m)).count();
        assert!(
            around_reload <= 1,
            "series {s}: missing {missing:?} (reload between scrapes {before_reload} and {after_reload})"
        );
        assert!(
            missing.iter().all(|m| *m == scrapes || (before_reload..=after_reload).contains(m)),
            "series {s}: missing {missing:?} of 1..={scrapes}"
        );
        missing_total += missing.len();
    }
    // At-least-once across the reload, as across a restart: the merged
    // batch a consumer had in flight when the old pipeline stopped is sent
    // again whole (seen: a batch read from disk as scrapes 11+12, 11 accepted
    // just before the outage, 12 refused, so not acknowledged; the new
    // pipeline replays both). Bound: one scrape (10 samples) per consumer.
    assert!(dups <= 2 * 10, "duplicate samples beyond the in-flight window: {dups}");
    eprintln!(
        "reload with backlog: {scrapes} scrapes of job a, {queued} samples queued before the reload, {queued_after} after, {missing_total} counter samples missing, {dups} duplicates"
    );
}
