//! Extensions: `basicauth` and `bearertokenauth` (client side, as in the
//! Collector, that exporters reference with `auth.authenticator`; server
//! side for the status page: `htpasswd`, the expected token);
//! `health_check` (`/healthz`, `/readyz`); `status`/`zpages` (the web UI,
//! `status/`); `pprof` (the agent's CPU and heap profiles); and `file_storage`, where exporters' `sending_queue.storage`
//! keeps their queue on disk.

pub mod health_check;
pub mod pprof;
pub mod sigv4auth;
pub mod status;

use crate::http::read_secret_file;
use crate::primitives::{ComponentKind, or_default};
use reqwest::header::HeaderValue;
use serde::{Deserialize, Deserializer};
use std::path::PathBuf;

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct BasicAuthConfig {
    pub client_auth: Option<ClientAuth>,
    /// Server side (the status page): the users allowed in.
    pub htpasswd: Option<Htpasswd>,
}

/// The Collector's `htpasswd`: `user:password` lines inline or in a file.
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct Htpasswd {
    pub inline: Option<String>,
    pub file: Option<PathBuf>,
}

impl Htpasswd {
    /// The `(user, password)` entries; the file is read on every call, so a
    /// rotated one is picked up.
    pub fn entries(&self) -> Result<Vec<(String, String)>, String> {
        let mut text = self.inline.clone().unwrap_or_default();
        if let Some(f) = &self.file {
            let t = std::fs::read_to_string(f).map_err(|e| format!("htpasswd file {}: {e}", f.display()))?;
            text.push('\n');
            text.push_str(&t);
        }
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let Some((u, p)) = l.split_once(':') else {
                return Err(format!("htpasswd line {}: expected user:password", i + 1));
            };
            if p.starts_with("$2") || p.starts_with("$apr1$") || p.starts_with("{SHA}") || p.starts_with("{SSHA}") {
                return Err(format!(
                    "htpasswd line {}: user {u:?} has a hashed password (bcrypt, MD5, SHA): this build reads plain user:password entries only",
                    i + 1
                ));
            }
            out.push((u.to_string(), p.to_string()));
        }
        Ok(out)
    }
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct ClientAuth {
    pub username: String,
    #[serde(default)]
    pub password: String,
    /// Read on every request (Prometheus' `password_file`), so a rotated
    /// password is picked up; a trailing newline is cut.
    pub password_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct BearerTokenAuthConfig {
    pub scheme: String,
    pub token: Option<String>,
    /// Read on every request, so a rotated token is picked up.
    pub filename: Option<PathBuf>,
    /// Header to set; `Authorization` unless told otherwise.
    pub header: String,
}

impl Default for BearerTokenAuthConfig {
    fn default() -> Self {
        BearerTokenAuthConfig { scheme: "Bearer".into(), token: None, filename: None, header: "Authorization".into() }
    }
}

/// `file_storage/NAME`: a directory for persistent sending queues.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct FileStorageConfig {
    pub directory: PathBuf,
    /// Disk budget of each exporter queue using this storage, shared by its
    /// consumers; when full, the oldest data is dropped (and counted).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: crate::primitives::ByteSize,
    /// When the queue's writes reach the disk: `always` (fdatasync every
    /// append and acknowledgement), `interval` (once a second, as vmagent
    /// and Vector bound their loss), `never` (the page cache decides).
    /// `true`/`false` are read as `always`/`never`.
    #[serde(default)]
    pub fsync: crate::exporters::persistent::Fsync,
}

fn default_max_bytes() -> crate::primitives::ByteSize {
    crate::primitives::ByteSize(1 << 30)
}

#[derive(Debug, Clone)]
pub enum ExtensionConfig {
    BasicAuth(BasicAuthConfig),
    BearerTokenAuth(BearerTokenAuthConfig),
    HealthCheck(health_check::HealthCheckConfig),
    FileStorage(FileStorageConfig),
    /// `status` or, with the Collector's name, `zpages` (`true`).
    Status(status::StatusConfig, bool),
    SigV4Auth(sigv4auth::SigV4Config),
    Pprof(pprof::PprofConfig),
}

