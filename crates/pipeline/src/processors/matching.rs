//! The Collector's legacy match properties for metrics (contrib's
//! `internal/filter/filterconfig`), as the `attributes` processor's
//! `include`/`exclude` and the `filter` processor's `metrics.include` /
//! `metrics.exclude` use them: `match_type` (`strict` or `regexp`),
//! `metric_names`, `resource_attributes` and, for `attributes`, the data
//! point `attributes`; every property given must match. Regexps are Go's,
//! unanchored (`regexp.MatchString`). The span and log properties are
//! refused with the key that names them.

use crate::processors::pdata::{self, MetricView};
use infertel_model::Labels;
use serde::Deserialize;

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct KeyValue {
    pub key: String,
    #[serde(default)]
    pub value: Option<serde_yaml::Value>,
}

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    #[serde(default)]
    pub match_type: String,
    /// contrib's regexp cache settings (`cacheenabled`,
    /// `cachemaxnumentries`): accepted, nothing to tune here.
    #[serde(default)]
    pub regexp: Option<RegexpConfig>,
    #[serde(default)]
    pub metric_names: Vec<String>,
    #[serde(default)]
    pub resource_attributes: Vec<KeyValue>,
    #[serde(default)]
    pub attributes: Vec<KeyValue>,
}

/// The `filter` processor's legacy match block: as [`MatchConfig`], without
/// data point `attributes` (contrib's filter matches metrics and resources).
#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct MetricMatchConfig {
    #[serde(default)]
    pub match_type: String,
    #[serde(default)]
    pub regexp: Option<RegexpConfig>,
    #[serde(default)]
    pub metric_names: Vec<String>,
    #[serde(default)]
    pub resource_attributes: Vec<KeyValue>,
}

