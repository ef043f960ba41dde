//! The additive inputs of one vLLM engine (a label group of one target) and
//! every figure derived from them.
//!
//! Rates add: a fleet's inputs are the sum of its engines', so a fleet figure
//! is `sum(rate(x)) / sum(rate(y))` and a fleet quantile is read from the
//! summed bucket rates, as the article's PromQL computes them. The derived
//! series of one engine and `report`'s fleet and instance rows are computed
//! by the same [`Rates::measures`], so they cannot disagree.

use super::Objectives;
use super::view::{Keep, MaxPri, View, ratio};
use crate::schema::{self, Input, Schema, Source};
use crate::window::{Cumulative, Skip};
use infertel_model::Labels;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Counters read as rates: (key, input, suffix).
const COUNTERS: &[(&str, &Input, &str)] = &[
    ("prompt", &schema::PROMPT_TOKENS, ""),
    ("generation", &schema::GENERATION_TOKENS, ""),
    ("prompt_cached", &schema::PROMPT_TOKENS_CACHED, ""),
    ("prefix_hits", &schema::PREFIX_HITS, ""),
    ("prefix_queries", &schema::PREFIX_QUERIES, ""),
    ("prefix_misses", &schema::PREFIX_MISSES, ""),
    ("requests", &schema::E2E, "_count"),
    ("queue", &schema::QUEUE, "_sum"),
    ("prefill", &schema::PREFILL, "_sum"),
    ("decode", &schema::DECODE, "_sum"),
    ("inference", &schema::INFERENCE, "_sum"),
    ("e2e", &schema::E2E, "_sum"),
    ("iteration_sum", &schema::ITERATION_TOKENS, "_sum"),
    ("iteration_count", &schema::ITERATION_TOKENS, "_count"),
    ("request_generation_sum", &schema::REQUEST_GENERATION_TOKENS, "_sum"),
    ("request_prompt_sum", &schema::REQUEST_PROMPT_TOKENS, "_sum"),
    ("request_prompt_count", &schema::REQUEST_PROMPT_TOKENS, "_count"),
    ("max_tokens_sum", &schema::MAX_TOKENS, "_sum"),
    ("max_tokens_count", &schema::MAX_TOKENS, "_count"),
    ("preemptions", &schema::PREEMPTIONS, ""),
    ("spec_drafts", &schema::SPEC_DRAFTS, ""),
    ("spec_draft_tokens", &schema::SPEC_DRAFT_TOKENS, ""),
    ("spec_accepted", &schema::SPEC_ACCEPTED, ""),
];

/// Histograms read as bucket rates: (key, input).
const HISTOGRAMS: &[(&str, &Input)] = &[("ttft", &schema::TTFT), ("itl", &schema::ITL), ("e2e", &schema::E2E)];

/// The phases of a request, each a histogram `_sum` per finished request.
pub const PHASES: [&str; 5] = ["queue", "prefill", "decode", "inference", "e2e"];

/// The quantiles derived from each latency histogram, and their key suffix.
pub const QUANTILES: [(f64, &str, &str); 3] = [(0.5, "0.5", "p50"), (0.95, "0.95", "p95"), (0.99, "0.99", "p99")];

// Measurement keys spelled out, so that computing them allocates nothing
// (an evaluation puts about 90 per engine); `keys_are_spelled_as_built`
// checks them against the patterns they follow.

/// `request_{phase}_seconds_mean`, in the order of [`PHASES`].
const PHASE_KEYS: [&str; 5] = [
    "request_queue_seconds_mean",
    "request_prefill_seconds_mean",
    "request_decode_seconds_mean",
    "request_inference_seconds_mean",
    "request_e2e_seconds_mean",
];

/// `{histogram}_seconds_{p50,p95,p99}`, in the order of [`QUANTILES`].
const QUANTILE_KEYS: [(&str, [&str; 3]); 3] = [
    ("ttft", ["ttft_seconds_p50", "ttft_seconds_p95", "ttft_seconds_p99"]),
    ("itl", ["itl_seconds_p50", "itl_seconds_p95", "itl_seconds_p99"]),
    ("e2e", ["e2e_seconds_p50", "e2e_seconds_p95", "e2e_seconds_p99"]),
];

