//! `exporters.prometheusremotewrite`: keys shaped like the Collector's
//! exporter of the same name.

use crate::exporters::probe::StartupCheck;
use crate::exporters::shared::{QueueConfig, RetryConfig};
use crate::primitives::{AuthRef, ExporterTls};
use crate::primitives::{ByteSize, Duration};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Headers the protocol owns; user `headers` may not override them.
pub const RESERVED_HEADERS: &[&str] =
    &["content-encoding", "content-type", "x-prometheus-remote-write-version", "user-agent"];

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RemoteWriteConfig {
    /// The full write URL, e.g. `http://prometheus:9090/api/v1/write`.
    pub endpoint: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub auth: Option<AuthRef>,
    #[serde(default)]
    pub tls: ExporterTls,
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    /// Upper bound on one request's uncompressed protobuf size.
    #[serde(default = "default_max_batch")]
    pub max_batch_size_bytes: ByteSize,
    /// Send HELP/TYPE/UNIT as WriteRequest metadata.
    #[serde(default)]
    pub send_metadata: bool,
    /// Labels added to every series that does not have them.
    #[serde(default)]
    pub external_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub retry_on_failure: RetryConfig,
    #[serde(default, alias = "remote_write_queue")]
    pub sending_queue: QueueConfig,
    /// Probe the endpoint before starting: `fail` (default), `warn`, `off`.
    #[serde(default)]
    pub startup_check: StartupCheck,
    /// Also write one real `infertel_canary` sample at startup; default on
    /// for Elasticsearch endpoints (`/_prometheus/` in the path).
    pub canary: Option<bool>,
    /// Prometheus' `write_relabel_configs`: applied to every series before
    /// it is queued; a series they drop is not sent (counted in
    /// `infertel_exporter_relabel_dropped_samples_total`).
    #[serde(default)]
    pub write_relabel_configs: Vec<infertel_relabel::RelabelConfig>,
    /// An HTTP proxy for the requests (`http://host:port`).
    pub proxy_url: Option<String>,
    #[serde(default = "yes")]
    pub follow_redirects: bool,
    /// `false`: HTTP/1.1 only (over TLS, HTTP/2 is otherwise negotiated).
    #[serde(default = "yes")]
    pub enable_http2: bool,
    /// The Collector's `namespace`: `NAMESPACE_` before every metric name
    /// (and its metadata); default none.
    #[serde(default)]
    pub namespace: String,
    /// The Collector's keys for data converted from OTLP. Scraped data
    /// already has Prometheus names and its resource (`job`, `instance`)
    /// on every series, so they are accepted for pasted configs and change
    /// nothing; where the Collector would send something else, validate
    /// says so (see [`RemoteWriteConfig::warnings`]).
    #[serde(default)]
    pub resource_to_telemetry_conversion: Toggle,
    pub add_metric_suffixes: Option<bool>,
    pub target_info: Option<Toggle>,
    #[serde(default)]
    pub export_created_metric: Toggle,
    /// The Collector's request concurrency within one batch; here requests
    /// are sent by `sending_queue.num_consumers` consumers.
    pub max_batch_request_parallelism: Option<usize>,
    /// The Collector's write-ahead log: here the persistent sending queue in
    /// `wal.directory` (as `sending_queue.storage` with a `file_storage`
    /// there would be), which survives restarts and outages the same way.
    pub wal: Option<WalConfig>,
}

/// `wal`, mapped onto the persistent queue.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WalConfig {
    /// Where the queue lives; required.
    pub directory: std::path::PathBuf,
    /// The Collector reads this many WAL entries per batch; accepted (the
    /// queue replays oldest first in deliveries of at most 20,000 samples).
    pub buffer_size: Option<u64>,
    /// The Collector truncates its WAL this often; accepted (the queue drops
    /// what the backend acknowledged as it goes).
    pub truncate_frequency: Option<Duration>,
}

impl WalConfig {
    /// The queue storage it stands for: 1 GiB per exporter (the
    /// `file_storage` default), fsync once a second.
    pub fn storage(&self) -> crate::exporters::persistent::Storage {
        crate::exporters::persistent::Storage {
            directory: self.directory.clone(),
            max_bytes: 1 << 30,
            fsync: crate::exporters::persistent::Fsync::Interval,
        }
    }
}

/// `{enabled: bool}`, as the Collector writes its switches.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Toggle {
    #[serde(default)]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_max_batch() -> ByteSize {
    ByteSize(3_000_000)
}

impl RemoteWriteConfig {
    pub fn client_options(&self) -> crate::http::ClientOptions {
        crate::http::ClientOptions {
            proxy_url: self.proxy_url.clone(),
            follow_redirects: self.follow_redirects,
            enable_http2: self.enable_http2,
            env_proxy: true,
        }
    }

    pub fn canary(&self) -> bool {
        self.canary.unwrap_or(self.endpoint.contains("/_prometheus/"))
    }

