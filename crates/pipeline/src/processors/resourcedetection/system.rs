//! Detector `system`: the host, as contrib's system detector reads it.
//!
//! - `host.name` from the first of `hostname_sources` (default `[dns, os]`)
//!   that answers: `os` is the kernel's hostname; `dns` its fully qualified
//!   name (the canonical name `/etc/hosts` gives it, else the resolver's
//!   canonical name); `cname` the DNS CNAME of the hostname; `lookup` the
//!   reverse (PTR) name of the hostname's address. When every source fails,
//!   detection fails, as in contrib.
//! - `os.type` (`linux`), on by default; `host.id` (`/etc/machine-id`, as the
//!   OpenTelemetry SDKs read it), `host.arch` (Go's names: `amd64`, `arm64`)
//!   and `os.description` (`/etc/os-release`'s `PRETTY_NAME`) when enabled in
//!   `resource_attributes`.

use super::{Detected, Enabled};
use serde::Deserialize;

#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SystemConfig {
    #[serde(default)]
    pub hostname_sources: Vec<String>,
    #[serde(default)]
    pub resource_attributes: SystemAttributes,
}

/// `resource_attributes`, contrib's list for the system detector.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SystemAttributes {
    #[serde(rename = "host.name")]
    host_name: Option<Enabled>,
    #[serde(rename = "os.type")]
    os_type: Option<Enabled>,
    #[serde(rename = "host.id")]
    host_id: Option<Enabled>,
    #[serde(rename = "host.arch")]
    host_arch: Option<Enabled>,
    #[serde(rename = "os.description")]
    os_description: Option<Enabled>,
    #[serde(rename = "host.ip")]
    host_ip: Option<Enabled>,
    #[serde(rename = "host.mac")]
    host_mac: Option<Enabled>,
    #[serde(rename = "host.cpu.vendor.id")]
    host_cpu_vendor_id: Option<Enabled>,
    #[serde(rename = "host.cpu.family")]
    host_cpu_family: Option<Enabled>,
    #[serde(rename = "host.cpu.model.id")]
    host_cpu_model_id: Option<Enabled>,
    #[serde(rename = "host.cpu.model.name")]
    host_cpu_model_name: Option<Enabled>,
    #[serde(rename = "host.cpu.stepping")]
    host_cpu_stepping: Option<Enabled>,
    #[serde(rename = "host.cpu.cache.l2.size")]
    host_cpu_cache_l2_size: Option<Enabled>,
}

