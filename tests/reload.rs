//! Config reload of the real binary: SIGHUP adds a job (its series reach a
//! real Prometheus), an invalid config is refused with the reason logged and
//! the old pipeline keeps delivering, `--watch-config` reloads on a file
//! change without a signal, and a persistent queue's backlog survives a
//! reload, counted sample by sample. A reload changes only what changed:
//! 30 SIGHUPs in 30 s write no staleness marker and leave no gap; a changed
//! exporter hands its queue (memory or disk) to its replacement, so a 403
//! fixed by a reload loses nothing; a target the reload removes goes stale.

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
    // The exporter's configuration did not change: it kept running through
    // the reload with its queue (no stop, no replay), and the receiver,
    // which did change, handed its loops over between two scrapes.
    let mut missing_total = 0;
    for (s, vals) in &got {
        let missing: Vec<u64> = (1..=scrapes).filter(|i| vals.binary_search(i).is_err()).collect();
        assert!(
            missing.is_empty(),
            "series {s}: missing {missing:?} of 1..={scrapes} (reload between scrapes {before_reload} and {after_reload})"
        );
        missing_total += missing.len();
    }
    assert_eq!(dups, 0, "nothing sent twice: the queue was not stopped and replayed");
    eprintln!(
        "reload with backlog: {scrapes} scrapes of job a, {queued} samples queued before the reload, {queued_after} after, {missing_total} counter samples missing, {dups} duplicates"
    );
}

/// `infertel_model`'s staleness marker, bit for bit.
fn is_stale(v: f64) -> bool {
    v.to_bits() == infertel_model::stale_nan().to_bits()
}

/// Per series (labels as text) of the accepted requests, the samples in
/// timestamp order.
fn accepted_samples(rx: &RwReceiver) -> BTreeMap<String, Vec<(i64, f64)>> {
    let mut m: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for r in rx.received().iter().filter(|r| r.status / 100 == 2) {
        for s in &r.series {
            m.entry(s.labels.to_string()).or_default().extend(s.samples.iter().map(|p| (p.timestamp_ms, p.value)));
        }
    }
    for v in m.values_mut() {
        v.sort_by_key(|p| p.0);
    }
    m
}

