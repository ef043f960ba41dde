//! Every error of a config in one run, each where it is: serde stops at
//! the first error of a document, so when the whole config does not
//! deserialize, each component (and each job of a `prometheus` receiver)
//! is deserialized on its own and its error located by its YAML path.

use super::{Components, ConfigIssue, ServiceConfig};
use crate::exporters::ExporterConfig;
use crate::extensions::ExtensionConfig;
use crate::processors::ProcessorConfig;
use crate::receivers::ReceiverConfig;
use crate::receivers::prometheus::config::{GlobalConfig, ScrapeConfig};
use serde_yaml::{Mapping, Value};

/// One step of a YAML path: a key or a list index.
#[derive(Debug, PartialEq)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// `receivers.prometheus.config.scrape_configs[2].tls_config` as steps.
fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, rest) = part.split_once('[').map(|(k, r)| (k, Some(r))).unwrap_or((part, None));
        if !key.is_empty() {
            out.push(Step::Key(key));
        }
        for idx in rest.into_iter().flat_map(|r| r.split('[')) {
            if let Ok(i) = idx.trim_end_matches(']').parse() {
                out.push(Step::Index(i));
            }
        }
    }
    out
}

/// A line of block YAML: indentation, text, number (1-based).
#[derive(Clone)]
struct Line<'a> {
    indent: usize,
    text: &'a str,
    number: usize,
}

fn key_of(text: &str) -> Option<&str> {
    let (k, _) = text.split_once(':')?;
    let k = k.trim();
    Some(k.trim_matches(|c| c == '"' || c == '\''))
}

/// Where the deepest step of `path` that can be found is written in block
/// YAML (flow-style values are located at their key): (line, column).
pub fn locate_path(text: &str, path: &str) -> (Option<usize>, Option<usize>) {
    let lines: Vec<Line> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| Line { indent: l.len() - l.trim_start().len(), text: l.trim_start(), number: i + 1 })
        .collect();
    let mut scope: Vec<Line> = lines;
    let mut found: Option<(usize, usize)> = None;
    for step in steps(path) {
        let Some(first) = scope.first() else { break };
        let indent = first.indent;
        let next: Option<(Line, Vec<Line>)> = match step {
            Step::Key(k) => {
                scope.iter().enumerate().find(|(_, l)| l.indent == indent && key_of(l.text) == Some(k)).map(|(i, l)| {
                    let body = scope[i + 1..].iter().take_while(|m| m.indent > indent).cloned().collect();
                    (l.clone(), body)
                })
            }
            Step::Index(n) => {
                // Items at this indent start with `- `; the item's own first
                // key sits on its dash line, two columns in.
                let items: Vec<usize> =
                    (0..scope.len()).filter(|&i| scope[i].indent == indent && scope[i].text.starts_with('-')).collect();
                items.get(n).map(|&i| {
                    let l = &scope[i];
                    let rest = l.text[1..].trim_start();
                    let mut body = Vec::new();
                    if !rest.is_empty() {
                        body.push(Line { indent: indent + (l.text.len() - rest.len()), text: rest, number: l.number });
                    }
                    body.extend(scope[i + 1..].iter().take_while(|m| m.indent > indent).cloned());
                    (l.clone(), body)
                })
            }
        };
        let Some((line, body)) = next else { break };
        found = Some((line.number, line.indent + 1));
        scope = body;
    }
    match found {
        Some((l, c)) => (Some(l), Some(c)),
        None => (None, None),
    }
}

/// serde's message for a piece, its own path prefix split off.
pub(super) fn message(e: &serde_yaml::Error) -> (String, String) {
    let mut msg = e.to_string();
    if let Some(i) = msg.rfind(" at line ") {
        msg.truncate(i);
    }
    // "a.b[0]: unknown field `x`, expected ..." carries the path inside the piece.
    match msg.split_once(": ") {
        Some((p, m)) if !p.contains(' ') && !p.is_empty() => (p.to_string(), m.to_string()),
        _ => (String::new(), msg),
    }
}

