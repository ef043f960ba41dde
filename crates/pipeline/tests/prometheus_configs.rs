//! Prometheus configurations as projects ship them, pasted into infertel
//! (issue 13): vLLM's own example, whose global `scrape_interval: 5s` has
//! no `scrape_timeout` (Prometheus defaults it to min(10s, interval));
//! a server's `rule_files`, `alerting` and `storage` (accepted, warned);
//! `remote_write` in the receiver (refused, with the way out); a bare
//! Prometheus file runs as agent mode would, its `remote_write` keys mapped
//! onto exporters (and refused, by key and line, where infertel cannot
//! honour them); without `remote_write` it is explained.

use infertel_pipeline::config::load_str;
use infertel_pipeline::exporters::ExporterConfig;
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
    let ReceiverConfig::Prometheus(p) = &loaded.config.receivers.0[0].1 else { panic!("a prometheus receiver") };
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
        let ReceiverConfig::Prometheus(p) = &loaded.config.receivers.0[0].1 else { panic!("a prometheus receiver") };
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
fn a_bare_prometheus_file_without_remote_write_is_explained() {
    let r = load_str("prometheus.yaml", &vllm_example(), &|_| None).err().expect("refused");
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    let e = &r.errors[0];
    assert!(e.message.contains("no remote_write: nothing would leave"), "{}", e.message);
    assert!(e.message.contains("receivers.prometheus.config"), "{}", e.message);
    assert!(!e.message.contains("unknown field"), "{}", e.message);
    assert!(e.line.is_some(), "names the line");
}

/// vLLM's example as a whole file with a `remote_write` added: it runs as
/// Prometheus agent mode would, one receiver and one exporter per entry,
/// with Prometheus' defaults (30 s remote timeout, metadata sent, retry
/// until delivered).
#[test]
fn a_bare_prometheus_file_with_remote_write_runs_as_agent_mode() {
    let file = format!(
        "{}
remote_write:
  - url: http://127.0.0.1:9090/api/v1/write
",
        vllm_example()
    );
    let loaded = load_str("prometheus.yaml", &file, &|_| None).unwrap_or_else(|r| panic!("{:?}", r.errors));
    let c = &loaded.config;
    let ReceiverConfig::Prometheus(p) = &c.receivers.0[0].1 else { panic!("a prometheus receiver") };
    assert_eq!(p.config.scrape_configs.len(), 1);
    assert_eq!(p.config.scrape_configs[0].job_name, "vllm");
    let (id, e) = &c.exporters.0[0];
    assert_eq!(id.to_string(), "prometheusremotewrite/0");
    let ExporterConfig::PrometheusRemoteWrite(rw) = e else { panic!("{e:?}") };
    assert_eq!(rw.endpoint, "http://127.0.0.1:9090/api/v1/write");
    assert_eq!(rw.timeout.get(), std::time::Duration::from_secs(30), "Prometheus' remote_timeout default");
    assert!(rw.send_metadata, "Prometheus sends metadata by default");
    assert_eq!(rw.retry_on_failure.max_elapsed_time.map(|d| d.get()), Some(std::time::Duration::ZERO));
    let p = &c.service.pipelines["metrics"];
    assert_eq!((p.receivers.clone(), p.exporters.clone()), (vec!["prometheus".to_string()], vec![id.to_string()]));
}

