//! Prometheus relabeling (`relabel_configs`, `metric_relabel_configs`,
//! `write_relabel_configs`) with the semantics of Prometheus 2.42.
//!
//! A [`RelabelConfig`] is what a user writes in YAML; [`RelabelConfig::compile`]
//! validates it exactly as Prometheus does and yields a [`Rule`]; a
//! [`Relabeler`] applies an ordered list of rules to a [`Labels`] set.
//!
//! Behaviour that is easy to get wrong and is matched deliberately:
//! * regexes are anchored (`^(?:regex)$`) and use Go's RE2 dialect (see
//!   `goregex.rs` for the differences from the `regex` crate);
//! * `$1`/`${1}`/`$name` expand like Go's `Regexp.Expand` (`$1x` is the group
//!   named `1x`);
//! * missing source labels join as empty strings;
//! * `replace` writing an empty value deletes the target label, and a target
//!   label that expands to an invalid name is silently skipped;
//! * `hashmod` is the big-endian u64 of the *last* 8 bytes of the MD5 digest,
//!   modulo `modulus`;
//! * `lowercase`/`uppercase` use Go's simple (per-rune) case mapping.
//!
//! The behaviour is checked against a real Prometheus 2.42 by
//! `tests/prometheus_oracle.rs` (see `oracle/run-prometheus-oracle.sh`).

mod case;
mod expand;
mod goregex;
pub mod scalar;

use std::fmt;

use infertel_model::{Label, Labels, Str};
use regex::Regex;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Prometheus' default `separator`.
pub const DEFAULT_SEPARATOR: &str = ";";
/// Prometheus' default `regex`.
pub const DEFAULT_REGEX: &str = "(.*)";
/// Prometheus' default `replacement`.
pub const DEFAULT_REPLACEMENT: &str = "$1";

/// A relabeling action. Parsed case-insensitively, as Prometheus does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Action {
    #[default]
    Replace,
    Keep,
    Drop,
    HashMod,
    LabelMap,
    LabelDrop,
    LabelKeep,
    Lowercase,
    Uppercase,
    KeepEqual,
    DropEqual,
}

impl Action {
    const ALL: [Action; 11] = [
        Action::Replace,
        Action::Keep,
        Action::Drop,
        Action::HashMod,
        Action::LabelMap,
        Action::LabelDrop,
        Action::LabelKeep,
        Action::Lowercase,
        Action::Uppercase,
        Action::KeepEqual,
        Action::DropEqual,
    ];

    /// The name used in configuration files.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Replace => "replace",
            Action::Keep => "keep",
            Action::Drop => "drop",
            Action::HashMod => "hashmod",
            Action::LabelMap => "labelmap",
            Action::LabelDrop => "labeldrop",
            Action::LabelKeep => "labelkeep",
            Action::Lowercase => "lowercase",
            Action::Uppercase => "uppercase",
            Action::KeepEqual => "keepequal",
            Action::DropEqual => "dropequal",
        }
    }

    /// Parses an action name, ignoring ASCII case (Prometheus lowercases first).
    pub fn parse(s: &str) -> Option<Action> {
        let lower = s.to_lowercase();
        Action::ALL.into_iter().find(|a| a.as_str() == lower)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Action {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Action::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown relabel action {s:?}")))
    }
}

/// One relabeling step as written in configuration. Field defaults are
/// Prometheus' (`separator: ";"`, `regex: "(.*)"`, `replacement: "$1"`,
/// `action: replace`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelabelConfig {
    #[serde(deserialize_with = "scalar::strings")]
    pub source_labels: Vec<String>,
    #[serde(deserialize_with = "scalar::string")]
    pub separator: String,
    /// `regex: true` is the string `true`, as Go's YAML reads it.
    #[serde(deserialize_with = "scalar::string")]
    pub regex: String,
    pub modulus: u64,
    #[serde(deserialize_with = "scalar::string")]
    pub target_label: String,
    #[serde(deserialize_with = "scalar::string")]
    pub replacement: String,
    pub action: Action,
}

impl Default for RelabelConfig {
    fn default() -> Self {
        RelabelConfig {
            source_labels: Vec::new(),
            separator: DEFAULT_SEPARATOR.to_string(),
            regex: DEFAULT_REGEX.to_string(),
            modulus: 0,
            target_label: String::new(),
            replacement: DEFAULT_REPLACEMENT.to_string(),
            action: Action::Replace,
        }
    }
}

