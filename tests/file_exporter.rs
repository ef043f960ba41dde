//! End to end: the Collector's `file` exporter in the real binary, read back
//! by the official OpenTelemetry protobuf package for Python
//! (`tests/otlp_file_reader.py`: protobuf's own JSON parser, unknown fields
//! refused; the binary parser for `format: proto`). What must be in the
//! files is computed here from the real vLLM captures' text: every gauge
//! and counter sample under its exact name (`preserve_names`) with its
//! labels and value, and, through the OTel mapping, a histogram whose
//! bounds and bucket counts are the capture's cumulative buckets
//! differenced. Rotation is checked on the files left: rotated names as
//! contrib writes them, no more than `max_backups`, every line of every
//! file readable.

mod support;

use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;
use support::*;

const V17: &str = "vllm-v0.17-cncf-k8s-ai-conformance-kops.prom";
const V05: &str = "vllm-v0.5-v0engine-datadog-integrations-core.prom";

fn capture(name: &str) -> String {
    std::fs::read_to_string(shared_dir().join("fixtures/real").join(name)).expect("capture")
}

fn read(format: &str, compression: &str, files: &[std::path::PathBuf]) -> Value {
    let out = Command::new("python3")
        .arg(repo_dir().join("tests/otlp_file_reader.py"))
        .arg(format)
        .arg(compression)
        .args(files)
        .output()
        .expect("python3");
    assert!(out.status.success(), "reader: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("reader JSON")
}

/// `(name, labels, value)` of every sample of the families of `kind`.
fn samples_of(text: &str, kind: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, k)| k.trim() == kind)
        .map(|(f, _)| f)
        .collect();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let end = l.find(['{', ' '])?;
            let name = &l[..end];
            if !families.contains(&name) {
                return None;
            }
            let mut labels = BTreeMap::new();
            let rest = if l[end..].starts_with('{') {
                let close = l.rfind('}')?;
                for pair in l[end + 1..close].split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"")?;
                    labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
                }
                &l[close + 1..]
            } else {
                &l[end..]
            };
            let v: f64 = rest.split_whitespace().next()?.parse().ok()?;
            Some((name.to_string(), labels, v))
        })
        .collect()
}

