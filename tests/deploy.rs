//! `deploy/`: every kustomize overlay renders with the real `kubectl
//! kustomize`, parses into `k8s-openapi` types and carries what a GPU-node
//! DaemonSet needs; the ConfigMap each overlay ships passes `infertel
//! validate`; the alert rules pass `promtool check rules` and `promtool test
//! rules`; every metric name used by the dashboards, alerts and the KEDA
//! ScaledObject is produced by something real (a real capture, the
//! simulator, the agent's self-metrics, or an `infertel_*` name in the code);
//! the Dockerfile follows the rules the manifests rely on.

mod support;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::*;

fn deploy() -> PathBuf {
    repo_dir().join("deploy")
}

fn yaml_docs(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kustomize(dir: &Path) -> Vec<Value> {
    let kubectl = require("kubectl");
    let out = Command::new(kubectl).arg("kustomize").arg(dir).output().expect("run kubectl kustomize");
    assert!(out.status.success(), "kubectl kustomize {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    yaml_docs(&String::from_utf8(out.stdout).unwrap())
}

fn one<T: serde::de::DeserializeOwned>(docs: &[Value], kind: &str) -> T {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "expected exactly one {kind}");
    serde_json::from_value(found[0].clone()).unwrap_or_else(|e| panic!("{kind} does not parse into k8s-openapi: {e}"))
}

/// What every rendering must hold; returns the ConfigMap's infertel.yaml and the DaemonSet.
fn check_common(docs: &[Value]) -> (String, DaemonSet) {
    let kinds: BTreeSet<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Namespace", "ServiceAccount"])
    );
    let ns: Namespace = one(docs, "Namespace");
    let ns = ns.metadata.name.unwrap();
    let sa: ServiceAccount = one(docs, "ServiceAccount");
    assert_eq!(sa.metadata.namespace.as_deref(), Some(ns.as_str()));

    // Least privilege: pods get/list/watch, nothing else.
    let role: ClusterRole = one(docs, "ClusterRole");
    let rules = role.rules.unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0].api_groups.as_deref(), Some(&[String::new()][..]));
    assert_eq!(rules[0].resources.as_deref(), Some(&["pods".to_string()][..]));
    let verbs: BTreeSet<&str> = rules[0].verbs.iter().map(String::as_str).collect();
    assert_eq!(verbs, BTreeSet::from(["get", "list", "watch"]));
    assert!(rules[0].resource_names.is_none() && rules[0].non_resource_urls.is_none());
    let binding: ClusterRoleBinding = one(docs, "ClusterRoleBinding");
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(Some(binding.role_ref.name), role.metadata.name);
    let subj = &binding.subjects.unwrap()[0];
    assert_eq!(
        (subj.kind.as_str(), Some(subj.name.clone()), subj.namespace.clone()),
        ("ServiceAccount", sa.metadata.name.clone(), Some(ns.clone()))
    );

    let cm: ConfigMap = one(docs, "ConfigMap");
    let config = cm.data.as_ref().and_then(|d| d.get("infertel.yaml")).expect("ConfigMap key infertel.yaml").clone();
    // The status page is on, on the pod's loopback only (kubectl port-forward).
    let v: serde_yaml::Value = serde_yaml::from_str(&config).expect("config YAML");
    assert_eq!(v["extensions"]["status"]["endpoint"].as_str(), Some("127.0.0.1:55679"), "{config}");
    assert!(v["service"]["extensions"].as_sequence().is_some_and(|e| e.iter().any(|x| x == "status")), "{config}");
    assert!(config.contains("kubectl -n infertel port-forward"), "the way in is documented");

    let ds: DaemonSet = one(docs, "DaemonSet");
    assert_eq!(ds.metadata.namespace.as_deref(), Some(ns.as_str()));
    let spec = ds.spec.clone().unwrap();
    let pod = spec.template.spec.clone().unwrap();
    assert_eq!(pod.service_account_name, sa.metadata.name);
    assert_eq!(pod.node_selector.as_ref().unwrap().get("nvidia.com/gpu.present").map(String::as_str), Some("true"));
    let tol = pod.tolerations.clone().unwrap();
    assert!(
        tol.iter().any(|t| t.key.as_deref() == Some("nvidia.com/gpu")
            && t.operator.as_deref() == Some("Exists")
            && t.effect.as_deref() == Some("NoSchedule")),
        "{tol:?}"
    );
    let psc = pod.security_context.clone().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert!(psc.run_as_user.unwrap() != 0);
    assert_eq!(pod.containers.len(), 1);
    let c = &pod.containers[0];
    let image = c.image.as_deref().unwrap();
    assert!(image.contains('/') && image.contains(':') && !image.ends_with(":latest"), "image {image}");
    // Downward-API node name, for the node-local field selector.
    let env = c.env.clone().unwrap();
    let node = env.iter().find(|e| e.name == "K8S_NODE_NAME").expect("K8S_NODE_NAME env");
    assert_eq!(node.value_from.as_ref().unwrap().field_ref.as_ref().unwrap().field_path, "spec.nodeName");
    // Probes on the health_check extension's paths.
    let ports: BTreeMap<String, i32> =
        c.ports.clone().unwrap().into_iter().map(|p| (p.name.unwrap(), p.container_port)).collect();
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        let h = p.as_ref().unwrap().http_get.clone().unwrap();
        let port = match h.port {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => ports[&s],
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i,
        };
        (h.path.unwrap(), port)
    };
    assert_eq!(probe_path(&c.liveness_probe), ("/healthz".to_string(), 13133));
    assert_eq!(probe_path(&c.readiness_probe), ("/readyz".to_string(), 13133));
    assert_eq!(ports["metrics"], 8888);
    let res = c.resources.clone().unwrap();
    for part in [res.requests.unwrap(), res.limits.unwrap()] {
        assert!(part.contains_key("cpu") && part.contains_key("memory"), "{part:?}");
    }
    let sc = c.security_context.clone().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.capabilities.unwrap().drop.unwrap(), ["ALL"]);
    // Config from the generated ConfigMap, queue on an emptyDir or hostPath.
    let volumes = pod.volumes.clone().unwrap();
    let mounts = c.volume_mounts.clone().unwrap();
    let mount_of = |v: &str| mounts.iter().find(|m| m.name == v).map(|m| m.mount_path.clone());
    let cfg_vol = volumes.iter().find(|v| v.config_map.is_some()).expect("config volume");
    assert_eq!(Some(cfg_vol.config_map.as_ref().unwrap().name.clone()), cm.metadata.name);
    let cfg_dir = mount_of(&cfg_vol.name).expect("config mounted");
    assert!(c.args.as_ref().unwrap().join(" ").contains(&format!("--config {cfg_dir}/infertel.yaml")), "{:?}", c.args);
    let queue = volumes.iter().find(|v| v.empty_dir.is_some() || v.host_path.is_some()).expect("queue volume");
    assert!(mount_of(&queue.name).is_some());
    (config, ds)
}

