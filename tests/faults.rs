//! Delivery under the faults of a real week, each scenario against a real
//! or source-faithful receiver on loopback, bounded in time, counting the
//! samples scraped against those stored. The target serves counters whose
//! value is the number of the scrape (`Targets::set_counter`), so what must
//! arrive is known exactly.
//!
//! * Elasticsearch (a fake built from its source, `support/elasticsearch.rs`):
//!   a request that outlives the client's timeout is stored, its retry comes
//!   back 400 CONFLICT: delivered, counted as duplicates, nothing dropped;
//!   a 429's `Retry-After` is honoured beyond `max_interval`.
//! * A runtime 403, then a 400 for the held request: the flow resumes.
//! * SIGTERM while paused: with storage nothing is lost across the restart;
//!   without, the loss is counted exactly (`reason="shutdown"`).
//! * A restart writes no staleness marker.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};
use support::elasticsearch::{FakeElasticsearch, Fault};
use support::*;

const SERIES: usize = 5;

fn config(target: &str, endpoint: &str, exporter_extra: &str, extra: &str) -> String {
    format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 250ms, scrape_timeout: 250ms}}
      scrape_configs:
        - job_name: t
          metrics_path: /c
          static_configs: [{{targets: ['{target}']}}]
exporters:
  prometheusremotewrite:
    endpoint: {endpoint}
    startup_check: off
{exporter_extra}
{extra}
service:
  shutdown_timeout: 5s
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#
    )
}

/// The values of counter `c` that arrived, per series, sorted, and how many
/// arrived twice.
fn values_of(r: &[Received]) -> (std::collections::BTreeMap<String, Vec<u64>>, usize) {
    accepted_counter_values(r, "c")
}

/// Every series holds exactly `1..=n` (each once).
fn assert_all(series: &std::collections::BTreeMap<String, Vec<u64>>, n: u64, what: &str) {
    assert_eq!(series.len(), SERIES, "{what}: every series arrived");
    for (s, v) in series {
        let missing: Vec<u64> = (1..=n).filter(|i| v.binary_search(i).is_err()).collect();
        assert!(missing.is_empty(), "{what}: series {s} is missing {missing:?} of 1..={n}");
        assert!(v.iter().all(|x| *x >= 1 && *x <= n), "{what}: series {s} has values never scraped: {v:?}");
    }
}

/// A request Elasticsearch stores but answers after the client's timeout is
/// retried; the retry comes back 400 with CONFLICT for every sample. Those
/// samples are delivered (and counted as duplicates), nothing is dropped,
/// and every scraped sample is stored exactly once.
#[test]
fn elasticsearch_conflicts_after_a_timeout_are_delivered() {
    let targets = Targets::start();
    targets.set_counter("/c", "c", SERIES);
    // The third request is stored, then answered after 2 s (timeout 500 ms).
    let es = FakeElasticsearch::start(
        Arc::new(|i| if i == 2 { Fault::Delay(Duration::from_secs(2)) } else { Fault::None }),
        None,
    );
    let agent = Agent::start(&config(
        &targets.addr.to_string(),
        &es.url("vllm", "inference"),
        "    timeout: 500ms\n    retry_on_failure: {initial_interval: 100ms, max_interval: 200ms}",
        "",
    ));
    wait_until("the slow request answered and 20 more scrapes", Duration::from_secs(30), || {
        let s = es.store.lock().unwrap();
        (s.conflicts > 0 && s.answers.len() > 20).then_some(())
    });
    let m = agent.self_metrics();
    let dup = m.sum("infertel_exporter_duplicate_samples_total", &[]);
    let rejected = m.sum("infertel_exporter_dropped_samples_total", &[("reason", "rejected")]);
    let conflicts = es.store.lock().unwrap().conflicts as f64;
    println!("elasticsearch: conflicts {conflicts}, duplicates counted {dup}, rejected {rejected}");
    assert!(conflicts > 0.0, "the retry re-sent stored samples");
    assert_eq!(dup, conflicts, "every CONFLICT counted as a duplicate");
    assert_eq!(rejected, 0.0, "no sample counted as rejected");
    assert!(es.store.lock().unwrap().answers.contains(&400), "Elasticsearch answered 400 for the conflicts");
    // Stored once each, none missing up to the last scrape stored.
    let s = es.store.lock().unwrap();
    let series: Vec<(&String, &Vec<(i64, f64)>)> = s.values.iter().filter(|(k, _)| k.starts_with("c{")).collect();
    assert_eq!(series.len(), SERIES);
    let n = series.iter().map(|(_, v)| v.len()).min().unwrap() as u64;
    for (k, v) in series {
        let mut vals: Vec<u64> = v.iter().map(|(_, x)| *x as u64).collect();
        vals.sort_unstable();
        vals.truncate(n as usize);
        assert_eq!(vals, (1..=n).collect::<Vec<_>>(), "{k}: stored once each, in full");
    }
}

