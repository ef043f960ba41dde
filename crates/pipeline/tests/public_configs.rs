//! The Prometheus configurations public projects ship (copied into
//! `tests/data/public/` with their source in a header; `SOURCES.md` lists
//! them), loaded as a user would load them: a server's file under
//! `receivers.prometheus.config` of a pipeline, an agent's file (one with
//! `remote_write`) as it is. Each loads, with every job it declares, or
//! fails only where infertel cannot do what it asks (native histograms,
//! remote write 2.0), with the key and line.

use infertel_pipeline::config::load_str;
use infertel_pipeline::receivers::ReceiverConfig;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/public");

fn pipeline_with(prometheus: &str) -> String {
    let indented: String = prometheus.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "receivers:\n  prometheus:\n    config:\n{indented}exporters:\n  prometheusremotewrite:\n    endpoint: http://127.0.0.1:9090/api/v1/write\nservice:\n  pipelines:\n    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}\n"
    )
}

/// The jobs a file declares, counted from its text (uncommented
/// `job_name:` keys under `scrape_configs`, before `alerting`), not by the
/// loader.
fn declared_jobs(text: &str) -> usize {
    let mut in_alerting = false;
    let mut n = 0;
    for line in text.lines() {
        let t = line.trim_start();
        if !line.starts_with(' ') && !line.starts_with('-') && t.ends_with(':') {
            in_alerting = t == "alerting:";
        }
        let t = t.strip_prefix("- ").unwrap_or(t);
        if !in_alerting && t.starts_with("job_name:") {
            n += 1;
        }
    }
    n
}

enum Want {
    /// Loads, with these warning fragments among the warnings.
    Loads(&'static [&'static str]),
    /// Refused, each fragment in some error (with a line).
    Refused(&'static [&'static str]),
}

fn files() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().to_string(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    out.sort();
    out
}