/// The agent is reloaded every second for 30 s while it scrapes every
/// second. Of the 30 reloads, some change nothing, some change the exporter
/// (a header: replaced, its queue handed over), some the receiver
/// (`sample_limit`: replaced, its scrape loops handed over), some both. No
/// staleness marker is written, no two consecutive scrapes of the target
/// are more than one interval apart (1.5 s allowed for scheduling), every
/// scrape arrives exactly once, and all 30 signals are counted as reloads.
#[test]
fn sighup_every_second_for_30s_writes_no_marker_and_leaves_no_gap() {
    let t = Targets::start();
    t.set_counter("/a", "ra_total", SERIES);
    let rx = RwReceiver::start(Arc::new(|_| (204, Duration::ZERO)));
    let target = t.addr.to_string();
    let cfg = |i: usize| {
        config(&target, &rx.url(), false, &format!("    headers: {{X-Generation: '{}'}}", i / 2), "")
            .replace("scrape_interval: 200ms, scrape_timeout: 200ms", "scrape_interval: 1s, scrape_timeout: 500ms")
            .replace(
                "          metrics_path: /a\n",
                &format!("          metrics_path: /a\n          sample_limit: {}\n", 1000 + i / 3),
            )
    };
    let mut agent = Agent::start(&cfg(0));
    wait_until("scrapes delivered", Duration::from_secs(20), || {
        (accepted_counter_values(&rx.received(), "ra_total").0.len() == SERIES).then_some(())
    });
    for i in 1..=30 {
        std::thread::sleep(Duration::from_secs(1));
        agent.write_config(&cfg(i));
        agent.reload();
    }
    wait_until("all 30 reloads applied", Duration::from_secs(20), || {
        (reloads(&agent, "success") == 30.0).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    let log = agent.proc.log_text();
    assert_eq!(reloads(&agent, "failure"), 0.0);
    let applied: Vec<&str> = log.lines().filter(|l| l.contains("component(s) kept running")).collect();
    assert_eq!(applied.len(), 30, "one applied reload per SIGHUP:\n{log}");
    assert!(applied.iter().any(|l| l.contains(" 0 replaced")), "some reloads change nothing");
    assert!(applied.iter().any(|l| l.contains(" 2 replaced")), "some replace receiver and exporter");

    let samples = accepted_samples(&rx);
    let mut stale = Vec::new();
    for (s, v) in &samples {
        stale.extend(v.iter().filter(|p| is_stale(p.1)).map(|p| format!("{s} @{}", p.0)));
    }
    assert!(stale.is_empty(), "no staleness marker: {stale:?}");
    let up = samples.iter().find(|(s, _)| s.starts_with("up{")).map(|(_, v)| v.clone()).expect("up arrived");
    let gaps: Vec<i64> = up.windows(2).map(|w| w[1].0 - w[0].0).collect();
    let max_gap = gaps.iter().copied().max().unwrap_or(0);
    assert!(max_gap <= 1500, "a gap of {max_gap} ms between scrapes (interval 1 s): {gaps:?}");
    let scrapes = t.hits("/a");
    let (got, dups) = accepted_counter_values(&rx.received(), "ra_total");
    assert_eq!(dups, 0, "no sample twice");
    for (s, vals) in &got {
        let missing: Vec<u64> = (1..=scrapes).filter(|i| vals.binary_search(i).is_err()).collect();
        assert!(missing.is_empty(), "series {s}: missing scrapes {missing:?} of 1..={scrapes}");
    }
    eprintln!(
        "30 reloads in 30 s: {} up samples, largest gap {max_gap} ms, {scrapes} scrapes x {SERIES} series all delivered, 0 markers, 0 duplicates",
        up.len()
    );
}

/// The backend's key is rotated while the agent runs: a runtime 403 pauses
/// the exporter, which holds its request and queues what comes next. The
/// SRE fixes the key and reloads: the changed exporter hands its held
/// request and queue, in memory or on disk, to its replacement, and every
/// scrape arrives (0 lost, nothing counted as dropped).
#[test]
fn a_runtime_403_fixed_by_a_reload_loses_nothing() {
    for with_storage in [false, true] {
        let t = Targets::start();
        t.set_counter("/a", "ra_total", SERIES);
        let key = Arc::new(std::sync::Mutex::new("Bearer old".to_string()));
        let k = key.clone();
        // The backend accepts only the current key.
        let rx = RwReceiver::start_with_headers(Arc::new(move |_, h, _| {
            let ok = h.get("authorization").is_some_and(|v| *v == *k.lock().unwrap());
            (if ok { 204 } else { 403 }, Duration::ZERO)
        }));
        let st = tempfile::tempdir().expect("tempdir");
        let (queue, ext) = if with_storage {
            (
                "    sending_queue: {storage: file_storage/q}\n".to_string(),
                format!("extensions:\n  file_storage/q: {{directory: \"{}\"}}", st.path().display()),
            )
        } else {
            (String::new(), String::new())
        };
        let target = t.addr.to_string();
        let cfg = |secret: &str| {
            let c =
                config(&target, &rx.url(), false, &format!("{queue}    headers: {{Authorization: '{secret}'}}"), &ext);
            if with_storage { c.replace("service:\n", "service:\n  extensions: [file_storage/q]\n") } else { c }
        };
        let mut agent = Agent::start(&cfg("Bearer old"));
        wait_until("scrapes delivered", Duration::from_secs(20), || (t.hits("/a") >= 5).then_some(()));
        *key.lock().unwrap() = "Bearer new".into();
        wait_until("paused on the 403", Duration::from_secs(20), || {
            (agent.self_metric("infertel_exporter_endpoint_up", &[]) == 0.0).then_some(())
        });
        std::thread::sleep(Duration::from_secs(2));
        let paused_at = t.hits("/a");
        agent.write_config(&cfg("Bearer new"));
        agent.reload();
        wait_until("the reload", Duration::from_secs(20), || (reloads(&agent, "success") == 1.0).then_some(()));
        wait_until("everything scraped delivered", Duration::from_secs(30), || {
            let n = t.hits("/a");
            let (v, _) = accepted_counter_values(&rx.received(), "ra_total");
            (n > paused_at + 3 && v.len() == SERIES && v.values().all(|x| x.binary_search(&(paused_at + 2)).is_ok()))
                .then_some(())
        });
        assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
        let scrapes = t.hits("/a");
        let (got, dups) = accepted_counter_values(&rx.received(), "ra_total");
        let log = agent.proc.log_text();
        for (s, vals) in &got {
            let missing: Vec<u64> = (1..=scrapes).filter(|i| vals.binary_search(i).is_err()).collect();
            assert!(
                missing.is_empty(),
                "storage {with_storage}: series {s}: missing {missing:?} of 1..={scrapes}\n{log}"
            );
        }
        assert!(!log.contains("dropped"), "nothing dropped (storage {with_storage}):\n{log}");
        eprintln!(
            "403 fixed by reload (storage {with_storage}): paused at scrape {paused_at}, {scrapes} scrapes x {SERIES} series all delivered, {dups} duplicates"
        );
    }
}

/// A reload that removes a job (from a receiver that stays) and a whole
/// receiver ends their targets as Prometheus does: staleness markers for
/// their series and `up`; the job that stays gets none.
#[test]
fn a_target_removed_by_a_reload_goes_stale() {
    let t = targets();
    t.set_counter("/x", "rx_total", SERIES);
    let rx = RwReceiver::start(Arc::new(|_| (204, Duration::ZERO)));
    let target = t.addr.to_string();
    let extra = format!(
        "  prometheus/extra:\n    config:\n      global: {{scrape_interval: 200ms, scrape_timeout: 200ms}}\n      scrape_configs:\n        - job_name: x\n          metrics_path: /x\n          static_configs: [{{targets: ['{target}']}}]\nexporters:"
    );
    let both = config(&target, &rx.url(), true, "", "")
        .replacen("exporters:", &extra, 1)
        .replace("receivers: [prometheus]", "receivers: [prometheus, prometheus/extra]");
    let mut agent = Agent::start(&both);
    wait_until("jobs a, b, x delivered", Duration::from_secs(20), || {
        let r = rx.received();
        (["ra_total", "rb_total", "rx_total"].iter().all(|n| accepted_counter_values(&r, n).0.len() == SERIES))
            .then_some(())
    });
    agent.write_config(&config(&target, &rx.url(), false, "", ""));
    agent.reload();
    wait_until("the reload", Duration::from_secs(20), || (reloads(&agent, "success") == 1.0).then_some(()));
    let a_at_reload = t.hits("/a");
    wait_until("job a goes on", Duration::from_secs(20), || (t.hits("/a") >= a_at_reload + 5).then_some(()));
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    let samples = accepted_samples(&rx);
    let ends_stale = |prefix: &str| {
        let v: Vec<_> = samples.iter().filter(|(s, _)| s.starts_with(prefix)).collect();
        assert!(!v.is_empty(), "{prefix} arrived");
        v.iter().all(|(_, p)| p.last().is_some_and(|x| is_stale(x.1)))
    };
    assert!(ends_stale("rb_total{"), "job b's series end with a marker");
    assert!(ends_stale("rx_total{"), "the removed receiver's series end with a marker");
    let ups_stale: Vec<&String> = samples
        .iter()
        .filter(|(s, v)| s.starts_with("up{") && v.last().is_some_and(|x| is_stale(x.1)))
        .map(|(s, _)| s)
        .collect();
    assert_eq!(ups_stale.len(), 2, "up of b and x end stale, a's not: {ups_stale:?}");
    assert!(ups_stale.iter().all(|s| !s.contains("job=\"a\"")));
    let a_markers = samples
        .iter()
        .filter(|(s, _)| s.starts_with("ra_total{"))
        .flat_map(|(_, v)| v.iter())
        .filter(|p| is_stale(p.1))
        .count();
    assert_eq!(a_markers, 0, "job a, kept, has no marker (not at the reload, not at shutdown)");
}