/// A 429 with `Retry-After: 2` is waited for two seconds, although
/// `max_interval` is 200 ms; then the request is delivered.
#[test]
fn elasticsearch_throttling_honours_retry_after() {
    let targets = Targets::start();
    targets.set_counter("/c", "c", SERIES);
    let es = FakeElasticsearch::start(Arc::new(|i| if i == 3 { Fault::Throttle(2) } else { Fault::None }), None);
    let _agent = Agent::start(&config(
        &targets.addr.to_string(),
        &es.url("vllm", "inference"),
        "    retry_on_failure: {initial_interval: 100ms, max_interval: 200ms}\n    sending_queue: {num_consumers: 1}",
        "",
    ));
    let t0 = Instant::now();
    wait_until("the throttled request", Duration::from_secs(20), || {
        (es.store.lock().unwrap().answers.len() > 3).then_some(())
    });
    let throttled_at = Instant::now();
    wait_until("the next request", Duration::from_secs(20), || {
        (es.store.lock().unwrap().answers.len() > 4).then_some(())
    });
    let waited = throttled_at.elapsed();
    println!("429 Retry-After 2: next request after {waited:?} (test start {:?} ago)", t0.elapsed());
    assert!(waited >= Duration::from_millis(1800), "Retry-After honoured: waited {waited:?}");
    assert_eq!(es.store.lock().unwrap().answers[3], 429);
}

/// Phases of a scripted receiver: 0 accepts, 1 answers 403 (a rotated key),
/// 2 answers 400 to the request held since the 403 (its samples now "too
/// old") and accepts everything else.
fn phased(phase: Arc<AtomicU8>, held_below: Arc<std::sync::atomic::AtomicU64>) -> RwReceiver {
    RwReceiver::start_with(Arc::new(move |_, series| {
        let p = phase.load(Ordering::SeqCst);
        let oldest = series
            .iter()
            .filter(|s| s.labels.metric_name() == "c")
            .flat_map(|s| s.samples.iter().map(|x| x.value as u64))
            .min();
        match p {
            0 => (204, Duration::ZERO),
            1 => (403, Duration::ZERO),
            _ => match oldest {
                Some(v) if v < held_below.load(Ordering::SeqCst) => (400, Duration::ZERO),
                _ => (204, Duration::ZERO),
            },
        }
    }))
}

