//! Ingest: a scrape's series into each target's sample windows, at the cost
//! of one hash per series for the names the engine ignores (most of a
//! scrape) and a pointer comparison per series for a scrape that repeats the
//! last one's order.

use super::{Engine, TargetKey};
use crate::schema::{self, Families, Schema};
use infertel_model::{Labels, METRIC_NAME, Sample, Series, is_stale_nan};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// Input samples of one wire name, by label set, oldest first.
///
/// Keyed by the identity of the label set: the receiver hands out the same
/// interned label set on every scrape, so finding a series costs a pointer
/// hash instead of hashing every label. The entry holds a clone, so the
/// address cannot be reused by another label set while it is a key. A label
/// set equal in content but newly allocated (the receiver re-interned it) is
/// re-keyed when first seen, so one series never has two entries.
#[derive(Default, Clone)]
pub(crate) struct ByLabels(FxHashMap<usize, (Labels, Vec<Sample>)>);

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

    pub(crate) fn values(&self) -> impl Iterator<Item = &Vec<Sample>> {
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

#[derive(Clone)]
pub(crate) struct TargetState {
    /// Wire name (interned, see [`wire`]) → label set → samples, oldest
    /// first. Staleness markers are not stored: a range ignores them.
    pub(crate) series: FxHashMap<WireName, ByLabels>,
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
    /// The `node` label of the target's series, found when a label set is
    /// added (see `gpu::target_node`): evaluation asks for it once per
    /// target per target evaluated, which scanned every series each time.
    pub(crate) node: Option<Option<String>>,
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
            gone: false,
            order: Vec::new(),
            node: None,
        }
    }
}

impl TargetState {
    /// Drops samples older than their cutoff (`long` for the inputs kept
    /// longer than the window, see [`Wire::long`]), and series left without any.
    pub(crate) fn trim(&mut self, short: i64, long: i64) {
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
            let long = schema::WAITING.names.contains(family);
            for suffix in ["", "_bucket", "_count", "_sum"] {
                // Built once per process: a few hundred bytes, leaked on purpose.
                let name: &'static str =
                    if suffix.is_empty() { family } else { Box::leak(format!("{family}{suffix}").into_boxed_str()) };
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
#[derive(Clone)]
struct Seen {
    labels: Option<Labels>,
    info: SeriesInfo,
}

impl Engine {
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
            /// `Some(false)` when the batch staled the target's `up`.
            up: Option<bool>,
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
                                        up: None,
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
                st.gone = a.up == Some(false) || (st.gone && !a.any_live && a.up.is_none());
                let long_cutoff = st.newest_ms.saturating_sub(retention);
                let short_cutoff = st.newest_ms.saturating_sub(short_retention);
                for (w, s) in a.kept {
                    let cutoff = if w.long { long_cutoff } else { short_cutoff };
                    let by_labels = st.series.entry(WireName(w.name)).or_default();
                    if !by_labels.0.contains_key(&s.labels.addr()) {
                        st.node = None;
                    }
                    let v = by_labels.samples_mut(&s.labels);
                    for x in &s.samples {
                        if !is_stale_nan(x.value) && v.last().is_none_or(|l| x.timestamp_ms > l.timestamp_ms) {
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
                if st.node.is_none() {
                    st.node = Some(super::gpu::scan_node(st));
                }
            } else if let Some(st) = self.targets.get_mut(&key) {
                st.newest_ms = st.newest_ms.max(a.newest);
                if a.up == Some(false) {
                    st.gone = true;
                }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Settings;

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
                        samples: infertel_model::samples![Sample {
                            timestamp_ms: t,
                            value: (k * (i as i64 + 1)) as f64
                        }],
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
