//! Startup endpoint checks, `infertel check`, and runtime pauses that hold
//! data instead of dropping it, against real servers on loopback: nginx in
//! front of a real Prometheus answering 401 (real auth_basic), 403 (deny),
//! 404 and 405 (Prometheus itself), 429 and 500 per location; TLS with a CA
//! the test generates (unknown CA, wrong server name); a closed port; a
//! name under `.invalid`; the Python OTLP receiver answering scripted gRPC
//! codes. Each case asserts the class, the message and the exit code of
//! both `infertel check` and `infertel run`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::nginx::{Nginx, Pki, htpasswd};
use support::otlp::OtlpReceiver;
use support::*;

const SECRET: &str = "SECRETKEY123";

/// A config with one exporter (its YAML under `exporters:`), a health_check
/// extension on `health` and a receiver scraping `target`.
fn config(exporter_yaml: &str, exporter_id: &str, health: u16, target: &str) -> String {
    format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
        - job_name: t
          static_configs: [{{targets: ['{target}']}}]
exporters:
{exporter_yaml}
extensions:
  health_check:
    endpoint: 127.0.0.1:{health}
service:
  extensions: [health_check]
  telemetry:
    metrics:
      address: "{{{{TELEMETRY}}}}"
  pipelines:
    metrics:
      receivers: [prometheus]
      exporters: [{exporter_id}]
"#
    )
}

fn rw_exporter(url: &str, extra: &str) -> String {
    format!(
        "  prometheusremotewrite/x:\n    endpoint: {url}\n    headers: {{Authorization: \"ApiKey {SECRET}\"}}\n    retry_on_failure: {{initial_interval: 100ms, max_interval: 500ms}}\n{extra}"
    )
}

struct Out {
    code: Option<i32>,
    text: String,
}

fn write_cfg(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("infertel.yaml");
    std::fs::write(&p, text.replace("{{TELEMETRY}}", &format!("127.0.0.1:{}", free_port()))).unwrap();
    p
}

fn check(cfg: &Path) -> Out {
    let o = Command::new(infertel_bin()).arg("check").arg("--config").arg(cfg).output().expect("run infertel check");
    Out {
        code: o.status.code(),
        text: format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
    }
}

