//! `receivers.prometheus.config`: a Prometheus configuration's `global` and
//! `scrape_configs`, with Prometheus's defaults, so a job can be pasted from
//! a `prometheus.yml`.

use crate::primitives::Duration;
use crate::primitives::TlsSettings;
use infertel_relabel::{RelabelConfig, Relabeler};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    #[serde(default)]
    pub config: PromConfig,
    /// The Collector receiver's keys beside `config`.
    /// `trim_metric_suffixes`: the Collector strips `_total` and unit
    /// suffixes when it converts to OTLP; here names stay as scraped (the
    /// OTLP exporters have their own `trim_metric_suffixes`). Warned about.
    #[serde(default)]
    pub trim_metric_suffixes: bool,
    /// Also report `scrape_timeout_seconds`, `scrape_sample_limit` and
    /// `scrape_body_size_bytes` per target, as Prometheus'
    /// `--enable-feature=extra-scrape-metrics`.
    #[serde(default)]
    pub report_extra_scrape_metrics: bool,
    /// The Collector's start time from `process_start_time_seconds`:
    /// accepted and warned about (start times come from each stream's
    /// first sample or its `_created` series).
    #[serde(default)]
    pub use_start_time_metric: bool,
    #[serde(default)]
    pub start_time_metric_regex: Option<String>,
    /// The Collector's Prometheus API server: accepted and warned about;
    /// the `status` extension serves `/api/v1/targets` and the config here.
    #[serde(default)]
    pub api_server: Option<ApiServer>,
}

#[derive(Debug, Deserialize, Default, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApiServer {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub server_config: Option<ApiServerConfig>,
}

#[derive(Debug, Deserialize, Default, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApiServerConfig {
    #[serde(default)]
    pub endpoint: String,
}

