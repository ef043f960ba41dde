//! The derivation engine: keeps each target's input samples for the window,
//! evaluates the derived series of one target at one time, and tracks what it
//! emitted so that series whose inputs vanished get a staleness marker.

use crate::schema::{self, Input, Schema, Source};
use crate::window::{Skip, histogram_quantile, in_window, increase};
use infertel_model::{Labels, Sample, Series, is_stale_nan};
use std::collections::{BTreeMap, BTreeSet, HashMap};

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
    pub join: Join,
    pub objectives: Objectives,
    pub scale: Scale,
    pub memory_bound: MemoryBound,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            window_ms: 60_000,
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

#[derive(Default)]
struct TargetState {
    /// name → label set → samples, oldest first.
    series: BTreeMap<String, HashMap<Labels, Vec<Sample>>>,
    families: BTreeSet<String>,
    engine_label: bool,
    schema: Option<Schema>,
    newest_ms: i64,
}

/// Names the engine keeps (everything else passes through untouched).
fn wanted(name: &str) -> bool {
    let base = schema::family_of(name);
    ALL_INPUTS.iter().any(|i| i.names.contains(&base) || i.names.contains(&name))
}

const ALL_INPUTS: &[&Input] = &[
    &schema::PROMPT_TOKENS,
    &schema::GENERATION_TOKENS,
    &schema::PREFIX_QUERIES,
    &schema::PREFIX_HITS,
    &schema::PREFIX_HIT_RATE_V0,
    &schema::PROMPT_TOKENS_CACHED,
    &schema::SUCCESS,
    &schema::TTFT,
    &schema::ITL,
    &schema::E2E,
    &schema::QUEUE,
    &schema::PREFILL,
    &schema::DECODE,
    &schema::INFERENCE,
    &schema::ITERATION_TOKENS,
    &schema::REQUEST_PROMPT_TOKENS,
    &schema::REQUEST_GENERATION_TOKENS,
    &schema::KV_USAGE,
    &schema::WAITING,
    &schema::RUNNING,
    &schema::HTTP_REQUESTS,
    &schema::FB_USED,
    &schema::FB_FREE,
    &schema::POWER,
    &schema::ENERGY,
    &schema::GPU_UTIL,
    &schema::DRAM_ACTIVE,
    &schema::TENSOR_ACTIVE,
    &schema::GR_ENGINE_ACTIVE,
];

const VLLM_GROUP: &[&str] = &["engine", "instance", "job", "model_name", "namespace", "pod"];
const GPU_GROUP: &[&str] = &["GPU_I_ID", "Hostname", "UUID", "gpu", "hostname", "instance", "job"];

fn restrict(l: &Labels, names: &[&str]) -> LabelPairs {
    names.iter().filter_map(|n| l.get(n).map(|v| (n.to_string(), v.to_string()))).collect()
}

fn with(mut base: LabelPairs, extra: &[(&str, &str)]) -> LabelPairs {
    for (k, v) in extra {
        base.push((k.to_string(), v.to_string()));
    }
    base.sort();
    base
}

