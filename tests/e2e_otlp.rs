//! End to end over OTLP: infertel scrapes every real capture in
//! `shared/fixtures/real/` and exports it to an independent receiver
//! (`tests/otlp_receiver.py`, the official opentelemetry-proto Python
//! package): over gRPC (gzip) in the default OTel mapping and over HTTP
//! (zstd) through the `preserve_names` processor. The expectations are
//! computed here from the fixture text and the OTel Prometheus
//! compatibility rules: names, types, bounds and per-bucket counts,
//! resource attributes, start times. Then the retry classes of both
//! transports and partial success, against scripted replies.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use support::otlp::{OtlpReceiver, Point};
use support::*;

type Attrs = BTreeMap<String, String>;

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b
}

fn fixtures() -> Vec<std::path::PathBuf> {
    let dir = shared_dir().join("fixtures/real");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "prom"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "expected the 9 real captures, found {}", files.len());
    files
}

/// One scraped sample as the fixture says: name, labels (empty values
/// dropped), value, the family's declared type and name.
struct Sample {
    name: String,
    labels: Attrs,
    value: f64,
    family: String,
    kind: &'static str,
}

fn samples(body: &[u8]) -> Vec<Sample> {
    let exp = infertel_exposition::parse(body, infertel_exposition::Format::PrometheusText).expect("fixture parses");
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for s in &exp.samples {
        let labels: Attrs =
            exp.labels(s).iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        // Prometheus keeps the first of duplicate series.
        if !seen.insert((s.name.to_string(), labels.clone())) {
            continue;
        }
        let fam = exp.family(s);
        out.push(Sample {
            name: s.name.to_string(),
            labels,
            value: s.value,
            family: fam.map(|f| f.name.to_string()).unwrap_or_else(|| s.name.to_string()),
            kind: s.kind.as_str(),
        });
    }
    out
}

/// Families by name → type, to resolve `_created`.
fn family_types(ss: &[Sample]) -> BTreeMap<String, &'static str> {
    ss.iter().map(|s| (s.family.clone(), s.kind)).collect()
}

/// The cumulative family a `_created` sample gives the start time of.
fn created_of(name: &str, fams: &BTreeMap<String, &'static str>) -> Option<String> {
    let base = name.strip_suffix("_created")?;
    if let Some(&("counter" | "histogram" | "summary")) = fams.get(base) {
        return Some(base.to_string());
    }
    let total = format!("{base}_total");
    (fams.get(&total) == Some(&"counter")).then_some(total)
}

const REPORT: [&str; 5] = [
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
];

/// Latest point per (job, metric, attributes) over all requests of a transport.
fn latest(rx: &OtlpReceiver, transport: &str) -> BTreeMap<(String, String, Vec<(String, String)>), Point> {
    let mut out = BTreeMap::new();
    for r in rx.requests().into_iter().filter(|r| r.transport == transport) {
        assert!(r.error.is_none(), "receiver could not decode a request: {:?}", r.error);
        for p in r.points() {
            let job = p.resource.get("service.name").cloned().unwrap_or_default();
            let k = (job, p.metric.clone(), p.attrs.clone().into_iter().collect::<Vec<_>>());
            let newer = out.get(&k).is_none_or(|old: &Point| old.time <= p.time);
            if newer {
                out.insert(k, p);
            }
        }
    }
    out
}

