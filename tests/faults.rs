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
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::elasticsearch::{FakeElasticsearch, Fault};
use support::*;

const SERIES: usize = 5;

fn config(target: &str, endpoint: &str, exporter_extra: &str, extra: &str) -> String {
    config_for("prometheusremotewrite", target, endpoint, exporter_extra, extra)
}

/// The scenarios' agent: one 250 ms job on `/c`, one exporter of `kind`.
fn config_for(kind: &str, target: &str, endpoint: &str, exporter_extra: &str, extra: &str) -> String {
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
  {kind}:
    endpoint: {endpoint}
    startup_check: off
{exporter_extra}
{extra}
service:
  shutdown_timeout: 5s
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [{kind}]}}
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

/// No configured secret appears in any log line or on `/metrics`, across
/// startup, a 401 pause, 500 retries, a 400 drop and shutdown: credentials
/// in the URL's userinfo, in headers (`X-API-Key`, `X-Auth-Token`, a bare
/// `Authorization`), basic auth and a bearer token, for remote write and
/// OTLP/HTTP (whose endpoint is logged on every retry and drop).
#[test]
fn secrets_never_reach_logs_or_metrics() {
    let targets = Targets::start();
    targets.set_counter("/c", "c", SERIES);
    // Probes (empty requests): 401 three times, then accepted. Requests
    // with data: 500 twice (retried), 400 once (dropped), then accepted.
    let (probes, sends) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let rx = RwReceiver::start_with(Arc::new(move |_, series| {
        let s = if series.is_empty() {
            if probes.fetch_add(1, Ordering::SeqCst) < 3 { 401 } else { 204 }
        } else {
            match sends.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => 500,
                2 => 400,
                _ => 204,
            }
        };
        (s, Duration::ZERO)
    }));
    let secrets =
        ["hunter2-userinfo", "key-9f8e7d6c5b", "tok-1a2b3c4d5e", "bare-authz-77aa", "pw-basic-4242", "bearer-tok-5151"];
    let rw = rx.url().replace("http://", "http://writer:hunter2-userinfo@");
    let cfg = format!(
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
    endpoint: {rw}
    startup_check: warn
    headers: {{X-API-Key: key-9f8e7d6c5b, X-Auth-Token: tok-1a2b3c4d5e}}
    retry_on_failure: {{initial_interval: 100ms, max_interval: 200ms}}
  prometheusremotewrite/basic:
    endpoint: {rwb}
    startup_check: warn
    auth: {{authenticator: basicauth/x}}
    retry_on_failure: {{initial_interval: 100ms, max_interval: 200ms}}
  otlphttp:
    endpoint: http://otel:pw-basic-4242@127.0.0.1:{closed}/otlp?token=bearer-tok-5151
    headers: {{Authorization: bare-authz-77aa}}
    retry_on_failure: {{initial_interval: 100ms, max_interval: 200ms, max_elapsed_time: 1s}}
    startup_check: warn
  prometheusremotewrite/token:
    endpoint: http://127.0.0.1:{closed}/api/v1/write
    auth: {{authenticator: bearertokenauth/t}}
    startup_check: warn
    retry_on_failure: {{initial_interval: 100ms, max_interval: 200ms, max_elapsed_time: 1s}}
extensions:
  basicauth/x: {{client_auth: {{username: u, password: pw-basic-4242}}}}
  bearertokenauth/t: {{token: bearer-tok-5151}}
service:
  extensions: [basicauth/x, bearertokenauth/t]
  shutdown_timeout: 3s
  pipelines:
    metrics:
      receivers: [prometheus]
      exporters: [prometheusremotewrite, prometheusremotewrite/basic, otlphttp, prometheusremotewrite/token]
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        target = targets.addr,
        rwb = rx.url(),
        closed = free_port(),
    );
    let mut agent = Agent::start(&cfg);
    wait_until("the 400 and some accepted requests", Duration::from_secs(30), || {
        (rx.received().len() > 12).then_some(())
    });
    // Let the closed-port exporters retry and drop a few times.
    std::thread::sleep(Duration::from_secs(2));
    let (code, metrics) = http_get(&agent.metrics_url()).unwrap();
    assert_eq!(code, 200);
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0));
    let log = agent.proc.log_text();
    assert!(log.contains("401") || log.contains("unauthorized"), "the 401 was logged:\n{log}");
    assert!(log.contains("dropping"), "a drop was logged:\n{log}");
    for s in secrets {
        for (i, line) in log.lines().enumerate() {
            assert!(!line.contains(s), "log line {i} shows {s}: {line}");
        }
        assert!(!metrics.contains(s), "/metrics shows {s}");
    }
    println!(
        "secrets: {} log lines and {} bytes of /metrics checked for {} secrets",
        log.lines().count(),
        metrics.len(),
        secrets.len()
    );
}

