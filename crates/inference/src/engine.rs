//! The derivation engine: keeps each target's input samples for the window,
//! evaluates the derived series of one target at one time, and tracks what it
//! emitted so that series whose inputs vanished get a staleness marker.

use crate::schema::{self, Families, Input, Schema, Source};
use crate::window::{Skip, histogram_quantile, in_window, increase};
use infertel_model::{Label, Labels, METRIC_NAME, Sample, Series, is_stale_nan};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::LazyLock;

/// How GPUs are matched to the vLLM instances they serve (`join`).
#[derive(Clone, Debug, PartialEq)]
pub enum Join {
    /// Every GPU this agent scrapes serves every vLLM instance it scrapes.
    Node,
    /// dcgm-exporter's `pod`/`namespace` labels equal the vLLM target's.
    Pod,
    /// vLLM `instance` → GPU UUIDs.
    Map(BTreeMap<String, Vec<String>>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Objectives {
    /// Seconds.
    pub ttft_p95: f64,
    /// Seconds.
    pub itl_p95: f64,
    /// Mean queue time per request, seconds.
    pub queue_time_max: f64,
    pub error_abort_ratio: f64,
}

impl Default for Objectives {
    fn default() -> Self {
        Objectives { ttft_p95: 0.3, itl_p95: 0.05, queue_time_max: 0.001, error_abort_ratio: 0.005 }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Scale {
    pub kv_cache_usage: f64,
    pub waiting_sustained_ms: i64,
}

impl Default for Scale {
    fn default() -> Self {
        Scale { kv_cache_usage: 0.6, waiting_sustained_ms: 120_000 }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct MemoryBound {
    pub dram_active_min: f64,
    pub tensor_active_max: f64,
}

impl Default for MemoryBound {
    fn default() -> Self {
        MemoryBound { dram_active_min: 0.5, tensor_active_max: 0.3 }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub window_ms: i64,
    /// See [`Engine::due`]; the processor's `evaluation_interval`.
    pub evaluation_interval_ms: i64,
    pub join: Join,
    pub objectives: Objectives,
    pub scale: Scale,
    pub memory_bound: MemoryBound,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            window_ms: 60_000,
            evaluation_interval_ms: 15_000,
            join: Join::Node,
            objectives: Objectives::default(),
            scale: Scale::default(),
            memory_bound: MemoryBound::default(),
        }
    }
}

/// A scraped target.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetKey {
    pub job: String,
    pub instance: String,
}

impl std::fmt::Display for TargetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.job, self.instance)
    }
}

pub type LabelPairs = Vec<(String, String)>;

/// One derived value.
#[derive(Clone, Debug, PartialEq)]
pub struct Derived {
    pub name: &'static str,
    /// Sorted by name; no `__name__`.
    pub labels: LabelPairs,
    pub value: f64,
}

impl Derived {
    pub fn label(&self, n: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str())
    }
}

