//! Series traces: someone asks, on `/series?match=...`, what becomes of a
//! series; from then on (for [`TRACE_TTL`] after the last time they ask)
//! the scrape loops and the exporters note what they do with every series
//! the selector matches: scraped by which target, kept or dropped by which
//! `metric_relabel_configs` rule, over the sample limit, shadowed,
//! out of order, staled, queued, delivered, held (and why), rejected (with
//! the receiver's answer). Nothing is recorded while no trace is open: one
//! relaxed atomic load per scrape and per request.

use infertel_model::{Labels, METRIC_NAME};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// A trace nobody looked at for this long is closed.
pub const TRACE_TTL: Duration = Duration::from_secs(600);
/// Series followed per trace (a selector matching more shows the first).
pub const MAX_SERIES: usize = 200;
/// Traces open at once.
pub const MAX_TRACES: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Re,
    Nre,
}

#[derive(Debug, Clone)]
struct Matcher {
    name: String,
    op: Op,
    value: String,
    re: Option<regex::Regex>,
}

impl Matcher {
    fn matches(&self, v: &str) -> bool {
        match self.op {
            Op::Eq => v == self.value,
            Op::Ne => v != self.value,
            Op::Re => self.re.as_ref().is_some_and(|r| r.is_match(v)),
            Op::Nre => !self.re.as_ref().is_some_and(|r| r.is_match(v)),
        }
    }
}

/// A PromQL series selector: `name`, `name{a="b",c!="d",e=~"f.*",g!~"h"}`
/// or `{__name__="name",...}`.
#[derive(Debug, Clone)]
pub struct Selector {
    /// The metric name, when the selector fixes one (a cheap first test).
    pub name: Option<String>,
    matchers: Vec<Matcher>,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("empty selector: write a metric name, optionally with {label=\"value\",...}".into());
        }
        let (name, rest) = match t.find('{') {
            Some(i) => (t[..i].trim(), &t[i..]),
            None => (t, ""),
        };
        let valid_name = |n: &str| {
            let mut b = n.bytes();
            b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':')
                && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
        };
        if !name.is_empty() && !valid_name(name) {
            return Err(format!("{name:?} is not a metric name"));
        }
        let mut matchers = Vec::new();
        if !rest.is_empty() {
            let inner = rest
                .strip_prefix('{')
                .and_then(|r| r.strip_suffix('}'))
                .ok_or_else(|| format!("{text:?}: a selector's braces must close at its end"))?;
            let mut chars = inner.trim();
            while !chars.is_empty() {
                let end = chars.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(chars.len());
                let lname = &chars[..end];
                if lname.is_empty() {
                    return Err(format!("{text:?}: expected a label name at {chars:?}"));
                }
                let after = chars[end..].trim_start();
                let (op, after) = if let Some(a) = after.strip_prefix("=~") {
                    (Op::Re, a)
                } else if let Some(a) = after.strip_prefix("!~") {
                    (Op::Nre, a)
                } else if let Some(a) = after.strip_prefix("!=") {
                    (Op::Ne, a)
                } else if let Some(a) = after.strip_prefix('=') {
                    (Op::Eq, a)
                } else {
                    return Err(format!("{text:?}: expected =, !=, =~ or !~ after {lname}"));
                };
                let after = after.trim_start();
                let quote = after.chars().next().filter(|c| *c == '"' || *c == '\'');
                let Some(q) = quote else {
                    return Err(format!("{text:?}: the value of {lname} must be quoted"));
                };
                let mut value = String::new();
                let mut it = after[1..].char_indices();
                let mut close = None;
                while let Some((i, c)) = it.next() {
                    match c {
                        '\\' => match it.next() {
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, x)) => value.push(x),
                            None => break,
                        },
                        c if c == q => {
                            close = Some(i + 2);
                            break;
                        }
                        c => value.push(c),
                    }
                }
                let Some(close) = close else { return Err(format!("{text:?}: unterminated value of {lname}")) };
                let re = match op {
                    Op::Re | Op::Nre => Some(
                        regex::Regex::new(&format!("^(?:{value})$"))
                            .map_err(|e| format!("{text:?}: regex of {lname}: {e}"))?,
                    ),
                    _ => None,
                };
                matchers.push(Matcher { name: lname.to_string(), op, value, re });
                chars = after[close..].trim_start();
                if let Some(r) = chars.strip_prefix(',') {
                    chars = r.trim_start();
                } else if !chars.is_empty() {
                    return Err(format!("{text:?}: expected , between matchers at {chars:?}"));
                }
            }
        }
        let mut name = (!name.is_empty()).then(|| name.to_string());
        if name.is_none()
            && let Some(m) = matchers.iter().find(|m| m.name == METRIC_NAME && m.op == Op::Eq)
        {
            name = Some(m.value.clone());
        }
        if name.is_none() && matchers.iter().all(|m| m.matches("")) {
            return Err(format!("{text:?}: the selector matches every series: name a metric or a label value"));
        }
        Ok(Selector { name, matchers })
    }

    /// The selector as a label set, when every matcher is an equality.
    pub fn equalities(&self) -> Option<Vec<infertel_model::Label>> {
        self.matchers
            .iter()
            .map(|m| (m.op == Op::Eq).then(|| infertel_model::Label::new(m.name.as_str(), m.value.as_str())))
            .collect()
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        if let Some(n) = &self.name
            && labels.metric_name() != n
        {
            return false;
        }
        self.matchers.iter().all(|m| m.matches(labels.get(&m.name).unwrap_or("")))
    }
}