impl ComponentKind for ExtensionConfig {
    const SECTION: &'static str = "extension";
    const KNOWN: &'static [&'static str] =
        &["basicauth", "bearertokenauth", "file_storage", "health_check", "pprof", "sigv4auth", "status", "zpages"];
    fn deserialize_kind<'de, D: Deserializer<'de>>(kind: &str, d: D) -> Result<Self, D::Error> {
        match kind {
            "basicauth" => Ok(ExtensionConfig::BasicAuth(or_default(d)?)),
            "bearertokenauth" => Ok(ExtensionConfig::BearerTokenAuth(or_default(d)?)),
            "health_check" => Ok(ExtensionConfig::HealthCheck(or_default(d)?)),
            "file_storage" => Ok(ExtensionConfig::FileStorage(Deserialize::deserialize(d)?)),
            "status" => Ok(ExtensionConfig::Status(or_default(d)?, false)),
            "zpages" => Ok(ExtensionConfig::Status(or_default(d)?, true)),
            "sigv4auth" => Ok(ExtensionConfig::SigV4Auth(Deserialize::deserialize(d)?)),
            "pprof" => Ok(ExtensionConfig::Pprof(or_default(d)?)),
            other => Err(serde::de::Error::custom(format!("unknown extension type {other:?}"))),
        }
    }
}

impl ExtensionConfig {
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ExtensionConfig::BasicAuth(c) if c.client_auth.is_none() => match &c.htpasswd {
                None => Err("basicauth: set client_auth (username, password) for exporters, or htpasswd (inline, file) for the status page".into()),
                Some(h) if h.inline.is_none() && h.file.is_none() => Err("basicauth: htpasswd needs inline or file".into()),
                Some(h) => match (&h.inline, h.entries()) {
                    // A file may appear later; inline entries are checked now.
                    (Some(_), Err(e)) if h.file.is_none() => Err(format!("basicauth: {e}")),
                    _ => Ok(()),
                },
            },
            ExtensionConfig::BasicAuth(c) => match &c.client_auth {
                None => Ok(()),
                Some(a) if a.username.is_empty() => Err("basicauth: client_auth.username must not be empty".into()),
                Some(a) if !a.password.is_empty() && a.password_file.is_some() => {
                    Err("basicauth: set either client_auth.password or client_auth.password_file, not both".into())
                }
                Some(_) => Ok(()),
            },
            ExtensionConfig::BearerTokenAuth(c) => match (&c.token, &c.filename) {
                (Some(_), Some(_)) => Err("bearertokenauth: set either token or filename, not both".into()),
                (None, None) => Err("bearertokenauth: token or filename is required".into()),
                _ => Ok(()),
            },
            ExtensionConfig::HealthCheck(c) => c.socket_addr().map(|_| ()),
            ExtensionConfig::SigV4Auth(c) => c.validate(),
            ExtensionConfig::Status(c, _) => c.validate(),
            ExtensionConfig::Pprof(c) => c.validate(),
            ExtensionConfig::FileStorage(c) => {
                if c.directory.as_os_str().is_empty() {
                    return Err("file_storage: directory must not be empty".into());
                }
                if c.max_bytes.0 < 64 << 10 {
                    return Err("file_storage: max_bytes must be at least 64KiB".into());
                }
                Ok(())
            }
        }
    }

    /// Keys the Collector honours and infertel cannot: (key, why).
    pub fn warnings(&self) -> Vec<(String, String)> {
        match self {
            ExtensionConfig::Pprof(c) => c.warnings(),
            _ => Vec::new(),
        }
    }

    /// The persistent-queue storage this extension provides, if it is one.
    pub fn storage(&self) -> Option<crate::exporters::persistent::Storage> {
        match self {
            ExtensionConfig::FileStorage(c) => Some(crate::exporters::persistent::Storage {
                directory: c.directory.clone(),
                max_bytes: c.max_bytes.0,
                fsync: c.fsync,
            }),
            _ => None,
        }
    }

    pub fn is_authenticator(&self) -> bool {
        matches!(
            self,
            ExtensionConfig::BasicAuth(_) | ExtensionConfig::BearerTokenAuth(_) | ExtensionConfig::SigV4Auth(_)
        )
    }

    /// Server side: whether an `Authorization` header (the value of the
    /// configured header for `bearertokenauth`) lets a request in.
    pub fn admits(&self, header: Option<&str>) -> Result<bool, String> {
        let Some(h) = header else { return Ok(false) };
        match self {
            ExtensionConfig::BasicAuth(c) => {
                let Some(htp) = &c.htpasswd else {
                    return Err("basicauth has no htpasswd: it cannot check the users of a server".into());
                };
                let Some(enc) = h.strip_prefix("Basic ").or_else(|| h.strip_prefix("basic ")) else { return Ok(false) };
                let Some(plain) = crate::receivers::prometheus::scrape::base64_decode(enc.trim()) else {
                    return Ok(false);
                };
                let Ok(plain) = String::from_utf8(plain) else { return Ok(false) };
                let Some((u, p)) = plain.split_once(':') else { return Ok(false) };
                Ok(htp.entries()?.iter().any(|(eu, ep)| constant_eq(eu, u) & constant_eq(ep, p)))
            }
            ExtensionConfig::BearerTokenAuth(c) => {
                let token = match (&c.token, &c.filename) {
                    (_, Some(f)) => read_secret_file(f, "bearertokenauth filename")?,
                    (Some(t), None) => t.clone(),
                    (None, None) => return Ok(false),
                };
                let want = if c.scheme.is_empty() { token } else { format!("{} {token}", c.scheme) };
                Ok(constant_eq(h.trim(), &want))
            }
            _ => Err("not an authenticator extension".into()),
        }
    }

    /// The header name and value to send on each request.
    pub fn header(&self) -> Result<(String, HeaderValue), String> {
        let (name, v) = match self {
            ExtensionConfig::BasicAuth(c) => {
                let a = c.client_auth.clone().unwrap_or_default();
                let password = match &a.password_file {
                    Some(f) => read_secret_file(f, "basicauth password_file")?,
                    None => a.password.clone(),
                };
                let enc = crate::receivers::prometheus::scrape::base64_encode(
                    format!("{}:{}", a.username, password).as_bytes(),
                );
                ("Authorization".to_string(), format!("Basic {enc}"))
            }
            ExtensionConfig::BearerTokenAuth(c) => {
                let token = match (&c.token, &c.filename) {
                    (_, Some(f)) => read_secret_file(f, "bearertokenauth filename")?,
                    (Some(t), None) => t.clone(),
                    (None, None) => String::new(),
                };
                let v = if c.scheme.is_empty() { token } else { format!("{} {token}", c.scheme) };
                (c.header.clone(), v)
            }
            ExtensionConfig::HealthCheck(_) => return Err("health_check is not an authenticator".into()),
            ExtensionConfig::FileStorage(_) => return Err("file_storage is not an authenticator".into()),
            ExtensionConfig::Status(..) => return Err("status is not an authenticator".into()),
            ExtensionConfig::Pprof(_) => return Err("pprof is not an authenticator".into()),
            ExtensionConfig::SigV4Auth(_) => {
                return Err("sigv4auth signs each request (see sign_request), it has no fixed header".into());
            }
        };
        let mut hv = HeaderValue::from_str(&v)
            .map_err(|_| "credentials contain characters not allowed in an HTTP header".to_string())?;
        hv.set_sensitive(true);
        Ok((name, hv))
    }
}