/// The issue for `err` in the piece at `path`: located at the unknown key
/// when serde names one, else at the deepest step of the path.
fn issue(origin: &str, text: &str, path: &str, err: &serde_yaml::Error) -> ConfigIssue {
    let (inner, msg) = message(err);
    let full = if inner.is_empty() { path.to_string() } else { format!("{path}.{inner}") };
    let unknown = msg.strip_prefix("unknown field `").and_then(|r| r.split('`').next());
    let at = match unknown {
        Some(k) => format!("{full}.{k}"),
        None => full.clone(),
    };
    let (mut line, mut column) = locate_path(text, &at);
    // A bad value serde quotes without naming its key: the line in the
    // piece that holds it.
    if unknown.is_none()
        && let Some(v) = msg.split('"').nth(1).filter(|v| !v.is_empty())
        && let Some((l, c)) = line.and_then(|start| find_value(text, start, v))
    {
        (line, column) = (Some(l), Some(c));
    }
    ConfigIssue { origin: origin.into(), line, column, path: full, message: msg }
}

/// Adds the Collector's hint to an issue about a TLS key written on an
/// exporter itself (see [`legacy_tls_hint`]).
pub(super) fn with_hint(mut e: ConfigIssue) -> ConfigIssue {
    // The path is the issue's, or (the whole file's first error) written
    // before the message.
    let (path, rest) = match e.message.split_once(": unknown field `") {
        Some((p, r)) if e.path.is_empty() && !p.contains(' ') => (p.to_string(), r),
        _ => (e.path.clone(), e.message.strip_prefix("unknown field `").unwrap_or("")),
    };
    let unknown = rest.split('`').next().filter(|k| !k.is_empty());
    if let Some(hint) = unknown.and_then(|k| legacy_tls_hint(&path, k)) {
        e.message = format!("{}; {hint}", e.message);
    }
    e
}

/// The Collector's hint for a TLS key written where it used to go, on an
/// exporter itself (before configtls, `insecure: true` sat beside
/// `endpoint`; the Collector now reads it only under `tls`).
pub(super) fn legacy_tls_hint(path: &str, key: &str) -> Option<String> {
    const TLS_KEYS: &[&str] =
        &["insecure", "insecure_skip_verify", "ca_file", "cert_file", "key_file", "server_name_override"];
    let exporter = path.strip_prefix("exporters.")?;
    if exporter.contains('.') || !TLS_KEYS.contains(&key) {
        return None;
    }
    Some(format!("{key} belongs under tls, as the Collector reads it: write tls: {{{key}: ...}} (tls.{key})"))
}

/// The first line from `start` (1-based) through the end of its block that
/// holds `value` as a value (`key: value`, `- value`): (line, column).
fn find_value(text: &str, start: usize, value: &str) -> Option<(usize, usize)> {
    let mut lines = text.lines().enumerate().skip(start - 1);
    let (_, first) = lines.next()?;
    let base = first.len() - first.trim_start().len();
    let hit = |i: usize, l: &str| {
        for pat in [format!(": {value}"), format!(": \"{value}\""), format!(": '{value}'"), format!("- {value}")] {
            if let Some(p) = l.find(&pat) {
                return Some((i + 1, p + 3));
            }
        }
        None
    };
    if let Some(h) = hit(start - 1, first) {
        return Some(h);
    }
    for (i, l) in lines {
        if l.trim().is_empty() || l.trim_start().starts_with('#') {
            continue;
        }
        if l.len() - l.trim_start().len() <= base {
            break;
        }
        if let Some(h) = hit(i, l) {
            return Some(h);
        }
    }
    None
}

fn one(id: &Value, body: &Value) -> Value {
    let mut m = Mapping::new();
    m.insert(id.clone(), body.clone());
    Value::Mapping(m)
}