#[test]
fn every_real_fixture_over_otlp_grpc_and_http_in_both_naming_modes() {
    let files = fixtures();
    let targets = Targets::start();
    let rx = OtlpReceiver::start("[]");
    let instance = targets.addr.to_string();
    let mut jobs = String::new();
    let mut want: Vec<(String, String, Vec<Sample>)> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let body = std::fs::read(f).expect("read fixture");
        let job = format!("fixture{i}");
        targets.set(&format!("/{job}"), TEXT_004, body.clone());
        jobs.push_str(&format!("        - job_name: {job}\n          metrics_path: /{job}\n          static_configs: [{{targets: ['{instance}']}}]\n"));
        want.push((f.file_name().unwrap().to_string_lossy().to_string(), job, samples(&body)));
    }
    // Family metadata is kept per family name for the exporter (as in
    // remote-write metadata), so a series one capture leaves untyped takes
    // the type another target declared for the same name (the partial A100
    // capture has no TYPE lines for some DCGM gauges).
    let declared: BTreeMap<String, &'static str> = want
        .iter()
        .flat_map(|(_, _, ss)| ss.iter().filter(|s| s.kind != "unknown").map(|s| (s.family.clone(), s.kind)))
        .collect();
    for (_, _, ss) in want.iter_mut() {
        for s in ss.iter_mut().filter(|s| s.kind == "unknown") {
            if let Some(k) = declared.get(&s.name).filter(|k| matches!(**k, "gauge" | "counter")) {
                s.kind = k;
            }
        }
    }
    let config = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
{jobs}
processors:
  batch: {{timeout: 100ms}}
  preserve_names:
exporters:
  otlp:
    endpoint: {grpc}
    tls: {{insecure: true}}
    compression: gzip
  otlphttp/preserve:
    endpoint: {http}
    compression: zstd
service:
  pipelines:
    metrics/otel:
      receivers: [prometheus]
      processors: [batch]
      exporters: [otlp]
    metrics/preserve:
      receivers: [prometheus]
      processors: [preserve_names, batch]
      exporters: [otlphttp/preserve]
  telemetry:
    metrics: {{address: "{{{{TELEMETRY}}}}"}}