/// Runs `infertel validate` on a config with the given environment.
fn validate(config: &str, env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("infertel.yaml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(infertel_bin())
        .arg("validate")
        .arg("--config")
        .arg(&path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "infertel validate:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let warnings = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!warnings.contains("not set"), "an env var the config uses is not provided: {warnings}");
}

fn env_of(ds: &DaemonSet) -> Vec<(String, String)> {
    let c = &ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0];
    c.env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| {
            let v = e.value.unwrap_or_else(|| format!("from-{}", e.name));
            (e.name, v)
        })
        .collect()
}

fn check_node_local_discovery(config: &str) {
    let v: serde_yaml::Value = serde_yaml::from_str(config).unwrap();
    let jobs = v["receivers"]["prometheus"]["config"]["scrape_configs"].as_sequence().unwrap();
    let names: Vec<&str> = jobs.iter().map(|j| j["job_name"].as_str().unwrap()).collect();
    assert_eq!(names, ["vllm", "dcgm"]);
    for j in jobs {
        let sd = &j["kubernetes_sd_configs"][0];
        assert_eq!(sd["role"].as_str(), Some("pod"));
        assert_eq!(sd["selectors"][0]["field"].as_str(), Some("spec.nodeName=${env:K8S_NODE_NAME}"));
    }
}

#[test]
fn base_renders_parses_and_validates() {
    let docs = kustomize(&deploy().join("kubernetes/base"));
    let (config, ds) = check_common(&docs);
    check_node_local_discovery(&config);
    let env = env_of(&ds);
    validate(&config, &env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>());
}