/// Compares without stopping at the first difference (credentials).
fn constant_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut d = (a.len() != b.len()) as u8;
    for i in 0..a.len().max(b.len()) {
        d |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    d == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(yaml: &str, kind: &str) -> ExtensionConfig {
        let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        ExtensionConfig::deserialize_kind(kind, v).unwrap()
    }

    #[test]
    fn server_side_basic_and_bearer() {
        let b = ext("htpasswd: {inline: \"alice:wonder-1\\nbob:builder-2\"}", "basicauth");
        b.validate().unwrap();
        let basic = |s: &str| format!("Basic {}", crate::receivers::prometheus::scrape::base64_encode(s.as_bytes()));
        assert!(b.admits(Some(&basic("alice:wonder-1"))).unwrap());
        assert!(b.admits(Some(&basic("bob:builder-2"))).unwrap());
        assert!(!b.admits(Some(&basic("bob:wonder-1"))).unwrap());
        assert!(!b.admits(Some("Bearer x")).unwrap());
        assert!(!b.admits(None).unwrap());
        let t = ext("token: s3cret-token", "bearertokenauth");
        assert!(t.admits(Some("Bearer s3cret-token")).unwrap());
        assert!(!t.admits(Some("Bearer s3cret-tokem")).unwrap());
        let hashed = ext("htpasswd: {inline: \"alice:$2y$05$abc\"}", "basicauth");
        assert!(hashed.validate().unwrap_err().contains("hashed"), "a hash is refused with the reason");
        assert!(ext("{}", "basicauth").validate().is_err());
        assert!(matches!(ext("{}", "zpages"), ExtensionConfig::Status(_, true)));
    }
}
