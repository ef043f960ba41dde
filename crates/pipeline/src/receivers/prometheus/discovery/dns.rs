//! `dns_sd_configs` as Prometheus runs them (`discovery/dns/dns.go`): every
//! `refresh_interval` (default 30s) each name is looked up with the record
//! `type` (SRV, the default; A, AAAA, MX or NS with a `port`), through the
//! system resolver (resolv.conf's servers, search path and ndots), or
//! through the servers named in `nameservers` (an infertel extension, for a
//! node-local DNS or a test server on another port).
//!
//! As in Prometheus:
//! - a target per record: SRV `target:port` (the final dot trimmed), A/AAAA
//!   `ip:port`, MX/NS `host:port`; labels `__meta_dns_name`, and
//!   `__meta_dns_srv_record_target` (with its final dot),
//!   `__meta_dns_srv_record_port`, `__meta_dns_mx_record_target`,
//!   `__meta_dns_ns_record_target`;
//! - a name that does not exist (NXDOMAIN, or no record of the type) has no
//!   targets; a failed lookup (timeout, SERVFAIL) keeps that name's last
//!   targets, counted in `infertel_receiver_discovery_errors_total{mechanism="dns"}`
//!   and logged.

use super::{TargetGroup, join_host_port as host_port};
use crate::primitives::Duration;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct DnsSdConfig {
    pub names: Vec<String>,
    #[serde(default = "default_type", rename = "type")]
    pub record_type: String,
    /// Required for every type but SRV.
    #[serde(default)]
    pub port: u16,
    #[serde(default = "default_refresh")]
    pub refresh_interval: Duration,
    /// infertel extension: `ip` or `ip:port` of the servers to ask instead
    /// of resolv.conf's (the search path then does not apply: names are
    /// asked as written).
    #[serde(default)]
    pub nameservers: Vec<String>,
}

fn default_type() -> String {
    "SRV".into()
}

fn default_refresh() -> Duration {
    Duration::from_secs(30)
}

impl DnsSdConfig {
    /// Prometheus' checks, with its messages.
    pub fn validate(&self) -> Result<(), String> {
        if self.names.is_empty() {
            return Err("DNS-SD config must contain at least one SRV record name".into());
        }
        match self.record_type.to_ascii_uppercase().as_str() {
            "SRV" => {}
            "A" | "AAAA" | "MX" | "NS" => {
                if self.port == 0 {
                    return Err("a port is required in DNS-SD configs for all record types except SRV".into());
                }
            }
            t => return Err(format!("invalid DNS-SD records type {t} (one of SRV, A, AAAA, MX, NS)")),
        }
        if self.refresh_interval.get().is_zero() {
            return Err("refresh_interval must be greater than 0".into());
        }
        for s in &self.nameservers {
            parse_server(s)?;
        }
        Ok(())
    }

    fn query_type(&self) -> RecordType {
        match self.record_type.to_ascii_uppercase().as_str() {
            "A" => RecordType::A,
            "AAAA" => RecordType::AAAA,
            "MX" => RecordType::MX,
            "NS" => RecordType::NS,
            _ => RecordType::SRV,
        }
    }
}

fn parse_server(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| format!("nameservers: {s:?} is not an IP address or IP:port"))
}

/// One `dns_sd_configs` entry: its resolver, each name's last good groups,
/// when it is next due.
pub struct DnsSd {
    cfg: DnsSdConfig,
    resolver: TokioResolver,
    last: BTreeMap<String, Vec<TargetGroup>>,
    pub next_due: tokio::time::Instant,
}

impl DnsSd {
    pub fn new(cfg: DnsSdConfig) -> Result<DnsSd, String> {
        let provider = TokioRuntimeProvider::default();
        let mut builder = if cfg.nameservers.is_empty() {
            TokioResolver::builder_tokio().map_err(|e| format!("system resolver configuration: {e}"))?
        } else {
            let mut servers = Vec::new();
            for s in &cfg.nameservers {
                let addr = parse_server(s)?;
                let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
                for c in &mut ns.connections {
                    c.port = addr.port();
                }
                servers.push(ns);
            }
            TokioResolver::builder_with_config(ResolverConfig::from_parts(None, vec![], servers), provider)
        };
        // Each refresh asks afresh, as Prometheus does: no answer outlives
        // its refresh.
        let opts: &mut ResolverOpts = builder.options_mut();
        opts.cache_size = 0;
        // Prometheus' client: 2s per server, one try each (a refresh
        // failing fast keeps the last targets; the next one comes soon).
        opts.timeout = std::time::Duration::from_secs(2);
        opts.attempts = 1;
        let resolver = builder.build().map_err(|e| format!("resolver: {e}"))?;
        Ok(DnsSd { cfg, resolver, last: BTreeMap::new(), next_due: tokio::time::Instant::now() })
    }

