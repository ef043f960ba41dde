//! The other inference servers recognised from what they expose: each
//! fixture of `tests/fixtures/engines/` (written from the engine's own
//! source, commits in `docs/engines/`) is scraped through the engine and
//! must give its schema, its `inference_server`, a schema event that names
//! no missing family (a faithful exposition misses nothing a dashboard
//! needs), and one with the families a dashboard would miss when they are
//! taken away. A Dynamo worker passing vLLM's metrics through is vLLM.
//!
//! SGLang, trtllm-serve, Dynamo's frontend, TGI, llama.cpp and Triton go
//! through vLLM's derivations for what they expose: a second scrape a minute later, each counter and histogram
//! advanced by a chosen amount, must give the rates, ratios and quantiles
//! worked out by hand below.

mod common;

use common::advance;
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

/// (fixture, schema, inference_server).
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
        // Every series derived from a server names it (a node's do not).
        for d in ev.derived.iter().filter(|d| d.label("node").is_none()) {
            assert_eq!(d.label("inference_server"), Some(*server), "{file}: {d:?}");
        }
    }
}

fn le(labels: &str) -> f64 {
    let v = labels.split("le=\"").nth(1).and_then(|r| r.split('"').next()).unwrap();
    if v == "+Inf" { f64::INFINITY } else { v.parse().unwrap() }
}

/// `n` observations landing in the bucket whose upper bound is `upper`.
fn into_bucket(labels: &str, upper: f64, n: f64) -> f64 {
    if le(labels) >= upper { n } else { 0.0 }
}

fn two_scrapes(job: &str, body: &str, delta: &dyn Fn(&str, &str) -> Option<f64>) -> Evaluation {
    let key = TargetKey { job: job.into(), instance: "engine:8000".into() };
    let mut e = Engine::new(Settings::default());
    let t0 = 1_785_192_900_000;
    e.ingest(&series_from_text(body, t0, job, &key.instance).unwrap());
    e.evaluate(&key, t0);
    e.ingest(&series_from_text(&advance(body, delta), t0 + 60_000, job, &key.instance).unwrap());
    e.evaluate(&key, t0 + 60_000)
}

fn value(ev: &Evaluation, name: &str, with: &[(&str, &str)]) -> f64 {
    let hits: Vec<_> =
        ev.derived.iter().filter(|d| d.name == name && with.iter().all(|(k, v)| d.label(k) == Some(*v))).collect();
    assert_eq!(
        hits.len(),
        1,
        "{name} {with:?}: {hits:?}\nall: {:?}",
        ev.derived.iter().map(|d| d.name).collect::<Vec<_>>()
    );
    hits[0].value
}

fn close(got: f64, want: f64) {
    assert!((got - want).abs() <= 1e-9 * want.abs().max(1.0), "got {got}, want {want}");
}

#[test]
fn sglang_is_derived_as_vllm_is() {
    // One minute: 6,000 prompt tokens (1,500 of them cached), 1,800
    // generated; 100 requests whose TTFT falls in (0.2, 0.4], e2e in
    // (2, 4] summing 300 s, queue time summing 5 s; 1,800 inter-token gaps
    // in (0.015, 0.02].
    let ev = two_scrapes("sglang", &fixture("sglang.prom"), &|name, labels| {
        let streaming = labels.contains("is_streaming=\"true\"");
        Some(match name {
            "sglang:prompt_tokens_total" if streaming => 6_000.0,
            "sglang:generation_tokens_total" => {
                if streaming {
                    1_200.0
                } else {
                    600.0
                }
            }
            "sglang:cached_tokens_total" => 1_500.0,
            "sglang:time_to_first_token_seconds_bucket" if streaming => into_bucket(labels, 0.4, 100.0),
            "sglang:time_to_first_token_seconds_count" if streaming => 100.0,
            "sglang:e2e_request_latency_seconds_bucket" if streaming => into_bucket(labels, 4.0, 100.0),
            "sglang:e2e_request_latency_seconds_count" if streaming => 100.0,
            "sglang:e2e_request_latency_seconds_sum" if streaming => 300.0,
            "sglang:queue_time_seconds_count" => 100.0,
            "sglang:queue_time_seconds_sum" => 5.0,
            "sglang:inter_token_latency_seconds_bucket" => into_bucket(labels, 0.02, 1_800.0),
            "sglang:inter_token_latency_seconds_count" => 1_800.0,
            _ => return None,
        })
    });
    let m = [("model_name", "Qwen/Qwen3-8B"), ("inference_server", "sglang")];
    close(value(&ev, "infertel_prompt_tokens_per_second", &m), 100.0);
    close(value(&ev, "infertel_generation_tokens_per_second", &m), 30.0);
    close(value(&ev, "infertel_prompt_tokens_cached_ratio", &m), 0.25);
    let q = |q: &'static str| [m[0], m[1], ("quantile", q)];
    // histogram_quantile: linear inside the bucket.
    close(value(&ev, "infertel_time_to_first_token_seconds", &q("0.5")), 0.3);
    close(value(&ev, "infertel_time_to_first_token_seconds", &q("0.95")), 0.39);
    close(value(&ev, "infertel_e2e_latency_seconds", &q("0.5")), 3.0);
    close(value(&ev, "infertel_inter_token_latency_seconds", &q("0.5")), 0.0175);
    let phase = |p: &'static str| [m[0], m[1], ("phase", p)];
    close(value(&ev, "infertel_request_phase_seconds", &phase("queue")), 0.05);
    close(value(&ev, "infertel_request_phase_seconds", &phase("e2e")), 3.0);
    // The KV pool share is SGLang's token_usage gauge as it stands.
    close(value(&ev, "infertel_kv_cache_usage_ratio", &m), 0.07);
    // No counters of prefix-cache hits: its cache_hit_rate gauge is one
    // prefill batch's ratio, so nothing is made of it.
    assert!(!ev.derived.iter().any(|d| d.name == "infertel_prefix_cache_hit_ratio"));
}