impl From<MetricMatchConfig> for MatchConfig {
    fn from(c: MetricMatchConfig) -> MatchConfig {
        MatchConfig {
            match_type: c.match_type,
            regexp: c.regexp,
            metric_names: c.metric_names,
            resource_attributes: c.resource_attributes,
            attributes: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct RegexpConfig {
    #[serde(default)]
    pub cacheenabled: bool,
    #[serde(default)]
    pub cachemaxnumentries: usize,
}

/// The span and log properties of contrib's match properties.
const NOT_FOR_METRICS: &[&str] =
    &["services", "span_names", "span_kinds", "log_bodies", "log_severity_texts", "log_severity_number", "libraries"];
const EXPR: &str = "expressions belong to match_type \"expr\", which is not supported: write them as OTTL conditions (metrics.metric, metrics.datapoint)";

fn refusals(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<(&str, &str)> = NOT_FOR_METRICS
        .iter()
        .map(|k| (*k, "should not be specified for metrics (infertel carries metrics)"))
        .collect();
    v.push(("expressions", EXPR));
    v.extend_from_slice(extra);
    v
}

/// Reads an `attributes` processor's match block, refusing the span and log
/// properties (contrib refuses them for metrics too) and `expressions` by
/// name before the strict read.
pub fn deserialize_match<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<MatchConfig>, D::Error> {
    let Some(v) = Option::<serde_yaml::Value>::deserialize(d)? else { return Ok(None) };
    crate::processors::refusing(v, &refusals(&[])).map(Some).map_err(serde::de::Error::custom)
}

/// Reads a `filter` processor's `metrics.include`/`exclude`.
pub fn deserialize_metric_match<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<MatchConfig>, D::Error> {
    let Some(v) = Option::<serde_yaml::Value>::deserialize(d)? else { return Ok(None) };
    let point = (
        "attributes",
        "data point attributes are not matched by the legacy filter: write an OTTL datapoint condition (metrics.datapoint)",
    );
    crate::processors::refusing::<MetricMatchConfig>(v, &refusals(&[point]))
        .map(|c| Some(c.into()))
        .map_err(serde::de::Error::custom)
}

enum Pattern {
    Strict(String),
    Regexp(regex::Regex),
}

impl Pattern {
    fn matches(&self, s: &str) -> bool {
        match self {
            Pattern::Strict(p) => p == s,
            Pattern::Regexp(r) => r.is_match(s),
        }
    }
}

/// A checked match: every given property must hold.
pub struct Matcher {
    names: Vec<Pattern>,
    resource: Vec<(String, Option<Pattern>)>,
    attributes: Vec<(String, Option<Pattern>)>,
}

fn value_text(v: &serde_yaml::Value) -> Result<String, String> {
    match v {
        serde_yaml::Value::String(s) => Ok(s.clone()),
        serde_yaml::Value::Bool(b) => Ok(b.to_string()),
        serde_yaml::Value::Number(n) => Ok(n.to_string()),
        _ => Err("must be a string, number or boolean".into()),
    }
}

impl Matcher {
    /// `with_attributes`: whether data point `attributes` may be matched
    /// (the `attributes` processor: yes; the `filter` processor: no).
    /// Errors are `(key, message)` relative to the match block.
    pub fn compile(c: &MatchConfig, with_attributes: bool) -> Result<Matcher, (String, String)> {
        if !with_attributes && !c.attributes.is_empty() {
            return Err((
                "attributes".into(),
                "data point attributes are not matched here: write an OTTL datapoint condition (metrics.datapoint)"
                    .into(),
            ));
        }
        let regexp = match c.match_type.as_str() {
            "strict" => false,
            "regexp" => true,
            "expr" => {
                return Err((
                    "match_type".into(),
                    "match_type \"expr\" is not supported: write the expressions as OTTL conditions (metrics.metric, metrics.datapoint)".into(),
                ));
            }
            "" => return Err(("match_type".into(), "missing: write strict or regexp".into())),
            other => return Err(("match_type".into(), format!("{other:?} is not strict or regexp"))),
        };
        let pattern = |p: &str, key: &str| -> Result<Pattern, (String, String)> {
            if regexp {
                infertel_relabel::go_regex(p).map(Pattern::Regexp).map_err(|e| (key.to_string(), format!("{p:?}: {e}")))
            } else {
                Ok(Pattern::Strict(p.to_string()))
            }
        };
        let names: Vec<Pattern> = c
            .metric_names
            .iter()
            .enumerate()
            .map(|(i, n)| pattern(n, &format!("metric_names[{i}]")))
            .collect::<Result<_, _>>()?;
        let kvs = |list: &[KeyValue], key: &str| -> Result<Vec<(String, Option<Pattern>)>, (String, String)> {
            list.iter()
                .enumerate()
                .map(|(i, kv)| {
                    let at = format!("{key}[{i}]");
                    if kv.key.is_empty() {
                        return Err((at, "key must be set".into()));
                    }
                    let p = match &kv.value {
                        None => None,
                        Some(v) => Some(pattern(&value_text(v).map_err(|e| (format!("{at}.value"), e))?, &at)?),
                    };
                    Ok((kv.key.clone(), p))
                })
                .collect()
        };
        let resource = kvs(&c.resource_attributes, "resource_attributes")?;
        let attributes = kvs(&c.attributes, "attributes")?;
        if names.is_empty() && resource.is_empty() && attributes.is_empty() {
            return Err((
                String::new(),
                "matches nothing: give metric_names, resource_attributes or attributes".into(),
            ));
        }
        Ok(Matcher { names, resource, attributes })
    }

    pub fn matches(&self, labels: &Labels, metric: &MetricView) -> bool {
        if !self.names.is_empty() && !self.names.iter().any(|p| p.matches(&metric.name)) {
            return false;
        }
        let holds = |v: Option<&str>, p: &Option<Pattern>| match (v, p) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(v), Some(p)) => p.matches(v),
        };
        self.resource.iter().all(|(k, p)| holds(pdata::resource_attribute(labels, k), p))
            && self.attributes.iter().all(|(k, p)| holds(pdata::attribute(labels, k, metric.point_label), p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processors::pdata::DataType;

    fn m(yaml: &str, attrs: bool) -> Result<Matcher, (String, String)> {
        Matcher::compile(&serde_yaml::from_str(yaml).expect("yaml"), attrs)
    }

    fn view(name: &str) -> MetricView {
        MetricView {
            name: name.into(),
            data_type: DataType::Gauge,
            kind: infertel_model::MetricType::Gauge,
            unit: String::new(),
            description: String::new(),
            point_label: None,
        }
    }

    #[test]
    fn strict_and_regexp() {
        let s =
            Labels::from_pairs([("__name__", "vllm:num_requests_running"), ("job", "vllm"), ("model_name", "llama")]);
        let strict = m("{match_type: strict, metric_names: [vllm:num_requests_running, other]}", false)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(strict.matches(&s, &view("vllm:num_requests_running")));
        assert!(!strict.matches(&s, &view("vllm:num_requests")));
        let re = m("{match_type: regexp, metric_names: ['requests'], resource_attributes: [{key: service.name, value: '^vl'}]}", false)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(re.matches(&s, &view("vllm:num_requests_running")), "unanchored, as Go's MatchString");
        let other_job = Labels::from_pairs([("__name__", "x"), ("job", "dcgm")]);
        assert!(!re.matches(&other_job, &view("vllm:num_requests_running")));
        let attrs = m("{match_type: strict, attributes: [{key: model_name, value: llama}]}", true)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(attrs.matches(&s, &view("anything")));
        let key_only = m("{match_type: strict, attributes: [{key: gpu}]}", true).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(!key_only.matches(&s, &view("anything")));
    }

    #[test]
    fn refusals_name_the_key() {
        let refused: Result<Option<MatchConfig>, _> = deserialize_match(serde_yaml::Value::from(
            serde_yaml::from_str::<serde_yaml::Value>("{match_type: strict, span_names: [a]}").expect("yaml"),
        ));
        assert!(
            refused.err().is_some_and(|e| e.to_string().contains("span_names: should not be specified for metrics"))
        );
        assert_eq!(m("{match_type: expr, metric_names: [a]}", false).err().map(|e| e.0), Some("match_type".into()));
        assert_eq!(m("{metric_names: [a]}", false).err().map(|e| e.0), Some("match_type".into()));
        assert_eq!(
            m("{match_type: regexp, metric_names: ['(']}", false).err().map(|e| e.0),
            Some("metric_names[0]".into())
        );
        assert!(m("{match_type: strict, attributes: [{key: a}]}", false).is_err());
        assert!(m("{match_type: strict}", false).is_err());
    }
}