impl PrometheusConfig {
    /// The receiver-level keys whose Collector behaviour infertel does not
    /// have: `(key, why)`.
    pub fn receiver_warnings(&self) -> Vec<(&'static str, String)> {
        let mut w = Vec::new();
        if self.trim_metric_suffixes {
            w.push(("trim_metric_suffixes", "names stay as scraped here; set trim_metric_suffixes on the otlp/otlphttp exporter to trim them on the way out".to_string()));
        }
        if self.use_start_time_metric || self.start_time_metric_regex.is_some() {
            w.push(("use_start_time_metric", "start times come from each stream's first sample or its _created series here, not from process_start_time_seconds".to_string()));
        }
        if self.api_server.as_ref().is_some_and(|a| a.enabled) {
            w.push(("api_server", "not served by the receiver; the status extension serves /api/v1/targets, /api/v1/status/config and the status page".to_string()));
        }
        w
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PromConfig {
    #[serde(default)]
    pub global: GlobalConfig,
    #[serde(default)]
    pub scrape_configs: Vec<ScrapeConfig>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct GlobalConfig {
    pub scrape_interval: Duration,
    /// Unset: min(10s, `scrape_interval`), as Prometheus' `config.go`
    /// defaults it (see [`GlobalConfig::timeout`]).
    pub scrape_timeout: Option<Duration>,
    /// Accepted so pasted configs load; rules are not evaluated here.
    pub evaluation_interval: Option<Duration>,
    /// Added to every scraped series unless the series has the label.
    #[serde(deserialize_with = "infertel_relabel::scalar::string_map")]
    pub external_labels: BTreeMap<String, String>,
    /// Defaults of the per-job limits (a job's 0 takes these), as in
    /// Prometheus 2.45+.
    pub sample_limit: u64,
    pub target_limit: u64,
    pub label_limit: u64,
    pub label_name_length_limit: u64,
    pub label_value_length_limit: u64,
    pub body_size_limit: crate::primitives::duration::Base2Size,
    /// Kept for the status page in Prometheus; accepted.
    pub keep_dropped_targets: u64,
    /// The default of every job's `scrape_protocols`.
    pub scrape_protocols: Option<Vec<String>>,
    /// Prometheus server settings with no meaning for an agent (warned).
    pub query_log_file: Option<String>,
    pub scrape_failure_log_file: Option<String>,
    pub rule_query_offset: Option<Duration>,
    pub metric_name_validation_scheme: Option<String>,
    pub metric_name_escaping_scheme: Option<String>,
    pub always_scrape_classic_histograms: Option<bool>,
    pub convert_classic_histograms_to_nhcb: Option<bool>,
}

impl Default for GlobalConfig {
    fn default() -> Self {
        GlobalConfig {
            scrape_interval: Duration::from_secs(60),
            scrape_timeout: None,
            evaluation_interval: None,
            external_labels: BTreeMap::new(),
            sample_limit: 0,
            target_limit: 0,
            label_limit: 0,
            label_name_length_limit: 0,
            label_value_length_limit: 0,
            body_size_limit: Default::default(),
            keep_dropped_targets: 0,
            scrape_protocols: None,
            query_log_file: None,
            scrape_failure_log_file: None,
            rule_query_offset: None,
            metric_name_validation_scheme: None,
            metric_name_escaping_scheme: None,
            always_scrape_classic_histograms: None,
            convert_classic_histograms_to_nhcb: None,
        }
    }
}

/// Prometheus' scrape protocols and the media type each asks for
/// (`config.ScrapeProtocolsHeaders`).
pub const SCRAPE_PROTOCOLS: &[(&str, &str)] = &[
    ("PrometheusProto", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"),
    ("PrometheusText0.0.4", "text/plain;version=0.0.4"),
    ("PrometheusText1.0.0", "text/plain;version=1.0.0;escaping=allow-utf-8"),
    ("OpenMetricsText0.0.1", "application/openmetrics-text;version=0.0.1"),
    ("OpenMetricsText1.0.0", "application/openmetrics-text;version=1.0.0"),
];

/// The Accept header for `protocols`, as Prometheus' `acceptHeader` builds
/// it (weights from 0.N down, then `*/*`); the protobuf format, which
/// infertel does not parse, is left out (warned at load).
pub fn accept_header(protocols: &[String]) -> String {
    let mut weight = SCRAPE_PROTOCOLS.len() + 1;
    let mut vals = Vec::new();
    for p in protocols {
        if p == "PrometheusProto" {
            continue;
        }
        if let Some((_, h)) = SCRAPE_PROTOCOLS.iter().find(|(n, _)| n == p) {
            vals.push(format!("{h};q=0.{weight}"));
            weight -= 1;
        }
    }
    vals.push(format!("*/*;q=0.{weight}"));
    vals.join(",")
}

/// A header sent with every scrape (Prometheus' `http_headers`): its
/// `values`, `secrets` (the same, hidden from logs) and `files` (read at
/// each scrape).
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, default)]
pub struct HttpHeader {
    pub values: Vec<String>,
    pub secrets: Vec<String>,
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct ScrapeConfig {
    pub job_name: String,
    pub scrape_interval: Option<Duration>,
    pub scrape_timeout: Option<Duration>,
    #[serde(default = "default_metrics_path")]
    pub metrics_path: String,
    #[serde(default = "default_scheme")]
    pub scheme: String,
    #[serde(default)]
    pub params: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub honor_labels: bool,
    #[serde(default = "yes")]
    pub honor_timestamps: bool,
    #[serde(default)]
    pub static_configs: Vec<StaticConfig>,
    #[serde(default)]
    pub file_sd_configs: Vec<FileSdConfig>,
    #[serde(default)]
    pub kubernetes_sd_configs: Vec<super::discovery::kubernetes::KubernetesSdConfig>,
    #[serde(default)]
    pub http_sd_configs: Vec<HttpSdConfig>,
    #[serde(default)]
    pub dns_sd_configs: Vec<super::discovery::dns::DnsSdConfig>,
    pub basic_auth: Option<BasicAuth>,
    pub authorization: Option<Authorization>,
    pub bearer_token: Option<String>,
    pub bearer_token_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_config: TlsConfig,
    #[serde(default = "yes")]
    pub follow_redirects: bool,
    #[serde(default = "yes")]
    pub enable_http2: bool,
    pub proxy_url: Option<String>,
    /// Hosts not to proxy (comma-separated); accepted, warned.
    pub no_proxy: Option<String>,
    /// Use HTTP_PROXY/HTTPS_PROXY/NO_PROXY from the environment (Prometheus'
    /// default is not to).
    #[serde(default)]
    pub proxy_from_environment: bool,
    #[serde(default)]
    pub proxy_connect_header: BTreeMap<String, Vec<String>>,
    /// Extra request headers (Prometheus 2.55+ `http_headers`).
    #[serde(default)]
    pub http_headers: BTreeMap<String, HttpHeader>,
    /// The formats asked for, in order of preference (Accept header);
    /// unset: the global list, else infertel's default (text first).
    pub scrape_protocols: Option<Vec<String>>,
    /// The format assumed when a target sends no valid content type.
    pub fallback_scrape_protocol: Option<String>,
    /// Gzip requested (`Accept-Encoding: gzip`); false: identity.
    #[serde(default = "yes")]
    pub enable_compression: bool,
    /// Native-histogram keys: infertel scrapes classic buckets (warned when
    /// they ask for native histograms).
    pub scrape_classic_histograms: Option<bool>,
    pub always_scrape_classic_histograms: Option<bool>,
    pub scrape_native_histograms: Option<bool>,
    pub convert_classic_histograms_to_nhcb: Option<bool>,
    #[serde(default)]
    pub keep_dropped_targets: u64,
    /// 0 = no limit.
    #[serde(default)]
    pub sample_limit: u64,
    #[serde(default)]
    pub label_limit: u64,
    #[serde(default)]
    pub label_name_length_limit: u64,
    #[serde(default)]
    pub label_value_length_limit: u64,
    #[serde(default)]
    pub target_limit: u64,
    /// Base-2 units, as Prometheus (`10MB` = 10,485,760 bytes).
    #[serde(default)]
    pub body_size_limit: crate::primitives::duration::Base2Size,
    #[serde(default)]
    pub relabel_configs: Vec<RelabelConfig>,
    #[serde(default)]
    pub metric_relabel_configs: Vec<RelabelConfig>,
}

fn default_metrics_path() -> String {
    "/metrics".into()
}
fn default_scheme() -> String {
    "http".into()
}
fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct StaticConfig {
    #[serde(default, deserialize_with = "infertel_relabel::scalar::strings")]
    pub targets: Vec<String>,
    /// Any scalar, as Go's YAML reads a label value (`port: 9093`).
    #[serde(default, deserialize_with = "infertel_relabel::scalar::string_map")]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct FileSdConfig {
    pub files: Vec<String>,
    #[serde(default = "default_refresh")]
    pub refresh_interval: Duration,
}

fn default_refresh() -> Duration {
    Duration::from_secs(300)
}

/// Prometheus' `http_sd_configs` entry: the URL, how often, and the HTTP
/// client keys a scrape has.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct HttpSdConfig {
    pub url: String,
    #[serde(default = "default_http_refresh")]
    pub refresh_interval: Duration,
    pub basic_auth: Option<BasicAuth>,
    pub authorization: Option<Authorization>,
    pub bearer_token: Option<String>,
    pub bearer_token_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_config: TlsConfig,
    pub proxy_url: Option<String>,
    #[serde(default)]
    pub proxy_from_environment: bool,
    #[serde(default = "yes")]
    pub follow_redirects: bool,
    #[serde(default = "yes")]
    pub enable_http2: bool,
}

fn default_http_refresh() -> Duration {
    Duration::from_secs(60)
}

impl HttpSdConfig {
    pub fn client_options(&self) -> crate::http::ClientOptions {
        crate::http::ClientOptions {
            proxy_url: self.proxy_url.clone(),
            follow_redirects: self.follow_redirects,
            enable_http2: self.enable_http2,
            env_proxy: self.proxy_from_environment,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let u = url::Url::parse(&self.url).map_err(|e| format!("url {:?}: {e}", self.url))?;
        if u.scheme() != "http" && u.scheme() != "https" {
            return Err(format!("url {:?}: scheme must be http or https", self.url));
        }
        if self.refresh_interval.get().is_zero() {
            return Err("refresh_interval must be greater than 0".into());
        }
        let auths = [
            self.basic_auth.is_some(),
            self.authorization.is_some(),
            self.bearer_token.is_some() || self.bearer_token_file.is_some(),
        ];
        if auths.iter().filter(|a| **a).count() > 1 {
            return Err("at most one of basic_auth, authorization and bearer_token[_file] may be set".into());
        }
        self.tls_config.settings().validate_present().map_err(|e| format!("tls_config: {e}"))
    }
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    pub username: String,
    pub password: Option<String>,
    pub password_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Authorization {
    #[serde(default = "bearer", rename = "type")]
    pub kind: String,
    pub credentials: Option<String>,
    pub credentials_file: Option<PathBuf>,
}

fn bearer() -> String {
    "Bearer".into()
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub server_name: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// `TLS12` or `TLS13` (lower bounds are met by TLS 1.2+).
    pub min_version: Option<String>,
    pub max_version: Option<String>,
}

impl TlsConfig {
    pub fn settings(&self) -> TlsSettings {
        TlsSettings {
            ca_file: self.ca_file.clone(),
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
            server_name: self.server_name.clone(),
            insecure_skip_verify: self.insecure_skip_verify,
            min_version: self.min_version.clone(),
            max_version: self.max_version.clone(),
        }
    }
}

impl GlobalConfig {
    /// The global scrape timeout: as set, else Prometheus' default of 10s
    /// capped at the global interval (a 5s interval gets a 5s timeout).
    pub fn timeout(&self) -> std::time::Duration {
        match self.scrape_timeout {
            Some(t) => t.get(),
            None => std::time::Duration::from_secs(10).min(self.scrape_interval.get()),
        }
    }
}

impl ScrapeConfig {
    /// A job's limit, or the global one where the job leaves it at 0.
    pub fn limits(&self, g: &GlobalConfig) -> Limits {
        let or = |j: u64, g: u64| if j == 0 { g } else { j };
        Limits {
            sample: or(self.sample_limit, g.sample_limit),
            target: or(self.target_limit, g.target_limit),
            label: or(self.label_limit, g.label_limit),
            label_name_length: or(self.label_name_length_limit, g.label_name_length_limit),
            label_value_length: or(self.label_value_length_limit, g.label_value_length_limit),
            body_size: or(self.body_size_limit.0, g.body_size_limit.0),
        }
    }

    /// The Accept header for this job's scrapes.
    pub fn accept(&self, g: &GlobalConfig) -> Option<String> {
        self.scrape_protocols.as_ref().or(g.scrape_protocols.as_ref()).map(|p| accept_header(p))
    }

    pub fn client_options(&self) -> crate::http::ClientOptions {
        crate::http::ClientOptions {
            proxy_url: self.proxy_url.clone(),
            follow_redirects: self.follow_redirects,
            enable_http2: self.enable_http2,
            env_proxy: self.proxy_from_environment,
        }
    }

    pub fn interval(&self, g: &GlobalConfig) -> std::time::Duration {
        self.scrape_interval.unwrap_or(g.scrape_interval).get()
    }

    /// Prometheus caps the default timeout at the interval.
    pub fn timeout(&self, g: &GlobalConfig) -> std::time::Duration {
        match self.scrape_timeout {
            Some(t) => t.get(),
            None => g.timeout().min(self.interval(g)),
        }
    }

    /// The files this job reads that are not there now, as (key, path).
    pub fn referenced_files(&self) -> Vec<(String, PathBuf)> {
        let mut out: Vec<(String, PathBuf)> = self
            .tls_config
            .settings()
            .missing_files()
            .into_iter()
            .map(|(k, p)| (format!("tls_config.{k}"), p))
            .collect();
        let auth = [
            ("bearer_token_file", self.bearer_token_file.as_ref()),
            ("authorization.credentials_file", self.authorization.as_ref().and_then(|a| a.credentials_file.as_ref())),
            ("basic_auth.password_file", self.basic_auth.as_ref().and_then(|b| b.password_file.as_ref())),
        ];
        for (k, p) in auth {
            if let Some(p) = p.filter(|p| !p.exists()) {
                out.push((k.to_string(), p.clone()));
            }
        }
        for (i, h) in self.http_sd_configs.iter().enumerate() {
            for (k, p) in h.tls_config.settings().missing_files() {
                out.push((format!("http_sd_configs[{i}].tls_config.{k}"), p));
            }
        }
        out
    }

    pub fn validate(&self, g: &GlobalConfig) -> Result<(), String> {
        let job = &self.job_name;
        if job.is_empty() {
            return Err("scrape_configs: job_name must not be empty".into());
        }
        if self.scrape_timeout.is_some_and(|t| t.get().is_zero()) {
            return Err(format!("job {job:?}: scrape_timeout must be greater than 0 (leave it out for the default)"));
        }
        if self.interval(g).is_zero() {
            return Err(format!("job {job:?}: scrape_interval must be greater than 0"));
        }
        if self.timeout(g) > self.interval(g) {
            return Err(format!(
                "job {job:?}: scrape_timeout ({:?}) greater than scrape_interval ({:?})",
                self.timeout(g),
                self.interval(g)
            ));
        }
        if self.scheme != "http" && self.scheme != "https" {
            return Err(format!("job {job:?}: scheme must be http or https, not {:?}", self.scheme));
        }
        if !self.metrics_path.starts_with('/') {
            return Err(format!("job {job:?}: metrics_path must start with '/'"));
        }
        let auths = [
            self.basic_auth.is_some(),
            self.authorization.is_some(),
            self.bearer_token.is_some() || self.bearer_token_file.is_some(),
        ];
        if auths.iter().filter(|a| **a).count() > 1 {
            return Err(format!(
                "job {job:?}: at most one of basic_auth, authorization and bearer_token[_file] may be set"
            ));
        }
        if self.bearer_token.is_some() && self.bearer_token_file.is_some() {
            return Err(format!("job {job:?}: at most one of bearer_token and bearer_token_file may be set"));
        }
        if let Some(b) = &self.basic_auth
            && b.password.is_some()
            && b.password_file.is_some()
        {
            return Err(format!("job {job:?}: basic_auth: at most one of password and password_file may be set"));
        }
        if let Some(a) = &self.authorization {
            if a.credentials.is_some() && a.credentials_file.is_some() {
                return Err(format!(
                    "job {job:?}: authorization: at most one of credentials and credentials_file may be set"
                ));
            }
            if a.kind.eq_ignore_ascii_case("basic") {
                return Err(format!(
                    "job {job:?}: authorization type cannot be set to \"basic\", use basic_auth instead"
                ));
            }
        }
        if let Some(p) = self.proxy_url.as_deref().filter(|p| !p.is_empty())
            && url::Url::parse(p).is_err()
        {
            return Err(format!("job {job:?}: proxy_url {p:?} is not a URL"));
        }
        if self.proxy_url.is_some() && self.proxy_from_environment {
            return Err(format!("job {job:?}: at most one of proxy_url and proxy_from_environment may be set"));
        }
        for p in self.scrape_protocols.iter().flatten().chain(g.scrape_protocols.iter().flatten()) {
            if !SCRAPE_PROTOCOLS.iter().any(|(n, _)| n == p) {
                return Err(format!(
                    "job {job:?}: scrape_protocols: unknown protocol {p:?} (one of {})",
                    SCRAPE_PROTOCOLS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        if let Some(p) = &self.fallback_scrape_protocol
            && !SCRAPE_PROTOCOLS.iter().any(|(n, _)| n == p)
        {
            return Err(format!("job {job:?}: fallback_scrape_protocol: unknown protocol {p:?}"));
        }
        for (name, h) in &self.http_headers {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!("job {job:?}: http_headers: {name:?} is not a header name"));
            }
            if h.values.iter().chain(&h.secrets).any(|v| reqwest::header::HeaderValue::from_str(v).is_err()) {
                return Err(format!(
                    "job {job:?}: http_headers: a value of {name:?} has characters not allowed in a header"
                ));
            }
        }
        self.tls_config.settings().validate_present().map_err(|e| format!("job {job:?}: tls_config: {e}"))?;
        Relabeler::new(&self.relabel_configs).map_err(|e| format!("job {job:?}: relabel_configs: {e}"))?;
        Relabeler::new(&self.metric_relabel_configs)
            .map_err(|e| format!("job {job:?}: metric_relabel_configs: {e}"))?;
        for (i, k) in self.kubernetes_sd_configs.iter().enumerate() {
            k.validate().map_err(|e| format!("job {job:?}: kubernetes_sd_configs[{i}]: {e}"))?;
        }
        for (i, h) in self.http_sd_configs.iter().enumerate() {
            h.validate().map_err(|e| format!("job {job:?}: http_sd_configs[{i}]: {e}"))?;
        }
        for (i, d) in self.dns_sd_configs.iter().enumerate() {
            d.validate().map_err(|e| format!("job {job:?}: dns_sd_configs[{i}]: {e}"))?;
        }
        // As Prometheus: a URL is a valid target when relabel_configs may
        // rewrite it (blackbox-exporter jobs move it to __param_target);
        // the check applies only without relabeling.
        for sc in self.static_configs.iter().filter(|_| self.relabel_configs.is_empty()) {
            for t in &sc.targets {
                if t.contains('/') {
                    return Err(format!(
                        "job {job:?}: target {t:?}: a target is host:port, without scheme or path (use scheme and metrics_path)"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Effective per-job limits (0 = none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub sample: u64,
    pub target: u64,
    pub label: u64,
    pub label_name_length: u64,
    pub label_value_length: u64,
    pub body_size: u64,
}

impl PrometheusConfig {
    /// Keys accepted for a pasted file that change nothing here, or ask for
    /// what infertel does differently: `(key, message)`.
    pub fn warnings(&self) -> Vec<(String, String)> {
        let c = &self.config;
        let g = &c.global;
        let mut out = Vec::new();
        let w = &mut out;
        let native =
            "infertel scrapes the text formats: classic histogram buckets are scraped instead of native histograms";
        for (k, set) in [
            ("query_log_file", g.query_log_file.is_some()),
            ("scrape_failure_log_file", g.scrape_failure_log_file.is_some()),
            ("rule_query_offset", g.rule_query_offset.is_some()),
        ] {
            if set {
                w.push((
                    format!("global.{k}"),
                    "ignored: a Prometheus server setting with no meaning for an agent".to_string(),
                ));
            }
        }
        if g.convert_classic_histograms_to_nhcb == Some(true) {
            w.push(("global.convert_classic_histograms_to_nhcb".into(), native.into()));
        }
        if g.scrape_protocols.iter().flatten().any(|p| p == "PrometheusProto") {
            w.push((
                "global.scrape_protocols".into(),
                format!("PrometheusProto left out of the Accept header: {native}"),
            ));
        }
        for (j, sc) in c.scrape_configs.iter().enumerate() {
            let job = &sc.job_name;
            let mut job_w = Vec::new();
            let w = &mut job_w;
            for (key, path) in sc.referenced_files() {
                w.push((
                    key.clone(),
                    format!(
                        "job {job:?}: {key} {} is not there: it is read when used, and each scrape fails until it is",
                        path.display()
                    ),
                ));
            }
            for (i, k) in sc.kubernetes_sd_configs.iter().enumerate() {
                for (key, why) in k.warnings() {
                    w.push((format!("kubernetes_sd_configs[{i}].{key}"), format!("job {job:?}: {why}")));
                }
            }
            if sc.scrape_native_histograms == Some(true) || sc.convert_classic_histograms_to_nhcb == Some(true) {
                w.push(("scrape_native_histograms".into(), format!("job {job:?}: {native}")));
            }
            if sc.scrape_protocols.iter().flatten().any(|p| p == "PrometheusProto") {
                w.push((
                    "scrape_protocols".into(),
                    format!("job {job:?}: PrometheusProto left out of the Accept header: {native}"),
                ));
            }
            if sc.no_proxy.is_some() || !sc.proxy_connect_header.is_empty() {
                w.push((
                    "no_proxy".into(),
                    format!("job {job:?}: no_proxy and proxy_connect_header have no effect in infertel"),
                ));
            }
            out.extend(job_w.into_iter().map(|(k, m)| (format!("scrape_configs[{j}].{k}"), m)));
        }
        out
    }

    /// The first error, for callers that want one.
    pub fn validate(&self) -> Result<(), String> {
        match self.errors().into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// Every error, as (path under the receiver, message): the global
    /// ones, then each job's (`config.scrape_configs[i]`), so one run of
    /// `validate` names them all.
    pub fn errors(&self) -> Vec<(String, String)> {
        let c = &self.config;
        let mut out = Vec::new();
        if c.scrape_configs.is_empty() {
            out.push((
                "config.scrape_configs".into(),
                "config.scrape_configs: at least one scrape config is needed".into(),
            ));
        }
        let g = &c.global;
        if g.scrape_timeout.is_some_and(|t| t.get().is_zero()) {
            out.push((
                "config.global.scrape_timeout".into(),
                "config.global: scrape_timeout must be greater than 0 (leave it out for the default)".into(),
            ));
        } else if g.timeout() > g.scrape_interval.get() {
            out.push((
                "config.global.scrape_timeout".into(),
                format!(
                    "config.global: scrape_timeout ({}) greater than scrape_interval ({})",
                    g.scrape_timeout.map(|t| t.to_string()).unwrap_or_default(),
                    g.scrape_interval
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, sc) in c.scrape_configs.iter().enumerate() {
            let path = format!("config.scrape_configs[{i}]");
            if !seen.insert(&sc.job_name) {
                out.push((
                    format!("{path}.job_name"),
                    format!("config.scrape_configs: found multiple scrape configs with job name {:?}", sc.job_name),
                ));
            }
            if let Err(e) = sc.validate(g) {
                out.push((path, e));
            }
        }
        out
    }
}
