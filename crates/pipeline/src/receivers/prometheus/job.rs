//! What every target of a scrape job shares: the job's settings (limits,
//! the Accept header, headers, metric relabeling, external labels), how its
//! scrapes authenticate, and the strings its label sets intern.

use infertel_model::{Label, Labels, Str};
use infertel_relabel::Relabeler;
use reqwest::header::HeaderValue;
use rustc_hash::FxHashSet;

/// Text 0.0.4 first: vLLM's OpenMetrics output loses types (NOTES.md §H).
pub const ACCEPT_HEADER: &str = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,*/*;q=0.1";

/// How to authenticate scrapes; files are re-read on every scrape so a
/// rotated secret is picked up.
#[derive(Debug, Clone, Default)]
pub enum ScrapeAuth {
    #[default]
    None,
    Basic {
        username: String,
        password: Option<String>,
        password_file: Option<std::path::PathBuf>,
    },
    Token {
        scheme: String,
        credentials: Option<String>,
        credentials_file: Option<std::path::PathBuf>,
    },
}

impl ScrapeAuth {
    /// From Prometheus' HTTP client keys (at most one is set; validated).
    pub fn from_parts(
        basic: Option<&super::config::BasicAuth>,
        authorization: Option<&super::config::Authorization>,
        bearer_token: Option<&str>,
        bearer_token_file: Option<&std::path::Path>,
    ) -> ScrapeAuth {
        if let Some(b) = basic {
            ScrapeAuth::Basic {
                username: b.username.clone(),
                password: b.password.clone(),
                password_file: b.password_file.clone(),
            }
        } else if let Some(a) = authorization {
            ScrapeAuth::Token {
                scheme: a.kind.clone(),
                credentials: a.credentials.clone(),
                credentials_file: a.credentials_file.clone(),
            }
        } else if bearer_token.is_some() || bearer_token_file.is_some() {
            ScrapeAuth::Token {
                scheme: "Bearer".into(),
                credentials: bearer_token.map(str::to_string),
                credentials_file: bearer_token_file.map(|p| p.to_path_buf()),
            }
        } else {
            ScrapeAuth::None
        }
    }

    pub fn header(&self) -> Result<Option<HeaderValue>, String> {
        let v = match self {
            ScrapeAuth::None => return Ok(None),
            ScrapeAuth::Basic { username, password, password_file } => {
                let pw = match (password, password_file) {
                    (_, Some(f)) => crate::http::read_secret_file(f, "password_file")?,
                    (Some(p), None) => p.clone(),
                    (None, None) => String::new(),
                };
                format!("Basic {}", base64_encode(format!("{username}:{pw}").as_bytes()))
            }
            ScrapeAuth::Token { scheme, credentials, credentials_file } => {
                let c = match (credentials, credentials_file) {
                    (_, Some(f)) => crate::http::read_secret_file(f, "credentials_file")?,
                    (Some(c), None) => c.clone(),
                    (None, None) => String::new(),
                };
                format!("{scheme} {c}")
            }
        };
        let mut h = HeaderValue::from_str(&v)
            .map_err(|_| "credentials contain characters not allowed in a header".to_string())?;
        h.set_sensitive(true);
        Ok(Some(h))
    }
}

/// Standard base64, for basic auth.
pub fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 { T[(n >> 6) as usize & 63] as char } else { '=' });
        out.push(if c.len() > 2 { T[n as usize & 63] as char } else { '=' });
    }
    out
}

/// Standard base64 decoded (padding optional); `None` on a bad character.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let t = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(t.len() * 3 / 4);
    for c in t.chunks(4) {
        if c.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, b) in c.iter().enumerate() {
            n |= val(*b)? << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if c.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if c.len() > 3 {
            out.push(n as u8);
        }
    }
    Some(out)
}

/// Per-job settings shared by all of the job's targets.
#[derive(Debug)]
pub struct JobSettings {
    pub receiver: String,
    pub honor_labels: bool,
    pub honor_timestamps: bool,
    pub sample_limit: u64,
    pub label_limit: u64,
    pub label_name_length_limit: u64,
    pub label_value_length_limit: u64,
    pub body_size_limit: u64,
    /// The receiver's `report_extra_scrape_metrics`: Prometheus'
    /// `extra-scrape-metrics` report series.
    pub extra_scrape_metrics: bool,
    /// The Accept header from `scrape_protocols`; `None`: [`ACCEPT_HEADER`].
    pub accept: Option<String>,
    /// `enable_compression`: ask for gzip.
    pub compression: bool,
    /// No proxy (`proxy_url`, `proxy_from_environment`): a plain-http
    /// target can be scraped on its loop's own connection (`fetch.rs`).
    pub direct_http: bool,
    /// `http_headers`: sent with every scrape (files read each time).
    pub headers: Vec<(String, super::config::HttpHeader)>,
    /// `fallback_scrape_protocol` is OpenMetrics: a body without a valid
    /// content type is parsed as OpenMetrics.
    pub fallback_openmetrics: bool,
    pub metric_relabel: Relabeler,
    pub external_labels: Vec<Label>,
    pub auth: ScrapeAuth,
    /// Label strings shared by every series of every target of the job.
    pub interner: Interner,
    /// Set while the job is over its `target_limit`: every target's scrape
    /// fails with it, as Prometheus forces the error on every loop of the
    /// pool (rather than scraping the first N).
    pub forced_error: std::sync::RwLock<Option<String>>,
    /// Where open series traces are (the status page's `/series`).
    pub status: std::sync::Arc<crate::status::StatusBoard>,
}

impl JobSettings {
    /// A job of `receiver` with Prometheus' defaults (no limits, honoured
    /// timestamps, no relabeling, no auth); the receiver sets the rest from
    /// the job's config.
    pub fn new(receiver: &str) -> JobSettings {
        JobSettings {
            receiver: receiver.to_string(),
            honor_labels: false,
            honor_timestamps: true,
            sample_limit: 0,
            label_limit: 0,
            label_name_length_limit: 0,
            label_value_length_limit: 0,
            body_size_limit: 0,
            extra_scrape_metrics: false,
            accept: None,
            compression: true,
            direct_http: true,
            headers: Vec::new(),
            fallback_openmetrics: false,
            metric_relabel: Relabeler::default(),
            external_labels: Vec::new(),
            auth: ScrapeAuth::None,
            interner: Interner::default(),
            forced_error: Default::default(),
            status: Default::default(),
        }
    }
}

/// Interns labels, and the names and values they are made of, so a label
/// that appears in many series (`model_name="..."`, a GPU's UUID, a
/// target's `instance`, and in a fleet the same labels on every node) is
/// stored once and its label sets hold one pointer to it. Labels and strings
/// nobody uses any more are purged when their table has doubled since its
/// last purge, so churn does not grow them.
#[derive(Debug, Default)]
pub struct Interner {
    tables: std::sync::Mutex<Tables>,
}

#[derive(Default)]
struct Tables {
    strings: FxHashSet<Str>,
    strings_purge_at: usize,
    labels: hashbrown::HashTable<Label>,
    labels_purge_at: usize,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tables").field("strings", &self.strings.len()).field("labels", &self.labels.len()).finish()
    }
}

/// The fewest entries a table holds before it is first purged.
const PURGE_FLOOR: usize = 4096;

fn label_hash(name: &str, value: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    // `str`'s Hash ends each string with a marker: ("ab", "c") and ("a", "bc") differ.
    name.hash(&mut h);
    value.hash(&mut h);
    h.finish()
}

impl Tables {
    fn label(&mut self, name: &str, value: &str) -> Label {
        let hash = label_hash(name, value);
        if let Some(l) = self.labels.find(hash, |l| &*l.name == name && &*l.value == value) {
            return l.clone();
        }
        let l = Label::new(self.string(name), self.string(value));
        self.labels.insert_unique(hash, l.clone(), |l| label_hash(&l.name, &l.value));
        if self.labels.len() > self.labels_purge_at.max(PURGE_FLOOR) {
            self.labels.retain(|l| Label::strong_count(l) > 1);
            self.labels_purge_at = self.labels.len() * 2;
        }
        l
    }

    fn string(&mut self, s: &str) -> Str {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a = Str::new(s);
        self.strings.insert(a.clone());
        if self.strings.len() > self.strings_purge_at.max(PURGE_FLOOR) {
            self.strings.retain(|a| Str::strong_count(a) > 1);
            self.strings_purge_at = self.strings.len() * 2;
        }
        a
    }
}

impl Interner {
    /// The shared string `s` (the scrape path asks for labels; their
    /// strings come from here).
    #[cfg(test)]
    pub fn get(&self, s: &str) -> Str {
        self.lock().string(s)
    }

    /// The shared label `name="value"`.
    pub fn label(&self, name: &str, value: &str) -> Label {
        self.lock().label(name, value)
    }

    /// `set` with each of its labels the shared one (under one lock).
    pub fn labels(&self, set: &Labels) -> Labels {
        let labels: Vec<Label> = {
            let mut t = self.lock();
            set.iter().map(|l| t.label(&l.name, &l.value)).collect()
        };
        Labels::from_vec(labels)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Strings and labels held, together.
    pub fn len(&self) -> usize {
        let t = self.lock();
        t.strings.len() + t.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod interner_tests {
    use super::*;

    #[test]
    fn interned_strings_are_shared_and_unused_ones_purged() {
        let i = Interner::default();
        let a = i.get("model_name");
        let b = i.get("model_name");
        assert!(Str::ptr_eq(&a, &b));
        // Churn: many values nobody holds on to; the set stays bounded.
        for n in 0..20_000 {
            let _ = i.get(&format!("pod-{n}"));
        }
        assert!(i.len() <= 8193, "{}", i.len());
        assert!(Str::ptr_eq(&a, &i.get("model_name")), "a string still in use survives a purge");
    }

    #[test]
    fn interned_labels_are_shared_and_unused_ones_purged() {
        let i = Interner::default();
        let a = i.label("model_name", "llama");
        assert!(Label::ptr_eq(&a, &i.label("model_name", "llama")));
        assert!(!Label::ptr_eq(&a, &i.label("model_nam", "ellama")));
        assert!(Str::ptr_eq(&a.name, &i.get("model_name")), "a label's strings are the interned ones");
        assert_eq!((&*a.name, &*a.value), ("model_name", "llama"));
        for n in 0..20_000 {
            let _ = i.label("pod", &format!("pod-{n}"));
        }
        // Each purge keeps what is held: `a`, and the strings of labels still in the table.
        assert!(i.len() <= 2 * 8193, "{}", i.len());
        assert!(Label::ptr_eq(&a, &i.label("model_name", "llama")), "a label still in use survives a purge");
    }
}