/// The keys of a latency objective `{obj}`: `slo_{obj}_measured`,
/// `headroom_{obj}`, `slo_{obj}_share_lower`, `slo_{obj}_share_upper`,
/// `slo_{obj}_bucket_lower`, `slo_{obj}_bucket_upper`, `slo_{obj}_ok`.
struct ObjectiveKeys {
    /// The objective the keys spell (read by the test of the spellings).
    #[cfg_attr(not(test), allow(dead_code))]
    obj: &'static str,
    measured: &'static str,
    headroom: &'static str,
    share_lower: &'static str,
    share_upper: &'static str,
    bucket_lower: &'static str,
    bucket_upper: &'static str,
    ok: &'static str,
}

const OBJECTIVE_KEYS: [ObjectiveKeys; 2] = [
    ObjectiveKeys {
        obj: "ttft_p95",
        measured: "slo_ttft_p95_measured",
        headroom: "headroom_ttft_p95",
        share_lower: "slo_ttft_p95_share_lower",
        share_upper: "slo_ttft_p95_share_upper",
        bucket_lower: "slo_ttft_p95_bucket_lower",
        bucket_upper: "slo_ttft_p95_bucket_upper",
        ok: "slo_ttft_p95_ok",
    },
    ObjectiveKeys {
        obj: "itl_p95",
        measured: "slo_itl_p95_measured",
        headroom: "headroom_itl_p95",
        share_lower: "slo_itl_p95_share_lower",
        share_upper: "slo_itl_p95_share_upper",
        bucket_lower: "slo_itl_p95_bucket_lower",
        bucket_upper: "slo_itl_p95_bucket_upper",
        ok: "slo_itl_p95_ok",
    },
];

/// Bucket rates (upper bound, rate) of one histogram, or why there are none.
type Buckets = Result<Vec<(f64, f64)>, Skip>;

/// The index of counter `k` in [`COUNTERS`] (and in `Rates::counters`).
fn counter_at(k: &str) -> Option<usize> {
    COUNTERS.iter().position(|(n, _, _)| *n == k)
}

/// The index of histogram `k` in [`HISTOGRAMS`] (and in `Rates::histograms`).
fn histogram_at(k: &str) -> Option<usize> {
    HISTOGRAMS.iter().position(|(n, _)| *n == k)
}

/// The additive inputs of one engine, or of a sum of engines.
#[derive(Clone, Debug)]
pub struct Rates {
    /// Per counter of [`COUNTERS`], in its order: an evaluation sets all
    /// of them and reads most, per engine, and keyed by name in a map each
    /// insert and lookup compared strings.
    counters: [Result<f64, Skip>; COUNTERS.len()],
    /// Per histogram of [`HISTOGRAMS`], in its order.
    histograms: [Buckets; HISTOGRAMS.len()],
    finished: Result<BTreeMap<String, f64>, Skip>,
    /// The last KV-cache usage of each engine.
    kv: Vec<f64>,
    kv_err: Skip,
    /// The most requests waiting in the window, per engine.
    waiting_max: Vec<f64>,
    /// Mean requests running over the window, per engine.
    running_mean: Vec<f64>,
    /// V0's lifetime prefix-cache hit rate gauge, per engine (-1 dropped).
    v0_hit_rate: Vec<f64>,
    v0: bool,
    /// Engines summed.
    pub engines: usize,
    /// Per counter of [`COUNTERS`], how many of the engines summed expose it.
    present: [usize; COUNTERS.len()],
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            counters: [Err(Skip::MissingInput); COUNTERS.len()],
            histograms: std::array::from_fn(|_| Err(Skip::MissingInput)),
            finished: Err(Skip::MissingInput),
            kv: Vec::new(),
            kv_err: Skip::MissingInput,
            waiting_max: Vec::new(),
            running_mean: Vec::new(),
            v0_hit_rate: Vec::new(),
            v0: false,
            engines: 0,
            present: [0; COUNTERS.len()],
        }
    }
}