"#,
        grpc = rx.grpc_endpoint(),
        http = rx.http_base()
    );
    let agent = Agent::start(&config);
    let t0_ns = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64)
        .saturating_sub(60_000_000_000);

    // Wait until both transports carried every job at least twice over.
    wait_until("every fixture over both transports", Duration::from_secs(60), || {
        let reqs = rx.requests();
        let jobs_in = |t: &str| -> BTreeSet<String> {
            reqs.iter()
                .filter(|r| r.transport == t)
                .flat_map(|r| r.points())
                .filter_map(|p| p.resource.get("service.name").cloned())
                .collect()
        };
        let n = want.len();
        let enough = reqs.iter().filter(|r| r.transport == "grpc").count() >= 2 * n
            && reqs.iter().filter(|r| r.transport == "http").count() >= 2;
        (enough && jobs_in("grpc").len() == n && jobs_in("http").len() == n).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let reqs = rx.requests();
    // grpcio decompresses gRPC messages itself and hides `grpc-encoding`
    // from the servicer, so gRPC compression is only checked by decoding.
    assert!(
        reqs.iter().filter(|r| r.transport == "http").all(|r| r.encoding == "zstd" && r.path == "/v1/metrics"),
        "HTTP bodies are zstd to /v1/metrics"
    );
    assert!(reqs.iter().all(|r| r.error.is_none()));

    let otel = latest(&rx, "grpc");
    let keep = latest(&rx, "http");
    for (fname, job, ss) in &want {
        let fams = family_types(ss);
        let key = |metric: &str, attrs: &Attrs| {
            (job.clone(), metric.to_string(), attrs.clone().into_iter().collect::<Vec<_>>())
        };
        let resource = |p: &Point| {
            assert_eq!(p.resource.get("service.name"), Some(job), "{fname}: service.name");
            assert_eq!(p.resource.get("service.instance.id"), Some(&instance), "{fname}: service.instance.id");
            assert_eq!(p.scope, "infertel");
        };

        // --- default OTel mapping, over gRPC ---
        let mut created: BTreeMap<(String, Attrs), f64> = BTreeMap::new();
        for s in ss {
            if let Some(f) = created_of(&s.name, &fams) {
                created.insert((f, s.labels.clone()), s.value);
            }
        }
        let mut names_want: BTreeSet<String> = REPORT.iter().map(|s| s.to_string()).collect();
        let mut hists: BTreeMap<(String, Attrs), (Vec<(f64, f64)>, Option<f64>, Option<f64>, Vec<(f64, f64)>, &str)> =
            BTreeMap::new();
        let mut n_checked = 0;
        for s in ss {
            if created_of(&s.name, &fams).is_some() {
                continue;
            }
            match s.kind {
                "histogram" | "summary" => {
                    let mut a = s.labels.clone();
                    let le = a.remove("le");
                    let q = a.remove("quantile");
                    let h = hists.entry((s.family.clone(), a)).or_insert((vec![], None, None, vec![], s.kind));
                    if s.name.ends_with("_bucket") {
                        let le = le.expect("bucket has le");
                        h.0.push((if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, s.value));
                    } else if s.name.ends_with("_sum") {
                        h.1 = Some(s.value);
                    } else if s.name.ends_with("_count") {
                        h.2 = Some(s.value);
                    } else if let Some(q) = q {
                        h.3.push((q.parse().unwrap(), s.value));
                    }
                }
                kind => {
                    names_want.insert(s.name.clone());
                    let p = otel
                        .get(&key(&s.name, &s.labels))
                        .unwrap_or_else(|| panic!("{fname}: OTel mode: {} {:?} missing", s.name, s.labels));
                    resource(p);
                    assert!(
                        same(p.value.unwrap_or(f64::NAN), s.value),
                        "{fname}: {}: {:?} != {}",
                        s.name,
                        p.value,
                        s.value
                    );
                    assert_eq!(p.prometheus_type, kind, "{fname}: {}", s.name);
                    if kind == "counter" {
                        assert!(
                            p.kind == "sum" && p.monotonic && p.cumulative,
                            "{fname}: counter {} is a monotonic cumulative sum: {p:?}",
                            s.name
                        );
                        match created.get(&(s.family.clone(), s.labels.clone())) {
                            Some(c) => assert!(
                                (p.start as f64 - c * 1e9).abs() < 2e3,
                                "{fname}: {} start {} from _created {c}",
                                s.name,
                                p.start
                            ),
                            None => assert!(
                                p.start >= t0_ns && p.start <= p.time,
                                "{fname}: {} start {} first seen, before {}",
                                s.name,
                                p.start,
                                p.time
                            ),
                        }
                    } else {
                        assert_eq!(p.kind, "gauge", "{fname}: {} ({kind}) is a gauge", s.name);
                        assert_eq!(p.start, 0, "{fname}: gauges have no start time");
                    }
                    n_checked += 1;
                }
            }
        }
        for ((family, attrs), (mut buckets, sum, count, mut qs, kind)) in hists {
            let Some(count) = count else { continue };
            names_want.insert(family.clone());
            let p =
                otel.get(&key(&family, &attrs)).unwrap_or_else(|| panic!("{fname}: {kind} {family} {attrs:?} missing"));
            resource(p);
            assert_eq!(p.kind, kind, "{fname}: {family}");
            assert_eq!(p.count, count as u64, "{fname}: {family} count");
            match created.get(&(family.clone(), attrs.clone())) {
                Some(c) => assert!((p.start as f64 - c * 1e9).abs() < 2e3, "{fname}: {family} start from _created"),
                None => assert!(p.start >= t0_ns && p.start <= p.time, "{fname}: {family} start first seen"),
            }
            if kind == "histogram" {
                buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
                let bounds: Vec<f64> = buckets.iter().map(|b| b.0).filter(|b| b.is_finite()).collect();
                let mut counts = Vec::new();
                let mut prev = 0.0;
                for (le, c) in &buckets {
                    if le.is_finite() {
                        counts.push((c - prev) as u64);
                        prev = *c;
                    }
                }
                counts.push((count - prev) as u64);
                assert_eq!(p.bounds, bounds, "{fname}: {family} bounds (no +Inf)");
                assert_eq!(p.bucket_counts, counts, "{fname}: {family} per-bucket counts");
                assert_eq!(p.sum, sum, "{fname}: {family} sum");
                assert!(p.cumulative);
            } else {
                qs.sort_by(|a, b| a.0.total_cmp(&b.0));
                assert_eq!(p.quantiles.len(), qs.len(), "{fname}: {family} quantiles");
                assert_eq!(p.sum.unwrap_or(0.0), sum.unwrap_or(0.0));
            }
            n_checked += 1;
        }
        let names_got: BTreeSet<String> = otel.keys().filter(|k| k.0 == *job).map(|k| k.1.clone()).collect();
        assert_eq!(names_got, names_want, "{fname}: OTel-mode metric names (no _created once used as start times)");

        // --- preserve_names, over HTTP ---
        let mut names_want: BTreeSet<String> = REPORT.iter().map(|s| s.to_string()).collect();
        for s in ss {
            names_want.insert(s.name.clone());
            let mut a = s.labels.clone();
            a.insert("job".into(), job.clone());
            a.insert("instance".into(), instance.clone());
            let p =
                keep.get(&key(&s.name, &a)).unwrap_or_else(|| panic!("{fname}: preserve: {} {a:?} missing", s.name));
            resource(p);
            assert!(same(p.value.unwrap_or(f64::NAN), s.value), "{fname}: {}: {:?} != {}", s.name, p.value, s.value);
            assert_eq!(p.prometheus_type, s.kind, "{fname}: {} prometheus.type", s.name);
            let role_sum = s.name.ends_with("_sum") && matches!(s.kind, "histogram" | "summary");
            let role_mono = s.kind == "counter"
                || (matches!(s.kind, "histogram" | "summary")
                    && (s.name.ends_with("_bucket") || s.name.ends_with("_count")));
            if role_mono {
                assert!(
                    p.kind == "sum" && p.monotonic && p.cumulative,
                    "{fname}: {} is a monotonic cumulative sum: {p:?}",
                    s.name
                );
                assert!(p.start > 0 && p.start <= p.time);
            } else if role_sum {
                assert!(p.kind == "sum" && !p.monotonic && p.cumulative, "{fname}: {} is a non-monotonic sum", s.name);
            } else {
                assert_eq!(p.kind, "gauge", "{fname}: {} ({}) is a gauge", s.name, s.kind);
            }
        }
        let names_got: BTreeSet<String> = keep.keys().filter(|k| k.0 == *job).map(|k| k.1.clone()).collect();
        assert_eq!(names_got, names_want, "{fname}: preserved names are exactly the scraped series names");
        println!("{fname}: OTel mode {n_checked} points exact; preserve mode {} series exact", ss.len());
    }
    assert_eq!(agent.self_metric("infertel_exporter_dropped_samples_total", &[]), 0.0, "{}", agent.proc.log_text());
    assert!(agent.self_metric("infertel_exporter_sent_samples_total", &[("exporter", "otlp")]) > 0.0);
}

const SMALL: &str = "# HELP c_total C.\n# TYPE c_total counter\nc_total 1\n";

/// Runs an agent scraping one small target into `exporter_yaml`.
fn agent_for(targets: &Targets, exporter_yaml: &str) -> Agent {
    targets.set("/m", TEXT_004, SMALL);
    Agent::start(&format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
        - job_name: small
          metrics_path: /m
          static_configs: [{{targets: ['{addr}']}}]
exporters:
{exporter_yaml}
service:
  pipelines:
    metrics:
      receivers: [prometheus]
      exporters: [{id}]
  telemetry:
    metrics: {{address: "{{{{TELEMETRY}}}}"}}
"#,
        addr = targets.addr,
        id = exporter_yaml.trim_start().split(':').next().unwrap()
    ))
}

