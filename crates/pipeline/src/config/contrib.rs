//! Component types from the Collector that this build does not have under
//! that name: the snake_case names the Collector is moving to (contrib issue
//! #45339; the old names stay accepted there as deprecated aliases, and both
//! are accepted here), and, for well-known components infertel does not
//! build, what they do and what to use instead.

/// `(section, name, the type it is here)`: the Collector's newer names of
/// components infertel has.
pub const ALIASES: &[(&str, &str, &str)] = &[
    ("exporter", "prometheus_remote_write", "prometheusremotewrite"),
    ("exporter", "otlp_grpc", "otlp"),
    ("exporter", "otlp_http", "otlphttp"),
    ("processor", "resource_detection", "resourcedetection"),
    ("extension", "sigv4_auth", "sigv4auth"),
];

/// The type `kind` stands for in `section` (itself when it is no alias).
pub fn canonical<'a>(section: &str, kind: &'a str) -> &'a str {
    ALIASES.iter().find(|(s, n, _)| *s == section && *n == kind).map_or(kind, |(_, _, c)| c)
}

/// What to tell a user who names a well-known Collector component this build
/// does not have.
pub fn hint(section: &str, kind: &str) -> Option<&'static str> {
    const BESIDE: &str = "it handles traces or logs; infertel carries metrics: run a Collector beside it for that";
    Some(match (section, kind) {
        ("receiver", "hostmetrics" | "host_metrics") => {
            "host metrics: scrape node_exporter (or dcgm-exporter for GPUs) with the prometheus receiver"
        }
        ("receiver", "kubeletstats" | "kubelet_stats" | "k8s_cluster" | "k8scluster") => {
            "Kubernetes metrics: scrape the kubelet's /metrics/cadvisor or kube-state-metrics with the prometheus receiver (kubernetes_sd_configs role node or service)"
        }
        ("receiver", "prometheus_simple" | "prometheussimple") => {
            "use the prometheus receiver with one static_configs target"
        }
        (
            "receiver",
            "filelog" | "file_log" | "journald" | "syslog" | "jaeger" | "zipkin" | "fluentforward" | "tcplog"
            | "udplog",
        ) => BESIDE,
        ("processor", "k8sattributes" | "k8s_attributes") => {
            "pod metadata comes from kubernetes_sd_configs: its __meta_kubernetes_pod_* labels, kept with relabel_configs"
        }
        ("processor", "metricstransform" | "metrics_transform" | "transform") => {
            "rename metrics and labels with metric_relabel_configs (receiver) or write_relabel_configs (exporter); edit attributes with the attributes processor"
        }
        ("processor", "cumulativetodelta" | "cumulative_to_delta" | "deltatocumulative" | "delta_to_cumulative") => {
            "scraped counters are cumulative and remote write wants them so; there is nothing to convert"
        }
        ("processor", "groupbyattrs" | "group_by_attrs") => {
            "series are not grouped into resources here: nothing to regroup"
        }
        ("processor", "probabilistic_sampler" | "tail_sampling" | "span" | "redaction") => BESIDE,
        ("exporter", "logging") => "the logging exporter became debug in the Collector: write debug",
        ("exporter", "loki" | "elasticsearch" | "zipkin" | "jaeger" | "kafka") => BESIDE,
        ("extension", "oauth2client" | "oauth2_client" | "headers_setter" | "headerssetter") => {
            "set fixed credentials with bearertokenauth (token or filename, re-read on change) or exporter headers"
        }
        ("extension", "health_check_v2" | "healthcheckv2") => "use health_check",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    fn load(text: &str) -> Result<crate::config::Config, Vec<String>> {
        crate::load_str("c.yaml", text, &|_| None)
            .map(|l| l.config)
            .map_err(|r| r.errors.iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn the_collectors_snake_case_names_are_the_same_components() {
        let cfg = load(
            r#"
receivers: {prometheus: {config: {scrape_configs: [{job_name: a, static_configs: [{targets: ['h:1']}]}]}}}
exporters:
  prometheus_remote_write: {endpoint: "http://127.0.0.1:9090/api/v1/write"}
  otlp_grpc: {endpoint: "127.0.0.1:4317", tls: {insecure: true}}
  otlp_http/vm: {endpoint: "http://127.0.0.1:8428/opentelemetry"}
service:
  pipelines: {metrics: {receivers: [prometheus], exporters: [prometheus_remote_write, otlp_grpc, otlp_http/vm]}}
"#,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let kinds: Vec<&str> = cfg
            .exporters
            .0
            .iter()
            .map(|(_, c)| match c {
                crate::exporters::ExporterConfig::PrometheusRemoteWrite(_) => "prometheusremotewrite",
                crate::exporters::ExporterConfig::Otlp(_) => "otlp",
                crate::exporters::ExporterConfig::OtlpHttp(_) => "otlphttp",
                crate::exporters::ExporterConfig::Debug(_) => "debug",
                crate::exporters::ExporterConfig::Prometheus(_) => "prometheus",
                crate::exporters::ExporterConfig::File(_) => "file",
            })
            .collect();
        assert_eq!(kinds, ["prometheusremotewrite", "otlp", "otlphttp"]);
        assert_eq!(cfg.exporters.0[2].0.to_string(), "otlp_http/vm", "the id stays as written");
    }

    #[test]
    fn well_known_contrib_components_say_what_to_use() {
        let errors = load(
            r#"
receivers: {prometheus: {config: {scrape_configs: [{job_name: a, static_configs: [{targets: ['h:1']}]}]}}}
processors:
  k8sattributes: {}
  metricstransform: {}
exporters:
  debug: {}
service:
  pipelines: {metrics: {receivers: [prometheus], processors: [k8sattributes, metricstransform], exporters: [debug]}}
"#,
        )
        .err()
        .unwrap_or_default();
        let all = errors.join("\n");
        assert!(
            all.contains("unknown processor type \"k8sattributes\"") && all.contains("kubernetes_sd_configs"),
            "{all}"
        );
        assert!(all.contains("this build knows: attributes, batch"), "{all}");
        assert!(all.contains("metricstransform") && all.contains("metric_relabel_configs"), "{all}");
    }
}