fn config(dir: &std::path::Path, targets: &str) -> String {
    let d = dir.display();
    format!(
        r#"
receivers:
  prometheus:
    config:
      scrape_configs:
        - {{job_name: v17, metrics_path: /v17, scrape_interval: 1s, scrape_timeout: 900ms, static_configs: [{{targets: ['{targets}']}}]}}
        - {{job_name: v05, metrics_path: /v05, scrape_interval: 1s, scrape_timeout: 900ms, static_configs: [{{targets: ['{targets}']}}]}}
processors:
  preserve_names: {{}}
exporters:
  file/json:
    path: {d}/json/metrics.json
    flush_interval: 200ms
    rotation: {{max_megabytes: 1, max_backups: 2}}
  file/proto:
    path: {d}/proto/metrics.pb
    format: proto
    compression: zstd
    flush_interval: 200ms
service:
  pipelines:
    metrics/exact: {{receivers: [prometheus], processors: [preserve_names], exporters: [file/json]}}
    metrics/otel: {{receivers: [prometheus], exporters: [file/proto]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#
    )
}

fn files_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir).map(|r| r.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    v.sort();
    v
}

#[test]
fn the_python_sdk_reads_back_what_the_captures_hold() {
    let (v17, v05) = (capture(V17), capture(V05));
    let targets = Targets::start();
    targets.set("/v17", TEXT_004, v17.as_str());
    targets.set("/v05", TEXT_004, v05.as_str());
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(&config(dir.path(), &targets.addr.to_string()));

    // Rotation: the JSON requests of both captures pass 1 MiB within
    // seconds at 1s scrapes.
    let jdir = dir.path().join("json");
    let rotated = wait_until("a rotated JSON file", Duration::from_secs(60), || {
        let f = files_in(&jdir);
        (f.len() >= 2).then_some(f)
    });
    let names: Vec<String> = rotated.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for n in names.iter().filter(|n| *n != "metrics.json") {
        // contrib's (lumberjack's) name: metrics-2006-01-02T15-04-05.000.json
        let stamp = n.strip_prefix("metrics-").and_then(|r| r.strip_suffix(".json")).unwrap_or_else(|| panic!("{n}"));
        let b = stamp.as_bytes();
        assert!(b.len() == 23 && b[4] == b'-' && b[10] == b'T' && b[13] == b'-' && b[19] == b'.', "{n}");
    }
    for p in &rotated {
        let size = std::fs::metadata(p).unwrap().len();
        assert!(size <= 1024 * 1024, "{p:?}: {size} bytes, over max_megabytes");
    }
    // A reload that rebuilds the proto exporter continues its file: what
    // it wrote before is still there after (contrib would truncate at a
    // restart without append; a reload is not a restart).
    let pdir = dir.path().join("proto");
    let first_point = |v: &Value| {
        v["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["points"].as_array().unwrap().iter())
            .filter_map(|p| p["time"].as_u64())
            .min()
    };
    let was = read("proto", "zstd", &files_in(&pdir));
    let (before, earliest) = (was["requests"].as_u64().unwrap(), first_point(&was));
    assert!(before >= 3, "{before} proto requests before the reload");
    agent.write_config(
        &config(dir.path(), &targets.addr.to_string())
            .replace("flush_interval: 200ms\nservice", "flush_interval: 300ms\nservice"),
    );
    agent.reload();
    wait_until("the rebuilt exporter writing on", Duration::from_secs(20), || {
        let n = read("proto", "zstd", &files_in(&pdir))["requests"].as_u64().unwrap();
        (n >= before + 3).then_some(())
    });
    let now = read("proto", "zstd", &files_in(&pdir));
    assert_eq!(first_point(&now), earliest, "the first requests written before the reload are still in the file");
    // Stop the agent: shutdown flushes every buffer.
    drop(agent);
    let jfiles = files_in(&jdir);
    assert!(jfiles.len() <= 3, "max_backups 2 plus the current file: {jfiles:?}");

    let exact = read("json", "none", &jfiles);
    assert!(exact["requests"].as_u64().unwrap() >= 4, "{}", exact["requests"]);
    let metrics = exact["metrics"].as_array().unwrap();
    let found = |name: &str, kind: &str, labels: &BTreeMap<String, String>, value: f64| {
        metrics.iter().filter(|m| m["name"] == name).any(|m| {
            m["type"] == kind
                && m["points"].as_array().unwrap().iter().any(|p| {
                    p["value"].as_f64() == Some(value)
                        && labels.iter().all(|(k, v)| p["attributes"][k].as_str() == Some(v.as_str()))
                })
        })
    };
    let mut checked = 0;
    for (text, job) in [(&v17, "v17"), (&v05, "v05")] {
        for (name, labels, v) in samples_of(text, "gauge") {
            assert!(found(&name, "gauge", &labels, v), "{job}: gauge {name} {labels:?} {v} not in the JSON file");
            checked += 1;
        }
        for (name, labels, v) in samples_of(text, "counter") {
            assert!(found(&name, "sum", &labels, v), "{job}: counter {name} {labels:?} {v} not in the JSON file");
            checked += 1;
        }
    }
    assert!(checked > 60, "{checked} samples checked");
    // Counters are cumulative monotonic sums (a histogram's _sum may fall,
    // so preserve_names writes it as a non-monotonic sum).
    let counters: Vec<String> =
        samples_of(&v17, "counter").into_iter().chain(samples_of(&v05, "counter")).map(|s| s.0).collect();
    let odd: Vec<String> = metrics
        .iter()
        .filter(|m| counters.iter().any(|c| m["name"] == c.as_str()))
        .filter(|m| !(m["type"] == "sum" && m["monotonic"] == true && m["temporality"] == 2))
        .map(|m| format!("{} {} {} {}", m["name"], m["type"], m["monotonic"], m["temporality"]))
        .collect();
    assert!(odd.is_empty(), "counters are cumulative monotonic sums: {odd:?}");
    let svc: Vec<&str> = metrics.iter().filter_map(|m| m["resource"]["service.name"].as_str()).collect();
    assert!(svc.contains(&"v17") && svc.contains(&"v05"), "the job is the resource's service.name");

    // The OTel mapping, in zstd-compressed length-prefixed protobuf: the
    // histogram as the capture's buckets say.
    let otel = read("proto", "zstd", &files_in(&dir.path().join("proto")));
    let tpot = otel["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "vllm:time_per_output_token_seconds" && m["type"] == "histogram")
        .expect("the TPOT histogram in the proto file");
    let p = &tpot["points"][0];
    let buckets: Vec<(f64, f64)> = v05
        .lines()
        .filter(|l| l.starts_with("vllm:time_per_output_token_seconds_bucket{"))
        .map(|l| {
            let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() };
            (le, l.rsplit(' ').next().unwrap().parse().unwrap())
        })
        .collect();
    let bounds: Vec<f64> = buckets.iter().filter(|(le, _)| le.is_finite()).map(|(le, _)| *le).collect();
    let mut counts = Vec::new();
    let mut prev = 0.0;
    for (_, c) in &buckets {
        counts.push(c - prev);
        prev = *c;
    }
    let got_bounds: Vec<f64> = p["bounds"].as_array().unwrap().iter().map(|b| b.as_f64().unwrap()).collect();
    let got_counts: Vec<f64> = p["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().map_or_else(|| b.as_f64().unwrap(), |s| s.parse().unwrap()))
        .collect();
    assert_eq!(got_bounds, bounds);
    assert_eq!(got_counts, counts);
    let count_line = v05.lines().find(|l| l.starts_with("vllm:time_per_output_token_seconds_count")).unwrap();
    assert_eq!(
        p["count"].as_f64().or_else(|| p["count"].as_str().and_then(|s| s.parse().ok())),
        count_line.rsplit(' ').next().unwrap().parse().ok()
    );
}
