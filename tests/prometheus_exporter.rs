//! End to end: the Collector's `prometheus` (pull) exporter in the real
//! binary, scraped by a real Prometheus. The oracle is Prometheus itself:
//! it scrapes the real vLLM v0.17 and dcgm-exporter captures directly too,
//! and every series it stores from the capture must come back through
//! infertel's page with the same labels and value: once as the text format
//! (`namespace`, `const_labels`), once as OpenMetrics (`enable_open_metrics`,
//! which Prometheus 2.42 asks for first, with `send_timestamps`). Family
//! types are compared in Prometheus' metadata API. Then faults in sequence:
//! a series leaves the target (gone from the page and stale in Prometheus),
//! `validate` runs beside the agent on its config (nothing bound), and a
//! reload that changes the namespace keeps the port and the values.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;
use support::*;

const VLLM: &str = "vllm-v0.17-cncf-k8s-ai-conformance-kops.prom";
const DCGM: &str = "dcgm-exporter-kops-l4.prom";

fn capture(name: &str) -> String {
    std::fs::read_to_string(shared_dir().join("fixtures/real").join(name)).expect("capture")
}

type Row = (BTreeMap<String, String>, String);

/// Series of `rows` keyed by their labels without `drop`, the name stripped of `prefix`.
fn keyed(rows: Vec<Row>, prefix: &str, drop: &[&str]) -> BTreeMap<String, String> {
    rows.into_iter()
        .map(|(mut l, v)| {
            for d in drop {
                l.remove(*d);
            }
            if let Some(n) = l.get_mut("__name__") {
                *n = n.strip_prefix(prefix).unwrap_or(n).to_string();
            }
            (format!("{l:?}"), v)
        })
        .collect()
}

fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new("curl").arg("-s").arg("-D").arg("-").args(args).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_lowercase(), body.to_string())
}

fn config(namespace: &str, targets: &str, p1: u16, p2: u16) -> String {
    format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 900ms}}
      scrape_configs:
        - {{job_name: vllm, metrics_path: /vllm, static_configs: [{{targets: ['{targets}']}}]}}
        - {{job_name: dcgm, metrics_path: /dcgm, static_configs: [{{targets: ['{targets}']}}]}}
exporters:
  prometheus:
    endpoint: 127.0.0.1:{p1}
    namespace: {namespace}
    const_labels: {{cluster: east}}
    metric_expiration: 1m
  prometheus/om:
    endpoint: 127.0.0.1:{p2}
    enable_open_metrics: true
    send_timestamps: true
    resource_to_telemetry_conversion: {{enabled: true}}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheus, prometheus/om]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#
    )
}