/// Every `remote_write` key Prometheus 2.42 documents, mapped: names, auth
/// (basic_auth with password_file, authorization with credentials_file,
/// bearer_token), tls_config, queue_config, metadata_config; the keys with
/// no effect warned about by name and line; a server's rule_files warned.
#[test]
fn remote_write_keys_map_onto_the_exporter() {
    let file = "global: {scrape_interval: 15s}\nrule_files: [a.yml]\nscrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['h:1']}]\nremote_write:\n  - url: https://mimir:8080/api/v1/push\n    name: mimir\n    remote_timeout: 10s\n    headers: {X-Scope-OrgID: team-a}\n    basic_auth: {username: u, password_file: /var/run/secrets/pw}\n    tls_config: {ca_file: /etc/ssl/certs/ca-certificates.crt, server_name: mimir.internal, insecure_skip_verify: false}\n    proxy_url: http://proxy:3128\n    follow_redirects: false\n    enable_http2: false\n    write_relabel_configs:\n      - {source_labels: [__name__], regex: 'go_.*', action: drop}\n    queue_config: {capacity: 2500, max_shards: 4, min_shards: 1, max_samples_per_send: 500, batch_send_deadline: 2s, min_backoff: 50ms, max_backoff: 2s, retry_on_http_429: true}\n    metadata_config: {send: false, send_interval: 1m}\n  - url: http://vm:8428/api/v1/write\n    authorization: {type: Bearer, credentials_file: /var/run/secrets/token}\n  - url: http://es:9200/_prometheus/api/v1/write\n    bearer_token: abcdefgh\n";
    let loaded = load_str("prometheus.yml", file, &|_| None).unwrap_or_else(|r| panic!("{:?}", r.errors));
    let c = &loaded.config;
    let mut ids: Vec<String> = c.exporters.0.iter().map(|(i, _)| i.to_string()).collect();
    ids.sort();
    assert_eq!(ids, ["prometheusremotewrite/1", "prometheusremotewrite/2", "prometheusremotewrite/mimir"]);
    let rw = |id: &str| match &c.exporters.0.iter().find(|(i, _)| i.to_string() == id).unwrap().1 {
        ExporterConfig::PrometheusRemoteWrite(r) => r.clone(),
        e => panic!("{e:?}"),
    };
    let m = rw("prometheusremotewrite/mimir");
    assert_eq!(m.timeout.get(), std::time::Duration::from_secs(10));
    assert_eq!(m.headers.get("X-Scope-OrgID").map(String::as_str), Some("team-a"));
    assert_eq!(m.auth.as_ref().map(|a| a.authenticator.as_str()), Some("basicauth/mimir"));
    assert_eq!(m.tls.ca_file.as_deref(), Some(std::path::Path::new("/etc/ssl/certs/ca-certificates.crt")));
    assert_eq!(m.tls.server_name_override.as_deref(), Some("mimir.internal"));
    assert_eq!(m.proxy_url.as_deref(), Some("http://proxy:3128"));
    assert!(!m.follow_redirects && !m.enable_http2);
    assert_eq!(m.write_relabel_configs.len(), 1);
    assert_eq!(m.sending_queue.num_consumers, 4, "max_shards: 4");
    assert_eq!(m.sending_queue.flush_timeout.get(), std::time::Duration::from_secs(2));
    assert_eq!(m.retry_on_failure.initial_interval.get(), std::time::Duration::from_millis(50));
    assert_eq!(m.retry_on_failure.max_interval.get(), std::time::Duration::from_secs(2));
    assert!(!m.send_metadata);
    assert_eq!(rw("prometheusremotewrite/1").auth.map(|a| a.authenticator), Some("bearertokenauth/1".into()));
    assert_eq!(rw("prometheusremotewrite/2").auth.map(|a| a.authenticator), Some("bearertokenauth/2".into()));
    let mut ext: Vec<String> = c.extensions.0.iter().map(|(i, _)| i.to_string()).collect();
    ext.sort();
    assert_eq!(ext, ["basicauth/mimir", "bearertokenauth/1", "bearertokenauth/2"]);
    let mut listed = c.service.extensions.clone();
    listed.sort();
    assert_eq!(listed, ext);
    for key in ["rule_files", "capacity", "min_shards", "max_samples_per_send", "send_interval"] {
        let w = loaded
            .warnings
            .iter()
            .find(|w| w.path.ends_with(key))
            .unwrap_or_else(|| panic!("{key}: {:?}", loaded.warnings));
        assert!(w.line.is_some(), "{key}: names the line");
    }
}

