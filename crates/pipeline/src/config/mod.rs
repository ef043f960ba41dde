//! The configuration file, shaped like the OpenTelemetry Collector's:
//! `receivers`, `processors`, `exporters`, `extensions` (maps from component id
//! `type[/name]` to that component's own config) and `service` (pipelines and
//! the agent's own telemetry).
//!
//! Each component type owns its config struct (next to its implementation);
//! this module only dispatches on the type part of the id. Deserialization is
//! streamed from the YAML text so errors keep serde_yaml's path and
//! line:column. `${env:VAR}` expansion happens on the text first so line
//! numbers stay those of the file the user wrote.

pub mod contrib;
pub mod env;
mod issues;
pub mod prometheus_file;

use crate::exporters::ExporterConfig;
use crate::extensions::ExtensionConfig;
use crate::processors::ProcessorConfig;
use crate::receivers::ReceiverConfig;
// The primitives every component config uses live in `crate::primitives`
// (a leaf: it knows no component); re-exported here for the config's own
// code and for users of the crate.
pub use crate::primitives::{ByteSize, ComponentId, ComponentKind, Duration, duration, id, listen_addr, or_default};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;

/// A section: component id → config, in file order.
#[derive(Debug)]
pub struct Components<T>(pub Vec<(ComponentId, T)>);

impl<T> Default for Components<T> {
    fn default() -> Self {
        Components(Vec::new())
    }
}

impl<T> Components<T> {
    pub fn get(&self, id: &ComponentId) -> Option<&T> {
        self.0.iter().find(|(i, _)| i == id).map(|(_, c)| c)
    }
    pub fn ids(&self) -> impl Iterator<Item = &ComponentId> {
        self.0.iter().map(|(i, _)| i)
    }
}

struct KindSeed<'a, T>(&'a str, PhantomData<T>);

impl<'de, T: ComponentKind> DeserializeSeed<'de> for KindSeed<'_, T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        T::deserialize_kind(self.0, d)
    }
}

impl<'de, T: ComponentKind> Deserialize<'de> for Components<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: ComponentKind> Visitor<'de> for V<T> {
            type Value = Components<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a map of {} ids (type[/name]) to their config", T::SECTION)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Components(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(ComponentId, T)> = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let id = ComponentId::parse(&key).map_err(de::Error::custom)?;
                    let kind = contrib::canonical(T::SECTION, &id.kind);
                    if !T::KNOWN.contains(&kind) {
                        let hint = contrib::hint(T::SECTION, &id.kind).map(|h| format!("; {h}")).unwrap_or_default();
                        return Err(de::Error::custom(format!(
                            "unknown {} type {:?} in {:?} (this build knows: {}){hint}",
                            T::SECTION,
                            id.kind,
                            key,
                            T::KNOWN.join(", ")
                        )));
                    }
                    if out.iter().any(|(i, _)| *i == id) {
                        return Err(de::Error::custom(format!("{} {key:?} is defined twice", T::SECTION)));
                    }
                    let cfg = map.next_value_seed(KindSeed::<T>(kind, PhantomData))?;
                    out.push((id, cfg));
                }
                Ok(Components(out))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// The whole file.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub receivers: Components<ReceiverConfig>,
    #[serde(default)]
    pub processors: Components<ProcessorConfig>,
    #[serde(default)]
    pub exporters: Components<ExporterConfig>,
    #[serde(default)]
    pub extensions: Components<ExtensionConfig>,
    pub service: ServiceConfig,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Extensions to start, by id.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// `metrics` or `metrics/NAME` → the pipeline.
    #[serde(default)]
    pub pipelines: BTreeMap<String, PipelineConfig>,
    #[serde(default, deserialize_with = "or_default")]
    pub telemetry: TelemetryConfig,
    /// How long shutdown (and a reload) may take to stop scraping, send
    /// stale markers and flush to the backend or the on-disk queue; 10s
    /// when unset.
    #[serde(default)]
    pub shutdown_timeout: Option<Duration>,
}

