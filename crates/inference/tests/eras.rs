//! Version awareness on two-scrape fixtures per schema era, built from the
//! real captures in `shared/fixtures/real/` by advancing their counters (and,
//! for eras without a capture of their own, by applying the documented
//! renames of `shared/reference/vllm-metrics.md` to the 0.17 capture). Each
//! era must yield the derived gauges it supports, with the expected values.

mod common;

use infertel_inference::scrape::series_from_text;
use infertel_inference::{Engine, Evaluation, Settings, TargetKey};
use std::path::PathBuf;

fn shared() -> PathBuf {
    std::env::var("INFERTEL_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"))
}

fn capture(name: &str) -> String {
    std::fs::read_to_string(shared().join("fixtures/real").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Per-window increase of each counter family (by wire name prefix).
fn delta(name: &str, labels: &str) -> Option<f64> {
    let reason = |r: &str| labels.contains(&format!("finished_reason=\"{r}\""));
    Some(match name {
        "vllm:prompt_tokens_total" | "vllm:prefix_cache_queries_total" | "vllm:gpu_prefix_cache_queries_total" => {
            5_000.0
        }
        "vllm:prompt_tokens_cached_total" | "vllm:prefix_cache_hits_total" | "vllm:gpu_prefix_cache_hits_total" => {
            1_625.0
        }
        "vllm:generation_tokens_total" => 28_746.0,
        "vllm:request_success_total" if reason("stop") => 60.0,
        "vllm:request_success_total" if reason("length") => 40.0,
        "vllm:e2e_request_latency_seconds_sum" => 171.518,
        "vllm:request_decode_time_seconds_sum" => 166.469,
        "vllm:request_prefill_time_seconds_sum" => 3.798,
        "vllm:request_queue_time_seconds_sum" => 0.001,
        "vllm:iteration_tokens_total_sum" => 10_360.0,
        "vllm:iteration_tokens_total_count" => 1_000.0,
        n if n.ends_with("_count") && !n.starts_with("vllm:iteration") && !n.starts_with("http_") => 100.0,
        // Every observation of the window lands in buckets with le ≥ 2.5
        // (seconds) or the top bucket: cumulative counts grow together above it.
        n if n.ends_with("_bucket") && !n.starts_with("vllm:iteration") && !n.starts_with("http_") => {
            let le = labels.split("le=\"").nth(1)?.split('"').next()?;
            let le: f64 = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            if le >= 2.5 { 100.0 } else { 0.0 }
        }
        _ => return None,
    })
}

/// The second scrape: every counter, `_sum`, `_count` and `_bucket` advanced
/// by one window of work; gauges unchanged.
fn advance(body: &str) -> String {
    common::advance(body, &delta)
}

fn evaluate(job: &str, body: &str) -> Evaluation {
    let key = TargetKey { job: job.into(), instance: "fixture:8000".into() };
    let mut e = Engine::new(Settings::default());
    let t0 = 1_785_192_900_000;
    e.ingest(&series_from_text(body, t0, job, &key.instance).unwrap());
    let first = e.evaluate(&key, t0);
    assert!(first.schema_event.is_some(), "first scrape logs the schema");
    e.ingest(&series_from_text(&advance(body), t0 + 60_000, job, &key.instance).unwrap());
    e.evaluate(&key, t0 + 60_000)
}

fn value(ev: &Evaluation, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    ev.derived.iter().find(|d| d.name == name && label.is_none_or(|(k, v)| d.label(k) == Some(v))).map(|d| d.value)
}

fn schema(ev: &Evaluation) -> &str {
    ev.derived.iter().find(|d| d.name == "infertel_target_schema_info").and_then(|d| d.label("schema")).unwrap()
}

#[track_caller]
fn close(got: Option<f64>, want: f64) {
    let g = got.unwrap_or_else(|| panic!("missing, want {want}"));
    assert!((g - want).abs() <= 1e-9 * want.abs().max(1.0), "got {g}, want {want}");
}

/// The 0.17 capture with the renames of an older era applied.
fn v017() -> String {
    capture("vllm-v0.17-cncf-k8s-ai-conformance-kops.prom")
}

fn common_v1(ev: &Evaluation) {
    close(value(ev, "infertel_generation_tokens_per_second", None), 479.1);
    close(value(ev, "infertel_request_phase_seconds", Some(("phase", "decode"))), 1.664_69);
    close(value(ev, "infertel_request_phase_seconds", Some(("phase", "prefill"))), 0.037_98);
    close(value(ev, "infertel_request_phase_seconds", Some(("phase", "queue"))), 0.000_01);
    close(value(ev, "infertel_tokens_per_iteration", None), 10.36);
    close(value(ev, "infertel_prefix_cache_hit_ratio", None), 0.325);
    close(value(ev, "infertel_finished_ratio", Some(("finished_reason", "length"))), 0.4);
    close(value(ev, "infertel_kv_cache_usage_ratio", None), 0.0);
    assert!(value(ev, "infertel_time_to_first_token_seconds", Some(("quantile", "0.95"))).is_some());
    assert!(ev.derived.iter().all(|d| d.value.is_finite()));
}

#[test]
fn current_v1_capture_0_17() {
    let ev = evaluate("vllm", &v017());
    assert_eq!(schema(&ev), "vllm-v1-0.16+");
    common_v1(&ev);
    close(value(&ev, "infertel_prompt_tokens_cached_ratio", None), 0.325);
    assert!(value(&ev, "infertel_inter_token_latency_seconds", Some(("quantile", "0.5"))).is_some());
    assert_eq!(value(&ev, "infertel_decode_share", None).map(|x| (x * 100.0).round()), Some(97.0));
}

#[test]
fn v1_0_9_to_0_11_with_old_and_new_names() {
    let body = v017().replace("vllm:prompt_tokens_cached", "vllm:xx_removed_in_era")
        + "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"Qwen/Qwen2.5-0.5B-Instruct\"} 0.0\n";
    let ev = evaluate("vllm", &body);
    assert_eq!(schema(&ev), "vllm-v1-0.9-0.11");
    common_v1(&ev);
    // No prompt_tokens_cached before 0.16: prefix_cache_hits / prompt_tokens.
    close(value(&ev, "infertel_prompt_tokens_cached_ratio", None), 0.325);
}

#[test]
fn v1_0_8_old_names_count_blocks() {
    let body = v017()
        .replace("vllm:prompt_tokens_cached", "vllm:xx_removed_in_era")
        .replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        .replace("vllm:prefix_cache_", "vllm:gpu_prefix_cache_")
        .replace("vllm:external_gpu_prefix_cache_", "vllm:external_prefix_cache_")
        .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds");
    let ev = evaluate("vllm", &body);
    assert_eq!(schema(&ev), "vllm-v1-0.8");
    common_v1(&ev);
    // Block counts are not prompt tokens: no cached-token share is guessed.
    assert_eq!(value(&ev, "infertel_prompt_tokens_cached_ratio", None), None);
    assert!(
        value(&ev, "infertel_inter_token_latency_seconds", Some(("quantile", "0.5"))).is_some(),
        "time_per_output_token feeds ITL"
    );
}

#[test]
fn v1_0_7_without_engine_label() {
    let body = v017()
        .replace("vllm:prompt_tokens_cached", "vllm:xx_removed_in_era")
        .replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        .replace("vllm:prefix_cache_", "vllm:gpu_prefix_cache_")
        .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
        .replace("engine=\"0\",", "");
    let ev = evaluate("vllm", &body);
    assert_eq!(schema(&ev), "vllm-v1-0.7");
    common_v1(&ev);
    let d = ev.derived.iter().find(|d| d.name == "infertel_decode_share").unwrap();
    assert_eq!(d.label("engine"), None);
    assert_eq!(d.label("model_name"), Some("Qwen/Qwen2.5-0.5B-Instruct"));
}

#[test]
fn v0_engine_capture_0_5() {
    let ev = evaluate("vllm", &capture("vllm-v0.5-v0engine-datadog-integrations-core.prom"));
    assert_eq!(schema(&ev), "vllm-v0");
    close(value(&ev, "infertel_generation_tokens_per_second", None), 479.1);
    close(value(&ev, "infertel_prompt_tokens_per_second", None), 5_000.0 / 60.0);
    close(value(&ev, "infertel_request_phase_seconds", Some(("phase", "e2e"))), 1.715_18);
    // V0 creates finished_reason children lazily: the capture has only
    // `length`, so every finished request of the window ended at max_tokens.
    close(value(&ev, "infertel_finished_ratio", Some(("finished_reason", "length"))), 1.0);
    assert!(
        value(&ev, "infertel_inter_token_latency_seconds", Some(("quantile", "0.95"))).is_some(),
        "time_per_output_token feeds ITL on V0"
    );
    assert!(value(&ev, "infertel_kv_cache_usage_ratio", None).is_some(), "gpu_cache_usage_perc feeds KV usage");
    // 0.5 has no phase histograms: nothing guessed.
    assert_eq!(value(&ev, "infertel_decode_share", None), None);
}

#[test]
fn v0_capture_aibrix_reports_missing_families() {
    let body = capture("vllm-v0.7-v0engine-aibrix-docs.prom");
    let key = TargetKey { job: "vllm".into(), instance: "fixture:8000".into() };
    let mut e = Engine::new(Settings::default());
    e.ingest(&series_from_text(&body, 1_000, "vllm", "fixture:8000").unwrap());
    let ev = e.evaluate(&key, 1_000);
    let s = ev.schema_event.clone().unwrap();
    assert_eq!(s.schema.as_str(), "vllm-v0");
    let missing: Vec<&str> = s.missing.iter().map(|(f, _)| f.as_str()).collect();
    assert!(missing.contains(&"vllm:time_to_first_token_seconds"), "{missing:?}");
    assert!(
        s.missing.iter().any(|(f, d)| f == "vllm:inter_token_latency_seconds or vllm:time_per_output_token_seconds"
            && *d == "infertel_inter_token_latency_seconds")
    );
    // The V0 hit-rate gauge is -1 (unknown): no ratio is emitted.
    assert_eq!(value(&ev, "infertel_prefix_cache_hit_ratio", None), None);
}

#[test]
fn dcgm_classic_and_4_6_names_from_real_captures() {
    for (file, renamed) in
        [("dcgm-exporter-lke-rtx4000ada-k8s-pod-labels.prom", false), ("dcgm-exporter-upcloud-l40s.prom", true)]
    {
        let mut body = capture(file);
        if renamed {
            for (a, b) in [
                ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"),
                ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS"),
                ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO"),
                ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO"),
                ("Hostname=", "hostname="),
            ] {
                body = body.replace(a, b);
            }
        }
        let ev = evaluate("dcgm", &body);
        assert_eq!(schema(&ev), if renamed { "dcgm-4.6" } else { "dcgm-classic" }, "{file}");
        let vram = value(&ev, "infertel_vram_used_ratio", None).unwrap_or_else(|| panic!("{file}: {:?}", ev.skipped));
        assert!((0.0..=1.0).contains(&vram), "{file}: {vram}");
        assert_eq!(value(&ev, "infertel_memory_bound", None), Some(0.0), "{file}: idle GPU is not memory bound");
    }
}

/// 0.11.x as exposed by default: the old names hidden, the deprecated
/// `time_per_output_token_seconds` still shown beside `inter_token_latency`
/// (hidden from 0.12, removed in 0.15), no `prompt_tokens_cached` (0.16).
#[test]
fn v1_0_11_default_exposition() {
    let base = v017().replace("vllm:prompt_tokens_cached", "vllm:xx_removed_in_era");
    let tpot: String = base
        .lines()
        .filter(|l| l.contains("vllm:inter_token_latency_seconds"))
        .map(|l| format!("{}\n", l.replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")))
        .collect();
    let ev = evaluate("vllm", &(base.clone() + &tpot));
    assert_eq!(schema(&ev), "vllm-v1-0.11");
    common_v1(&ev);
    // Without the deprecated family it is 0.12–0.15.
    assert_eq!(schema(&evaluate("vllm", &base)), "vllm-v1-0.12-0.15");
}

/// V0 on 0.9.2–0.11.0 (`VLLM_USE_V1=0`): no `engine` label, none of the V0
/// markers (gone by 0.9.2) and no prefix-cache metric; V1 without an
/// `engine` label would have its prefix-cache counters.
#[test]
fn v0_engine_on_0_9_2_to_0_11() {
    let body: String = v017()
        .replace("vllm:prompt_tokens_cached", "vllm:xx_removed_in_era")
        .replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        .replace("engine=\"0\",", "")
        .lines()
        .filter(|l| !l.contains("prefix_cache_"))
        .map(|l| format!("{l}\n"))
        .collect();
    let ev = evaluate("vllm", &body);
    assert_eq!(schema(&ev), "vllm-v0-0.9.2-0.11");
    close(value(&ev, "infertel_generation_tokens_per_second", None), 479.1);
    close(value(&ev, "infertel_request_phase_seconds", Some(("phase", "decode"))), 1.664_69);
    assert_eq!(value(&ev, "infertel_prefix_cache_hit_ratio", None), None, "no prefix-cache metric in late V0");
    assert_eq!(value(&ev, "infertel_prompt_tokens_cached_ratio", None), None);
}
