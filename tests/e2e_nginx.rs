//! End to end with a real nginx (Debian's) as the auth/TLS front, the way
//! targets and backends are exposed in production:
//!
//! 1. scrapes over https with basic auth (password_file) and a private CA,
//!    mTLS with a client certificate; failures (wrong password, unknown CA,
//!    certificate for another name, missing client certificate) give up=0
//!    and a counted, classified scrape error; `server_name` fixes the name;
//! 2. a gzip-compressed scrape body (nginx `gzip on`) decodes to exactly the
//!    values served, bit for bit;
//! 3. plain-http scrapes (the scrape loop's own connection, `fetch.rs`):
//!    a 2 MB body arrives whole through a 32 KiB read buffer, every scrape
//!    of a target rides one kept-alive connection, a server that closes
//!    idle connections (keepalive_timeout 1s, keepalive_requests 2) costs
//!    no scrape, and a redirect is followed, or refused with
//!    `follow_redirects: false`;
//! 4. remote write through nginx over https (HTTP/2) into a real Prometheus
//!    with the `basicauth` and `bearertokenauth` (token file) extensions and
//!    a client certificate; 401/403/404 answers are dropped, counted and
//!    explained in the log (Elasticsearch wording for `/_prometheus/` paths).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::nginx::{Nginx, Pki, htpasswd};
use support::*;

/// Polls `f` until it yields, or fails with `what` and the logs `ctx` returns.
fn eventually<T>(what: &str, timeout: Duration, ctx: impl Fn() -> String, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}\n{}", ctx());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Log text without the ANSI colours tracing adds.
fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' && it.peek() == Some(&'[') {
            for c in it.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write file");
    p.display().to_string()
}

/// The single value of an instant query, if exactly one series matches.
fn one_value(prom: &Prometheus, q: &str) -> Option<f64> {
    let r = prom.query(q);
    (r.len() == 1).then(|| parse_prom_float(&r[0].1))
}

const PAGE: &str = "# TYPE demo_requests_total counter\ndemo_requests_total{path=\"/a\"} 42\n# TYPE demo_ratio gauge\ndemo_ratio 0.1\n";

