//! Extension `status` (and `zpages`, its Collector name, with the
//! Collector's `/debug/servicez`, `/debug/pipelinez`, `/debug/extensionz`):
//! a web UI and JSON API on what the agent is doing: targets, service
//! discovery, relabeling step by step, the fate of a series, exporters,
//! the inference processor's numbers, the effective configuration.
//!
//! - this file: the config (`endpoint`, `tls`, `auth`);
//! - `server.rs`: binding, TLS, authentication, routes, the rate sampler;
//! - `pages.rs`: the HTML pages; `api.rs`: the JSON API;
//! - `html.rs`: the shared layout, escaping and the SVG charts.
//!
//! Off unless listed in `service.extensions`; bound to loopback by default:
//! it shows labels and configuration.

pub mod api;
pub mod html;
pub mod pages;
pub mod server;

use serde::Deserialize;
use std::net::SocketAddr;

pub use crate::primitives::ServerTls;

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerAuth {
    /// A `basicauth` (with `htpasswd`) or `bearertokenauth` extension.
    pub authenticator: String,
}

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Expvar {
    pub enabled: bool,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StatusConfig {
    /// host:port to serve on; `localhost:55679` (the Collector's zpages port).
    pub endpoint: String,
    pub tls: Option<ServerTls>,
    pub auth: Option<ServerAuth>,
    /// The Collector's zpages `expvar` switch: accepted, nothing to serve.
    pub expvar: Option<Expvar>,
}

impl Default for StatusConfig {
    fn default() -> Self {
        StatusConfig { endpoint: "localhost:55679".into(), tls: None, auth: None, expvar: None }
    }
}

impl StatusConfig {
    pub fn socket_addr(&self) -> Result<SocketAddr, String> {
        crate::primitives::listen_addr(&self.endpoint).map_err(|e| format!("status: endpoint {e}"))
    }

    pub fn validate(&self) -> Result<(), String> {
        self.socket_addr()?;
        if let Some(t) = &self.tls
            && (t.cert_file.as_os_str().is_empty() || t.key_file.as_os_str().is_empty())
        {
            return Err("status: tls needs both cert_file and key_file".into());
        }
        if let Some(a) = &self.auth
            && a.authenticator.is_empty()
        {
            return Err("status: auth.authenticator must name a basicauth or bearertokenauth extension".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_keys() {
        let c: StatusConfig = serde_yaml::from_str("{}").unwrap();
        assert_eq!(c.socket_addr().unwrap().to_string(), "127.0.0.1:55679");
        let c: StatusConfig = serde_yaml::from_str(
            "endpoint: 0.0.0.0:9000\ntls: {cert_file: /c.pem, key_file: /k.pem}\nauth: {authenticator: basicauth/ui}\nexpvar: {enabled: true}\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.auth.unwrap().authenticator, "basicauth/ui");
        assert!(serde_yaml::from_str::<StatusConfig>("endpont: x").is_err());
        assert!(StatusConfig { endpoint: "nowhere".into(), ..Default::default() }.validate().is_err());
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod handler_tests;