    /// Keys accepted from Collector configs whose Collector behaviour
    /// differs from what infertel does with scraped data: `(key, why)`.
    pub fn warnings(&self) -> Vec<(&'static str, String)> {
        let mut w = Vec::new();
        if self.add_metric_suffixes == Some(false) {
            w.push((
                "add_metric_suffixes",
                "infertel sends scraped names as they are, with their _total and unit suffixes; the Collector would strip them here (names are only changed by write_relabel_configs or namespace)".to_string(),
            ));
        }
        if self.target_info.as_ref().is_some_and(|t| t.enabled) {
            w.push((
                "target_info",
                "no target_info series is sent: scraped series carry their target's job and instance labels already"
                    .to_string(),
            ));
        }
        if self.export_created_metric.enabled {
            w.push((
                "export_created_metric",
                "no _created series is made from start times: the _created series a target exposes are sent as scraped"
                    .to_string(),
            ));
        }
        if let Some(n) = self.max_batch_request_parallelism.filter(|n| *n != self.sending_queue.num_consumers) {
            w.push((
                "max_batch_request_parallelism",
                format!(
                    "requests are sent by sending_queue.num_consumers ({}) consumers; set that instead of {n}",
                    self.sending_queue.num_consumers
                ),
            ));
        }
        w
    }

    pub fn validate(&self) -> Result<(), String> {
        if let Some(w) = &self.wal {
            if w.directory.as_os_str().is_empty() {
                return Err("wal.directory: required (where the persistent queue lives)".into());
            }
            if self.sending_queue.storage.is_some() {
                return Err("wal and sending_queue.storage both put the queue on disk: keep one".into());
            }
        }
        if !self.namespace.is_empty() && !infertel_relabel::is_valid_label_name(&self.namespace) {
            return Err(format!(
                "namespace {:?}: must be a valid metric name prefix ([a-zA-Z_][a-zA-Z0-9_]*)",
                self.namespace
            ));
        }
        if let Some((_, after)) = self.endpoint.split_once("://")
            && (after.is_empty() || after.starts_with('/'))
        {
            return Err(format!("endpoint {:?}: no host (is an environment variable in it empty?)", self.endpoint));
        }
        let url = url::Url::parse(&self.endpoint).map_err(|e| format!("endpoint {:?}: {e}", self.endpoint))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(format!("endpoint {:?}: scheme must be http or https", self.endpoint));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("endpoint {:?}: no host", self.endpoint));
        }
        for k in self.headers.keys() {
            if RESERVED_HEADERS.contains(&k.to_ascii_lowercase().as_str()) {
                return Err(format!("headers: {k:?} is set by the remote-write protocol and cannot be overridden"));
            }
            reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("headers: {k:?} is not a valid header name"))?;
        }
        for (k, v) in &self.headers {
            reqwest::header::HeaderValue::from_str(v)
                .map_err(|_| format!("headers: value of {k:?} has characters not allowed in a header"))?;
        }
        if self.max_batch_size_bytes.0 == 0 {
            return Err("max_batch_size_bytes must be greater than 0".into());
        }
        if self.auth.is_some() && self.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) {
            return Err("set either auth.authenticator or an Authorization header, not both".into());
        }
        infertel_relabel::Relabeler::new(&self.write_relabel_configs)
            .map_err(|e| format!("write_relabel_configs: {e}"))?;
        if let Some(p) = self.proxy_url.as_deref().filter(|p| !p.is_empty())
            && url::Url::parse(p).is_err()
        {
            return Err(format!("proxy_url {p:?}: not a URL"));
        }
        self.retry_on_failure.validate()?;
        self.sending_queue.validate()?;
        self.tls.settings().validate_present().map_err(|e| format!("tls: {e}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod collector_keys {
    #[test]
    fn collector_keys_load_and_say_where_they_differ() {
        // The prometheusremotewrite block of the Collector's own README
        // examples, with every key below set.
        let text = r#"
receivers: {prometheus: {config: {scrape_configs: [{job_name: a, static_configs: [{targets: ['h:1']}]}]}}}
exporters:
  prometheusremotewrite:
    endpoint: "https://my-cortex:7900/api/v1/push"
    namespace: gpu
    resource_to_telemetry_conversion:
      enabled: true
    add_metric_suffixes: false
    target_info:
      enabled: true
    export_created_metric:
      enabled: true
    max_batch_request_parallelism: 10
service:
  pipelines: {metrics: {receivers: [prometheus], exporters: [prometheusremotewrite]}}
"#;
        let l = crate::load_str("c.yaml", text, &|_| None).unwrap_or_else(|r| panic!("{:?}", r.errors));
        let w: Vec<(String, Option<usize>)> = l.warnings.iter().map(|w| (w.path.clone(), w.line)).collect();
        let at =
            |k: &str| w.iter().find(|(p, _)| p == &format!("exporters.prometheusremotewrite.{k}")).and_then(|x| x.1);
        assert_eq!(at("add_metric_suffixes"), Some(9), "{w:?}");
        assert_eq!(at("target_info"), Some(10), "{w:?}");
        assert_eq!(at("export_created_metric"), Some(12), "{w:?}");
        assert_eq!(at("max_batch_request_parallelism"), Some(14), "{w:?}");
        assert!(at("resource_to_telemetry_conversion").is_none() && at("namespace").is_none(), "{w:?}");
        let bad = text.replace("namespace: gpu", "namespace: 9gpu");
        let errors = crate::load_str("c.yaml", &bad, &|_| None).err().map(|r| r.errors).unwrap_or_default();
        assert!(errors.iter().any(|e| e.message.contains("namespace")), "{errors:?}");
    }
}
