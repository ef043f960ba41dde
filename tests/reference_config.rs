//! `config/reference.yaml` is the documentation of every config key; this test
//! keeps it in step with the code:
//!
//! * it loads (through `load_str` and through `infertel validate`) with no
//!   errors and no warnings, and so do the other `config/*.yaml` files;
//! * every key the code accepts appears in it: each YAML mapping of the file
//!   that deserializes into a `deny_unknown_fields` struct gets a bogus key,
//!   and serde's "unknown field `zz_probe_key`, expected one of ..." message
//!   lists every key that struct accepts; each of them must appear
//!   (uncommented) in at least one mapping of the same kind (same path, with
//!   component ids reduced to their type and list indices dropped). A new
//!   config key without documentation fails here.
//!
//! The other direction (every key in the file is accepted) follows from
//! loading: every struct denies unknown fields.

use infertel_pipeline::config::ComponentKind;
use infertel_pipeline::config::env::expand;
use infertel_pipeline::exporters::ExporterConfig;
use infertel_pipeline::extensions::ExtensionConfig;
use infertel_pipeline::processors::ProcessorConfig;
use infertel_pipeline::receivers::ReceiverConfig;
use infertel_pipeline::{ConfigIssue, load_str};
use serde_yaml::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

const REFERENCE: &str = "config/reference.yaml";
const PROBE: &str = "zz_probe_key";

/// Environment the example configs need; nothing else is set.
const TEST_ENV: &[(&str, &str)] = &[
    ("ES_HOST", "infertel-test.es.example.com"),
    ("ES_API_KEY", "dGVzdC1pZDp0ZXN0LWtleQ=="),
    ("PROMETHEUS_PASSWORD", "test-password"),
];

/// Keys whose value is a map of user data (any key goes), not a struct.
const USER_DATA: &[&str] = &[
    "headers",
    "labels",
    "params",
    "external_labels",
    "proxy_connect_header",
    "http_headers",
    "const_labels",
    "resource",
];

/// Maps from component id (`type[/name]`) to a config: the component
/// sections and the pipelines. Their children are named by type.
const ID_MAPS: &[&str] = &["receivers", "processors", "exporters", "extensions", "service.pipelines"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root")
}

/// Relative paths in the configs (CA and secret files) are relative to the
/// directory infertel runs in: the repository root, as documented.
fn in_repo_root() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| std::env::set_current_dir(repo_root()).expect("cd to the repo root"));
}

fn lookup(name: &str) -> Option<String> {
    TEST_ENV.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn show(issues: &[ConfigIssue]) -> String {
    issues.iter().map(|i| format!("  {i}\n")).collect()
}

/// Every `config/*.yaml`, sorted.
fn config_files() -> Vec<String> {
    in_repo_root();
    let mut files: Vec<String> = std::fs::read_dir("config")
        .expect("config/")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(files.iter().any(|f| f == REFERENCE), "{REFERENCE} is missing; found {files:?}");
    files
}

#[test]
fn every_config_loads_without_errors_or_warnings() {
    for file in config_files() {
        match load_str(&file, &read(&file), &lookup) {
            Ok(l) => assert!(l.warnings.is_empty(), "{file}: warnings:\n{}", show(&l.warnings)),
            Err(r) => panic!("{file}: errors:\n{}warnings:\n{}", show(&r.errors), show(&r.warnings)),
        }
    }
}

#[test]
fn every_config_passes_infertel_validate() {
    let root = repo_root();
    for file in config_files() {
        let out = Command::new(env!("CARGO_BIN_EXE_infertel"))
            .args(["validate", "--config", &file])
            .current_dir(&root)
            .env_clear()
            .envs(TEST_ENV.iter().copied())
            .output()
            .expect("run infertel validate");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "infertel validate --config {file}: {}\nstdout: {}\nstderr: {stderr}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(!stderr.contains("warning"), "infertel validate --config {file} warns:\n{stderr}");
    }
}

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

/// One mapping of the file that should be a struct.
struct Site {
    /// Where it is, to insert the probe.
    path: Vec<Seg>,
    /// What kind of mapping it is: the dotted path with component ids
    /// reduced to their type and `[]` for list items.
    kind: String,
    /// The keys written there.
    keys: BTreeSet<String>,
}

fn key_str(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => serde_yaml::to_string(other).unwrap_or_default().trim().to_string(),
    }
}

fn child_kind(kind: &str, key: &str) -> String {
    if kind.is_empty() { key.to_string() } else { format!("{kind}.{key}") }
}