#[test]
fn trtllm_serve_and_dynamo_frontend_are_derived_as_vllm_is() {
    // trtllm-serve: 50 requests (40 stop, 10 length) with TTFT in
    // (0.1, 0.25]; 1,200 prompt and 3,000 generated tokens; 30 blocks
    // reused and 10 missed.
    let ev = two_scrapes("trtllm", &fixture("trtllm-serve.prom"), &|name, labels| {
        Some(match name {
            "trtllm_prompt_tokens_total" => 1_200.0,
            "trtllm_generation_tokens_total" => 3_000.0,
            "trtllm_kv_cache_reused_blocks_total" => 30.0,
            "trtllm_kv_cache_missed_blocks_total" => 10.0,
            "trtllm_request_success_total" if labels.contains("\"stop\"") => 40.0,
            "trtllm_request_success_total" if labels.contains("\"length\"") => 10.0,
            "trtllm_time_to_first_token_seconds_bucket" => into_bucket(labels, 0.25, 50.0),
            "trtllm_time_to_first_token_seconds_count" => 50.0,
            _ => return None,
        })
    });
    let m = [("model_name", "Qwen3-8B"), ("inference_server", "trtllm")];
    close(value(&ev, "infertel_prompt_tokens_per_second", &m), 20.0);
    close(value(&ev, "infertel_generation_tokens_per_second", &m), 50.0);
    close(value(&ev, "infertel_prefix_cache_hit_ratio", &m), 0.75);
    close(value(&ev, "infertel_finished_ratio", &[m[0], m[1], ("finished_reason", "length")]), 0.2);
    close(value(&ev, "infertel_time_to_first_token_seconds", &[m[0], m[1], ("quantile", "0.5")]), 0.175);
    close(value(&ev, "infertel_kv_cache_usage_ratio", &m), 0.16298342541436464);

    // Dynamo's frontend: 2,400 output tokens; 20 first tokens in (0.1, 0.22].
    let ev = two_scrapes("dynamo", &fixture("dynamo-frontend.prom"), &|name, labels| {
        Some(match name {
            "dynamo_frontend_output_tokens_total" => 2_400.0,
            "dynamo_frontend_time_to_first_token_seconds_bucket" => into_bucket(labels, 0.22, 20.0),
            "dynamo_frontend_time_to_first_token_seconds_count" => 20.0,
            _ => return None,
        })
    });
    let m = [("model", "Qwen/Qwen3-32B"), ("inference_server", "dynamo")];
    close(value(&ev, "infertel_generation_tokens_per_second", &m), 40.0);
    close(value(&ev, "infertel_time_to_first_token_seconds", &[m[0], m[1], ("quantile", "0.5")]), 0.16);
}

