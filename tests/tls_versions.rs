//! `tls_config.min_version` / `max_version` honoured, against a real nginx
//! that speaks TLS 1.2 only: `min_version: TLS13` cannot connect (the
//! scrape fails with a connection error, nothing reaches the target),
//! `max_version: TLS12` and the default connect. Before, `min_version` was
//! accepted and ignored.

mod support;

use std::time::Duration;
use support::nginx::{Nginx, Pki};
use support::*;

#[test]
fn tls_versions_are_honoured() {
    let pki = Pki::generate();
    let targets = Targets::start();
    for j in ["v13", "v12", "dflt"] {
        targets.set(&format!("/{j}"), TEXT_004, "# TYPE g gauge\ng 1\n");
    }
    let port = Nginx::port();
    let _nginx = Nginx::start(
        &format!(
            "server {{ listen 127.0.0.1:{port} ssl; ssl_protocols TLSv1.2; ssl_certificate {}; ssl_certificate_key {}; location / {{ proxy_pass http://{}; }} }}",
            pki.server.cert.display(),
            pki.server.key.display(),
            targets.addr
        ),
        &[port],
    );
    let job = |name: &str, tls: &str| {
        format!(
            "        - job_name: {name}\n          scheme: https\n          metrics_path: /{name}\n          tls_config: {{ca_file: {}{tls}}}\n          static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n",
            pki.ca.display()
        )
    };
    let cfg = format!(
        "receivers:\n  prometheus:\n    config:\n      global: {{scrape_interval: 300ms, scrape_timeout: 300ms}}\n      scrape_configs:\n{}{}{}exporters:\n  debug: {{}}\nservice:\n  pipelines:\n    metrics: {{receivers: [prometheus], exporters: [debug]}}\n  telemetry: {{metrics: {{address: \"{{{{TELEMETRY}}}}\"}}}}\n",
        job("v13", ", min_version: TLS13"),
        job("v12", ", max_version: TLS12"),
        job("dflt", "")
    );
    let mut agent = Agent::start(&cfg);
    wait_until("the TLS 1.2 jobs scraped", Duration::from_secs(20), || {
        (targets.hits("/v12") >= 2 && targets.hits("/dflt") >= 2).then_some(())
    });
    wait_until("the TLS 1.3-only job failing", Duration::from_secs(20), || {
        (agent.self_metric("infertel_receiver_scrape_errors_total", &[("job", "v13"), ("reason", "connection")]) >= 1.0)
            .then_some(())
    });
    assert_eq!(targets.hits("/v13"), 0, "min_version TLS13 never reached the TLS 1.2-only server's target");
    assert_eq!(agent.self_metric("infertel_receiver_target_up", &[("job", "v12")]), 1.0);
    assert_eq!(agent.self_metric("infertel_receiver_target_up", &[("job", "v13")]), 0.0);
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0));
    // A maximum below what infertel speaks is refused at load, by name.
    let bad = cfg.replace("min_version: TLS13", "max_version: TLS11");
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("c.yaml");
    std::fs::write(&p, bad.replace("{{TELEMETRY}}", "127.0.0.1:0")).unwrap();
    let o = std::process::Command::new(infertel_bin()).args(["validate", "--config"]).arg(&p).output().unwrap();
    let text = String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(78), "{text}");
    assert!(text.contains("no protocol left"), "{text}");
}

