//! End to end: the Collector's `resource`, `attributes` and `filter`
//! processors, configured as a Collector user writes them, on real vLLM and
//! dcgm-exporter captures (`shared/fixtures/real/`), remote-written into a
//! real Prometheus. What should arrive is computed here from the capture
//! text (which families are histograms, how many lines each has) and the
//! hashes by `sha256sum`, never by the agent's code.

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;
use support::*;

const VLLM: &str = "vllm-v0.17-cncf-k8s-ai-conformance-kops.prom";
const DCGM: &str = "dcgm-exporter-kops-l4.prom";

fn capture(name: &str) -> String {
    std::fs::read_to_string(shared_dir().join("fixtures/real").join(name)).expect("capture")
}

/// Sample lines of a capture: (series name, label text).
fn samples(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let end = l.find(['{', ' ']).unwrap_or(l.len());
            let labels = if l[end..].starts_with('{') {
                l[end..l.rfind('}').unwrap_or(end) + 1].to_string()
            } else {
                String::new()
            };
            (l[..end].to_string(), labels)
        })
        .collect()
}

fn families_of_type(text: &str, kind: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, k)| k.trim() == kind)
        .map(|(f, _)| f.to_string())
        .collect()
}

fn sha256(s: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(format!("printf %s '{s}' | sha256sum")).output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string()
}

#[test]
fn collector_processors_shape_what_reaches_prometheus() {
    let vllm = capture(VLLM);
    let dcgm = capture(DCGM);
    let histograms = families_of_type(&vllm, "histogram");
    assert!(histograms.contains("vllm:time_to_first_token_seconds") && histograms.len() > 3, "{histograms:?}");
    let prom = Prometheus::start("");
    let targets = Targets::start();
    targets.set("/vllm", TEXT_004, vllm.as_str());
    targets.set("/dcgm", TEXT_004, dcgm.as_str());
    let cfg = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 900ms}}
      scrape_configs:
        - {{job_name: vllm, metrics_path: /vllm, static_configs: [{{targets: ['{t}']}}]}}
        - {{job_name: dcgm, metrics_path: /dcgm, static_configs: [{{targets: ['{t}']}}]}}
processors:
  resource:
    attributes:
      - key: k8s.cluster.name
        value: gpu-east
        action: insert
      - key: service.name
        value: not-the-job
        action: insert
  attributes/dcgm:
    include:
      match_type: regexp
      metric_names: ['^DCGM_FI_']
    actions:
      - {{key: UUID, action: hash}}
      - {{key: DCGM_FI_DRIVER_VERSION, action: delete}}
      - {{key: modelName, pattern: '^NVIDIA (?P<gpu_family>\w+)$', action: extract}}
      - {{key: gpu.index, from_attribute: gpu, action: insert}}
  filter/noise:
    error_mode: ignore
    metrics:
      metric:
        - 'IsMatch(name, "^python_")'
        - 'type == METRIC_DATA_TYPE_HISTOGRAM and name != "vllm:time_to_first_token_seconds"'
      datapoint:
        - 'metric.name == "DCGM_FI_DEV_MEMORY_TEMP"'
exporters:
  prometheusremotewrite:
    endpoint: {rw}