/// Every deserialization error of `root`, component by component (job by
/// job in a `prometheus` receiver), each located in `text`.
pub fn every_error(origin: &str, text: &str, root: &Value) -> Vec<ConfigIssue> {
    let mut out = Vec::new();
    let Some(top) = root.as_mapping() else { return out };
    for (section, check) in [
        ("receivers", (|v| serde_yaml::from_value::<Components<ReceiverConfig>>(v).err()) as fn(Value) -> _),
        ("processors", |v| serde_yaml::from_value::<Components<ProcessorConfig>>(v).err()),
        ("exporters", |v| serde_yaml::from_value::<Components<ExporterConfig>>(v).err()),
        ("extensions", |v| serde_yaml::from_value::<Components<ExtensionConfig>>(v).err()),
    ] {
        let Some(components) = top.get(section).and_then(Value::as_mapping) else { continue };
        for (id, body) in components {
            let name = id.as_str().unwrap_or("");
            if section == "processors"
                && let Ok(c) = serde_yaml::from_value::<Components<ProcessorConfig>>(one(id, body))
            {
                // It reads: what its checks say (at their key), as a whole
                // config's validation would.
                for (_, pc) in &c.0 {
                    if let Err((key, message)) = pc.check() {
                        let path = if key.is_empty() {
                            format!("processors.{name}")
                        } else {
                            format!("processors.{name}.{key}")
                        };
                        let (line, column) = locate_path(text, &path);
                        out.push(ConfigIssue { origin: origin.into(), line, column, path, message });
                    }
                }
                continue;
            }
            let Some(e) = check(one(id, body)) else { continue };
            let path = format!("{section}.{name}");
            let jobs = if section == "receivers" { prometheus_jobs(origin, text, &path, body) } else { Vec::new() };
            if jobs.is_empty() {
                out.push(issue(origin, text, &path, &e));
            } else {
                out.extend(jobs);
            }
        }
    }
    match top.get("service") {
        Some(s) => {
            if let Err(e) = serde_yaml::from_value::<ServiceConfig>(s.clone()) {
                out.push(issue(origin, text, "service", &e));
            }
        }
        None => out.push(ConfigIssue {
            origin: origin.into(),
            line: None,
            column: None,
            path: "service".into(),
            message: "missing field `service` (service.pipelines says which components run)".into(),
        }),
    }
    out
}

/// What a Collector config asks beyond metrics: `connectors`, and
/// `traces`, `logs` or `profiles` pipelines. Each is an error naming it and
/// its line, and is taken out of `root` so the rest can be checked.
pub fn other_signals(origin: &str, text: &str, root: &mut Value) -> Vec<ConfigIssue> {
    const BESIDE: &str = "infertel carries metrics only: run an OpenTelemetry Collector beside it for traces, logs and profiles (and its connectors), and keep the metrics pipelines here";
    let mut out = Vec::new();
    let Some(top) = root.as_mapping_mut() else { return out };
    if top.remove("connectors").is_some() {
        let (line, column) = locate_path(text, "connectors");
        out.push(ConfigIssue {
            origin: origin.into(),
            line,
            column,
            path: "connectors".into(),
            message: format!("connectors are not supported: {BESIDE}"),
        });
    }
    let Some(pipelines) = top.get_mut("service").and_then(|s| s.get_mut("pipelines")).and_then(Value::as_mapping_mut)
    else {
        return out;
    };
    let other: Vec<Value> = pipelines
        .keys()
        .filter(|k| {
            let kind = k.as_str().unwrap_or("").split('/').next().unwrap_or("");
            matches!(kind, "traces" | "logs" | "profiles")
        })
        .cloned()
        .collect();
    for k in other {
        pipelines.remove(&k);
        let name = k.as_str().unwrap_or("");
        let path = format!("service.pipelines.{name}");
        let (line, column) = locate_path(text, &path);
        out.push(ConfigIssue {
            origin: origin.into(),
            line,
            column,
            path,
            message: format!("pipeline {name:?} is not a metrics pipeline: {BESIDE}"),
        });
    }
    out
}