impl ServiceConfig {
    pub fn shutdown_timeout(&self) -> std::time::Duration {
        self.shutdown_timeout.map(|d| d.get()).unwrap_or(std::time::Duration::from_secs(10))
    }
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    #[serde(default)]
    pub receivers: Vec<String>,
    #[serde(default)]
    pub processors: Vec<String>,
    #[serde(default)]
    pub exporters: Vec<String>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
#[derive(Default)]
pub struct TelemetryConfig {
    pub metrics: TelemetryMetricsConfig,
    pub logs: TelemetryLogsConfig,
    /// The agent's own resource (the Collector's `service.telemetry.resource`):
    /// added to `service.name: infertel` and `service.version`; a key set
    /// to null is removed. Served as `target_info` on the self-metrics
    /// endpoint and sent with the OTLP readers' metrics.
    pub resource: BTreeMap<String, Option<String>>,
}

impl TelemetryConfig {
    /// The resource attributes, defaults first.
    pub fn resource(&self) -> Vec<(String, String)> {
        let mut out: BTreeMap<String, String> = [
            ("service.name".to_string(), "infertel".to_string()),
            ("service.version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
        ]
        .into();
        for (k, v) in &self.resource {
            match v {
                Some(v) => {
                    out.insert(k.clone(), v.clone());
                }
                None => {
                    out.remove(k);
                }
            }
        }
        out.into_iter().collect()
    }
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryMetricsConfig {
    /// Where the agent serves its own metrics (Prometheus text); `""` turns it off.
    pub address: String,
    /// `none` turns the endpoint off; anything else keeps it on.
    pub level: String,
    /// Push readers (the Collector's `readers`): the same metrics over OTLP.
    pub readers: Vec<crate::self_otlp::MetricReaderConfig>,
}

impl Default for TelemetryMetricsConfig {
    fn default() -> Self {
        TelemetryMetricsConfig { address: "127.0.0.1:8888".into(), level: "normal".into(), readers: Vec::new() }
    }
}

impl TelemetryMetricsConfig {
    /// Where the self-metrics are served: a `pull` reader's `host:port`
    /// (the Collector's shape) when there is one, else `address`.
    pub fn socket_addr(&self) -> Result<Option<SocketAddr>, String> {
        if self.level == "none" {
            return Ok(None);
        }
        if let Some(e) = crate::self_otlp::pull_endpoint(&self.readers) {
            return listen_addr(&e)
                .map(Some)
                .map_err(|err| format!("service.telemetry.metrics.readers pull.exporter.prometheus {err}"));
        }
        if self.address.is_empty() {
            return Ok(None);
        }
        listen_addr(&self.address).map(Some).map_err(|e| format!("service.telemetry.metrics.address {e}"))
    }
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryLogsConfig {
    pub level: String,
    /// `console` (human) or `json`.
    pub encoding: String,
}

impl Default for TelemetryLogsConfig {
    fn default() -> Self {
        TelemetryLogsConfig { level: "info".into(), encoding: "console".into() }
    }
}

/// A config problem, with where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigIssue {
    pub origin: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, ":{l}:{c}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Errors (the config is refused) and warnings (it runs).
#[derive(Debug, Default)]
pub struct Validation {
    pub errors: Vec<ConfigIssue>,
    pub warnings: Vec<ConfigIssue>,
}

/// The outcome of loading a file: the config, or the reasons it was refused.
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<ConfigIssue>,
}

/// Why a config was refused: the errors, and the warnings seen on the way
/// (an unset environment variable often explains an error).
#[derive(Debug)]
pub struct Refused {
    pub errors: Vec<ConfigIssue>,
    pub warnings: Vec<ConfigIssue>,
}

/// Parses, expands and validates a config; `origin` names the file in messages.
pub fn load_str(origin: &str, text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, Refused> {
    let (expanded, warnings) = env::expand(origin, text, lookup);
    load_expanded(origin, &expanded, warnings, lookup)
        .map_err(|r| Refused { errors: r.errors.into_iter().map(issues::with_hint).collect(), warnings: r.warnings })
}

/// [`load_str`] after environment expansion.
fn load_expanded(
    origin: &str,
    expanded: &str,
    mut warnings: Vec<ConfigIssue>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Loaded, Refused> {
    let expanded = expanded.to_string();
    // The secrets it holds are hidden from every log line and /metrics.
    if let Ok(mut v) = serde_yaml::from_str::<serde_yaml::Value>(&expanded) {
        // YAML merge keys (`<<: *defaults`), as Prometheus' and the
        // Collector's YAML libraries resolve them.
        let merged = has_merge_keys(&expanded) && v.apply_merge().is_ok();
        crate::secrets::register_config(&v);
        // A Prometheus server's file (prometheus.yml): run as Prometheus
        // agent mode runs it.
        if let Some(m) = v.as_mapping()
            && prometheus_file::is_prometheus_file(m)
        {
            let translated = match prometheus_file::translate(
                origin,
                &expanded,
                &v,
                &mut warnings,
                lookup("INFERTEL_METRICS_ADDRESS"),
            ) {
                Ok(t) => t,
                Err(errors) => return Err(Refused { errors, warnings }),
            };
            let mut translated = translated;
            let mut errors = Vec::new();
            include_config_files(origin, &expanded, &mut translated, &mut warnings, &mut errors);
            unsupported_discovery(origin, &expanded, &translated, &mut errors);
            if !errors.is_empty() {
                return Err(Refused { errors, warnings });
            }
            let mut config: Config = match serde_yaml::from_value(translated.clone()) {
                Ok(c) => c,
                Err(e) => {
                    let errors = issues::all_errors(origin, &expanded, Some(&translated), yaml_issue(origin, &e));
                    return Err(Refused { errors, warnings });
                }
            };
            expand_external_labels(&mut config, lookup);
            let v = validate(origin, &expanded, &config);
            warnings.extend(v.warnings);
            return if v.errors.is_empty() {
                Ok(Loaded { config, warnings })
            } else {
                Err(Refused { errors: v.errors, warnings })
            };
        }
        if merged {
            // Loaded from the merged tree (serde's errors then carry no line).
            let text = serde_yaml::to_string(&v).unwrap_or_default();
            return load_expanded(origin, &text, warnings, lookup);
        }
    }
    let stripped = match server_sections(origin, &expanded, &mut warnings) {
        Ok(s) => s,
        Err(errors) => return Err(Refused { errors, warnings }),
    };
    // A Collector config with traces, logs or profiles: refused by name and
    // line, with the rest of the file checked as well.
    if let Some(mut root) = stripped.clone().or_else(|| serde_yaml::from_str::<serde_yaml::Value>(&expanded).ok()) {
        let mut errors = issues::other_signals(origin, &expanded, &mut root);
        if !errors.is_empty() {
            errors.extend(issues::every_error(origin, &expanded, &root));
            if let Ok(config) = serde_yaml::from_value::<Config>(root) {
                errors.extend(validate(origin, &expanded, &config).errors);
            }
            errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
            return Err(Refused { errors, warnings });
        }
    }
    let parsed = match &stripped {
        // A pasted server config, its server-only sections taken out.
        Some(v) => serde_yaml::from_value(v.clone()),
        None => serde_yaml::from_str(&expanded),
    };
    let mut config: Config = match parsed {
        Ok(c) => c,
        Err(e) => {
            // serde stops at the first error; the others are found piece by piece.
            let root = stripped.clone().or_else(|| serde_yaml::from_str::<serde_yaml::Value>(&expanded).ok());
            let errors = issues::all_errors(origin, &expanded, root.as_ref(), yaml_issue(origin, &e));
            return Err(Refused { errors, warnings });
        }
    };
    expand_external_labels(&mut config, lookup);
    let v = validate(origin, &expanded, &config);
    warnings.extend(v.warnings);
    if v.errors.is_empty() { Ok(Loaded { config, warnings }) } else { Err(Refused { errors: v.errors, warnings }) }
}

/// `global.external_labels` values expanded as Prometheus expands them with
/// `--enable-feature=expand-external-labels` (Go's `os.Expand`): `${VAR}`
/// (already done by the config's own expansion) and `$VAR`, an unset
/// variable becoming empty.
fn expand_external_labels(config: &mut Config, lookup: &dyn Fn(&str) -> Option<String>) {
    for (_, rc) in config.receivers.0.iter_mut() {
        let ReceiverConfig::Prometheus(p) = rc else { continue };
        for v in p.config.global.external_labels.values_mut() {
            if v.contains('$') {
                *v = expand_bare(v, lookup);
            }
        }
    }
}

fn expand_bare(v: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(p) = rest.find('$') {
        out.push_str(&rest[..p]);
        let after = &rest[p + 1..];
        let n = after.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
        if n == 0 {
            out.push('$');
            rest = after;
            continue;
        }
        out.push_str(&lookup(&after[..n]).unwrap_or_default());
        rest = &after[n..];
    }
    out.push_str(rest);
    out
}

fn has_merge_keys(text: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim_start().trim_start_matches("- ");
        t.starts_with("<<:") || t.starts_with("\"<<\":")
    })
}

/// Sections of a Prometheus server's configuration that a `prometheus`
/// receiver's `config` may hold when a whole `prometheus.yml` is pasted:
/// `rule_files`, `alerting` and `storage` are taken out with one warning
/// each (nothing here evaluates rules, sends alerts or keeps a TSDB);
/// `remote_write` and `remote_read` are refused with the way to do it;
/// `scrape_config_files` are read into `scrape_configs`. `Some` is the
/// config so changed; `None`: nothing to change.
fn server_sections(
    origin: &str,
    text: &str,
    warnings: &mut Vec<ConfigIssue>,
) -> Result<Option<serde_yaml::Value>, Vec<ConfigIssue>> {
    let Ok(mut root) = serde_yaml::from_str::<serde_yaml::Value>(text) else { return Ok(None) };
    let mut changed = false;
    let mut errors = Vec::new();
    let Some(receivers) = root.get_mut("receivers").and_then(|r| r.as_mapping_mut()) else { return Ok(None) };
    for (id, rc) in receivers.iter_mut() {
        let id = id.as_str().unwrap_or("").to_string();
        if !(id == "prometheus" || id.starts_with("prometheus/")) {
            continue;
        }
        let Some(cfg) = rc.get_mut("config").and_then(|c| c.as_mapping_mut()) else { continue };
        let server = "ignored: a Prometheus server setting with no meaning for an agent";
        let sections = [
            ("rule_files", RULES),
            ("alerting", RULES),
            ("storage", RULES),
            ("tracing", server),
            ("otlp", server),
            ("runtime", server),
        ];
        for (key, message) in sections {
            if cfg.remove(key).is_some() {
                changed = true;
                let (line, column) = locate(text, "receivers:", &format!("{key}:"));
                warnings.push(ConfigIssue {
                    origin: origin.into(),
                    line,
                    column,
                    path: format!("receivers.{id}.config.{key}"),
                    message: message.into(),
                });
            }
        }
        for (key, message) in [
            (
                "remote_write",
                "data leaves infertel through an exporter: move each remote_write entry to exporters.prometheusremotewrite (url becomes endpoint) and list it in service.pipelines, or run the Prometheus file as it is (infertel run --config prometheus.yml)",
            ),
            ("remote_read", "infertel does not read from remote storage: remove it"),
        ] {
            if cfg.contains_key(key) {
                let (line, column) = locate(text, "receivers:", &format!("{key}:"));
                errors.push(ConfigIssue {
                    origin: origin.into(),
                    line,
                    column,
                    path: format!("receivers.{id}.config.{key}"),
                    message: message.into(),
                });
            }
        }
    }
    changed |= include_config_files(origin, text, &mut root, warnings, &mut errors);
    unsupported_discovery(origin, text, &root, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(changed.then_some(root))
}

const RULES: &str = "ignored: infertel evaluates no rules and sends no alerts";

/// Discovery mechanisms Prometheus has and infertel does not (`consul`,
/// `ec2`, `azure`, ...): an error naming the mechanism, its job and line, and
/// the way to feed those targets in, rather than serde's "unknown field".
fn unsupported_discovery(origin: &str, text: &str, root: &serde_yaml::Value, errors: &mut Vec<ConfigIssue>) {
    const SUPPORTED: &[&str] =
        &["static_configs", "file_sd_configs", "http_sd_configs", "dns_sd_configs", "kubernetes_sd_configs"];
    let Some(receivers) = root.get("receivers").and_then(|r| r.as_mapping()) else { return };
    for (id, rc) in receivers {
        let id = id.as_str().unwrap_or("");
        let Some(jobs) = rc.get("config").and_then(|c| c.get("scrape_configs")).and_then(|j| j.as_sequence()) else {
            continue;
        };
        for (i, job) in jobs.iter().enumerate() {
            let Some(m) = job.as_mapping() else { continue };
            for k in m.keys().filter_map(|k| k.as_str()) {
                if k.ends_with("_sd_configs") && !SUPPORTED.contains(&k) {
                    let mechanism = k.trim_end_matches("_sd_configs");
                    let (line, column) = locate(text, "", &format!("{k}:"));
                    errors.push(ConfigIssue {
                        origin: origin.into(),
                        line,
                        column,
                        path: format!("receivers.{id}.config.scrape_configs[{i}].{k}"),
                        message: format!(
                            "{mechanism} service discovery is not supported: infertel discovers targets with static_configs, file_sd_configs, http_sd_configs, dns_sd_configs and kubernetes_sd_configs; write these targets to a file (file_sd_configs) or serve them as JSON (http_sd_configs)"
                        ),
                    });
                }
            }
        }
    }
}

/// Reads each prometheus receiver's `scrape_config_files` into its
/// `scrape_configs` (paths relative to the directory of `origin`); true
/// when any receiver had the key.
fn include_config_files(
    origin: &str,
    text: &str,
    root: &mut serde_yaml::Value,
    warnings: &mut Vec<ConfigIssue>,
    errors: &mut Vec<ConfigIssue>,
) -> bool {
    let base = std::path::Path::new(origin)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let Some(receivers) = root.get_mut("receivers").and_then(|r| r.as_mapping_mut()) else { return false };
    let mut changed = false;
    for (id, rc) in receivers.iter_mut() {
        let id = id.as_str().unwrap_or("").to_string();
        let Some(cfg) = rc.get_mut("config").and_then(|c| c.as_mapping_mut()) else { continue };
        if !cfg.contains_key("scrape_config_files") {
            continue;
        }
        changed = true;
        let (line, column) = locate(text, "", "scrape_config_files:");
        let path = format!("receivers.{id}.config.scrape_config_files");
        match crate::receivers::prometheus::config_files::include(cfg, base) {
            Ok(inc) => {
                for m in inc.missing {
                    warnings.push(ConfigIssue {
                        origin: origin.into(),
                        line,
                        column,
                        path: path.clone(),
                        message: format!("{}: no such file: no jobs added from it", m.display()),
                    });
                }
            }
            Err(message) => errors.push(ConfigIssue { origin: origin.into(), line, column, path, message }),
        }
    }
    changed
}

fn yaml_issue(origin: &str, e: &serde_yaml::Error) -> ConfigIssue {
    let (line, column) = match e.location() {
        Some(l) => (Some(l.line()), Some(l.column())),
        None => (None, None),
    };
    // serde_yaml appends " at line L column C"; we print the location up front.
    let mut msg = e.to_string();
    if let Some(i) = msg.rfind(" at line ") {
        msg.truncate(i);
    }
    ConfigIssue { origin: origin.into(), line, column, path: String::new(), message: msg }
}

/// Finds where `needle` appears after the line holding `anchor`, for messages
/// about values that serde does not locate (references between sections).
fn locate(text: &str, anchor: &str, needle: &str) -> (Option<usize>, Option<usize>) {
    let mut after_anchor = anchor.is_empty();
    for (i, line) in text.lines().enumerate() {
        if !after_anchor {
            let t = line.trim_start();
            // `- job_name: a` opens a list item.
            let t = t.strip_prefix("- ").map(str::trim_start).unwrap_or(t);
            if t.starts_with(anchor) || (anchor.contains(": ") && unquoted(t).starts_with(anchor)) {
                after_anchor = true;
                // Flow style: the needle may follow on the anchor's line.
                let start = line.find(anchor).map(|p| p + anchor.len()).unwrap_or(line.len());
                if let Some(pos) = find_token(&line[start..], needle) {
                    return (Some(i + 1), Some(start + pos + 1));
                }
            }
            continue;
        }
        if let Some(pos) = find_token(line, needle) {
            return (Some(i + 1), Some(pos + 1));
        }
    }
    (None, None)
}

/// `key: "value"` read as `key: value` (an anchor names a value as written).
fn unquoted(line: &str) -> String {
    line.replacen(": \"", ": ", 1).replacen(": '", ": ", 1)
}

fn find_token(line: &str, needle: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = line[from..].find(needle) {
        let s = from + p;
        let e = s + needle.len();
        let before_ok = s == 0 || matches!(line.as_bytes()[s - 1], b' ' | b'[' | b'{' | b',' | b'"' | b'\'' | b'-');
        let after_ok = e == line.len() || matches!(line.as_bytes()[e], b' ' | b']' | b',' | b'"' | b'\'' | b':' | b'#');
        if before_ok && after_ok {
            return Some(s);
        }
        from = e;
    }
    None
}

/// Cross-section checks: references resolve, pipelines are complete, component
/// configs are valid; unused components are warnings (as in otelcol).
pub fn validate(origin: &str, text: &str, cfg: &Config) -> Validation {
    let mut v = Validation::default();
    let issue = |path: String, message: String, needle: &str| {
        let (line, column) = locate(text, "service:", needle);
        ConfigIssue { origin: origin.into(), line, column, path, message }
    };
    if cfg.service.pipelines.is_empty() {
        v.errors.push(ConfigIssue {
            origin: origin.into(),
            line: None,
            column: None,
            path: "service.pipelines".into(),
            message: "no pipeline defined: add service.pipelines.metrics with receivers and exporters".into(),
        });
    }
    let mut used: Vec<(String, ComponentId)> = Vec::new();
    for (pname, p) in &cfg.service.pipelines {
        let path = format!("service.pipelines.{pname}");
        let ptype = pname.split('/').next().unwrap_or("");
        if ptype != "metrics" {
            v.errors.push(issue(
                path.clone(),
                format!("pipeline type {ptype:?} is not supported: infertel carries metrics (name it \"metrics\" or \"metrics/NAME\")"),
                pname,
            ));
        }
        if p.receivers.is_empty() {
            v.errors.push(issue(path.clone(), "must have at least one receiver".into(), pname));
        }
        if p.exporters.is_empty() {
            v.errors.push(issue(path.clone(), "must have at least one exporter".into(), pname));
        }
        type Section<'a> = (&'a str, &'a Vec<String>, &'a dyn Fn(&ComponentId) -> bool);
        let sections: [Section; 3] = [
            ("receivers", &p.receivers, &|id| cfg.receivers.get(id).is_some()),
            ("processors", &p.processors, &|id| cfg.processors.get(id).is_some()),
            ("exporters", &p.exporters, &|id| cfg.exporters.get(id).is_some()),
        ];
        for (section, refs, exists) in sections {
            for (i, r) in refs.iter().enumerate() {
                let rpath = format!("{path}.{section}[{i}]");
                match ComponentId::parse(r) {
                    Err(e) => v.errors.push(issue(rpath, e, r)),
                    Ok(id) if !exists(&id) => v.errors.push(issue(
                        rpath,
                        format!("references {section} {r:?}, which is not defined in the top-level {section} section"),
                        r,
                    )),
                    Ok(id) => {
                        if refs[..i].contains(r) {
                            v.errors.push(issue(rpath, format!("{r:?} is listed twice"), r));
                        }
                        used.push((section.to_string(), id));
                    }
                }
            }
        }
    }
    for (i, r) in cfg.service.extensions.iter().enumerate() {
        let rpath = format!("service.extensions[{i}]");
        match ComponentId::parse(r) {
            Err(e) => v.errors.push(issue(rpath, e, r)),
            Ok(id) if cfg.extensions.get(&id).is_none() => v.errors.push(issue(
                rpath,
                format!("references extension {r:?}, which is not defined in the top-level extensions section"),
                r,
            )),
            Ok(id) => used.push(("extensions".into(), id)),
        }
    }
    // Authenticator references from exporters must name a defined extension
    // listed under service.extensions.
    for (id, e) in &cfg.exporters.0 {
        if let Some(auth) = e.authenticator() {
            let path = format!("exporters.{id}.auth.authenticator");
            match ComponentId::parse(auth) {
                Err(err) => v.errors.push(issue(path, err, auth)),
                Ok(aid) => {
                    if cfg.extensions.get(&aid).is_none() {
                        let (line, column) = locate(text, "exporters:", auth);
                        v.errors.push(ConfigIssue {
                            origin: origin.into(),
                            line,
                            column,
                            path,
                            message: format!("authenticator {auth:?} is not defined in the extensions section"),
                        });
                    } else if !cfg.service.extensions.iter().any(|s| s == auth) {
                        let (line, column) = locate(text, "exporters:", auth);
                        v.errors.push(ConfigIssue {
                            origin: origin.into(),
                            line,
                            column,
                            path,
                            message: format!("authenticator {auth:?} must also be listed in service.extensions"),
                        });
                    }
                }
            }
        }
    }
    // The status pages: their authenticators, one endpoint each.
    let by_id: BTreeMap<String, ExtensionConfig> =
        cfg.extensions.0.iter().map(|(id, c)| (id.to_string(), c.clone())).collect();
    if let Err(message) = crate::extensions::status::server::StatusServer::from_config(&cfg.service.extensions, &by_id)
    {
        let name = message.strip_prefix("extension ").and_then(|m| m.split(':').next()).unwrap_or("");
        let (line, column) = locate(text, "extensions:", name);
        v.errors.push(ConfigIssue { origin: origin.into(), line, column, path: format!("extensions.{name}"), message });
    }
    // One pprof extension: profiles are of the whole process.
    let pprofs: Vec<&String> = cfg
        .service
        .extensions
        .iter()
        .filter(|n| by_id.get(*n).is_some_and(|e| matches!(e, ExtensionConfig::Pprof(_))))
        .collect();
    if let [_, second, ..] = pprofs[..] {
        let (line, column) = locate(text, "extensions:", second);
        v.errors.push(ConfigIssue {
            origin: origin.into(),
            line,
            column,
            path: format!("service.extensions.{second}"),
            message: format!(
                "{second}: only one pprof extension may be listed (profiles are of the whole process; {} is listed already)",
                pprofs[0]
            ),
        });
    }
    // A persistent sending queue names a file_storage extension that
    // service.extensions lists.
    for (id, e) in &cfg.exporters.0 {
        if let Some(st) = e.queue().and_then(|q| q.storage.as_deref()) {
            let path = format!("exporters.{id}.sending_queue.storage");
            let (line, column) = locate(text, "exporters:", st);
            let message = match ComponentId::parse(st) {
                Err(err) => Some(err),
                Ok(sid) => match cfg.extensions.get(&sid) {
                    None => Some(format!("storage {st:?} is not defined in the extensions section")),
                    Some(ExtensionConfig::FileStorage(_)) if !cfg.service.extensions.iter().any(|s| s == st) => {
                        Some(format!("storage {st:?} must also be listed in service.extensions"))
                    }
                    Some(ExtensionConfig::FileStorage(_)) => None,
                    Some(_) => Some(format!("storage {st:?} is not a file_storage extension")),
                },
            };
            if let Some(message) = message {
                v.errors.push(ConfigIssue { origin: origin.into(), line, column, path, message });
            }
        }
    }
    // Each component checks its own config.
    let mut job_errors = Vec::new();
    let mut component_errors = |section: &str, id: &ComponentId, r: Result<(), String>| {
        if let Err(m) = r {
            let (line, column) = locate(text, &format!("{section}:"), &id.to_string());
            v.errors.push(ConfigIssue {
                origin: origin.into(),
                line,
                column,
                path: format!("{section}.{id}"),
                message: m,
            });
        }
    };
    for (id, c) in &cfg.receivers.0 {
        let ReceiverConfig::Prometheus(pc) = c else { continue };
        // Every job's error, each at its job.
        for (path, message) in pc.errors() {
            let path = format!("receivers.{id}.{path}");
            let (line, column) = issues::locate_path(text, &path);
            job_errors.push(ConfigIssue { origin: origin.into(), line, column, path, message });
        }
        for (key, message) in pc.receiver_warnings() {
            let path = format!("receivers.{id}.{key}");
            let (line, column) = issues::locate_path(text, &path);
            v.warnings.push(ConfigIssue { origin: origin.into(), line, column, path, message });
        }
        for (key, message) in pc.warnings() {
            // A job's key is looked for after its job_name line.
            let leaf = key.rsplit('.').next().unwrap_or(&key);
            let job = key
                .strip_prefix("scrape_configs[")
                .and_then(|r| r.split(']').next())
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| pc.config.scrape_configs.get(i));
            let anchor = job.map(|j| format!("job_name: {}", j.job_name)).unwrap_or_default();
            let (line, column) = locate(text, &anchor, &format!("{leaf}:"));
            v.warnings.push(ConfigIssue {
                origin: origin.into(),
                line,
                column,
                path: format!("receivers.{id}.config.{key}"),
                message,
            });
        }
    }
    for (id, c) in &cfg.processors.0 {
        match c.check() {
            Err((key, message)) if !key.is_empty() => {
                let path = format!("processors.{id}.{key}");
                let (line, column) = issues::locate_path(text, &path);
                job_errors.push(ConfigIssue { origin: origin.into(), line, column, path, message });
            }
            r => component_errors("processors", id, r.map_err(|(_, m)| m)),
        }
    }
    for (id, c) in &cfg.exporters.0 {
        component_errors("exporters", id, c.validate());
    }
    // Collector keys whose Collector behaviour infertel does not have.
    for (id, c) in &cfg.exporters.0 {
        let warnings = match c {
            crate::exporters::ExporterConfig::PrometheusRemoteWrite(rw) => rw.warnings(),
            crate::exporters::ExporterConfig::Prometheus(p) => p.warnings(),
            _ => Vec::new(),
        };
        for (key, message) in warnings {
            let path = format!("exporters.{id}.{key}");
            let (line, column) = issues::locate_path(text, &path);
            v.warnings.push(ConfigIssue { origin: origin.into(), line, column, path, message });
        }
    }
    for (id, c) in &cfg.extensions.0 {
        for (key, message) in c.warnings() {
            let path = format!("extensions.{id}.{key}");
            let (line, column) = issues::locate_path(text, &path);
            v.warnings.push(ConfigIssue { origin: origin.into(), line, column, path, message });
        }
    }
    // Files read when used (as Prometheus reads them): a warning now, a
    // per-send error until they are there.
    let mut missing: Vec<(String, std::path::PathBuf)> = Vec::new();
    for (id, c) in &cfg.exporters.0 {
        if let crate::exporters::ExporterConfig::PrometheusRemoteWrite(rw) = c {
            for (k, p) in rw.tls.settings().missing_files() {
                missing.push((format!("exporters.{id}.tls.{k}"), p));
            }
        }
    }
    for (id, c) in &cfg.extensions.0 {
        let file = match c {
            crate::extensions::ExtensionConfig::BasicAuth(b) => {
                b.client_auth.as_ref().and_then(|a| a.password_file.clone()).map(|p| ("client_auth.password_file", p))
            }
            crate::extensions::ExtensionConfig::BearerTokenAuth(b) => b.filename.clone().map(|p| ("filename", p)),
            _ => None,
        };
        if let Some((k, p)) = file.filter(|(_, p)| !p.exists()) {
            missing.push((format!("extensions.{id}.{k}"), p));
        }
    }
    for (path, file) in missing {
        let (mut line, mut column) = issues::locate_path(text, &path);
        if line.is_none() {
            // A Prometheus file's remote_write: the key as written there.
            let written = match path.rsplit('.').next().unwrap_or("") {
                "filename" => vec!["bearer_token_file", "credentials_file"],
                leaf => vec![leaf],
            };
            let file_text = file.display().to_string();
            for k in written {
                let (l, c) = locate(text, "", &format!("{k}:"));
                if l.is_some_and(|l| text.lines().nth(l - 1).is_some_and(|t| t.contains(&file_text))) {
                    (line, column) = (l, c);
                    break;
                }
            }
        }
        v.warnings.push(ConfigIssue {
            origin: origin.into(),
            line,
            column,
            message: format!(
                "{} is not there: it is read when used, and each send fails (and is retried) until it is",
                file.display()
            ),
            path,
        });
    }
    for (id, c) in &cfg.extensions.0 {
        component_errors("extensions", id, c.validate());
    }
    v.errors.extend(job_errors);
    // The inference window must hold at least two scrapes of every target
    // feeding it: with window = interval about half the evaluations see one
    // sample and emit nothing.
    for (pname, p) in &cfg.service.pipelines {
        for pref in &p.processors {
            let Ok(pid) = ComponentId::parse(pref) else { continue };
            let Some(ProcessorConfig::Inference(ic)) = cfg.processors.get(&pid) else { continue };
            let window = ic.window.get();
            let mut slowest: Option<(std::time::Duration, String)> = None;
            for rref in &p.receivers {
                let Ok(rid) = ComponentId::parse(rref) else { continue };
                let Some(ReceiverConfig::Prometheus(pc)) = cfg.receivers.get(&rid) else { continue };
                for sc in &pc.config.scrape_configs {
                    let iv = sc.interval(&pc.config.global);
                    if slowest.as_ref().is_none_or(|(d, _)| iv > *d) {
                        slowest = Some((iv, format!("job {:?} of receivers.{rid}", sc.job_name)));
                    }
                }
            }
            if let Some((iv, by)) = slowest
                && window < iv * 2
            {
                let (line, column) = locate(text, "processors:", &pid.to_string());
                v.errors.push(ConfigIssue {
                    origin: origin.into(),
                    line,
                    column,
                    path: format!("processors.{pid}.window"),
                    message: format!(
                        "window {} is less than twice the slowest scrape interval feeding it in pipeline {pname:?} ({} of {by}): about half the evaluations would see a single sample and emit nothing; set window to at least {}",
                        Duration::from_millis(window.as_millis() as u64),
                        Duration::from_millis(iv.as_millis() as u64),
                        Duration::from_millis((iv * 2).as_millis() as u64),
                    ),
                });
            }
        }
    }
    let logs = &cfg.service.telemetry.logs;
    if !matches!(logs.encoding.as_str(), "console" | "json") {
        v.errors.push(ConfigIssue {
            origin: origin.into(),
            line: None,
            column: None,
            path: "service.telemetry.logs.encoding".into(),
            message: format!("{:?} is not a log encoding (use console or json)", logs.encoding),
        });
    }
    if !matches!(logs.level.to_ascii_lowercase().as_str(), "trace" | "debug" | "info" | "warn" | "error") {
        v.errors.push(ConfigIssue {
            origin: origin.into(),
            line: None,
            column: None,
            path: "service.telemetry.logs.level".into(),
            message: format!("{:?} is not a log level (use debug, info, warn or error)", logs.level),
        });
    }
    if let Err(m) = cfg.service.telemetry.metrics.socket_addr() {
        v.errors.push(ConfigIssue { origin: origin.into(), line: None, column: None, path: String::new(), message: m });
    }
    if let Err(m) = crate::self_otlp::validate(&cfg.service.telemetry.metrics.readers) {
        v.errors.push(ConfigIssue {
            origin: origin.into(),
            line: None,
            column: None,
            path: "service.telemetry.metrics.readers".into(),
            message: m,
        });
    }
    let unused = |section: &str, ids: Vec<&ComponentId>| -> Vec<ConfigIssue> {
        ids.into_iter()
            .filter(|id| !used.iter().any(|(s, u)| s == section && u == *id))
            .map(|id| {
                let (line, column) = locate(text, &format!("{section}:"), &id.to_string());
                ConfigIssue {
                    origin: origin.into(),
                    line,
                    column,
                    path: format!("{section}.{id}"),
                    message: format!("{section} {id} is defined but not used in any pipeline; it will not run"),
                }
            })
            .collect()
    };
    v.warnings.extend(unused("receivers", cfg.receivers.ids().collect()));
    v.warnings.extend(unused("processors", cfg.processors.ids().collect()));
    v.warnings.extend(unused("exporters", cfg.exporters.ids().collect()));
    v.warnings.extend(unused("extensions", cfg.extensions.ids().collect()));
    v
}