/// A target's schema, first seen or changed.
#[derive(Clone, Debug, PartialEq)]
pub struct SchemaEvent {
    pub target: TargetKey,
    pub schema: Schema,
    pub previous: Option<Schema>,
    /// (expected family or families, the derived series that stays empty).
    pub missing: Vec<(String, &'static str)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    pub at_ms: i64,
    pub derived: Vec<Derived>,
    /// Series emitted by the previous evaluation of this target and not now.
    pub stale: Vec<(&'static str, LabelPairs)>,
    pub skipped: Vec<(&'static str, Skip)>,
    pub schema_event: Option<SchemaEvent>,
}

/// Input samples of one wire name, by label set, oldest first.
///
/// Keyed by the identity of the label set: the receiver hands out the same
/// interned label set on every scrape, so finding a series costs a pointer
/// hash instead of hashing every label. The entry holds a clone, so the
/// address cannot be reused by another label set while it is a key. A label
/// set equal in content but newly allocated (the receiver re-interned it) is
/// re-keyed when first seen, so one series never has two entries.
#[derive(Default)]
struct ByLabels(FxHashMap<usize, (Labels, Vec<Sample>)>);

impl ByLabels {
    fn samples_mut(&mut self, l: &Labels) -> &mut Vec<Sample> {
        let addr = l.addr();
        let moved = if self.0.contains_key(&addr) {
            None
        } else {
            let old = self.0.iter().find(|(_, (k, _))| k == l).map(|(a, _)| *a);
            Some(old.and_then(|a| self.0.remove(&a)).map(|(_, v)| v).unwrap_or_default())
        };
        &mut self.0.entry(addr).or_insert_with(|| (l.clone(), moved.unwrap_or_default())).1
    }

    fn values(&self) -> impl Iterator<Item = &Vec<Sample>> {
        self.0.values().map(|(_, v)| v)
    }

    fn retain(&mut self, mut keep: impl FnMut(&mut Vec<Sample>) -> bool) {
        self.0.retain(|_, (_, v)| keep(v));
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a> IntoIterator for &'a ByLabels {
    type Item = (&'a Labels, &'a Vec<Sample>);
    type IntoIter = std::iter::Map<
        std::collections::hash_map::Values<'a, usize, (Labels, Vec<Sample>)>,
        fn(&'a (Labels, Vec<Sample>)) -> (&'a Labels, &'a Vec<Sample>),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.values().map(|(l, v)| (l, v))
    }
}

struct TargetState {
    /// Wire name (interned, see [`wire`]) → label set → samples, oldest first.
    series: FxHashMap<WireName, ByLabels>,
    families: Families,
    engine_label: bool,
    /// What `families` and `engine_label` imply, kept in step with them.
    detected: Option<Schema>,
    /// The schema as of the last evaluation (a change is an event).
    schema: Option<Schema>,
    newest_ms: i64,
    /// Time of the last evaluation (`i64::MIN`: never).
    evaluated_ms: i64,
    /// The series of the last scrape, in order (see `ingest`).
    order: Vec<Seen>,
}

impl Default for TargetState {
    fn default() -> Self {
        TargetState {
            series: FxHashMap::default(),
            families: Families::default(),
            engine_label: false,
            detected: None,
            schema: None,
            newest_ms: i64::MIN,
            evaluated_ms: i64::MIN,
            order: Vec::new(),
        }
    }
}

impl TargetState {
    /// Drops samples older than their cutoff (`long` for the inputs kept
    /// longer than the window, see [`Wire::long`]), and series left without any.
    fn trim(&mut self, short: i64, long: i64) {
        for (name, by_labels) in self.series.iter_mut() {
            let cutoff = if wire(name).is_some_and(|w| w.long) { long } else { short };
            by_labels.retain(|v| {
                let keep_from = v.partition_point(|x| x.timestamp_ms < cutoff);
                v.drain(..keep_from);
                !v.is_empty()
            });
        }
        self.series.retain(|_, m| !m.is_empty());
    }
}

/// A wire name interned by [`wire`], hashed and compared by address: every
/// key and every lookup comes from that one table, so equal names are the
/// same `&'static str`.
#[derive(Clone, Copy, Debug)]
struct WireName(&'static str);

impl PartialEq for WireName {
    fn eq(&self, o: &Self) -> bool {
        std::ptr::eq(self.0, o.0)
    }
}
impl Eq for WireName {}
impl std::hash::Hash for WireName {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (self.0.as_ptr() as usize).hash(h)
    }
}
impl std::ops::Deref for WireName {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

/// What the engine knows of a wire name it tracks: the name interned, the
/// family bit it sets (see [`Families`]) and whether its samples are kept.
#[derive(Clone, Copy)]
struct Wire {
    name: &'static str,
    family: u8,
    kept: bool,
    /// Kept for `scale.waiting_sustained` rather than the window (the queue
    /// gauge, whose sustained-wait check looks further back).
    long: bool,
}

/// Looks a wire name up among every input and era-marker family with each
/// histogram/summary suffix; `None` for the names the engine ignores (most
/// of a scrape), at the cost of one hash of the name.
fn wire(name: &str) -> Option<Wire> {
    static MAP: LazyLock<FxHashMap<&'static str, Wire>> = LazyLock::new(|| {
        let mut map = FxHashMap::default();
        for (i, family) in schema::relevant_families().iter().enumerate() {
            let kept = schema::ALL_INPUTS.iter().any(|x| x.names.contains(family));
            let long = schema::WAITING.names.contains(family);
            for suffix in ["", "_bucket", "_count", "_sum"] {
                // Built once per process: a few hundred bytes, leaked on purpose.
                let name: &'static str =
                    if suffix.is_empty() { family } else { Box::leak(format!("{family}{suffix}").into_boxed_str()) };
                map.entry(name).or_insert(Wire { name, family: i as u8, kept, long });
            }
        }
        map
    });
    MAP.get(name).copied()
}

/// `job`, `instance` and the metric name of a label set, found in one pass
/// (labels are few; comparing lengths first skips most of them).
fn target_and_name(l: &Labels) -> (Option<&str>, Option<&str>, Option<&str>) {
    let (mut job, mut instance, mut name) = (None, None, None);
    for Label { name: n, value } in l.iter() {
        match n.len() {
            3 if &**n == "job" => job = Some(&**value),
            8 if &**n == "instance" => instance = Some(&**value),
            8 if &**n == METRIC_NAME => name = Some(&**value),
            _ => {}
        }
    }
    (job, instance, name)
}

/// What ingest needs to know of a series besides its samples, all of it
/// implied by the label set, so it is worked out once per series and
/// remembered for the target's next scrape (see [`Seen`]).
#[derive(Clone, Copy)]
struct SeriesInfo {
    wire: Option<Wire>,
    /// An `infertel_*` series (derived; never an input).
    derived: bool,
    /// A `_created` series (a timestamp, not a value of the family).
    created: bool,
    vllm: bool,
    dcgm: bool,
    /// A `vllm:` series with an `engine` label.
    engine: bool,
}

impl SeriesInfo {
    fn of(name: &str, l: &Labels) -> Self {
        let vllm = name.starts_with("vllm:");
        SeriesInfo {
            wire: wire(name),
            derived: name.starts_with("infertel_"),
            created: name.ends_with("_created"),
            vllm,
            dcgm: name.starts_with("DCGM_FI_"),
            engine: vllm && l.get("engine").is_some(),
        }
    }
}

/// Leaves in-place mode (see `ingest`): the series matched so far move to a
/// new order, which the rest of the batch is appended to.
fn diverge<'v>(old: &mut [Seen], pos: usize, new: &'v mut Option<Vec<Seen>>) -> &'v mut Vec<Seen> {
    new.get_or_insert_with(|| {
        let mut v = Vec::with_capacity(old.len() + 8);
        for e in &mut old[..pos] {
            v.push(Seen { labels: e.labels.take(), info: e.info });
        }
        v
    })
}

/// One series of a target's last scrape, in body order. The label set is
/// held (so its address stays its identity) until the next scrape takes it.
struct Seen {
    labels: Option<Labels>,
    info: SeriesInfo,
}

// Both sorted bytewise (see `matches`).
const VLLM_GROUP: &[&str; 6] = &["engine", "instance", "job", "model_name", "namespace", "pod"];
const GPU_GROUP: &[&str] = &["GPU_I_ID", "Hostname", "UUID", "gpu", "hostname", "instance", "job"];

fn restrict(l: &Labels, names: &[&str]) -> LabelPairs {
    names.iter().filter_map(|n| l.get(n).map(|v| (n.to_string(), v.to_string()))).collect()
}

/// The values of `names` (sorted bytewise) in `l`, in one merge pass; what
/// [`restrict`] keeps, without copying.
fn project<'l, const N: usize>(l: &'l Labels, names: &[&str; N]) -> [Option<&'l str>; N] {
    let mut out = [None; N];
    let mut li = l.as_slice();
    for (n, o) in names.iter().zip(out.iter_mut()) {
        while let Some((x, rest)) = li.split_first()
            && x.name.as_bytes() < n.as_bytes()
        {
            li = rest;
        }
        *o = li.first().filter(|x| &*x.name == *n).map(|x| &*x.value);
    }
    out
}

fn with(mut base: LabelPairs, extra: &[(&str, &str)]) -> LabelPairs {
    for (k, v) in extra {
        base.push((k.to_string(), v.to_string()));
    }
    base.sort();
    base
}

/// True when `l` and `group` agree on every label of `names` (present in
/// both with the same value, or absent from both). `names` is sorted
/// bytewise, like `l` and `group`, so this is one merge pass over each; it
/// runs for every input series of every evaluation.
fn matches(l: &Labels, group: &LabelPairs, names: &[&str]) -> bool {
    let (mut li, mut gi) = (l.as_slice(), group.as_slice());
    for n in names {
        while let Some((x, rest)) = li.split_first()
            && x.name.as_bytes() < n.as_bytes()
        {
            li = rest;
        }
        while let Some(((k, _), rest)) = gi.split_first()
            && k.as_bytes() < n.as_bytes()
        {
            gi = rest;
        }
        let lv = li.first().filter(|x| &*x.name == *n).map(|x| &*x.value);
        let gv = gi.first().filter(|(k, _)| k == n).map(|(_, v)| v.as_str());
        if lv != gv {
            return false;
        }
    }
    true
}

