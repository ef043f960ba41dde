//! What the status page shows, gathered while the agent runs: the scrape
//! pools and their targets (`targets.rs`), the fate of the series someone
//! asked about (`trace.rs`), recent values for rates and charts
//! (`history.rs`), the inference processors to report on, and the
//! effective configuration.
//!
//! One [`StatusBoard`] per process, reached through
//! [`crate::telemetry::Telemetry::status`], so that every component (which
//! holds the telemetry handle already) can write to it and it outlives
//! reloads. Components write cheap summaries; the expensive views (relabel
//! steps, reports) are computed when a page asks for them.

pub mod history;
pub mod targets;
pub mod trace;

use crate::config::PipelineConfig;
use crate::processors::inference::InferenceProcessor;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::SystemTime;

/// The configuration as the page shows it.
#[derive(Debug, Clone, Default)]
pub struct ConfigView {
    /// The parsed configuration with every default filled in, secrets
    /// redacted.
    pub effective: String,
    pub pipelines: BTreeMap<String, PipelineConfig>,
    pub extensions: Vec<String>,
    /// Each remote-write exporter's `write_relabel_configs`.
    pub write_relabel: BTreeMap<String, Vec<infertel_relabel::RelabelConfig>>,
    /// When this configuration was applied.
    pub loaded_at: Option<SystemTime>,
}

pub struct StatusBoard {
    pub targets: targets::TargetBook,
    pub tracer: trace::Tracer,
    pub history: history::History,
    inference: Mutex<Vec<(String, Weak<InferenceProcessor>)>>,
    config: RwLock<ConfigView>,
    /// A status extension is configured: worth keeping history for.
    enabled: AtomicBool,
    pub started: SystemTime,
}

impl std::fmt::Debug for StatusBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusBoard").field("enabled", &self.enabled()).finish_non_exhaustive()
    }
}

impl Default for StatusBoard {
    fn default() -> Self {
        StatusBoard {
            targets: Default::default(),
            tracer: Default::default(),
            history: Default::default(),
            inference: Mutex::new(Vec::new()),
            config: RwLock::new(ConfigView::default()),
            enabled: AtomicBool::new(false),
            started: SystemTime::now(),
        }
    }
}

impl StatusBoard {
    pub fn enable(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn set_config(&self, v: ConfigView) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = v;
    }

    pub fn config(&self) -> ConfigView {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Remembers an inference processor for `/inference` (a reload that
    /// builds a new one registers it; dropped ones fall away).
    pub fn register_inference(&self, id: &str, p: &Arc<InferenceProcessor>) {
        let mut v = self.inference.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|(_, w)| w.strong_count() > 0);
        v.push((id.to_string(), Arc::downgrade(p)));
    }

    /// The inference processors still running, by id.
    pub fn inference(&self) -> Vec<(String, Arc<InferenceProcessor>)> {
        let v = self.inference.lock().unwrap_or_else(|p| p.into_inner());
        v.iter().filter_map(|(id, w)| w.upgrade().map(|p| (id.clone(), p))).collect()
    }
}

/// Debug text of a configuration with secrets hidden: values of keys that
/// name a credential and every value under a `headers`/`http_headers` map
/// become `"<redacted>"`; anything registered as a secret is scrubbed too.
pub fn redact_debug(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // Indentation of an open headers map: its entries are all secret.
    let mut headers_at: Option<usize> = None;
    // Indentation of a secret key whose value spans lines (`Some(` ...).
    let mut secret_at: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        if let Some(h) = headers_at
            && indent <= h
        {
            headers_at = None;
        }
        if let Some(h) = secret_at {
            if indent <= h {
                secret_at = None;
            } else {
                out.push_str(&line[..indent]);
                out.push_str(if t.contains(": ") || t.ends_with('{') || t.ends_with('(') {
                    t
                } else {
                    "\"<redacted>\","
                });
                out.push('\n');
                continue;
            }
        }
        let (key, rest) = match t.split_once(": ") {
            Some((k, r)) => (k.trim_matches('"'), r),
            None => ("", ""),
        };
        let secret_value = !key.is_empty()
            && (headers_at.is_some() || crate::secrets::is_secret_key(key))
            && !rest.starts_with('{')
            && !rest.starts_with('[')
            && !rest.starts_with("None")
            && !rest.ends_with('{')
            && !rest.ends_with('[')
            && !rest.ends_with('(');
        if secret_value {
            out.push_str(&line[..indent]);
            out.push_str(&t[..t.len() - rest.len()]);
            out.push_str("\"<redacted>\",\n");
        } else {
            out.push_str(line);
            out.push('\n');
        }
        if !key.is_empty() && crate::secrets::is_secret_key(key) && (rest.ends_with('(') || rest.ends_with('[')) {
            secret_at = Some(indent);
        }
        if (key.eq_ignore_ascii_case("headers") || key.eq_ignore_ascii_case("http_headers")) && headers_at.is_none() {
            headers_at = Some(indent);
        }
    }
    crate::secrets::scrub(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_text_loses_its_secrets() {
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Auth {
            username: String,
            password: String,
            token: Option<String>,
            headers: BTreeMap<String, String>,
            endpoint: String,
        }
        let a = Auth {
            username: "bob".into(),
            password: "pw1".into(),
            token: Some("t0k".into()),
            headers: [("X-Scope-OrgID".to_string(), "tenant".to_string())].into(),
            endpoint: "http://x".into(),
        };
        let text = redact_debug(&format!("{a:#?}"));
        assert!(!text.contains("pw1") && !text.contains("t0k") && !text.contains("\"tenant\""), "{text}");
        assert!(text.contains("username: \"bob\"") && text.contains("endpoint: \"http://x\""), "{text}");
        assert!(text.contains("password: \"<redacted>\""), "{text}");
    }
}