#[test]
fn elastic_overlay_renders_parses_and_validates() {
    let dir = deploy().join("kubernetes/overlays/elastic");
    let docs = kustomize(&dir);
    let (config, ds) = check_common(&docs);
    check_node_local_discovery(&config);
    let v: serde_yaml::Value = serde_yaml::from_str(&config).unwrap();
    let exp = &v["exporters"]["prometheusremotewrite/elastic"];
    let endpoint = exp["endpoint"].as_str().unwrap();
    assert!(endpoint.ends_with("/_prometheus/metrics/vllm/inference/api/v1/write"), "{endpoint}");
    assert_eq!(exp["headers"]["Authorization"].as_str(), Some("ApiKey ${env:ES_API_KEY}"));
    assert!(config.contains("# otlphttp/elastic:"), "the OTLP exporter is shipped as a commented block");
    // The key comes from the Secret the example documents.
    let c = &ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0];
    let key = c.env.as_ref().unwrap().iter().find(|e| e.name == "ES_API_KEY").expect("ES_API_KEY env");
    let sref = key.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
    let secret: Secret =
        serde_json::from_value(yaml_docs(&std::fs::read_to_string(dir.join("secret.example.yaml")).unwrap()).remove(0))
            .unwrap();
    assert_eq!(secret.metadata.name.as_deref(), Some(sref.name.as_str()));
    assert_eq!(secret.metadata.namespace, ds.metadata.namespace);
    assert!(secret.string_data.unwrap().contains_key(&sref.key));
    assert!(c.env.as_ref().unwrap().iter().any(|e| e.name == "ES_HOST" && e.value.is_some()));
    // The example Secret is never applied by the overlay.
    assert!(docs.iter().all(|d| d["kind"] != "Secret"));
    let env = env_of(&ds);
    validate(&config, &env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>());
}

#[test]
fn prometheus_overlay_renders_parses_and_validates() {
    let docs = kustomize(&deploy().join("kubernetes/overlays/prometheus"));
    let (config, ds) = check_common(&docs);
    check_node_local_discovery(&config);
    let v: serde_yaml::Value = serde_yaml::from_str(&config).unwrap();
    assert_eq!(v["exporters"]["prometheusremotewrite"]["endpoint"].as_str(), Some("${env:PROM_WRITE_URL}"));
    let env = env_of(&ds);
    let url = env.iter().find(|(k, _)| k == "PROM_WRITE_URL").expect("PROM_WRITE_URL set by the overlay");
    assert!(url.1.ends_with("/api/v1/write"));
    validate(&config, &env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>());
}

#[test]
fn victoriametrics_example_validates() {
    validate(
        &std::fs::read_to_string(repo_dir().join("config/victoriametrics.yaml")).unwrap(),
        &[("K8S_NODE_NAME", "n"), ("VM_URL", "http://vm:8428")],
    );
}

#[test]
fn alert_rules_pass_promtool_and_every_alert_has_a_test() {
    let promtool = require("promtool");
    let dir = deploy().join("alerts");
    for args in [["check", "rules", "infertel-rules.yaml"], ["test", "rules", "infertel-rules.test.yaml"]] {
        let out = Command::new(&promtool).args(args).current_dir(&dir).output().unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rules: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("infertel-rules.yaml")).unwrap()).unwrap();
    let tests: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("infertel-rules.test.yaml")).unwrap()).unwrap();
    let alerts: BTreeSet<String> = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().iter().map(|r| r["alert"].as_str().unwrap().to_string()))
        .collect();
    // A firing case (non-empty exp_alerts) per alert.
    let firing: BTreeSet<String> = tests["tests"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_sequence().unwrap().iter())
        .filter(|c| c["exp_alerts"].as_sequence().is_some_and(|a| !a.is_empty()))
        .map(|c| c["alertname"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(alerts.len(), 11, "{alerts:?}");
    assert_eq!(alerts, firing);
}

// ---- metric names -------------------------------------------------------

const PROMQL_KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "atan2",
];

