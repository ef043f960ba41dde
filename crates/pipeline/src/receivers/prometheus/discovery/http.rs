//! `http_sd_configs` as Prometheus runs them (`discovery/http/http.go`):
//! every `refresh_interval` (default 60s) a GET to `url` with the job's
//! kind of HTTP client options (auth, TLS, proxy, headers); a 200 answer
//! with `Content-Type: application/json` holding a list of
//! `{targets, labels}` replaces the target list, each group labelled
//! `__meta_url`; any other answer is an error that keeps the last good list
//! (counted in `infertel_receiver_discovery_errors_total{mechanism="http"}`
//! and logged).

use super::TargetGroup;
use crate::receivers::prometheus::config::HttpSdConfig;
use crate::receivers::prometheus::scrape::ScrapeAuth;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Deserialize)]
struct Group {
    #[serde(default)]
    targets: Vec<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

/// The most an answer may hold (Prometheus reads the whole body; a bound
/// keeps a misbehaving endpoint from exhausting memory).
const MAX_BODY: usize = 16 << 20;

/// One `http_sd_configs` entry: its client, its last good groups, when it
/// is next due.
pub struct HttpSd {
    cfg: HttpSdConfig,
    client: reqwest::Client,
    auth: ScrapeAuth,
    last: Vec<TargetGroup>,
    pub next_due: tokio::time::Instant,
}

impl HttpSd {
    pub fn new(cfg: HttpSdConfig) -> Result<HttpSd, String> {
        let client = crate::http::build_client_with(&cfg.tls_config.settings(), None, &cfg.client_options())?;
        let auth = ScrapeAuth::from_parts(
            cfg.basic_auth.as_ref(),
            cfg.authorization.as_ref(),
            cfg.bearer_token.as_deref(),
            cfg.bearer_token_file.as_deref(),
        );
        Ok(HttpSd { cfg, client, auth, last: Vec::new(), next_due: tokio::time::Instant::now() })
    }

    pub fn url(&self) -> &str {
        &self.cfg.url
    }

    /// The groups now: fetched again when due (the last good ones when the
    /// fetch fails, with the error).
    pub async fn refresh(&mut self) -> (Vec<TargetGroup>, Option<String>) {
        if tokio::time::Instant::now() < self.next_due {
            return (self.last.clone(), None);
        }
        self.next_due = tokio::time::Instant::now() + self.cfg.refresh_interval.get();
        match self.fetch().await {
            Ok(g) => {
                self.last = g;
                (self.last.clone(), None)
            }
            Err(e) => (
                self.last.clone(),
                Some(format!(
                    "http_sd {}: {e} (keeping the previous target list)",
                    crate::exporters::probe::redact_url(&self.cfg.url)
                )),
            ),
        }
    }

    async fn fetch(&self) -> Result<Vec<TargetGroup>, String> {
        let mut req = self.client.get(&self.cfg.url).header(reqwest::header::ACCEPT, "application/json");
        if let Some(h) = self.auth.header()? {
            req = req.header(reqwest::header::AUTHORIZATION, h);
        }
        let send = async {
            let resp = req.send().await.map_err(|e| crate::http::describe_error(&e))?;
            let status = resp.status();
            if status != reqwest::StatusCode::OK {
                return Err(format!("server returned HTTP status {status}"));
            }
            let ct = resp.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            if !ct.trim_start().to_ascii_lowercase().starts_with("application/json") {
                return Err(format!("unsupported content type {ct:?} (application/json is required)"));
            }
            let body = resp.bytes().await.map_err(|e| crate::http::describe_error(&e))?;
            if body.len() > MAX_BODY {
                return Err(format!("answer larger than {MAX_BODY} bytes"));
            }
            Ok(body)
        };
        let body = tokio::time::timeout(Duration::from_secs(30), send)
            .await
            .map_err(|_| "timed out after 30s".to_string())??;
        let groups: Vec<Group> = serde_json::from_slice(&body).map_err(|e| format!("invalid JSON target list: {e}"))?;
        Ok(groups
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                let mut labels = g.labels.unwrap_or_default();
                labels.insert("__meta_url".into(), self.cfg.url.clone());
                TargetGroup { source: format!("{}:{i}", self.cfg.url), targets: g.targets, labels }
            })
            .collect())
    }
}
