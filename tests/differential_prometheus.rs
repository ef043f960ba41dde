//! Differential: a real Prometheus scrapes the same targets itself, with the
//! same scrape configs (relabel_configs and metric_relabel_configs
//! exercising every action, a file_sd target list, an OpenMetrics target,
//! honor_labels on and off, broken targets); the series it stores (names,
//! labels, values, `up`) must equal what infertel delivered to a second
//! Prometheus over remote write.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;
use support::*;

type LabelSet = BTreeMap<String, String>;

const OPENMETRICS_BODY: &str = r#"# TYPE om_requests counter
# HELP om_requests Requests served.
om_requests_total{code="200"} 1027
om_requests_created{code="200"} 1.7e+09
om_requests_total{code="500"} 3 # {trace_id="abc"} 1.0
# TYPE om_temperature_celsius gauge
# UNIT om_temperature_celsius celsius
om_temperature_celsius 21.5
# TYPE om_latency_seconds histogram
om_latency_seconds_bucket{le="0.1"} 5
om_latency_seconds_bucket{le="1.0"} 9
om_latency_seconds_bucket{le="+Inf"} 10
om_latency_seconds_sum 4.5
om_latency_seconds_count 10
# TYPE om_rpc summary
om_rpc{quantile="0.5"} 0.2
om_rpc_sum 12.0
om_rpc_count 40
# TYPE om_build info
om_build_info{version="1.2.3"} 1
# TYPE om_state stateset
om_state{om_state="ready"} 1
om_state{om_state="busy"} 0
# EOF
"#;

const CLASHING_BODY: &str =
    "# TYPE clash gauge\nclash{job=\"original\",instance=\"foo\",kind=\"x\"} 7\nclash{kind=\"y\"} 8\n";

fn scrape_configs(addr: &str, sd_file: &str) -> String {
    format!(
        r#"
  - job_name: vllm-static
    metrics_path: /vllm
    static_configs:
      - targets: ['{addr}']
        labels: {{node: gpu-1, Env: PROD}}
    relabel_configs:
      - {{source_labels: [__address__], modulus: 8, target_label: __tmp_hash, action: hashmod}}
      - {{source_labels: [__tmp_hash], regex: '.*', target_label: addr_hash, replacement: 'h$1'}}
      - {{source_labels: [Env], target_label: env, action: lowercase}}
      - {{regex: Env, action: labeldrop}}
    metric_relabel_configs:
      - {{source_labels: [__name__], regex: 'python_.*|process_.*', action: drop}}
      - {{source_labels: [__name__], regex: 'vllm:(.*)', target_label: vllm_metric, replacement: '$1'}}
      - {{regex: 'model_(.*)', replacement: 'm_$1', action: labelmap}}
      - {{regex: 'engine|model_name', action: labeldrop}}
      - {{source_labels: [handler], target_label: handler_upper, action: uppercase}}
      - {{source_labels: [method], target_label: method_lower, action: lowercase}}
      - {{source_labels: [__name__], modulus: 4, target_label: shard, action: hashmod}}
      - {{source_labels: [finished_reason], regex: 'abort', action: drop}}
  - job_name: dcgm-keep
    metrics_path: /dcgm
    static_configs: [{{targets: ['{addr}']}}]
    metric_relabel_configs:
      - {{source_labels: [__name__], regex: 'DCGM_FI_(DEV|PROF)_.*', action: keep}}
      - {{regex: '__name__|gpu|UUID|Hostname|modelName|device|instance|job', action: labelkeep}}
      - {{source_labels: [__name__], regex: 'DCGM_FI_DEV_GPU_TEMP', target_label: gpu_copy, replacement: '${{1}}0'}}
      - {{source_labels: [gpu], target_label: gpu_copy, action: dropequal}}
      - {{source_labels: [__name__], regex: 'DCGM_FI_DEV_SM_CLOCK|DCGM_FI_DEV_MEM_CLOCK', target_label: same, replacement: 'x'}}
      - {{source_labels: [same], regex: 'x', target_label: same2, replacement: 'x'}}
      - {{source_labels: [same], target_label: same2, action: keepequal}}
  - job_name: fixtures-file-sd
    file_sd_configs:
      - files: ['{sd_file}']
        refresh_interval: 1m
    relabel_configs:
      - {{source_labels: [fixture], regex: 'skip-.*', action: drop}}
      - {{source_labels: [__meta_filepath], regex: '.*/(.*)', target_label: sd_file, replacement: '$1'}}
  - job_name: openmetrics
    metrics_path: /om
    static_configs: [{{targets: ['{addr}']}}]
  - job_name: honor
    honor_labels: true
    metrics_path: /clash
    static_configs: [{{targets: ['{addr}']}}]
  - job_name: clash
    metrics_path: /clash
    static_configs: [{{targets: ['{addr}']}}]
  - job_name: broken-body
    metrics_path: /broken
    static_configs: [{{targets: ['{addr}']}}]
  - job_name: not-found
    metrics_path: /nothing-here
    static_configs: [{{targets: ['{addr}']}}]
"#
    )
}

