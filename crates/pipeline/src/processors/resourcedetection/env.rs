//! Detector `env`: the resource in `OTEL_RESOURCE_ATTRIBUTES` (or the
//! deprecated `OTEL_RESOURCE`), `k1=v1,k2=v2`, as contrib's env detector
//! reads it: spaces around keys, values and commas are trimmed, values are
//! URL-decoded (`%2C` is a comma), and any text that is not a `k=v` pair
//! makes the whole variable invalid rather than half-read.

use super::{Detected, Env};

#[derive(Debug, serde::Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EnvConfig {
    /// Only these keys are kept; all when unset.
    #[serde(default)]
    pub allow_list: Option<Vec<String>>,
}

pub fn detect(cfg: &EnvConfig, env: &Env) -> Result<Detected, String> {
    let mut text = env("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default().trim().to_string();
    let mut var = "OTEL_RESOURCE_ATTRIBUTES";
    if text.is_empty() {
        text = env("OTEL_RESOURCE").unwrap_or_default().trim().to_string();
        var = "OTEL_RESOURCE";
    }
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = parse(&text).map_err(|e| format!("{var}: {e}"))?;
    if let Some(allow) = &cfg.allow_list {
        out.retain(|(k, _)| allow.iter().any(|a| a == k));
    }
    Ok(out)
}

/// `k=v` pairs separated by commas; values URL-decoded.
pub fn parse(s: &str) -> Result<Detected, String> {
    let mut out: Detected = Vec::new();
    for item in s.split(',') {
        let Some((k, v)) = item.split_once('=') else {
            return Err(format!("invalid resource format, invalid text: {:?}", item.trim()));
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || !k.is_ascii() || !v.is_ascii() || k.len() > 256 || v.len() > 256 {
            return Err(format!("invalid resource format, invalid text: {item:?}"));
        }
        let value = unescape(v).map_err(|e| format!("invalid resource format in attribute: {item:?}, err: {e}"))?;
        match out.iter_mut().find(|(n, _)| n == k) {
            Some(slot) => slot.1 = value,
            None => out.push((k.to_string(), value)),
        }
    }
    Ok(out)
}

/// Go's `url.QueryUnescape`: `%XX` escapes and `+` as a space.
fn unescape(v: &str) -> Result<String, String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
                let Some(byte) = byte else {
                    return Err(format!("invalid URL escape {:?}", &v[i..(i + 3).min(v.len())]));
                };
                out.push(byte);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "the decoded value is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_trimmed_and_decoded_as_contrib_does() {
        // Cases from the OpenTelemetry spec's OTEL_RESOURCE_ATTRIBUTES
        // examples and contrib's env detector tests.
        let got = parse(" service.name = checkout , k8s.cluster.name=prod%2Deu,note=a%2Cb+c").unwrap();
        assert_eq!(
            got,
            vec![
                ("service.name".to_string(), "checkout".to_string()),
                ("k8s.cluster.name".to_string(), "prod-eu".to_string()),
                ("note".to_string(), "a,b c".to_string()),
            ]
        );
        assert_eq!(parse("a=").unwrap(), vec![("a".to_string(), String::new())]);
        assert!(parse("a=1,b").unwrap_err().contains("invalid text: \"b\""));
        assert!(parse("a=%zz").unwrap_err().contains("invalid URL escape"));
        assert!(parse("=1").is_err());
    }

    #[test]
    fn the_deprecated_variable_and_the_allow_list() {
        let env = |k: &str| (k == "OTEL_RESOURCE").then(|| "a=1,b=2".to_string());
        let cfg = EnvConfig { allow_list: Some(vec!["b".into()]) };
        assert_eq!(detect(&cfg, &env).unwrap(), vec![("b".to_string(), "2".to_string())]);
        let none = |_: &str| None;
        assert!(detect(&EnvConfig::default(), &none).unwrap().is_empty());
        let bad = |k: &str| (k == "OTEL_RESOURCE_ATTRIBUTES").then(|| "x".to_string());
        assert!(detect(&EnvConfig::default(), &bad).unwrap_err().starts_with("OTEL_RESOURCE_ATTRIBUTES: "));
    }
}