/// Metric names a PromQL expression selects: string literals, label
/// matchers, ranges and grouping label lists are removed; what remains that
/// is an identifier not followed by `(` and not a keyword is a metric name.
fn promql_metric_names(expr: &str) -> BTreeSet<String> {
    let mut cleaned = String::new();
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    let mut quote: Option<char> = None;
    for ch in expr.chars() {
        if let Some(q) = quote {
            if ch == q {
                quote = None;
            }
            continue;
        }
        match ch {
            '"' | '\'' | '`' if depth_brace == 0 => quote = Some(ch),
            '"' | '\'' | '`' => quote = Some(ch),
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            _ => {
                cleaned.push(ch);
                continue;
            }
        }
        cleaned.push(' ');
    }
    let grouping = regex::Regex::new(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)").unwrap();
    let cleaned = grouping.replace_all(&cleaned, " ");
    let token = regex::Regex::new(r"[A-Za-z0-9_:.$]+").unwrap();
    let mut out = BTreeSet::new();
    for m in token.find_iter(&cleaned) {
        let t = m.as_str();
        if t.starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == '$')
            || PROMQL_KEYWORDS.contains(&t.to_ascii_lowercase().as_str())
        {
            continue;
        }
        if cleaned[m.end()..].trim_start().starts_with('(') {
            continue; // a function or aggregation
        }
        out.insert(t.to_string());
    }
    out
}

#[test]
fn the_promql_extractor_finds_names_and_only_names() {
    let got = promql_metric_names(
        r#"histogram_quantile(0.95, sum by (le, pod) (rate(vllm:a_bucket{namespace=~"$namespace",x="y(z)"}[$__rate_interval]))) / on (pod) group_left (node) b_total offset 1d > 0.5 unless count without (x) (c)"#,
    );
    assert_eq!(got, BTreeSet::from(["vllm:a_bucket".to_string(), "b_total".into(), "c".into()]));
}

fn esql_metric_names(q: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"`?metrics\.([A-Za-z_:][A-Za-z0-9_:]*)`?").unwrap();
    re.captures_iter(q).map(|c| c[1].to_string()).collect()
}

/// Every name something real produces.
fn known_names() -> BTreeSet<String> {
    let mut known = BTreeSet::new();
    let mut add_exposition = |body: &str| {
        let exp =
            infertel_exposition::parse(body.as_bytes(), infertel_exposition::Format::PrometheusText).expect("parses");
        for s in &exp.samples {
            known.insert(s.name.to_string());
        }
    };
    let fixtures = shared_dir().join("fixtures/real");
    let mut n = 0;
    for e in std::fs::read_dir(&fixtures).unwrap_or_else(|e| panic!("{}: {e}", fixtures.display())) {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "prom") {
            add_exposition(&std::fs::read_to_string(&p).unwrap());
            n += 1;
        }
    }
    assert!(n >= 9);
    let mut sim = infertel_simulator::Simulator::new(infertel_simulator::SimConfig::default(), 1_774_000_000.0);
    sim.advance_to(1_774_000_120.0);
    add_exposition(&sim.render_vllm());
    add_exposition(&sim.render_dcgm());
    // Self-metrics (crates/pipeline/src) and derived names (anywhere under
    // crates/): `infertel_*` string literals; histograms with their series.
    let lit = regex::Regex::new(r#""(infertel_[a-z0-9_]+)""#).unwrap();
    let mut stack = vec![repo_dir().join("crates")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "target") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                for c in lit.captures_iter(&std::fs::read_to_string(&p).unwrap()) {
                    for suffix in ["", "_bucket", "_sum", "_count"] {
                        known.insert(format!("{}{suffix}", &c[1]));
                    }
                }
            }
        }
    }
    known
}