/// What infertel cannot do is refused, each naming the key and its line,
/// all in one run.
#[test]
fn remote_write_keys_infertel_cannot_honour_are_errors_with_their_line() {
    let file = "scrape_configs: []\nremote_write:\n  - url: https://aps/api/v1/remote_write\n    sigv4: {region: eu-west-1}\n  - url: http://a/api/v1/write\n    oauth2: {client_id: x, token_url: http://t}\n  - url: http://b/api/v1/write\n    send_native_histograms: true\n  - url: http://c/api/v1/write\n    protobuf_message: io.prometheus.write.v2.Request\n  - url: http://d/api/v1/write\n    no_such_key: 1\nremote_read: [{url: http://r}]\n";
    let r = load_str("prometheus.yml", file, &|_| None).err().expect("refused");
    for (key, line) in [
        ("sigv4", 4),
        ("oauth2", 6),
        ("send_native_histograms", 8),
        ("protobuf_message", 10),
        ("no_such_key", 12),
        ("remote_read", 13),
    ] {
        let e = r.errors.iter().find(|e| e.path.ends_with(key)).unwrap_or_else(|| panic!("{key}: {:?}", r.errors));
        assert_eq!(e.line, Some(line), "{key}: {e:?}");
    }
    assert_eq!(r.errors.len(), 6, "{:?}", r.errors);
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

/// `scrape_config_files` as Prometheus loads them: globs relative to the
/// file's directory, each file's `scrape_configs` joining the file's own
/// jobs; a literal path that does not exist is warned about (Prometheus
/// adds nothing, silently); a file with anything but `scrape_configs`, and
/// a job name used twice, are errors naming them.
#[test]
fn scrape_config_files_join_the_jobs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("jobs")).unwrap();
    let job =
        |name: &str| format!("scrape_configs:\n  - job_name: {name}\n    static_configs: [{{targets: ['h:1']}}]\n");
    std::fs::write(dir.path().join("jobs/a.yml"), job("a")).unwrap();
    std::fs::write(dir.path().join("jobs/b.yml"), job("b")).unwrap();
    std::fs::write(dir.path().join("extra.yml"), job("c")).unwrap();
    let main = format!(
        "{}scrape_config_files: ['jobs/*.yml', extra.yml, missing.yml]\nremote_write: [{{url: 'http://127.0.0.1:9/api/v1/write'}}]\n",
        job("own")
    );
    let path = dir.path().join("prometheus.yml");
    let origin = path.display().to_string();
    let loaded = load_str(&origin, &main, &|_| None).unwrap_or_else(|r| panic!("{:?}", r.errors));
    let ReceiverConfig::Prometheus(p) = &loaded.config.receivers.0[0].1 else { panic!("a prometheus receiver") };
    let names: Vec<&str> = p.config.scrape_configs.iter().map(|s| s.job_name.as_str()).collect();
    assert_eq!(names, ["own", "a", "b", "c"]);
    assert!(
        loaded.warnings.iter().any(|w| w.message.contains("missing.yml: no such file") && w.line == Some(4)),
        "{:?}",
        loaded.warnings
    );
    // Also inside a pipeline config's receiver.
    let pipeline = pipeline_with(&format!("{}scrape_config_files: ['jobs/*.yml']\n", job("own")));
    let loaded = load_str(&origin, &pipeline, &|_| None).unwrap_or_else(|r| panic!("{:?}", r.errors));
    let ReceiverConfig::Prometheus(p) = &loaded.config.receivers.0[0].1 else { panic!("a prometheus receiver") };
    assert_eq!(p.config.scrape_configs.len(), 3);
    // A job name twice, and a file with another section.
    std::fs::write(dir.path().join("jobs/dup.yml"), job("own")).unwrap();
    let r = load_str(&origin, &main, &|_| None).err().expect("duplicate refused");
    assert!(
        r.errors.iter().any(|e| e.message.contains("multiple scrape configs with job name \"own\"")),
        "{:?}",
        r.errors
    );
    std::fs::write(dir.path().join("jobs/dup.yml"), "global: {scrape_interval: 1s}\n").unwrap();
    let r = load_str(&origin, &main, &|_| None).err().expect("other section refused");
    assert!(
        r.errors.iter().any(|e| e.message.contains("dup.yml: only scrape_configs may be in a scrape config file")),
        "{:?}",
        r.errors
    );
}

/// Every global key Prometheus 2.42+ accepts loads; the per-job limits
/// default to the global ones (a job's 0 takes the global value, as in
/// Prometheus 2.45+); what infertel does differently is warned by key.
#[test]
fn global_keys_load_and_limits_default_to_them() {
    let prom = "global:\n  scrape_interval: 15s\n  sample_limit: 1000\n  target_limit: 50\n  label_limit: 30\n  label_name_length_limit: 100\n  label_value_length_limit: 200\n  body_size_limit: 10MB\n  keep_dropped_targets: 10\n  scrape_protocols: [PrometheusProto, OpenMetricsText1.0.0, PrometheusText0.0.4]\n  query_log_file: /prometheus/query.log\n  external_labels: {cluster: a}\nscrape_configs:\n  - job_name: inherits\n    static_configs: [{targets: ['h:1']}]\n  - job_name: own\n    sample_limit: 5\n    scrape_native_histograms: true\n    scrape_classic_histograms: true\n    fallback_scrape_protocol: PrometheusText0.0.4\n    static_configs: [{targets: ['h:1']}]\n";
    let loaded = load_str("c.yaml", &pipeline_with(prom), &|_| None).unwrap_or_else(|r| panic!("{:?}", r.errors));
    let ReceiverConfig::Prometheus(p) = &loaded.config.receivers.0[0].1 else { panic!("a prometheus receiver") };
    let g = &p.config.global;
    let inherits = p.config.scrape_configs[0].limits(g);
    assert_eq!(
        (inherits.sample, inherits.target, inherits.label, inherits.label_name_length, inherits.label_value_length),
        (1000, 50, 30, 100, 200)
    );
    assert_eq!(inherits.body_size, 10 * 1024 * 1024, "base 2");
    assert_eq!(p.config.scrape_configs[1].limits(g).sample, 5);
    for key in ["query_log_file", "scrape_protocols", "scrape_native_histograms"] {
        assert!(
            loaded.warnings.iter().any(|w| w.path.ends_with(key) && w.line.is_some()),
            "{key}: {:?}",
            loaded.warnings
        );
    }
    let bad = prom.replace("[PrometheusProto,", "[Protobuf,");
    let r = load_str("c.yaml", &pipeline_with(&bad), &|_| None).err().expect("unknown protocol refused");
    assert!(r.errors.iter().any(|e| e.message.contains("unknown protocol \"Protobuf\"")), "{:?}", r.errors);
}