/// Per-target view at one time.
struct View<'a> {
    st: &'a TargetState,
    t: i64,
    w: i64,
}

impl<'a> View<'a> {
    /// The first candidate name this target exposes (live or not).
    /// Prefers a name with live samples in the window (after a version
    /// switch the old name goes stale and the new one takes over).
    fn pick(&self, input: &Input, suffix: &str) -> Option<&'static str> {
        let mut first = None;
        for n in input.names {
            let Some(w) = wire_with_suffix(n, suffix) else { continue };
            let Some(m) = self.st.series.get(&WireName(w)) else { continue };
            if m.values().any(|s| in_window(s, self.t, self.w).is_ok()) {
                return Some(w);
            }
            first = first.or(Some(w));
        }
        first
    }

    fn select(
        &self,
        input: &Input,
        suffix: &str,
        keep: &dyn Fn(&Labels) -> bool,
    ) -> Result<Vec<(&'a Labels, &'a [Sample])>, Skip> {
        let name = self.pick(input, suffix).ok_or(Skip::MissingInput)?;
        let mut out = Vec::new();
        let mut err = Skip::MissingInput;
        for (l, samples) in &self.st.series[&WireName(name)] {
            if !keep(l) {
                continue;
            }
            match in_window(samples, self.t, self.w) {
                Ok(s) => out.push((l, s)),
                Err(e) => err = err.max_pri(e),
            }
        }
        if out.is_empty() { Err(err) } else { Ok(out) }
    }

    /// Sum of per-series rates.
    fn rate(&self, input: &Input, suffix: &str, keep: &dyn Fn(&Labels) -> bool) -> Result<f64, Skip> {
        let mut sum = 0.0;
        for (_, s) in self.select(input, suffix, keep)? {
            sum += increase(s)?.rate();
        }
        Ok(sum)
    }

    fn quantile(&self, input: &Input, q: f64, keep: &dyn Fn(&Labels) -> bool) -> Result<f64, Skip> {
        let mut buckets = Vec::new();
        for (l, s) in self.select(input, "_bucket", keep)? {
            let Some(le) = l.get("le").and_then(parse_le) else {
                continue;
            };
            buckets.push((le, increase(s)?.rate()));
        }
        histogram_quantile(q, &buckets).ok_or(Skip::ZeroDenominator)
    }

    /// Gauge: (last, mean, max, min) over the window, summed over series for `last`.
    fn gauge(&self, input: &Input, keep: &dyn Fn(&Labels) -> bool) -> Result<GaugeStats, Skip> {
        let sel = self.select(input, "", keep)?;
        let mut g = GaugeStats { last: 0.0, mean: 0.0, max: f64::NEG_INFINITY, min: f64::INFINITY, first_ms: i64::MAX };
        for (_, s) in &sel {
            g.last += s[s.len() - 1].value;
            g.mean += s.iter().map(|x| x.value).sum::<f64>() / s.len() as f64;
            for x in s.iter() {
                g.max = g.max.max(x.value);
                g.min = g.min.min(x.value);
            }
            g.first_ms = g.first_ms.min(s[0].timestamp_ms);
        }
        Ok(g)
    }
}

#[derive(Clone, Copy, Debug)]
struct GaugeStats {
    last: f64,
    mean: f64,
    max: f64,
    min: f64,
    first_ms: i64,
}

trait MaxPri {
    fn max_pri(self, o: Self) -> Self;
}
impl MaxPri for Skip {
    /// Which reason to report when series disagree: stale beats first window
    /// beats missing.
    fn max_pri(self, o: Skip) -> Skip {
        let rank = |s: Skip| match s {
            Skip::MissingInput => 0,
            Skip::FirstWindow => 1,
            Skip::ZeroDenominator => 2,
            Skip::StaleInput => 3,
        };
        if rank(o) > rank(self) { o } else { self }
    }
}

fn source_of(st: &TargetState) -> Option<Source> {
    st.detected.map(|s| s.source())
}

/// `name` + `suffix` as the interned wire name, when the engine keeps it.
fn wire_with_suffix(name: &str, suffix: &str) -> Option<&'static str> {
    if suffix.is_empty() {
        return wire(name).map(|w| w.name);
    }
    let mut buf = String::with_capacity(name.len() + suffix.len());
    buf.push_str(name);
    buf.push_str(suffix);
    wire(&buf).map(|w| w.name)
}

fn parse_le(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "+inf" => Some(f64::INFINITY),
        _ => s.parse().ok(),
    }
}

fn ratio(num: Result<f64, Skip>, den: Result<f64, Skip>) -> Result<f64, Skip> {
    let (n, d) = (num?, den?);
    if d == 0.0 || !d.is_finite() {
        return Err(Skip::ZeroDenominator);
    }
    Ok(n / d)
}

pub struct Engine {
    pub settings: Settings,
    targets: BTreeMap<TargetKey, TargetState>,
    emitted: HashMap<TargetKey, BTreeSet<(&'static str, LabelPairs)>>,
}

/// Collects derived values and skip reasons during one evaluation.
#[derive(Default)]
struct Out {
    derived: Vec<Derived>,
    skipped: Vec<(&'static str, Skip)>,
}

impl Out {
    fn put(&mut self, name: &'static str, labels: LabelPairs, v: Result<f64, Skip>) -> Option<f64> {
        match v {
            Ok(x) if x.is_finite() => {
                self.derived.push(Derived { name, labels, value: x });
                Some(x)
            }
            Ok(_) => {
                self.skipped.push((name, Skip::ZeroDenominator));
                None
            }
            Err(e) => {
                self.skipped.push((name, e));
                None
            }
        }
    }
}

impl Engine {
    pub fn new(settings: Settings) -> Self {
        Engine { settings, targets: BTreeMap::new(), emitted: HashMap::new() }
    }

    /// How long the samples of the longest-kept inputs are kept, and so how
    /// long a target that stopped sending is remembered.
    fn retention_ms(&self) -> i64 {
        self.settings.window_ms.max(self.settings.scale.waiting_sustained_ms) + 60_000
    }

    /// How long every other input is kept: the window plus a margin (at a 1 s
    /// interval, a third less memory than keeping all for the longest).
    fn short_retention_ms(&self) -> i64 {
        self.settings.window_ms + 60_000
    }