fn collect_struct(map: &serde_yaml::Mapping, path: &mut Vec<Seg>, kind: &str, out: &mut Vec<Site>) {
    out.push(Site { path: path.clone(), kind: kind.to_string(), keys: map.keys().map(key_str).collect() });
    for (k, v) in map {
        let key = key_str(k);
        if USER_DATA.contains(&key.as_str()) {
            continue;
        }
        let ck = child_kind(kind, &key);
        path.push(Seg::Key(key.clone()));
        if ID_MAPS.contains(&ck.as_str()) {
            if let Value::Mapping(ids) = v {
                for (id, cfg) in ids {
                    let id = key_str(id);
                    let ty = id.split('/').next().unwrap_or_default().to_string();
                    path.push(Seg::Key(id));
                    collect_value(cfg, path, &child_kind(&ck, &ty), out);
                    path.pop();
                }
            }
        } else {
            collect_value(v, path, &ck, out);
        }
        path.pop();
    }
}

fn collect_value(v: &Value, path: &mut Vec<Seg>, kind: &str, out: &mut Vec<Site>) {
    match v {
        Value::Mapping(m) => collect_struct(m, path, kind, out),
        Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                collect_value(item, path, &format!("{kind}[]"), out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// The mapping at `path`.
fn mapping_at<'a>(root: &'a mut Value, path: &[Seg]) -> &'a mut serde_yaml::Mapping {
    let mut v = root;
    for seg in path {
        v = match (seg, v) {
            (Seg::Key(k), Value::Mapping(m)) => m.get_mut(k.as_str()).expect("path exists"),
            (Seg::Index(i), Value::Sequence(s)) => &mut s[*i],
            (seg, _) => panic!("bad path segment {seg:?}"),
        };
    }
    match v {
        Value::Mapping(m) => m,
        _ => panic!("not a mapping at {path:?}"),
    }
}

fn show_path(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => s.push_str(&format!(".{k}")),
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    if s.is_empty() { "(top level)".into() } else { s }
}

/// The keys serde lists after "unknown field `zz_probe_key`, ": `expected
/// one of `a`, `b``, `expected `a``, or `there are no fields`.
fn accepted_keys(message: &str) -> Option<BTreeSet<String>> {
    let marker = format!("unknown field `{PROBE}`");
    let rest = &message[message.find(&marker)? + marker.len()..];
    Some(rest.split('`').skip(1).step_by(2).map(str::to_string).collect())
}

#[test]
fn every_accepted_key_is_documented_in_the_reference() {
    in_repo_root();
    let (expanded, warnings) = expand(REFERENCE, &read(REFERENCE), &lookup);
    assert!(warnings.is_empty(), "{REFERENCE}: {}", show(&warnings));
    let root: Value = serde_yaml::from_str(&expanded).expect("reference.yaml is YAML");
    let mut sites = Vec::new();
    collect_value(&root, &mut Vec::new(), "", &mut sites);

    let mut accepted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for site in &sites {
        documented.entry(site.kind.clone()).or_default().extend(site.keys.iter().cloned());
        let mut probed = root.clone();
        mapping_at(&mut probed, &site.path).insert(Value::from(PROBE), Value::from(1));
        // The values are already expanded: escape every `$` so that
        // load_str's own expansion gives back exactly this text.
        let text = serde_yaml::to_string(&probed).expect("serialize").replace('$', "$$");
        let at = show_path(&site.path);
        match load_str(REFERENCE, &text, &lookup) {
            Ok(_) => problems.push(format!(
                "{at}: accepts any key; if it is user data, add its key to USER_DATA in tests/reference_config.rs"
            )),
            Err(r) => match r.errors.iter().find_map(|e| accepted_keys(&e.message)) {
                Some(keys) => accepted.entry(site.kind.clone()).or_default().extend(keys),
                None => problems
                    .push(format!("{at}: probing with `{PROBE}: 1` gave an unexpected error:\n{}", show(&r.errors))),
            },
        }
    }

    for (kind, keys) in &accepted {
        let doc = &documented[kind];
        let missing: Vec<String> = keys.difference(doc).map(|k| format!("`{k}`")).collect();
        if !missing.is_empty() {
            let name = if kind.is_empty() { "(top level)" } else { kind };
            problems.push(format!(
                "{name}: the code accepts {} but {REFERENCE} does not show it (add it, uncommented, with its default and a comment)",
                missing.join(", ")
            ));
        }
    }

    // Every component type this build knows has a documented instance.
    let known: [(&str, &[&str]); 4] = [
        ("receivers", ReceiverConfig::KNOWN),
        ("processors", ProcessorConfig::KNOWN),
        ("exporters", ExporterConfig::KNOWN),
        ("extensions", ExtensionConfig::KNOWN),
    ];
    for (section, types) in known {
        for ty in types {
            if !accepted.contains_key(&format!("{section}.{ty}")) {
                problems.push(format!(
                    "{section}.{ty}: this component type has no instance (with its keys) in {REFERENCE}"
                ));
            }
        }
    }

    assert!(accepted.len() >= 20, "suspiciously few struct kinds probed: {:?}", accepted.keys());
    assert!(problems.is_empty(), "{REFERENCE} is out of step with the code:\n{}", problems.join("\n"));
}