/// What the scrape made of a series.
#[derive(Debug, Clone, PartialEq)]
pub enum ScrapeFate {
    Kept,
    /// Dropped by `metric_relabel_configs` rule `index` (0-based).
    DroppedByRule {
        index: usize,
        action: String,
    },
    /// Relabeling removed every label.
    Emptied,
    OverSampleLimit(u64),
    /// Another series of the scrape has the same labels (the first is kept).
    Duplicate,
    /// The target's own timestamp did not move forward.
    OutOfOrder,
    /// Not in the last scrape: a staleness marker was sent.
    Stale,
    /// The scrape failed: nothing of it was forwarded, the series got a marker.
    ScrapeFailed(String),
}

impl ScrapeFate {
    pub fn describe(&self) -> String {
        match self {
            ScrapeFate::Kept => "kept: forwarded to the pipeline".into(),
            ScrapeFate::DroppedByRule { index, action } => {
                format!("dropped by metric_relabel_configs rule #{} (action {action})", index + 1)
            }
            ScrapeFate::Emptied => "dropped: relabeling removed every label".into(),
            ScrapeFate::OverSampleLimit(n) => {
                format!("limited: the scrape has more than sample_limit {n} samples: the scrape fails")
            }
            ScrapeFate::Duplicate => {
                "shadowed: another series of the scrape has the same labels (the first is kept)".into()
            }
            ScrapeFate::OutOfOrder => "dropped: the target's timestamp did not move forward (out of order)".into(),
            ScrapeFate::Stale => "staled: gone from the last scrape, a staleness marker was sent".into(),
            ScrapeFate::ScrapeFailed(e) => format!("staled: the scrape failed ({e}), a staleness marker was sent"),
        }
    }

    pub fn kept(&self) -> bool {
        matches!(self, ScrapeFate::Kept)
    }
}

/// What an exporter made of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportState {
    Queued,
    Delivered,
    /// Waiting: the endpoint is paused (401/403/404/...) or unreachable.
    Held,
    /// The backend refused it (the answer is in the detail).
    Rejected,
    /// Dropped by the exporter (queue full, write_relabel_configs, ...).
    Dropped,
}

