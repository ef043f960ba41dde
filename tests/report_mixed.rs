//! `infertel report --replay` of a mixed fleet: one vLLM replica (the
//! article's recorded scrapes) and one SGLang server (its exposition from
//! `tests/fixtures/engines/sglang.prom`, written from SGLang's source,
//! advanced by a chosen amount every 15 s). The report gives the fleet of
//! each server and the whole fleet, verdicts per server, the instances with
//! their server, and recommendations worded in both servers' metric names.
//! Expected figures are computed here from the files.

mod support;

use std::path::Path;
use std::process::Command;
use support::*;

const T0: i64 = 1_785_192_900;
const STEPS: i64 = 4;

/// SGLang's page at step `k`: 450 generated and 1,200 prompt tokens per
/// 15 s, 10 requests whose TTFT falls in (0.2, 0.4].
fn sglang_at(body: &str, k: i64) -> String {
    let k = k as f64;
    body.lines()
        .map(|l| {
            if l.starts_with('#') || l.is_empty() {
                return format!("{l}\n");
            }
            let (series, value) = l.rsplit_once(' ').unwrap();
            let name = series.split('{').next().unwrap();
            let streaming = series.contains("is_streaming=\"true\"");
            let le = series
                .split("le=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .map(|v| if v == "+Inf" { f64::INFINITY } else { v.parse::<f64>().unwrap() });
            let d = match name {
                "sglang:generation_tokens_total" if streaming => 450.0,
                "sglang:prompt_tokens_total" if streaming => 1_200.0,
                "sglang:time_to_first_token_seconds_bucket" if streaming && le.unwrap() >= 0.4 => 10.0,
                "sglang:time_to_first_token_seconds_count" if streaming => 10.0,
                _ => 0.0,
            };
            let v: f64 = value.parse().unwrap();
            format!("{series} {}\n", v + d * k)
        })
        .collect()
}

/// The increase of `metric` (summed over its series) from the first file to
/// the last of `dir`, and the seconds between them.
fn increase(dir: &Path, metric: &str) -> (f64, f64) {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let sum = |p: &Path| -> f64 {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
            .sum()
    };
    let ts = |p: &Path| p.file_stem().unwrap().to_str().unwrap().parse::<f64>().unwrap();
    let (a, b) = (files.first().unwrap(), files.last().unwrap());
    (sum(b) - sum(a), ts(b) - ts(a))
}

#[test]
fn a_mixed_vllm_and_sglang_fleet_is_reported_per_server_and_as_a_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let vllm_src = repo_dir().join("tests/fixtures/replay/replicas/vllm/10.0.1.23_8000");
    let vllm = dir.path().join("vllm/10.0.1.23_8000");
    std::fs::create_dir_all(&vllm).unwrap();
    for e in std::fs::read_dir(&vllm_src).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, vllm.join(p.file_name().unwrap())).unwrap();
    }
    let sglang = dir.path().join("sglang/10.0.2.7_30000");
    std::fs::create_dir_all(&sglang).unwrap();
    let body = std::fs::read_to_string(repo_dir().join("tests/fixtures/engines/sglang.prom")).unwrap();
    for k in 0..=STEPS {
        std::fs::write(sglang.join(format!("{}.prom", T0 + 15 * k)), sglang_at(&body, k)).unwrap();
    }

    let out = Command::new(infertel_bin())
        .args(["report", "--replay"])
        .arg(dir.path())
        .args(["--format", "json"])
        .output()
        .expect("run infertel report");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let (vg, vs) = increase(&vllm, "vllm:generation_tokens_total");
    let (sg, ss) = increase(&sglang, "sglang:generation_tokens_total");
    let (want_v, want_s) = (vg / vs, sg / ss);
    assert!((want_s - 30.0).abs() < 1e-9, "450 tokens per 15 s: {want_s}");
    let got = |path: &[&str]| -> f64 {
        let mut v = &r;
        for p in path {
            v = &v[*p];
        }
        v.as_f64().unwrap_or_else(|| panic!("{path:?} in {}", serde_json::to_string_pretty(&r).unwrap()))
    };
    let close = |a: f64, b: f64| assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} vs {b}");
    close(got(&["servers", "vllm", "generation_tokens_per_second"]), want_v);
    close(got(&["servers", "sglang", "generation_tokens_per_second"]), want_s);
    close(got(&["measurements", "generation_tokens_per_second"]), want_v + want_s);
    close(got(&["servers", "sglang", "prompt_tokens_per_second"]), 80.0);
    // SGLang's TTFT: every request of the window in (0.2, 0.4]: p95 = 0.39.
    close(got(&["servers", "sglang", "ttft_seconds_p95"]), 0.39);

    let servers: Vec<(String, Option<String>)> = r["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["job"].as_str().unwrap().to_string(), i["inference_server"].as_str().map(str::to_string)))
        .collect();
    assert!(servers.contains(&("sglang".into(), Some("sglang".into()))), "{servers:?}");
    assert!(servers.contains(&("vllm".into(), Some("vllm".into()))), "{servers:?}");
    // vLLM and SGLang bucket TTFT differently: the whole fleet has no TTFT
    // quantile (summing them bucket by bucket would be meaningless), and
    // says why; each server's fleet has its own.
    let fleet_ttft = r["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["objective"] == "ttft_p95" && v["scope"] == "fleet")
        .unwrap();
    assert_eq!(fleet_ttft["verdict"], "NO DATA", "{fleet_ttft}");
    assert!(fleet_ttft["note"].as_str().unwrap().contains("different buckets"), "{fleet_ttft}");
    assert!(r["measurements"].get("ttft_seconds_p95").is_none(), "no fleet TTFT p95");
    // Ratios of one server's inputs over both servers' are not made: SGLang
    // has no prefill/decode histograms and no finished_reason, so the whole
    // fleet has no decode share and no length share, and the length advice
    // names the server it is about.
    for k in ["decode_share", "finished_ratio_length", "request_prefill_seconds_mean"] {
        assert!(r["measurements"].get(k).is_none(), "{k} in the fleet: {}", r["measurements"]);
    }
    assert!(r["servers"]["vllm"].get("decode_share").is_some());
    let length =
        r["recommendations"].as_array().unwrap().iter().find(|x| x["id"] == "raise_max_tokens").expect("length advice");
    assert!(length["text"].as_str().unwrap().starts_with("vLLM: "), "{length}");
    let scopes: Vec<&str> = r["verdicts"].as_array().unwrap().iter().map(|v| v["scope"].as_str().unwrap()).collect();
    for s in ["fleet", "fleet sglang", "fleet vllm"] {
        assert!(scopes.contains(&s), "{scopes:?}");
    }
    let recs: Vec<&str> =
        r["recommendations"].as_array().unwrap().iter().map(|x| x["text"].as_str().unwrap()).collect();
    let scale = recs.iter().find(|t| t.contains("never on DCGM_FI_DEV_GPU_UTIL")).expect("the scaling advice");
    assert!(
        scale.contains("vllm:num_requests_waiting (vLLM) / sglang:num_queue_reqs (SGLang)")
            && scale.contains("vllm:kv_cache_usage_perc (vLLM) / sglang:token_usage (SGLang)"),
        "{scale}"
    );

    // The table shows the servers' rows.
    let out = Command::new(infertel_bin()).args(["report", "--replay"]).arg(dir.path()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("servers:") && text.contains("sglang") && text.contains("[sglang]"), "{text}");
    eprintln!("{text}");
}