/// The scrape time of `c_total` in a request (identifies the batch).
fn batch_time(r: &support::otlp::OtlpRequest) -> u64 {
    r.points().iter().find(|p| p.metric == "c_total").map(|p| p.time).unwrap_or(0)
}

fn retry_yaml() -> &'static str {
    // The runtime classes are tested here: no startup probe to consume the
    // receiver's scripted answers (tests/startup_checks.rs covers probes).
    "    retry_on_failure: {initial_interval: 100ms, max_interval: 5s, max_elapsed_time: 60s}\n    sending_queue: {num_consumers: 1}\n    startup_check: off\n"
}

#[test]
fn otlp_http_retry_classes_retry_after_and_partial_success() {
    let targets = Targets::start();
    // 503 with Retry-After: 1, 429, 502, 504: retried (same batch); then 200.
    let rx = OtlpReceiver::start(r#"[{"http": 503, "retry_after": "1"}, {"http": 429}, {"http": 502}, {"http": 504}]"#);
    let agent = agent_for(
        &targets,
        &format!("  otlphttp:\n    endpoint: {}\n    compression: gzip\n{}", rx.http_base(), retry_yaml()),
    );
    let reqs = wait_until("5 HTTP requests", Duration::from_secs(30), || {
        let r: Vec<_> = rx.requests().into_iter().filter(|r| batch_time(r) > 0).collect();
        (r.len() >= 5).then_some(r)
    });
    let t = batch_time(&reqs[0]);
    assert!(reqs[..5].iter().all(|r| batch_time(r) == t), "429/502/503/504 retry the same batch");
    assert!(reqs[1].time - reqs[0].time >= 0.95, "Retry-After: 1 honoured ({}s)", reqs[1].time - reqs[0].time);
    assert!(reqs.iter().all(|r| r.encoding == "gzip" && r.headers["content-type"] == "application/x-protobuf"));
    assert!(agent.self_metric("infertel_exporter_sent_samples_total", &[("exporter", "otlphttp")]) > 0.0);
    drop(agent);

    // Not retried: 400, 408, 500, 501 each drop their batch (401, 403,
    // 404, 405, 415 pause the exporter and hold it: tests/startup_checks.rs;
    // 413 splits the request, below).
    let codes = [400, 408, 500, 501];
    let script: Vec<String> = codes.iter().map(|c| format!("{{\"http\": {c}}}")).collect();
    let rx = OtlpReceiver::start(&format!("[{}]", script.join(",")));
    let agent =
        agent_for(&targets, &format!("  otlphttp:\n    endpoint: {}/v1/metrics\n{}", rx.http_base(), retry_yaml()));
    let reqs = wait_until("6 HTTP requests", Duration::from_secs(40), || {
        let r: Vec<_> = rx.requests().into_iter().filter(|r| batch_time(r) > 0).collect();
        (r.len() > codes.len()).then_some(r)
    });
    let times: BTreeSet<u64> = reqs[..codes.len()].iter().map(batch_time).collect();
    assert_eq!(times.len(), codes.len(), "every non-retryable status dropped its batch (no batch sent twice)");
    assert!(reqs.iter().all(|r| r.path == "/v1/metrics"), "the /v1/metrics suffix is not doubled");
    let dropped = agent
        .self_metric("infertel_exporter_dropped_samples_total", &[("exporter", "otlphttp"), ("reason", "rejected")]);
    assert!(dropped >= codes.len() as f64, "dropped and counted: {dropped}");
    for c in codes {
        assert_eq!(
            agent.self_metric(
                "infertel_exporter_failed_requests_total",
                &[("exporter", "otlphttp"), ("status", &c.to_string())]
            ),
            1.0,
            "status {c} counted"
        );
    }
    drop(agent);

    // 413: the request is split in halves and the halves re-sent (issue 12
    // §5), not dropped: the same scrape arrives again, in two requests whose
    // points add up to the refused one's.
    let rx = OtlpReceiver::start(r#"[{"http": 413}]"#);
    let agent = agent_for(&targets, &format!("  otlphttp:\n    endpoint: {}\n{}", rx.http_base(), retry_yaml()));
    let reqs = wait_until("the refused request and its halves", Duration::from_secs(30), || {
        let r: Vec<_> = rx.requests().into_iter().filter(|r| !r.points().is_empty()).collect();
        (r.len() >= 3).then_some(r)
    });
    let refused = reqs[0].points().len();
    let halves = reqs[1].points().len() + reqs[2].points().len();
    assert!(refused > 1, "a request of several points was refused");
    assert_eq!(halves, refused, "the two halves carry every point of the refused request");
    assert!(reqs[1].points().len() < refused && reqs[2].points().len() < refused);
    assert_eq!(
        agent.self_metric(
            "infertel_exporter_dropped_samples_total",
            &[("exporter", "otlphttp"), ("reason", "rejected")]
        ),
        0.0,
        "nothing dropped for the 413"
    );
    drop(agent);

    // Partial success: logged, counted, never retried.
    let rx = OtlpReceiver::start(r#"[{"partial": {"rejected": 2, "message": "2 points had bad attributes"}}]"#);
    let agent = agent_for(
        &targets,
        &format!("  otlphttp:\n    endpoint: {}\n    compression: none\n{}", rx.http_base(), retry_yaml()),
    );
    let reqs = wait_until("3 HTTP requests", Duration::from_secs(30), || {
        let r: Vec<_> = rx.requests().into_iter().filter(|r| batch_time(r) > 0).collect();
        (r.len() >= 3).then_some(r)
    });
    assert_ne!(batch_time(&reqs[0]), batch_time(&reqs[1]), "a partial success is not retried");
    assert_eq!(reqs[0].encoding, "identity");
    wait_until("rejected points counted", Duration::from_secs(10), || {
        (agent.self_metric("infertel_exporter_rejected_points_total", &[("exporter", "otlphttp")]) == 2.0).then_some(())
    });
    assert!(agent.proc.log_text().contains("2 points had bad attributes"), "{}", agent.proc.log_text());
}

#[test]
fn otlp_grpc_retry_codes_retry_info_and_partial_success() {
    let targets = Targets::start();
    // UNAVAILABLE, then RESOURCE_EXHAUSTED with a 1.5 s RetryInfo, then OK: same batch three times.
    let rx = OtlpReceiver::start(
        r#"[{"grpc": "UNAVAILABLE"}, {"grpc": "RESOURCE_EXHAUSTED", "retry_delay_s": 1.5}, {"grpc": "DEADLINE_EXCEEDED"}, {"grpc": "ABORTED"}]"#,
    );
    let agent = agent_for(
        &targets,
        &format!("  otlp:\n    endpoint: {}\n    tls: {{insecure: true}}\n{}", rx.grpc_endpoint(), retry_yaml()),
    );
    let reqs = wait_until("5 gRPC requests", Duration::from_secs(30), || {
        let r: Vec<_> = rx.requests().into_iter().filter(|r| batch_time(r) > 0).collect();
        (r.len() >= 5).then_some(r)
    });
    let t = batch_time(&reqs[0]);
    assert!(reqs[..5].iter().all(|r| batch_time(r) == t), "retryable codes retry the same batch");
    assert!(reqs[2].time - reqs[1].time >= 1.45, "RetryInfo delay honoured: {}s", reqs[2].time - reqs[1].time);
    drop(agent);

    // RESOURCE_EXHAUSTED without RetryInfo, INVALID_ARGUMENT, INTERNAL:
    // dropped (UNAUTHENTICATED pauses and holds: tests/startup_checks.rs).
    let codes = ["RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", "INTERNAL"];
    let script: Vec<String> = codes.iter().map(|c| format!("{{\"grpc\": \"{c}\"}}")).collect();
    let rx = OtlpReceiver::start(&format!(
        "[{}, {{\"partial\": {{\"rejected\": 3, \"message\": \"three bad points\"}}}}]",
        script.join(",")
    ));
    let agent = agent_for(
        &targets,
        &format!("  otlp:\n    endpoint: http://{}\n    compression: none\n{}", rx.grpc_endpoint(), retry_yaml()),
    );
    let reqs = wait_until("5 gRPC requests", Duration::from_secs(30), || {
        let r: Vec<_> = rx.requests().into_iter().filter(|r| batch_time(r) > 0).collect();
        (r.len() >= 5).then_some(r)
    });
    let times: BTreeSet<u64> = reqs[..5].iter().map(batch_time).collect();
    assert_eq!(times.len(), 5, "non-retryable codes and partial success are not retried");
    for c in ["ResourceExhausted", "InvalidArgument", "Internal"] {
        assert_eq!(
            agent.self_metric("infertel_exporter_failed_requests_total", &[("exporter", "otlp"), ("status", c)]),
            1.0,
            "{c} counted"
        );
    }
    wait_until("rejected points counted", Duration::from_secs(10), || {
        (agent.self_metric("infertel_exporter_rejected_points_total", &[("exporter", "otlp")]) == 3.0).then_some(())
    });
}
