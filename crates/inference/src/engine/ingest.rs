//! Ingest: a scrape's series into each target's rows (see `rows.rs`), at the cost
//! of one hash per series for the names the engine ignores (most of a
//! scrape) and, for a scrape that repeats the last one's order, one hash of
//! its label sets' addresses (the shortcut, `repeat.rs`).

#[path = "repeat.rs"]
mod repeat;

use super::by_labels::ByLabels;
use super::rows::Rows;
use super::{Engine, TargetKey};
use crate::schema::{self, Families, Schema};
use infertel_model::{Labels, METRIC_NAME, Series, is_stale_nan};
use repeat::Repeat;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::sync::LazyLock;

#[derive(Clone)]
pub(crate) struct TargetState {
    /// Wire name (interned, see [`wire`]) → label set → column in `rows`.
    pub(crate) series: FxHashMap<WireName, ByLabels>,
    /// The input samples, a row per scrape time. Staleness markers are not
    /// stored: a range ignores them.
    pub(crate) rows: Rows,
    /// What readers see of `rows`: samples from these times on, for the
    /// inputs kept for the window and for the longer ones (`Wire::long`).
    /// Rows go at the earlier of the two, so older samples of the inputs
    /// kept for the window may still be there.
    pub(crate) cutoffs: (i64, i64),
    /// The engine groups of the input series (see `vllm::groups`), each
    /// once; a series holds the index of its own.
    pub(crate) groups: Vec<super::vllm::Group>,
    pub(crate) families: Families,
    engine_label: bool,
    /// What `families` and `engine_label` imply, kept in step with them.
    pub(crate) detected: Option<Schema>,
    /// The schema as of the last evaluation (a change is an event).
    pub(crate) schema: Option<Schema>,
    pub(crate) newest_ms: i64,
    /// Time of the last evaluation (`i64::MIN`: never).
    pub(crate) evaluated_ms: i64,
    /// The target went away: its `up` got a staleness marker (removed from
    /// discovery, or the agent stopped scraping it). A failed scrape writes
    /// `up 0`, not a marker, so it does not set this.
    pub(crate) gone: bool,
    /// The series of the last scrape, in order (see `ingest`).
    order: Vec<Seen>,
    /// Where the input series sit in the last scrape, when that scrape was
    /// clean (see [`Repeat`]).
    repeat: Option<Repeat>,
    /// The `node` label of the target's series, found when a label set is
    /// added (see `gpu::target_node`): evaluation asks for it once per
    /// target per target evaluated, which scanned every series each time.
    pub(crate) node: Option<Option<String>>,
}

impl Default for TargetState {
    fn default() -> Self {
        TargetState {
            series: FxHashMap::default(),
            rows: Rows::default(),
            cutoffs: (i64::MIN, i64::MIN),
            groups: Vec::new(),
            families: Families::default(),
            engine_label: false,
            detected: None,
            schema: None,
            newest_ms: i64::MIN,
            evaluated_ms: i64::MIN,
            gone: false,
            order: Vec::new(),
            repeat: None,
            node: None,
        }
    }
}

impl TargetState {
    /// Sets the cutoffs (`long` for the inputs kept longer than the window,
    /// see [`Wire::long`]), drops the rows older than both, and the series
    /// without a sample since their cutoff (freeing their columns).
    pub(crate) fn trim(&mut self, short: i64, long: i64) {
        self.keep_from(short, long);
        let rows = &mut self.rows;
        let mut dropped = false;
        for by_labels in self.series.values_mut() {
            let kept = rows.since(if by_labels.long { long } else { short });
            dropped |= by_labels.retain(|c| {
                let keep = rows.newest_in(c, kept.clone()).is_some();
                if !keep {
                    rows.release(c);
                }
                keep
            });
        }
        self.series.retain(|_, m| !m.is_empty());
        // The shortcut writes by column, and a freed column is handed out
        // again. A column is freed only when its series had no sample in
        // the retention, so it is not one the shortcut writes (a repeat's
        // inputs are live on every scrape); it is set up afresh anyway, at
        // the cost of one full ingest.
        if dropped {
            self.repeat = None;
        }
    }

    /// Sets what readers see (see `cutoffs`) and lets the rows before both
    /// cutoffs go.
    fn keep_from(&mut self, short: i64, long: i64) {
        self.cutoffs = (short, long);
        self.rows.expire(short.min(long));
    }
}