#[test]
fn a_missing_family_is_named_with_the_dashboard_it_empties() {
    let body = without(&fixture("sglang.prom"), &["sglang:time_to_first_token_seconds", "sglang:cached_tokens_total"]);
    let ev = first_evaluation("sglang", &body);
    let missing = &ev.schema_event.unwrap().missing;
    assert!(
        missing.contains(&("sglang:time_to_first_token_seconds".to_string(), "infertel_time_to_first_token_seconds")),
        "{missing:?}"
    );
    assert!(
        missing.contains(&("sglang:cached_tokens_total".to_string(), "infertel_prompt_tokens_cached_ratio")),
        "{missing:?}"
    );
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

#[test]
fn tgi_and_llamacpp_give_what_they_expose_and_say_what_differs() {
    // TGI, one minute: 100 requests of 90 prompt tokens and 24 generated on
    // average (its token counts are histograms of finished requests),
    // queued 2 s and lasting 700 s in all, time per token in
    // (0.01946.., 0.02919..].
    let ev = two_scrapes("tgi", &fixture("tgi.prom"), &|name, labels| {
        Some(match name {
            "tgi_request_input_length_sum" => 9_000.0,
            "tgi_request_input_length_count" => 100.0,
            "tgi_request_generated_tokens_sum" => 2_400.0,
            "tgi_request_generated_tokens_count" => 100.0,
            "tgi_request_queue_duration_sum" => 2.0,
            "tgi_request_queue_duration_count" => 100.0,
            "tgi_request_duration_sum" => 700.0,
            "tgi_request_duration_count" => 100.0,
            "tgi_request_mean_time_per_token_duration_bucket" => into_bucket(labels, 0.029, 100.0),
            "tgi_request_mean_time_per_token_duration_count" => 100.0,
            _ => return None,
        })
    });
    let m = [("job", "tgi"), ("inference_server", "tgi")];
    close(value(&ev, "infertel_prompt_tokens_per_second", &m), 150.0);
    close(value(&ev, "infertel_generation_tokens_per_second", &m), 40.0);
    close(value(&ev, "infertel_request_phase_seconds", &[m[0], m[1], ("phase", "queue")]), 0.02);
    close(value(&ev, "infertel_request_phase_seconds", &[m[0], m[1], ("phase", "e2e")]), 7.0);
    // The time per token includes prefill: labelled approximate.
    let itl = value(
        &ev,
        "infertel_inter_token_latency_seconds",
        &[m[0], m[1], ("quantile", "0.5"), ("source", "approximate")],
    );
    close(itl, (0.01946195068359375 + 0.029192926025390625) / 2.0);
    // No TTFT histogram, no KV usage: nothing emitted, and the schema says why.
    assert!(!ev.derived.iter().any(|d| d.name == "infertel_time_to_first_token_seconds"));
    assert!(!ev.derived.iter().any(|d| d.name == "infertel_kv_cache_usage_ratio"));
    let why = infertel_inference::schema::Schema::Tgi.not_derived();
    assert!(
        why.iter().any(|(n, r)| *n == "infertel_time_to_first_token_seconds" && r.contains("no time-to-first-token"))
    );

    // llama.cpp: 3,000 prompt and 1,200 predicted tokens in the minute.
    let ev = two_scrapes("llamacpp", &fixture("llamacpp.prom"), &|name, _| {
        Some(match name {
            "llamacpp:prompt_tokens_total" => 3_000.0,
            "llamacpp:tokens_predicted_total" => 1_200.0,
            _ => return None,
        })
    });
    let m = [("job", "llamacpp"), ("inference_server", "llamacpp")];
    close(value(&ev, "infertel_prompt_tokens_per_second", &m), 50.0);
    close(value(&ev, "infertel_generation_tokens_per_second", &m), 20.0);
    // Two requests deferred: a queue, so the scale signal is decided.
    assert!(
        ev.derived.iter().any(|d| d.name == "infertel_scale_signal" && d.label("inference_server") == Some("llamacpp"))
    );
    assert!(!ev.derived.iter().any(|d| d.name == "infertel_e2e_latency_seconds"));
}

#[test]
fn triton_reads_its_units_and_labels_the_first_chunk() {
    // One minute on the ensemble: 50 requests of 2.5 s (microseconds
    // counted), queued 2 ms each, first responses in (100, 500] ms; the
    // engine model generated 6,000 tokens.
    let ev = two_scrapes("triton", &fixture("triton-trtllm.prom"), &|name, labels| {
        let ensemble = labels.contains("model=\"ensemble\"");
        let engine = labels.contains("model=\"tensorrt_llm\"");
        Some(match name {
            "nv_inference_request_success" if ensemble => 50.0,
            "nv_inference_request_duration_us" if ensemble => 50.0 * 2.5e6,
            "nv_inference_queue_duration_us" if ensemble => 50.0 * 2_000.0,
            "nv_inference_first_response_histogram_ms_bucket" if ensemble => into_bucket(labels, 500.0, 50.0),
            "nv_inference_first_response_histogram_ms_count" if ensemble => 50.0,
            "nv_llm_output_token_len_sum" if engine => 6_000.0,
            "nv_llm_output_token_len_count" if engine => 50.0,
            _ => return None,
        })
    });
    let e = [("model", "ensemble"), ("inference_server", "triton")];
    close(value(&ev, "infertel_request_phase_seconds", &[e[0], e[1], ("phase", "e2e")]), 2.5);
    close(value(&ev, "infertel_request_phase_seconds", &[e[0], e[1], ("phase", "queue")]), 0.002);
    // Milliseconds read as seconds, and said to be the first chunk.
    let ttft = value(
        &ev,
        "infertel_time_to_first_token_seconds",
        &[e[0], e[1], ("quantile", "0.5"), ("source", "first_chunk")],
    );
    close(ttft, 0.3);
    let m = [("model", "tensorrt_llm"), ("inference_server", "triton")];
    close(value(&ev, "infertel_generation_tokens_per_second", &m), 100.0);
    // The block pool's used fraction, as the backend reports it.
    close(value(&ev, "infertel_kv_cache_usage_ratio", &m), 0.073569);
}

#[test]
fn a_dynamo_worker_gives_its_kv_usage_as_the_mean_of_its_ranks() {
    let page = |u0: f64, u1: f64| {
        format!(
            "# TYPE dynamo_component_requests_total counter\n\
             dynamo_component_requests_total{{dynamo_namespace=\"ns\",dynamo_component=\"backend\",dynamo_endpoint=\"generate\"}} 12\n\
             # TYPE dynamo_component_gpu_cache_usage_percent gauge\n\
             dynamo_component_gpu_cache_usage_percent{{model=\"m\",dynamo_component=\"backend\",dp_rank=\"0\"}} {u0}\n\
             dynamo_component_gpu_cache_usage_percent{{model=\"m\",dynamo_component=\"backend\",dp_rank=\"1\"}} {u1}\n"
        )
    };
    let key = TargetKey { job: "worker".into(), instance: "w:8081".into() };
    let mut e = Engine::new(Settings::default());
    let t0 = 1_785_192_900_000;
    e.ingest(&series_from_text(&page(0.2, 0.4), t0, "worker", &key.instance).unwrap());
    e.evaluate(&key, t0);
    e.ingest(&series_from_text(&page(0.3, 0.5), t0 + 15_000, "worker", &key.instance).unwrap());
    let ev = e.evaluate(&key, t0 + 15_000);
    // Two data-parallel ranks at 30% and 50%: the worker's pool is 40% used
    // (a sum would say 80%).
    close(value(&ev, "infertel_kv_cache_usage_ratio", &[("model", "m"), ("inference_server", "dynamo")]), 0.4);
    assert!(!ev.derived.iter().any(|d| d.name == "infertel_time_to_first_token_seconds"));
}

#[test]
fn an_sglang_engine_joins_its_gpu_for_tokens_per_watt() {
    // SGLang on node-1 generating 1,200 tokens/s; the node's one GPU draws
    // 240 W: 5 tokens per joule. (The join takes SGLang targets as vLLM's.)
    let key = TargetKey { job: "sglang".into(), instance: "node-1:30000".into() };
    let dcgm = TargetKey { job: "dcgm".into(), instance: "node-1:9400".into() };
    let mut e = Engine::new(Settings::default());
    let t0 = 1_785_192_900_000;
    let mut last = None;
    for k in 0..6i64 {
        let t = t0 + k * 15_000;
        let s = format!(
            "# TYPE sglang:generation_tokens_total counter\n\
             sglang:generation_tokens_total{{engine_type=\"unified\",is_streaming=\"true\",model_name=\"m\"}} {}\n\
             # TYPE sglang:token_usage gauge\n\
             sglang:token_usage{{engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"}} 0.2\n",
            1.0e6 + 1_200.0 * 15.0 * k as f64
        );
        e.ingest(&series_from_text(&s, t, "sglang", &key.instance).unwrap());
        let g = format!(
            "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n\
             DCGM_FI_DEV_POWER_USAGE{{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"node-1\"}} 240\n\
             # TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n\
             DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"node-1\"}} {}\n",
            5.0e9 + 240.0 * 15_000.0 * k as f64
        );
        e.ingest(&series_from_text(&g, t + 2, "dcgm", &dcgm.instance).unwrap());
        e.evaluate(&dcgm, t + 2);
        last = Some(e.evaluate(&key, t + 2));
    }
    let ev = last.unwrap();
    // The node join: one figure per node, over every server on it, so it
    // names no server.
    close(value(&ev, "infertel_tokens_per_watt", &[("node", "node-1")]), 5.0);
    let tpw = ev.derived.iter().find(|d| d.name == "infertel_tokens_per_watt").unwrap();
    assert_eq!(tpw.label("inference_server"), None, "{tpw:?}");
}