fn stored(p: &Prometheus) -> BTreeMap<LabelSet, String> {
    p.query(r#"{__name__=~".+"}"#).into_iter().collect()
}

#[test]
fn infertel_stores_what_prometheus_stores() {
    let targets = Targets::start();
    let addr = targets.addr.to_string();
    let real = shared_dir().join("fixtures/real");
    let read = |f: &str| std::fs::read(real.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    targets.set("/vllm", TEXT_004, read("vllm-v0.17-cncf-k8s-ai-conformance-kops.prom"));
    targets.set("/dcgm", TEXT_004, read("dcgm-exporter-lke-rtx4000ada-k8s-pod-labels.prom"));
    targets.set("/om", OPENMETRICS, OPENMETRICS_BODY);
    targets.set("/clash", TEXT_004, CLASHING_BODY);
    targets.set("/broken", TEXT_004, "1234notvali}{ 444\n");
    let mut sd = Vec::new();
    for (i, f) in [
        "vllm-v0.5-v0engine-datadog-integrations-core.prom",
        "dcgm-exporter-2.x-nvidia-docs-a100-mig-partial.prom",
        "dcgm-exporter-kops-l4.prom",
    ]
    .iter()
    .enumerate()
    {
        targets.set(&format!("/sd{i}"), TEXT_004, read(f));
        sd.push(format!(r#"{{"targets": ["{addr}"], "labels": {{"__metrics_path__": "/sd{i}", "fixture": "{f}"}}}}"#));
    }
    sd.push(format!(r#"{{"targets": ["{addr}"], "labels": {{"__metrics_path__": "/sd0", "fixture": "skip-me"}}}}"#));
    let sd_dir = tempfile::tempdir().unwrap();
    let sd_file = sd_dir.path().join("targets.json");
    std::fs::write(&sd_file, format!("[{}]", sd.join(","))).unwrap();
    let scrape = scrape_configs(&addr, &sd_file.display().to_string());

    let oracle = Prometheus::start(&scrape);
    let sink = Prometheus::start("");
    let indented: String = scrape.lines().map(|l| format!("      {l}\n")).collect();
    let config = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
{indented}
exporters:
  prometheusremotewrite:
    endpoint: {}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        sink.write_url()
    );
    let agent = Agent::start(&config);

    // Both have scraped every job at least twice once up exists for all 10
    // targets and the counts agree for a while.
    let jobs = 10;
    let (want, got) = wait_until("the same series in both", Duration::from_secs(60), || {
        let a = stored(&oracle);
        let b = stored(&sink);
        let ups = |m: &BTreeMap<LabelSet, String>| m.keys().filter(|l| l["__name__"] == "up").count();
        (ups(&a) == jobs && ups(&b) == jobs && a.len() == b.len()).then_some((a, b))
    });
    let timing = ["scrape_duration_seconds", "scrape_series_added"];
    let mut diffs = Vec::new();
    for (l, v) in &want {
        match got.get(l) {
            None => diffs.push(format!("missing in infertel's: {l:?} = {v}")),
            Some(g) if !timing.contains(&l["__name__"].as_str()) && g != v => {
                diffs.push(format!("value differs: {l:?}: prometheus {v}, infertel {g}"))
            }
            _ => {}
        }
    }
    for l in got.keys().filter(|l| !want.contains_key(*l)) {
        diffs.push(format!("only in infertel's: {l:?}"));
    }
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}\nagent log:\n{}",
        diffs.len(),
        diffs.join("\n"),
        agent.proc.log_text()
    );

    // The cases that must fail the scrape did, in both.
    for job in ["broken-body", "not-found"] {
        let up: Vec<_> =
            want.iter().filter(|(l, _)| l["__name__"] == "up" && l["job"] == job).map(|(_, v)| v.clone()).collect();
        assert_eq!(up, ["0"], "{job}");
    }
    // And the interesting renamings really happened (so the test is not
    // passing on two empty stores).
    assert!(want.keys().any(|l| l.contains_key("exported_job")), "clash job: no exported_job");
    assert!(want.keys().any(|l| l.get("vllm_metric").is_some_and(|v| v == "generation_tokens_total")));
    assert!(want.keys().any(|l| l.contains_key("m_name")));
    assert!(want.keys().any(|l| l.get("sd_file").is_some_and(|v| v == "targets.json")));
    assert!(!want.keys().any(|l| l.get("fixture").is_some_and(|v| v == "skip-me")));
    assert!(want.keys().any(|l| l["__name__"] == "om_requests_total"));
    println!(
        "{} series identical (names, labels, values) in Prometheus's own scrape and infertel's remote write",
        want.len()
    );
    assert!(agent.self_metric("infertel_receiver_scrape_errors_total", &[("reason", "parse")]) >= 1.0);
}

/// Issue 13 §4: the scrape cases where infertel differed from Prometheus
/// 2.42, each as a job of its own, scraped by a real Prometheus and by
/// infertel from the same bodies; everything Prometheus stores (data,
/// `up`, `scrape_samples_scraped`, `scrape_samples_post_metric_relabeling`,
/// `scrape_series_added`) must be what infertel delivers.
#[test]
fn scrape_edge_cases_as_prometheus() {
    let targets = Targets::start();
    let addr = targets.addr.to_string();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    // The same series twice, with the same and with distinct (ascending)
    // timestamps, and the same labels spelled in another order.
    targets.set(
        "/dup",
        TEXT_004,
        "# TYPE dup_a gauge\ndup_a 1\ndup_a 2\ndup_b{x=\"1\",y=\"2\"} 3\ndup_b{y=\"2\",x=\"1\"} 4\ndup_c 5\n",
    );
    let (t1, t2) = (now_ms - 20_000, now_ms - 10_000);
    targets.set("/dupts", TEXT_004, format!("dup_ts 1 {t1}\ndup_ts 2 {t2}\nplain 7\n"));
    targets.set("/five", TEXT_004, "five_a 1\nfive_b 2\nfive_c 3\nfive_d 4\nfive_e{x=\"1\"} 5\n");
    targets.set("/labels", TEXT_004, "lab_ok{a=\"1\"} 1\nlab_many{a=\"1\",b=\"2\",c=\"3\"} 2\nlab_after 3\n");
    targets.set("/parseerr", TEXT_004, "pe_a 1\npe_b 2\n1bad 3\npe_c 4\n");
    // OpenMetrics as Prometheus' parser takes it: a counter without _total,
    // a negative counter, a histogram without +Inf, HELP repeated, a family
    // split in two, an exemplar over 128 characters.
    let long = "x".repeat(140);
    targets.set(
        "/omlenient",
        OPENMETRICS,
        format!(
            "# TYPE oml_plain counter\n# HELP oml_plain Plain.\n# HELP oml_plain Plain again.\noml_plain 5\n\
             # TYPE oml_neg counter\noml_neg_total -3\n\
             # TYPE oml_hist histogram\noml_hist_bucket{{le=\"1\"}} 2\noml_hist_count 2\noml_hist_sum 1.5\n\
             # TYPE oml_split gauge\noml_split{{part=\"1\"}} 1\n# TYPE oml_other gauge\noml_other 9\n# TYPE oml_split gauge\noml_split{{part=\"2\"}} 2\n\
             # TYPE oml_ex counter\noml_ex_total 4 # {{trace_id=\"{long}\"}} 1.0\n# EOF\n"
        ),
    );
    // A malformed OpenMetrics content type: Prometheus falls back to the
    // text parser (this body has no # EOF, so only the text parser takes it).
    targets.set("/ombadct", "application/openmetrics-text; version", "# TYPE badct gauge\nbadct 1\n");
    // Go regex syntax: an escaped space, a name used by two groups.
    targets.set("/routes", TEXT_004, "route_hits{route=\"GET /v1/models\"} 1\nroute_hits{route=\"POST /v1/chat\"} 2\n");
    // Pushgateway-style empty instance with honor_labels.
    targets.set("/pushgw", TEXT_004, "pg_metric{instance=\"\",job=\"pushed\"} 1\n");
    targets.set("/probe", TEXT_004, "probe_success 1\n");
    // A body of exactly body_size_limit (1KB = 1024 bytes, base 2) fails.
    let mut exact = String::from("# padding\n");
    let line = "exact_size 1\n";
    exact.push_str(&"#".repeat(1024 - exact.len() - line.len() - 1));
    exact.push('\n');
    exact.push_str(line);
    assert_eq!(exact.len(), 1024);
    targets.set("/exact", TEXT_004, exact);

    let job = |name: &str, path: &str, extra: &str| {
        format!(
            "  - job_name: {name}\n    metrics_path: {path}\n    static_configs: [{{targets: ['{addr}']}}]\n{extra}"
        )
    };
    let scrape = [
        job("dup", "/dup", ""),
        job("dup-ts", "/dupts", ""),
        job("sample-limit", "/five", "    sample_limit: 3\n"),
        job("label-limit", "/labels", "    label_limit: 4\n"),
        job("parse-error", "/parseerr", ""),
        job(
            "bad-name",
            "/five",
            "    metric_relabel_configs:\n      - {source_labels: [__name__], regex: five_c, target_label: __name__, replacement: 1abc}\n",
        ),
        job(
            "bad-label-name",
            "/five",
            "    metric_relabel_configs:\n      - {action: labelmap, regex: x, replacement: '${1}'}\n",
        ),
        job("emptied", "/five", "    metric_relabel_configs:\n      - {action: labeldrop, regex: '.*'}\n"),
        job("om-lenient", "/omlenient", ""),
        job("om-bad-content-type", "/ombadct", ""),
        job(
            "go-regex",
            "/routes",
            "    metric_relabel_configs:\n      - {source_labels: [route], regex: 'GET\\ (.*)', target_label: path}\n      - {source_labels: [route], regex: '(?P<m>GET) .*|(?P<m>POST) .*', target_label: method, replacement: '${m}'}\n",
        ),
        job("honor-empty", "/pushgw", "    honor_labels: true\n"),
        format!(
            "  - job_name: blackbox-url\n    metrics_path: /probe\n    params: {{module: [http_2xx]}}\n    static_configs: [{{targets: ['http://example.com/health']}}]\n    relabel_configs:\n      - {{source_labels: [__address__], target_label: __param_target}}\n      - {{source_labels: [__param_target], target_label: instance}}\n      - {{target_label: __address__, replacement: '{addr}'}}\n"
        ),
        job("body-limit", "/exact", "    body_size_limit: 1KB\n"),
        // __scrape_interval__ and __scrape_timeout__ as Go durations (1s500ms).
        job(
            "interval-labels",
            "/probe",
            "    scrape_interval: 1500ms\n    scrape_timeout: 1s\n    relabel_configs:\n      - {source_labels: [__scrape_interval__], target_label: si}\n      - {source_labels: [__scrape_timeout__], target_label: st}\n",
        ),
        format!(
            "  - job_name: target-limit\n    metrics_path: /five\n    target_limit: 1\n    static_configs: [{{targets: ['{addr}', 'localhost:{}']}}]\n",
            targets.addr.port()
        ),
    ]
    .concat();
    let jobs = 16;
    let oracle = Prometheus::start(&scrape);
    let sink = Prometheus::start("");
    let indented: String = scrape.lines().map(|l| format!("      {l}\n")).collect();
    let config = format!(
        "receivers:\n  prometheus:\n    config:\n      global: {{scrape_interval: 1s, scrape_timeout: 1s}}\n      scrape_configs:\n{indented}exporters:\n  prometheusremotewrite:\n    endpoint: {}\nservice:\n  pipelines:\n    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}\n  telemetry: {{metrics: {{address: \"{{{{TELEMETRY}}}}\"}}}}\n",
        sink.write_url()
    );
    let agent = Agent::start(&config);
    let ups = |m: &BTreeMap<LabelSet, String>| m.keys().filter(|l| l["__name__"] == "up").count();
    // 16 targets (target-limit has two); both stores settled, twice in a row.
    let mut last = None;
    wait_until("every target in both", Duration::from_secs(60), || {
        let (a, b) = (stored(&oracle), stored(&sink));
        let settled = ups(&a) == jobs + 1 && ups(&b) == jobs + 1 && a.len() == b.len();
        let same_as_before = last.as_ref() == Some(&(a.len(), b.len()));
        last = Some((a.len(), b.len()));
        (settled && same_as_before).then_some(())
    });
    // Past the first scrapes (whose scrape_series_added counts everything),
    // both stores converge: remote write lags Prometheus' own scrape on a
    // loaded machine, so the comparison is of the steady state, retried
    // until it holds or 30 s have passed (a real difference persists).
    let compare = |want: &BTreeMap<LabelSet, String>, got: &BTreeMap<LabelSet, String>| {
        let mut diffs = Vec::new();
        for (l, v) in want {
            match got.get(l) {
                None => diffs.push(format!("missing in infertel's: {l:?} = {v}")),
                Some(g) if l["__name__"] != "scrape_duration_seconds" && g != v => {
                    diffs.push(format!("value differs: {l:?}: prometheus {v}, infertel {g}"))
                }
                _ => {}
            }
        }
        for l in got.keys().filter(|l| !want.contains_key(*l)) {
            diffs.push(format!("only in infertel's: {l:?}"));
        }
        diffs
    };
    std::thread::sleep(Duration::from_secs(4));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (want, diffs) = loop {
        let (want, got) = (stored(&oracle), stored(&sink));
        let diffs = compare(&want, &got);
        if diffs.is_empty() || std::time::Instant::now() > deadline {
            break (want, diffs);
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}\nagent log:\n{}",
        diffs.len(),
        diffs.join("\n"),
        agent.proc.log_text()
    );
    // The cases are what they claim to be (the test is not passing on two
    // empty or two identical-by-accident stores).
    let up = |job: &str| -> Vec<String> {
        want.iter().filter(|(l, _)| l["__name__"] == "up" && l["job"] == job).map(|(_, v)| v.clone()).collect()
    };
    for failing in ["sample-limit", "label-limit", "parse-error", "bad-name", "bad-label-name", "body-limit"] {
        assert_eq!(up(failing), ["0"], "{failing} fails in Prometheus");
    }
    assert_eq!(up("target-limit"), ["0", "0"]);
    for ok in
        ["dup", "dup-ts", "emptied", "om-lenient", "om-bad-content-type", "go-regex", "honor-empty", "blackbox-url"]
    {
        assert_eq!(up(ok), ["1"], "{ok} succeeds in Prometheus");
    }
    let value = |name: &str, job: &str| -> Vec<String> {
        want.iter().filter(|(l, _)| l["__name__"] == name && l["job"] == job).map(|(_, v)| v.clone()).collect()
    };
    assert_eq!(value("scrape_samples_scraped", "sample-limit"), ["5"], "a failed scrape reports what it read");
    assert_eq!(value("dup_a", "dup"), ["1"], "the first of two values at one timestamp stays");
    assert_eq!(value("scrape_samples_post_metric_relabeling", "emptied"), ["0"]);
    assert!(want.keys().any(|l| l.get("path").is_some_and(|p| p == "/v1/models")));
    assert!(want.keys().any(|l| l.get("method").is_some_and(|p| p == "POST")));
    assert!(want.keys().any(|l| l["__name__"] == "pg_metric" && l["job"] == "pushed" && !l.contains_key("instance")));
    assert!(want.keys().any(|l| l["__name__"] == "badct"));
    assert!(want.keys().any(|l| l["__name__"] == "up" && l.get("si").is_some_and(|v| v == "1s500ms")));
    println!("{} series identical across the {jobs} edge-case jobs", want.len());
}