/// The distinct upper bounds of a histogram's bucket rates, sorted.
fn bounds(b: &[(f64, f64)]) -> Vec<u64> {
    let mut v: Vec<u64> = b.iter().map(|(le, _)| le.to_bits()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Sum of two results: the present values add (PromQL's `sum` over the
/// series that exist); only when neither is present is it an error.
fn add(a: Result<f64, Skip>, b: Result<f64, Skip>) -> Result<f64, Skip> {
    match (a, b) {
        (Ok(x), Ok(y)) => Ok(x + y),
        (Ok(x), Err(_)) | (Err(_), Ok(x)) => Ok(x),
        (Err(x), Err(y)) => Err(x.max_pri(y)),
    }
}

impl Rates {
    /// The inputs of the series `keep` selects in `v` (one engine group).
    pub(crate) fn of(v: &View, keep: Keep<'_>, schema: Schema) -> Rates {
        let mut r = Rates { engines: 1, v0: schema.is_v0(), ..Rates::default() };
        for ((_, input, suffix), to) in COUNTERS.iter().zip(&mut r.counters) {
            *to = v.rate(input, suffix, keep);
        }
        // Before 0.16 there is no prompt_tokens_cached: from 0.9.0 the prefix
        // cache counts tokens, so its hits are the cached prompt tokens. The
        // schema decides (after a downgrade the old series lingers in the
        // window with too few samples to say anything).
        if schema.source() == Source::Vllm
            && schema != Schema::VllmV1Current
            && !schema.prefix_cache_in_blocks()
            && !schema.is_v0()
        {
            r.set_counter("prompt_cached", r.counter("prefix_hits"));
        }
        for ((_, input), to) in HISTOGRAMS.iter().zip(&mut r.histograms) {
            *to = v.buckets(input, keep);
        }
        if schema.source() == Source::Triton {
            r.triton(v, keep);
        }
        if schema == Schema::DynamoWorker {
            // One gauge per data-parallel rank (0-1 each, despite the name):
            // the engine's usage is their mean.
            let ranks: Vec<f64> = v
                .select(&schema::DYNAMO_WORKER_KV_USAGE_IN, "", keep)
                .map(|sel| sel.iter().filter_map(|(_, s)| super::view::GaugeStats::of(s)).map(|g| g.last).collect())
                .unwrap_or_default();
            if !ranks.is_empty() {
                r.kv = vec![ranks.iter().sum::<f64>() / ranks.len() as f64];
            }
        }
        r.finished = v.child_rates(&schema::SUCCESS, "finished_reason", keep);
        match v.gauge(&schema::KV_USAGE, keep) {
            Ok(g) => r.kv.push(g.last),
            Err(e) => r.kv_err = e,
        }
        if let Ok(g) = v.gauge(&schema::WAITING, keep) {
            r.waiting_max.push(g.max);
        }
        if let Ok(g) = v.gauge(&schema::RUNNING, keep) {
            r.running_mean.push(g.mean);
        }
        if r.v0
            && let Ok(g) = v.gauge(&schema::PREFIX_HIT_RATE_V0, keep)
            && g.last >= 0.0
        {
            r.v0_hit_rate.push(g.last);
        }
        // An engine has a counter when it exposes the family, whatever its
        // window says (a replica that just started still belongs).
        for (v, n) in r.counters.iter().zip(&mut r.present) {
            *n = usize::from(!matches!(v, Err(Skip::MissingInput)));
        }
        r
    }

    /// Triton's inputs, in their units: time spent in microseconds (the
    /// requests' total and queue time, so their means), the successful
    /// requests, the first response of a streaming (decoupled) model in
    /// milliseconds as the time to first token, and the KV pool's used
    /// fraction (`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=
    /// "fraction"}`).
    fn triton(&mut self, v: &View, keep: Keep<'_>) {
        let us = |input: &Input| v.rate(input, "", keep).map(|x| x * 1e-6);
        self.set_counter("requests", v.rate(&schema::TRITON_SUCCESS_IN, "", keep));
        self.set_counter("e2e", us(&schema::TRITON_DURATION_US));
        self.set_counter("queue", us(&schema::TRITON_QUEUE_US));
        self.set_histogram(
            "ttft",
            v.buckets(&schema::TRITON_FIRST_RESPONSE_MS, keep)
                .map(|b| b.into_iter().map(|(le, r)| (le * 1e-3, r)).collect()),
        );
        let fraction = |l: &Labels| keep.labels(l) && l.get("kv_cache_block_type") == Some("fraction");
        match v.gauge(&schema::TRITON_KV_BLOCK_METRICS, keep.with(&fraction)) {
            Ok(g) => self.kv.push(g.last),
            Err(e) => self.kv_err = e,
        }
    }

    /// Adds another engine's inputs.
    pub fn add(&mut self, o: &Rates) {
        // A counter or histogram the other has not (missing) leaves this
        // one's as it is: `add` and the match below keep the present side,
        // or the more telling reason.
        for (cur, v) in self.counters.iter_mut().zip(&o.counters) {
            *cur = add(*cur, *v);
        }
        for (slot, v) in self.histograms.iter_mut().zip(&o.histograms) {
            let cur = std::mem::replace(slot, Err(Skip::MissingInput));
            let sum = match (cur, v) {
                // Summed bucket by bucket, as `sum by (le)` does: only
                // histograms with the same bounds can be (interleaved bounds
                // would make the cumulative counts wrong).
                // A histogram that observed nothing adds nothing.
                (Ok(a), Ok(b)) if b.iter().all(|(_, r)| *r == 0.0) => Ok(a),
                (Ok(a), Ok(b)) if a.iter().all(|(_, r)| *r == 0.0) => Ok(b.clone()),
                (Ok(a), Ok(b)) if bounds(&a) != bounds(b) => Err(Skip::MismatchedBuckets),
                (Ok(mut a), Ok(b)) => {
                    a.extend(b.iter().copied());
                    Ok(a)
                }
                (Ok(a), Err(_)) => Ok(a),
                (Err(_), Ok(b)) => Ok(b.clone()),
                (Err(x), Err(y)) => Err(x.max_pri(*y)),
            };
            *slot = sum;
        }
        self.finished = match (std::mem::replace(&mut self.finished, Err(Skip::MissingInput)), &o.finished) {
            (Ok(mut a), Ok(b)) => {
                for (k, v) in b {
                    *a.entry(k.clone()).or_default() += v;
                }
                Ok(a)
            }
            // A server that reports no outcomes beside one that does: shares
            // of one's requests are not the sum's.
            (Ok(_), Err(Skip::MissingInput)) | (Err(Skip::MissingInput), Ok(_)) if self.engines > 0 => {
                Err(Skip::MissingInput)
            }
            (Ok(a), Err(_)) => Ok(a),
            (Err(_), Ok(b)) => Ok(b.clone()),
            (Err(x), Err(y)) => Err(x.max_pri(*y)),
        };
        self.kv.extend(&o.kv);
        self.kv_err = self.kv_err.max_pri(o.kv_err);
        self.waiting_max.extend(&o.waiting_max);
        self.running_mean.extend(&o.running_mean);
        self.v0_hit_rate.extend(&o.v0_hit_rate);
        self.v0 |= o.v0;
        self.engines += o.engines;
        for (n, o) in self.present.iter_mut().zip(&o.present) {
            *n += o;
        }
    }

    pub(crate) fn counter(&self, k: &str) -> Result<f64, Skip> {
        counter_at(k).map_or(Err(Skip::MissingInput), |i| self.counters[i])
    }

    fn set_counter(&mut self, k: &str, v: Result<f64, Skip>) {
        let i = counter_at(k);
        debug_assert!(i.is_some(), "no counter {k}");
        if let Some(i) = i {
            self.counters[i] = v;
        }
    }

    fn set_histogram(&mut self, k: &str, v: Buckets) {
        let i = histogram_at(k);
        debug_assert!(i.is_some(), "no histogram {k}");
        if let Some(i) = i {
            self.histograms[i] = v;
        }
    }

    /// Each histogram's buckets made cumulative once, in the order of
    /// [`HISTOGRAMS`]: [`measures`](Self::measures) reads eleven quantiles
    /// and two shares of three histograms, and sorted and merged the same
    /// buckets again for each.
    fn cumulative(&self) -> [Result<Cumulative, Skip>; HISTOGRAMS.len()] {
        std::array::from_fn(|i| self.histograms[i].as_ref().map(|b| Cumulative::of(b)).map_err(|e| *e))
    }

    /// The KV-cache usage: of the engine, or the mean over the engines summed.
    pub(crate) fn kv_usage(&self) -> Result<f64, Skip> {
        if self.kv.is_empty() { Err(self.kv_err) } else { Ok(self.kv.iter().sum::<f64>() / self.kv.len() as f64) }
    }

    pub(crate) fn waiting_max(&self) -> Option<f64> {
        self.waiting_max.iter().copied().reduce(f64::max)
    }

    /// Every figure these inputs give, by measurement key (see
    /// [`Measures`]); what cannot be computed is kept with its reason.
    pub fn measures(&self, o: &Objectives) -> Measures {
        let mut m = Measures::default();
        let cumulative = self.cumulative();
        let buckets =
            |k: &str| histogram_at(k).map_or(Err(Skip::MissingInput), |i| cumulative[i].as_ref().map_err(|e| *e));
        let quantile = |k: &str, q: f64| match buckets(k)?.quantile(q) {
            Some(x) if x.is_finite() => Ok(x),
            Some(_) => Err(Skip::NonFinite),
            None => Err(Skip::ZeroDenominator),
        };
        let c = |k: &str| self.counter(k);
        // An operand of a ratio must come from every engine summed: a mixed
        // fleet (a server without prefill histograms beside vLLM) would
        // otherwise divide one population's time by another's requests. A
        // rate alone is the sum of the engines that have it.
        let cr = |k: &str| {
            let all = counter_at(k).map_or(0, |i| self.present[i]) == self.engines || self.engines <= 1;
            if all { self.counter(k) } else { Err(Skip::MissingInput) }
        };
        let prefix = if self.v0 {
            if self.v0_hit_rate.is_empty() {
                Err(Skip::MissingInput)
            } else {
                Ok(self.v0_hit_rate.iter().sum::<f64>() / self.v0_hit_rate.len() as f64)
            }
        } else {
            match (cr("prefix_queries"), cr("prefix_misses")) {
                // TensorRT-LLM counts reused and missed blocks: queries are both.
                (Err(Skip::MissingInput), Ok(miss)) => ratio(cr("prefix_hits"), cr("prefix_hits").map(|h| h + miss)),
                (q, _) => ratio(cr("prefix_hits"), q),
            }
        };
        m.put("prefix_cache_hit_ratio", prefix);
        m.put("prompt_tokens_cached_ratio", ratio(cr("prompt_cached"), cr("prompt")));
        m.put("generation_tokens_per_second", c("generation"));
        m.put("prompt_tokens_per_second", c("prompt"));
        let requests = c("requests");
        let requests_all = cr("requests");
        for (p, key) in PHASES.into_iter().zip(PHASE_KEYS) {
            m.put(key, ratio(cr(p), requests_all));
        }
        m.put("decode_share", ratio(cr("decode"), cr("e2e")));
        for (key, names) in QUANTILE_KEYS {
            for ((q, _, _), name) in QUANTILES.into_iter().zip(names) {
                m.put(name, quantile(key, q));
            }
        }
        m.put("tokens_per_iteration", ratio(cr("iteration_sum"), cr("iteration_count")));
        let shape = match ratio(cr("request_generation_sum"), cr("request_prompt_sum")) {
            Err(Skip::MissingInput) => ratio(cr("generation"), cr("prompt")),
            r => r,
        };
        m.put("generation_to_prompt_ratio", shape);
        // The article's per-request figures.
        m.put("requests_per_minute", requests.map(|r| r * 60.0));
        m.put("prompt_tokens_per_request_mean", ratio(cr("request_prompt_sum"), cr("request_prompt_count")));
        m.put("generation_tokens_per_request_mean", ratio(cr("request_generation_sum"), requests_all));
        m.put("max_tokens_per_request_mean", ratio(cr("max_tokens_sum"), cr("max_tokens_count")));
        m.put("preemptions_per_minute", c("preemptions").map(|r| r * 60.0));
        m.put("spec_decode_acceptance_ratio", ratio(cr("spec_accepted"), cr("spec_draft_tokens")));
        m.put("spec_decode_mean_acceptance_length", ratio(cr("spec_accepted"), cr("spec_drafts")).map(|x| 1.0 + x));
        // Outcomes.
        let error_abort;
        match &self.finished {
            Err(e) => {
                m.put("finished_ratio", Err(*e));
                error_abort = Err(*e);
            }
            Ok(by) => {
                let total: f64 = by.values().sum();
                if total == 0.0 {
                    m.put("finished_ratio", Err(Skip::ZeroDenominator));
                    error_abort = Err(Skip::ZeroDenominator);
                } else {
                    for (reason, x) in by {
                        m.put(format!("finished_ratio_{reason}"), Ok(x / total));
                    }
                    let ea = by.get("error").copied().unwrap_or(0.0) + by.get("abort").copied().unwrap_or(0.0);
                    error_abort = ratio(Ok(ea), Ok(total));
                }
            }
        }
        m.put("error_abort_ratio", error_abort);
        m.put("kv_cache_usage_ratio", self.kv_usage());
        if let Some(w) = self.waiting_max() {
            m.put("num_requests_waiting_max", Ok(w));
        }
        if !self.running_mean.is_empty() {
            let running: f64 = self.running_mean.iter().sum();
            m.put("num_requests_running_mean", Ok(running));
            // Batching health: in decode each running request adds about one
            // token per engine step, so tokens per iteration should be near
            // the requests running per engine.
            let per_engine = running / self.running_mean.len() as f64;
            m.put(
                "tokens_per_iteration_per_running_request",
                ratio(m.get_result("tokens_per_iteration"), Ok(per_engine)),
            );
        }
        // Objectives.
        let [ttft, itl] = &OBJECTIVE_KEYS;
        for (k, key, target, share_q) in [(ttft, "ttft", o.ttft_p95, 0.95), (itl, "itl", o.itl_p95, 0.95)] {
            let measured = quantile(key, 0.95);
            m.put(k.measured, measured);
            m.put(k.headroom, ratio(Ok(target), measured));
            let share = buckets(key).and_then(|b| b.share_within(target).ok_or(Skip::ZeroDenominator));
            match share {
                Ok(w) => {
                    m.put(k.share_lower, Ok(w.lower));
                    m.put(k.share_upper, Ok(w.upper));
                    if let Some(b) = w.lower_bound {
                        m.put(k.bucket_lower, Ok(b));
                    }
                    if w.upper_bound.is_finite() {
                        m.put(k.bucket_upper, Ok(w.upper_bound));
                    }
                    // Decided only where both bounds agree with each other.
                    let ok = if w.lower >= share_q {
                        Ok(1.0)
                    } else if w.upper < share_q {
                        Ok(0.0)
                    } else {
                        Err(Skip::Indeterminate)
                    };
                    m.put(k.ok, ok);
                }
                Err(e) => m.put(k.ok, Err(e)),
            }
        }
        let queue = m.get_result("request_queue_seconds_mean");
        m.put("slo_queue_measured", queue);
        let no_wait = self.waiting_max().is_none_or(|w| w <= 0.0);
        m.put("slo_queue_ok", queue.map(|q| if q <= o.queue_time_max && no_wait { 1.0 } else { 0.0 }));
        m.put("slo_error_abort_ratio_measured", error_abort);
        m.put("slo_error_abort_ratio_ok", error_abort.map(|x| if x <= o.error_abort_ratio { 1.0 } else { 0.0 }));
        m
    }
}

/// Figures by measurement key: ratios 0–1, seconds, tokens/s, per minute.
/// Keys are `report`'s measurement names (`request_decode_seconds_mean`,
/// `ttft_seconds_p95`, `finished_ratio_length`, `slo_ttft_p95_ok`, ...).
/// Keys are mostly constants: only `finished_ratio_{reason}` is built.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measures(pub BTreeMap<Cow<'static, str>, Result<f64, Skip>>);

impl Measures {
    pub(crate) fn put(&mut self, k: impl Into<Cow<'static, str>>, v: Result<f64, Skip>) {
        let v = match v {
            Ok(x) if !x.is_finite() => Err(Skip::NonFinite),
            v => v,
        };
        self.0.insert(k.into(), v);
    }

    pub fn get(&self, k: &str) -> Option<f64> {
        self.0.get(k).and_then(|v| v.ok())
    }

    pub fn get_result(&self, k: &str) -> Result<f64, Skip> {
        self.0.get(k).copied().unwrap_or(Err(Skip::MissingInput))
    }

    /// The values that could be computed.
    pub fn values(&self) -> BTreeMap<String, f64> {
        self.0.iter().filter_map(|(k, v)| v.ok().map(|v| (k.to_string(), v))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_spelled_as_built() {
        for (p, k) in PHASES.into_iter().zip(PHASE_KEYS) {
            assert_eq!(k, format!("request_{p}_seconds_mean"));
        }
        for (name, keys) in QUANTILE_KEYS {
            for ((_, _, suffix), k) in QUANTILES.into_iter().zip(keys) {
                assert_eq!(k, format!("{name}_seconds_{suffix}"));
            }
        }
        for k in &OBJECTIVE_KEYS {
            let obj = k.obj;
            assert_eq!(k.measured, format!("slo_{obj}_measured"));
            assert_eq!(k.headroom, format!("headroom_{obj}"));
            assert_eq!(k.share_lower, format!("slo_{obj}_share_lower"));
            assert_eq!(k.share_upper, format!("slo_{obj}_share_upper"));
            assert_eq!(k.bucket_lower, format!("slo_{obj}_bucket_lower"));
            assert_eq!(k.bucket_upper, format!("slo_{obj}_bucket_upper"));
            assert_eq!(k.ok, format!("slo_{obj}_ok"));
        }
    }
}