service:
  pipelines:
    metrics:
      receivers: [prometheus]
      processors: [filter/noise, attributes/dcgm, resource]
      exporters: [prometheusremotewrite]
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        t = targets.addr,
        rw = prom.write_url()
    );
    let agent = Agent::start(&cfg);

    // What the filter should drop from one scrape of each capture.
    let dropped_by_name = |name: &str| {
        name.starts_with("python_")
            || histograms.iter().any(|h| {
                h != "vllm:time_to_first_token_seconds"
                    && [format!("{h}_bucket"), format!("{h}_sum"), format!("{h}_count")].iter().any(|s| s == name)
            })
            || name == "DCGM_FI_DEV_MEMORY_TEMP"
    };
    let vllm_samples = samples(&vllm);
    let dcgm_samples = samples(&dcgm);
    let vllm_dropped = vllm_samples.iter().filter(|(n, _)| dropped_by_name(n)).count() as u64;
    let dcgm_dropped = dcgm_samples.iter().filter(|(n, _)| dropped_by_name(n)).count() as u64;
    let per_scrape_dropped = vllm_dropped + dcgm_dropped;
    let vllm_kept = vllm_samples.iter().filter(|(n, _)| !dropped_by_name(n)).count();
    assert!(per_scrape_dropped > 50 && vllm_kept > 50, "{per_scrape_dropped} {vllm_kept}");

    let ttft_buckets = vllm_samples.iter().filter(|(n, _)| n == "vllm:time_to_first_token_seconds_bucket").count();
    let got = wait_until("TTFT buckets in Prometheus", Duration::from_secs(30), || {
        let r = prom.query("vllm:time_to_first_token_seconds_bucket");
        (r.len() == ttft_buckets).then_some(r)
    });
    for (labels, _) in &got {
        assert_eq!(labels.get("k8s_cluster_name").map(String::as_str), Some("gpu-east"), "{labels:?}");
        assert_eq!(labels.get("job").map(String::as_str), Some("vllm"), "insert leaves the job: {labels:?}");
        assert!(labels.contains_key("le"), "{labels:?}");
    }
    // Every series the capture has and the filter keeps is there, no more
    // (the scrape's own up/scrape_* series aside).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut counted = None;
    while std::time::Instant::now() < deadline {
        let r = prom.query(r#"count({job="vllm", __name__!~"up|scrape_.*"})"#);
        counted = r.first().and_then(|(_, v)| v.parse::<usize>().ok());
        if counted == Some(vllm_kept) {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    if counted != Some(vllm_kept) {
        let have: BTreeSet<String> = prom
            .query(r#"{job="vllm", __name__!~"up|scrape_.*"}"#)
            .into_iter()
            .filter_map(|(l, _)| l.get("__name__").cloned())
            .collect();
        let want: BTreeSet<String> =
            vllm_samples.iter().filter(|(n, _)| !dropped_by_name(n)).map(|(n, _)| n.clone()).collect();
        panic!(
            "{counted:?} vLLM series in Prometheus, {vllm_kept} expected; missing names {:?}, unexpected {:?}",
            want.difference(&have).collect::<Vec<_>>(),
            have.difference(&want).collect::<Vec<_>>()
        );
    }
    for (n, _) in vllm_samples.iter().filter(|(n, _)| dropped_by_name(n)).take(20) {
        assert!(prom.query(&format!("{{__name__={n:?}}}")).is_empty(), "{n} was to be filtered");
    }
    assert!(prom.query("DCGM_FI_DEV_MEMORY_TEMP").is_empty());

    // The DCGM series: UUID hashed, the driver label gone, the family
    // extracted, gpu copied; labels the actions do not name untouched.
    let (_, sm_labels) = dcgm_samples.iter().find(|(n, _)| n == "DCGM_FI_DEV_SM_CLOCK").expect("SM clock in capture");
    let uuid = sm_labels.split("UUID=\"").nth(1).and_then(|r| r.split('"').next()).expect("UUID").to_string();
    let sm = wait_until("DCGM_FI_DEV_SM_CLOCK", Duration::from_secs(30), || {
        let r = prom.query("DCGM_FI_DEV_SM_CLOCK");
        (!r.is_empty()).then_some(r)
    });
    let l = &sm[0].0;
    assert_eq!(l.get("UUID"), Some(&sha256(&uuid)), "{l:?}");
    assert!(!l.contains_key("DCGM_FI_DRIVER_VERSION"), "{l:?}");
    assert_eq!(l.get("gpu_family").map(String::as_str), Some("L4"), "{l:?}");
    assert_eq!(l.get("gpu_index").map(String::as_str), Some("0"), "{l:?}");
    assert_eq!(l.get("modelName").map(String::as_str), Some("NVIDIA L4"), "{l:?}");
    assert_eq!(l.get("k8s_cluster_name").map(String::as_str), Some("gpu-east"), "{l:?}");
    assert!(
        prom.query(r#"{job="vllm", gpu_family!=""}"#).is_empty(),
        "include keeps the attributes actions off the vLLM series"
    );

    // Counted, and exactly: each job's scrapes times what the filter takes
    // from one of its scrapes. One snapshot of the agent's metrics; a scrape
    // counted as scraped may not have reached the filter yet.
    let m = agent.self_metrics();
    let scrapes = |job: &str, lines: usize| {
        let n = m.sum("infertel_receiver_scraped_samples_total", &[("job", job)]) as u64;
        assert_eq!(n % lines as u64, 0, "{job}: {n} scraped samples is not a whole number of scrapes of {lines}");
        n / lines as u64
    };
    let (sv, sd) = (scrapes("vllm", vllm_samples.len()), scrapes("dcgm", dcgm_samples.len()));
    let dropped = m.sum("infertel_processor_filter_dropped_samples_total", &[("processor", "filter/noise")]) as u64;
    let expected = sv * vllm_dropped + sd * dcgm_dropped;
    let in_flight = [0, vllm_dropped, dcgm_dropped, vllm_dropped + dcgm_dropped];
    assert!(
        dropped <= expected && in_flight.contains(&(expected - dropped)),
        "dropped {dropped}, expected {expected} ({sv} vLLM scrapes x {vllm_dropped} + {sd} DCGM scrapes x {dcgm_dropped})"
    );
}