    /// Takes a scrape's series (any number of targets); returns each target
    /// seen with the newest timestamp it brought.
    pub fn ingest(&mut self, series: &[Series]) -> BTreeMap<TargetKey, i64> {
        // This runs on every series of every scrape, so it stays on borrowed
        // strings and touches a series only as far as needed: most names are
        // not inputs and cost one hash lookup. A batch is usually one scrape
        // of one target, so the target is resolved once per run of series,
        // and its state is looked up once per batch, not per series.
        struct Acc<'a> {
            job: &'a str,
            instance: &'a str,
            newest: i64,
            families: Families,
            engine: bool,
            any_live: bool,
            kept: Vec<(Wire, &'a Series)>,
            /// The target's series as of its last scrape, and how far this
            /// batch has matched them.
            old: Vec<Seen>,
            pos: usize,
            /// `None` while this batch repeats the last scrape in order: then
            /// `old[..pos]` already is the new order and nothing is copied.
            new: Option<Vec<Seen>>,
        }
        let mut accs: Vec<Acc<'_>> = Vec::new();
        let mut cur: Option<usize> = None;
        for s in series {
            // Fast path: the series at this position of the target's last
            // scrape, by identity of the interned label set (which implies
            // the same target and name). One series gone is skipped over;
            // a new one takes the slow path and the next ones match again.
            let hit = cur.and_then(|i| {
                let a = &mut accs[i];
                let same = |k: usize| {
                    a.old.get(k).and_then(|x| x.labels.as_ref()).is_some_and(|l| Labels::ptr_eq(l, &s.labels))
                };
                let k = if same(a.pos) {
                    a.pos
                } else if same(a.pos + 1) {
                    a.pos + 1
                } else {
                    return None;
                };
                let info = a.old[k].info;
                if a.new.is_none() && k == a.pos {
                    a.pos += 1;
                } else {
                    let labels = a.old[k].labels.take();
                    diverge(&mut a.old, a.pos, &mut a.new).push(Seen { labels, info });
                    a.pos = k + 1;
                }
                Some((i, info))
            });
            let (i, info) = match hit {
                Some(x) => x,
                None => {
                    let (Some(job), Some(instance), name) = target_and_name(&s.labels) else {
                        continue;
                    };
                    let info = SeriesInfo::of(name.unwrap_or(""), &s.labels);
                    let i = match cur {
                        Some(i) if accs[i].job == job && accs[i].instance == instance => i,
                        _ => {
                            let i =
                                accs.iter().position(|a| a.job == job && a.instance == instance).unwrap_or_else(|| {
                                    let key = TargetKey { job: job.to_string(), instance: instance.to_string() };
                                    let old = self
                                        .targets
                                        .get_mut(&key)
                                        .map(|st| std::mem::take(&mut st.order))
                                        .unwrap_or_default();
                                    accs.push(Acc {
                                        job,
                                        instance,
                                        newest: i64::MIN,
                                        families: Families::default(),
                                        engine: false,
                                        any_live: false,
                                        kept: Vec::new(),
                                        new: None,
                                        old,
                                        pos: 0,
                                    });
                                    accs.len() - 1
                                });
                            cur = Some(i);
                            i
                        }
                    };
                    // The first series of a batch comes this way (no target
                    // yet): it may still be the last scrape's first series.
                    let a = &mut accs[i];
                    let first_again = a.new.is_none()
                        && a.old
                            .get(a.pos)
                            .and_then(|x| x.labels.as_ref())
                            .is_some_and(|l| Labels::ptr_eq(l, &s.labels));
                    if first_again {
                        a.pos += 1;
                    } else {
                        diverge(&mut a.old, a.pos, &mut a.new).push(Seen { labels: Some(s.labels.clone()), info });
                    }
                    (i, info)
                }
            };
            if info.derived {
                continue;
            }
            let acc = &mut accs[i];
            let mut live = false;
            for x in &s.samples {
                acc.newest = acc.newest.max(x.timestamp_ms);
                live |= !is_stale_nan(x.value);
            }
            if live && !info.created {
                acc.any_live = true;
                acc.families.any_vllm |= info.vllm;
                acc.families.any_dcgm |= info.dcgm;
                acc.engine |= info.engine;
                if let Some(w) = info.wire {
                    acc.families.insert_index(w.family);
                }
            }
            if let Some(w) = info.wire
                && w.kept
            {
                acc.kept.push((w, s));
            }
        }
        let retention = self.retention_ms();
        let short_retention = self.short_retention_ms();
        let mut touched: BTreeMap<TargetKey, i64> = BTreeMap::new();
        for a in accs {
            let key = TargetKey { job: a.job.to_string(), instance: a.instance.to_string() };
            if a.any_live || !a.kept.is_empty() {
                let st = self.targets.entry(key.clone()).or_default();
                st.order = match a.new {
                    Some(v) => v,
                    None => {
                        let mut o = a.old;
                        o.truncate(a.pos);
                        o
                    }
                };
                if a.any_live {
                    st.families = a.families;
                    st.engine_label = a.engine;
                    st.detected = schema::detect(&st.families, st.engine_label);
                }
                st.newest_ms = st.newest_ms.max(a.newest);
                let long_cutoff = st.newest_ms.saturating_sub(retention);
                let short_cutoff = st.newest_ms.saturating_sub(short_retention);
                for (w, s) in a.kept {
                    let cutoff = if w.long { long_cutoff } else { short_cutoff };
                    let by_labels = st.series.entry(WireName(w.name)).or_default();
                    let v = by_labels.samples_mut(&s.labels);
                    for x in &s.samples {
                        if v.last().is_none_or(|l| x.timestamp_ms > l.timestamp_ms) {
                            v.push(*x);
                        }
                    }
                    // Samples older than the retention go in chunks, not one
                    // per scrape: shifting the window's samples down on every
                    // scrape would cost more than the rest of this function.
                    // Evaluation trims exactly first (see `evaluate`).
                    if v.first().is_some_and(|x| x.timestamp_ms < cutoff) {
                        let expired = v.partition_point(|x| x.timestamp_ms < cutoff);
                        if expired >= 16 || expired * 4 >= v.len() {
                            v.drain(..expired);
                        }
                    }
                }
            } else if let Some(st) = self.targets.get_mut(&key) {
                st.newest_ms = st.newest_ms.max(a.newest);
            }
            touched.insert(key, a.newest);
        }
        // Targets that vanished (pods come and go) are forgotten once no
        // sample of theirs is within the retention of the newest one seen,
        // with what was emitted for them: the state does not grow with
        // target churn.
        if let Some(newest) = touched.values().copied().max() {
            let cutoff = newest.saturating_sub(retention);
            if self.targets.values().any(|st| st.newest_ms < cutoff) {
                let gone: Vec<TargetKey> = self
                    .targets
                    .iter()
                    .filter(|(k, st)| !touched.contains_key(*k) && st.newest_ms < cutoff)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in gone {
                    self.targets.remove(&k);
                    self.emitted.remove(&k);
                }
            }
        }
        touched
    }