#[test]
fn dashboards_alerts_and_keda_use_only_real_metric_names() {
    let known = known_names();
    for must in [
        "vllm:time_to_first_token_seconds_bucket",
        "DCGM_FI_DEV_POWER_USAGE",
        "infertel_exporter_dropped_samples_total",
    ] {
        assert!(known.contains(must), "{must} missing from the known names: the sources are not read");
    }
    assert!(!known.contains("vllm:made_up_total"));
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new(); // name -> where
    let mut note = |names: BTreeSet<String>, place: &str| {
        assert!(!names.is_empty(), "{place}: no metric name found");
        for n in names {
            used.entry(n).or_default().insert(place.to_string());
        }
    };

    // Grafana: every target expression and every variable query, of the
    // raw-name vLLM dashboard and of the derived-series one for every server.
    let label_values = regex::Regex::new(r"label_values\(([^,){]+)").unwrap();
    for file in ["infertel-vllm.json", "infertel-servers.json"] {
        let dash: Value =
            serde_json::from_str(&std::fs::read_to_string(deploy().join("dashboards/grafana").join(file)).unwrap())
                .unwrap();
        let panels = dash["panels"].as_array().unwrap();
        assert!(panels.len() >= 10, "{file}");
        for p in panels {
            for t in p["targets"].as_array().unwrap() {
                let expr = t["expr"].as_str().unwrap();
                note(promql_metric_names(expr), &format!("grafana {file} panel {:?}", p["title"]));
                if file == "infertel-servers.json" {
                    assert!(
                        expr.contains("inference_server=~\"$inference_server\""),
                        "{file}: {expr} selects by server"
                    );
                }
            }
        }
        for v in dash["templating"]["list"].as_array().unwrap() {
            if let Some(def) = v["definition"].as_str() {
                note(label_values.captures_iter(def).map(|c| c[1].trim().to_string()).collect(), "grafana variable");
            }
        }
    }
    // Alerts.
    let rules: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(deploy().join("alerts/infertel-rules.yaml")).unwrap()).unwrap();
    for g in rules["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            note(promql_metric_names(r["expr"].as_str().unwrap()), &format!("alert {}", r["alert"].as_str().unwrap()));
        }
    }
    // KEDA.
    let so = yaml_docs(&std::fs::read_to_string(deploy().join("keda/scaledobject-vllm.yaml")).unwrap()).remove(0);
    assert_eq!(so["kind"], "ScaledObject");
    let triggers = so["spec"]["triggers"].as_array().unwrap();
    let queries: Vec<&str> = triggers.iter().map(|t| t["metadata"]["query"].as_str().unwrap()).collect();
    assert_eq!(queries.len(), 2);
    for q in &queries {
        note(promql_metric_names(q), "keda trigger");
    }
    assert!(
        queries.iter().any(|q| q.contains("vllm:kv_cache_usage_perc"))
            && queries.iter().any(|q| q.contains("vllm:num_requests_waiting"))
    );
    // Kibana: ES|QL over metrics.<name> fields, vLLM's raw names and the
    // derived series for every server.
    for file in ["infertel-vllm.ndjson", "infertel-servers.ndjson"] {
        let ndjson = std::fs::read_to_string(deploy().join("dashboards/kibana").join(file)).unwrap();
        let objects: Vec<Value> = ndjson
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("ndjson line"))
            .collect();
        let ids: BTreeSet<&str> = objects.iter().map(|o| o["id"].as_str().unwrap()).collect();
        let dashboards: Vec<&Value> = objects.iter().filter(|o| o["type"] == "dashboard").collect();
        assert_eq!(dashboards.len(), 1);
        for r in dashboards[0]["references"].as_array().unwrap() {
            assert!(ids.contains(r["id"].as_str().unwrap()), "dashboard references a missing object {r}");
        }
        let panels: Vec<Value> =
            serde_json::from_str(dashboards[0]["attributes"]["panelsJSON"].as_str().unwrap()).unwrap();
        assert_eq!(panels.len(), dashboards[0]["references"].as_array().unwrap().len());
        for o in objects.iter().filter(|o| o["type"] == "search") {
            let src: Value =
                serde_json::from_str(o["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"].as_str().unwrap())
                    .unwrap();
            let q = src["query"]["esql"].as_str().expect("ES|QL query");
            assert!(q.contains("metrics-vllm.prometheus-inference"), "{q}");
            if file == "infertel-servers.ndjson" {
                assert!(q.contains("labels.inference_server"), "{file}: {q} splits by server");
            }
            note(esql_metric_names(q), &format!("kibana {file} {}", o["attributes"]["title"]));
        }
    }

    // What the issue asks the dashboards to show.
    let all: BTreeSet<&str> = used.keys().map(String::as_str).collect();
    for needed in [
        "vllm:request_prefill_time_seconds_sum",
        "vllm:request_decode_time_seconds_sum",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:kv_cache_usage_perc",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "vllm:prefix_cache_hits_total",
        "vllm:request_success_total",
        "vllm:request_queue_time_seconds_bucket",
        "http_requests_total",
    ] {
        assert!(all.contains(needed), "no dashboard, alert or trigger uses {needed}");
    }
    let unknown: Vec<String> =
        used.iter().filter(|(n, _)| !known.contains(*n)).map(|(n, w)| format!("{n} (in {w:?})")).collect();
    assert!(unknown.is_empty(), "names nothing real produces:\n{}", unknown.join("\n"));
}

// ---- Dockerfile ---------------------------------------------------------