/// A runtime 403 pauses the exporter; the request it held then ends with a
/// 400 (rejected for its own content). The flow resumes: scrapes made after
/// that arrive. Before, only a 2xx re-opened the gate and the agent stalled.
#[test]
fn runtime_403_then_400_for_the_held_request_resumes() {
    let targets = Targets::start();
    targets.set_counter("/c", "c", SERIES);
    let phase = Arc::new(AtomicU8::new(0));
    let held_below = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
    let rx = phased(phase.clone(), held_below.clone());
    let agent = Agent::start(&config(
        &targets.addr.to_string(),
        &rx.url(),
        "    retry_on_failure: {initial_interval: 100ms, max_interval: 500ms}",
        "",
    ));
    wait_until("a few scrapes delivered", Duration::from_secs(20), || (targets.hits("/c") >= 4).then_some(()));
    phase.store(1, Ordering::SeqCst);
    wait_until("the exporter paused", Duration::from_secs(20), || {
        (agent.self_metric("infertel_exporter_endpoint_up", &[]) == 0.0).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    // Everything scraped so far is "too old" for the receiver now.
    let cut = targets.hits("/c");
    held_below.store(cut, Ordering::SeqCst);
    phase.store(2, Ordering::SeqCst);
    let want = cut + 8;
    wait_until("scrapes after the 400 delivered", Duration::from_secs(30), || {
        let (v, _) = values_of(&rx.received());
        (v.len() == SERIES && v.values().all(|x| x.iter().any(|n| *n >= want))).then_some(())
    });
    assert_eq!(agent.self_metric("infertel_exporter_endpoint_up", &[]), 1.0, "endpoint up again");
    let rejected = agent.self_metric("infertel_exporter_dropped_samples_total", &[("reason", "rejected")]);
    println!("403 then 400: rejected {rejected} samples of the held request; flow resumed past scrape {want}");
    assert!(rejected > 0.0, "the held request's 400 is counted");
}

/// SIGTERM while paused on a 403. With storage, what was held and queued
/// stays on disk and arrives after the restart: nothing lost. Without, the
/// loss is counted exactly as dropped, reason `shutdown`.
#[test]
fn sigterm_while_paused_keeps_on_disk_or_counts_the_loss() {
    for with_storage in [true, false] {
        let targets = Targets::start();
        targets.set_counter("/c", "c", SERIES);
        let phase = Arc::new(AtomicU8::new(0));
        let rx = phased(phase.clone(), Arc::new(std::sync::atomic::AtomicU64::new(0)));
        let dir = tempfile::tempdir().unwrap();
        let storage = if with_storage {
            format!("extensions:\n  file_storage/q: {{directory: \"{}\"}}", dir.path().display())
        } else {
            String::new()
        };
        let queue = if with_storage { "    sending_queue: {storage: file_storage/q}" } else { "" };
        let mut cfg = config(
            &targets.addr.to_string(),
            &rx.url(),
            &format!("    retry_on_failure: {{initial_interval: 100ms, max_interval: 500ms}}\n{queue}"),
            &storage,
        );
        if with_storage {
            cfg = cfg.replace("service:\n", "service:\n  extensions: [file_storage/q]\n");
        }
        let mut agent = Agent::start(&cfg);
        wait_until("a few scrapes delivered", Duration::from_secs(20), || (targets.hits("/c") >= 4).then_some(()));
        phase.store(1, Ordering::SeqCst);
        wait_until("paused", Duration::from_secs(20), || {
            (agent.self_metric("infertel_exporter_endpoint_up", &[]) == 0.0).then_some(())
        });
        std::thread::sleep(Duration::from_secs(2));
        let before_stop = agent.self_metrics();
        assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
        let scraped = targets.hits("/c");
        let log = agent.proc.log_text();
        let (arrived, _) = values_of(&rx.received());
        let arrived_samples: usize = arrived.values().map(|v| v.len()).sum();
        if with_storage {
            // The endpoint is fixed; the agent restarts on the same queue.
            phase.store(0, Ordering::SeqCst);
            targets.set_counter("/c2", "other", 1);
            let cfg2 = cfg.replace("metrics_path: /c", "metrics_path: /c2");
            let _again = Agent::start(&cfg2);
            wait_until("the backlog delivered after the restart", Duration::from_secs(30), || {
                let (v, _) = values_of(&rx.received());
                (v.len() == SERIES && v.values().all(|x| x.binary_search(&scraped).is_ok())).then_some(())
            });
            let (v, dups) = values_of(&rx.received());
            println!(
                "SIGTERM while paused, storage: scraped {scraped} x {SERIES}, stored {} (duplicates {dups})",
                v.values().map(|x| x.len()).sum::<usize>()
            );
            assert_all(&v, scraped, "with storage");
        } else {
            // Every scrape made SERIES counter samples and 5 report samples
            // (up, scrape_*); what did not arrive must be counted, exactly.
            let produced = scraped as usize * (SERIES + 5);
            let arrived_all: usize = rx
                .received()
                .iter()
                .filter(|r| r.status / 100 == 2)
                .flat_map(|r| r.series.iter())
                .map(|s| s.samples.len())
                .sum();
            let number_before = |line: &str, tail: &str| -> usize {
                line.split(tail)
                    .next()
                    .and_then(|h| h.split_whitespace().last())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            };
            let counted: usize = log
                .lines()
                .map(|l| {
                    if l.contains("held samples not delivered") {
                        number_before(l, " held samples not delivered")
                    } else if l.contains("queued samples") && l.contains("dropped") {
                        number_before(l, " queued samples")
                    } else {
                        0
                    }
                })
                .sum();
            println!(
                "SIGTERM while paused, no storage: produced {produced} samples ({scraped} scrapes), stored {arrived_all} ({arrived_samples} of c), counted as dropped at shutdown {counted}"
            );
            assert!(produced > arrived_all, "something was held or queued");
            assert_eq!(counted, produced - arrived_all, "the loss is counted exactly:\n{log}");
            let _ = before_stop;
        }
    }
}

/// A restart (SIGTERM, start) writes no staleness marker: the series
/// continue, with a gap no longer than the restart.
#[test]
fn a_restart_writes_no_staleness_marker() {
    let targets = Targets::start();
    targets.set_counter("/c", "c", SERIES);
    let rx = RwReceiver::start(Arc::new(|_| (204, Duration::ZERO)));
    let cfg = config(&targets.addr.to_string(), &rx.url(), "", "");
    let mut a = Agent::start(&cfg);
    wait_until("scrapes delivered", Duration::from_secs(20), || (targets.hits("/c") >= 4).then_some(()));
    assert_eq!(a.proc.terminate(Duration::from_secs(20)), Some(0));
    let _b = Agent::start(&cfg);
    let at = targets.hits("/c");
    wait_until("scraping again", Duration::from_secs(20), || (targets.hits("/c") >= at + 4).then_some(()));
    std::thread::sleep(Duration::from_secs(1));
    let stale: Vec<String> = rx
        .received()
        .iter()
        .flat_map(|r| r.series.iter())
        .filter(|s| s.samples.iter().any(|x| infertel_model::is_stale_nan(x.value)))
        .map(|s| s.labels.to_string())
        .collect();
    assert!(stale.is_empty(), "no staleness marker across the restart: {stale:?}");
}
