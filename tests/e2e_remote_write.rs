//! End to end: infertel scrapes every real capture in
//! `shared/fixtures/real/` over HTTP and remote-writes into a real
//! Prometheus (`--web.enable-remote-write-receiver`) and a real
//! VictoriaMetrics; the test reads their HTTP APIs back and checks that
//! every series arrived with its exact name (colons, `_total`, `_bucket`
//! intact), labels and value, plus `up` and the `scrape_*` series.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;
use support::*;

type LabelSet = BTreeMap<String, String>;

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b
}

/// VictoriaMetrics stores values as decimals with about 12 significant
/// digits (seen here: 0.5034303665161133 comes back as 0.503430366516), so
/// its values are compared to 1e-11 relative; Prometheus's bit for bit.
fn same_printed(a: f64, b: f64) -> bool {
    same(a, b) || (a - b).abs() <= 1e-11 * a.abs().max(b.abs())
}

/// What Prometheus semantics say a scrape of `body` stores, computed
/// independently of the agent: parsed names and labels, empty values
/// dropped, job/instance added, the first of duplicate series kept.
fn expected(body: &[u8], job: &str, instance: &str) -> BTreeMap<LabelSet, f64> {
    let exp = infertel_exposition::parse(body, infertel_exposition::Format::PrometheusText).expect("fixture parses");
    let mut out = BTreeMap::new();
    for s in &exp.samples {
        let mut l: LabelSet =
            exp.labels(s).iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(!l.contains_key("job") && !l.contains_key("instance"), "fixture sets job/instance itself");
        l.insert("__name__".into(), s.name.to_string());
        l.insert("job".into(), job.into());
        l.insert("instance".into(), instance.into());
        out.entry(l).or_insert(s.value);
    }
    out
}

const REPORT: [&str; 5] = [
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
];

