//! The OpenTelemetry Collector configurations public projects ship for
//! metrics (copied into `tests/data/collector/` with their source in a
//! header; `SOURCES.md` lists them), loaded as a user would paste them.
//! Each loads, or fails only on what is out of this agent's scope, and the
//! test says which for each file: other signals (traces and logs pipelines
//! and their receivers) and vendor components (cloud exporters, auth and
//! receivers for one platform). Every error names its key and line.

use infertel_pipeline::config::load_str;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/collector");

/// `(path of the error, words its message holds)`: why each is out of scope
/// is in the comment beside it.
type Expected = &'static [(&'static str, &'static str)];

const TRACES: (&str, &str) = ("service.pipelines.traces", "infertel carries metrics only");
const LOGS: (&str, &str) = ("service.pipelines.logs", "infertel carries metrics only");
const JAEGER: (&str, &str) = ("receivers.jaeger", "traces or logs");
const ZIPKIN: (&str, &str) = ("receivers.zipkin", "traces or logs");

const CASES: &[(&str, Expected)] = &[
    // Azure Monitor's managed Prometheus agent: loads (its api_server and
    // the unused components are warnings).
    ("azure-prometheus-collector-default.yaml", &[]),
    // AWS ADOT on ECS into Amazon Managed Prometheus (sigv4auth loads): an
    // ECS-only receiver, and the ECS detector (cloud detectors: not built).
    (
        "adot-ecs-amp.yaml",
        &[
            ("receivers.awsecscontainermetrics", "unknown receiver type"),
            ("processors.resourcedetection.detectors[2]", "detector \"ecs\" is not built yet"),
        ],
    ),
    // AWS ADOT on EKS scraping into AMP: every component loads (sigv4auth,
    // pprof, zpages, health_check); only its `<YOUR_ENDPOINT>` placeholder,
    // the user's to fill, is refused as the URL it is not.
    ("adot-eks-amp-daemonset.yaml", &[("exporters.prometheusremotewrite", "\"<YOUR_ENDPOINT>\": relative URL")]),
    // Azure App Service sidecar: the Azure Monitor exporter (vendor), and
    // traces and logs pipelines.
    (
        "azure-app-service-sidecar-azuremonitor.yaml",
        &[("exporters.azuremonitor", "unknown exporter type"), TRACES, LOGS],
    ),
    // Google-built Collector: the GCP detector (cloud detectors: not built),
    // transform (OTTL statements, not built), Google exporters and auth
    // (vendor), traces and logs.
    (
        "google-built-config-standard.yaml",
        &[
            ("processors.resourcedetection.detectors[0]", "detector \"gcp\" is not built yet"),
            ("processors.transform/collision", "unknown processor type \"transform\""),
            ("processors.transform/set_project_id", "unknown processor type \"transform\""),
            ("exporters.googlecloud", "unknown exporter type"),
            ("exporters.googlemanagedprometheus", "unknown exporter type"),
            ("extensions.googleclientauth", "unknown extension type"),
            LOGS,
            TRACES,
        ],
    ),
    // The Helm chart's DaemonSet presets: trace receivers, host and cluster
    // metrics receivers (the errors say what to scrape instead), the leader
    // elector for the cluster receiver, traces and logs.
    (
        "helm-daemonset-cluster-metrics.yaml",
        &[
            ("extensions.k8s_leader_elector/k8s_cluster", "unknown extension type"),
            JAEGER,
            ("receivers.k8s_cluster", "kube-state-metrics"),
            ZIPKIN,
            LOGS,
            TRACES,
        ],
    ),
    ("helm-daemonset-hostmetrics.yaml", &[("receivers.hostmetrics", "node_exporter"), JAEGER, ZIPKIN, LOGS, TRACES]),
    // otelcol-contrib's default config: trace receivers, traces, logs.
    ("otelcol-contrib-default.yaml", &[JAEGER, ZIPKIN, TRACES, LOGS]),
    // SGLang's monitoring example: traces and logs.
    ("sglang-monitoring-opentelemetry.yaml", &[TRACES, LOGS]),
    // vLLM production-stack's collector is for traces only.
    ("vllm-production-stack-otel-collector.yaml", &[TRACES, ("service.pipelines", "no pipeline defined")]),
];

fn env(k: &str) -> Option<String> {
    let v = match k {
        "AWS_REGION" => "us-east-1",
        "AWS_PROMETHEUS_ENDPOINT" => {
            "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write"
        }
        "MY_POD_IP" => "10.0.0.5",
        "AZMON_CLUSTER_LABEL" => "aks-east",
        _ => return None,
    };
    Some(v.to_string())
}

#[test]
fn every_public_collector_config_loads_or_fails_only_out_of_scope() {
    let mut files: Vec<String> = std::fs::read_dir(DIR)
        .expect("test data")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), CASES.len(), "every file has its expected outcome: {files:?}");
    for (file, expected) in CASES {
        let text = std::fs::read_to_string(format!("{DIR}/{file}")).expect("read");
        assert!(text.starts_with("# Source: https://github.com/"), "{file}: the source is recorded");
        let errors = match load_str(file, &text, &env) {
            Ok(_) => Vec::new(),
            Err(r) => r.errors,
        };
        let got: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.path, e.message)).collect();
        assert_eq!(errors.len(), expected.len(), "{file}: {got:#?}");
        for (path, words) in *expected {
            let e = errors
                .iter()
                .find(|e| e.path == *path && e.message.contains(words))
                .unwrap_or_else(|| panic!("{file}: no error at {path} saying {words:?}: {got:#?}"));
            if *path != "service.pipelines" {
                assert!(e.line.is_some(), "{file}: {path} has its line: {e}");
            }
        }
    }
}

/// ADOT's EKS example with its placeholders filled as its README asks
/// loads whole: sigv4auth, pprof, zpages and health_check included.
#[test]
fn adot_eks_amp_loads_once_its_placeholders_are_filled() {
    let text = std::fs::read_to_string(format!("{DIR}/adot-eks-amp-daemonset.yaml")).expect("read");
    let text = text
        .replace(
            "<YOUR_ENDPOINT>",
            "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
        )
        .replace("<YOUR_REGION>", "us-east-1");
    let loaded = load_str("adot-eks-amp-daemonset.yaml", &text, &env)
        .unwrap_or_else(|r| panic!("{:#?}", r.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>()));
    let listed = &loaded.config.service.extensions;
    for e in ["pprof", "zpages", "health_check", "sigv4auth"] {
        assert!(listed.iter().any(|l| l == e), "{e} in {listed:?}");
    }
}