/// Why a relabel configuration was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RelabelError {
    /// A field has a value Prometheus would refuse.
    #[error("relabel {action} action: invalid `{field}`: {reason}")]
    InvalidField { action: Action, field: &'static str, reason: String },
    /// The regex does not compile (in Go's dialect).
    #[error("relabel {action} action: invalid `regex` {pattern:?}: {reason}")]
    Regex { action: Action, pattern: String, reason: String },
    /// Wraps an error with the position of the rule in its list.
    #[error("relabel rule #{index} (0-based): {source}")]
    InRule {
        index: usize,
        #[source]
        source: Box<RelabelError>,
    },
}

/// A validated, compiled relabeling step.
#[derive(Clone, Debug)]
pub struct Rule {
    action: Action,
    source_labels: Vec<String>,
    separator: String,
    regex: Regex,
    /// `regex` is the default `(.*)`: enables Prometheus' fast path.
    regex_is_default: bool,
    modulus: u64,
    target_label: String,
    target_has_var: bool,
    replacement: String,
    replacement_has_var: bool,
}

impl RelabelConfig {
    /// Validates like Prometheus' `relabel.Config.Validate` (and the YAML
    /// unmarshalling of `source_labels` and `regex`) and compiles the regex.
    pub fn compile(&self) -> Result<Rule, RelabelError> {
        let action = self.action;
        let invalid = |field: &'static str, reason: String| RelabelError::InvalidField { action, field, reason };
        let uses_target = matches!(
            action,
            Action::Replace
                | Action::HashMod
                | Action::Lowercase
                | Action::Uppercase
                | Action::KeepEqual
                | Action::DropEqual
        );
        let no_replacement =
            matches!(action, Action::Lowercase | Action::Uppercase | Action::KeepEqual | Action::DropEqual);

        for name in &self.source_labels {
            if !is_valid_label_name(name) {
                return Err(invalid("source_labels", format!("{name:?} is not a valid label name")));
            }
        }
        if action == Action::HashMod && self.modulus == 0 {
            return Err(invalid("modulus", "hashmod requires a non-zero modulus".into()));
        }
        if uses_target && self.target_label.is_empty() {
            return Err(invalid("target_label", format!("required for the {action} action")));
        }
        let target_has_var = expand::has_var(&self.target_label);
        if action == Action::Replace && !target_has_var && !is_valid_label_name(&self.target_label) {
            return Err(invalid("target_label", format!("{:?} is not a valid label name", self.target_label)));
        }
        if action == Action::Replace && target_has_var && !is_valid_target_template(&self.target_label) {
            return Err(invalid("target_label", format!("{:?} is not a valid label name template", self.target_label)));
        }
        if (no_replacement || action == Action::HashMod) && !is_valid_label_name(&self.target_label) {
            return Err(invalid("target_label", format!("{:?} is not a valid label name", self.target_label)));
        }
        if no_replacement && self.replacement != DEFAULT_REPLACEMENT {
            return Err(invalid("replacement", format!("can not be set for the {action} action")));
        }
        if action == Action::LabelMap && !is_valid_target_template(&self.replacement) {
            return Err(invalid("replacement", format!("{:?} is not a valid label name template", self.replacement)));
        }
        if matches!(action, Action::KeepEqual | Action::DropEqual)
            && (self.regex != DEFAULT_REGEX
                || self.modulus != 0
                || self.separator != DEFAULT_SEPARATOR
                || self.replacement != DEFAULT_REPLACEMENT)
        {
            let field = if self.regex != DEFAULT_REGEX {
                "regex"
            } else if self.modulus != 0 {
                "modulus"
            } else if self.separator != DEFAULT_SEPARATOR {
                "separator"
            } else {
                "replacement"
            };
            return Err(invalid(field, format!("the {action} action takes only `source_labels` and `target_label`")));
        }
        if matches!(action, Action::LabelDrop | Action::LabelKeep)
            && (!self.source_labels.is_empty()
                || !self.target_label.is_empty()
                || self.modulus != 0
                || self.separator != DEFAULT_SEPARATOR
                || self.replacement != DEFAULT_REPLACEMENT)
        {
            let field = if !self.source_labels.is_empty() {
                "source_labels"
            } else if !self.target_label.is_empty() {
                "target_label"
            } else if self.modulus != 0 {
                "modulus"
            } else if self.separator != DEFAULT_SEPARATOR {
                "separator"
            } else {
                "replacement"
            };
            return Err(invalid(field, format!("the {action} action takes only `regex`")));
        }

        let regex = compile_anchored(&self.regex).map_err(|reason| RelabelError::Regex {
            action,
            pattern: self.regex.clone(),
            reason,
        })?;

        Ok(Rule {
            action,
            source_labels: self.source_labels.clone(),
            separator: self.separator.clone(),
            regex,
            regex_is_default: self.regex == DEFAULT_REGEX,
            modulus: self.modulus,
            target_label: self.target_label.clone(),
            target_has_var,
            replacement: self.replacement.clone(),
            replacement_has_var: expand::has_var(&self.replacement),
        })
    }
}