#[test]
fn dockerfile_is_multi_stage_pinned_non_root_and_matches_the_manifests() {
    let text = std::fs::read_to_string(deploy().join("Dockerfile")).unwrap();
    // Join continuation lines, drop comments.
    let joined = text.replace("\\\n", " ");
    let lines: Vec<(String, String)> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (i, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            (i.to_ascii_uppercase(), rest.trim().to_string())
        })
        .collect();
    let known = ["FROM", "WORKDIR", "COPY", "RUN", "LABEL", "USER", "EXPOSE", "ENTRYPOINT", "CMD", "ENV", "ARG"];
    for (i, _) in &lines {
        assert!(known.contains(&i.as_str()), "unexpected instruction {i}");
    }
    let froms: Vec<&String> = lines.iter().filter(|(i, _)| i == "FROM").map(|(_, r)| r).collect();
    assert!(froms.len() >= 2, "multi-stage");
    let mut stages = Vec::new();
    for f in &froms {
        let image = f.split_whitespace().next().unwrap();
        let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
        assert!(!tag.is_empty() && tag != "latest" && !tag.contains('/'), "unpinned base image {image}");
        if let Some((_, name)) = f.split_once(" AS ").or_else(|| f.split_once(" as ")) {
            stages.push(name.trim().to_string());
        }
    }
    let last_from = lines.iter().rposition(|(i, _)| i == "FROM").unwrap();
    let final_stage = &lines[last_from..];
    assert!(froms.last().unwrap().contains("distroless"), "final stage is distroless");
    let user = final_stage.iter().find(|(i, _)| i == "USER").map(|(_, r)| r.clone()).expect("USER in the final stage");
    let uid: i64 = user.split(':').next().unwrap().parse().expect("numeric USER (runAsNonRoot needs one)");
    assert_ne!(uid, 0);
    for (i, r) in final_stage {
        if i == "COPY" {
            let from = r
                .split_whitespace()
                .find_map(|w| w.strip_prefix("--from="))
                .expect("final stage copies only from a build stage");
            assert!(stages.iter().any(|s| s == from), "COPY --from={from}: no such stage");
        }
    }
    let entry = final_stage.iter().find(|(i, _)| i == "ENTRYPOINT").expect("ENTRYPOINT").1.clone();
    let entry: Vec<String> = serde_json::from_str(&entry).expect("ENTRYPOINT in exec (JSON) form");
    let cmd: Vec<String> =
        serde_json::from_str(&final_stage.iter().find(|(i, _)| i == "CMD").expect("CMD").1).expect("CMD in JSON form");
    assert_eq!(cmd[0], "run");
    assert!(lines.iter().any(|(i, r)| i == "RUN" && r.contains("cargo build --release --locked -p infertel")));
    // Build-context sources exist and are not excluded by .dockerignore.
    let ignore = std::fs::read_to_string(repo_dir().join(".dockerignore")).unwrap();
    for (i, r) in &lines[..last_from] {
        if i == "COPY" {
            let parts: Vec<&str> = r.split_whitespace().filter(|w| !w.starts_with("--")).collect();
            for src in &parts[..parts.len() - 1] {
                assert!(repo_dir().join(src).exists(), "COPY {src}: not in the repository");
                assert!(
                    !ignore.lines().any(|l| l.trim_end_matches('/') == src.trim_end_matches('/')),
                    "COPY {src}: excluded by .dockerignore"
                );
            }
        }
    }
    // Files the binary embeds must be inside what the build stage copies.
    let copied: Vec<String> = lines[..last_from]
        .iter()
        .filter(|(i, _)| i == "COPY")
        .flat_map(|(_, r)| {
            r.split_whitespace().filter(|w| !w.starts_with("--")).map(str::to_string).collect::<Vec<_>>()
        })
        .collect();
    assert!(copied.iter().any(|c| c == "config"), "the binary embeds config/demo.yaml");

    // The DaemonSet agrees with the image: uid, ports, command.
    let docs = kustomize(&deploy().join("kubernetes/base"));
    let ds: DaemonSet = one(&docs, "DaemonSet");
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.security_context.unwrap().run_as_user, Some(uid));
    let c = &pod.containers[0];
    assert!(c.command.is_none(), "the image's ENTRYPOINT {entry:?} is used");
    let exposed: BTreeSet<i32> = final_stage
        .iter()
        .filter(|(i, _)| i == "EXPOSE")
        .flat_map(|(_, r)| r.split_whitespace().map(|p| p.parse::<i32>().unwrap()).collect::<Vec<_>>())
        .collect();
    let ports: BTreeSet<i32> = c.ports.clone().unwrap().iter().map(|p| p.container_port).collect();
    assert_eq!(exposed, ports);
}
