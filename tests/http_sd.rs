//! `http_sd_configs` against a real nginx serving the target list as
//! Prometheus' HTTP SD expects it (JSON, `Content-Type: application/json`,
//! behind basic auth): targets appear, are replaced when the list changes
//! (the dropped target's series end with markers), and a broken answer
//! keeps the last good list, counted and logged.

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::nginx::{Nginx, htpasswd};
use support::*;

fn is_stale(v: f64) -> bool {
    v.to_bits() == infertel_model::stale_nan().to_bits()
}

#[test]
fn http_sd_follows_the_list_and_keeps_the_last_good_one() {
    let (a, b) = (Targets::start(), Targets::start());
    for t in [&a, &b] {
        t.set_counter("/metrics", "hsd_total", 1);
    }
    let www = tempfile::tempdir().unwrap();
    let list = |t: &Targets| format!("[{{\"targets\": [\"{}\"], \"labels\": {{\"zone\": \"z1\"}}}}]", t.addr);
    let put = |body: &str| {
        let tmp = www.path().join(".sd.tmp");
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, www.path().join("sd.json")).unwrap();
    };
    put(&list(&a));
    let port = Nginx::port();
    let pw = www.path().join("htpasswd");
    htpasswd(&pw, "sd", "sd-password");
    let nginx = Nginx::start(
        &format!(
            "server {{ listen 127.0.0.1:{port}; location / {{ root {}; default_type application/json; auth_basic sd; auth_basic_user_file {}; }} }}",
            www.path().display(),
            pw.display()
        ),
        &[port],
    );
    let rx = RwReceiver::start(Arc::new(|_| (204, Duration::ZERO)));
    let cfg = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 200ms, scrape_timeout: 200ms}}
      scrape_configs:
        - job_name: hsd
          http_sd_configs:
            - url: http://127.0.0.1:{port}/sd.json
              refresh_interval: 1s
              basic_auth: {{username: sd, password: sd-password}}
          relabel_configs:
            - {{source_labels: [__meta_url], target_label: sd_url}}
exporters:
  prometheusremotewrite:
    endpoint: {}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        rx.url()
    );
    let mut agent = Agent::start(&cfg);
    wait_until("a scraped from the HTTP SD list", Duration::from_secs(20), || (a.hits("/metrics") >= 2).then_some(()));
    put(&list(&b));
    wait_until("b scraped once the list changed", Duration::from_secs(10), || (b.hits("/metrics") >= 2).then_some(()));
    std::thread::sleep(Duration::from_millis(500));
    let a_hits = a.hits("/metrics");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(a.hits("/metrics"), a_hits, "a no longer scraped");
    // A broken answer: b is kept.
    put("[{\"targets\": ");
    std::thread::sleep(Duration::from_millis(2500));
    let b_hits = b.hits("/metrics");
    std::thread::sleep(Duration::from_millis(600));
    assert!(b.hits("/metrics") >= b_hits + 2, "b still scraped after a broken answer");
    let errors = agent.self_metric("infertel_receiver_discovery_errors_total", &[("mechanism", "http")]);
    assert!(errors >= 1.0, "the broken answer is counted");
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    assert!(agent.proc.log_text().contains("invalid JSON target list"), "{}", agent.proc.log_text());
    assert!(
        nginx.access_log().contains("\"GET /sd.json HTTP/1.1\" 200"),
        "nginx served the list: {}",
        nginx.access_log()
    );
    let series: Vec<_> = rx.received().iter().filter(|r| r.status / 100 == 2).flat_map(|r| r.series.clone()).collect();
    let url = format!("http://127.0.0.1:{port}/sd.json");
    assert!(
        series.iter().any(|s| s.labels.metric_name() == "hsd_total" && s.labels.get("sd_url") == Some(url.as_str())),
        "__meta_url is set on the targets"
    );
    let a_inst = a.addr.to_string();
    assert!(
        series.iter().any(|s| s.labels.metric_name() == "up"
            && s.labels.get("instance") == Some(a_inst.as_str())
            && s.samples.iter().any(|p| is_stale(p.value))),
        "a's up ends with a staleness marker"
    );
}