/// Compiles `pattern` in Go's dialect, unanchored, as Go's
/// `regexp.MatchString` uses it (the Collector's regexp filters and OTTL's
/// `IsMatch`).
pub fn go_regex(pattern: &str) -> Result<Regex, String> {
    let translated = goregex::translate(pattern)?;
    Regex::new(&translated).map_err(|e| e.to_string())
}

/// Compiles `^(?:pattern)$` in Go's dialect. The wrapping is textual, as in
/// Prometheus, so even odd patterns like `a)|(b` behave the same.
fn compile_anchored(pattern: &str) -> Result<Regex, String> {
    let translated = goregex::translate(&format!("^(?:{pattern})$"))?;
    Regex::new(&translated).map_err(|e| e.to_string())
}

/// Legacy Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*` (2.42 predates
/// UTF-8 names).
pub fn is_valid_label_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b[1..].iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// Prometheus' `relabelTarget`: `^(?:(?:[a-zA-Z_]|\$(?:\{\w+\}|\w+))+\w*)+$`,
/// i.e. a label name in which `$name`/`${name}` references may appear.
fn is_valid_target_template(s: &str) -> bool {
    static_template_regex().is_match(s)
}

fn static_template_regex() -> &'static Regex {
    use std::sync::OnceLock;
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // ASCII `\w`, as in Go. The pattern is a constant, so this cannot fail.
        Regex::new(r"^(?:(?:[a-zA-Z_]|\$(?:\{[0-9A-Za-z_]+\}|[0-9A-Za-z_]+))+[0-9A-Za-z_]*)+$")
            .expect("constant regex compiles")
    })
}

/// The label set being rewritten: kept sorted by name so lookups are binary
/// searches; `changed` lets an untouched set be returned without rebuilding.
struct Work {
    labels: Vec<Label>,
    changed: bool,
}

impl Work {
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.labels.binary_search_by(|l| l.name.as_bytes().cmp(name.as_bytes()))
    }

    fn get(&self, name: &str) -> &str {
        self.find(name).map_or("", |i| &*self.labels[i].value)
    }

    /// Sets `name` to `value`; an empty value deletes (as labels.Builder does).
    fn set(&mut self, name: &str, value: &str) {
        if value.is_empty() {
            self.del(name);
            return;
        }
        match self.find(name) {
            Ok(i) => {
                if &*self.labels[i].value != value {
                    self.labels[i] = Label::new(self.labels[i].name.clone(), value);
                    self.changed = true;
                }
            }
            Err(i) => {
                self.labels.insert(i, Label::new(name, value));
                self.changed = true;
            }
        }
    }

    /// Like `set` but reuses an existing shared value (labelmap copies values).
    fn set_shared(&mut self, name: &str, value: &Str) {
        match self.find(name) {
            Ok(i) => {
                if self.labels[i].value != *value {
                    self.labels[i] = Label::new(self.labels[i].name.clone(), value.clone());
                    self.changed = true;
                }
            }
            Err(i) => {
                self.labels.insert(i, Label::new(name, value.clone()));
                self.changed = true;
            }
        }
    }

    fn del(&mut self, name: &str) {
        if let Ok(i) = self.find(name) {
            self.labels.remove(i);
            self.changed = true;
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let before = self.labels.len();
        self.labels.retain(|l| keep(&l.name));
        self.changed |= self.labels.len() != before;
    }
}

impl Rule {
    /// The action this rule performs.
    pub fn action(&self) -> Action {
        self.action
    }