#[test]
fn scrapes_through_nginx_with_tls_basic_auth_and_client_certificates() {
    let pki = Pki::generate();
    let secrets = tempfile::tempdir().expect("tempdir");
    let s = secrets.path();
    let htpasswd_file = s.join("htpasswd");
    htpasswd(&htpasswd_file, "scraper", "correct horse battery");
    // A trailing newline, as editors and `kubectl create secret` leave it.
    let good = write(s, "good.txt", "correct horse battery\n");
    let bad = write(s, "bad.txt", "wrong\n");

    let targets = Targets::start();
    let jobs = ["ok", "wrongpw", "noca", "wrongname", "override", "mtls", "nocert"];
    for j in jobs {
        targets.set(&format!("/{j}"), TEXT_004, PAGE);
    }
    let (main, other, mtls) = (Nginx::port(), Nginx::port(), Nginx::port());
    let ca = pki.ca.display();
    let proxy = format!(
        "location / {{ auth_basic \"metrics\"; auth_basic_user_file {}; proxy_pass http://{}; }}",
        htpasswd_file.display(),
        targets.addr
    );
    let nginx = Nginx::start(
        &format!(
            r#"
    server {{
        listen 127.0.0.1:{main} ssl;
        ssl_certificate {sc}; ssl_certificate_key {sk};
        {proxy}
    }}
    server {{
        listen 127.0.0.1:{other} ssl;
        ssl_certificate {oc}; ssl_certificate_key {ok};
        {proxy}
    }}
    server {{
        listen 127.0.0.1:{mtls} ssl;
        ssl_certificate {sc}; ssl_certificate_key {sk};
        ssl_client_certificate {ca};
        ssl_verify_client on;
        location / {{ proxy_pass http://{t}; }}
    }}
"#,
            sc = pki.server.cert.display(),
            sk = pki.server.key.display(),
            oc = pki.other.cert.display(),
            ok = pki.other.key.display(),
            t = targets.addr,
        ),
        &[main, other, mtls],
    );
    let prom = Prometheus::start("");

    let job = |name: &str, port: u16, extra: &str| {
        format!(
            "        - job_name: {name}\n          scheme: https\n          metrics_path: /{name}\n          static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n{extra}"
        )
    };
    let auth = |pw: &str| format!("          basic_auth: {{username: scraper, password_file: {pw}}}\n");
    let scrape_configs = [
        job("ok", main, &format!("{}          tls_config: {{ca_file: {ca}}}\n", auth(&good))),
        job("wrongpw", main, &format!("{}          tls_config: {{ca_file: {ca}}}\n", auth(&bad))),
        // No ca_file: the system roots do not know the test CA.
        job("noca", main, &auth(&good)),
        // The certificate on `other` names other.invalid only.
        job("wrongname", other, &format!("{}          tls_config: {{ca_file: {ca}}}\n", auth(&good))),
        job(
            "override",
            other,
            &format!("{}          tls_config: {{ca_file: {ca}, server_name: other.invalid}}\n", auth(&good)),
        ),
        job(
            "mtls",
            mtls,
            &format!(
                "          tls_config: {{ca_file: {ca}, cert_file: {}, key_file: {}}}\n",
                pki.client.cert.display(),
                pki.client.key.display()
            ),
        ),
        job("nocert", mtls, &format!("          tls_config: {{ca_file: {ca}}}\n")),
    ]
    .concat();
    let config = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
{scrape_configs}
processors:
  batch: {{timeout: 100ms}}
exporters:
  prometheusremotewrite:
    endpoint: {url}
service:
  pipelines:
    metrics: {{receivers: [prometheus], processors: [batch], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        url = prom.write_url()
    );
    let agent = Agent::start(&config);
    let ctx = || format!("--- agent log ---\n{}\n{}", plain(&agent.proc.log_text()), nginx.logs());

    // Every job reports up, and the good ones carry the page exactly.
    for j in jobs {
        eventually(&format!("up{{job=\"{j}\"}} in Prometheus"), Duration::from_secs(30), ctx, || {
            one_value(&prom, &format!("up{{job=\"{j}\"}}"))
        });
    }
    for j in ["ok", "override", "mtls"] {
        let want: [(&str, f64); 2] = [("demo_requests_total", 42.0), ("demo_ratio", 0.1)];
        for (name, v) in want {
            let got = eventually(&format!("{name}{{job=\"{j}\"}}"), Duration::from_secs(20), ctx, || {
                one_value(&prom, &format!("{name}{{job=\"{j}\"}}"))
            });
            assert_eq!(got.to_bits(), v.to_bits(), "job {j}: {name} is {got}, served {v}\n{}", ctx());
        }
        assert_eq!(one_value(&prom, &format!("up{{job=\"{j}\"}}")), Some(1.0), "job {j}: up\n{}", ctx());
        assert!(targets.hits(&format!("/{j}")) > 0, "job {j}: nginx never reached the target");
    }

    // The failing jobs: up=0 in Prometheus, an error counted with its
    // reason, nothing reached the target behind nginx, and the log says why.
    let failing = [
        ("wrongpw", "http_status", "401"),
        ("noca", "connection", "UnknownIssuer"),
        ("wrongname", "connection", "not valid for name"),
        ("nocert", "http_status", "400"),
    ];
    for (j, reason, said) in failing {
        assert_eq!(one_value(&prom, &format!("up{{job=\"{j}\"}}")), Some(0.0), "job {j}: up\n{}", ctx());
        assert!(
            one_value(&prom, &format!("demo_requests_total{{job=\"{j}\"}}")).is_none(),
            "job {j}: data arrived\n{}",
            ctx()
        );
        let errors = eventually(&format!("scrape errors of job {j}"), Duration::from_secs(10), ctx, || {
            let n = agent.self_metric("infertel_receiver_scrape_errors_total", &[("job", j), ("reason", reason)]);
            (n >= 1.0).then_some(n)
        });
        assert!(errors >= 1.0);
        let snapshot = agent.self_metrics();
        let all = snapshot.sum("infertel_receiver_scrape_errors_total", &[("job", j)]);
        assert_eq!(
            all,
            snapshot.sum("infertel_receiver_scrape_errors_total", &[("job", j), ("reason", reason)]),
            "job {j}: errors with another reason\n{}",
            ctx()
        );
        assert_eq!(targets.hits(&format!("/{j}")), 0, "job {j}: nginx let the scrape through");
        let log = plain(&agent.proc.log_text());
        assert!(
            log.lines().any(|l| l.contains("scrape failed") && l.contains(&format!("job={j} ")) && l.contains(said)),
            "job {j}: no scrape-failed log line mentioning {said:?}\n{}",
            ctx()
        );
    }
    for j in ["ok", "override", "mtls"] {
        assert_eq!(
            agent.self_metric("infertel_receiver_scrape_errors_total", &[("job", j)]),
            0.0,
            "job {j}: scrape errors\n{}",
            ctx()
        );
    }
}

#[test]
fn a_gzip_compressed_scrape_decodes_to_the_exact_values() {
    // Values whose text form is easy to get wrong: shortest round-trip
    // decimals, extremes, subnormals, infinities, negative zero.
    let special = [
        0.1,
        1e-300,
        f64::MAX,
        f64::MIN_POSITIVE,
        -2.5,
        123_456_789.123_456_79,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        5e-324,
    ];
    let mut body = String::from("# TYPE gz_value gauge\n");
    let mut want: Vec<(String, f64)> = Vec::new();
    for i in 0..600 {
        let v = if i < special.len() { special[i] } else { i as f64 / 7.0 };
        let text = if v == f64::INFINITY {
            "+Inf".to_string()
        } else if v == f64::NEG_INFINITY {
            "-Inf".to_string()
        } else {
            format!("{v:?}")
        };
        body.push_str(&format!("gz_value{{series=\"s{i:03}\",shard=\"{}\"}} {text}\n", i % 4));
        want.push((format!("s{i:03}"), v));
    }
    let targets = Targets::start();
    targets.set("/metrics", TEXT_004, body.clone());
    let port = Nginx::port();
    let nginx = Nginx::start(
        &format!(
            r#"
    log_format gz '$request_uri $status ae=$http_accept_encoding enc=$sent_http_content_encoding ratio=$gzip_ratio';
    server {{
        listen 127.0.0.1:{port};
        access_log {{{{DIR}}}}/access.log gz;
        gzip on;
        # The type nginx matches is what comes before a charset parameter,
        # so the text format's "text/plain; version=0.0.4; charset=utf-8"
        # needs its own entry: plain "text/plain" would not compress it.
        gzip_types text/plain "text/plain; version=0.0.4";
        gzip_min_length 1;
        location / {{ proxy_pass http://{t}; }}
    }}
"#,
            t = targets.addr
        ),
        &[port],
    );
    let rx = RwReceiver::start(Arc::new(|_| (200, Duration::ZERO)));
    let config = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
        - job_name: gz
          static_configs: [{{targets: ['127.0.0.1:{port}']}}]
exporters:
  prometheusremotewrite:
    endpoint: {url}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        url = rx.url()
    );
    let agent = Agent::start(&config);
    let ctx = || format!("--- agent log ---\n{}\n{}", plain(&agent.proc.log_text()), nginx.logs());

    let got = eventually("a scrape of all 600 gz_value series", Duration::from_secs(30), ctx, || {
        let mut got: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
        for r in rx.received() {
            for s in &r.series {
                if s.labels.metric_name() == "gz_value" {
                    for p in &s.samples {
                        got.entry(s.labels.get("series").unwrap_or("").to_string()).or_insert(p.value);
                    }
                }
            }
        }
        (got.len() == want.len()).then_some(got)
    });
    for (series, v) in &want {
        let g = got[series];
        // Remote write (proto3, like Prometheus's gogo code) omits a 0.0
        // value, -0.0 included, so -0.0 arrives as 0.0.
        let v = &if *v == 0.0 { 0.0 } else { *v };
        assert_eq!(g.to_bits(), v.to_bits(), "series {series}: arrived as {g:?}, served {v:?}");
    }
    // nginx really compressed it: the scrape asked for gzip and got it.
    let log = nginx.access_log();
    let line = log
        .lines()
        .find(|l| l.starts_with("/metrics 200 "))
        .unwrap_or_else(|| panic!("no scrape in the access log\n{}", ctx()));
    assert!(line.contains("enc=gzip"), "nginx did not gzip the scrape: {line}\n{}", ctx());
    let ratio: f64 = line.rsplit("ratio=").next().and_then(|r| r.trim().parse().ok()).unwrap_or(0.0);
    assert!(ratio > 2.0, "gzip ratio {ratio}: the body was not really compressed ({line})");
    assert_eq!(agent.self_metric("infertel_receiver_scrape_errors_total", &[]), 0.0, "{}", ctx());
    assert!(agent.self_metric("infertel_receiver_scraped_samples_total", &[("job", "gz")]) >= want.len() as f64);
}

#[test]
fn plain_http_scrapes_keep_their_connection_outlive_closed_ones_and_follow_redirects() {
    let (kept, closing) = (Nginx::port(), Nginx::port());
    let nginx = Nginx::start(
        &format!(
            r#"
    log_format conn '$server_port $request_uri $status $connection $connection_requests $body_bytes_sent';
    server {{
        listen 127.0.0.1:{kept};
        access_log {{{{DIR}}}}/access.log conn;
        keepalive_timeout 60s;
        root {{{{DIR}}}}/www;
        types {{ }}
        default_type "text/plain; version=0.0.4";
        location = /moved {{ return 301 /big; }}
    }}
    server {{
        listen 127.0.0.1:{closing};
        access_log {{{{DIR}}}}/access.log conn;
        keepalive_timeout 1s;
        keepalive_requests 2;
        root {{{{DIR}}}}/www;
        types {{ }}
        default_type "text/plain; version=0.0.4";
    }}
"#
        ),
        &[kept, closing],
    );
    // 20,000 series, 2 MB: many times the direct connection's read buffer.
    let n = 20_000u32;
    let pad = "p".repeat(70);
    let body: String = (0..n).map(|i| format!("big_value{{i=\"{i:06}\",pad=\"{pad}\"}} {i}\n")).collect();
    assert!(body.len() > 2_000_000, "{}", body.len());
    std::fs::create_dir_all(nginx.dir.path().join("www")).expect("www");
    std::fs::write(nginx.dir.path().join("www/big"), &body).expect("write body");
    let rx = RwReceiver::start(Arc::new(|_| (200, Duration::ZERO)));
    let job = |name: &str, port: u16, path: &str, extra: &str| {
        format!(
            "        - job_name: {name}\n          metrics_path: {path}\n          static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n{extra}"
        )
    };
    let config = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 2s, scrape_timeout: 2s}}
      scrape_configs:
{}{}{}{}
exporters:
  prometheusremotewrite:
    endpoint: {url}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        job("kept", kept, "/big", ""),
        job("closing", closing, "/big", ""),
        job("moved", kept, "/moved", ""),
        job("refused", kept, "/moved", "          follow_redirects: false\n"),
        url = rx.url()
    );
    let agent = Agent::start(&config);
    let ctx = || format!("--- agent log ---\n{}\n{}", plain(&agent.proc.log_text()), nginx.logs());
    let scrapes = |job: &str| agent.self_metric("infertel_receiver_scraped_samples_total", &[("job", job)]) / n as f64;
    eventually("6 scrapes of each job", Duration::from_secs(60), ctx, || {
        (["kept", "closing", "moved"].iter().all(|j| scrapes(j) >= 6.0)).then_some(())
    });
    // Every sample of every scrape arrived with its value: per job and
    // scrape timestamp, a complete scrape has n samples summing to 0+..+n-1.
    let mut scrapes_seen: std::collections::BTreeMap<(String, i64), (u32, f64)> = Default::default();
    for r in rx.received() {
        for s in &r.series {
            if s.labels.metric_name() == "big_value" {
                for p in &s.samples {
                    let e = scrapes_seen
                        .entry((s.labels.get("job").unwrap_or("").to_string(), p.timestamp_ms))
                        .or_default();
                    e.0 += 1;
                    e.1 += p.value;
                }
            }
        }
    }
    let per_scrape = (n as f64 - 1.0) * n as f64 / 2.0;
    for j in ["kept", "closing", "moved"] {
        let complete: Vec<f64> =
            scrapes_seen.iter().filter(|((job, _), (c, _))| job == j && *c == n).map(|(_, (_, sum))| *sum).collect();
        assert!(complete.len() >= 5, "{j}: {} complete scrapes\n{}", complete.len(), ctx());
        assert!(complete.iter().all(|s| *s == per_scrape), "{j}: values {complete:?}\n{}", ctx());
        assert!(scrapes_seen.iter().all(|((job, _), (c, _))| job != j || *c <= n), "{j}: a series twice");
    }
    let errors = |filter: &[(&str, &str)]| agent.self_metric("infertel_receiver_scrape_errors_total", filter);
    for j in ["kept", "closing", "moved"] {
        assert_eq!(errors(&[("job", j)]), 0.0, "{j} had failed scrapes\n{}", ctx());
    }
    assert!(
        errors(&[("job", "refused"), ("reason", "http_status")]) >= 3.0,
        "follow_redirects: false must refuse the 301\n{}",
        ctx()
    );
    // nginx's view: (port, uri, status, connection, requests on it).
    let log = nginx.access_log();
    let lines: Vec<Vec<&str>> =
        log.lines().map(|l| l.split(' ').collect()).filter(|f: &Vec<&str>| f.len() == 6).collect();
    let on = |port: u16, uri: &str| -> Vec<&Vec<&str>> {
        lines.iter().filter(|f| f[0] == port.to_string() && f[1] == uri && f[2] == "200").collect()
    };
    // One job, one connection: every scrape of "kept" rode the same one.
    let kept_lines = on(kept, "/big");
    let conns: std::collections::BTreeSet<&str> = kept_lines.iter().map(|f| f[3]).collect();
    assert!(kept_lines.len() >= 12, "kept and moved scrapes: {}\n{log}", kept_lines.len());
    assert!(kept_lines.iter().all(|f| f[5] == body.len().to_string()), "whole bodies sent\n{log}");
    // Two jobs scrape that port (kept, and moved after its redirect, which
    // reqwest's own pool carries): at most a few connections, not one per scrape.
    assert!(conns.len() <= 3, "{} connections for {} scrapes\n{log}", conns.len(), kept_lines.len());
    // nginx closed the other port's connections after 1 s idle (and at the
    // second request): the scrapes went on on new ones.
    let closing_lines = on(closing, "/big");
    let conns: std::collections::BTreeSet<&str> = closing_lines.iter().map(|f| f[3]).collect();
    assert!(
        conns.len() >= closing_lines.len() / 2,
        "{} connections for {} scrapes\n{log}",
        conns.len(),
        closing_lines.len()
    );
    assert!(closing_lines.iter().all(|f| f[4] == "1" || f[4] == "2"), "{log}");
}

#[test]
fn remote_write_through_nginx_with_authenticators_and_explained_rejections() {
    let pki = Pki::generate();
    let secrets = tempfile::tempdir().expect("tempdir");
    let s = secrets.path();
    let htpasswd_file = s.join("htpasswd");
    htpasswd(&htpasswd_file, "writer", "w-pass");
    let token = write(s, "token", "s3cret\n");

    let targets = Targets::start();
    targets.set("/metrics", TEXT_004, PAGE);
    let prom = Prometheus::start("");
    let (tls, mtls) = (Nginx::port(), Nginx::port());
    let write_url = prom.write_url();
    let nginx = Nginx::start(
        &format!(
            r#"
    log_format rw '$request_method $request_uri $status $server_protocol';
    server {{
        listen 127.0.0.1:{tls} ssl http2;
        access_log {{{{DIR}}}}/access.log rw;
        ssl_certificate {sc}; ssl_certificate_key {sk};
        location = /basic/api/v1/write {{
            auth_basic "remote write"; auth_basic_user_file {htpasswd};
            proxy_pass {write_url};
        }}
        location = /bearer/api/v1/write {{
            if ($http_authorization != "Bearer s3cret") {{ return 401 "bad token\n"; }}
            proxy_pass {write_url};
        }}
        location = /forbidden/api/v1/write {{ return 403 "forbidden by policy\n"; }}
        location = /_prometheus/metrics/vllm/inference/api/v1/write {{
            return 403 '{{"error":"action [indices:data/write/bulk] is unauthorized for API key"}}';
        }}
        location / {{ return 404 "no such route\n"; }}
    }}
    server {{
        listen 127.0.0.1:{mtls} ssl;
        access_log {{{{DIR}}}}/access.log rw;
        ssl_certificate {sc}; ssl_certificate_key {sk};
        ssl_client_certificate {ca};
        ssl_verify_client on;
        location = /api/v1/write {{ proxy_pass {write_url}; }}
    }}
"#,
            sc = pki.server.cert.display(),
            sk = pki.server.key.display(),
            ca = pki.ca.display(),
            htpasswd = htpasswd_file.display(),
        ),
        &[tls, mtls],
    );

    let ca = pki.ca.display();
    let base = format!("https://127.0.0.1:{tls}");
    // (exporter suffix, endpoint, extra keys)
    let exporters: Vec<(&str, String, String)> = vec![
        (
            "basic",
            format!("{base}/basic/api/v1/write"),
            format!("    auth: {{authenticator: basicauth/rw}}\n    tls: {{ca_file: {ca}}}\n"),
        ),
        (
            "badpw",
            format!("{base}/basic/api/v1/write"),
            format!("    auth: {{authenticator: basicauth/bad}}\n    tls: {{ca_file: {ca}}}\n"),
        ),
        // By name, to check the DNS SAN too.
        (
            "bearer",
            format!("https://localhost:{tls}/bearer/api/v1/write"),
            format!("    auth: {{authenticator: bearertokenauth/rw}}\n    tls: {{ca_file: {ca}}}\n"),
        ),
        (
            "badtoken",
            format!("{base}/bearer/api/v1/write"),
            format!("    auth: {{authenticator: bearertokenauth/bad}}\n    tls: {{ca_file: {ca}}}\n"),
        ),
        ("forbidden", format!("{base}/forbidden/api/v1/write"), format!("    tls: {{ca_file: {ca}}}\n")),
        ("missing", format!("{base}/missing/api/v1/write"), format!("    tls: {{ca_file: {ca}}}\n")),
        (
            "es",
            format!("{base}/_prometheus/metrics/vllm/inference/api/v1/write"),
            format!("    tls: {{ca_file: {ca}}}\n"),
        ),
        (
            "eshost",
            format!("{base}/ingest/_prometheus/metrics/vllm/inference/api/v1/write"),
            format!("    tls: {{ca_file: {ca}}}\n"),
        ),
        (
            "mtls",
            format!("https://127.0.0.1:{mtls}/api/v1/write"),
            format!(
                "    tls: {{ca_file: {ca}, cert_file: {}, key_file: {}}}\n",
                pki.client.cert.display(),
                pki.client.key.display()
            ),
        ),
        ("nocert", format!("https://127.0.0.1:{mtls}/api/v1/write"), format!("    tls: {{ca_file: {ca}}}\n")),
        ("noca", format!("{base}/basic/api/v1/write"), "    auth: {authenticator: basicauth/rw}\n".to_string()),
    ];
    let mut exporters_yaml = String::new();
    for (name, endpoint, extra) in &exporters {
        exporters_yaml.push_str(&format!(
            "  prometheusremotewrite/{name}:\n    endpoint: {endpoint}\n    external_labels: {{via: {name}}}\n    retry_on_failure: {{initial_interval: 100ms, max_interval: 500ms}}\n    startup_check: off\n{extra}"
        ));
    }
    let list: Vec<String> = exporters.iter().map(|(n, _, _)| format!("prometheusremotewrite/{n}")).collect();
    let config = format!(
        r#"
extensions:
  basicauth/rw:
    client_auth: {{username: writer, password: w-pass}}
  basicauth/bad:
    client_auth: {{username: writer, password: nope}}
  bearertokenauth/rw:
    filename: {token}
  bearertokenauth/bad:
    token: guess
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
        - job_name: t
          static_configs: [{{targets: ['{target}']}}]
exporters:
{exporters_yaml}
service:
  extensions: [basicauth/rw, basicauth/bad, bearertokenauth/rw, bearertokenauth/bad]
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [{list}]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        target = targets.addr,
        list = list.join(", ")
    );
    let agent = Agent::start(&config);
    let ctx = || format!("--- agent log ---\n{}\n{}", plain(&agent.proc.log_text()), nginx.logs());

    // Accepted: the data arrives in Prometheus, exactly, with no drops.
    for via in ["basic", "bearer", "mtls"] {
        let got = eventually(
            &format!("demo_requests_total{{via=\"{via}\"}} in Prometheus"),
            Duration::from_secs(30),
            ctx,
            || one_value(&prom, &format!("demo_requests_total{{via=\"{via}\"}}")),
        );
        assert_eq!(got, 42.0, "via {via}\n{}", ctx());
        eventually(&format!("up{{via=\"{via}\"}} = 1"), Duration::from_secs(10), ctx, || {
            (one_value(&prom, &format!("up{{via=\"{via}\"}}")) == Some(1.0)).then_some(())
        });
        let e = format!("prometheusremotewrite/{via}");
        assert!(
            agent.self_metric("infertel_exporter_sent_samples_total", &[("exporter", &e)]) > 0.0,
            "{e}: nothing counted as sent"
        );
        assert_eq!(
            agent.self_metric("infertel_exporter_dropped_samples_total", &[("exporter", &e)]),
            0.0,
            "{e}: drops\n{}",
            ctx()
        );
        assert_eq!(
            agent.self_metric("infertel_exporter_failed_requests_total", &[("exporter", &e)]),
            0.0,
            "{e}: failed requests\n{}",
            ctx()
        );
    }
    // nginx spoke HTTP/2 with the exporter on the TLS front.
    assert!(
        nginx.access_log().lines().any(|l| l.starts_with("POST /basic/api/v1/write 2") && l.ends_with(" HTTP/2.0")),
        "no HTTP/2 write\n{}",
        ctx()
    );

    // Configuration faults (401, 403, 404): the exporter pauses and holds
    // the data (nothing dropped), explained once; a 400 (here nginx's
    // missing client certificate) is dropped as `rejected`. The runtime
    // behaviour is what is tested here (`startup_check: off`); the startup
    // probes are in tests/startup_checks.rs.
    let rejected = [
        ("badpw", "401", "credentials were rejected"),
        ("badtoken", "401", "bad token"),
        ("forbidden", "403", "forbidden by policy"),
        ("missing", "404", "wrong host or path"),
        ("es", "403", "write privileges"),
        ("eshost", "404", "Elasticsearch API host"),
        ("nocert", "400", "No required SSL certificate was sent"),
    ];
    for (name, status, explained) in rejected {
        let e = format!("prometheusremotewrite/{name}");
        let held = status != "400";
        // The counters and the log line come one after the other: wait for all.
        let line = format!("HTTP {status}");
        eventually(
            &format!(
                "{e}: a request failed with {status}, its samples held (config fault) or dropped as rejected (400), a log line with {explained:?}"
            ),
            Duration::from_secs(20),
            ctx,
            || {
                let failed = agent
                    .self_metric("infertel_exporter_failed_requests_total", &[("exporter", &e), ("status", status)]);
                let dropped = agent.self_metric(
                    "infertel_exporter_dropped_samples_total",
                    &[("exporter", &e), ("reason", "rejected")],
                );
                let up = agent.self_metric("infertel_exporter_endpoint_up", &[("exporter", &e)]);
                let logged = plain(&agent.proc.log_text()).lines().any(|l| {
                    l.contains(if held { "exporter paused, data held" } else { "dropping" })
                        && l.contains(&format!("exporter={e} "))
                        && l.contains(&line)
                        && l.contains(explained)
                });
                let state = if held { dropped == 0.0 && up == 0.0 } else { dropped > 0.0 };
                (failed >= 1.0 && state && logged).then_some(())
            },
        );
        // One snapshot: the counters keep moving (retries of other statuses).
        let snapshot = agent.self_metrics();
        let all_failed = snapshot.sum("infertel_exporter_failed_requests_total", &[("exporter", &e)]);
        let this = snapshot.sum("infertel_exporter_failed_requests_total", &[("exporter", &e), ("status", status)]);
        assert_eq!(all_failed, this, "{e}: failures with another status\n{}", ctx());
        assert!(
            prom.query(&format!("{{via=\"{name}\"}}")).is_empty(),
            "{e}: data arrived in Prometheus although nginx refused it"
        );
    }
    let log = plain(&agent.proc.log_text());
    assert!(log.contains("is unauthorized for API key"), "the receiver's own words must be logged\n{}", ctx());

    // No CA: a network error, retried (not dropped as rejected), logged.
    eventually("prometheusremotewrite/noca: a network failure, logged", Duration::from_secs(20), ctx, || {
        let failed = agent.self_metric(
            "infertel_exporter_failed_requests_total",
            &[("exporter", "prometheusremotewrite/noca"), ("status", "network")],
        );
        let logged = plain(&agent.proc.log_text()).lines().any(|l| {
            l.contains("exporter=prometheusremotewrite/noca ")
                && l.contains("will retry")
                && l.contains("UnknownIssuer")
        });
        (failed >= 1.0 && logged).then_some(())
    });
    assert_eq!(
        agent.self_metric(
            "infertel_exporter_dropped_samples_total",
            &[("exporter", "prometheusremotewrite/noca"), ("reason", "rejected")]
        ),
        0.0
    );
    assert!(prom.query("{via=\"noca\"}").is_empty());
}