/// Files a job refers to are read when used, as Prometheus reads them: a
/// CA file not there yet (a secret mounted after the start) is a warning in
/// `validate`, each scrape fails with the reason (`up` 0, counted), and
/// scraping starts on its own once the file appears.
#[test]
fn a_ca_file_that_appears_later_is_read_when_it_does() {
    let pki = Pki::generate();
    let targets = Targets::start();
    targets.set("/late", TEXT_004, "# TYPE g gauge\ng 1\n");
    let port = Nginx::port();
    let _nginx = Nginx::start(
        &format!(
            "server {{ listen 127.0.0.1:{port} ssl; ssl_certificate {}; ssl_certificate_key {}; location / {{ proxy_pass http://{}; }} }}",
            pki.server.cert.display(),
            pki.server.key.display(),
            targets.addr
        ),
        &[port],
    );
    let secrets = tempfile::tempdir().unwrap();
    let ca = secrets.path().join("ca.crt");
    let cfg = format!(
        "receivers:\n  prometheus:\n    config:\n      global: {{scrape_interval: 300ms, scrape_timeout: 300ms}}\n      scrape_configs:\n        - job_name: late\n          scheme: https\n          metrics_path: /late\n          tls_config: {{ca_file: {}}}\n          static_configs: [{{targets: ['127.0.0.1:{port}']}}]\nexporters:\n  debug: {{}}\nservice:\n  pipelines:\n    metrics: {{receivers: [prometheus], exporters: [debug]}}\n  telemetry: {{metrics: {{address: \"{{{{TELEMETRY}}}}\"}}}}\n",
        ca.display()
    );
    // validate: a warning naming the key and the file, exit 0.
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("c.yaml");
    std::fs::write(&p, cfg.replace("{{TELEMETRY}}", "127.0.0.1:0")).unwrap();
    let o = std::process::Command::new(infertel_bin()).args(["validate", "--config"]).arg(&p).output().unwrap();
    let text = String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("tls_config.ca_file") && text.contains("is not there: it is read when used"), "{text}");

    let mut agent = Agent::start(&cfg);
    wait_until("scrapes failing for want of the CA", Duration::from_secs(20), || {
        (agent.self_metric("infertel_receiver_scrape_errors_total", &[("job", "late"), ("reason", "tls")]) >= 2.0)
            .then_some(())
    });
    assert_eq!(agent.self_metric("infertel_receiver_target_up", &[("job", "late")]), 0.0);
    assert_eq!(targets.hits("/late"), 0);
    // The secret is mounted.
    std::fs::copy(&pki.ca, &ca).unwrap();
    wait_until("scraped once the CA is there", Duration::from_secs(20), || (targets.hits("/late") >= 2).then_some(()));
    assert_eq!(agent.self_metric("infertel_receiver_target_up", &[("job", "late")]), 1.0);
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0));
    assert!(agent.proc.log_text().contains("the TLS files can be read now"), "{}", agent.proc.log_text());
}

/// The same for a remote_write CA in a Prometheus file: `validate` warns
/// with the line, the exporter pauses and holds the data (the client cannot
/// be built: a configuration fault), and the data, the first scrape's
/// included, reaches a real Prometheus once the CA file is there.
#[test]
fn a_remote_write_ca_file_that_appears_later_is_read_when_it_does() {
    let pki = Pki::generate();
    let targets = Targets::start();
    targets.set_counter("/metrics", "late_rw_total", 1);
    let sink = Prometheus::start("");
    let port = Nginx::port();
    let _nginx = Nginx::start(
        &format!(
            "server {{ listen 127.0.0.1:{port} ssl; ssl_certificate {}; ssl_certificate_key {}; location / {{ proxy_pass http://127.0.0.1:{}; }} }}",
            pki.server.cert.display(),
            pki.server.key.display(),
            sink.port
        ),
        &[port],
    );
    let secrets = tempfile::tempdir().unwrap();
    let ca = secrets.path().join("ca.crt");
    let prom_file = format!(
        "global: {{scrape_interval: 500ms, scrape_timeout: 500ms}}\nscrape_configs:\n  - job_name: late-rw\n    static_configs: [{{targets: ['{}']}}]\nremote_write:\n  - url: https://127.0.0.1:{port}/api/v1/write\n    tls_config:\n      ca_file: {}\n",
        targets.addr,
        ca.display()
    );
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("prometheus.yml");
    std::fs::write(&p, &prom_file).unwrap();
    let o = std::process::Command::new(infertel_bin()).args(["validate", "--config"]).arg(&p).output().unwrap();
    let text = String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains(":8:") && text.contains("tls.ca_file") && text.contains("is not there"), "{text}");

    let metrics_port = free_port();
    let mut cmd = std::process::Command::new(infertel_bin());
    cmd.arg("run")
        .arg("--config")
        .arg(&p)
        .env("RUST_LOG", "info")
        .env("INFERTEL_METRICS_ADDRESS", format!("127.0.0.1:{metrics_port}"));
    let agent = Proc::spawn("infertel", &mut cmd, d.path().join("infertel.log"));
    // The startup probe cannot build the client: a configuration fault,
    // so the exporter pauses and holds the data (nothing is dropped), and
    // its re-probes read the file again.
    wait_until("the exporter paused for want of the CA", Duration::from_secs(30), || {
        let log = agent.log_text();
        (log.contains("exporter paused") && log.contains("cannot read ca_file")).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(sink.query("late_rw_total").is_empty());
    std::fs::copy(&pki.ca, &ca).unwrap();
    wait_until("data in Prometheus once the CA is there", Duration::from_secs(60), || {
        (!sink.query("late_rw_total{job=\"late-rw\"}").is_empty()).then_some(())
    });
    // Retried, not dropped: the first scrape's sample (value 1) arrived too.
    let raw = sink.raw("late_rw_total{job=\"late-rw\"}", "5m");
    assert!(raw.iter().any(|(_, v)| v.first() == Some(&1.0)), "{raw:?}\n{}", agent.log_text());
}
