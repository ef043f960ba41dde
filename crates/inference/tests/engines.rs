//! The other inference servers recognised from what they expose: each
//! fixture of `tests/fixtures/engines/` (written from the engine's own
//! source, commits in `docs/engines/`) is scraped through the engine and
//! must give its schema, its `inference_server`, a schema event that names
//! no missing family (a faithful exposition misses nothing a dashboard
//! needs), and one with the families a dashboard would miss when they are
//! taken away. A Dynamo worker passing vLLM's metrics through is vLLM.

use infertel_inference::scrape::series_from_text;
use infertel_inference::{Engine, Evaluation, Settings, TargetKey};
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/engines").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn first_evaluation(job: &str, body: &str) -> Evaluation {
    let key = TargetKey { job: job.into(), instance: "engine:8000".into() };
    let mut e = Engine::new(Settings::default());
    let t0 = 1_785_192_900_000;
    e.ingest(&series_from_text(body, t0, job, &key.instance).unwrap());
    e.evaluate(&key, t0)
}

fn schema_info(ev: &Evaluation) -> (String, Option<String>) {
    let d = ev
        .derived
        .iter()
        .find(|d| d.name == "infertel_target_schema_info")
        .unwrap_or_else(|| panic!("no schema info in {:?}", ev.derived));
    (d.label("schema").unwrap_or_default().to_string(), d.label("inference_server").map(str::to_string))
}

/// The body without the families whose name starts with one of `drop`.
fn without(body: &str, drop: &[&str]) -> String {
    body.lines()
        .filter(|l| {
            let name = l.trim_start_matches("# TYPE ").trim_start_matches("# HELP ");
            !drop.iter().any(|d| name.starts_with(d))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

const CASES: &[(&str, &str, &str)] = &[
    ("sglang.prom", "sglang-0.5", "sglang"),
    ("tgi.prom", "tgi", "tgi"),
    ("llamacpp.prom", "llamacpp", "llamacpp"),
    ("trtllm-serve.prom", "trtllm-serve", "trtllm"),
    ("triton-trtllm.prom", "triton-trtllm", "triton"),
    ("dynamo-frontend.prom", "dynamo-frontend", "dynamo"),
];

#[test]
fn every_engine_is_recognised_from_its_own_exposition() {
    for (file, schema, server) in CASES {
        let body = fixture(file);
        let ev = first_evaluation("engine", &body);
        assert_eq!(schema_info(&ev), (schema.to_string(), Some(server.to_string())), "{file}");
        let event = ev.schema_event.as_ref().unwrap_or_else(|| panic!("{file}: the schema is logged once"));
        assert_eq!(event.schema.as_str(), *schema);
        assert!(event.missing.is_empty(), "{file}: a faithful exposition misses nothing: {:?}", event.missing);
        assert!(!event.schema.derives(), "{file}: derivations for {server} are not built yet");
        // Nothing but the schema is derived from these (yet).
        assert_eq!(ev.derived.len(), 1, "{file}: {:?}", ev.derived);
    }
}

#[test]
fn a_missing_family_is_named_with_the_dashboard_it_empties() {
    let body = without(&fixture("sglang.prom"), &["sglang:time_to_first_token_seconds", "sglang:cache_hit_rate"]);
    let ev = first_evaluation("sglang", &body);
    let missing = &ev.schema_event.unwrap().missing;
    assert!(
        missing.contains(&("sglang:time_to_first_token_seconds".to_string(), "infertel_time_to_first_token_seconds")),
        "{missing:?}"
    );
    assert!(missing.contains(&("sglang:cache_hit_rate".to_string(), "infertel_prefix_cache_hit_ratio")), "{missing:?}");
    assert_eq!(missing.len(), 2, "{missing:?}");
}

#[test]
fn sglang_eras_follow_its_releases() {
    let body = fixture("sglang.prom");
    // 0.4.5 to 0.5.1: the ITL histogram, no queue_time_seconds (0.5.4).
    let v04 = without(&body, &["sglang:queue_time_seconds"]);
    assert_eq!(schema_info(&first_evaluation("s", &v04)).0, "sglang-0.4");
    // 0.3.5.post2 to 0.4.3: time_per_output_token_seconds instead.
    let v03 = without(&v04, &["sglang:inter_token_latency_seconds"])
        .replace("sglang:request_time_per_output_token_seconds", "sglang:time_per_output_token_seconds");
    let ev = first_evaluation("s", &v03);
    assert_eq!(schema_info(&ev).0, "sglang-0.3");
    assert!(ev.schema_event.unwrap().missing.is_empty(), "TPOT feeds ITL in 0.3");
}

#[test]
fn prefixes_decide_between_look_alikes() {
    // Dynamo's trtllm: re-export (dynamo#3676, later trtllm_).
    let colon = fixture("trtllm-serve.prom").replace("trtllm_", "trtllm:");
    let ev = first_evaluation("t", &colon);
    assert_eq!(schema_info(&ev), ("trtllm-dynamo".into(), Some("trtllm".into())));
    assert!(ev.schema_event.unwrap().missing.is_empty(), "the trtllm: names are known too");
    // Triton serving another backend: nv_inference_* only.
    let plain = without(&fixture("triton-trtllm.prom"), &["nv_trt_llm_", "nv_llm_"]);
    assert_eq!(schema_info(&first_evaluation("tr", &plain)).0, "triton");
    // A Dynamo worker: its runtime's families with vLLM's passed through is
    // vLLM (whose series are derived); alone it is a Dynamo worker.
    let worker = "# TYPE dynamo_component_requests_total counter\n\
        dynamo_component_requests_total{dynamo_namespace=\"ns\",dynamo_component=\"backend\",dynamo_endpoint=\"generate\"} 12\n\
        # TYPE dynamo_component_gpu_cache_usage_percent gauge\n\
        dynamo_component_gpu_cache_usage_percent{model=\"m\",dynamo_component=\"backend\",dp_rank=\"0\"} 0.25\n";
    assert_eq!(schema_info(&first_evaluation("w", worker)), ("dynamo-worker".into(), Some("dynamo".into())));
    let with_vllm = format!(
        "{worker}# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} 1\n\
         # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} 0.25\n"
    );
    let (schema, server) = schema_info(&first_evaluation("w", &with_vllm));
    assert!(schema.starts_with("vllm-v1"), "{schema}");
    assert_eq!(server.as_deref(), Some("vllm"));
}
