//! The attribute actions the Collector's `attributes` and `resource`
//! processors share (contrib's `internal/coreinternal/attraction`): the
//! `actions:` list, checked as contrib checks it, applied in order to a map
//! of attribute keys to values.
//!
//! What a map is depends on the processor: for `attributes` the data point
//! attributes of a series, for `resource` its target's (see `pdata.rs`);
//! both end as labels, so values are strings. `convert` changes how a value
//! is written (`int` of `"007"` is `"7"`, `double` of `"2.50"` is `"2.5"`)
//! and leaves a value it cannot convert as it is, as contrib does.

use serde::Deserialize;
use sha2::{Digest, Sha256};

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ActionConfig {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value: Option<serde_yaml::Value>,
    #[serde(default)]
    pub pattern: Option<String>,
    #[serde(default)]
    pub from_attribute: Option<String>,
    #[serde(default)]
    pub from_context: Option<String>,
    #[serde(default)]
    pub converted_type: Option<String>,
    pub action: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Insert,
    Update,
    Upsert,
    Delete,
    Hash,
    Extract,
    Convert,
}

#[derive(Clone, Debug)]
enum Source {
    Value(String),
    Attribute(String),
    /// Client metadata (`metadata.x`, `auth.x`, `client.address`): a scrape
    /// has no client, so it yields nothing on scraped data.
    Context(#[allow(dead_code)] String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Converted {
    Int,
    Double,
    Str,
}

/// One checked action.
#[derive(Clone, Debug)]
pub struct Action {
    pub key: String,
    pub kind: Kind,
    source: Option<Source>,
    pattern: Option<regex::Regex>,
    converted: Option<Converted>,
}

/// A YAML scalar as the Collector writes it into an attribute, then as
/// Prometheus writes the attribute into a label.
fn scalar(v: &serde_yaml::Value) -> Result<String, String> {
    Ok(match v {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::Null => String::new(),
        _ => return Err("value must be a string, number or boolean (a label value)".into()),
    })
}

/// Checks the list as contrib's `NewAttrProc` does; errors name the action
/// by its index, as `actions[i]`.
pub fn compile(list: &[ActionConfig]) -> Result<Vec<Action>, (String, String)> {
    let mut out = Vec::with_capacity(list.len());
    for (i, a) in list.iter().enumerate() {
        let at = |k: &str| if k.is_empty() { format!("actions[{i}]") } else { format!("actions[{i}].{k}") };
        let kind = match a.action.to_ascii_lowercase().as_str() {
            "insert" => Kind::Insert,
            "update" => Kind::Update,
            "upsert" => Kind::Upsert,
            "delete" => Kind::Delete,
            "hash" => Kind::Hash,
            "extract" => Kind::Extract,
            "convert" => Kind::Convert,
            other => {
                return Err((
                    at("action"),
                    format!("unsupported action {other:?} (insert, update, upsert, delete, hash, extract, convert)"),
                ));
            }
        };
        let name = a.action.to_ascii_lowercase();
        if a.key.is_empty() && matches!(kind, Kind::Delete | Kind::Hash) && a.pattern.is_none() {
            return Err((
                at(""),
                "missing required field (at least one of \"key\" and \"pattern\" have to be used)".into(),
            ));
        }
        if a.key.is_empty() && !matches!(kind, Kind::Delete | Kind::Hash) {
            return Err((at(""), "missing required field \"key\"".into()));
        }
        let sources = [a.value.is_some(), a.from_attribute.is_some(), a.from_context.is_some()];
        let nsources = sources.iter().filter(|s| **s).count();
        let mut source = None;
        let mut pattern = None;
        let mut converted = None;
        match kind {
            Kind::Insert | Kind::Update | Kind::Upsert => {
                if nsources == 0 {
                    return Err((
                        at(""),
                        "either field \"value\", \"from_attribute\" or \"from_context\" must be specified".to_string(),
                    ));
                }
                if nsources > 1 {
                    return Err((
                        at(""),
                        "multiple value sources are set (give one of value, from_attribute, from_context)".into(),
                    ));
                }
                if a.pattern.is_some() {
                    return Err((at("pattern"), format!("action {name:?} does not use \"pattern\"")));
                }
                source = Some(if let Some(v) = &a.value {
                    Source::Value(scalar(v).map_err(|e| (at("value"), e))?)
                } else if let Some(f) = &a.from_attribute {
                    Source::Attribute(f.clone())
                } else {
                    Source::Context(a.from_context.clone().unwrap_or_default())
                });
            }
            Kind::Delete | Kind::Hash | Kind::Extract | Kind::Convert => {
                if nsources != 0 {
                    return Err((
                        at(""),
                        format!("action {name:?} does not use \"value\", \"from_attribute\" or \"from_context\""),
                    ));
                }
                if kind == Kind::Convert {
                    if a.pattern.is_some() {
                        return Err((at("pattern"), "action \"convert\" does not use \"pattern\"".into()));
                    }
                    converted = Some(match a.converted_type.as_deref() {
                        Some("int") => Converted::Int,
                        Some("double") => Converted::Double,
                        Some("string") => Converted::Str,
                        None => {
                            return Err((
                                at(""),
                                "missing required field \"converted_type\" for action \"convert\"".into(),
                            ));
                        }
                        other => {
                            return Err((
                                at("converted_type"),
                                format!("invalid value {:?} (int, double or string)", other.unwrap_or("")),
                            ));
                        }
                    });
                } else if a.converted_type.is_some() {
                    return Err((at("converted_type"), format!("action {name:?} does not use \"converted_type\"")));
                }
                if let Some(p) = &a.pattern {
                    let re = infertel_relabel::go_regex(p).map_err(|e| (at("pattern"), format!("{p:?}: {e}")))?;
                    if kind == Kind::Extract {
                        let names = re.capture_names().skip(1);
                        let (named, unnamed): (Vec<_>, Vec<_>) = names.partition(Option::is_some);
                        if named.is_empty() {
                            return Err((at("pattern"), "contains no named matcher groups ((?P<name>...))".into()));
                        }
                        if !unnamed.is_empty() {
                            return Err((at("pattern"), "contains at least one unnamed matcher group".into()));
                        }
                    }
                    pattern = Some(re);
                } else if kind == Kind::Extract {
                    return Err((at(""), "action \"extract\" needs \"pattern\"".into()));
                }
            }
        }
        out.push(Action { key: a.key.clone(), kind, source, pattern, converted });
    }
    Ok(out)
}

/// The attribute map an action list edits: keys as the Collector names
/// them, values as strings.
pub trait Attributes {
    fn get(&self, key: &str) -> Option<String>;
    fn set(&mut self, key: &str, value: String);
    fn remove(&mut self, key: &str);
    /// Keys present (for `pattern` on delete and hash).
    fn keys(&self) -> Vec<String>;
}

/// SHA-256 of the value, lowercase hex, as contrib hashes.
pub fn hash_value(v: &str) -> String {
    let d = Sha256::digest(v.as_bytes());
    let mut s = String::with_capacity(64);
    for b in d {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn convert(v: &str, to: Converted) -> Option<String> {
    match to {
        Converted::Str => Some(v.to_string()),
        Converted::Int => v.parse::<i64>().ok().map(|i| i.to_string()).or_else(|| match v {
            "true" => Some("1".into()),
            "false" => Some("0".into()),
            _ => None,
        }),
        Converted::Double => v.parse::<f64>().ok().filter(|f| f.is_finite()).map(es6).or_else(|| match v {
            "true" => Some("1".into()),
            "false" => Some("0".into()),
            _ => None,
        }),
    }
}

/// A double as pcommon writes it into a string (ECMAScript's number
/// formatting: shortest digits, exponent form below 1e-6 and from 1e21).
pub fn es6(f: f64) -> String {
    let a = f.abs();
    if a != 0.0 && !(1e-6..1e21).contains(&a) {
        let e = format!("{f:e}");
        match e.split_once('e') {
            Some((m, x)) if !x.starts_with('-') => format!("{m}e+{x}"),
            _ => e,
        }
    } else {
        format!("{f}")
    }
}

/// Applies the actions in order.
pub fn apply(actions: &[Action], attrs: &mut dyn Attributes) {
    for a in actions {
        match a.kind {
            Kind::Insert | Kind::Update | Kind::Upsert => {
                let present = attrs.get(&a.key).is_some();
                let wanted = match a.kind {
                    Kind::Insert => !present,
                    Kind::Update => present,
                    _ => true,
                };
                if !wanted {
                    continue;
                }
                let v = match &a.source {
                    Some(Source::Value(v)) => Some(v.clone()),
                    Some(Source::Attribute(f)) => attrs.get(f),
                    Some(Source::Context(_)) | None => None,
                };
                if let Some(v) = v {
                    attrs.set(&a.key, v);
                }
            }
            Kind::Delete => {
                if !a.key.is_empty() {
                    attrs.remove(&a.key);
                }
                if let Some(re) = &a.pattern {
                    for k in attrs.keys().into_iter().filter(|k| re.is_match(k)) {
                        attrs.remove(&k);
                    }
                }
            }
            Kind::Hash => {
                let mut keys: Vec<String> = Vec::new();
                if !a.key.is_empty() {
                    keys.push(a.key.clone());
                }
                // As contrib: the key first, then every key the pattern
                // matches, the key again if it matches too.
                if let Some(re) = &a.pattern {
                    keys.extend(attrs.keys().into_iter().filter(|k| re.is_match(k)));
                }
                for k in keys {
                    if let Some(v) = attrs.get(&k) {
                        attrs.set(&k, hash_value(&v));
                    }
                }
            }
            Kind::Extract => {
                let (Some(re), Some(v)) = (&a.pattern, attrs.get(&a.key)) else { continue };
                let Some(caps) = re.captures(&v) else { continue };
                let found: Vec<(String, String)> = re
                    .capture_names()
                    .flatten()
                    .filter_map(|n| caps.name(n).map(|m| (n.to_string(), m.as_str().to_string())))
                    .collect();
                for (k, v) in found {
                    attrs.set(&k, v);
                }
            }
            Kind::Convert => {
                if let (Some(v), Some(to)) = (attrs.get(&a.key), a.converted)
                    && let Some(c) = convert(&v, to)
                {
                    attrs.set(&a.key, c);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    impl Attributes for BTreeMap<String, String> {
        fn get(&self, key: &str) -> Option<String> {
            BTreeMap::get(self, key).cloned()
        }
        fn set(&mut self, key: &str, value: String) {
            self.insert(key.to_string(), value);
        }
        fn remove(&mut self, key: &str) {
            BTreeMap::remove(self, key);
        }
        fn keys(&self) -> Vec<String> {
            BTreeMap::keys(self).cloned().collect()
        }
    }

    fn actions(yaml: &str) -> Result<Vec<Action>, (String, String)> {
        let list: Vec<ActionConfig> = serde_yaml::from_str(yaml).expect("yaml");
        compile(&list)
    }

    fn run(yaml: &str, start: &[(&str, &str)]) -> BTreeMap<String, String> {
        let a = actions(yaml).unwrap_or_else(|e| panic!("{e:?}"));
        let mut m: BTreeMap<String, String> = start.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        apply(&a, &mut m);
        m
    }

    #[test]
    fn insert_update_upsert_as_contrib() {
        let m = run(
            r#"
- {key: cluster, value: prod, action: insert}
- {key: model_name, value: ignored, action: insert}
- {key: region, value: eu, action: update}
- {key: model_name, value: llama-3, action: update}
- {key: gpu, value: 7, action: upsert}
- {key: copy, from_attribute: model_name, action: upsert}
- {key: nothing, from_attribute: absent, action: insert}
- {key: tenant, from_context: metadata.x-tenant, action: insert}
"#,
            &[("model_name", "llama")],
        );
        let want: BTreeMap<String, String> =
            [("cluster", "prod"), ("model_name", "llama-3"), ("gpu", "7"), ("copy", "llama-3")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(m, want);
    }

    #[test]
    fn delete_hash_extract_convert() {
        let m = run(
            r#"
- {key: secret, action: delete}
- {pattern: "^tmp_", action: delete}
- {key: user, action: hash}
- {key: url, pattern: '^(?P<scheme>\w+)://(?P<host>[^/:]+)', action: extract}
- {key: port, action: convert, converted_type: int}
- {key: ratio, action: convert, converted_type: double}
- {key: bad, action: convert, converted_type: int}
"#,
            &[
                ("secret", "s"),
                ("tmp_a", "1"),
                ("tmp_b", "2"),
                ("user", "alice"),
                ("url", "https://vllm-0.svc:8000/metrics"),
                ("port", "008000"),
                ("ratio", "2.50"),
                ("bad", "3.5"),
            ],
        );
        assert!(!m.contains_key("secret") && !m.contains_key("tmp_a") && !m.contains_key("tmp_b"));
        // echo -n alice | sha256sum
        assert_eq!(m["user"], "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90");
        assert_eq!((m["scheme"].as_str(), m["host"].as_str()), ("https", "vllm-0.svc"));
        assert_eq!(m["port"], "8000");
        assert_eq!(m["ratio"], "2.5");
        assert_eq!(
            (es6(1e21), es6(1.5e-7), es6(0.000001), es6(-3.0)),
            ("1e+21".into(), "1.5e-7".into(), "0.000001".into(), "-3".into())
        );
        assert_eq!(m["bad"], "3.5", "a value int cannot read stays");
    }

    #[test]
    fn refused_as_contrib_refuses() {
        let e = |y: &str| actions(y).expect_err(y);
        assert!(e("[{action: insert, value: x}]").1.contains("missing required field \"key\""));
        assert!(e("[{key: a, action: insert}]").1.contains("must be specified"));
        assert!(e("[{key: a, action: insert, value: x, from_attribute: b}]").1.contains("multiple value sources"));
        assert!(e("[{action: delete}]").1.contains("at least one of \"key\" and \"pattern\""));
        assert!(e("[{key: a, action: upsert, value: x, pattern: y}]").1.contains("does not use \"pattern\""));
        assert!(e("[{key: a, action: delete, value: x}]").1.contains("does not use"));
        assert!(e("[{key: a, action: extract}]").1.contains("needs \"pattern\""));
        assert!(e("[{key: a, action: extract, pattern: 'a(b)'}]").1.contains("no named"));
        assert!(e("[{key: a, action: extract, pattern: '(?P<x>a)(b)'}]").1.contains("unnamed"));
        assert!(e("[{key: a, action: convert}]").1.contains("converted_type"));
        assert!(e("[{key: a, action: convert, converted_type: float}]").1.contains("int, double or string"));
        let (path, msg) = e("[{key: a, value: 1, action: insert}, {key: a, action: rename}]");
        assert_eq!(path, "actions[1].action");
        assert!(msg.contains("unsupported action \"rename\""));
    }
}
