//! The derived series of an inference server's target: one set per engine
//! group (the identifying labels of its series: `engine`, `model_name`,
//! `pod`, ...), each computed from the group's [`Rates`]. vLLM's, and the
//! servers whose inputs mean what vLLM's do (SGLang, trtllm-serve, Dynamo's
//! frontend; see `schema.rs`).

use super::rates::{PHASES, QUANTILES, Rates};
use super::view::{Keep, LabelPairs, VLLM_GROUP, View, project, same_str};
use super::{Engine, Out, TargetKey};
use crate::schema::{self, Schema, Source};
use crate::window::{Skip, sustained_above_zero};
use infertel_model::Labels;

/// The metric-name prefixes of an inference server's own series.
fn prefixes(schema: Option<Schema>) -> &'static [&'static str] {
    match schema.map(|s| s.source()) {
        Some(Source::Sglang) => &["sglang:"],
        Some(Source::Trtllm) => &["trtllm_", "trtllm:"],
        Some(Source::Dynamo) if schema == Some(Schema::DynamoWorker) => &["dynamo_component_"],
        Some(Source::Dynamo) => &["dynamo_frontend_"],
        Some(Source::Tgi) => &["tgi_"],
        Some(Source::Llamacpp) => &["llamacpp:"],
        Some(Source::Triton) => &["nv_inference_", "nv_trt_llm_", "nv_llm_"],
        _ => &["vllm:"],
    }
}

/// The identifying labels of a series (those of [`VLLM_GROUP`] it has),
/// worked out once per series; see [`groups`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Group {
    labels: LabelPairs,
    /// It has `model` or `model_name`.
    named: bool,
}

/// The index of `l`'s group in `groups`, added if new.
pub(crate) fn group_of(groups: &mut Vec<Group>, l: &Labels) -> u32 {
    let key = project(l, VLLM_GROUP);
    // `model` and `model_name` (the projection's 4th and 5th).
    let named = key[3].is_some() || key[4].is_some();
    let found = groups.iter().position(|g| {
        let mut pairs = g.labels.iter();
        VLLM_GROUP.iter().zip(&key).all(|(n, v)| match v {
            Some(v) => pairs.next().is_some_and(|(k, x)| k == n && same_str(x, v)),
            None => true,
        }) && pairs.next().is_none()
    });
    let i = found.unwrap_or_else(|| {
        let labels =
            VLLM_GROUP.iter().zip(key).filter_map(|(n, v)| v.map(|v| (n.to_string(), v.to_string()))).collect();
        groups.push(Group { labels, named });
        groups.len() - 1
    });
    i as u32
}

