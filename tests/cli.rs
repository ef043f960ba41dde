//! The CLI's contracts: exit codes (0 ok, 2 usage, 78 invalid config,
//! 1 other failure), config errors that name file:line:column and the YAML
//! path, warnings that don't stop a pasted config, `${env:...}` expansion,
//! JSON logs, a clean SIGTERM, and the `demo` and `simulate` commands.

mod support;

use std::process::{Command, Output};
use std::time::Duration;
use support::*;

fn infertel(args: &[&str]) -> Output {
    Command::new(infertel_bin()).args(args).output().expect("run infertel")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn write_config(dir: &tempfile::TempDir, text: &str) -> String {
    let p = dir.path().join("c.yaml");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const GOOD: &str = r#"receivers:
  prometheus:
    config:
      scrape_configs:
        - job_name: vllm
          scrape_interval: 15s
          static_configs: [{targets: ["127.0.0.1:8000"]}]
exporters:
  prometheusremotewrite:
    endpoint: ${env:INFERTEL_TEST_RW:-http://127.0.0.1:9090/api/v1/write}
service:
  pipelines:
    metrics:
      receivers: [prometheus]
      exporters: [prometheusremotewrite]
"#;

fn validate(text: &str) -> (i32, String) {
    let d = tempfile::tempdir().unwrap();
    let p = write_config(&d, text);
    let o = infertel(&["validate", "--config", &p]);
    (o.status.code().unwrap_or(-1), self::text(&o))
}

#[test]
fn version_and_help_exit_zero() {
    let o = infertel(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o).starts_with(&format!("infertel {}", env!("CARGO_PKG_VERSION"))), "{}", text(&o));
    let o = infertel(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    for cmd in ["run", "validate", "demo", "simulate"] {
        assert!(text(&o).contains(cmd), "--help lists {cmd}");
    }
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(infertel(&[]).status.code(), Some(2));
    assert_eq!(infertel(&["--bogus"]).status.code(), Some(2));
    assert_eq!(infertel(&["run"]).status.code(), Some(2), "run without --config");
    assert_eq!(infertel(&["demo", "--duration", "soon"]).status.code(), Some(2));
}

#[test]
fn a_good_config_validates() {
    let (code, out) = validate(GOOD);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("configuration is valid"));
}

#[test]
fn a_missing_file_is_a_config_error() {
    let o = infertel(&["validate", "--config", "/nonexistent/infertel.yaml"]);
    assert_eq!(o.status.code(), Some(78));
    assert!(text(&o).contains("/nonexistent/infertel.yaml"));
}

#[test]
fn unknown_keys_name_the_path_and_position() {
    let bad = GOOD.replace("scrape_interval: 15s", "scrape_intervl: 15s");
    let (code, out) = validate(&bad);
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("unknown field `scrape_intervl`"), "{out}");
    assert!(out.contains("c.yaml:6:11"), "line:column of the bad key: {out}");
    assert!(out.contains("receivers.prometheus.config.scrape_configs[0]"), "YAML path: {out}");
}

#[test]
fn wrong_types_and_bad_durations_are_located() {
    let (code, out) = validate(&GOOD.replace("scrape_interval: 15s", "scrape_interval: [1]"));
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("c.yaml:6:28") && out.contains("a duration such as"), "{out}");
    let (code, out) = validate(&GOOD.replace("scrape_interval: 15s", "scrape_interval: 15x"));
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("unknown unit \"x\""), "{out}");
}

#[test]
fn undefined_components_are_errors_with_a_line() {
    let (code, out) = validate(&GOOD.replace("exporters: [prometheusremotewrite]", "exporters: [otlp/elastic]"));
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("otlp/elastic"), "{out}");
    assert!(out.contains("not defined"), "{out}");
    assert!(out.contains("c.yaml:15:19"), "line:column of the reference: {out}");
}