impl SystemAttributes {
    /// `(attribute, its setting, on by default, built here)`.
    fn all(&self) -> [(&'static str, Option<Enabled>, bool, bool); 13] {
        [
            ("host.name", self.host_name, true, true),
            ("os.type", self.os_type, true, true),
            ("host.id", self.host_id, false, true),
            ("host.arch", self.host_arch, false, true),
            ("os.description", self.os_description, false, true),
            ("host.ip", self.host_ip, false, false),
            ("host.mac", self.host_mac, false, false),
            ("host.cpu.vendor.id", self.host_cpu_vendor_id, false, false),
            ("host.cpu.family", self.host_cpu_family, false, false),
            ("host.cpu.model.id", self.host_cpu_model_id, false, false),
            ("host.cpu.model.name", self.host_cpu_model_name, false, false),
            ("host.cpu.stepping", self.host_cpu_stepping, false, false),
            ("host.cpu.cache.l2.size", self.host_cpu_cache_l2_size, false, false),
        ]
    }
}

const SOURCES: &[&str] = &["dns", "os", "cname", "lookup"];

impl SystemConfig {
    /// Errors as `(key relative to the detector section, message)`.
    pub fn check(&self) -> Result<(), (String, String)> {
        for (i, s) in self.hostname_sources.iter().enumerate() {
            if !SOURCES.contains(&s.as_str()) {
                return Err((
                    format!("hostname_sources[{i}]"),
                    format!("invalid hostname source {s:?} (dns, os, cname, lookup)"),
                ));
            }
        }
        for (k, set, _, built) in self.resource_attributes.all() {
            if !built && set.is_some_and(|e| e.enabled) {
                return Err((
                    format!("resource_attributes.{k}.enabled"),
                    format!(
                        "{k} is not built yet; the system detector here gives host.name, os.type, host.id, host.arch and os.description"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn enabled(&self, attr: &str) -> bool {
        self.resource_attributes.all().iter().any(|(n, set, on, _)| *n == attr && set.map_or(*on, |e| e.enabled))
    }
}

pub async fn detect(cfg: &SystemConfig) -> Result<Detected, String> {
    let sources: Vec<&str> = if cfg.hostname_sources.is_empty() {
        vec!["dns", "os"]
    } else {
        cfg.hostname_sources.iter().map(String::as_str).collect()
    };
    let mut failures = Vec::new();
    let mut host = None;
    for s in sources {
        let got = match s {
            "os" => os_hostname(),
            "dns" => fqdn(),
            "cname" => cname().await,
            "lookup" => reverse_lookup().await,
            other => Err(format!("unknown source {other}")),
        };
        match got {
            Ok(h) if !h.is_empty() => {
                host = Some(h);
                break;
            }
            Ok(_) => failures.push(format!("{s}: empty")),
            Err(e) => failures.push(format!("{s}: {e}")),
        }
    }
    let Some(host) = host else {
        return Err(format!("all hostname sources failed to get hostname ({})", failures.join("; ")));
    };
    let mut out: Detected = Vec::new();
    if cfg.enabled("host.name") {
        out.push(("host.name".into(), host));
    }
    if cfg.enabled("os.type") {
        out.push(("os.type".into(), std::env::consts::OS.to_string()));
    }
    if cfg.enabled("host.id") {
        match host_id() {
            Some(id) => out.push(("host.id".into(), id)),
            None => tracing::warn!("resourcedetection system: failed to get host ID (no /etc/machine-id)"),
        }
    }
    if cfg.enabled("host.arch") {
        out.push(("host.arch".into(), go_arch().to_string()));
    }
    if cfg.enabled("os.description") {
        if let Some(d) = os_description() {
            out.push(("os.description".into(), d));
        }
    }
    Ok(out)
}

pub fn os_hostname() -> Result<String, String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most
    // that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Err(format!("gethostname: {}", std::io::Error::last_os_error()));
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).map_err(|_| "the hostname is not UTF-8".to_string())
}

/// The fully qualified name: `/etc/hosts`' canonical name for the hostname,
/// else the resolver's (`getaddrinfo` with `AI_CANONNAME`).
pub fn fqdn() -> Result<String, String> {
    let host = os_hostname()?;
    if let Ok(text) = std::fs::read_to_string("/etc/hosts")
        && let Some(name) = hosts_canonical(&text, &host)
    {
        return Ok(name);
    }
    canonical_name(&host)
}

/// The first name of the `/etc/hosts` line that lists `host`.
pub fn hosts_canonical(text: &str, host: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut fields = line.split_whitespace();
        let Some(_addr) = fields.next() else { continue };
        let names: Vec<&str> = fields.collect();
        if names.iter().any(|n| n.eq_ignore_ascii_case(host)) {
            return names.first().map(|n| n.to_string());
        }
    }
    None
}

fn canonical_name(host: &str) -> Result<String, String> {
    let c = std::ffi::CString::new(host).map_err(|_| "the hostname holds a NUL".to_string())?;
    // SAFETY: hints is zeroed as getaddrinfo expects; the result list is
    // freed with freeaddrinfo on every path below.
    unsafe {
        let mut hints: libc::addrinfo = std::mem::zeroed();
        hints.ai_flags = libc::AI_CANONNAME;
        hints.ai_family = libc::AF_UNSPEC;
        let mut res: *mut libc::addrinfo = std::ptr::null_mut();
        let rc = libc::getaddrinfo(c.as_ptr(), std::ptr::null(), &hints, &mut res);
        if rc != 0 || res.is_null() {
            return Err(format!("no canonical name for {host} (getaddrinfo {rc})"));
        }
        let name = if (*res).ai_canonname.is_null() {
            None
        } else {
            std::ffi::CStr::from_ptr((*res).ai_canonname).to_str().ok().map(str::to_string)
        };
        libc::freeaddrinfo(res);
        name.ok_or_else(|| format!("no canonical name for {host}"))
    }
}

async fn resolver() -> Result<hickory_resolver::TokioResolver, String> {
    hickory_resolver::TokioResolver::builder_tokio()
        .map_err(|e| format!("resolver: {e}"))
        .and_then(|b| b.build().map_err(|e| format!("resolver: {e}")))
}

async fn cname() -> Result<String, String> {
    let host = os_hostname()?;
    let r = resolver().await?;
    let answer = r
        .lookup(host.as_str(), hickory_resolver::proto::rr::RecordType::CNAME)
        .await
        .map_err(|e| format!("CNAME of {host}: {e}"))?;
    for rec in answer.answers() {
        if let hickory_resolver::proto::rr::RData::CNAME(c) = &rec.data {
            return Ok(c.0.to_utf8().trim_end_matches('.').to_string());
        }
    }
    Err(format!("{host} has no CNAME"))
}

async fn reverse_lookup() -> Result<String, String> {
    let host = os_hostname()?;
    let r = resolver().await?;
    let ips = tokio::net::lookup_host((host.as_str(), 0)).await.map_err(|e| format!("address of {host}: {e}"))?;
    for a in ips {
        let name = hickory_resolver::proto::rr::Name::from(a.ip());
        if let Ok(names) = r.lookup(name, hickory_resolver::proto::rr::RecordType::PTR).await {
            for rec in names.answers() {
                if let hickory_resolver::proto::rr::RData::PTR(p) = &rec.data {
                    return Ok(p.0.to_utf8().trim_end_matches('.').to_string());
                }
            }
        }
    }
    Err(format!("no PTR record for the addresses of {host}"))
}

fn host_id() -> Option<String> {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
}

/// Go's `GOARCH` for this build's architecture, as the Collector reports it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "riscv64" => "riscv64",
        "s390x" => "s390x",
        other => other,
    }
}

fn os_description() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| v.trim_matches('"').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_file_gives_the_canonical_name() {
        let text = "127.0.0.1 localhost\n# 10.0.0.1 gpu-1.old gpu-1\n10.0.0.2\tgpu-1.lab.example gpu-1 # the node\n";
        assert_eq!(hosts_canonical(text, "gpu-1").as_deref(), Some("gpu-1.lab.example"));
        assert_eq!(hosts_canonical(text, "GPU-1").as_deref(), Some("gpu-1.lab.example"));
        assert_eq!(hosts_canonical(text, "other"), None);
    }