/// SIGTERM during a reload is not lost: the agent exits within
/// `shutdown_timeout` (3 s here) instead of starting the new config and
/// running on. The reload is slowed by a receiver that answers each request
/// after 1.5 s, so the old pipeline is still stopping when SIGTERM comes.
#[test]
fn sigterm_during_a_reload_exits() {
    let targets = Targets::start();
    targets.set_counter("/c", "c", SERIES);
    let rx = RwReceiver::start(Arc::new(|_| (204, Duration::from_millis(1500))));
    let cfg =
        config(&targets.addr.to_string(), &rx.url(), "", "").replace("shutdown_timeout: 5s", "shutdown_timeout: 3s");
    let agent = Agent::start(&cfg);
    wait_until("requests in flight", Duration::from_secs(20), || (!rx.received().is_empty()).then_some(()));
    let mut agent = agent;
    // A changed exporter: the reload waits for the old one's request in
    // flight (1.5 s) before handing its queue over.
    agent.write_config(&cfg.replace("    startup_check: off", "    startup_check: off\n    headers: {X-Reload: '1'}"));
    agent.reload();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let code = agent.proc.terminate(Duration::from_secs(10));
    let took = t0.elapsed();
    println!("SIGTERM 300 ms into a reload: exited with {code:?} after {took:?}");
    assert_eq!(code, Some(0), "exited cleanly:\n{}", agent.proc.log_text());
    assert!(took < Duration::from_secs(7), "within shutdown_timeout and a margin: {took:?}");
    assert!(
        agent.proc.log_text().contains("signal received during the reload"),
        "the reload gave way to the signal:\n{}",
        agent.proc.log_text()
    );
}

/// Requests over Elasticsearch's size limit (413) are split in halves and
/// re-sent: every sample of 200 series arrives; a single series still too
/// large (a 6 kB label) is dropped alone, counted as `too_large`.
#[test]
fn too_large_requests_are_split_not_dropped() {
    let targets = Targets::start();
    targets.set_counter("/c", "c", 200);
    // An incompressible 6 kB label (snappy would shrink a run of one letter).
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let blob: String = (0..6000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"0123456789abcdef"[(x % 16) as usize])
        })
        .collect();
    let big = format!("# TYPE huge gauge\nhuge{{blob=\"{blob}\"}} 1\n");
    targets.set("/big", TEXT_004, big);
    // 413 above 1.5 kB of (snappy) body: a scrape of 200 counter series is
    // several times that, one series far less, the 6 kB label far more.
    let es = FakeElasticsearch::start(Arc::new(|_| Fault::None), Some(1500));
    let cfg = config(
        &targets.addr.to_string(),
        &es.url("vllm", "inference"),
        "    max_batch_size_bytes: 1MiB\n    sending_queue: {num_consumers: 1}",
        "",
    )
    .replace("        - job_name: t\n", &format!("        - job_name: big\n          metrics_path: /big\n          static_configs: [{{targets: ['{}']}}]\n        - job_name: t\n", targets.addr));
    let agent = Agent::start(&cfg);
    wait_until("8 scrapes of 200 series stored", Duration::from_secs(30), || {
        let s = es.store.lock().unwrap();
        let full = s.values.iter().filter(|(k, _)| k.starts_with("c{")).filter(|(_, v)| v.len() >= 8).count();
        (full == 200).then_some(())
    });
    let m = agent.self_metrics();
    let too_large = m.sum("infertel_exporter_dropped_samples_total", &[("reason", "too_large")]);
    let rejected = m.sum("infertel_exporter_dropped_samples_total", &[("reason", "rejected")]);
    let answers = es.store.lock().unwrap().answers.clone();
    let n413 = answers.iter().filter(|a| **a == 413).count();
    println!("413 split: {n413} requests refused as too large, too_large dropped {too_large}, rejected {rejected}");
    assert!(n413 > 0, "the receiver refused some requests as too large");
    assert_eq!(rejected, 0.0);
    assert!(too_large >= 1.0, "the single oversized series is dropped and counted");
    // Each counter series: every value 1..=n stored, once.
    let s = es.store.lock().unwrap();
    for (k, v) in s.values.iter().filter(|(k, _)| k.starts_with("c{")) {
        let mut vals: Vec<u64> = v.iter().map(|(_, x)| *x as u64).collect();
        vals.sort_unstable();
        let n = *vals.last().unwrap();
        assert_eq!(vals, (1..=n).collect::<Vec<_>>(), "{k}: every scrape stored once");
    }
    assert!(!s.values.keys().any(|k| k.starts_with("huge{")), "the oversized series never got in");
}

