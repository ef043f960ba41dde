//! `file_sd_configs` as Prometheus runs them, through the real binary: a
//! file added next to a watched one is picked up in about a second (the
//! refresh interval is 5 minutes, so only the watch can do it); a file
//! that no longer parses keeps its targets (reported) while another file
//! of the same entry still changes; a deleted file takes its targets with
//! it, and their series end with staleness markers.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

fn is_stale(v: f64) -> bool {
    v.to_bits() == infertel_model::stale_nan().to_bits()
}

#[test]
fn file_sd_watches_keeps_last_good_and_forgets_deleted_files() {
    let (a, b, c) = (Targets::start(), Targets::start(), Targets::start());
    for t in [&a, &b, &c] {
        t.set_counter("/metrics", "fsd_total", 1);
    }
    let rx = RwReceiver::start(Arc::new(|_| (204, Duration::ZERO)));
    let sd = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        // Written whole then renamed, as configuration managers do.
        let tmp = sd.path().join(format!(".{name}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, sd.path().join(name)).unwrap();
    };
    let group = |t: &Targets| format!("[{{\"targets\": [\"{}\"], \"labels\": {{\"team\": \"x\"}}}}]", t.addr);
    write("one.json", &group(&a));
    let cfg = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 200ms, scrape_timeout: 200ms}}
      scrape_configs:
        - job_name: fsd
          file_sd_configs: [{{files: ['{}/*.json'], refresh_interval: 5m}}]
exporters:
  prometheusremotewrite:
    endpoint: {}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        sd.path().display(),
        rx.url()
    );
    let mut agent = Agent::start(&cfg);
    wait_until("target a scraped", Duration::from_secs(20), || (a.hits("/metrics") >= 2).then_some(()));
    assert_eq!(b.hits("/metrics"), 0);

    // A second file: picked up by the watch.
    let t0 = Instant::now();
    write("two.json", &group(&b));
    wait_until("target b scraped after its file appeared", Duration::from_secs(5), || {
        (b.hits("/metrics") >= 1).then_some(())
    });
    let picked_up = t0.elapsed();

    // two.json broken: b is kept (last good) and reported; one.json still
    // changes (c added there).
    write("two.json", "[{\"targets\": [");
    write("one.json", &format!("[{{\"targets\": [\"{}\", \"{}\"]}}]", a.addr, c.addr));
    wait_until("target c scraped", Duration::from_secs(5), || (c.hits("/metrics") >= 1).then_some(()));
    let b_hits = b.hits("/metrics");
    std::thread::sleep(Duration::from_secs(1));
    assert!(b.hits("/metrics") >= b_hits + 3, "b still scraped from two.json's last good list");
    assert!(agent.self_metric("infertel_receiver_target_errors_total", &[]) >= 1.0, "the broken file is counted");
    assert!(agent.proc.log_text().contains("two.json"), "the broken file is named in the log");

    // two.json deleted: b goes, with staleness markers.
    std::fs::remove_file(sd.path().join("two.json")).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let b_after = b.hits("/metrics");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(b.hits("/metrics"), b_after, "b no longer scraped once its file is gone");
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    let b_inst = b.addr.to_string();
    let b_up_stale = rx.received().iter().filter(|r| r.status / 100 == 2).flat_map(|r| r.series.clone()).any(|s| {
        s.labels.metric_name() == "up"
            && s.labels.get("instance") == Some(b_inst.as_str())
            && s.samples.iter().any(|p| is_stale(p.value))
    });
    assert!(b_up_stale, "b's up ends with a staleness marker");
    eprintln!(
        "file_sd: a new file picked up in {picked_up:?} (refresh_interval 5m); broken file kept its targets; deleted file's target went stale"
    );
}
