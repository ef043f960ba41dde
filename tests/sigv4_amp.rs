//! End to end: `sigv4auth` on remote write, for Amazon Managed Prometheus.
//! The real binary writes to a loopback stand-in for AMP and STS
//! (`tests/sigv4_receiver.py`) that recomputes every signature with
//! botocore, the AWS SDK for Python's own signer, over the headers the
//! request says it signed: a request is accepted only if botocore gets the
//! same signature. Three credential sources, each its own agent: static
//! keys from the environment, an EKS web-identity token exchanged at STS
//! (`AWS_ENDPOINT_URL_STS` points at loopback), and `assume_role` with the
//! static keys (AssumeRole, itself signed and checked).

mod support;

use serde_json::Value;
use std::process::Command;
use std::time::Duration;
use support::*;

struct Verifier {
    _proc: Proc,
    port: u16,
}

impl Verifier {
    fn start(dir: &std::path::Path, token: &str) -> Verifier {
        let port = free_port();
        let mut cmd = Command::new("python3");
        cmd.arg(repo_dir().join("tests/sigv4_receiver.py")).arg(port.to_string()).arg("us-east-1").arg(token);
        let proc = Proc::spawn("sigv4-receiver", &mut cmd, dir.join("verifier.log"));
        let v = Verifier { _proc: proc, port };
        wait_until("the verifier", Duration::from_secs(20), || v.stats_opt().map(|_| ()));
        v
    }
    fn stats_opt(&self) -> Option<Value> {
        let (c, b) = http_get(&format!("http://127.0.0.1:{}/stats", self.port)).ok()?;
        (c == 200).then(|| serde_json::from_str(&b).ok()).flatten()
    }
    fn stats(&self) -> Value {
        self.stats_opt().expect("stats")
    }
}

fn config(target: &str, port: u16, assume: &str) -> String {
    format!(
        r#"
receivers:
  prometheus:
    config:
      scrape_configs:
        - {{job_name: vllm, scrape_interval: 500ms, scrape_timeout: 400ms, static_configs: [{{targets: ['{target}']}}]}}
extensions:
  sigv4auth:
    region: us-east-1
    service: aps
{assume}
exporters:
  prometheusremotewrite:
    endpoint: http://127.0.0.1:{port}/workspaces/ws-1/api/v1/remote_write
    auth: {{authenticator: sigv4auth}}
    headers: {{X-Scope-Team: gpu}}
service:
  extensions: [sigv4auth]
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#
    )
}

#[test]
fn every_credential_source_signs_as_botocore_does() {
    let dir = tempfile::tempdir().unwrap();
    let token = "eyJhbGciOiJSUzI1NiJ9.irsa-token.sig";
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let v = Verifier::start(dir.path(), token);
    let targets = Targets::start();
    targets.set(
        "/metrics",
        TEXT_004,
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n",
    );
    let t = targets.addr.to_string();
    let sts = format!("http://127.0.0.1:{}/sts", v.port);
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let clean: [(&str, &str); 1] = [("HOME", home.to_str().unwrap())];

    let accepted = |key: &str| v.stats()["accepted"][key].as_u64().unwrap_or(0);
    let runs: [(&str, Vec<(&str, String)>, &str, &str); 3] = [
        (
            "static keys from the environment",
            vec![("AWS_ACCESS_KEY_ID", "AKIDSTATIC".into()), ("AWS_SECRET_ACCESS_KEY", "static/secret+key".into())],
            "",
            "AKIDSTATIC",
        ),
        (
            "an EKS web-identity token",
            vec![
                ("AWS_WEB_IDENTITY_TOKEN_FILE", token_file.to_string_lossy().into_owned()),
                ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/amp-writer".into()),
                ("AWS_ENDPOINT_URL_STS", sts.clone()),
            ],
            "",
            "AKIAWEB",
        ),
        (
            "assume_role with the static keys",
            vec![
                ("AWS_ACCESS_KEY_ID", "AKIDSTATIC".into()),
                ("AWS_SECRET_ACCESS_KEY", "static/secret+key".into()),
                ("AWS_ENDPOINT_URL_STS", sts.clone()),
            ],
            "    assume_role: {arn: 'arn:aws:iam::123456789012:role/amp-writer', session_name: infertel-test}",
            "AKIAROLE",
        ),
    ];
    for (what, env, assume, key) in runs {
        let mut vars: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        vars.extend(clean);
        let agent = Agent::start_with_env(&config(&t, v.port, assume), &vars);
        wait_until(&format!("requests signed by {key} ({what})"), Duration::from_secs(30), || {
            (accepted(key) >= 3).then_some(())
        });
        let s = v.stats();
        assert_eq!(s["rejected"], 0, "{what}: {s}");
        let m = agent.self_metrics();
        assert!(m.sum("infertel_exporter_sent_samples_total", &[]) > 0.0, "{what}: samples reported sent");
        drop(agent);
    }
    let s = v.stats();
    let sts_calls: Vec<&str> = s["sts"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
    assert!(sts_calls.contains(&"AssumeRoleWithWebIdentity") && sts_calls.contains(&"AssumeRole"), "{s}");
    // The AssumeRole answer is cached: not one call per request.
    assert!(sts_calls.len() <= 4, "{s}");
}

#[test]
fn wrong_keys_are_refused_and_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let v = Verifier::start(dir.path(), "t");
    let targets = Targets::start();
    targets.set("/metrics", TEXT_004, "# TYPE x gauge\nx 1\n");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let cfg = config(&targets.addr.to_string(), v.port, "");
    let out = Command::new(infertel_bin())
        .arg("run")
        .arg("--config")
        .arg({
            let p = dir.path().join("c.yaml");
            std::fs::write(&p, cfg.replace("{{TELEMETRY}}", &format!("127.0.0.1:{}", free_port()))).unwrap();
            p
        })
        .env("AWS_ACCESS_KEY_ID", "AKIDSTATIC")
        .env("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        .env("HOME", &home)
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    // The startup check sends a signed empty request: the 403 stops the start.
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("403"), "{text}");
    assert!(v.stats()["rejected"].as_u64().unwrap() >= 1);
}
