//! The derivation engine: keeps each target's input samples for the window,
//! evaluates the derived series of one target at one time, and tracks what it
//! emitted so that series whose inputs vanished get a staleness marker.
//!
//! * [`ingest`]: a scrape's series into per-target sample windows.
//! * [`rows`]: how a target's samples are laid out (a row per scrape).
//! * [`view`]: one target's samples at one time: selection, rates, quantiles.
//! * [`rates`]: the additive inputs of an engine (or a fleet) and every
//!   figure derived from them.
//! * [`vllm`]: the derived series of a vLLM target.
//! * [`gpu`]: GPUs, one per physical device, the join to the engines they
//!   serve, power and energy.
//! * [`fleet`]: the figures of many targets together, for `report`.

mod by_labels;
mod fleet;
mod gpu;
mod ingest;
mod rates;
mod rows;
mod targets;
mod view;
mod vllm;

pub use fleet::{Fleet, Row};
pub use ingest::Touched;
pub use rates::{Measures, Rates};
pub use view::LabelPairs;

use crate::schema::{self, Schema, Source};
use crate::window::Skip;
use infertel_model::{Label, Labels, METRIC_NAME};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use view::View;

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
    /// The node this agent runs on (`K8S_NODE_NAME`): where a target's own
    /// `node` label is absent, its GPUs and engines are taken to be here.
    pub node_name: Option<String>,
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
            node_name: None,
        }
    }
}

/// A scraped target. Shared strings: every batch names the targets it
/// touched, and a copy costs no allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetKey {
    pub job: Arc<str>,
    pub instance: Arc<str>,
}

impl TargetKey {
    pub fn new(job: &str, instance: &str) -> TargetKey {
        TargetKey { job: job.into(), instance: instance.into() }
    }
}

/// A target's key as borrowed strings, to find its state without building
/// a key (see the `Borrow` impl below); ordered as [`TargetKey`] is.
pub(crate) trait KeyRef {
    fn parts(&self) -> (&str, &str);
}

impl KeyRef for TargetKey {
    fn parts(&self) -> (&str, &str) {
        (&self.job, &self.instance)
    }
}

impl KeyRef for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> std::borrow::Borrow<dyn KeyRef + 'a> for TargetKey {
    fn borrow(&self) -> &(dyn KeyRef + 'a) {
        self
    }
}

impl PartialEq for dyn KeyRef + '_ {
    fn eq(&self, o: &Self) -> bool {
        self.parts() == o.parts()
    }
}

impl Eq for dyn KeyRef + '_ {}

impl PartialOrd for dyn KeyRef + '_ {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for dyn KeyRef + '_ {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&o.parts())
    }
}

impl std::fmt::Display for TargetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.job, self.instance)
    }
}

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
    /// The label set (`__name__` included) of each of `derived`, in order.
    /// A series emitted again has the set it had: built once, not on every
    /// evaluation, and one identity for the exporters downstream.
    pub series: Vec<Labels>,
    /// Series emitted by the previous evaluation of this target and not now.
    pub stale: Vec<(&'static str, LabelPairs)>,
    /// The label set of each of `stale`, in order.
    pub stale_series: Vec<Labels>,
    pub skipped: Vec<(&'static str, Skip)>,
    pub schema_event: Option<SchemaEvent>,
}

/// The series an evaluation of a target emitted, to mark those the next one
/// does not emit stale. A series emitted again keeps its entry, so a steady
/// target's evaluation copies no labels for it and builds no label set.
type Emitted = hashbrown::HashTable<EmittedSeries>;

#[derive(Clone)]
struct EmittedSeries {
    /// Of name and labels ([`emitted_hash`]).
    hash: u64,
    name: &'static str,
    labels: LabelPairs,
    /// The series' label set, as it goes out.
    series: Labels,
}

fn emitted_hash(name: &str, labels: &LabelPairs) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one((name, labels))
}

