//! End to end: the Collector's `otlp` receiver in the real binary, fed by
//! the official OpenTelemetry Python SDK's own OTLP exporters, over gRPC
//! (cumulative temporality) and HTTP/protobuf (delta temporality, made
//! cumulative by the receiver), remote-written into a real Prometheus. The
//! names and values expected are worked out here by hand from the
//! measurements the script makes (`tests/otlp_sdk_export.py`) and from
//! Prometheus' OTLP naming rules (otlptranslator: `llm.tokens` of unit
//! `{token}`, a monotonic sum, is `llm_tokens_total`; a gauge of unit `1`
//! gets `_ratio`; unit `s` gets `_seconds`), never by infertel's code. Then
//! the partial success: an exponential histogram refused with its count
//! and reason, over protobuf and JSON, and a 415 for another content type.

mod support;

use serde_json::Value;
use std::process::Command;
use std::time::Duration;
use support::*;

fn python(args: &[&str]) -> Value {
    let out =
        Command::new("python3").arg(repo_dir().join("tests/otlp_sdk_export.py")).args(args).output().expect("python3");
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn the_python_sdk_over_grpc_and_http_lands_in_prometheus_with_prometheus_names() {
    let prom = Prometheus::start("");
    let (grpc, http) = (free_port(), free_port());
    let cfg = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}
      http:
        endpoint: 127.0.0.1:{http}
        cors: {{allowed_origins: ["http://*.example.com"], max_age: 600}}
exporters:
  prometheus_remote_write:
    endpoint: {rw}
service:
  pipelines:
    metrics: {{receivers: [otlp], exporters: [prometheus_remote_write]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        rw = prom.write_url()
    );
    let agent = Agent::start(&cfg);
    // Two flushes and the export at shutdown, each accepted.
    let accepted = |r: &Value| r["ok"].as_array().is_some_and(|a| a.len() >= 2 && a.iter().all(|x| x == true));
    let r = python(&["sdk", "grpc", &format!("127.0.0.1:{grpc}"), "cumulative", "svc-grpc"]);
    assert!(accepted(&r), "{r}");
    let r = python(&["sdk", "http", &format!("http://127.0.0.1:{http}/v1/metrics"), "delta", "svc-http"]);
    assert!(accepted(&r), "{r}");

    for svc in ["svc-grpc", "svc-http"] {
        let job = format!("llm/{svc}");
        let q = |expr: &str| -> Option<f64> {
            let sel = expr.replace("JOB", &job);
            prom.query(&sel).first().map(|(_, v)| parse_prom_float(v))
        };
        // The exporter shards an export's series over its consumers, so
        // they land in several requests: wait for the last of each kind
        // asserted below, not only for the histogram's count.
        // At most 30 s; the assertions below then say what differs.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let settled = || {
            // An earlier flush's value may still stand for one series while
            // another has the last: wait for the last values themselves.
            let last = [
                (r#"llm_request_duration_seconds_count{job="JOB"}"#, 4.0),
                (r#"llm_request_duration_seconds_bucket{job="JOB", le="0.1"}"#, 1.0),
                (r#"llm_request_duration_seconds_bucket{job="JOB", le="1"}"#, 2.0),
                (r#"llm_request_duration_seconds_bucket{job="JOB", le="10"}"#, 3.0),
                (r#"llm_request_duration_seconds_bucket{job="JOB", le="+Inf"}"#, 4.0),
                (r#"llm_tokens_total{job="JOB", model="m"}"#, 12.0),
                (r#"queue_depth{job="JOB"}"#, 2.0),
                (r#"gpu_utilization_ratio{job="JOB", gpu="0"}"#, 0.75),
                (r#"target_info{job="JOB", deployment_environment="test"}"#, 1.0),
            ];
            let sum_done =
                q(r#"llm_request_duration_seconds_sum{job="JOB"}"#).is_some_and(|x| (x - 55.55).abs() < 1e-9);
            sum_done && last.iter().all(|(e, v)| q(e) == Some(*v))
        };
        while !settled() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        let instance = format!("{svc}-0");
        let inst = prom.query(&format!(r#"llm_tokens_total{{job="{job}"}}"#));
        assert_eq!(inst.first().and_then(|(l, _)| l.get("instance")).map(String::as_str), Some(instance.as_str()));
        assert_eq!(q(r#"llm_tokens_total{job="JOB", model="m"}"#), Some(12.0), "{svc}: 5 + 7");
        assert_eq!(q(r#"queue_depth{job="JOB"}"#), Some(2.0), "{svc}: 3 - 1");
        assert_eq!(q(r#"gpu_utilization_ratio{job="JOB", gpu="0"}"#), Some(0.75), "{svc}");
        for (le, n) in [("0.1", 1.0), ("1", 2.0), ("10", 3.0), ("+Inf", 4.0)] {
            assert_eq!(
                q(&format!(r#"llm_request_duration_seconds_bucket{{job="JOB", le="{le}"}}"#)),
                Some(n),
                "{svc} le={le}"
            );
        }
        let sum = q(r#"llm_request_duration_seconds_sum{job="JOB"}"#).unwrap();
        assert!((sum - 55.55).abs() < 1e-9, "{svc}: {sum}");
        // The resource's other attributes are on target_info only.
        assert_eq!(q(r#"target_info{job="JOB", deployment_environment="test"}"#), Some(1.0), "{svc}");
        assert!(prom.query(&format!(r#"llm_tokens_total{{job="{job}", deployment_environment!=""}}"#)).is_empty());
        // Nothing under the OTLP names.
        assert!(prom.query(r#"{__name__=~"llm\\.tokens|gpu\\.utilization"}"#).is_empty());
    }

    // The partial success, as the OTLP spec asks.
    let r = python(&["raw", &format!("http://127.0.0.1:{http}/v1/metrics")]);
    for enc in ["proto", "json"] {
        assert_eq!(r[enc]["status"], 200, "{r}");
        assert_eq!(r[enc]["rejected"], 2, "{r}");
        assert!(r[enc]["message"].as_str().unwrap().contains("exponential histograms"), "{r}");
    }
    assert_eq!(r["proto"]["content_type"], "application/x-protobuf");
    assert_eq!(r["json"]["content_type"], "application/json");
    assert_eq!(r["text"]["status"], 415, "{r}");
    wait_until("the gauge sent beside the refused points", Duration::from_secs(30), || {
        (!prom.query(r#"raw_gauge{job="raw"}"#).is_empty()).then_some(())
    });

    // CORS preflight for an allowed origin, refused for another.
    let preflight = |origin: &str| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-D", "-", "-X", "OPTIONS", "-H", &format!("Origin: {origin}")])
            .args(["-H", "Access-Control-Request-Method: POST", "-H", "Access-Control-Request-Headers: content-type"])
            .arg(format!("http://127.0.0.1:{http}/v1/metrics"))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).to_lowercase()
    };
    let ok = preflight("http://ui.example.com");
    assert!(
        ok.starts_with("http/1.1 204")
            && ok.contains("access-control-allow-origin: http://ui.example.com")
            && ok.contains("access-control-max-age: 600"),
        "{ok}"
    );
    assert!(preflight("http://evil.test").starts_with("http/1.1 403"));

    let m = agent.self_metrics();
    assert_eq!(
        m.sum("infertel_receiver_otlp_rejected_points_total", &[("reason", "exponential_histogram")]),
        4.0,
        "2 per encoding"
    );
    assert!(m.sum("infertel_receiver_otlp_accepted_samples_total", &[("transport", "grpc")]) > 0.0);
    assert!(m.sum("infertel_receiver_otlp_accepted_samples_total", &[("transport", "http")]) > 0.0);
    assert_eq!(m.sum("infertel_receiver_otlp_refused_requests_total", &[("reason", "unsupported_media_type")]), 1.0);
}

#[test]
fn a_port_in_use_stops_the_start_and_validate_binds_nothing() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(
        &path,
        format!(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:{port}\nexporters:\n  debug: {{}}\nservice:\n  pipelines:\n    metrics: {{receivers: [otlp], exporters: [debug]}}\n"
        ),
    )
    .unwrap();
    let out = Command::new(infertel_bin()).arg("validate").arg("--config").arg(&path).output().expect("validate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(infertel_bin()).arg("run").arg("--config").arg(&path).output().expect("run");
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("receiver otlp: protocols.grpc.endpoint 127.0.0.1:{port}: cannot listen")),
        "{text}"
    );
    // No protocol at all is the Collector's error.
    std::fs::write(&path, "receivers:\n  otlp: {protocols: {}}\nexporters:\n  debug: {}\nservice:\n  pipelines:\n    metrics: {receivers: [otlp], exporters: [debug]}\n").unwrap();
    let out = Command::new(infertel_bin()).arg("validate").arg("--config").arg(&path).output().expect("validate");
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && text.contains("must specify at least one protocol"), "{text}");
}
