//! TLS blocks as configs write them: a client's (the Collector's
//! `configtls.ClientConfig`, exporters' `tls`), a server's (the agent's own
//! servers' `tls`), and [`TlsSettings`], what every TLS block comes down to
//! whatever its spelling (Prometheus' `tls_config` too); `crate::http`
//! builds clients and servers from them.

use serde::Deserialize;
use std::path::PathBuf;

/// What every TLS block configures, whatever its YAML spelling.
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub server_name: Option<String>,
    pub insecure_skip_verify: bool,
    /// Prometheus' `min_version`/`max_version` (`TLS10` ... `TLS13`);
    /// rustls offers 1.2 and 1.3, so a bound below 1.2 only matters as a
    /// maximum, which cannot be met (an error).
    pub min_version: Option<String>,
    pub max_version: Option<String>,
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct ExporterTls {
    /// Plain HTTP allowed (for `http://` endpoints this is implied).
    #[serde(default)]
    pub insecure: bool,
    #[serde(default)]
    pub insecure_skip_verify: bool,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub server_name_override: Option<String>,
}

impl ExporterTls {
    pub fn settings(&self) -> TlsSettings {
        TlsSettings {
            ca_file: self.ca_file.clone(),
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
            server_name: self.server_name_override.clone(),
            insecure_skip_verify: self.insecure_skip_verify,
            min_version: None,
            max_version: None,
        }
    }
}

/// A server's `tls` (the agent's own servers: the status page, the
/// prometheus exporter, the otlp receiver): a PEM certificate chain and key.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}
