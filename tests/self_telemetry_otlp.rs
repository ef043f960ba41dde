//! The agent's own metrics over OTLP (`service.telemetry.metrics.readers`),
//! received by the independent Python receiver (`tests/otlp_receiver.py`,
//! official opentelemetry-proto package) over gRPC and HTTP/protobuf from
//! one agent with two periodic readers. Each series must arrive with the
//! labels of the Prometheus self-metrics endpoint, as a monotonic
//! cumulative Sum, with a value between two reads of that endpoint taken
//! around the export (histograms: an SDK Histogram with the same bounds);
//! the resource says service.name=infertel. A reader
//! with a one-hour interval proves the flush on exit.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::otlp::{OtlpReceiver, Point};
use support::*;

const SCRAPED: &str = "infertel_receiver_scraped_samples_total";
const SENT: &str = "infertel_exporter_sent_samples_total";

/// Self-metric points that arrived over `transport`, with the request's
/// arrival time (seconds since the epoch).
fn self_points(rx: &OtlpReceiver, transport: &str) -> Vec<(f64, Point)> {
    rx.requests()
        .into_iter()
        .filter(|r| r.transport == transport)
        .flat_map(|r| {
            let t = r.time;
            r.points().into_iter().map(move |p| (t, p))
        })
        .filter(|(_, p)| p.resource.get("service.name").map(String::as_str) == Some("infertel"))
        .collect()
}

fn now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

fn config(targets: &Targets, rx: &OtlpReceiver, readers: &str) -> String {
    targets.set_counter("/m", "c_total", 5);
    format!(
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
  otlp:
    endpoint: {grpc}
    tls: {{insecure: true}}
service:
  pipelines:
    metrics:
      receivers: [prometheus]
      exporters: [otlp]
  telemetry:
    metrics:
      address: "{{{{TELEMETRY}}}}"
      readers:
{readers}
"#,
        addr = targets.addr,
        grpc = rx.grpc_endpoint(),
    )
}

#[test]
fn self_metrics_arrive_over_grpc_and_http_matching_the_prometheus_endpoint() {
    let targets = Targets::start();
    let rx = OtlpReceiver::start("[]");
    let readers = format!(
        r#"        - periodic:
            interval: 1000
            exporter:
              otlp:
                protocol: grpc
                endpoint: {grpc}
                insecure: true
                headers: [{{name: x-tenant, value: self}}]
        - periodic:
            interval: 1s
            exporter:
              otlp:
                protocol: http/protobuf
                endpoint: {http}
                compression: gzip
                headers: {{x-tenant: self-http}}"#,
        grpc = rx.grpc_endpoint(),
        http = rx.http_base(),
    );
    let agent = Agent::start(&config(&targets, &rx, &readers));

    // Both transports carried both counters with non-zero values.
    wait_until("self-metrics over both transports", Duration::from_secs(30), || {
        let ok = ["grpc", "http"].iter().all(|t| {
            let pts = self_points(&rx, t);
            [SCRAPED, SENT].iter().all(|m| pts.iter().any(|(_, p)| p.metric == *m && p.value.unwrap_or(0.0) > 0.0))
        });
        ok.then_some(())
    });

    for transport in ["grpc", "http"] {
        // Read the endpoint, wait for an export collected after that read
        // (the point's own timestamp, taken just after the callbacks ran,
        // not its arrival, which may lag), read again: every OTLP value
        // lies between the two reads.
        let before = agent.self_metrics();
        let t_before = now_s();
        std::thread::sleep(Duration::from_millis(200));
        let deadline = Instant::now() + Duration::from_secs(10);
        let fresh = loop {
            let fresh: Vec<Point> = self_points(&rx, transport)
                .into_iter()
                .filter(|(_, p)| p.time as f64 / 1e9 > t_before + 0.05)
                .map(|(_, p)| p)
                .collect();
            if fresh.iter().any(|p| p.metric == SENT) && fresh.iter().any(|p| p.metric == SCRAPED) {
                break fresh;
            }
            assert!(Instant::now() < deadline, "no {transport} export after {t_before}");
            std::thread::sleep(Duration::from_millis(100));
        };
        let after = agent.self_metrics();
        for metric in [SCRAPED, SENT] {
            let prom: Vec<&(String, BTreeMap<String, String>, f64)> =
                before.0.iter().filter(|(n, _, _)| n == metric).collect();
            assert!(!prom.is_empty(), "{metric} missing from /metrics");
            for (_, labels, lo) in prom {
                // The first fresh export of this series (they arrive in order).
                let p = fresh
                    .iter()
                    .find(|p| p.metric == metric && &p.attrs == labels)
                    .unwrap_or_else(|| panic!("{transport}: no {metric}{labels:?} in {fresh:#?}"));
                let hi = after.sum(metric, &labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>());
                let v = p.value.unwrap();
                assert!(
                    *lo <= v && v <= hi,
                    "{transport} {metric}{labels:?}: OTLP {v} not within /metrics [{lo}, {hi}]"
                );
                assert!(*lo > 0.0, "{metric}{labels:?} still 0 on /metrics");
                assert_eq!(p.kind, "sum", "{metric}");
                assert!(p.monotonic, "{metric} must be a monotonic Sum");
                assert!(p.cumulative, "{metric} must be cumulative");
                assert_eq!(p.resource.get("service.name").map(String::as_str), Some("infertel"));
                assert_eq!(p.resource.get("service.version").map(String::as_str), Some(env!("CARGO_PKG_VERSION")));
                assert!(p.description.len() > 3, "{metric}: description (HELP) missing");
            }
        }
        // The labels are exactly the endpoint's.
        let scraped = fresh.iter().find(|p| p.metric == SCRAPED).unwrap();
        assert_eq!(
            scraped.attrs.keys().map(String::as_str).collect::<Vec<_>>(),
            ["instance", "job", "receiver"],
            "{scraped:?}"
        );
        assert_eq!(scraped.attrs["job"], "small");
        let sent = fresh.iter().find(|p| p.metric == SENT).unwrap();
        assert_eq!(sent.attrs.get("exporter").map(String::as_str), Some("otlp"), "{sent:?}");
        // Histograms: an SDK Histogram with the registry's bounds, its count
        // between the two reads of `_count`.
        const DUR: &str = "infertel_exporter_send_duration_seconds";
        let h = fresh.iter().find(|p| p.metric == DUR).unwrap_or_else(|| panic!("{transport}: no {DUR}"));
        assert_eq!(h.kind, "histogram");
        assert!(h.cumulative);
        assert_eq!(h.bounds, [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]);
        let f: Vec<(&str, &str)> = h.attrs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (lo, hi) = (before.sum(&format!("{DUR}_count"), &f), after.sum(&format!("{DUR}_count"), &f));
        assert!(
            lo > 0.0 && lo <= h.count as f64 && h.count as f64 <= hi,
            "{transport} {DUR}{f:?}: count {} not within [{lo}, {hi}]",
            h.count
        );
        assert_eq!(h.bucket_counts.iter().sum::<u64>(), h.count);
        // Gauges go too.
        assert!(
            fresh
                .iter()
                .any(|p| p.metric == "infertel_receiver_target_up" && p.kind == "gauge" && p.value == Some(1.0))
        );
    }

    // Headers reached the receiver on both transports.
    let reqs = rx.requests();
    let header = |t: &str| {
        reqs.iter()
            .filter(|r| {
                r.transport == t
                    && r.points().iter().any(|p| p.resource.get("service.name").map(String::as_str) == Some("infertel"))
            })
            .filter_map(|r| r.headers.get("x-tenant").and_then(|v| v.as_str()).map(String::from))
            .next()
    };
    assert_eq!(header("grpc").as_deref(), Some("self"));
    assert_eq!(header("http").as_deref(), Some("self-http"));
}

