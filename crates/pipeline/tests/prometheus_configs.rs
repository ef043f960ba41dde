//! Prometheus configurations as projects ship them, pasted into infertel
//! (issue 13): vLLM's own example, whose global `scrape_interval: 5s` has
//! no `scrape_timeout` (Prometheus defaults it to min(10s, interval));
//! a server's `rule_files`, `alerting` and `storage` (accepted, warned);
//! `remote_write` in the receiver (refused, with the way out); a bare
//! Prometheus file where a pipeline config is expected (explained).

use infertel_pipeline::config::load_str;
use infertel_pipeline::receivers::ReceiverConfig;

fn vllm_example() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/vllm-production-monitoring-prometheus.yaml"
    ))
    .unwrap()
}

/// The file indented under `receivers.prometheus.config` of a pipeline.
fn pipeline_with(prometheus: &str) -> String {
    let indented: String = prometheus.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "receivers:\n  prometheus:\n    config:\n{indented}exporters:\n  prometheusremotewrite:\n    endpoint: http://127.0.0.1:9090/api/v1/write\nservice:\n  pipelines:\n    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}\n"
    )
}

#[test]
fn vllms_example_loads_with_prometheus_default_timeout() {
    let loaded = load_str("vllm.yaml", &pipeline_with(&vllm_example()), &|_| None)
        .unwrap_or_else(|r| panic!("refused: {:?}", r.errors));
    let ReceiverConfig::Prometheus(p) = &loaded.config.receivers.0[0].1;
    let g = &p.config.global;
    assert_eq!(g.timeout(), std::time::Duration::from_secs(5), "min(10s, 5s)");
    assert_eq!(p.config.scrape_configs[0].timeout(g), std::time::Duration::from_secs(5));
}

#[test]
fn timeouts_default_as_in_prometheus_config_go() {
    for (global, job, want_global, want_job) in [
        ("scrape_interval: 30s", "", 10, 10),
        ("scrape_interval: 5s", "", 5, 5),
        ("scrape_interval: 30s", "scrape_interval: 2s", 10, 2),
        ("{scrape_interval: 30s, scrape_timeout: 20s}", "scrape_interval: 15s", 20, 15),
        ("{scrape_interval: 30s, scrape_timeout: 3s}", "scrape_interval: 15s", 3, 3),
    ] {
        let g = if global.starts_with('{') { global.to_string() } else { format!("{{{global}}}") };
        let j = if job.is_empty() { String::new() } else { format!("    {job}\n") };
        let prom =
            format!("global: {g}\nscrape_configs:\n  - job_name: a\n{j}    static_configs: [{{targets: ['h:1']}}]\n");
        let loaded = load_str("c.yaml", &pipeline_with(&prom), &|_| None)
            .unwrap_or_else(|r| panic!("{global} / {job}: {:?}", r.errors));
        let ReceiverConfig::Prometheus(p) = &loaded.config.receivers.0[0].1;
        let g = &p.config.global;
        assert_eq!(g.timeout().as_secs(), want_global, "{global}");
        assert_eq!(p.config.scrape_configs[0].timeout(g).as_secs(), want_job, "{global} / {job}");
    }
    let zero = "global: {scrape_interval: 30s, scrape_timeout: 0s}\nscrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['h:1']}]\n";
    let r = load_str("c.yaml", &pipeline_with(zero), &|_| None).err().expect("0s refused");
    assert!(r.errors.iter().any(|e| e.message.contains("scrape_timeout must be greater than 0")), "{:?}", r.errors);
}

#[test]
fn a_servers_sections_are_accepted_with_a_warning_and_remote_write_points_to_the_exporter() {
    let server = "global: {scrape_interval: 15s}\nrule_files: [alerts.yml]\nalerting:\n  alertmanagers: [{static_configs: [{targets: ['am:9093']}]}]\nstorage: {tsdb: {out_of_order_time_window: 10m}}\nscrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['h:1']}]\n";
    let loaded = load_str("c.yaml", &pipeline_with(server), &|_| None).unwrap_or_else(|r| panic!("{:?}", r.errors));
    for key in ["rule_files", "alerting", "storage"] {
        let w = loaded
            .warnings
            .iter()
            .find(|w| w.path.ends_with(key))
            .unwrap_or_else(|| panic!("{key}: {:?}", loaded.warnings));
        assert_eq!(w.message, "ignored: infertel evaluates no rules and sends no alerts");
        assert!(w.line.is_some(), "{key}: names the line");
    }
    let rw = format!("{server}remote_write: [{{url: 'http://m/api/v1/push'}}]\n");
    let r = load_str("c.yaml", &pipeline_with(&rw), &|_| None).err().expect("refused");
    assert!(
        r.errors.iter().any(
            |e| e.message.contains("exporters.prometheusremotewrite") && e.path.starts_with("receivers.prometheus")
        ),
        "{:?}",
        r.errors
    );
}

#[test]
fn a_bare_prometheus_file_is_recognised_and_explained() {
    let r = load_str("prometheus.yaml", &vllm_example(), &|_| None).err().expect("refused");
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    let e = &r.errors[0];
    assert!(e.message.contains("this is a Prometheus configuration"), "{}", e.message);
    assert!(e.message.contains("receivers.prometheus.config"), "{}", e.message);
    assert!(!e.message.contains("unknown field"), "{}", e.message);
    assert!(e.line.is_some(), "names the line");
}

/// A blackbox-exporter job in the shape its README documents (written here,
/// not copied from a file): the targets are URLs that relabel_configs move
/// to `__param_target`. Accepted as Prometheus
/// accepts it; without relabel_configs a URL target is still refused.
#[test]
fn a_blackbox_job_with_url_targets_loads() {
    let job = "global: {scrape_interval: 15s}\nscrape_configs:\n  - job_name: blackbox\n    metrics_path: /probe\n    params: {module: [http_2xx]}\n    static_configs: [{targets: ['http://prometheus.io', 'https://prometheus.io']}]\n    relabel_configs:\n      - {source_labels: [__address__], target_label: __param_target}\n      - {source_labels: [__param_target], target_label: instance}\n      - {target_label: __address__, replacement: '127.0.0.1:9115'}\n";
    load_str("c.yaml", &pipeline_with(job), &|_| None).unwrap_or_else(|r| panic!("{:?}", r.errors));
    let bare = "scrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['http://h:1/metrics']}]\n";
    let r = load_str("c.yaml", &pipeline_with(bare), &|_| None).err().expect("refused without relabeling");
    assert!(r.errors.iter().any(|e| e.message.contains("without scheme or path")), "{:?}", r.errors);
}