/// `infertel run`: either it exits within `within` (its code and output),
/// or it is still running (None) and is returned for more checks.
fn run(cfg: &Path, dir: &Path, within: Duration) -> (Option<Out>, Option<Proc>) {
    let mut cmd = Command::new(infertel_bin());
    cmd.arg("run").arg("--config").arg(cfg).env("RUST_LOG", "info");
    let mut p = Proc::spawn("infertel", &mut cmd, dir.join("run.log"));
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = p.child.try_wait() {
            return (Some(Out { code: st.code(), text: p.log_text() }), None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (None, Some(p))
}

fn wait_until_or<T>(_what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn readyz(port: u16) -> (u16, String) {
    http_get(&format!("http://127.0.0.1:{port}/readyz")).unwrap_or((0, String::new()))
}

/// What one case expects.
struct Case {
    name: &'static str,
    exporter: String,
    id: &'static str,
    class: &'static str,
    message: &'static str,
    /// Exit code of `check`.
    check_code: i32,
    /// Some(78): `run` refuses to start; None: it starts (paused unless ok).
    run_code: Option<i32>,
}

fn assert_case(c: &Case) {
    let dir = tempfile::tempdir().unwrap();
    let health = free_port();
    let cfg = write_cfg(dir.path(), &config(&c.exporter, c.id, health, "127.0.0.1:9"));
    let out = check(&cfg);
    assert_eq!(out.code, Some(c.check_code), "{}: check exit code\n{}", c.name, out.text);
    assert!(out.text.contains(c.class), "{}: check shows class {:?}\n{}", c.name, c.class, out.text);
    assert!(out.text.contains(c.message), "{}: check explains {:?}\n{}", c.name, c.message, out.text);
    assert!(!out.text.contains(SECRET), "{}: check leaks the secret\n{}", c.name, out.text);
    eprintln!("--- {} ---\n{}", c.name, out.text);
    match c.run_code {
        Some(code) => {
            let (done, _) = run(&cfg, dir.path(), Duration::from_secs(30));
            let done = done.unwrap_or_else(|| panic!("{}: run should refuse to start", c.name));
            assert_eq!(done.code, Some(code), "{}: run exit code\n{}", c.name, done.text);
            assert!(
                done.text.contains(c.class) && done.text.contains(c.message),
                "{}: run explains\n{}",
                c.name,
                done.text
            );
            assert!(done.text.contains("refusing to start"), "{}\n{}", c.name, done.text);
            assert!(!done.text.contains(SECRET), "{}: run leaks the secret\n{}", c.name, done.text);
        }
        None => {
            let (done, p) = run(&cfg, dir.path(), Duration::from_secs(2));
            assert!(done.is_none(), "{}: run must start: {}", c.name, done.map(|d| d.text).unwrap_or_default());
            let mut p = p.unwrap();
            let want_ready = c.check_code == 0;
            let (code, body) = wait_until(&format!("{}: /readyz settles", c.name), Duration::from_secs(15), || {
                let (code, body) = readyz(health);
                (code == if want_ready { 200 } else { 503 } && (want_ready || body.contains(c.class)))
                    .then_some((code, body))
            });
            eprintln!("{}: /readyz {code}: {body}", c.name);
            assert!(!body.contains(SECRET));
            assert_eq!(p.terminate(Duration::from_secs(15)), Some(0), "{}: clean exit\n{}", c.name, p.log_text());
            assert!(!p.log_text().contains(SECRET), "{}: logs leak the secret\n{}", c.name, p.log_text());
        }
    }
}

fn nginx_front(prom: u16, dir_files: &Path) -> (Nginx, u16) {
    let port = Nginx::port();
    let body = format!(
        r#"
    server {{
        listen 127.0.0.1:{port};
        location = /ok/api/v1/write {{ proxy_pass http://127.0.0.1:{prom}/api/v1/write; }}
        location = /s400/api/v1/write {{ return 400 "empty request refused\n"; }}
        location = /s401/api/v1/write {{
            auth_basic "prometheus";
            auth_basic_user_file {htp};
            proxy_pass http://127.0.0.1:{prom}/api/v1/write;
        }}
        location = /_prometheus/metrics/vllm/inference/api/v1/write {{ deny all; }}
        location /s404/ {{ proxy_pass http://127.0.0.1:{prom}/; }}
        location /s405/ {{ proxy_pass http://127.0.0.1:{prom}/; }}
        location = /s429/api/v1/write {{ return 429 "slow down\n"; }}
        location = /s500/api/v1/write {{ return 500 "upstream broken\n"; }}
        # A key that authenticates (the empty request passes) but may not
        # write samples: only the 1-byte empty snappy body goes through.
        location = /canary/_prometheus/api/v1/write {{
            if ($http_content_length != "1") {{ return 403 "no write privilege on metrics-*\n"; }}
            proxy_pass http://127.0.0.1:{prom}/api/v1/write;
        }}
    }}
"#,
        htp = dir_files.join("htpasswd").display()
    );
    htpasswd(&dir_files.join("htpasswd"), "infertel", "right-password");
    (Nginx::start(&body, &[port]), port)
}

#[test]
fn http_statuses_from_nginx_and_prometheus() {
    let prom = Prometheus::start("");
    let files = tempfile::tempdir().unwrap();
    let (nginx, port) = nginx_front(prom.port, files.path());
    let base = format!("http://127.0.0.1:{port}");
    let cases = [
        Case {
            name: "200",
            exporter: rw_exporter(&format!("{base}/ok/api/v1/write"), ""),
            id: "prometheusremotewrite/x",
            class: "ok (HTTP 204)",
            message: "reachable and authorized",
            check_code: 0,
            run_code: None,
        },
        Case {
            name: "400",
            exporter: rw_exporter(&format!("{base}/s400/api/v1/write"), ""),
            id: "prometheusremotewrite/x",
            class: "reachable (HTTP 400)",
            message: "answered 400 to an empty request",
            check_code: 0,
            run_code: None,
        },
        Case {
            name: "401",
            exporter: rw_exporter(&format!("{base}/s401/api/v1/write"), ""),
            id: "prometheusremotewrite/x",
            class: "unauthorized (HTTP 401)",
            message: "credentials were rejected",
            check_code: 1,
            run_code: Some(78),
        },
        Case {
            name: "403 elasticsearch",
            exporter: rw_exporter(&format!("{base}/_prometheus/metrics/vllm/inference/api/v1/write"), ""),
            id: "prometheusremotewrite/x",
            class: "forbidden (HTTP 403)",
            message: "the Elasticsearch API key needs write privileges on the metrics-* data streams",
            check_code: 1,
            run_code: Some(78),
        },
        Case {
            name: "404 prometheus",
            exporter: rw_exporter(&format!("{base}/s404/api/v1/writ"), ""),
            id: "prometheusremotewrite/x",
            class: "not_found (HTTP 404)",
            message: "nothing at this URL: wrong host or path",
            check_code: 1,
            run_code: Some(78),
        },
        Case {
            name: "404 elastic ingest host",
            exporter: rw_exporter(&format!("{base}/ingest/_prometheus/metrics/vllm/inference/api/v1/write"), ""),
            id: "prometheusremotewrite/x",
            class: "not_found (HTTP 404)",
            message: "remote write lives on the Elasticsearch API host (not the OTLP/ingest host), under /_prometheus/",
            check_code: 1,
            run_code: Some(78),
        },
        Case {
            name: "405",
            exporter: rw_exporter(&format!("{base}/s405/-/ready"), ""),
            id: "prometheusremotewrite/x",
            class: "method_not_allowed (HTTP 405)",
            message: "does not accept POST",
            check_code: 1,
            run_code: Some(78),
        },
        Case {
            name: "429",
            exporter: rw_exporter(&format!("{base}/s429/api/v1/write"), ""),
            id: "prometheusremotewrite/x",
            class: "throttled (HTTP 429)",
            message: "transient",
            check_code: 1,
            run_code: None,
        },
        Case {
            name: "500",
            exporter: rw_exporter(&format!("{base}/s500/api/v1/write"), ""),
            id: "prometheusremotewrite/x",
            class: "server_error (HTTP 500)",
            message: "transient",
            check_code: 1,
            run_code: None,
        },
        Case {
            name: "403 on the canary only",
            exporter: rw_exporter(&format!("{base}/canary/_prometheus/api/v1/write"), ""),
            id: "prometheusremotewrite/x",
            class: "forbidden (HTTP 403)",
            message: "the empty request passed but the canary sample infertel_canary did not",
            check_code: 1,
            run_code: Some(78),
        },
        Case {
            name: "startup_check: warn starts paused",
            exporter: rw_exporter(&format!("{base}/s401/api/v1/write"), "    startup_check: warn\n"),
            id: "prometheusremotewrite/x",
            class: "unauthorized (HTTP 401)",
            message: "credentials were rejected",
            check_code: 1,
            run_code: None,
        },
    ];
    for c in &cases {
        assert_case(c);
    }
    // Every probe was a POST (never a GET).
    let log = nginx.access_log();
    assert!(log.contains("\"POST ") && !log.contains("\"GET "), "{log}");
    // The 401 came from real auth_basic, the 404/405 from Prometheus itself.
    assert!(nginx.error_log().contains("no user/password was provided for basic authentication"), "{}", nginx.logs());
}

#[test]
fn tls_dns_and_closed_port() {
    let prom = Prometheus::start("");
    let pki = Pki::generate();
    let (good, wrong) = (Nginx::port(), Nginx::port());
    let ssl = |port: u16, pair: &support::nginx::CertPair| {
        format!(
            "    server {{ listen 127.0.0.1:{port} ssl; ssl_certificate {}; ssl_certificate_key {}; location / {{ proxy_pass http://127.0.0.1:{}; }} }}\n",
            pair.cert.display(),
            pair.key.display(),
            prom.port
        )
    };
    let _nginx = Nginx::start(&format!("{}{}", ssl(good, &pki.server), ssl(wrong, &pki.other)), &[good, wrong]);
    let ca = format!("    tls: {{ca_file: {}}}\n", pki.ca.display());
    let closed = free_port();
    let cases = [
        Case {
            name: "tls ok",
            exporter: rw_exporter(&format!("https://127.0.0.1:{good}/api/v1/write"), &ca),
            id: "prometheusremotewrite/x",
            class: "ok (HTTP 204)",
            message: "reachable and authorized",
            check_code: 0,
            run_code: None,
        },
        Case {
            name: "tls unknown CA",
            exporter: rw_exporter(&format!("https://127.0.0.1:{good}/api/v1/write"), ""),
            id: "prometheusremotewrite/x",
            class: "tls_unknown_ca (TLS)",
            message: "set tls.ca_file to the CA that issued it",
            check_code: 1,
            run_code: Some(78),
        },
        Case {
            name: "tls wrong name",
            exporter: rw_exporter(&format!("https://127.0.0.1:{wrong}/api/v1/write"), &ca),
            id: "prometheusremotewrite/x",
            class: "tls_name_mismatch (TLS)",
            message: "not valid for this host name",
            check_code: 1,
            run_code: Some(78),
        },
        Case {
            name: "dns",
            exporter: rw_exporter("http://prometheus.infertel-test.invalid:9090/api/v1/write", ""),
            id: "prometheusremotewrite/x",
            class: "dns (connect)",
            message: "does not resolve",
            check_code: 1,
            run_code: Some(78),
        },
        Case {
            name: "closed port",
            exporter: rw_exporter(&format!("http://127.0.0.1:{closed}/api/v1/write"), ""),
            id: "prometheusremotewrite/x",
            class: "refused (connect)",
            message: "connection refused",
            check_code: 1,
            run_code: None,
        },
    ];
    for c in &cases {
        assert_case(c);
    }
}

fn otlp_exporter(endpoint: &str) -> String {
    format!(
        "  otlp/x:\n    endpoint: {endpoint}\n    tls: {{insecure: true}}\n    headers: {{authorization: \"Bearer {SECRET}\"}}\n    retry_on_failure: {{initial_interval: 100ms, max_interval: 500ms}}\n"
    )
}

#[test]
fn grpc_codes_from_the_python_otlp_receiver() {
    for (code, class, message, run_code) in [
        ("UNAUTHENTICATED", "unauthenticated (gRPC UNAUTHENTICATED)", "credentials were rejected", Some(78)),
        ("PERMISSION_DENIED", "permission_denied (gRPC PERMISSION_DENIED)", "not allowed to write", Some(78)),
        ("UNIMPLEMENTED", "unimplemented (gRPC UNIMPLEMENTED)", "no OTLP metrics service at this endpoint", Some(78)),
        ("UNAVAILABLE", "unavailable (gRPC UNAVAILABLE)", "transient", None),
    ] {
        // One scripted answer for check, one for run; then success.
        let rx = OtlpReceiver::start(&format!(r#"[{{"grpc": "{code}"}}, {{"grpc": "{code}"}}]"#));
        let c = Case {
            name: code,
            exporter: otlp_exporter(&rx.grpc_endpoint()),
            id: "otlp/x",
            class,
            message,
            check_code: 1,
            run_code,
        };
        // UNAVAILABLE: run starts paused, re-probes, and the receiver's
        // script runs out, so /readyz must turn 200: checked below.
        if run_code.is_some() {
            assert_case(&c);
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let health = free_port();
        let cfg = write_cfg(dir.path(), &config(&c.exporter, c.id, health, "127.0.0.1:9"));
        let out = check(&cfg);
        assert_eq!(out.code, Some(1), "{}", out.text);
        assert!(out.text.contains(class) && out.text.contains(message), "{}", out.text);
        let (done, p) = run(&cfg, dir.path(), Duration::from_secs(1));
        assert!(done.is_none(), "starts paused");
        let mut p = p.unwrap();
        wait_until("readyz 200 after the endpoint recovers", Duration::from_secs(20), || {
            (readyz(health).0 == 200).then_some(())
        });
        assert!(p.log_text().contains("starting paused"), "{}", p.log_text());
        assert_eq!(p.terminate(Duration::from_secs(15)), Some(0));
        // Every probe was an Export call (empty request).
        let reqs = rx.requests();
        assert!(reqs.len() >= 3 && reqs.iter().all(|r| r.transport == "grpc"), "{reqs:?}");
    }
    // OTLP/HTTP: an empty ExportMetricsServiceRequest POSTed; 401 refuses the start.
    let rx = OtlpReceiver::start(r#"[{"http": 401}, {"http": 401}]"#);
    let exporter = format!(
        "  otlphttp/x:\n    endpoint: {}\n    headers: {{Authorization: \"Bearer {SECRET}\"}}\n",
        rx.http_base()
    );
    assert_case(&Case {
        name: "otlphttp 401",
        exporter,
        id: "otlphttp/x",
        class: "unauthorized (HTTP 401)",
        message: "credentials were rejected",
        check_code: 1,
        run_code: Some(78),
    });
    let reqs = rx.requests();
    assert!(
        reqs.iter().all(|r| r.transport == "http"
            && r.path == "/v1/metrics"
            && r.body.as_object().is_some_and(|b| b.is_empty())),
        "{reqs:?}"
    );
}

/// nginx flips from 200 to 403 and back (a file nginx tests on every
/// request): the remote-write exporter pauses and holds, readiness goes
/// false and true again, the OTLP exporter in the same pipeline keeps
/// delivering, and Prometheus ends up with every scraped sample.
#[test]
fn runtime_403_holds_the_data_and_delivers_it_on_recovery() {
    let prom = Prometheus::start("");
    let rx = OtlpReceiver::start("[]");
    let targets = Targets::start();
    targets.set("/metrics", TEXT_004, "# TYPE held_probe gauge\nheld_probe 1\n");
    let port = Nginx::port();
    let nginx = Nginx::start(
        &format!(
            "    server {{ listen 127.0.0.1:{port}; location = /api/v1/write {{ if (-f {{{{DIR}}}}/deny) {{ return 403 \"no write privilege\\n\"; }} proxy_pass http://127.0.0.1:{}/api/v1/write; }} }}\n",
            prom.port
        ),
        &[port],
    );
    let deny = nginx.dir.path().join("deny");
    let health = free_port();
    let cfg = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 500ms, scrape_timeout: 400ms}}
      scrape_configs:
        - job_name: t
          static_configs: [{{targets: ['{target}']}}]
exporters:
  prometheusremotewrite:
    endpoint: http://127.0.0.1:{port}/api/v1/write
    retry_on_failure: {{initial_interval: 200ms, max_interval: 500ms}}
  otlp:
    endpoint: {otlp}
    tls: {{insecure: true}}
extensions:
  health_check:
    endpoint: 127.0.0.1:{health}
service:
  extensions: [health_check]
  telemetry:
    metrics:
      address: "{{{{TELEMETRY}}}}"
  pipelines:
    metrics:
      receivers: [prometheus]
      exporters: [prometheusremotewrite, otlp]
"#,
        target = targets.addr,
        otlp = rx.grpc_endpoint()
    );
    let mut agent = Agent::start(&cfg);
    wait_until("ready", Duration::from_secs(15), || (readyz(health).0 == 200).then_some(()));
    let in_prom = || {
        prom.query("count_over_time(held_probe[1h])")
            .first()
            .map(|(_, v)| v.parse::<f64>().unwrap() as u64)
            .unwrap_or(0)
    };
    // Stale markers at shutdown (the no-recorded-value flag) are not samples.
    let otlp_points = || {
        rx.requests().iter().flat_map(|r| r.points()).filter(|p| p.metric == "held_probe" && p.flags & 1 == 0).count()
    };
    wait_until("first samples in Prometheus", Duration::from_secs(15), || (in_prom() >= 2).then_some(()));

    std::fs::write(&deny, "").unwrap();
    let (code, body) = wait_until("readyz false while held", Duration::from_secs(15), || {
        let (c, b) = readyz(health);
        (c == 503).then_some((c, b))
    });
    assert!(body.contains("forbidden (HTTP 403)"), "{code}: {body}");
    assert_eq!(agent.self_metric("infertel_exporter_endpoint_up", &[("exporter", "prometheusremotewrite")]), 0.0);
    assert_eq!(agent.self_metric("infertel_exporter_endpoint_up", &[("exporter", "otlp")]), 1.0);
    let frozen = in_prom();
    let otlp_at_pause = otlp_points();
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        otlp_points() >= otlp_at_pause + 4,
        "OTLP keeps delivering while remote write is held: {} -> {}",
        otlp_at_pause,
        otlp_points()
    );
    let held = agent.self_metric("infertel_exporter_held_samples", &[("exporter", "prometheusremotewrite")])
        + agent.self_metric("infertel_exporter_queue_size", &[("exporter", "prometheusremotewrite")]);
    assert!(held > 0.0, "something is held or queued");
    assert_eq!(
        agent.self_metric("infertel_exporter_dropped_samples_total", &[("exporter", "prometheusremotewrite")]),
        0.0,
        "nothing dropped"
    );
    assert!(in_prom() <= frozen + 1, "nothing reaches Prometheus through the 403");

    std::fs::remove_file(&deny).unwrap();
    wait_until("readyz true after recovery", Duration::from_secs(15), || (readyz(health).0 == 200).then_some(()));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    let log = agent.proc.log_text();
    assert!(log.contains("exporter paused, data held") && log.contains("forbidden (HTTP 403)"), "{log}");
    assert_eq!(log.matches("exporter paused, data held").count(), 1, "logged once per interval:\n{log}");
    assert!(log.contains("resuming delivery"), "{log}");
    // Nothing lost: Prometheus has every sample the OTLP receiver got (the
    // OTLP exporter never paused) and at least one per scrape made.
    let mut last = (0, 0);
    let settled = wait_until_or("Prometheus settles", Duration::from_secs(10), || {
        last = (in_prom() as usize, otlp_points());
        (last.0 == last.1).then_some(last)
    });
    let (p, o) = settled.unwrap_or_else(|| panic!("Prometheus has {} samples, the OTLP receiver {}", last.0, last.1));
    let scrapes = targets.hits("/metrics") as usize;
    assert!(p + 1 >= scrapes && p <= scrapes, "prometheus {p}, otlp {o}, scrapes {scrapes}");
    assert!(nginx.access_log().contains("\" 403 "), "{}", nginx.logs());
}