/// The label set of derived series `name` with `labels`.
fn label_set(name: &str, labels: &LabelPairs) -> Labels {
    let mut l: Vec<Label> = labels.iter().map(|(k, x)| Label::new(k.as_str(), x.as_str())).collect();
    l.push(Label::new(METRIC_NAME, name));
    Labels::from_vec(l)
}

#[derive(Clone)]
pub struct Engine {
    pub settings: Settings,
    pub(crate) targets: targets::Targets,
    emitted: HashMap<TargetKey, Emitted>,
    /// The newest scrape time when vanished targets were last looked for.
    swept_ms: i64,
    /// Reused buffer for a batch's label-set addresses (see `ingest_repeat`).
    addrs: Vec<u8>,
    /// The address of the first label set of a target's last clean scrape,
    /// to its slot in `targets` (see `ingest_repeat`). A hint, checked
    /// before use.
    firsts: rustc_hash::FxHashMap<usize, targets::Slot>,
}

/// Collects derived values and skip reasons during one evaluation.
#[derive(Default)]
pub(crate) struct Out {
    pub(crate) derived: Vec<Derived>,
    pub(crate) skipped: Vec<(&'static str, Skip)>,
}

impl Out {
    /// As [`Out::put`], with `base` and `extra` as the labels, built only
    /// when the value is emitted: most figures skipped would otherwise copy
    /// their engine's labels only to drop them.
    pub(crate) fn put_with(
        &mut self,
        name: &'static str,
        base: &[(String, String)],
        extra: &[(&str, &str)],
        v: Result<f64, Skip>,
    ) -> Option<f64> {
        match v {
            Ok(x) if x.is_finite() => self.put(name, view::with_extra(base, extra), v),
            _ => self.put(name, LabelPairs::new(), v),
        }
    }

