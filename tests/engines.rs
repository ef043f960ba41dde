//! The other inference servers on the real binary: each engine's exposition
//! (the fixtures of `tests/fixtures/engines/`, written from the engine's
//! source) is scraped by the agent, and a real Prometheus stores
//! `infertel_target_schema_info` with the schema and `inference_server` of
//! each target, and the series derived from SGLang, trtllm-serve, Dynamo's
//! frontend, TGI, llama.cpp and Triton with their `inference_server`; the agent logs once what
//! each target is. The same pages are scraped by Prometheus itself, which
//! must take them without error.

mod support;

use std::time::Duration;
use support::*;

const ENGINES: &[(&str, &str, &str, &str)] = &[
    ("sglang", "sglang.prom", "sglang-0.5", "sglang"),
    ("tgi", "tgi.prom", "tgi", "tgi"),
    ("llamacpp", "llamacpp.prom", "llamacpp", "llamacpp"),
    ("trtllm", "trtllm-serve.prom", "trtllm-serve", "trtllm"),
    ("triton", "triton-trtllm.prom", "triton-trtllm", "triton"),
    ("dynamo", "dynamo-frontend.prom", "dynamo-frontend", "dynamo"),
];

/// The agent scraping `jobs` (scrape_configs entries) every second through
/// the inference processor into Prometheus at `write_url`.
fn agent_config(jobs: &str, write_url: &str) -> String {
    format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 1s}}
      scrape_configs:
{jobs}
processors:
  inference:
    window: 5s
exporters:
  prometheusremotewrite:
    endpoint: {write_url}
service:
  pipelines:
    metrics: {{receivers: [prometheus], processors: [inference], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#
    )
}

#[test]
fn every_engine_is_reported_with_its_schema_in_prometheus() {
    let targets = Targets::start();
    let mut jobs = String::new();
    let mut direct = String::new();
    for (job, file, _, _) in ENGINES {
        let body = std::fs::read_to_string(repo_dir().join("tests/fixtures/engines").join(file)).expect("fixture");
        targets.set(&format!("/{job}"), TEXT_004, body);
        jobs.push_str(&format!(
            "        - job_name: {job}\n          metrics_path: /{job}\n          static_configs: [{{targets: ['{}']}}]\n",
            targets.addr
        ));
        // Prometheus scrapes the same pages itself, under other job names.
        direct.push_str(&format!(
            "  - job_name: direct_{job}\n    metrics_path: /{job}\n    static_configs: [{{targets: ['{}']}}]\n",
            targets.addr
        ));
    }
    let prom = Prometheus::start(&direct);
    let cfg = agent_config(&jobs, &prom.write_url());
    let agent = Agent::start(&cfg);
    for (job, file, schema, server) in ENGINES {
        let q = format!("infertel_target_schema_info{{job=\"{job}\"}}");
        let got = wait_until(&q, Duration::from_secs(30), || {
            let r = prom.query(&q);
            (!r.is_empty()).then_some(r)
        });
        assert_eq!(got.len(), 1, "{file}: {got:?}");
        let l = &got[0].0;
        assert_eq!(l.get("schema").map(String::as_str), Some(*schema), "{file}: {l:?}");
        assert_eq!(l.get("inference_server").map(String::as_str), Some(*server), "{file}: {l:?}");
        assert_eq!(got[0].1, "1");
        // Prometheus' own scrape of the page takes every sample.
        let up = wait_until("prometheus' own scrape", Duration::from_secs(30), || {
            prom.query(&format!("up{{job=\"direct_{job}\"}}")).into_iter().next().map(|(_, v)| v)
        });
        assert_eq!(up, "1", "{file}: Prometheus scraped it");
        let n = prom.query(&format!("scrape_samples_post_metric_relabeling{{job=\"direct_{job}\"}}"));
        assert!(n.first().is_some_and(|(_, v)| parse_prom_float(v) > 0.0), "{file}: {n:?}");
    }
    // SGLang, trtllm-serve, Dynamo's frontend, TGI, llama.cpp and Triton are
    // derived as vLLM is, for what they expose; the pages do not change, so the
    // gauges are what they say and the rates 0.
    for (q, want) in [
        (r#"infertel_kv_cache_usage_ratio{job="sglang",inference_server="sglang",model_name="Qwen/Qwen3-8B"}"#, 0.07),
        (
            r#"infertel_kv_cache_usage_ratio{job="trtllm",inference_server="trtllm",model_name="Qwen3-8B"}"#,
            0.16298342541436464,
        ),
        (
            r#"infertel_generation_tokens_per_second{job="dynamo",inference_server="dynamo",model="Qwen/Qwen3-32B"}"#,
            0.0,
        ),
        (r#"infertel_generation_tokens_per_second{job="llamacpp",inference_server="llamacpp"}"#, 0.0),
        (r#"infertel_generation_tokens_per_second{job="tgi",inference_server="tgi"}"#, 0.0),
        (r#"infertel_kv_cache_usage_ratio{job="triton",inference_server="triton",model="tensorrt_llm"}"#, 0.073569),
    ] {
        let got = wait_until(q, Duration::from_secs(30), || {
            let r = prom.query(q);
            (!r.is_empty()).then_some(r)
        });
        assert!((parse_prom_float(&got[0].1) - want).abs() < 1e-12, "{q}: {got:?}");
    }
    // The derived-series dashboard's queries run in this Prometheus (a bad
    // query is a 400) and, for every server, the panels on gauges that do
    // not need traffic show it.
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_dir().join("deploy/dashboards/grafana/infertel-servers.json")).unwrap(),
    )
    .unwrap();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let q = t["expr"].as_str().unwrap().replace("$inference_server", ".*").replace("$job", ".*");
            let got = prom.query(&q);
            if p["title"] == "What each target speaks" {
                let servers: std::collections::BTreeSet<&str> =
                    got.iter().filter_map(|(l, _)| l.get("inference_server").map(String::as_str)).collect();
                assert_eq!(servers.len(), 6, "{q}: {servers:?}");
            }
            if p["title"] == "Generated tokens per second" {
                let servers: std::collections::BTreeSet<&str> =
                    got.iter().filter_map(|(l, _)| l.get("inference_server").map(String::as_str)).collect();
                assert_eq!(servers, ["dynamo", "llamacpp", "sglang", "tgi", "triton", "trtllm"].into(), "{q}");
            }
        }
    }
    let log = agent.proc.log_text();
    for schema in ["sglang-0.5", "trtllm-serve", "dynamo-frontend", "tgi", "llamacpp", "triton-trtllm"] {
        assert!(log.contains(&format!("target speaks {schema}")), "{schema} logged:\n{log}");
    }
    // What a server cannot give is said once, with the reason.
    assert!(
        log.contains(
            "infertel_time_to_first_token_seconds is not derived for this target: TGI has no time-to-first-token histogram"
        ),
        "{log}"
    );
    assert!(!log.contains("a dashboard on"), "faithful expositions miss nothing:\n{log}");
}

