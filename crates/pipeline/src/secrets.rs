//! The secrets this process was configured with, so that no log line and no
//! self-metric ever shows one: every value under a `headers` map, every
//! value of a key that names a credential (`password`, `token`, `api_key`,
//! `secret`, `authorization`, `bearer_token`, ...), and the password of
//! every URL's userinfo. Registered once per loaded config (a reload adds
//! the new ones); [`scrub`] replaces any of them with `***` and runs on every
//! log line (the log writer) and on the `/metrics` page.
//!
//! Redacting at each call site (`exporters/exporterhelper/probe.rs`'s `redact_url`,
//! `redact_text`) stays: it also hides credentials the agent was not told
//! about (a token echoed in an error). This is the net under it.

use std::borrow::Cow;
use std::sync::RwLock;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Shorter values are not treated as secrets (they would blank ordinary
/// words and numbers: a header `x-tenant: a`, a password `1234`).
const MIN_LEN: usize = 6;

/// Remembers `value` as a secret.
pub fn register(value: &str) {
    let v = value.trim();
    if v.len() < MIN_LEN {
        return;
    }
    let mut s = SECRETS.write().unwrap_or_else(|p| p.into_inner());
    if !s.iter().any(|x| x == v) {
        s.push(v.to_string());
        // Longest first: a secret containing another is hidden whole.
        s.sort_by_key(|x| std::cmp::Reverse(x.len()));
    }
}

/// `text` of the Prometheus exposition with every registered secret inside
/// a label value replaced by `***`; names and numbers are never touched.
pub fn scrub_exposition(text: &str) -> Cow<'_, str> {
    let s = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    if s.is_empty() || !s.iter().any(|x| text.contains(x.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    // Quoted runs are label values (HELP text holds none of the secrets'
    // quotes); only they are scrubbed.
    let mut rest = text;
    while let Some(open) = rest.find('"') {
        out.push_str(&rest[..=open]);
        rest = &rest[open + 1..];
        let mut end = 0;
        let bytes = rest.as_bytes();
        while end < bytes.len() && bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        let end = end.min(rest.len());
        let mut value = rest[..end].to_string();
        for x in s.iter() {
            if value.contains(x.as_str()) {
                value = value.replace(x.as_str(), "***");
            }
        }
        out.push_str(&value);
        rest = &rest[end..];
        if let Some(r) = rest.strip_prefix('"') {
            out.push('"');
            rest = r;
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// `text` with every registered secret replaced by `***`.
pub fn scrub(text: &str) -> Cow<'_, str> {
    let s = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    if s.is_empty() || !s.iter().any(|x| text.contains(x.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for x in s.iter() {
        if out.contains(x.as_str()) {
            out = out.replace(x.as_str(), "***");
        }
    }
    Cow::Owned(out)
}

/// Keys whose values are credentials: named exactly, or by a suffix
/// (`client_secret`, `session_token`). Component ids (`bearertokenauth/x`,
/// `prometheusremotewrite/bearer`) are never keys of a credential: their
/// subtrees hold endpoints and references, whose secrets have keys of their
/// own.
pub(crate) fn is_secret_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    if k.contains('/') || k.ends_with("_file") || k.ends_with("_path") {
        return false;
    }
    const EXACT: &[&str] = &[
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "api-key",
        "authorization",
        "credentials",
        "bearer_token",
        "access_key",
        "secret_key",
        "private_key",
    ];
    const SUFFIX: &[&str] = &["_password", "_secret", "_token", "_api_key", "_apikey"];
    EXACT.contains(&k.as_str()) || SUFFIX.iter().any(|x| k.ends_with(x))
}

/// Registers the secrets of a config (after environment expansion).
pub fn register_config(v: &serde_yaml::Value) {
    walk(v, false);
}

fn walk(v: &serde_yaml::Value, secret: bool) {
    match v {
        serde_yaml::Value::String(s) => {
            if secret {
                register(s);
            }
            register_url_password(s);
        }
        serde_yaml::Value::Mapping(m) => {
            for (k, x) in m {
                let key = k.as_str().unwrap_or("");
                // Every configured header may carry a credential
                // (X-API-Key, X-Auth-Token, a tenant token, ...).
                let headers = key.eq_ignore_ascii_case("headers") || key.eq_ignore_ascii_case("http_headers");
                walk(x, secret || is_secret_key(key) || headers);
            }
        }
        serde_yaml::Value::Sequence(xs) => {
            for x in xs {
                walk(x, secret);
            }
        }
        serde_yaml::Value::Tagged(t) => walk(&t.value, secret),
        _ => {}
    }
}

/// The password (and a user that looks like a token) of a URL's userinfo.
fn register_url_password(s: &str) {
    let Some(p) = s.find("://") else { return };
    let rest = &s[p + 3..];
    let Some(at) = rest.find('@') else { return };
    let userinfo = &rest[..at];
    if userinfo.contains('/') {
        return;
    }
    match userinfo.split_once(':') {
        Some((_, pass)) => register(pass),
        None => register(userinfo),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_secrets_are_found_and_scrubbed() {
        let cfg: serde_yaml::Value = serde_yaml::from_str(
            r#"
exporters:
  prometheusremotewrite:
    endpoint: https://writer:hunter2-url@mimir.example/api/v1/write
    headers: {X-Scope-OrgID: tenant-7, X-API-Key: k-123456}
    basic_auth: {username: bob, password: s3cr3t-pw, password_file: /var/run/pw}
extensions:
  bearertokenauth: {token: tok-abcdef}
"#,
        )
        .unwrap();
        register_config(&cfg);
        let line =
            "POST https://writer:hunter2-url@mimir.example failed: k-123456 tok-abcdef s3cr3t-pw tenant-7 /var/run/pw";
        assert_eq!(scrub(line), "POST https://writer:***@mimir.example failed: *** *** *** *** /var/run/pw");
        assert_eq!(scrub("nothing here"), "nothing here");
    }
}