    pub(crate) fn put(&mut self, name: &'static str, labels: LabelPairs, v: Result<f64, Skip>) -> Option<f64> {
        match v {
            Ok(x) if x.is_finite() => {
                self.derived.push(Derived { name, labels, value: x });
                Some(x)
            }
            Ok(_) => {
                self.skipped.push((name, Skip::NonFinite));
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
        Engine {
            settings,
            targets: Default::default(),
            emitted: HashMap::new(),
            swept_ms: i64::MIN,
            addrs: Vec::new(),
            firsts: Default::default(),
        }
    }

    /// How long the samples of the longest-kept inputs are kept, and so how
    /// long a target that stopped sending is remembered.
    pub(crate) fn retention_ms(&self) -> i64 {
        self.settings.window_ms.max(self.settings.scale.waiting_sustained_ms) + 60_000
    }

    /// How long every other input is kept: the window plus a margin (at a 1 s
    /// interval, a third less memory than keeping all for the longest).
    pub(crate) fn short_retention_ms(&self) -> i64 {
        self.settings.window_ms + 60_000
    }

    /// True when target `key`, scraped at `t`, is due for evaluation under
    /// `interval_ms`: the first time, and whenever `t` enters a new multiple
    /// of the interval since its last evaluation (0: every scrape). Derived
    /// series are windowed aggregates, so evaluating them on every 1 s scrape
    /// would repeat nearly the same numbers at a cost in CPU; aligning to the
    /// interval's grid keeps a steady cadence whatever the scrape jitter.
    pub fn due(&self, key: &TargetKey, t: i64, interval_ms: i64) -> bool {
        let Some(st) = self.targets.get_recent(key) else { return true };
        if interval_ms <= 0 || st.evaluated_ms == i64::MIN {
            return true;
        }
        // A target that went away has its derived series staled at once.
        if st.gone && self.emitted.get(key).is_some_and(|e| !e.is_empty()) {
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
                    // The names of this server (the shared inputs list every
                    // server's candidates).
                    .map(|(i, d)| {
                        let own: Vec<&str> = i.names.iter().copied().filter(|n| s.source().owns(n)).collect();
                        (if own.is_empty() { i.names.join(" or ") } else { own.join(" or ") }, d)
                    })
                    .collect();
                event = Some(SchemaEvent { target: key.clone(), schema: s, previous: st.schema, missing });
            }
            let view = View::new(st, t, self.settings.window_ms);
            // A target is live while it is not gone and has a sample in the
            // window: a failed scrape (its markers) does not blank it.
            let live = !st.gone && st.rows.any_in(st.rows.between(t - self.settings.window_ms, t));
            if live && let Some(s) = detected {
                let mut labels = vec![
                    ("instance".into(), key.instance.to_string()),
                    ("job".into(), key.job.to_string()),
                    ("schema".into(), s.as_str().to_string()),
                ];
                if let Some(server) = s.source().inference_server() {
                    labels.insert(1, ("inference_server".into(), server.to_string()));
                }
                out.derived.push(Derived { name: "infertel_target_schema_info", labels, value: 1.0 });
                if s.engine_derived() {
                    let from = out.derived.len();
                    self.eval_vllm(&view, key, s, &mut out);
                    // Every series derived from an inference server says which.
                    if let Some(server) = s.source().inference_server() {
                        for d in &mut out.derived[from..] {
                            // A node's figures (the node join) add every
                            // server on the node: they name none.
                            if d.label("node").is_some() {
                                continue;
                            }
                            d.labels.push(("inference_server".into(), server.into()));
                            // TGI's time per token is inference time over
                            // tokens per request: prefill included.
                            if s == Schema::Tgi && d.name == "infertel_inter_token_latency_seconds" {
                                d.labels.push(("source".into(), "approximate".into()));
                            }
                            // Triton's first response of a streaming model:
                            // the first chunk, which may hold several tokens.
                            if s.source() == Source::Triton && d.name == "infertel_time_to_first_token_seconds" {
                                d.labels.push(("source".into(), "first_chunk".into()));
                            }
                            d.labels.sort();
                        }
                    }
                } else if s.source() == Source::Dcgm {
                    gpu::eval_dcgm(&view, &self.settings, &mut out);
                }
                // The other servers are recognised and reported; their
                // derivations are not built yet.
            } else if st.gone {
                out.skipped.push(("infertel_target_schema_info", Skip::StaleInput));
            }
        }
        if let Some(e) = &event
            && let Some(st) = self.targets.get_mut(key)
        {
            st.schema = Some(e.schema);
        }
        let mut prev = self.emitted.remove(key).unwrap_or_default();
        let mut now = Emitted::with_capacity(out.derived.len());
        let mut series = Vec::with_capacity(out.derived.len());
        for d in &out.derived {
            let h = emitted_hash(d.name, &d.labels);
            let same = |e: &EmittedSeries| e.name == d.name && e.labels == d.labels;
            if let Some(e) = now.find(h, same) {
                series.push(e.series.clone());
                continue;
            }
            let entry = match prev.find_entry(h, same) {
                Ok(e) => e.remove().0,
                Err(_) => EmittedSeries {
                    hash: h,
                    name: d.name,
                    labels: d.labels.clone(),
                    series: label_set(d.name, &d.labels),
                },
            };
            series.push(entry.series.clone());
            now.insert_unique(h, entry, |e| e.hash);
        }
        let mut gone: Vec<EmittedSeries> = prev.into_iter().collect();
        gone.sort_unstable_by(|a, b| (a.name, &a.labels).cmp(&(b.name, &b.labels)));
        let (stale, stale_series) = gone.into_iter().map(|e| ((e.name, e.labels), e.series)).unzip();
        self.emitted.insert(key.clone(), now);
        Evaluation {
            at_ms: t,
            derived: out.derived,
            series,
            stale,
            stale_series,
            skipped: out.skipped,
            schema_event: event,
        }
    }
}