#[test]
fn unknown_component_types_list_the_known_ones() {
    let (code, out) = validate(&GOOD.replace("  prometheusremotewrite:\n", "  prometheusremotewrit:\n"));
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("unknown exporter type \"prometheusremotewrit\""), "{out}");
    assert!(out.contains("prometheusremotewrite"), "{out}");
}

#[test]
fn semantic_errors_are_reported_per_component() {
    let (code, out) =
        validate(&GOOD.replace("scrape_interval: 15s", "scrape_interval: 5s\n          scrape_timeout: 10s"));
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("scrape_timeout") && out.contains("greater than scrape_interval"), "{out}");
    let (code, out) =
        validate(&GOOD.replace("${env:INFERTEL_TEST_RW:-http://127.0.0.1:9090/api/v1/write}", "not a url"));
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("exporters.prometheusremotewrite") && out.contains("endpoint"), "{out}");
}

#[test]
fn unused_components_warn_but_validate() {
    let cfg = GOOD.replace(
        "exporters:\n  prometheusremotewrite:",
        "processors:\n  batch:\nexporters:\n  debug:\n  prometheusremotewrite:",
    );
    let (code, out) = validate(&cfg);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("warning") && out.contains("processors batch is defined but not used"), "{out}");
    assert!(out.contains("exporters debug is defined but not used"), "{out}");
}

#[test]
fn env_expansion_and_escapes() {
    let d = tempfile::tempdir().unwrap();
    let p = write_config(
        &d,
        &GOOD.replace("${env:INFERTEL_TEST_RW:-http://127.0.0.1:9090/api/v1/write}", "${env:INFERTEL_TEST_ENDPOINT}"),
    );
    let o = Command::new(infertel_bin())
        .args(["validate", "--config", &p])
        .env("INFERTEL_TEST_ENDPOINT", "ftp://x/")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(78), "the expanded value is what gets validated: {}", text(&o));
    assert!(text(&o).contains("ftp://x/"));
    let o = Command::new(infertel_bin())
        .args(["validate", "--config", &p])
        .env_remove("INFERTEL_TEST_ENDPOINT")
        .output()
        .unwrap();
    assert!(text(&o).contains("environment variable INFERTEL_TEST_ENDPOINT is not set"), "{}", text(&o));
}

#[test]
fn run_refuses_an_invalid_config_with_78() {
    let d = tempfile::tempdir().unwrap();
    let p = write_config(&d, "receivers: {}\n");
    let o = infertel(&["run", "--config", &p]);
    assert_eq!(o.status.code(), Some(78), "{}", text(&o));
}

#[test]
fn run_shuts_down_cleanly_on_sigterm_and_logs_json() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!("{GOOD}  telemetry:\n    metrics:\n      address: 127.0.0.1:{port}\n");
    let p = write_config(&d, &cfg);
    let mut cmd = Command::new(infertel_bin());
    cmd.args(["--log-format", "json", "run", "--config", &p]);
    let mut proc = Proc::spawn("infertel", &mut cmd, d.path().join("log"));
    wait_until("self-metrics", Duration::from_secs(20), || {
        matches!(http_get(&format!("http://127.0.0.1:{port}/metrics")), Ok((200, _))).then_some(())
    });
    // A second agent on the same self-metrics port fails with 1, not 78.
    let o = infertel(&["run", "--config", &p]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("cannot listen"), "{}", text(&o));
    assert_eq!(proc.terminate(Duration::from_secs(15)), Some(0), "{}", proc.log_text());
    let log = proc.log_text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    assert!(lines.iter().any(|v| v["message"] == "infertel started"), "{log}");
    assert!(lines.iter().any(|v| v["message"] == "shutdown complete"), "{log}");
}

/// The async workers of a running agent, by the name tokio gives them.
fn workers(pid: u32) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the agent's threads");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == "tokio-rt-worker")
        .count()
}