/// The targets a batch brought samples of, each once and in key order, with
/// the newest time it brought: what [`Engine::ingest`] returns. A batch is
/// nearly always one scrape of one target, so a vector, not a map (a map
/// cost an allocation and a tree walk per scrape).
pub type Touched = Vec<(TargetKey, i64)>;

/// A wire name interned by [`wire`], hashed and compared by address: every
/// key and every lookup comes from that one table, so equal names are the
/// same `&'static str`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WireName(pub(crate) &'static str);

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
pub(crate) struct Wire {
    pub(crate) name: &'static str,
    family: u8,
    kept: bool,
    /// Kept for `scale.waiting_sustained` rather than the window (the queue
    /// gauge, whose sustained-wait check looks further back).
    long: bool,
}

/// Looks a wire name up among every input and era-marker family with each
/// histogram/summary suffix; `None` for the names the engine ignores (most
/// of a scrape), at the cost of one hash of the name.
pub(crate) fn wire(name: &str) -> Option<Wire> {
    static MAP: LazyLock<FxHashMap<&'static str, Wire>> = LazyLock::new(|| {
        let mut map = FxHashMap::default();
        for (i, family) in schema::relevant_families().iter().enumerate() {
            let kept = schema::ALL_INPUTS.iter().any(|x| x.names.contains(family));
            let buckets_kept = kept && schema::BUCKETS_READ.iter().any(|x| x.names.contains(family));
            let long = schema::WAITING.names.contains(family);
            for suffix in ["", "_bucket", "_count", "_sum"] {
                // Built once per process: a few hundred bytes, leaked on purpose.
                let name: &'static str =
                    if suffix.is_empty() { family } else { Box::leak(format!("{family}{suffix}").into_boxed_str()) };
                let kept = if suffix == "_bucket" { buckets_kept } else { kept };
                map.entry(name).or_insert(Wire { name, family: i as u8, kept, long });
            }
            // The creation time of counters whose label children come and go
            // (`finished_reason`, HTTP `status`): a child that first appears
            // inside the window counts from 0 at that time.
            if schema::CREATED_OF.iter().any(|x| x.names.contains(family)) {
                let name: &'static str = Box::leak(created_name(family).into_boxed_str());
                map.entry(name).or_insert(Wire { name, family: i as u8, kept, long: false });
            }
        }
        map
    });
    MAP.get(name).copied()
}

/// The name of a counter's `_created` series as `prometheus_client` writes
/// it in the text format (`x_total` → `x_created`).
pub(crate) fn created_name(counter: &str) -> String {
    format!("{}_created", counter.strip_suffix("_total").unwrap_or(counter))
}

/// `job`, `instance` and the metric name of a label set, found in one pass
/// (labels are few; comparing lengths first skips most of them).
fn target_and_name(l: &Labels) -> (Option<&str>, Option<&str>, Option<&str>) {
    let (mut job, mut instance, mut name) = (None, None, None);
    for label in l.iter() {
        let (n, value) = (&label.name, &label.value);
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
    /// Another engine's prefix ([`schema::engine_prefix`]).
    engine_prefix: u16,
    /// The target's `up`: a staleness marker on it means the target is gone.
    up: bool,
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
            engine_prefix: schema::engine_prefix(name),
            up: name == "up",
        }
    }
}

/// Whether two label sets are one series: the same interned set, or equal
/// ones (the receiver builds `up` and the `scrape_*` series anew on every
/// scrape, and a relabeled or pushed series may be built anew too).
#[inline]
fn same_series(a: &Labels, b: &Labels) -> bool {
    Labels::ptr_eq(a, b) || a == b
}

/// Leaves in-place mode (see `ingest`): the series matched so far move to a
/// new order, which the rest of the batch is appended to.
fn diverge<'v>(old: &mut [Seen], pos: usize, new: &'v mut Option<Vec<Seen>>) -> &'v mut Vec<Seen> {
    new.get_or_insert_with(|| {
        let mut v = Vec::with_capacity(old.len() + 8);
        for e in &mut old[..pos] {
            v.push(Seen { labels: e.labels.take(), info: e.info, slot: e.slot });
        }
        v
    })
}

/// One series of a target's last scrape, in body order. The label set is
/// held (so its address stays its identity) until the next scrape takes it.
#[derive(Clone)]
struct Seen {
    labels: Option<Labels>,
    info: SeriesInfo,
    /// The index of its entry in its [`ByLabels`] (a hint, checked there).
    slot: u32,
}