#[test]
fn every_public_config_loads_or_is_refused_as_it_must_be() {
    use Want::*;
    const RULES: &str = "ignored: infertel evaluates no rules and sends no alerts";
    let want: &[(&str, Want)] = &[
        ("NVIDIA-deepops-gpu-metrics.yml", Loads(&[])),
        ("NVIDIA-deepops-prometheus.yml", Loads(&[RULES])),
        (
            "VictoriaMetrics-VictoriaMetrics-promscrape-testdata.yml",
            Loads(&["follow_redirects has no effect on the Kubernetes API client"]),
        ),
        ("VictoriaMetrics-VictoriaMetrics-scrape-config-files.yml", Loads(&["no jobs added from it"])),
        ("VictoriaMetrics-VictoriaMetrics-vm-cluster.yml", Loads(&[])),
        ("VictoriaMetrics-VictoriaMetrics-vm-single.yml", Loads(&[])),
        ("ai-dynamo-dynamo-metrics.yml", Loads(&[])),
        ("ai-dynamo-dynamo-observability.yml", Loads(&[RULES])),
        ("grafana-mimir-microservices.yml", Refused(&["send_native_histograms"])),
        ("grafana-mimir-monolithic.yml", Refused(&["send_native_histograms"])),
        ("grafana-mimir-play.yml", Loads(&[RULES])),
        ("grafana-mimir-prom-ha-pair-1.yml", Refused(&["send_native_histograms"])),
        ("grafana-mimir-prometheus-rw2.yml", Refused(&["send_native_histograms", "remote write 2.0 is not supported"])),
        (
            "prometheus-community-helm-charts-prometheus.yml",
            Loads(&[RULES, "tls_config.ca_file /var/run/secrets/kubernetes.io/serviceaccount/ca.crt is not there"]),
        ),
        ("prometheus-prometheus-agent.yml", Loads(&[])),
        ("prometheus-prometheus-example.yml", Loads(&[RULES, "classic histogram buckets are scraped instead"])),
        (
            "prometheus-prometheus-kubernetes.yml",
            Loads(&["authorization.credentials_file /var/run/secrets/kubernetes.io/serviceaccount/token is not there"]),
        ),
        // Prometheus' OTLP-ingestion example: nothing to scrape and nowhere to
        // send (an OTLP receiver is issue 14's).
        ("prometheus-prometheus-otlp.yml", Refused(&["at least one scrape config is needed"])),
        ("prometheus-prometheus-testdata-k8s-selectors-endpoints.yml", Loads(&[])),
        ("prometheus-prometheus-testdata-k8s-selectors-pod.yml", Loads(&["without it, it has no effect"])),
        ("prometheus-prometheus-testdata-scrape-interval-larger.yml", Loads(&[])),
        ("ray-project-ray-prometheus.yml", Loads(&[])),
        ("sgl-project-sglang-monitoring.yml", Loads(&[])),
    ];
    let all = files();
    assert_eq!(all.len(), want.len(), "every file in {DIR} has an expectation");
    let mut report = Vec::new();
    for (name, text) in &all {
        let (_, w) = want.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name}: no expectation"));
        // An agent's file runs as it is; a server's goes under the receiver.
        let agent = text.lines().any(|l| l.starts_with("remote_write:"));
        let input = if agent { text.clone() } else { pipeline_with(text) };
        let got = load_str(name, &input, &|_| None);
        match (w, got) {
            (Loads(frags), Ok(loaded)) => {
                let warnings: Vec<String> = loaded.warnings.iter().map(|w| w.message.clone()).collect();
                // In a pod the service account's files are there: no warning then.
                let in_pod = std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount").exists();
                for f in frags.iter().filter(|f| !(in_pod && f.contains("/var/run/secrets"))) {
                    assert!(warnings.iter().any(|w| w.contains(f)), "{name}: no warning with {f:?}: {warnings:#?}");
                }
                for w in &loaded.warnings {
                    assert!(w.line.is_some(), "{name}: warning without a line: {w:?}");
                }
                let ReceiverConfig::Prometheus(p) = &loaded.config.receivers.0[0].1 else {
                    panic!("a prometheus receiver")
                };
                let jobs = p.config.scrape_configs.len();
                let files_jobs = if name.contains("scrape-config-files") { 1 } else { declared_jobs(text) };
                assert_eq!(jobs, files_jobs, "{name}: every declared job is loaded");
                report.push(format!("{name}: loads, {jobs} jobs, {} warnings", warnings.len()));
            }
            (Refused(frags), Err(r)) => {
                for f in *frags {
                    let e = r.errors.iter().find(|e| e.message.contains(f) || e.path.contains(f));
                    let e = e.unwrap_or_else(|| panic!("{name}: no error with {f:?}: {:#?}", r.errors));
                    assert!(e.line.is_some() || f.contains("scrape config"), "{name}: error without a line: {e:?}");
                }
                report.push(format!(
                    "{name}: refused: {}",
                    r.errors.iter().map(|e| e.message.as_str()).collect::<Vec<_>>().join("; ")
                ));
            }
            (Loads(_), Err(r)) => panic!("{name}: refused: {:#?}", r.errors),
            (Refused(_), Ok(_)) => panic!("{name}: loaded, but must be refused"),
        }
    }
    eprintln!("{}", report.join("\n"));
}

/// A server's file given as it is (no remote_write) is explained, not
/// reported as an unknown key.
#[test]
fn a_servers_file_run_as_it_is_says_what_is_missing() {
    for (name, text) in files().iter().filter(|(_, t)| !t.lines().any(|l| l.starts_with("remote_write:"))) {
        if name.contains("otlp") {
            continue;
        }
        let r = load_str(name, text, &|_| None).err().unwrap_or_else(|| panic!("{name}: loaded without remote_write"));
        assert!(
            r.errors.iter().any(|e| e.message.contains("has no remote_write: nothing would leave the agent")),
            "{name}: {:#?}",
            r.errors
        );
    }
}