impl ExportState {
    pub fn as_str(self) -> &'static str {
        match self {
            ExportState::Queued => "queued",
            ExportState::Delivered => "delivered",
            ExportState::Held => "held",
            ExportState::Rejected => "rejected",
            ExportState::Dropped => "dropped",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ExportFate {
    pub state: ExportState,
    pub at: SystemTime,
    pub detail: String,
    /// Samples of the series this exporter delivered while traced.
    pub delivered: u64,
    /// When it last delivered one (a newer sample may be queued meanwhile).
    pub last_delivered: Option<SystemTime>,
}

/// One traced series.
#[derive(Debug, Clone)]
pub struct Fate {
    /// `job/instance` of the target that scraped it ("" for series made in
    /// the pipeline: derived series).
    pub target: String,
    /// As scraped, with the target labels, before metric relabeling.
    pub scraped_as: String,
    /// As forwarded (after relabeling), when it was.
    pub forwarded_as: Option<String>,
    pub scrape: Option<ScrapeFate>,
    pub at: SystemTime,
    pub value: f64,
    pub scrapes: u64,
    pub exporters: BTreeMap<String, ExportFate>,
}

/// An open trace.
#[derive(Debug)]
pub struct Trace {
    pub text: String,
    pub selector: Selector,
    pub since: SystemTime,
    /// When the trace was last asked for, in ms since the tracer's epoch
    /// (read on the hot path without a lock).
    asked: AtomicU64,
    fates: Mutex<BTreeMap<String, Fate>>,
    /// Series seen beyond [`MAX_SERIES`].
    overflow: AtomicBool,
}

impl Trace {
    pub fn fates(&self) -> Vec<Fate> {
        self.fates.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    pub fn overflowed(&self) -> bool {
        self.overflow.load(Ordering::Relaxed)
    }

    fn with_fate(&self, key: String, make: impl FnOnce() -> Fate, f: impl FnOnce(&mut Fate)) {
        let mut m = self.fates.lock().unwrap_or_else(|p| p.into_inner());
        if !m.contains_key(&key) {
            if m.len() >= MAX_SERIES {
                self.overflow.store(true, Ordering::Relaxed);
                return;
            }
            m.insert(key.clone(), make());
        }
        if let Some(x) = m.get_mut(&key) {
            f(x);
        }
    }

    /// A scrape's decision about a series.
    pub fn scraped(&self, target: &str, scraped_as: &Labels, out: Option<&Labels>, fate: ScrapeFate, value: f64) {
        let key = format!("{target} {scraped_as}");
        let now = SystemTime::now();
        self.with_fate(
            key,
            || Fate {
                target: target.to_string(),
                scraped_as: scraped_as.to_string(),
                forwarded_as: None,
                scrape: None,
                at: now,
                value,
                scrapes: 0,
                exporters: BTreeMap::new(),
            },
            |f| {
                f.at = now;
                f.scrapes += 1;
                if fate.kept() {
                    f.value = value;
                }
                if let Some(o) = out {
                    f.forwarded_as = Some(o.to_string());
                }
                f.scrape = Some(fate);
            },
        );
    }

    /// A staleness marker for a forwarded series (gone from the scrape, or
    /// the scrape failed).
    pub fn marked(&self, target: &str, out: &Labels, fate: ScrapeFate) {
        let shown = out.to_string();
        let now = SystemTime::now();
        let key = {
            let m = self.fates.lock().unwrap_or_else(|p| p.into_inner());
            m.iter()
                .find(|(_, f)| f.target == target && f.forwarded_as.as_deref() == Some(shown.as_str()))
                .map(|(k, _)| k.clone())
        };
        let key = key.unwrap_or_else(|| format!("{target} {shown}"));
        self.with_fate(
            key,
            || Fate {
                target: target.to_string(),
                scraped_as: String::new(),
                forwarded_as: Some(shown.clone()),
                scrape: None,
                at: now,
                value: f64::NAN,
                scrapes: 0,
                exporters: BTreeMap::new(),
            },
            |f| {
                f.at = now;
                f.scrape = Some(fate);
            },
        );
    }

    /// An exporter's step with a series (as it left the pipeline).
    pub fn exported(&self, exporter: &str, labels: &Labels, state: ExportState, detail: &str, samples: u64) {
        let shown = labels.to_string();
        let now = SystemTime::now();
        let mut m = self.fates.lock().unwrap_or_else(|p| p.into_inner());
        // The scraped series this is (its forwarded labels), or one made
        // in the pipeline.
        let key = m
            .iter()
            .find(|(_, f)| f.forwarded_as.as_deref() == Some(shown.as_str()))
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| format!("pipeline {shown}"));
        if !m.contains_key(&key) {
            if m.len() >= MAX_SERIES {
                self.overflow.store(true, Ordering::Relaxed);
                return;
            }
            m.insert(
                key.clone(),
                Fate {
                    target: String::new(),
                    scraped_as: String::new(),
                    forwarded_as: Some(shown),
                    scrape: None,
                    at: now,
                    value: f64::NAN,
                    scrapes: 0,
                    exporters: BTreeMap::new(),
                },
            );
        }
        let Some(f) = m.get_mut(&key) else { return };
        let e = f.exporters.entry(exporter.to_string()).or_insert(ExportFate {
            state,
            at: now,
            detail: String::new(),
            delivered: 0,
            last_delivered: None,
        });
        // A later "queued" does not hide why the last request was held or refused.
        if state != ExportState::Queued || e.state == ExportState::Delivered || e.state == ExportState::Queued {
            e.state = state;
            e.detail = detail.to_string();
        }
        e.at = now;
        if state == ExportState::Delivered {
            e.delivered += samples;
            e.last_delivered = Some(now);
        }
    }
}

/// The open traces.
#[derive(Debug)]
pub struct Tracer {
    active: AtomicBool,
    traces: RwLock<Vec<Arc<Trace>>>,
    epoch: Instant,
}

impl Default for Tracer {
    fn default() -> Self {
        Tracer { active: AtomicBool::new(false), traces: RwLock::new(Vec::new()), epoch: Instant::now() }
    }
}

impl Tracer {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn live(&self, t: &Trace) -> bool {
        self.now().saturating_sub(t.asked.load(Ordering::Relaxed)) < TRACE_TTL.as_millis() as u64
    }

    /// Any trace open: the hot path's only cost while none is.
    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Closes the traces nobody asked for within [`TRACE_TTL`]; once none
    /// is left the hot path stops looking. Called once per scrape and when
    /// a trace is opened, never per sample.
    pub fn expire(&self) {
        if !self.active() {
            return;
        }
        if self.traces.read().unwrap_or_else(|p| p.into_inner()).iter().all(|t| self.live(t)) {
            return;
        }
        let mut v = self.traces.write().unwrap_or_else(|p| p.into_inner());
        v.retain(|t| self.live(t));
        if v.is_empty() {
            self.active.store(false, Ordering::Relaxed);
        }
    }

    /// Opens (or keeps open) the trace of `text`.
    pub fn open(&self, text: &str) -> Result<Arc<Trace>, String> {
        let selector = Selector::parse(text)?;
        let text = text.trim().to_string();
        self.expire();
        let mut v = self.traces.write().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = v.iter().find(|t| t.text == text) {
            t.asked.store(self.now(), Ordering::Relaxed);
            return Ok(t.clone());
        }
        if v.len() >= MAX_TRACES {
            v.remove(0);
        }
        let t = Arc::new(Trace {
            text,
            selector,
            since: SystemTime::now(),
            asked: AtomicU64::new(self.now()),
            fates: Mutex::new(BTreeMap::new()),
            overflow: AtomicBool::new(false),
        });
        v.push(t.clone());
        self.active.store(true, Ordering::Relaxed);
        Ok(t)
    }

    /// The open traces that follow `labels` (empty unless [`Tracer::active`]).
    pub fn following(&self, labels: &Labels) -> Vec<Arc<Trace>> {
        if !self.active() {
            return Vec::new();
        }
        let v = self.traces.read().unwrap_or_else(|p| p.into_inner());
        v.iter().filter(|t| self.live(t) && t.selector.matches(labels)).cloned().collect()
    }

    /// Whether some trace may follow a series named `name` (a cheap test
    /// before labels are built).
    pub fn may_follow(&self, name: &str) -> bool {
        if !self.active() {
            return false;
        }
        let v = self.traces.read().unwrap_or_else(|p| p.into_inner());
        v.iter().any(|t| self.live(t) && t.selector.name.as_deref().is_none_or(|n| n == name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(p: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(p.iter().copied())
    }

    #[test]
    fn selectors_match_as_promql_does() {
        let s = Selector::parse(r#"vllm:num_requests_running{model_name="m", instance=~"a:.*",job!="x"}"#).unwrap();
        assert_eq!(s.name.as_deref(), Some("vllm:num_requests_running"));
        let yes =
            l(&[("__name__", "vllm:num_requests_running"), ("model_name", "m"), ("instance", "a:1"), ("job", "v")]);
        assert!(s.matches(&yes));
        assert!(!s.matches(&yes.with("instance", "b:1")), "regexes are anchored");
        assert!(!s.matches(&yes.with("job", "x")));
        assert!(!s.matches(&yes.with("__name__", "other")));
        let by_label = Selector::parse(r#"{__name__="up", job!~"a|b"}"#).unwrap();
        assert_eq!(by_label.name.as_deref(), Some("up"));
        assert!(by_label.matches(&l(&[("__name__", "up"), ("job", "c")])));
        assert!(!by_label.matches(&l(&[("__name__", "up"), ("job", "a")])));
        // A missing label is the empty string, as in PromQL.
        assert!(Selector::parse(r#"up{absent=""}"#).unwrap().matches(&l(&[("__name__", "up")])));
        for bad in
            ["", "{}", "{job=~\".*\"}", "up{job=x}", "up{job=\"x\"", "1up", "up{job=\"x\" a=\"b\"}", "up{job~\"x\"}"]
        {
            assert!(Selector::parse(bad).is_err(), "{bad:?} is refused");
        }
    }

    #[test]
    fn a_trace_follows_scrape_and_export_of_the_same_series() {
        let t = Tracer::default();
        assert!(!t.active() && !t.may_follow("up"));
        let tr = t.open("up").unwrap();
        assert!(t.active() && t.may_follow("up") && !t.may_follow("down"));
        let scraped = l(&[("__name__", "up"), ("job", "j")]);
        let out = scraped.with("team", "a");
        tr.scraped("j/h:1", &scraped, Some(&out), ScrapeFate::Kept, 1.0);
        tr.exported("rw", &out, ExportState::Queued, "", 1);
        tr.exported("rw", &out, ExportState::Held, "paused: forbidden (HTTP 403)", 1);
        tr.exported("rw", &out, ExportState::Queued, "", 1);
        let f = tr.fates();
        assert_eq!(f.len(), 1, "{f:?}");
        let e = &f[0].exporters["rw"];
        assert_eq!(e.state, ExportState::Held, "a later queued does not hide why it is held");
        tr.exported("rw", &out, ExportState::Delivered, "HTTP 204", 1);
        assert_eq!(tr.fates()[0].exporters["rw"].state, ExportState::Delivered);
        // The same trace is reopened, not duplicated.
        assert!(Arc::ptr_eq(&tr, &t.open(" up ").unwrap()));
        // Nobody asked for TRACE_TTL: closed, and the hot path stops looking.
        let Some(epoch) = Instant::now().checked_sub(TRACE_TTL + Duration::from_secs(1)) else { return };
        let old = Tracer { epoch, ..Tracer::default() };
        let o = old.open("up").unwrap();
        o.asked.store(0, Ordering::Relaxed);
        assert!(old.following(&scraped).is_empty() && !old.may_follow("up"));
        old.expire();
        assert!(!old.active());
    }
}
