//! Handler tests: each page and API against a board filled as the
//! components fill it, and the server's authentication and TLS on a real
//! socket.

use super::api;
use super::pages;
use super::server::{Ctx, StatusServer};
use super::{ServerAuth, ServerTls, StatusConfig};
use crate::exporters::probe::{self, EndpointState, Protocol, StartupCheck};
use crate::exporters::shared::RetryConfig;
use crate::extensions::ExtensionConfig;
use crate::extensions::health_check::Readiness;
use crate::processors::inference::{InferenceConfig, InferenceProcessor};
use crate::receivers::prometheus::target::Target;
use crate::status::ConfigView;
use crate::status::targets::TargetStatus;
use crate::status::trace::{ExportState, ScrapeFate};
use crate::telemetry::Telemetry;
use crate::{BoxFuture, Consumer};
use infertel_model::{Batch, Labels, Sample, Series};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

struct Sink;
impl Consumer for Sink {
    fn consume(&self, _: Batch) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

fn target(url: &str, instance: &str, extra: &[(&str, &str)]) -> Target {
    let mut pairs = vec![("job", "vllm"), ("instance", instance)];
    pairs.extend_from_slice(extra);
    let labels = Labels::from_pairs(pairs.iter().copied());
    let discovered = labels.with("__address__", instance).with("__meta_kubernetes_pod_name", "vllm-0");
    Target {
        discovered,
        all_labels: labels.clone(),
        labels,
        url: url.into(),
        interval: Duration::from_secs(15),
        timeout: Duration::from_secs(10),
    }
}

/// A board as a running agent leaves it: two targets (one failing), one
/// dropped, a paused exporter, a trace, an inference processor with data.
fn ctx() -> (Ctx, Arc<InferenceProcessor>) {
    let telemetry = Telemetry::new();
    let board = telemetry.status().clone();
    board.enable(true);
    let rules: Vec<infertel_relabel::RelabelConfig> =
        serde_yaml::from_str("- {source_labels: [tier], regex: canary, action: drop}").unwrap();
    let metric_rules: Vec<infertel_relabel::RelabelConfig> =
        serde_yaml::from_str("- {regex: engine, action: labeldrop}").unwrap();
    let pool = board.targets.open("prometheus", "vllm", rules, metric_rules);
    let ok = TargetStatus::new(&target("http://10.0.0.1:8000/metrics", "10.0.0.1:8000", &[]));
    ok.record(SystemTime::now(), Duration::from_millis(12), None, [407, 407, 0]);
    let bad = TargetStatus::new(&target("http://10.0.0.2:8000/metrics", "10.0.0.2:8000", &[]));
    bad.record(
        SystemTime::now(),
        Duration::from_millis(3),
        Some(("http_status", "server returned HTTP status 404 Not Found")),
        [0, 0, 0],
    );
    pool.set_targets(
        vec![ok, bad],
        vec![Labels::from_pairs([("__address__", "10.0.0.3:8000"), ("tier", "canary"), ("job", "vllm")])],
    );
    let st = EndpointState::new(
        "prometheusremotewrite/es",
        "https://es.example/_prometheus/api/v1/write",
        StartupCheck::Warn,
        false,
        RetryConfig::default(),
        &telemetry,
    );
    let refusal = probe::classify_http(
        403,
        "https://es.example/_prometheus/api/v1/write",
        Protocol::RemoteWrite,
        "{\"error\":\"action [indices:data/write] is unauthorized\"}",
    );
    st.note_startup(&refusal);
    st.pause(&refusal);
    st.note_response("HTTP 403", "{\"error\":\"action [indices:data/write] is unauthorized for API key\"}");
    let readiness = Arc::new(Readiness::default());
    readiness.set_exporters(vec![st]);
    board.set_config(ConfigView {
        effective: crate::status::redact_debug(
            "Config {\n    password: \"hunter-22\",\n    endpoint: \"http://x\",\n}",
        ),
        pipelines: [(
            "metrics".to_string(),
            crate::config::PipelineConfig {
                receivers: vec!["prometheus".into()],
                processors: vec!["inference".into()],
                exporters: vec!["prometheusremotewrite/es".into()],
            },
        )]
        .into(),
        extensions: vec!["status".into()],
        write_relabel: Default::default(),
        loaded_at: Some(SystemTime::now()),
    });
    let trace = board.tracer.open("vllm:num_requests_running").unwrap();
    let scraped = Labels::from_pairs([
        ("__name__", "vllm:num_requests_running"),
        ("engine", "0"),
        ("job", "vllm"),
        ("instance", "10.0.0.1:8000"),
    ]);
    let out =
        Labels::from_pairs([("__name__", "vllm:num_requests_running"), ("job", "vllm"), ("instance", "10.0.0.1:8000")]);
    trace.scraped("vllm/10.0.0.1:8000", &scraped, Some(&out), ScrapeFate::Kept, 3.0);
    trace.exported(
        "prometheusremotewrite/es",
        &out,
        ExportState::Held,
        "the exporter is paused: forbidden (HTTP 403)",
        1,
    );
    // The inference processor with a minute of one vLLM target's counters.
    let cfg: InferenceConfig = serde_yaml::from_str("{window: 30s, evaluation_interval: 1s}").unwrap();
    let p = InferenceProcessor::new("inference".into(), &cfg, Arc::new(Sink), telemetry.clone());
    let now = api::now_ms();
    for i in 0..60i64 {
        let t = now - (60 - i) * 1000;
        let s = |name: &str, v: f64| Series {
            labels: Labels::from_pairs([
                ("__name__", name),
                ("engine", "0"),
                ("instance", "10.0.0.1:8000"),
                ("job", "vllm"),
                ("model_name", "m"),
            ]),
            samples: infertel_model::samples![Sample { timestamp_ms: t, value: v }],
        };
        p.derive(&Batch {
            series: vec![
                s("vllm:generation_tokens_total", i as f64 * 500.0),
                s("vllm:kv_cache_usage_perc", 0.4 + i as f64 / 1000.0),
            ],
            metadata: vec![],
        });
    }
    (Ctx { board, telemetry, readiness, zpages: false, auth: None }, p)
}

fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn every_page_shows_what_the_board_holds() {
    let (c, _p) = ctx();
    let o = pages::overview(&c, &q(&[]));
    assert!(o.contains("Pipeline <code>metrics</code>") && o.contains("processor <b>inference</b>"), "{o}");
    assert!(o.contains("not ready") && o.contains("forbidden (HTTP 403)"), "{o}");
    let t = pages::targets(&c, &q(&[]));
    assert!(t.contains("(1/2 up; receiver prometheus)") && t.contains("HTTP status 404"), "{t}");
    assert!(t.contains("__meta_kubernetes_pod_name"), "discovered labels shown: {t}");
    let down = pages::targets(&c, &q(&[("state", "down")]));
    assert!(down.contains("10.0.0.2") && !down.contains("10.0.0.1:8000/metrics"), "{down}");
    let text = pages::targets(&c, &q(&[("q", "10.0.0.1")]));
    assert!(!text.contains("10.0.0.2:8000/metrics") && text.contains("10.0.0.1:8000/metrics"), "{text}");
    let sd = pages::service_discovery(&c, &q(&[]));
    assert!(sd.contains("dropped by relabel_configs rule #1") && sd.contains("canary"), "{sd}");
    let r = pages::relabel(
        &c,
        &q(&[("pool", "vllm"), ("labels", "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3")]),
    );
    assert!(r.contains("metric_relabel_configs") && r.contains("labeldrop") && r.contains(">changed<"), "{r}");
    let r = pages::relabel(&c, &q(&[("pool", "vllm"), ("target", "http://10.0.0.1:8000/metrics")]));
    assert!(r.contains("relabel_configs for") && r.contains("unchanged"), "{r}");
    let r = pages::relabel(&c, &q(&[("pool", "vllm"), ("labels", "up{job=~\"x\"}")]));
    assert!(r.contains("label=&quot;value&quot; pairs only"), "an unusable selector says why: {r}");
    let s = pages::series(&c, &q(&[("match", "vllm:num_requests_running")]));
    assert!(s.contains("kept: forwarded to the pipeline") && s.contains("class=held>held<"), "{s}");
    let s = pages::series(&c, &q(&[("match", "vllm:num_requests_running{")]));
    assert!(s.contains("class=down"), "a bad selector is an error on the page: {s}");
    let e = pages::exporters(&c, &q(&[]));
    assert!(e.contains("HTTP 403") && e.contains("is unauthorized for API key") && e.contains("paused"), "{e}");
    assert!(e.contains("Startup check") && e.contains("forbidden"), "{e}");
    let i = pages::inference(&c, &q(&[]));
    assert!(i.contains("SLO verdicts") && i.contains("ttft_p95") && i.contains("NO DATA"), "{i}");
    assert!(i.contains("generation_tokens_per_second") && i.contains("<polyline"), "a chart of the derived rate: {i}");
    let cfg = pages::config(&c, &q(&[]));
    assert!(!cfg.contains("hunter-22") && cfg.contains("&lt;redacted&gt;") && cfg.contains("http://x"), "{cfg}");
    assert!(pages::extensionz(&c, &q(&[])).contains("<code>status</code>"));
    for page in [o, t, sd, e, i, cfg] {
        assert!(page.len() < super::html::PAGE_BUDGET, "{} bytes", page.len());
    }
    // ?refresh=N reloads without script.
    assert!(pages::targets(&c, &q(&[("refresh", "10")])).contains("http-equiv=refresh content=\"10\""));
}

#[test]
fn the_api_speaks_prometheus_targets_shape() {
    let (c, _p) = ctx();
    let v = api::targets(&c, &q(&[]));
    assert_eq!(v["status"], "success");
    let a = v["data"]["activeTargets"].as_array().unwrap();
    assert_eq!(a.len(), 2);
    let bad = a.iter().find(|t| t["health"] == "down").unwrap();
    assert_eq!(bad["scrapePool"], "vllm");
    assert_eq!(bad["scrapeUrl"], "http://10.0.0.2:8000/metrics");
    assert!(bad["lastError"].as_str().unwrap().contains("404"));
    assert_eq!(bad["scrapeInterval"], "15s");
    assert!(bad["lastScrape"].as_str().unwrap().ends_with('Z'));
    assert_eq!(bad["discoveredLabels"]["__meta_kubernetes_pod_name"], "vllm-0");
    assert_eq!(v["data"]["droppedTargets"][0]["discoveredLabels"]["tier"], "canary");
    let only = api::targets(&c, &q(&[("state", "dropped")]));
    assert!(only["data"]["activeTargets"].as_array().unwrap().is_empty());
    assert_eq!(api::targets(&c, &q(&[("scrapePool", "other")]))["data"]["droppedTargets"].as_array().unwrap().len(), 0);
    let t = api::series_trace(&c, &q(&[("match", "vllm:num_requests_running")]));
    assert_eq!(t["data"]["series"][0]["exporters"]["prometheusremotewrite/es"]["state"], "held");
    assert_eq!(api::series_trace(&c, &q(&[]))["status"], "error");
    let e = api::exporters(&c, &q(&[]));
    assert_eq!(e["data"]["ready"], false);
    assert_eq!(e["data"]["exporters"][0]["lastResponse"]["status"], "HTTP 403");
    let i = api::inference(&c, &q(&[]));
    assert_eq!(i["data"]["processors"][0]["processor"], "inference");
    assert!(i["data"]["processors"][0]["report"]["verdicts"].as_array().is_some_and(|v| !v.is_empty()));
    assert!(i["data"]["processors"][0]["history"].as_array().is_some_and(|h| !h.is_empty()));
}

#[test]
fn the_report_on_the_page_leaves_the_processor_alone() {
    // Two processors fed the same scrapes; one is looked at (report()) after
    // every scrape. What they emit must not differ: the page's report runs
    // on a copy, so the evaluation cadence and staleness are untouched.
    let cfg: InferenceConfig = serde_yaml::from_str("{window: 20s, evaluation_interval: 5s}").unwrap();
    let t = Telemetry::new();
    let quiet = InferenceProcessor::new("a".into(), &cfg, Arc::new(Sink), t.clone());
    let watched = InferenceProcessor::new("b".into(), &cfg, Arc::new(Sink), t);
    let shown = |b: &Batch| -> Vec<String> {
        let mut v: Vec<String> = b.series.iter().map(|s| format!("{} {:?}", s.labels, s.samples)).collect();
        v.sort();
        v
    };
    let mut emitted = 0;
    for i in 0..40i64 {
        let t = 1_700_000_000_000 + i * 1000 + (i * 37 % 11);
        let s = |name: &str, v: f64| Series {
            labels: Labels::from_pairs([
                ("__name__", name),
                ("engine", "0"),
                ("instance", "h:8000"),
                ("job", "vllm"),
                ("model_name", "m"),
            ]),
            samples: infertel_model::samples![Sample { timestamp_ms: t, value: v }],
        };
        // The target goes away for a while: staleness markers are part of it.
        let series = if (20..25).contains(&i) {
            vec![]
        } else {
            vec![s("vllm:generation_tokens_total", i as f64 * 300.0), s("vllm:kv_cache_usage_perc", 0.5)]
        };
        let b = Batch { series, metadata: vec![] };
        let (a, w) = (quiet.derive(&b), watched.derive(&b));
        // Looked at a few seconds after the scrape (the next is a second later
        // here: a report that moved the processor's clock would show).
        watched.report(t + 4_000);
        assert_eq!(shown(&a), shown(&w), "scrape {i}");
        emitted += a.series.len();
    }
    assert!(emitted > 10, "the processors emitted derived series ({emitted})");
}

fn testdata(f: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/testdata").join(f)
}

async fn serve(cfg: StatusConfig, auth: Option<ExtensionConfig>) -> (String, tokio::task::JoinHandle<()>) {
    let s = StatusServer { cfg: StatusConfig { endpoint: "127.0.0.1:0".into(), ..cfg }, zpages: true, auth };
    let l = s.bind().await.unwrap();
    let addr = l.local_addr().unwrap();
    let h = s.serve(l, Telemetry::new(), Arc::new(Readiness::default()));
    (addr.to_string(), h)
}

#[tokio::test]
async fn the_server_authenticates_with_basicauth_and_bearer_tokens() {
    crate::http::ensure_crypto_provider();
    let basic: ExtensionConfig = {
        let v: serde_yaml::Value = serde_yaml::from_str("htpasswd: {inline: \"sre:pa55-word\"}").unwrap();
        <ExtensionConfig as crate::primitives::ComponentKind>::deserialize_kind("basicauth", v).unwrap()
    };
    let auth = Some(ServerAuth { authenticator: "basicauth/ui".into() });
    let (addr, h) = serve(StatusConfig { auth, ..Default::default() }, Some(basic)).await;
    let c = reqwest::Client::new();
    let r = c.get(format!("http://{addr}/targets")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers()["www-authenticate"].to_str().unwrap().starts_with("Basic"));
    let r = c.get(format!("http://{addr}/targets")).basic_auth("sre", Some("wrong")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = c.get(format!("http://{addr}/debug/servicez")).basic_auth("sre", Some("pa55-word")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-security-policy"].to_str().unwrap().starts_with("default-src 'none'"));
    assert!(r.text().await.unwrap().contains("Overview"));
    h.abort();
    let bearer: ExtensionConfig = {
        let v: serde_yaml::Value = serde_yaml::from_str("token: tok-123456").unwrap();
        <ExtensionConfig as crate::primitives::ComponentKind>::deserialize_kind("bearertokenauth", v).unwrap()
    };
    let auth = Some(ServerAuth { authenticator: "bearertokenauth/ui".into() });
    let (addr, h) = serve(StatusConfig { auth, ..Default::default() }, Some(bearer)).await;
    assert_eq!(c.get(format!("http://{addr}/api/v1/targets")).send().await.unwrap().status(), 401);
    let r = c.get(format!("http://{addr}/api/v1/targets")).bearer_auth("tok-123456").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["status"], "success");
    h.abort();
}

#[tokio::test]
async fn the_server_speaks_tls() {
    let tls = Some(ServerTls { cert_file: testdata("client.pem"), key_file: testdata("client-key.pem") });
    let (addr, h) = serve(StatusConfig { tls, ..Default::default() }, None).await;
    crate::http::ensure_crypto_provider();
    // The throwaway certificate names no host: this checks the server
    // speaks TLS with it, not name verification.
    let c = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    let r = c.get(format!("https://{addr}/config")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("Configuration"));
    let plain = reqwest::Client::new().get(format!("http://{addr}/config")).send().await;
    assert!(plain.is_err() || plain.is_ok_and(|r| r.status() != 200), "plain HTTP is not served on a TLS port");
    h.abort();
}

#[test]
fn two_status_extensions_on_one_endpoint_are_refused() {
    let a = ExtensionConfig::Status(StatusConfig { endpoint: "127.0.0.1:9999".into(), ..Default::default() }, false);
    let b = ExtensionConfig::Status(StatusConfig { endpoint: "localhost:9999".into(), ..Default::default() }, true);
    let ext = [("status".to_string(), a), ("zpages".to_string(), b)].into();
    let e = StatusServer::from_config(&["status".into(), "zpages".into()], &ext).err().unwrap();
    assert!(e.contains("also the endpoint"), "{e}");
    let none = StatusServer::from_config(&[], &ext).unwrap();
    assert!(none.is_empty(), "not listed: not served");
}

#[test]
fn validate_names_a_status_extension_whose_authenticator_is_wrong() {
    let base = "receivers: {prometheus: {config: {scrape_configs: [{job_name: a, static_configs: [{targets: ['h:1']}]}]}}}\nexporters: {debug: {}}\n";
    let cases = [
        (
            "extensions:\n  status:\n    auth: {authenticator: basicauth/ui}\nservice:\n  extensions: [status]\n",
            "is not defined",
        ),
        (
            "extensions:\n  basicauth/ui: {htpasswd: {inline: 'a:b'}}\n  status:\n    auth: {authenticator: basicauth/ui}\nservice:\n  extensions: [status]\n",
            "must also be listed",
        ),
        (
            "extensions:\n  basicauth/ui: {client_auth: {username: a, password: b}}\n  status:\n    auth: {authenticator: basicauth/ui}\nservice:\n  extensions: [basicauth/ui, status]\n",
            "has no htpasswd",
        ),
    ];
    for (ext, want) in cases {
        let text = format!("{base}{ext}  pipelines: {{metrics: {{receivers: [prometheus], exporters: [debug]}}}}\n");
        let r = crate::load_str("t.yaml", &text, &|_| None);
        let errors = r.err().map(|e| e.errors).unwrap_or_default();
        let e = errors.iter().find(|e| e.message.contains(want)).unwrap_or_else(|| panic!("{want}: {errors:?}"));
        assert_eq!(e.path, "extensions.status", "{e}");
        assert!(e.line.is_some(), "{e}");
    }
}