#[test]
fn one_worker_thread_unless_asked_for_more() {
    assert_eq!(infertel(&["--worker-threads", "0", "validate", "--config", "x"]).status.code(), Some(2));
    let d = tempfile::tempdir().unwrap();
    for (flag, env, want) in [(None, None, 1), (Some("3"), None, 3), (None, Some("2"), 2)] {
        let port = free_port();
        let cfg = format!("{GOOD}  telemetry:\n    metrics:\n      address: 127.0.0.1:{port}\n");
        let p = write_config(&d, &cfg);
        let mut cmd = Command::new(infertel_bin());
        if let Some(n) = flag {
            cmd.args(["--worker-threads", n]);
        }
        match env {
            Some(n) => cmd.env("INFERTEL_WORKER_THREADS", n),
            None => cmd.env_remove("INFERTEL_WORKER_THREADS"),
        };
        cmd.args(["run", "--config", &p]);
        let mut proc = Proc::spawn("infertel", &mut cmd, d.path().join(format!("log-{want}")));
        wait_until("self-metrics", Duration::from_secs(20), || {
            matches!(http_get(&format!("http://127.0.0.1:{port}/metrics")), Ok((200, _))).then_some(())
        });
        assert_eq!(workers(proc.pid()), want, "flag {flag:?}, env {env:?}");
        assert_eq!(proc.terminate(Duration::from_secs(15)), Some(0), "{}", proc.log_text());
    }
}

#[test]
fn demo_shows_both_targets_up() {
    let o = Command::new(infertel_bin()).args(["demo", "--duration", "4s", "--interval", "1s"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let last = out.rsplit("----").next().unwrap_or("");
    assert!(last.lines().any(|l| l.contains("vllm") && l.contains("UP")), "{last}");
    assert!(last.lines().any(|l| l.contains("dcgm") && l.contains("UP")), "{last}");
    assert!(last.contains("vllm:num_requests_running"), "{last}");
}

#[test]
fn simulate_serves_vllm_and_dcgm() {
    let (v, g) = (free_port(), free_port());
    let d = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(infertel_bin());
    cmd.args([
        "simulate",
        "--vllm",
        &format!("127.0.0.1:{v}"),
        "--dcgm",
        &format!("127.0.0.1:{g}"),
        "--concurrency",
        "32",
    ]);
    let mut proc = Proc::spawn("simulate", &mut cmd, d.path().join("log"));
    let body = wait_until("simulated vLLM", Duration::from_secs(20), || {
        match http_get(&format!("http://127.0.0.1:{v}/metrics")) {
            Ok((200, b)) => Some(b),
            _ => None,
        }
    });
    let exp = infertel_exposition::parse(body.as_bytes(), infertel_exposition::Format::PrometheusText)
        .expect("simulated vLLM parses");
    assert!(exp.samples.iter().any(|s| s.name == "vllm:num_requests_waiting"));
    let (code, dcgm) = http_get(&format!("http://127.0.0.1:{g}/metrics")).unwrap();
    assert_eq!(code, 200);
    assert!(dcgm.contains("DCGM_FI_DEV_GPU_UTIL"));
    assert_eq!(proc.terminate(Duration::from_secs(10)), Some(0));
}

/// `validate` takes a Prometheus file as it is (vLLM's example, copied in
/// `crates/pipeline/tests/data` with its source): without `remote_write`
/// it is refused (78) saying nothing would leave; with one it is valid (0)
/// and what is ignored is warned about by line.
#[test]
fn validate_takes_a_prometheus_file() {
    let vllm = std::fs::read_to_string(
        repo_dir().join("crates/pipeline/tests/data/vllm-production-monitoring-prometheus.yaml"),
    )
    .unwrap();
    let (code, out) = validate(&vllm);
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("has no remote_write: nothing would leave"), "{out}");
    let with_rw = format!("{vllm}rule_files: [alerts.yml]\nremote_write:\n  - url: http://127.0.0.1:9/api/v1/write\n");
    let (code, out) = validate(&with_rw);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("rule_files: ignored"), "{out}");
}