#[test]
fn shutdown_flushes_the_last_values() {
    let targets = Targets::start();
    let rx = OtlpReceiver::start("[]");
    // One hour: nothing is exported before the agent is stopped.
    let readers = format!(
        r#"        - periodic:
            interval: 1h
            exporter:
              otlp: {{protocol: http/protobuf, endpoint: "{http}/v1/metrics"}}"#,
        http = rx.http_base(),
    );
    let mut agent = Agent::start(&config(&targets, &rx, &readers));
    wait_until("two scrapes", Duration::from_secs(20), || (agent.self_metric(SCRAPED, &[]) >= 10.0).then_some(()));
    assert!(self_points(&rx, "http").is_empty(), "exported before the interval");
    let last = agent.self_metric(SCRAPED, &[]);
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    let pts = self_points(&rx, "http");
    let v: f64 = pts.iter().filter(|(_, p)| p.metric == SCRAPED).map(|(_, p)| p.value.unwrap()).sum();
    assert!(v >= last && v > 0.0, "flushed {SCRAPED} {v}, /metrics said {last} before the stop: {pts:#?}");
}

#[test]
fn a_dead_endpoint_is_counted_and_logged_and_the_agent_keeps_running() {
    let targets = Targets::start();
    let rx = OtlpReceiver::start("[]");
    let dead = format!("http://127.0.0.1:{}", free_port());
    let readers = format!(
        r#"        - periodic:
            interval: 300ms
            exporter:
              otlp: {{protocol: http/protobuf, endpoint: "{dead}", timeout: 1s}}
        - periodic:
            interval: 300ms
            exporter:
              otlp: {{protocol: grpc, endpoint: "{rx}", insecure: true}}"#,
        rx = rx.grpc_endpoint(),
    );
    let agent = Agent::start(&config(&targets, &rx, &readers));
    const EXPORTS: &str = "infertel_self_telemetry_exports_total";
    let dead_url = format!("{dead}/v1/metrics");
    wait_until("failed exports counted", Duration::from_secs(20), || {
        (agent.self_metric(EXPORTS, &[("endpoint", &dead_url), ("result", "failure")]) >= 2.0).then_some(())
    });
    let m = agent.self_metrics();
    assert_eq!(m.sum(EXPORTS, &[("endpoint", &dead_url), ("result", "success")]), 0.0);
    // The healthy reader is unaffected, and reports the dead one's failures.
    let ok = m.sum(EXPORTS, &[("endpoint", &format!("http://{}", rx.grpc_endpoint())), ("result", "success")]);
    assert!(ok >= 1.0, "grpc reader successes: {ok}");
    let pts = self_points(&rx, "grpc");
    assert!(
        pts.iter().any(|(_, p)| p.metric == EXPORTS
            && p.attrs.get("result").map(String::as_str) == Some("failure")
            && p.value.unwrap_or(0.0) >= 1.0),
        "the failure count did not arrive over gRPC"
    );
    let log = agent.proc.log_text();
    assert!(log.contains("self-metrics OTLP export failed"), "{log}");
    assert_eq!(log.matches("self-metrics OTLP export failed").count(), 1, "warned more than once: {log}");
}