/// The Accept header for `scrape_protocols`, as Prometheus 3's
/// `acceptHeader` (scrape/scrape.go) writes it for the same list: weights
/// from 0.6 down (five known protocols), `*/*` last. The protobuf format is
/// left out (infertel parses the text formats).
#[test]
fn accept_header_follows_prometheus() {
    use infertel_pipeline::receivers::prometheus::config::accept_header;
    let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        accept_header(&p(&["OpenMetricsText1.0.0", "OpenMetricsText0.0.1", "PrometheusText0.0.4"])),
        "application/openmetrics-text;version=1.0.0;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.3"
    );
    assert_eq!(
        accept_header(&p(&["PrometheusProto", "PrometheusText0.0.4"])),
        "text/plain;version=0.0.4;q=0.6,*/*;q=0.5"
    );
}

/// A discovery mechanism infertel lacks is named with its line and the way
/// to feed its targets in, not "unknown field".
#[test]
fn unsupported_discovery_is_named_with_the_way_out() {
    let prom = "scrape_configs:\n  - job_name: c\n    consul_sd_configs: [{server: 'consul:8500'}]\n  - job_name: e\n    ec2_sd_configs: [{region: eu-west-1}]\nremote_write: [{url: 'http://127.0.0.1:9/api/v1/write'}]\n";
    let r = load_str("prometheus.yml", prom, &|_| None).err().expect("refused");
    assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
    assert!(r.errors[0].message.starts_with("consul service discovery is not supported"), "{:?}", r.errors[0]);
    assert_eq!(r.errors[0].line, Some(3));
    assert!(r.errors[1].message.contains("file_sd_configs") && r.errors[1].line == Some(5), "{:?}", r.errors[1]);
    assert!(r.errors.iter().all(|e| !e.message.contains("unknown field")));
}

/// YAML anchors and merge keys (`<<: *defaults`), as Prometheus configs use
/// them for shared job settings, resolve as in Prometheus' YAML library.
#[test]
fn yaml_merge_keys_resolve() {
    let prom = "scrape_configs:\n  - &defaults\n    job_name: a\n    scrape_interval: 5s\n    metrics_path: /stats\n    honor_labels: true\n    static_configs: [{targets: ['h:1']}]\n  - <<: *defaults\n    job_name: b\n    metrics_path: /other\n    static_configs: [{targets: ['h:2']}]\nremote_write: [{url: 'http://127.0.0.1:9/api/v1/write'}]\n";
    let loaded = load_str("prometheus.yml", prom, &|_| None).unwrap_or_else(|r| panic!("{:?}", r.errors));
    let ReceiverConfig::Prometheus(p) = &loaded.config.receivers.0[0].1 else { panic!("a prometheus receiver") };
    let b = &p.config.scrape_configs[1];
    assert_eq!(b.job_name, "b");
    assert_eq!(b.metrics_path, "/other", "an explicit key wins over the merged one");
    assert!(b.honor_labels, "merged from the anchor");
    assert_eq!(b.interval(&p.config.global), std::time::Duration::from_secs(5));
}

/// `external_labels` expand `${VAR}` and `$VAR` from the environment, as
/// Prometheus does with `--enable-feature=expand-external-labels`.
#[test]
fn external_labels_expand_the_environment() {
    let file = "global:\n  external_labels: {cluster: \"${CLUSTER}\", region: \"$REGION\", node: \"gpu-$NODE_ID\", none: \"x$UNSET\"}\nscrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['h:1']}]\nremote_write:\n  - url: http://127.0.0.1:9/api/v1/write\n";
    let env = |k: &str| match k {
        "CLUSTER" => Some("c1".to_string()),
        "REGION" => Some("eu-west".to_string()),
        "NODE_ID" => Some("7".to_string()),
        _ => None,
    };
    let loaded = load_str("p.yml", file, &env).unwrap_or_else(|r| panic!("{:?}", r.errors));
    let ReceiverConfig::Prometheus(p) = &loaded.config.receivers.0[0].1 else { panic!("a prometheus receiver") };
    let l = &p.config.global.external_labels;
    assert_eq!(
        (l["cluster"].as_str(), l["region"].as_str(), l["node"].as_str(), l["none"].as_str()),
        ("c1", "eu-west", "gpu-7", "x")
    );
}