#[test]
fn prometheus_reads_through_the_exporter_what_it_reads_from_the_target() {
    let vllm = capture(VLLM);
    let dcgm = capture(DCGM);
    let targets = Targets::start();
    targets.set("/vllm", TEXT_004, vllm.as_str());
    targets.set("/dcgm", TEXT_004, dcgm.as_str());
    let (p1, p2) = (free_port(), free_port());
    let agent = Agent::start(&config("gpu", &targets.addr.to_string(), p1, p2));
    let t = targets.addr;
    let prom = Prometheus::start(&format!(
        "  - {{job_name: vllm_direct, metrics_path: /vllm, static_configs: [{{targets: ['{t}']}}]}}\n\
         \x20 - {{job_name: dcgm_direct, metrics_path: /dcgm, static_configs: [{{targets: ['{t}']}}]}}\n\
         \x20 - {{job_name: via_text, honor_labels: true, static_configs: [{{targets: ['127.0.0.1:{p1}']}}]}}\n\
         \x20 - {{job_name: via_om, honor_labels: true, static_configs: [{{targets: ['127.0.0.1:{p2}']}}]}}\n"
    ));

    for (direct, job) in [("vllm_direct", "vllm"), ("dcgm_direct", "dcgm")] {
        let want = wait_until(&format!("{direct} in Prometheus"), Duration::from_secs(30), || {
            let r = prom.query(&format!(r#"{{job="{direct}", __name__!~"up|scrape_.*"}}"#));
            (r.len() > 20).then_some(r)
        });
        let want = keyed(want, "", &["job", "instance"]);
        // Text format: namespace before every name, the constant label on
        // every series, honor_labels keeps the job infertel scraped.
        let text = wait_until(&format!("{job} through the text page"), Duration::from_secs(30), || {
            let r = keyed(
                prom.query(&format!(r#"{{__name__=~"gpu_.+", job="{job}"}}"#)),
                "gpu_",
                &["job", "instance", "cluster"],
            );
            want.keys().all(|k| r.contains_key(k)).then_some(r)
        });
        for (k, v) in &want {
            assert_eq!(text.get(k), Some(v), "{k} through the text page");
        }
        let clusters: BTreeSet<String> = prom
            .query(&format!(r#"{{__name__=~"gpu_.+", job="{job}"}}"#))
            .into_iter()
            .map(|(l, _)| l.get("cluster").cloned().unwrap_or_default())
            .collect();
        assert_eq!(clusters, BTreeSet::from(["east".to_string()]));
        // OpenMetrics: the names as scraped.
        let om = wait_until(&format!("{job} through the OpenMetrics page"), Duration::from_secs(30), || {
            let r = keyed(prom.query(&format!(r#"{{__name__!~"gpu_.+", job="{job}"}}"#)), "", &["job", "instance"]);
            want.keys().all(|k| r.contains_key(k)).then_some(r)
        });
        for (k, v) in &want {
            assert_eq!(om.get(k), Some(v), "{k} through the OpenMetrics page");
        }
    }

    // Every family's type, as Prometheus recorded it per target: from the
    // capture and from the text page.
    let target_types = |job: &str| -> BTreeMap<String, String> {
        let sel = urlencode(&format!(r#"{{job="{job}"}}"#));
        let (code, body) =
            http_get(&format!("{}/api/v1/targets/metadata?match_target={sel}", prom.url())).expect("metadata");
        assert_eq!(code, 200, "{body}");
        let md: serde_json::Value = serde_json::from_str(&body).expect("json");
        md["data"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| (m["metric"].as_str().unwrap_or("").to_string(), m["type"].as_str().unwrap_or("").to_string()))
            .collect()
    };
    let direct: BTreeMap<String, String> =
        target_types("vllm_direct").into_iter().chain(target_types("dcgm_direct")).collect();
    let via = target_types("via_text");
    let mut compared = 0;
    for line in vllm.lines().chain(dcgm.lines()).filter_map(|l| l.strip_prefix("# TYPE ")) {
        let (family, _) = line.split_once(' ').expect("TYPE line");
        let family_has_samples = vllm.lines().chain(dcgm.lines()).any(|l| !l.starts_with('#') && l.starts_with(family));
        if !family_has_samples {
            continue;
        }
        let want = direct.get(family).unwrap_or_else(|| panic!("Prometheus has no metadata for {family}"));
        assert_eq!(via.get(&format!("gpu_{family}")), Some(want), "type of {family} through the text page");
        compared += 1;
    }
    assert!(compared > 60, "{compared} families compared");

    // The pages themselves: content types, gzip, OpenMetrics' EOF.
    let (head, _) = curl(&["--compressed", &format!("http://127.0.0.1:{p1}/metrics")]);
    assert!(
        head.contains("content-type: text/plain; version=0.0.4") && head.contains("content-encoding: gzip"),
        "{head}"
    );
    let (head, body) =
        curl(&["-H", "Accept: application/openmetrics-text; version=1.0.0", &format!("http://127.0.0.1:{p2}/metrics")]);
    assert!(head.contains("content-type: application/openmetrics-text; version=1.0.0"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{}", &body[body.len().saturating_sub(200)..]);
    assert!(
        body.contains("# TYPE vllm:prompt_tokens counter\n"),
        "OpenMetrics names the counter family without _total"
    );
    // Without enable_open_metrics the text format is served whatever is asked.
    let (head, _) =
        curl(&["-H", "Accept: application/openmetrics-text; version=1.0.0", &format!("http://127.0.0.1:{p1}/metrics")]);
    assert!(head.contains("content-type: text/plain; version=0.0.4"), "{head}");

    // A series leaves the target: its stale marker takes it off the page,
    // and Prometheus' next scrape of the page marks it stale.
    let gone = "vllm:num_requests_running";
    let fewer: String = vllm.lines().filter(|l| !l.starts_with(gone)).map(|l| format!("{l}\n")).collect();
    assert!(!prom.query(&format!("gpu_{gone}")).is_empty());
    targets.set("/vllm", TEXT_004, fewer.as_str());
    wait_until("the series off the page", Duration::from_secs(20), || {
        let (_, page) = curl(&[&format!("http://127.0.0.1:{p1}/metrics")]);
        (!page.contains(&format!("\ngpu_{gone}{{")) && page.contains("gpu_vllm:prompt_tokens_total")).then_some(())
    });
    wait_until("the series stale in Prometheus", Duration::from_secs(20), || {
        prom.query(&format!("gpu_{gone}")).is_empty().then_some(())
    });

    // validate beside the running agent, on its config: nothing binds.
    let out = Command::new(infertel_bin())
        .arg("validate")
        .arg("--config")
        .arg(agent.config_path())
        .output()
        .expect("validate");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    // A reload that changes the exporter keeps its port and its values.
    agent.write_config(&config("gpu2", &targets.addr.to_string(), p1, p2));
    agent.reload();
    wait_until("the new namespace on the same port", Duration::from_secs(20), || {
        let (_, page) = curl(&[&format!("http://127.0.0.1:{p1}/metrics")]);
        (page.contains("gpu2_vllm:prompt_tokens_total{") && !page.contains("\ngpu_vllm")).then_some(())
    });
    assert!(!agent.proc.log_text().contains("cannot listen"), "{}", agent.proc.log_text());
    let m = agent.self_metrics();
    assert!(m.sum("infertel_exporter_prometheus_series", &[("exporter", "prometheus")]) > 100.0);
}
