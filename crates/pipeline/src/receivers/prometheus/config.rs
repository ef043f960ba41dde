//! `receivers.prometheus.config`: a Prometheus configuration's `global` and
//! `scrape_configs`, with Prometheus's defaults, so a job can be pasted from
//! a `prometheus.yml`.

use crate::config::Duration;
use crate::http::TlsSettings;
use infertel_relabel::{RelabelConfig, Relabeler};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    #[serde(default)]
    pub config: PromConfig,
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
    pub external_labels: BTreeMap<String, String>,
}

impl Default for GlobalConfig {
    fn default() -> Self {
        GlobalConfig {
            scrape_interval: Duration::from_secs(60),
            scrape_timeout: None,
            evaluation_interval: None,
            external_labels: BTreeMap::new(),
        }
    }
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
    pub body_size_limit: crate::config::duration::Base2Size,
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
    #[serde(default)]
    pub targets: Vec<String>,
    #[serde(default)]
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
    /// Accepted for paste compatibility; rustls negotiates TLS 1.2+.
    pub min_version: Option<String>,
}

impl TlsConfig {
    pub fn settings(&self) -> TlsSettings {
        TlsSettings {
            ca_file: self.ca_file.clone(),
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
            server_name: self.server_name.clone(),
            insecure_skip_verify: self.insecure_skip_verify,
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
        if self.proxy_url.is_some() {
            return Err(format!("job {job:?}: proxy_url is not supported yet"));
        }
        self.tls_config.settings().validate().map_err(|e| format!("job {job:?}: tls_config: {e}"))?;
        Relabeler::new(&self.relabel_configs).map_err(|e| format!("job {job:?}: relabel_configs: {e}"))?;
        Relabeler::new(&self.metric_relabel_configs)
            .map_err(|e| format!("job {job:?}: metric_relabel_configs: {e}"))?;
        for (i, k) in self.kubernetes_sd_configs.iter().enumerate() {
            k.validate().map_err(|e| format!("job {job:?}: kubernetes_sd_configs[{i}]: {e}"))?;
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

impl PrometheusConfig {
    pub fn validate(&self) -> Result<(), String> {
        let c = &self.config;
        if c.scrape_configs.is_empty() {
            return Err("config.scrape_configs: at least one scrape config is needed".into());
        }
        let g = &c.global;
        if g.scrape_timeout.is_some_and(|t| t.get().is_zero()) {
            return Err("config.global: scrape_timeout must be greater than 0 (leave it out for the default)".into());
        }
        if g.timeout() > g.scrape_interval.get() {
            return Err(format!(
                "config.global: scrape_timeout ({}) greater than scrape_interval ({})",
                g.scrape_timeout.map(|t| t.to_string()).unwrap_or_default(),
                g.scrape_interval
            ));
        }

        let mut seen = std::collections::HashSet::new();
        for sc in &c.scrape_configs {
            if !seen.insert(&sc.job_name) {
                return Err(format!(
                    "config.scrape_configs: found multiple scrape configs with job name {:?}",
                    sc.job_name
                ));
            }
            sc.validate(g)?;
        }
        Ok(())
    }
}