    /// Applies the rule; false means the label set is dropped.
    fn apply(&self, work: &mut Work, val: &mut String) -> bool {
        val.clear();
        for (i, name) in self.source_labels.iter().enumerate() {
            if i > 0 {
                val.push_str(&self.separator);
            }
            val.push_str(work.get(name));
        }
        let val = val.as_str();
        match self.action {
            Action::Drop => !self.regex.is_match(val),
            Action::Keep => self.regex.is_match(val),
            Action::DropEqual => work.get(&self.target_label) != val,
            Action::KeepEqual => work.get(&self.target_label) == val,
            Action::Replace => {
                // Prometheus' fast path; it gives the same result as the slow
                // one but skips the regex.
                if val.is_empty() && self.regex_is_default && !self.target_has_var && !self.replacement_has_var {
                    work.set(&self.target_label, &self.replacement);
                    return true;
                }
                let Some(caps) = self.regex.captures(val) else {
                    return true;
                };
                let mut target = String::new();
                let target: &str = if self.target_has_var {
                    expand::expand(&mut target, &self.target_label, &self.regex, &caps);
                    &target
                } else {
                    &self.target_label
                };
                // An expanded target that is not a label name is skipped, not an error.
                if !is_valid_label_name(target) {
                    return true;
                }
                let mut res = String::new();
                let res: &str = if self.replacement_has_var {
                    expand::expand(&mut res, &self.replacement, &self.regex, &caps);
                    &res
                } else {
                    &self.replacement
                };
                work.set(target, res);
                true
            }
            Action::Lowercase => {
                let v = case::go_to_lower(val);
                work.set(&self.target_label, &v);
                true
            }
            Action::Uppercase => {
                let v = case::go_to_upper(val);
                work.set(&self.target_label, &v);
                true
            }
            Action::HashMod => {
                let v = hashmod(val, self.modulus).to_string();
                work.set(&self.target_label, &v);
                true
            }
            Action::LabelMap => {
                // Prometheus iterates over the label set as it was before this
                // rule; later sets to the same name win.
                let mut sets: Vec<(String, Str)> = Vec::new();
                for l in &work.labels {
                    if let Some(caps) = self.regex.captures(&l.name) {
                        let mut name = String::new();
                        expand::expand(&mut name, &self.replacement, &self.regex, &caps);
                        sets.push((name, l.value.clone()));
                    }
                }
                for (name, value) in &sets {
                    work.set_shared(name, value);
                }
                true
            }
            Action::LabelDrop => {
                work.retain(|name| !self.regex.is_match(name));
                true
            }
            Action::LabelKeep => {
                work.retain(|name| self.regex.is_match(name));
                true
            }
        }
    }
}

/// Prometheus' hashmod: MD5 of `val`, the last 8 bytes as a big-endian u64,
/// modulo `modulus`. `modulus` must be non-zero (checked at compile time).
pub fn hashmod(val: &str, modulus: u64) -> u64 {
    let digest = md5::compute(val.as_bytes());
    let mut last = [0u8; 8];
    last.copy_from_slice(&digest.0[8..]);
    u64::from_be_bytes(last) % modulus.max(1)
}

/// An ordered list of compiled rules.
#[derive(Clone, Debug, Default)]
pub struct Relabeler {
    rules: Vec<Rule>,
}

impl Relabeler {
    /// Compiles every config; the error names the failing rule's index.
    pub fn new(configs: &[RelabelConfig]) -> Result<Self, RelabelError> {
        let rules = configs
            .iter()
            .enumerate()
            .map(|(index, c)| c.compile().map_err(|e| RelabelError::InRule { index, source: Box::new(e) }))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Relabeler { rules })
    }

    /// Builds a relabeler from already compiled rules.
    pub fn from_rules(rules: Vec<Rule>) -> Self {
        Relabeler { rules }
    }

    /// True when there are no rules (process is then the identity).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The compiled rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Applies the rules in order. `None` means the set was dropped (by
    /// `keep`, `drop`, `keepequal` or `dropequal`). A set that no rule changed
    /// comes back as a cheap clone of the input. An empty result is returned
    /// as `Some` (empty); callers decide what an empty set means.
    pub fn process(&self, labels: &Labels) -> Option<Labels> {
        if self.rules.is_empty() {
            return Some(labels.clone());
        }
        let mut work = Work { labels: labels.as_slice().to_vec(), changed: false };
        let mut val = String::new();
        for rule in &self.rules {
            if !rule.apply(&mut work, &mut val) {
                return None;
            }
        }
        if work.changed { Some(Labels::from_vec(work.labels)) } else { Some(labels.clone()) }
    }

    /// The rules applied one by one, for a person debugging them (the
    /// status page): each rule's output, or where the set was dropped.
    /// Stops at the rule that dropped it. Not for the hot path.
    pub fn steps(&self, labels: &Labels) -> Vec<Step> {
        let mut work = Work { labels: labels.as_slice().to_vec(), changed: false };
        let mut val = String::new();
        let mut out = Vec::with_capacity(self.rules.len());
        for (index, rule) in self.rules.iter().enumerate() {
            let before = work.labels.clone();
            let kept = rule.apply(&mut work, &mut val);
            let output = kept.then(|| Labels::from_vec(work.labels.clone()));
            let changed = output.as_ref().is_some_and(|o| o.as_slice() != before.as_slice());
            out.push(Step { index, action: rule.action(), output, changed });
            if !kept {
                break;
            }
        }
        out
    }
}

/// One rule's effect in [`Relabeler::steps`].
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The rule's position in its list (0-based).
    pub index: usize,
    pub action: Action,
    /// The label set after the rule; `None`: the rule dropped it.
    pub output: Option<Labels>,
    /// The rule changed the set.
    pub changed: bool,
}

#[cfg(test)]
mod tests;