fn matches(l: &Labels, group: &LabelPairs, names: &[&str]) -> bool {
    names.iter().all(|n| l.get(n) == group.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str()))
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
    fn pick(&self, input: &Input, suffix: &str) -> Option<String> {
        let names: Vec<String> =
            input.names.iter().map(|n| format!("{n}{suffix}")).filter(|n| self.st.series.contains_key(n)).collect();
        let live = |n: &String| self.st.series[n].values().any(|s| in_window(s, self.t, self.w).is_ok());
        names.iter().find(|n| live(n)).or(names.first()).cloned()
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
        for (l, samples) in &self.st.series[&name] {
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
    schema::detect(&st.families, st.engine_label).map(|s| s.source())
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

    fn retention_ms(&self) -> i64 {
        self.settings.window_ms.max(self.settings.scale.waiting_sustained_ms) + 60_000
    }

    /// Takes a scrape's series (any number of targets); returns each target
    /// seen with the newest timestamp it brought.
    pub fn ingest(&mut self, series: &[Series]) -> BTreeMap<TargetKey, i64> {
        // This runs on every sample of every scrape, so it works on borrowed
        // strings: a batch is usually one scrape of one target, so the target
        // is resolved once per run of series, and family names stay `&str`
        // until the end. Only the few wanted series are stored.
        struct Acc<'a> {
            job: &'a str,
            instance: &'a str,
            newest: i64,
            families: BTreeSet<&'a str>,
            engine: bool,
            any_live: bool,
        }
        let mut accs: Vec<Acc<'_>> = Vec::new();
        let mut cur: Option<usize> = None;
        for s in series {
            let (Some(job), Some(instance)) = (s.labels.get("job"), s.labels.get("instance")) else {
                continue;
            };
            let name = s.labels.metric_name();
            if name.starts_with("infertel_") {
                continue;
            }
            let i = match cur {
                Some(i) if accs[i].job == job && accs[i].instance == instance => i,
                _ => {
                    let i = accs.iter().position(|a| a.job == job && a.instance == instance).unwrap_or_else(|| {
                        accs.push(Acc {
                            job,
                            instance,
                            newest: i64::MIN,
                            families: BTreeSet::new(),
                            engine: false,
                            any_live: false,
                        });
                        accs.len() - 1
                    });
                    cur = Some(i);
                    i
                }
            };
            let acc = &mut accs[i];
            let newest = s.samples.iter().map(|x| x.timestamp_ms).max().unwrap_or(i64::MIN);
            acc.newest = acc.newest.max(newest);
            let live = s.samples.iter().any(|x| !is_stale_nan(x.value));
            if live && !name.ends_with("_created") {
                acc.any_live = true;
                acc.families.insert(schema::family_of(name));
                if name.starts_with("vllm:") && s.labels.get("engine").is_some() {
                    acc.engine = true;
                }
            }
            if !wanted(name) {
                continue;
            }
            let key = TargetKey { job: job.to_string(), instance: instance.to_string() };
            let st = self.targets.entry(key).or_default();
            let by_name = match st.series.get_mut(name) {
                Some(m) => m,
                None => st.series.entry(name.to_string()).or_default(),
            };
            let v = by_name.entry(s.labels.clone()).or_default();
            for x in &s.samples {
                if v.last().is_none_or(|l| x.timestamp_ms > l.timestamp_ms) {
                    v.push(*x);
                }
            }
        }
        let mut touched: BTreeMap<TargetKey, i64> = BTreeMap::new();
        for a in accs {
            let key = TargetKey { job: a.job.to_string(), instance: a.instance.to_string() };
            if a.any_live {
                let st = self.targets.entry(key.clone()).or_default();
                st.families = a.families.into_iter().map(str::to_string).collect();
                st.engine_label = a.engine;
            }
            touched.insert(key, a.newest);
        }
        let retention = self.retention_ms();
        for (k, newest) in &touched {
            if let Some(st) = self.targets.get_mut(k) {
                st.newest_ms = st.newest_ms.max(*newest);
                let cutoff = st.newest_ms - retention;
                for by_labels in st.series.values_mut() {
                    by_labels.retain(|_, v| {
                        let keep_from = v.partition_point(|x| x.timestamp_ms < cutoff);
                        v.drain(..keep_from);
                        !v.is_empty()
                    });
                }
                st.series.retain(|_, m| !m.is_empty());
            }
        }
        // Targets that vanished (pods come and go) are forgotten once no
        // sample of theirs is within the retention of the newest one seen,
        // with what was emitted for them: the state does not grow with
        // target churn.
        if let Some(newest) = touched.values().copied().max() {
            let cutoff = newest.saturating_sub(retention);
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
        touched
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
        if let Some(st) = self.targets.get(key) {
            let detected = schema::detect(&st.families, st.engine_label);
            if let Some(s) = detected
                && st.schema != Some(s)
            {
                let missing = schema::expectations(s)
                    .into_iter()
                    .filter(|(i, _)| !i.names.iter().any(|n| st.families.contains(*n)))
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
        let mut groups: BTreeSet<LabelPairs> = BTreeSet::new();
        for (name, m) in &v.st.series {
            if !name.starts_with("vllm:") {
                continue;
            }
            for (l, s) in m {
                if l.get("model_name").is_some() && in_window(s, v.t, v.w).is_ok() {
                    groups.insert(restrict(l, VLLM_GROUP));
                }
            }
        }
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
                for (l, s) in &v.st.series[&n] {
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
                for (l, s) in &st.series[&n] {
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