#[test]
fn every_real_fixture_arrives_exactly_in_prometheus_and_victoriametrics() {
    let fixtures_dir = shared_dir().join("fixtures/real");
    let mut files: Vec<_> = std::fs::read_dir(&fixtures_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", fixtures_dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "prom"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "expected the 9 real captures, found {}", files.len());

    let targets = Targets::start();
    let prom = Prometheus::start("");
    let vm = Victoria::start();
    let instance = targets.addr.to_string();
    let mut jobs = String::new();
    let mut want: Vec<(String, BTreeMap<LabelSet, f64>)> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let body = std::fs::read(f).expect("read fixture");
        let job = format!("fixture{i}");
        targets.set(&format!("/{job}"), TEXT_004, body.clone());
        jobs.push_str(&format!(
            "        - job_name: {job}\n          metrics_path: /{job}\n          static_configs: [{{targets: ['{instance}']}}]\n"
        ));
        want.push((job.clone(), expected(&body, &job, &instance)));
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
exporters:
  prometheusremotewrite/prom:
    endpoint: {prom_url}
  prometheusremotewrite/vm:
    endpoint: {vm_url}
service:
  pipelines:
    metrics:
      receivers: [prometheus]
      processors: [batch]
      exporters: [prometheusremotewrite/prom, prometheusremotewrite/vm]
  telemetry:
    metrics: {{address: "{{{{TELEMETRY}}}}"}}
"#,
        prom_url = prom.write_url(),
        vm_url = vm.write_url()
    );
    let agent = Agent::start(&config);

    for ((job, series), file) in want.iter().zip(&files) {
        let fname = file.file_name().unwrap().to_string_lossy();
        // Prometheus: all series of the job, by instant query.
        let total = series.len() + REPORT.len();
        let got = wait_until(&format!("{fname} in Prometheus ({total} series)"), Duration::from_secs(40), || {
            let r = prom.query(&format!("{{job=\"{job}\"}}"));
            (r.len() >= total).then_some(r)
        });
        let got: BTreeMap<LabelSet, f64> = got.into_iter().map(|(l, v)| (l, parse_prom_float(&v))).collect();
        for (labels, v) in series {
            let g = got.get(labels).unwrap_or_else(|| panic!("{fname}: series {labels:?} missing in Prometheus"));
            assert!(same(*g, *v), "{fname}: {labels:?}: Prometheus has {g}, scraped {v}");
        }
        for name in REPORT {
            let mut l = LabelSet::new();
            l.insert("__name__".into(), name.into());
            l.insert("job".into(), job.clone());
            l.insert("instance".into(), instance.clone());
            assert!(got.contains_key(&l), "{fname}: {name} missing in Prometheus");
        }
        let up = got.iter().find(|(l, _)| l["__name__"] == "up").map(|(_, v)| *v);
        assert_eq!(up, Some(1.0), "{fname}: up");
        let scraped =
            got.iter().find(|(l, _)| l["__name__"] == "scrape_samples_scraped").map(|(_, v)| *v).unwrap_or(-1.0);
        assert!(scraped >= series.len() as f64, "{fname}: scrape_samples_scraped {scraped} < {}", series.len());
        assert_eq!(got.len(), total, "{fname}: Prometheus holds series that were not scraped");
        println!("{fname}: {} series in Prometheus, all exact", series.len());

        // VictoriaMetrics: every raw sample, by export.
        let got = wait_until(&format!("{fname} in VictoriaMetrics"), Duration::from_secs(40), || {
            let r = vm.export(&format!("{{job=\"{job}\"}}"));
            (r.len() >= total).then_some(r)
        });
        let got: BTreeMap<LabelSet, Vec<f64>> = got.into_iter().collect();
        for (labels, v) in series {
            let g = got.get(labels).unwrap_or_else(|| panic!("{fname}: series {labels:?} missing in VictoriaMetrics"));
            assert!(
                !g.is_empty() && g.iter().all(|x| same_printed(*x, *v)),
                "{fname}: {labels:?}: VictoriaMetrics has {g:?}, scraped {v}"
            );
        }
        println!("{fname}: {} series in VictoriaMetrics, all exact", series.len());
    }
    let sent = agent.self_metric("infertel_exporter_sent_samples_total", &[("exporter", "prometheusremotewrite/prom")]);
    assert!(sent > 0.0, "no samples counted as sent");
    assert_eq!(agent.self_metric("infertel_exporter_dropped_samples_total", &[]), 0.0, "{}", agent.proc.log_text());
}

/// The Collector's `namespace` key, into a real Prometheus: every name
/// gets the prefix, labels and values stay as scraped.
#[test]
fn namespace_prefixes_every_name_in_prometheus() {
    let prom = Prometheus::start("");
    let targets = Targets::start();
    targets.set(
        "/metrics",
        TEXT_004,
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 7\n",
    );
    let cfg = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 500ms, scrape_timeout: 400ms}}
      scrape_configs: [{{job_name: vllm, static_configs: [{{targets: ['{t}']}}]}}]
exporters:
  prometheusremotewrite:
    endpoint: {rw}
    namespace: gpu
    resource_to_telemetry_conversion: {{enabled: true}}
service:
  pipelines: {{metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        t = targets.addr,
        rw = prom.write_url()
    );
    let _agent = Agent::start(&cfg);
    let got = wait_until("gpu_vllm:num_requests_running in Prometheus", Duration::from_secs(30), || {
        let r = prom.query("gpu_vllm:num_requests_running");
        (!r.is_empty()).then_some(r)
    });
    assert_eq!(got[0].0.get("model_name").map(String::as_str), Some("m"));
    assert_eq!(got[0].0.get("job").map(String::as_str), Some("vllm"));
    assert_eq!(got[0].1, "7");
    assert!(!prom.query("gpu_up").is_empty(), "report series are prefixed too, as the Collector prefixes every name");
    assert!(prom.query("vllm:num_requests_running").is_empty(), "nothing arrives unprefixed");
}