/// The first error serde found (located by serde), and every other one
/// found piece by piece, in line order.
pub fn all_errors(origin: &str, text: &str, root: Option<&Value>, first: ConfigIssue) -> Vec<ConfigIssue> {
    let mut errors = Vec::new();
    let (first_path, first_msg) = match first.message.split_once(": ") {
        Some((p, m)) if !p.contains(' ') => (p.to_string(), m.to_string()),
        _ => (String::new(), first.message.clone()),
    };
    let mut first = Some(first);
    for i in root.map(|r| every_error(origin, text, r)).unwrap_or_default() {
        // A bare section ("processors") is where serde stopped, not a place
        // that holds only this error.
        let same_place =
            first_path.contains('.') && (first_path.starts_with(&i.path) || i.path.starts_with(&first_path));
        let same_message = first_msg.contains(&i.message) || i.message.contains(&first_msg);
        let more_precise = i.path.starts_with(&first_path) && i.path.len() > first_path.len();
        if same_message && (first_path.is_empty() || more_precise) {
            // serde placed it without its full path (a custom error of a
            // component that read its own value): the piece knows where.
            if first.is_some() && more_precise {
                first = None;
                errors.push(i);
            }
        } else if !same_place {
            errors.push(i);
        }
    }
    errors.extend(first);
    errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
    errors
}

/// A `prometheus` receiver's errors job by job (and its `global`).
fn prometheus_jobs(origin: &str, text: &str, path: &str, body: &Value) -> Vec<ConfigIssue> {
    let Some(cfg) = body.get("config") else { return Vec::new() };
    let mut out = Vec::new();
    if let Some(g) = cfg.get("global")
        && let Err(e) = serde_yaml::from_value::<GlobalConfig>(g.clone())
    {
        out.push(issue(origin, text, &format!("{path}.config.global"), &e));
    }
    for (i, job) in cfg.get("scrape_configs").and_then(Value::as_sequence).into_iter().flatten().enumerate() {
        if let Err(e) = serde_yaml::from_value::<ScrapeConfig>(job.clone()) {
            out.push(issue(origin, text, &format!("{path}.config.scrape_configs[{i}]"), &e));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_legacy_top_level_tls_key_gets_the_collectors_hint() {
        let text = "receivers:\n  prometheus:\n    config:\n      scrape_configs:\n        - job_name: a\n          static_configs: [{targets: ['h:1']}]\nexporters:\n  otlp:\n    endpoint: c:4317\n    insecure: true\nservice:\n  pipelines:\n    metrics: {receivers: [prometheus], exporters: [otlp]}\n";
        let errors = crate::load_str("c.yaml", text, &|_| None).err().expect("refused").errors;
        assert_eq!(errors.len(), 1, "{errors:?}");
        let e = &errors[0];
        assert_eq!(e.line, Some(10), "{e}");
        assert!(e.message.contains("unknown field `insecure`") && e.message.contains("tls.insecure"), "{e:?}");
    }

    use super::*;

    const DOC: &str = "receivers:\n  prometheus:\n    config:\n      scrape_configs:\n        - job_name: a\n          static_configs: [{targets: ['h:1']}]\n        # a comment\n        - job_name: b\n          tls_config:\n            ca_file: /x\n";

    #[test]
    fn paths_are_found_in_block_yaml() {
        assert_eq!(
            locate_path(DOC, "receivers.prometheus.config.scrape_configs[1].tls_config.ca_file"),
            (Some(10), Some(13))
        );
        assert_eq!(locate_path(DOC, "receivers.prometheus.config.scrape_configs[1]"), (Some(8), Some(9)));
        assert_eq!(locate_path(DOC, "receivers.prometheus.config.scrape_configs[0].job_name"), (Some(5), Some(11)));
        // The deepest step found.
        assert_eq!(locate_path(DOC, "receivers.prometheus.config.scrape_configs[0].nope"), (Some(5), Some(9)));
        assert_eq!(locate_path(DOC, "exporters"), (None, None));
    }
}