    #[test]
    fn attributes_are_checked_against_contribs_list() {
        let cfg: SystemConfig =
            serde_yaml::from_str("{hostname_sources: [os, dns], resource_attributes: {host.id: {enabled: true}}}")
                .unwrap();
        assert!(cfg.check().is_ok());
        assert!(cfg.enabled("host.id") && cfg.enabled("host.name") && !cfg.enabled("host.arch"));
        let bad: SystemConfig = serde_yaml::from_str("{hostname_sources: [etc]}").unwrap();
        assert_eq!(bad.check().unwrap_err().0, "hostname_sources[0]");
        let unbuilt: SystemConfig = serde_yaml::from_str("{resource_attributes: {host.ip: {enabled: true}}}").unwrap();
        assert!(unbuilt.check().unwrap_err().1.contains("not built yet"));
        let off: SystemConfig = serde_yaml::from_str("{resource_attributes: {host.ip: {enabled: false}}}").unwrap();
        assert!(off.check().is_ok());
    }

    #[tokio::test]
    async fn the_os_source_is_the_kernels_hostname() {
        let cfg: SystemConfig = serde_yaml::from_str(
            "{hostname_sources: [os], resource_attributes: {host.arch: {enabled: true}, os.type: {enabled: false}}}",
        )
        .unwrap();
        let got = detect(&cfg).await.unwrap();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(got[0], ("host.name".to_string(), kernel.trim().to_string()));
        assert!(got.iter().all(|(k, _)| k != "os.type"));
        assert!(got.iter().any(|(k, v)| k == "host.arch" && !v.is_empty()));
    }
}