impl Engine {
    /// Takes a scrape's series (any number of targets); returns each target
    /// seen with the newest timestamp it brought.
    pub fn ingest(&mut self, series: &[Series]) -> Touched {
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
            /// `Some(false)` when the batch staled the target's `up`.
            up: Option<bool>,
            /// The target's state, out of the map for the batch (so that
            /// input samples are stored as their series are met); `None`
            /// for a target not known yet that has stored nothing.
            st: Option<TargetState>,
            /// The batch stored an input sample (or created the state).
            kept: bool,
            /// The target's series as of its last scrape, and how far this
            /// batch has matched them.
            old: Vec<Seen>,
            pos: usize,
            /// `None` while this batch repeats the last scrape in order: then
            /// `old[..pos]` already is the new order and nothing is copied.
            new: Option<Vec<Seen>>,
        }
        let retention = self.retention_ms();
        let short_retention = self.short_retention_ms();
        if let Some(touched) = self.ingest_repeat(series, retention, short_retention) {
            self.forget_vanished(&touched);
            return touched;
        }
        let mut accs: Vec<Acc<'_>> = Vec::new();
        let mut cur: Option<usize> = None;
        // Whether the batch can set up the shortcut for the next one: every
        // series of one target, one live sample each.
        let mut clean = true;
        for s in series {
            // Fast path: the series at this position of the target's last
            // scrape, by identity of the interned label set (which implies
            // the same target and name). One series gone is skipped over;
            // a new one takes the slow path and the next ones match again.
            let hit = cur.and_then(|i| {
                let a = &mut accs[i];
                let same =
                    |k: usize| a.old.get(k).and_then(|x| x.labels.as_ref()).is_some_and(|l| same_series(l, &s.labels));
                let k = if same(a.pos) {
                    a.pos
                } else if same(a.pos + 1) {
                    a.pos + 1
                } else {
                    return None;
                };
                let (info, slot) = (a.old[k].info, a.old[k].slot);
                let at = if a.new.is_none() && k == a.pos {
                    a.pos += 1;
                    k
                } else {
                    let labels = a.old[k].labels.take();
                    let new = diverge(&mut a.old, a.pos, &mut a.new);
                    new.push(Seen { labels, info, slot });
                    a.pos = k + 1;
                    new.len() - 1
                };
                Some((i, info, slot, at))
            });
            let (i, info, slot, at) = match hit {
                Some(x) => x,
                None => {
                    let (Some(job), Some(instance), name) = target_and_name(&s.labels) else {
                        clean = false;
                        continue;
                    };
                    let info = SeriesInfo::of(name.unwrap_or(""), &s.labels);
                    let i = match cur {
                        Some(i) if accs[i].job == job && accs[i].instance == instance => i,
                        _ => {
                            let i =
                                accs.iter().position(|a| a.job == job && a.instance == instance).unwrap_or_else(|| {
                                    let key = TargetKey::new(job, instance);
                                    let mut st = self.targets.remove(&key);
                                    let old = st.as_mut().map(|st| std::mem::take(&mut st.order)).unwrap_or_default();
                                    accs.push(Acc {
                                        job,
                                        instance,
                                        newest: i64::MIN,
                                        families: Families::default(),
                                        engine: false,
                                        any_live: false,
                                        up: None,
                                        st,
                                        kept: false,
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
                        && a.old.get(a.pos).and_then(|x| x.labels.as_ref()).is_some_and(|l| same_series(l, &s.labels));
                    if first_again {
                        a.pos += 1;
                        (i, info, a.old[a.pos - 1].slot, a.pos - 1)
                    } else {
                        let new = diverge(&mut a.old, a.pos, &mut a.new);
                        new.push(Seen { labels: Some(s.labels.clone()), info, slot: u32::MAX });
                        (i, info, u32::MAX, new.len() - 1)
                    }
                }
            };
            if info.derived {
                clean = false;
                continue;
            }
            let acc = &mut accs[i];
            let mut live = false;
            for x in &s.samples {
                acc.newest = acc.newest.max(x.timestamp_ms);
                live |= !is_stale_nan(x.value);
            }
            clean &= live && s.samples.len() == 1;
            if info.up {
                acc.up = Some(live);
            }
            // `up` says nothing of the families: a failed scrape (`up 0` and
            // markers for the rest) must not wipe the target's schema.
            if live && !info.created && !info.up {
                acc.any_live = true;
                acc.families.any_vllm |= info.vllm;
                acc.families.any_dcgm |= info.dcgm;
                acc.families.engines |= info.engine_prefix;
                acc.engine |= info.engine;
                if let Some(w) = info.wire {
                    acc.families.insert_index(w.family);
                }
            }
            if let Some(w) = info.wire
                && w.kept
            {
                acc.kept = true;
                let st = acc.st.get_or_insert_with(TargetState::default);
                let (rows, groups) = (&mut st.rows, &mut st.groups);
                let by_labels = st.series.entry(WireName(w.name)).or_insert_with(|| ByLabels::new(w.long));
                let (slot, new) =
                    by_labels.slot(&s.labels, slot, || (rows.column(), super::vllm::group_of(groups, &s.labels)));
                if new {
                    st.node = None;
                }
                let seen = match &mut acc.new {
                    Some(v) => v.get_mut(at),
                    None => acc.old.get_mut(at),
                };
                if let Some(seen) = seen {
                    seen.slot = slot as u32;
                }
                let column = by_labels.entries[slot].column;
                for x in &s.samples {
                    if !is_stale_nan(x.value) {
                        rows.put(column, x.timestamp_ms, x.value);
                    }
                }
            }
        }
        let clean = clean && accs.len() == 1;
        let mut touched: BTreeMap<TargetKey, i64> = BTreeMap::new();
        for a in accs {
            let key = TargetKey::new(a.job, a.instance);
            let order = match a.new {
                Some(v) => v,
                None => {
                    let mut o = a.old;
                    o.truncate(a.pos);
                    o
                }
            };
            if a.any_live || a.kept {
                let mut st = a.st.unwrap_or_default();
                st.repeat = (clean && a.any_live && order.len() == series.len()).then(|| Repeat::of(&st, &order));
                // The address the next repeat will begin with.
                let first = st.repeat.as_ref().and(order.first()).and_then(|x| x.labels.as_ref()).map(|l| l.addr());
                st.order = order;
                // The schema follows from the families alone, and they
                // rarely change between scrapes.
                if a.any_live && (st.families != a.families || st.engine_label != a.engine || st.detected.is_none()) {
                    st.families = a.families;
                    st.engine_label = a.engine;
                    st.detected = schema::detect(&st.families, st.engine_label);
                }
                st.newest_ms = st.newest_ms.max(a.newest);
                st.keep_from(st.newest_ms.saturating_sub(short_retention), st.newest_ms.saturating_sub(retention));
                st.gone = a.up == Some(false) || (st.gone && !a.any_live && a.up.is_none());
                if st.node.is_none() {
                    st.node = Some(super::gpu::scan_node(&st));
                }
                let slot = self.targets.insert(key.clone(), st);
                if let Some(addr) = first {
                    self.hint(addr, slot, self.targets.len());
                }
            } else if let Some(mut st) = a.st {
                st.repeat = None;
                st.order = order;
                st.newest_ms = st.newest_ms.max(a.newest);
                st.keep_from(st.newest_ms.saturating_sub(short_retention), st.newest_ms.saturating_sub(retention));
                if a.up == Some(false) {
                    st.gone = true;
                }
                self.targets.insert(key.clone(), st);
            }
            touched.insert(key, a.newest);
        }
        // Each target once, in key order (a batch rarely holds several).
        let touched: Touched = touched.into_iter().collect();
        self.forget_vanished(&touched);
        touched
    }

    /// Targets that vanished (pods come and go) are forgotten once no
    /// sample of theirs is within the retention of the newest one seen,
    /// with what was emitted for them: the state does not grow with target
    /// churn.
    fn forget_vanished(&mut self, touched: &[(TargetKey, i64)]) {
        let retention = self.retention_ms();
        if let Some(newest) = touched.iter().map(|(_, t)| *t).max() {
            // The sweep reads every target's state. On every batch that is
            // quadratic in the targets (100 targets scraped each second:
            // 10,000 reads a second, each a cache miss) for a cutoff that
            // moves one second a second, so it runs once per second of
            // scrape time: a target is forgotten at most 1 s later.
            if (0..1000).contains(&newest.saturating_sub(self.swept_ms)) {
                return;
            }
            self.swept_ms = newest;
            let cutoff = newest.saturating_sub(retention);
            if self.targets.values().any(|st| st.newest_ms < cutoff) {
                let gone: Vec<TargetKey> = self
                    .targets
                    .iter()
                    .filter(|(k, st)| !touched.iter().any(|(t, _)| t == *k) && st.newest_ms < cutoff)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in gone {
                    self.targets.remove(&k);
                    self.emitted.remove(&k);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "ingest_tests.rs"]
mod tests;