/// The engine groups of a target at the view's time: the identifying labels
/// of every series of its server (`vllm:`, `sglang:`, ...) that names its
/// model, with a sample in the window.
///
/// Each with its index in `TargetState::groups` (see [`Keep::group`]), in
/// the order of their labels.
pub(crate) fn groups(v: &View) -> Vec<(u32, LabelPairs)> {
    let source = v.st.detected.map(|s| s.source());
    let prefixes = prefixes(v.st.detected);
    // One TGI or llama.cpp server serves one model and names none: the
    // target is the group.
    let unnamed = matches!(source, Some(Source::Tgi | Source::Llamacpp));
    // Each series knows its group: a group is in once one of its series
    // has a sample in the window, so most series cost a look at a flag.
    let mut live = vec![false; v.st.groups.len()];
    for (name, m) in &v.st.series {
        if !prefixes.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        for e in &m.entries {
            let g = e.group as usize;
            if live.get(g).is_none_or(|&x| x) || !(unnamed || v.st.groups[g].named) {
                continue;
            }
            if v.newest_in_window(m, e.column).is_some() {
                live[g] = true;
            }
        }
    }
    let mut out: Vec<(u32, LabelPairs)> = (v.st.groups.iter().zip(live).enumerate())
        .filter(|(_, (_, x))| *x)
        .map(|(i, (g, _))| (i as u32, g.labels.clone()))
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

/// The extra labels of an emitted measurement: fixed ones, or the
/// `finished_reason` named in its key.
enum Extra<'k> {
    Fixed(&'static [(&'static str, &'static str)]),
    Reason(&'k str),
}

/// Derived series name and extra labels of each measurement key that is
/// emitted per engine. The fixed keys are spelled out once, in a table: this
/// runs for every measurement of every evaluation.
fn emitted(key: &str) -> Option<(&'static str, Extra<'_>)> {
    type Table = rustc_hash::FxHashMap<String, (&'static str, &'static [(&'static str, &'static str)])>;
    static TABLE: std::sync::LazyLock<Table> = std::sync::LazyLock::new(|| {
        // Built once per process; the label slices are leaked on purpose.
        let fixed = |v: Vec<(&'static str, &'static str)>| -> &'static [(&'static str, &'static str)] {
            if v.is_empty() { &[] } else { Box::leak(v.into_boxed_slice()) }
        };
        let mut t = Table::default();
        for (k, n) in [
            ("prefix_cache_hit_ratio", "infertel_prefix_cache_hit_ratio"),
            ("prompt_tokens_cached_ratio", "infertel_prompt_tokens_cached_ratio"),
            ("generation_tokens_per_second", "infertel_generation_tokens_per_second"),
            ("prompt_tokens_per_second", "infertel_prompt_tokens_per_second"),
            ("decode_share", "infertel_decode_share"),
            ("tokens_per_iteration", "infertel_tokens_per_iteration"),
            ("generation_to_prompt_ratio", "infertel_generation_to_prompt_ratio"),
            ("error_abort_ratio", "infertel_error_abort_ratio"),
            ("kv_cache_usage_ratio", "infertel_kv_cache_usage_ratio"),
        ] {
            t.insert(k.to_string(), (n, fixed(vec![])));
        }
        for p in PHASES {
            t.entry(format!("request_{p}_seconds_mean"))
                .or_insert(("infertel_request_phase_seconds", fixed(vec![("phase", p)])));
        }
        for (family, name) in [
            ("ttft", "infertel_time_to_first_token_seconds"),
            ("itl", "infertel_inter_token_latency_seconds"),
            ("e2e", "infertel_e2e_latency_seconds"),
        ] {
            for (_, q, suffix) in QUANTILES {
                t.entry(format!("{family}_seconds_{suffix}")).or_insert((name, fixed(vec![("quantile", q)])));
            }
        }
        t.entry("finished_ratio".to_string()).or_insert(("infertel_finished_ratio", fixed(vec![])));
        for obj in ["ttft_p95", "itl_p95", "queue", "error_abort_ratio"] {
            t.entry(format!("slo_{obj}_measured"))
                .or_insert(("infertel_slo_measured", fixed(vec![("objective", obj)])));
            t.entry(format!("slo_{obj}_ok")).or_insert(("infertel_slo_ok", fixed(vec![("objective", obj)])));
            for b in ["lower", "upper"] {
                t.entry(format!("slo_{obj}_share_{b}"))
                    .or_insert(("infertel_slo_share_within", fixed(vec![("objective", obj), ("bound", b)])));
            }
        }
        t
    });
    if let Some((name, extra)) = TABLE.get(key) {
        return Some((name, Extra::Fixed(extra)));
    }
    key.strip_prefix("finished_ratio_").map(|r| ("infertel_finished_ratio", Extra::Reason(r)))
}

impl Engine {
    pub(crate) fn eval_vllm(&self, v: &View, key: &TargetKey, schema: Schema, out: &mut Out) {
        let groups = groups(v);
        for (id, g) in &groups {
            let keep = Keep::group(*id);
            let rates = Rates::of(v, keep, schema);
            let m = rates.measures(&self.settings.objectives);
            for (k, r) in &m.0 {
                let Some((name, extra)) = emitted(k) else { continue };
                if k == "finished_ratio" {
                    // The reason why no per-reason ratio was emitted.
                    if let Err(e) = r {
                        out.skipped.push((name, *e));
                    }
                    continue;
                }
                let reason;
                let extra: &[(&str, &str)] = match extra {
                    Extra::Fixed(x) => x,
                    Extra::Reason(r) => {
                        reason = [("finished_reason", r)];
                        &reason
                    }
                };
                out.put_with(name, g, extra, *r);
            }
            // Scale signal: the KV pool nearly full, or requests waiting the
            // whole of `waiting_sustained`.
            let sc = &self.settings.scale;
            let sustained = v.pick(&schema::WAITING, "").is_some_and(|n| {
                let mut any = false;
                let all = v.st.series.get(&super::ingest::WireName(n)).is_some_and(|m| {
                    m.entries.iter().filter(|e| keep.keeps(e)).all(|e| {
                        any = true;
                        sustained_above_zero(&v.history(m, e.column), v.t, sc.waiting_sustained_ms)
                    })
                });
                any && all
            });
            let kv = rates.kv_usage();
            let sig = match (kv, rates.waiting_max()) {
                (Err(e), None) => Err(e),
                _ => Ok(if kv.is_ok_and(|k| k >= sc.kv_cache_usage) || sustained { 1.0 } else { 0.0 }),
            };
            out.put_with("infertel_scale_signal", g, &[], sig);
        }
        self.eval_http(v, key, out);
        self.eval_power(v, key, &groups, out);
    }

    /// HTTP errors per handler (no `model_name` on these); a status first
    /// seen inside the window counts from its first sample.
    fn eval_http(&self, v: &View, key: &TargetKey, out: &mut Out) {
        let base = vec![("instance".to_string(), key.instance.to_string()), ("job".to_string(), key.job.to_string())];
        // Per handler, in one pass over the series (each handler's alone).
        let Ok(handlers) = v.child_rates_by(&schema::HTTP_REQUESTS, "status", Some("handler"), Keep::ALL) else {
            return;
        };
        for (h, by) in handlers {
            let all = |by: &std::collections::BTreeMap<String, f64>| by.values().sum::<f64>();
            let r = by.as_ref().map_err(|e| *e).and_then(|by| {
                let bad: f64 =
                    by.iter().filter(|(s, _)| s.starts_with('4') || s.starts_with('5')).map(|(_, x)| x).sum();
                super::view::ratio(Ok(bad), Ok(all(by)))
            });
            out.put_with("infertel_http_error_ratio", &base, &[("handler", &h)], r);
            // Client disconnects, where something records them as 499.
            if let Ok(by) = &by
                && let Some(aborts) = by.get("499")
            {
                out.put_with(
                    "infertel_http_client_abort_ratio",
                    &base,
                    &[("handler", &h)],
                    super::view::ratio(Ok(*aborts), Ok(all(by))),
                );
            }
        }
    }

    /// The inputs of every engine of `key` at `t`, summed.
    pub(crate) fn target_rates(&self, key: &TargetKey, t: i64) -> Option<Rates> {
        let st = self.targets.get(key)?;
        let schema = st.detected.filter(|s| s.engine_derived())?;
        if st.gone {
            return None;
        }
        let v = View::new(st, t, self.settings.window_ms);
        let mut total = Rates::default();
        let mut per_group: Vec<Rates> =
            groups(&v).into_iter().map(|(id, _)| Rates::of(&v, Keep::group(id), schema)).collect();
        if schema.source() == Source::Triton {
            // Triton's models include an ensemble's steps (preprocessing, the
            // engine, postprocessing): summing them would count a request
            // several times. The model clients call spends the most time
            // (its own includes its steps'): it alone stands for the target.
            let time = |r: &Rates| r.counter("e2e").unwrap_or(f64::NEG_INFINITY);
            per_group.sort_by(|a, b| time(b).partial_cmp(&time(a)).unwrap_or(std::cmp::Ordering::Equal));
            per_group.truncate(1);
        }
        for r in &per_group {
            total.add(r);
        }
        (total.engines > 0).then_some(total)
    }

    /// The generation-token rate of a target's engines (those `keep` selects).
    pub(crate) fn generation_rate(v: &View, keep: Keep<'_>) -> Result<f64, Skip> {
        let mut sum = Err(Skip::MissingInput);
        for (_, i) in v.increases(&schema::GENERATION_TOKENS, "", keep)? {
            let r = i.map(|i| i.rate());
            sum = match (sum, r) {
                (Ok(a), Ok(b)) => Ok(a + b),
                (Err(_), Ok(b)) => Ok(b),
                (a, Err(e)) => a.or(Err(e)),
            };
        }
        sum
    }
}

/// The value of label `n` in pairs.
pub(crate) fn get(l: &LabelPairs, n: &str) -> Option<String> {
    l.iter().find(|(k, _)| k == n).map(|(_, x)| x.clone())
}