/// `validate` reports every error of a config in one run, each at its
/// file:line:column with its YAML path: serde's first, and the others
/// found component by component and job by job.
#[test]
fn validate_names_every_error_with_its_line() {
    let text = std::fs::read_to_string(repo_dir().join("tests/fixtures/every-error.yaml")).unwrap();
    let (code, out) = validate(&text);
    assert_eq!(code, 78, "{out}");
    let errors: Vec<&str> = out.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 4, "{out}");
    // Where each is, read off the fixture (1-based line:column).
    for (at, path, what) in [
        (":8:11: ", "receivers.prometheus.config.scrape_configs[1]", "unknown field `scrape_intervall`"),
        (":11:25: ", "receivers.prometheus.config.scrape_configs[2]", "invalid type: string \"lots\""),
        (":15:14: ", "processors.batch", "invalid duration \"soon\""),
        (":19:5: ", "exporters.prometheusremotewrite", "unknown field `retry_on_failur`"),
    ] {
        assert!(
            errors.iter().any(|e| e.contains(at) && e.contains(path) && e.contains(what)),
            "{at} {path} {what}:\n{out}"
        );
    }
    assert!(out.contains("invalid configuration (4 errors)"), "{out}");
    // Semantic errors too: every bad job, not the first.
    let jobs = "receivers:\n  prometheus:\n    config:\n      scrape_configs:\n        - job_name: a\n          scrape_interval: 5s\n          scrape_timeout: 10s\n          static_configs: [{targets: ['h:1']}]\n        - job_name: b\n          static_configs: [{targets: ['h:1']}]\n          relabel_configs:\n            - {action: hashmod, target_label: x}\n        - job_name: a\n          static_configs: [{targets: ['h:2']}]\nexporters:\n  debug: {}\nservice:\n  pipelines:\n    metrics: {receivers: [prometheus], exporters: [debug]}\n";
    let (code, out) = validate(jobs);
    assert_eq!(code, 78, "{out}");
    for (at, what) in [
        (":5:9: ", "greater than scrape_interval"),
        (":9:9: ", "hashmod"),
        (":13:11: ", "multiple scrape configs with job name \"a\""),
    ] {
        assert!(out.lines().any(|l| l.contains(at) && l.contains(what)), "{at} {what}:\n{out}");
    }
}

/// A Collector config with traces, logs or connectors: each is refused by
/// name and line with the way out (a Collector beside infertel), in the same
/// run as the file's other errors (issue 14's "metrics only").
#[test]
fn other_signals_are_refused_by_name_and_line() {
    let collector = "receivers:\n  prometheus:\n    config:\n      scrape_configs:\n        - job_name: a\n          static_configs: [{targets: ['h:1']}]\nconnectors:\n  spanmetrics: {}\nexporters:\n  debug: {}\n  prometheusremotewrite:\n    endpoint: http://127.0.0.1:9/api/v1/write\n    bogus_key: 1\nservice:\n  pipelines:\n    metrics: {receivers: [prometheus], exporters: [debug]}\n    traces:\n      receivers: [prometheus]\n      exporters: [debug]\n    logs/app: {receivers: [prometheus], exporters: [debug]}\n";
    let (code, out) = validate(collector);
    assert_eq!(code, 78, "{out}");
    for (at, what) in [
        (":7:1: connectors", "connectors are not supported"),
        (":17:5: service.pipelines.traces", "run an OpenTelemetry Collector beside it"),
        (":20:5: service.pipelines.logs/app", "is not a metrics pipeline"),
        (":13:5: exporters.prometheusremotewrite", "unknown field `bogus_key`"),
    ] {
        assert!(out.lines().any(|l| l.contains(at) && l.contains(what)), "{at} {what}:\n{out}");
    }
}