/// `infertel simulate --engine X` on free ports: (process, address).
fn simulate(engine: &str) -> (Proc, String) {
    let (port, dcgm) = (free_port(), free_port());
    let dir = std::env::temp_dir();
    let mut cmd = std::process::Command::new(infertel_bin());
    cmd.args(["simulate", "--engine", engine, "--output-tokens", "40", "--concurrency", "12"]).args([
        "--vllm",
        &format!("127.0.0.1:{port}"),
        "--dcgm",
        &format!("127.0.0.1:{dcgm}"),
    ]);
    let log = dir.join(format!("infertel-sim-{engine}-{port}.log"));
    let p = Proc::spawn(&format!("simulate {engine}"), &mut cmd, log);
    let addr = format!("127.0.0.1:{port}");
    wait_until("the simulator", Duration::from_secs(20), || {
        matches!(http_get(&format!("http://{addr}/metrics")), Ok((200, _))).then_some(())
    });
    (p, addr)
}

#[test]
fn the_simulator_speaks_every_engine_to_prometheus_and_to_the_agent() {
    let engines = [
        ("sglang", "sglang-0.5"),
        ("tgi", "tgi"),
        ("llamacpp", "llamacpp"),
        ("trtllm", "trtllm-serve"),
        ("dynamo", "dynamo-frontend"),
    ];
    let sims: Vec<(Proc, String)> = engines.iter().map(|(e, _)| simulate(e)).collect();
    let mut direct = String::new();
    let mut jobs = String::new();
    for ((e, _), (_, addr)) in engines.iter().zip(&sims) {
        direct.push_str(&format!("  - job_name: direct_{e}\n    static_configs: [{{targets: ['{addr}']}}]\n"));
        jobs.push_str(&format!("        - job_name: {e}\n          static_configs: [{{targets: ['{addr}']}}]\n"));
    }
    let prom = Prometheus::start(&direct);
    let cfg = agent_config(&jobs, &prom.write_url());
    let _agent = Agent::start(&cfg);
    for ((e, schema), (_, addr)) in engines.iter().zip(&sims) {
        // Prometheus takes every sample of the page.
        let (_, page) = http_get(&format!("http://{addr}/metrics")).unwrap();
        let lines = page.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).count();
        let q = format!("scrape_samples_post_metric_relabeling{{job=\"direct_{e}\"}}");
        let n = wait_until(&q, Duration::from_secs(30), || prom.query(&q).into_iter().next().map(|(_, v)| v));
        assert_eq!(parse_prom_float(&n) as usize, lines, "{e}: Prometheus stored every sample of the page");
        let up = prom.query(&format!("up{{job=\"direct_{e}\"}}"));
        assert_eq!(up[0].1, "1", "{e}");
        // The agent recognises it and derives its throughput.
        let q = format!("infertel_target_schema_info{{job=\"{e}\",schema=\"{schema}\"}}");
        wait_until(&q, Duration::from_secs(30), || (!prom.query(&q).is_empty()).then_some(()));
        let q = format!(
            "infertel_generation_tokens_per_second{{job=\"{e}\",inference_server=\"{}\"}} > 0",
            if *e == "trtllm" { "trtllm" } else { e }
        );
        wait_until(&q, Duration::from_secs(40), || (!prom.query(&q).is_empty()).then_some(()));
    }
}