/// Per `series` attribute, the values of counter `c` the OTLP receiver got.
fn otlp_counter_values(
    rx: &support::otlp::OtlpReceiver,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<u64>> {
    let mut m: std::collections::BTreeMap<String, std::collections::BTreeSet<u64>> = Default::default();
    for r in rx.requests() {
        for p in r.points().into_iter().filter(|p| p.metric.starts_with('c')) {
            if let (Some(s), Some(v)) = (p.attrs.get("series"), p.value) {
                m.entry(s.clone()).or_default().insert(v as u64);
            }
        }
    }
    m
}

/// A proxy that cuts the first `cut` connections after `after` bytes from
/// the client (mid-call: past the HTTP/2 preface and the request's headers,
/// inside its body), as a collector rollout or a load balancer does; the
/// other connections are forwarded whole. Returns its port and the number
/// of connections cut so far.
fn cutting_proxy(upstream: String, cut: usize, after: usize) -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    std::thread::spawn(move || {
        for (n, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { continue };
            let Ok(server) = std::net::TcpStream::connect(&upstream) else { continue };
            let cutting = n < cut;
            let d = d.clone();
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = [0u8; 4096];
                let mut sent = 0usize;
                while let Ok(k) = c_in.read(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    let k = if cutting { k.min(after.saturating_sub(sent)) } else { k };
                    if s_out.write_all(&buf[..k]).is_err() {
                        break;
                    }
                    sent += k;
                    if cutting && sent >= after {
                        d.fetch_add(1, Ordering::SeqCst);
                        let _ = c_in.shutdown(std::net::Shutdown::Both);
                        let _ = s_out.shutdown(std::net::Shutdown::Both);
                        break;
                    }
                }
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s_in, &mut c_out);
                let _ = c_out.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (port, done)
}

/// gRPC connections cut in the middle of a call (issue 12 §6): tonic gives
/// the failure a code (UNKNOWN, INTERNAL, UNAVAILABLE) though no server sent
/// it; it is retried, not dropped: every scrape arrives at the official
/// Python OTLP receiver, nothing is counted as dropped.
#[test]
fn grpc_connections_reset_mid_call_are_retried() {
    let targets = Targets::start();
    targets.set_counter("/c", "c", SERIES);
    let rx = support::otlp::OtlpReceiver::start("[]");
    let (port, cut) = cutting_proxy(rx.grpc_endpoint(), 2, 150);
    let cfg = config_for(
        "otlp",
        &targets.addr.to_string(),
        &format!("127.0.0.1:{port}"),
        "    tls: {insecure: true}\n    compression: none\n    sending_queue: {num_consumers: 1}\n    retry_on_failure: {initial_interval: 100ms, max_interval: 500ms}",
        "",
    );
    let agent = Agent::start(&cfg);
    let values = |rx: &support::otlp::OtlpReceiver| -> std::collections::BTreeMap<String, Vec<u64>> {
        otlp_counter_values(rx).into_iter().map(|(k, v)| (k, v.into_iter().collect())).collect()
    };
    wait_until("both cuts made and 12 scrapes delivered", Duration::from_secs(40), || {
        let m = values(&rx);
        (cut.load(Ordering::SeqCst) >= 2 && m.len() == SERIES && m.values().all(|v| v.len() >= 12)).then_some(())
    });
    let dropped = agent.self_metric("infertel_exporter_dropped_samples_total", &[]);
    let m = values(&rx);
    let n = m.values().map(|v| *v.last().unwrap()).min().unwrap();
    println!("gRPC cut mid-call twice: {} scrapes delivered per series, dropped {dropped}", n);
    assert_eq!(dropped, 0.0, "nothing dropped");
    for (s, v) in &m {
        let missing: Vec<u64> = (1..=n).filter(|i| v.binary_search(i).is_err()).collect();
        assert!(missing.is_empty(), "series {s}: missing {missing:?} of 1..={n}");
    }
}

/// A 60 s outage of an OTLP/gRPC receiver with gRPC's default 4 MiB
/// receive limit (the official Python receiver), a disk queue behind the
/// exporter (issue 12 §5): the backlog (read back from disk in records of
/// up to 4 MiB compressed) goes out in requests of at most
/// `max_request_bytes` of protobuf; every sample arrives, none is refused
/// as too large or dropped.
#[test]
fn a_60s_otlp_outage_with_a_disk_queue_delivers_everything_under_the_4mib_limit() {
    const WIDE: usize = 300;
    let targets = Targets::start();
    targets.set_counter("/c", "c", WIDE);
    let mut rx = support::otlp::OtlpReceiver::start("[]");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_for(
        "otlp",
        &targets.addr.to_string(),
        &rx.grpc_endpoint(),
        "    tls: {insecure: true}\n    compression: none\n    sending_queue: {num_consumers: 1, storage: file_storage/q}\n    retry_on_failure: {initial_interval: 200ms, max_interval: 2s}",
        &format!("extensions:\n  file_storage/q: {{directory: \"{}\"}}", dir.path().display()),
    )
    .replace("service:\n", "service:\n  extensions: [file_storage/q]\n");
    let agent = Agent::start(&cfg);
    wait_until("a few scrapes delivered", Duration::from_secs(20), || (rx.requests().len() >= 3).then_some(()));
    rx.stop();
    std::thread::sleep(Duration::from_secs(60));
    let queued = agent.self_metric("infertel_exporter_queue_samples", &[]);
    let queue_bytes = agent.self_metric("infertel_exporter_queue_bytes", &[]);
    let before = rx.requests().len();
    rx.start_again();
    let served_at_restart = targets.hits("/c");
    let values = otlp_counter_values;
    wait_until("the backlog delivered", Duration::from_secs(90), || {
        let m = values(&rx);
        (m.len() == WIDE && m.values().all(|v| (1..=served_at_restart).all(|i| v.contains(&i)))).then_some(())
    });
    let m = agent.self_metrics();
    let dropped = m.sum("infertel_exporter_dropped_samples_total", &[]);
    let after = rx.requests().len() - before;
    let largest = rx
        .requests()
        .iter()
        .skip(before)
        .map(|r| r.points().iter().filter(|p| p.metric.starts_with('c')).count())
        .max()
        .unwrap_or(0);
    println!(
        "60 s OTLP outage: {queued} samples ({queue_bytes} bytes) queued on disk; {served_at_restart} scrapes x {WIDE} series all delivered in {after} requests after the restart (largest {largest} points); dropped {dropped}"
    );
    assert!(queued >= (200 * WIDE) as f64, "a real backlog: {queued}");
    assert_eq!(dropped, 0.0, "nothing dropped (too_large, rejected, ...)");
    assert!(after >= 2, "the backlog went out in several requests");
}
