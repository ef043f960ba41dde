//! Extensions: `basicauth` and `bearertokenauth` (client side, as in the
//! Collector) that exporters reference with `auth.authenticator`;
//! `health_check` (`/healthz`, `/readyz`); and `file_storage`, where
//! exporters' `sending_queue.storage` keeps their queue on disk.

pub mod health_check;

use crate::config::{ComponentKind, or_default};
use crate::http::read_secret_file;
use reqwest::header::HeaderValue;
use serde::{Deserialize, Deserializer};
use std::path::PathBuf;

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct BasicAuthConfig {
    pub client_auth: Option<ClientAuth>,
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
    pub max_bytes: crate::config::ByteSize,
    /// When the queue's writes reach the disk: `always` (fdatasync every
    /// append and acknowledgement), `interval` (once a second, as vmagent
    /// and Vector bound their loss), `never` (the page cache decides).
    /// `true`/`false` are read as `always`/`never`.
    #[serde(default)]
    pub fsync: crate::exporters::persistent::Fsync,
}

fn default_max_bytes() -> crate::config::ByteSize {
    crate::config::ByteSize(1 << 30)
}

#[derive(Debug, Clone)]
pub enum ExtensionConfig {
    BasicAuth(BasicAuthConfig),
    BearerTokenAuth(BearerTokenAuthConfig),
    HealthCheck(health_check::HealthCheckConfig),
    FileStorage(FileStorageConfig),
}

impl ComponentKind for ExtensionConfig {
    const SECTION: &'static str = "extension";
    const KNOWN: &'static [&'static str] = &["basicauth", "bearertokenauth", "file_storage", "health_check"];
    fn deserialize_kind<'de, D: Deserializer<'de>>(kind: &str, d: D) -> Result<Self, D::Error> {
        match kind {
            "basicauth" => Ok(ExtensionConfig::BasicAuth(or_default(d)?)),
            "bearertokenauth" => Ok(ExtensionConfig::BearerTokenAuth(or_default(d)?)),
            "health_check" => Ok(ExtensionConfig::HealthCheck(or_default(d)?)),
            "file_storage" => Ok(ExtensionConfig::FileStorage(Deserialize::deserialize(d)?)),
            other => Err(serde::de::Error::custom(format!("unknown extension type {other:?}"))),
        }
    }
}

impl ExtensionConfig {
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ExtensionConfig::BasicAuth(c) => match &c.client_auth {
                None => Err("basicauth: client_auth (username, password) is required for exporters".into()),
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
        !matches!(self, ExtensionConfig::HealthCheck(_))
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
        };
        let mut hv = HeaderValue::from_str(&v)
            .map_err(|_| "credentials contain characters not allowed in an HTTP header".to_string())?;
        hv.set_sensitive(true);
        Ok((name, hv))
    }
}