    /// The groups now: looked up again when due; a name whose lookup fails
    /// keeps its last groups, and the failure is returned.
    pub async fn refresh(&mut self) -> (Vec<TargetGroup>, Vec<String>) {
        let mut errors = Vec::new();
        if tokio::time::Instant::now() >= self.next_due {
            self.next_due = tokio::time::Instant::now() + self.cfg.refresh_interval.get();
            let lookups = self.cfg.names.iter().map(|n| self.lookup(n));
            let answers = futures_util::future::join_all(lookups).await;
            for (name, answer) in self.cfg.names.iter().zip(answers) {
                match answer {
                    Ok(groups) => {
                        self.last.insert(name.clone(), groups);
                    }
                    Err(e) => errors
                        .push(format!("dns_sd {name} ({}): {e} (keeping its previous targets)", self.cfg.record_type)),
                }
            }
        }
        (self.last.values().flatten().cloned().collect(), errors)
    }

    async fn lookup(&self, name: &str) -> Result<Vec<TargetGroup>, String> {
        let answer = match self.resolver.lookup(name, self.cfg.query_type()).await {
            Ok(a) => a,
            // NXDOMAIN or no record of the type: the name has no targets.
            Err(e) if e.is_no_records_found() => return Ok(Vec::new()),
            Err(e) => return Err(e.to_string()),
        };
        let mut out = Vec::new();
        for (i, record) in answer.answers().iter().enumerate() {
            let mut labels = BTreeMap::from([("__meta_dns_name".to_string(), name.to_string())]);
            let target = match &record.data {
                RData::SRV(srv) => {
                    let t = srv.target.to_string();
                    labels.insert("__meta_dns_srv_record_target".into(), t.clone());
                    labels.insert("__meta_dns_srv_record_port".into(), srv.port.to_string());
                    host_port(t.trim_end_matches('.'), srv.port)
                }
                RData::MX(mx) => {
                    let t = mx.exchange.to_string();
                    labels.insert("__meta_dns_mx_record_target".into(), t.clone());
                    host_port(t.trim_end_matches('.'), self.cfg.port)
                }
                RData::NS(ns) => {
                    let t = ns.0.to_string();
                    labels.insert("__meta_dns_ns_record_target".into(), t.clone());
                    host_port(t.trim_end_matches('.'), self.cfg.port)
                }
                RData::A(a) => host_port(&a.0.to_string(), self.cfg.port),
                RData::AAAA(a) => host_port(&a.0.to_string(), self.cfg.port),
                // A CNAME comes with the records it points to.
                RData::CNAME(_) => continue,
                other => {
                    tracing::warn!(name, "dns_sd: unexpected record {other:?}; skipped");
                    continue;
                }
            };
            out.push(TargetGroup { source: format!("dns/{name}/{i}"), targets: vec![target], labels });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(y: &str) -> DnsSdConfig {
        serde_yaml::from_str(y).unwrap()
    }

    #[test]
    fn validation_as_prometheus() {
        assert!(parse("names: [_m._tcp.x]").validate().is_ok());
        assert!(parse("names: []").validate().unwrap_err().contains("at least one"));
        assert!(parse("names: [x]\ntype: A").validate().unwrap_err().contains("port is required"));
        assert!(parse("names: [x]\ntype: a\nport: 80").validate().is_ok());
        assert!(
            parse("names: [x]\ntype: TXT\nport: 80")
                .validate()
                .unwrap_err()
                .contains("invalid DNS-SD records type TXT")
        );
        assert!(
            parse("names: [x]\nnameservers: ['127.0.0.1:5353', '::1', 'dns']")
                .validate()
                .unwrap_err()
                .contains("\"dns\"")
        );
        assert!(serde_yaml::from_str::<DnsSdConfig>("names: [x]\nrefresh: 1s").is_err());
    }

    #[test]
    fn join_host_port() {
        assert_eq!(host_port("fd00::1", 80), "[fd00::1]:80");
        assert_eq!(host_port("a.b", 80), "a.b:80");
    }
}