    /// True when target `key`, scraped at `t`, is due for evaluation under
    /// `interval_ms`: the first time, and whenever `t` enters a new multiple
    /// of the interval since its last evaluation (0: every scrape). Derived
    /// series are windowed aggregates, so evaluating them on every 1 s scrape
    /// would repeat nearly the same numbers at a cost in CPU; aligning to the
    /// interval's grid keeps a steady cadence whatever the scrape jitter.
    pub fn due(&self, key: &TargetKey, t: i64, interval_ms: i64) -> bool {
        let Some(st) = self.targets.get(key) else { return true };
        if interval_ms <= 0 || st.evaluated_ms == i64::MIN {
            return true;
        }
        t.div_euclid(interval_ms) != st.evaluated_ms.div_euclid(interval_ms)
    }

    /// Number of targets whose state is kept.
    pub fn tracked_targets(&self) -> usize {
        self.targets.len()
    }

    pub fn targets(&self) -> impl Iterator<Item = &TargetKey> {
        self.targets.keys()
    }

    pub fn schema(&self, key: &TargetKey) -> Option<Schema> {
        self.targets.get(key).and_then(|s| s.schema)
    }

    /// Evaluates the derived series owned by `key` at `t` (the target's scrape time).
    pub fn evaluate(&mut self, key: &TargetKey, t: i64) -> Evaluation {
        let mut out = Out::default();
        let mut event = None;
        let (retention, short) = (self.retention_ms(), self.short_retention_ms());
        if let Some(st) = self.targets.get_mut(key) {
            st.trim(st.newest_ms.saturating_sub(short), st.newest_ms.saturating_sub(retention));
            st.evaluated_ms = st.evaluated_ms.max(t);
        }
        if let Some(st) = self.targets.get(key) {
            let detected = st.detected;
            if let Some(s) = detected
                && st.schema != Some(s)
            {
                let missing = schema::expectations(s)
                    .into_iter()
                    .filter(|(i, _)| !i.names.iter().any(|n| st.families.contains(n)))
                    .map(|(i, d)| (i.names.join(" or "), d))
                    .collect();
                event = Some(SchemaEvent { target: key.clone(), schema: s, previous: st.schema, missing });
            }
            let view = View { st, t, w: self.settings.window_ms };
            let live = st
                .series
                .values()
                .flat_map(|m| m.values())
                .any(|v| v.iter().rev().find(|x| x.timestamp_ms <= t).is_some_and(|x| !is_stale_nan(x.value)));
            if live && let Some(s) = detected {
                let labels = vec![
                    ("instance".into(), key.instance.clone()),
                    ("job".into(), key.job.clone()),
                    ("schema".into(), s.as_str().to_string()),
                ];
                out.derived.push(Derived { name: "infertel_target_schema_info", labels, value: 1.0 });
                match s.source() {
                    Source::Vllm => self.eval_vllm(&view, key, s, &mut out),
                    Source::Dcgm => self.eval_dcgm(&view, &mut out),
                    Source::Other => {}
                }
            }
        }
        if let Some(e) = &event
            && let Some(st) = self.targets.get_mut(key)
        {
            st.schema = Some(e.schema);
        }
        let now: BTreeSet<(&'static str, LabelPairs)> =
            out.derived.iter().map(|d| (d.name, d.labels.clone())).collect();
        let prev = self.emitted.insert(key.clone(), now.clone()).unwrap_or_default();
        let stale = prev.difference(&now).cloned().collect();
        Evaluation { at_ms: t, derived: out.derived, stale, skipped: out.skipped, schema_event: event }
    }

    fn eval_vllm(&self, v: &View, key: &TargetKey, schema: Schema, out: &mut Out) {
        // Engine groups: the identifying labels of every live vllm: series.
        // Every live vllm: series is looked at, so the group of each is
        // compared as borrowed values against the few groups found so far;
        // only a new group is copied out.
        let mut found: Vec<[Option<&str>; 6]> = Vec::new();
        for (name, m) in &v.st.series {
            if !name.starts_with("vllm:") {
                continue;
            }
            for (l, s) in m {
                if l.get("model_name").is_none() {
                    continue;
                }
                let key = project(l, VLLM_GROUP);
                if !found.contains(&key) && in_window(s, v.t, v.w).is_ok() {
                    found.push(key);
                }
            }
        }
        let groups: BTreeSet<LabelPairs> = found
            .into_iter()
            .map(|k| {
                VLLM_GROUP
                    .iter()
                    .zip(k)
                    .filter_map(|(n, v)| v.map(|v| (n.to_string(), v.to_string())))
                    .collect::<LabelPairs>()
            })
            .collect();
        for g in &groups {
            let gk = g.clone();
            let keep = move |l: &Labels| matches(l, &gk, VLLM_GROUP);
            let keep: &dyn Fn(&Labels) -> bool = &keep;
            let lab = |extra: &[(&str, &str)]| with(g.clone(), extra);
            // Prefix cache.
            if schema == Schema::VllmV0 {
                let r = v
                    .gauge(&schema::PREFIX_HIT_RATE_V0, keep)
                    .and_then(|g| if g.last < 0.0 { Err(Skip::ZeroDenominator) } else { Ok(g.last) });
                out.put("infertel_prefix_cache_hit_ratio", lab(&[]), r);
            } else {
                out.put(
                    "infertel_prefix_cache_hit_ratio",
                    lab(&[]),
                    ratio(v.rate(&schema::PREFIX_HITS, "", keep), v.rate(&schema::PREFIX_QUERIES, "", keep)),
                );
            }
            let prompt = v.rate(&schema::PROMPT_TOKENS, "", keep);
            let generation = v.rate(&schema::GENERATION_TOKENS, "", keep);
            let cached = match v.rate(&schema::PROMPT_TOKENS_CACHED, "", keep) {
                Err(Skip::MissingInput | Skip::StaleInput)
                    if !schema.prefix_cache_in_blocks() && schema != Schema::VllmV0 =>
                {
                    v.rate(&schema::PREFIX_HITS, "", keep)
                }
                r => r,
            };
            out.put("infertel_prompt_tokens_cached_ratio", lab(&[]), ratio(cached, prompt));
            out.put("infertel_generation_tokens_per_second", lab(&[]), generation);
            out.put("infertel_prompt_tokens_per_second", lab(&[]), prompt);
            // Phases, per finished request.
            let requests = v.rate(&schema::E2E, "_count", keep);
            let mut phase = BTreeMap::new();
            for (p, input) in [
                ("queue", &schema::QUEUE),
                ("prefill", &schema::PREFILL),
                ("decode", &schema::DECODE),
                ("inference", &schema::INFERENCE),
                ("e2e", &schema::E2E),
            ] {
                let r = out.put(
                    "infertel_request_phase_seconds",
                    lab(&[("phase", p)]),
                    ratio(v.rate(input, "_sum", keep), requests),
                );
                phase.insert(p, r);
            }
            out.put(
                "infertel_decode_share",
                lab(&[]),
                ratio(v.rate(&schema::DECODE, "_sum", keep), v.rate(&schema::E2E, "_sum", keep)),
            );
            let mut q95 = BTreeMap::new();
            for (name, input) in [
                ("infertel_time_to_first_token_seconds", &schema::TTFT),
                ("infertel_inter_token_latency_seconds", &schema::ITL),
                ("infertel_e2e_latency_seconds", &schema::E2E),
            ] {
                for (q, qs) in [(0.5, "0.5"), (0.95, "0.95"), (0.99, "0.99")] {
                    let r = out.put(name, lab(&[("quantile", qs)]), v.quantile(input, q, keep));
                    if q == 0.95 {
                        q95.insert(name, r);
                    }
                }
            }
            out.put(
                "infertel_tokens_per_iteration",
                lab(&[]),
                ratio(
                    v.rate(&schema::ITERATION_TOKENS, "_sum", keep),
                    v.rate(&schema::ITERATION_TOKENS, "_count", keep),
                ),
            );
            let shape = match ratio(
                v.rate(&schema::REQUEST_GENERATION_TOKENS, "_sum", keep),
                v.rate(&schema::REQUEST_PROMPT_TOKENS, "_sum", keep),
            ) {
                Err(Skip::MissingInput) => ratio(generation, prompt),
                r => r,
            };
            out.put("infertel_generation_to_prompt_ratio", lab(&[]), shape);
            // Outcomes.
            let mut error_abort = Err(Skip::MissingInput);
            match v.select(&schema::SUCCESS, "", keep) {
                Err(e) => {
                    out.skipped.push(("infertel_finished_ratio", e));
                    out.skipped.push(("infertel_error_abort_ratio", e));
                }
                Ok(sel) => {
                    let mut by_reason: BTreeMap<String, f64> = BTreeMap::new();
                    let mut failed = None;
                    for (l, s) in sel {
                        match increase(s) {
                            Ok(i) => {
                                *by_reason.entry(l.get("finished_reason").unwrap_or("").to_string()).or_default() +=
                                    i.rate()
                            }
                            Err(e) => failed = Some(e),
                        }
                    }
                    let total: f64 = by_reason.values().sum();
                    let r = match failed {
                        Some(e) => Err(e),
                        None if total == 0.0 => Err(Skip::ZeroDenominator),
                        None => Ok(total),
                    };
                    match r {
                        Err(e) => {
                            out.skipped.push(("infertel_finished_ratio", e));
                            out.skipped.push(("infertel_error_abort_ratio", e));
                        }
                        Ok(total) => {
                            for (reason, x) in &by_reason {
                                out.put("infertel_finished_ratio", lab(&[("finished_reason", reason)]), Ok(x / total));
                            }
                            let ea = by_reason.get("error").copied().unwrap_or(0.0)
                                + by_reason.get("abort").copied().unwrap_or(0.0);
                            error_abort = Ok(ea / total);
                            out.put("infertel_error_abort_ratio", lab(&[]), error_abort);
                        }
                    }
                }
            }
            let kv = v.gauge(&schema::KV_USAGE, keep);
            out.put("infertel_kv_cache_usage_ratio", lab(&[]), kv.map(|g| g.last));
            let waiting = v.gauge(&schema::WAITING, keep);
            // Objectives.
            let o = &self.settings.objectives;
            let mut slo = |name: &str, measured: Option<f64>, ok: &dyn Fn(f64) -> bool| {
                if let Some(m) = measured {
                    out.derived.push(Derived {
                        name: "infertel_slo_measured",
                        labels: lab(&[("objective", name)]),
                        value: m,
                    });
                    out.derived.push(Derived {
                        name: "infertel_slo_ok",
                        labels: lab(&[("objective", name)]),
                        value: if ok(m) { 1.0 } else { 0.0 },
                    });
                } else {
                    out.skipped.push(("infertel_slo_ok", Skip::MissingInput));
                }
            };
            slo("ttft_p95", q95["infertel_time_to_first_token_seconds"], &|m| m <= o.ttft_p95);
            slo("itl_p95", q95["infertel_inter_token_latency_seconds"], &|m| m <= o.itl_p95);
            let no_wait = waiting.map(|w| w.max <= 0.0).unwrap_or(true);
            slo("queue", phase["queue"], &|m| m <= o.queue_time_max && no_wait);
            slo("error_abort_ratio", error_abort.ok(), &|m| m <= o.error_abort_ratio);
            // Scale signal.
            let sc = &self.settings.scale;
            let sustained = match &waiting {
                Ok(_) => {
                    let wv = View { st: v.st, t: v.t, w: sc.waiting_sustained_ms };
                    wv.gauge(&schema::WAITING, keep)
                        .map(|g| g.min > 0.0 && g.first_ms <= v.t - sc.waiting_sustained_ms)
                        .unwrap_or(false)
                }
                Err(_) => false,
            };
            let sig = match (&kv, &waiting) {
                (Err(e), Err(_)) => Err(*e),
                _ => Ok(if kv.map(|g| g.last >= sc.kv_cache_usage).unwrap_or(false) || sustained { 1.0 } else { 0.0 }),
            };
            out.put("infertel_scale_signal", lab(&[]), sig);
        }
        // HTTP errors per handler (no model_name on these).
        let base = vec![("instance".to_string(), key.instance.clone()), ("job".to_string(), key.job.clone())];
        if let Ok(sel) = v.select(&schema::HTTP_REQUESTS, "", &|_| true) {
            let mut per: BTreeMap<String, (f64, f64, Option<Skip>)> = BTreeMap::new();
            for (l, s) in sel {
                let e = per.entry(l.get("handler").unwrap_or("").to_string()).or_insert((0.0, 0.0, None));
                match increase(s) {
                    Ok(i) => {
                        e.1 += i.rate();
                        if l.get("status").is_some_and(|st| st.starts_with('4') || st.starts_with('5')) {
                            e.0 += i.rate();
                        }
                    }
                    Err(x) => e.2 = Some(x),
                }
            }
            for (h, (bad, all, err)) in per {
                let r = match err {
                    Some(e) => Err(e),
                    None => ratio(Ok(bad), Ok(all)),
                };
                out.put("infertel_http_error_ratio", with(base.clone(), &[("handler", &h)]), r);
            }
        }
        self.eval_power(v, key, &groups, out);
    }

    fn eval_dcgm(&self, v: &View, out: &mut Out) {
        let mut gpus: BTreeSet<LabelPairs> = BTreeSet::new();
        for input in [&schema::FB_USED, &schema::POWER, &schema::DRAM_ACTIVE] {
            if let Some(n) = v.pick(input, "") {
                for (l, s) in &v.st.series[&WireName(n)] {
                    if in_window(s, v.t, v.w).is_ok() {
                        gpus.insert(restrict(l, GPU_GROUP));
                    }
                }
            }
        }
        for g in &gpus {
            let gk = g.clone();
            let keep = move |l: &Labels| matches(l, &gk, GPU_GROUP);
            let keep: &dyn Fn(&Labels) -> bool = &keep;
            let used = v.gauge(&schema::FB_USED, keep).map(|x| x.last);
            let free = v.gauge(&schema::FB_FREE, keep).map(|x| x.last);
            let total = match (used, free) {
                (Ok(u), Ok(f)) => Ok(u + f),
                (Err(e), _) | (_, Err(e)) => Err(e),
            };
            out.put("infertel_vram_used_ratio", g.clone(), ratio(used, total));
            let mb = &self.settings.memory_bound;
            let r = match (v.gauge(&schema::DRAM_ACTIVE, keep), v.gauge(&schema::TENSOR_ACTIVE, keep)) {
                (Ok(d), Ok(t)) => {
                    Ok(if d.mean >= mb.dram_active_min && t.mean <= mb.tensor_active_max { 1.0 } else { 0.0 })
                }
                (Err(e), _) | (_, Err(e)) => Err(e),
            };
            out.put("infertel_memory_bound", g.clone(), r);
        }
    }

    /// GPUs (with their target) that the join assigns to `vllm`'s group.
    fn gpu_selection(&self, t: i64) -> Vec<(&TargetState, LabelPairs)> {
        let mut out = Vec::new();
        for st in self.targets.values() {
            if source_of(st) != Some(Source::Dcgm) {
                continue;
            }
            let v = View { st, t, w: self.settings.window_ms };
            if let Some(n) = v.pick(&schema::POWER, "") {
                let mut seen = BTreeSet::new();
                for (l, s) in &st.series[&WireName(n)] {
                    if l.get("GPU_I_ID").is_none()
                        && in_window(s, t, v.w).is_ok()
                        && seen.insert(restrict(l, GPU_GROUP))
                    {
                        out.push((
                            st,
                            restrict(
                                l,
                                &[
                                    "GPU_I_ID",
                                    "Hostname",
                                    "UUID",
                                    "gpu",
                                    "hostname",
                                    "instance",
                                    "job",
                                    "namespace",
                                    "pod",
                                ],
                            ),
                        ));
                    }
                }
            }
        }
        out
    }

    fn eval_power(&self, v: &View, key: &TargetKey, groups: &BTreeSet<LabelPairs>, out: &mut Out) {
        const NAME: &str = "infertel_tokens_per_watt";
        let all_gpus = self.gpu_selection(v.t);
        let get = |l: &LabelPairs, n: &str| l.iter().find(|(k, _)| k == n).map(|(_, x)| x.clone());
        // (output labels, vLLM rate, GPUs)
        let mut jobs: Vec<(LabelPairs, Result<f64, Skip>, Vec<&(&TargetState, LabelPairs)>)> = Vec::new();
        match &self.settings.join {
            Join::Node => {
                // One series for the node, emitted by the first live vLLM target.
                let first = self.targets.iter().find(|(_, st)| {
                    source_of(st) == Some(Source::Vllm) && {
                        let vv = View { st, t: v.t, w: v.w };
                        vv.select(&schema::GENERATION_TOKENS, "", &|_| true).is_ok()
                    }
                });
                if first.map(|(k, _)| k) != Some(key) {
                    return;
                }
                let mut tokens = Ok(0.0);
                for st in self.targets.values().filter(|st| source_of(st) == Some(Source::Vllm)) {
                    let vv = View { st, t: v.t, w: v.w };
                    match (vv.rate(&schema::GENERATION_TOKENS, "", &|_| true), &mut tokens) {
                        (Ok(r), Ok(sum)) => *sum += r,
                        (Err(Skip::MissingInput), _) => {}
                        (Err(e), t) => *t = Err(e),
                        (Ok(_), Err(_)) => {}
                    }
                }
                let node = all_gpus.iter().find_map(|(_, l)| get(l, "Hostname").or_else(|| get(l, "hostname")));
                let labels = match node {
                    Some(n) => vec![("node".to_string(), n)],
                    None => vec![],
                };
                jobs.push((labels, tokens, all_gpus.iter().collect()));
            }
            Join::Pod => {
                for g in groups {
                    let (Some(pod), Some(ns)) = (get(g, "pod"), get(g, "namespace")) else {
                        out.skipped.push((NAME, Skip::MissingInput));
                        continue;
                    };
                    let gk = g.clone();
                    let rate = v.rate(&schema::GENERATION_TOKENS, "", &|l| matches(l, &gk, VLLM_GROUP));
                    let gpus = all_gpus
                        .iter()
                        .filter(|(_, l)| {
                            get(l, "pod").as_ref() == Some(&pod) && get(l, "namespace").as_ref() == Some(&ns)
                        })
                        .collect();
                    jobs.push((vec![("namespace".into(), ns), ("pod".into(), pod)], rate, gpus));
                }
            }
            Join::Map(map) => {
                let Some(uuids) = map.get(&key.instance) else {
                    out.skipped.push((NAME, Skip::MissingInput));
                    return;
                };
                let rate = v.rate(&schema::GENERATION_TOKENS, "", &|_| true);
                let gpus =
                    all_gpus.iter().filter(|(_, l)| get(l, "UUID").is_some_and(|u| uuids.contains(&u))).collect();
                jobs.push((vec![("instance".into(), key.instance.clone())], rate, gpus));
            }
        }
        for (labels, tokens, gpus) in jobs {
            if gpus.is_empty() {
                out.skipped.push((NAME, Skip::MissingInput));
                continue;
            }
            // Energy counter when every joined GPU exports it, else mean power.
            let mut energy = Ok(0.0);
            let mut power = Ok(0.0);
            for (st, l) in &gpus {
                let gv = View { st, t: v.t, w: v.w };
                let keep = |x: &Labels| matches(x, l, GPU_GROUP);
                match (gv.rate(&schema::ENERGY, "", &keep), &mut energy) {
                    (Ok(mj_per_s), Ok(sum)) => *sum += mj_per_s / 1000.0,
                    (Err(e), en) => *en = Err(e),
                    _ => {}
                }
                match (gv.gauge(&schema::POWER, &keep), &mut power) {
                    (Ok(p), Ok(sum)) => *sum += p.mean,
                    (Err(e), pw) => *pw = Err(e),
                    _ => {}
                }
            }
            let watts = if energy.is_ok() { energy } else { power };
            out.put(NAME, labels, ratio(tokens, watts));
        }
    }

    /// Mean (or max) of a gauge over the window across every target that
    /// exposes it; for reports.
    pub fn gauge_over(&self, input: &Input, t: i64, max: bool) -> Option<f64> {
        let mut vals = Vec::new();
        for st in self.targets.values() {
            let v = View { st, t, w: self.settings.window_ms };
            if let Ok(sel) = v.select(input, "", &|_| true) {
                for (_, s) in sel {
                    for x in s {
                        vals.push(x.value);
                    }
                }
            }
        }
        if vals.is_empty() {
            return None;
        }
        Some(if max {
            vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
        } else {
            vals.iter().sum::<f64>() / vals.len() as f64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `matches` (one merge pass) agrees with the plain definition: every
    /// label of `names` present in both with equal values, or in neither.
    #[test]
    fn matches_agrees_with_definition() {
        let plain = |l: &Labels, g: &LabelPairs, names: &[&str]| {
            names.iter().all(|n| l.get(n) == g.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str()))
        };
        let sets = [
            Labels::from_pairs([("__name__", "x"), ("engine", "0"), ("job", "v"), ("model_name", "m")]),
            Labels::from_pairs([("engine", "0"), ("instance", "a"), ("job", "v"), ("model_name", "m"), ("pod", "p")]),
            Labels::from_pairs([("engine", "1"), ("instance", "a"), ("job", "v"), ("model_name", "m")]),
            Labels::from_pairs([("GPU_I_ID", "1"), ("Hostname", "h"), ("UUID", "u"), ("gpu", "0"), ("job", "d")]),
            Labels::from_pairs([("Hostname", "h"), ("UUID", "u"), ("gpu", "0"), ("job", "d"), ("namespace", "n")]),
            Labels::from_pairs([("instance", "a")]),
            Labels::default(),
        ];
        let mut compared = 0;
        for names in [VLLM_GROUP, GPU_GROUP] {
            assert!(names.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()), "{names:?} sorted");
            for a in &sets {
                for b in &sets {
                    let mut wide: Vec<&str> = names.to_vec();
                    wide.extend(["namespace", "pod"]);
                    wide.sort();
                    wide.dedup();
                    for g in [restrict(b, names), restrict(b, &wide)] {
                        assert_eq!(matches(a, &g, names), plain(a, &g, names), "{a:?} vs {g:?} on {names:?}");
                        compared += 1;
                    }
                }
            }
        }
        assert_eq!(compared, 2 * 7 * 7 * 2);
    }

    /// The fast path (the same interned label sets as the last scrape) and
    /// the slow path (fresh label sets every scrape) derive the same values,
    /// also when series appear, vanish and change order between scrapes.
    #[test]
    fn interned_and_fresh_label_sets_derive_the_same() {
        let names = [
            ("vllm:generation_tokens_total", ""),
            ("vllm:prompt_tokens_total", ""),
            ("vllm:e2e_request_latency_seconds_count", ""),
            ("vllm:e2e_request_latency_seconds_sum", ""),
            ("vllm:request_queue_time_seconds_sum", ""),
            ("vllm:kv_cache_usage_perc", ""),
            ("vllm:time_to_first_token_seconds_bucket", "0.1"),
            ("vllm:time_to_first_token_seconds_bucket", "1"),
            ("vllm:time_to_first_token_seconds_bucket", "+Inf"),
            ("process_cpu_seconds_total", ""),
        ];
        let labels = |i: usize| {
            let (n, le) = names[i];
            let mut v = vec![("__name__", n), ("engine", "0"), ("instance", "a"), ("job", "v"), ("model_name", "m")];
            if !le.is_empty() {
                v.push(("le", le));
            }
            Labels::from_pairs(v)
        };
        let interned: Vec<Labels> = (0..names.len()).map(labels).collect();
        let run = |fresh: bool| {
            let mut e = Engine::new(Settings { window_ms: 10_000, ..Settings::default() });
            let mut out = Vec::new();
            for k in 0..30i64 {
                let t = 100_000 + k * 1000;
                let mut order: Vec<usize> = (0..names.len()).collect();
                if k % 7 == 3 {
                    order.reverse();
                }
                if k % 5 == 2 {
                    order.retain(|i| *i != 1);
                }
                let batch: Vec<Series> = order
                    .iter()
                    .map(|&i| Series {
                        labels: if fresh { labels(i) } else { interned[i].clone() },
                        samples: vec![Sample { timestamp_ms: t, value: (k * (i as i64 + 1)) as f64 }],
                    })
                    .collect();
                let touched = e.ingest(&batch);
                for (key, t) in touched {
                    let ev = e.evaluate(&key, t);
                    out.push(
                        ev.derived.iter().map(|d| (d.name, d.labels.clone(), d.value.to_bits())).collect::<Vec<_>>(),
                    );
                }
            }
            out
        };
        let (a, b) = (run(false), run(true));
        assert_eq!(a.len(), 30);
        assert!(a.iter().any(|d| d.iter().any(|(n, _, _)| *n == "infertel_generation_tokens_per_second")));
        let sorted = |mut v: Vec<_>| {
            v.sort();
            v
        };
        for (x, y) in a.into_iter().zip(b) {
            assert_eq!(sorted(x), sorted(y));
        }
    }
}
