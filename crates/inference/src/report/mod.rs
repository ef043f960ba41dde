//! `infertel report`: verdicts against the objectives and the
//! recommendations the measured numbers support, each citing its numbers.

use crate::engine::{Engine, Measures, Objectives, Settings, TargetKey};
use crate::schema::Source;
use crate::window::Skip;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use wording::*;

mod render;
mod wording;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TargetInfo {
    pub job: String,
    pub instance: String,
    pub schema: Option<String>,
    /// `vllm`, `sglang`, ... (none for dcgm-exporter).
    pub inference_server: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Verdict {
    /// `ttft_p95`, `itl_p95`, `queue`, `error_abort_ratio`.
    pub objective: String,
    /// `fleet`, or `worst instance <job>/<instance>`.
    pub scope: String,
    pub target: String,
    pub measured: String,
    /// `PASS`, `FAIL`, `INDETERMINATE` or `NO DATA`.
    pub verdict: String,
    pub value: Option<f64>,
    /// For latency objectives: the share of requests within the objective,
    /// bounded below and above by the histogram's buckets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_within: Option<(f64, f64)>,
    /// Why the verdict is what it is, where it needs saying.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Evidence {
    pub metric: String,
    pub value: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Recommendation {
    pub id: String,
    pub text: String,
    pub evidence: Vec<Evidence>,
}

/// One inference-server instance's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Instance {
    pub job: String,
    pub instance: String,
    pub inference_server: Option<String>,
    pub engines: usize,
    pub measurements: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub window_seconds: f64,
    pub targets: Vec<TargetInfo>,
    pub verdicts: Vec<Verdict>,
    /// The fleet's figures by name (ratios 0–1, seconds, tokens/s, ...):
    /// `sum(rate(x)) / sum(rate(y))` over every engine of every instance,
    /// quantiles from the summed bucket rates.
    pub measurements: BTreeMap<String, f64>,
    pub instances: Vec<Instance>,
    /// With more than one kind of inference server, each one's fleet
    /// figures (its targets summed as the whole fleet's are).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub servers: BTreeMap<String, BTreeMap<String, f64>>,
    pub recommendations: Vec<Recommendation>,
    /// What the numbers cannot show.
    pub notes: Vec<String>,
}

/// The verdict of one objective on one set of figures.
fn verdict(objective: &str, scope: String, target: String, m: &Measures, o: &Objectives) -> Verdict {
    let value = m.get(&format!("slo_{objective}_measured"));
    let ok = m.get_result(&format!("slo_{objective}_ok"));
    let g = |k: &str| m.get(&format!("slo_{objective}_{k}"));
    let share_within = match (g("share_lower"), g("share_upper")) {
        (Some(l), Some(u)) => Some((l, u)),
        _ => None,
    };
    let mut measured = match (objective, value) {
        (_, None) => "n/a".to_string(),
        ("ttft_p95", Some(v)) => format!("p95 ≈ {}", ms(v)),
        ("itl_p95", Some(v)) => format!("p95 ≈ {} (≈{:.0} tok/s)", ms(v), 1.0 / v),
        ("queue", Some(v)) => format!(
            "{}, waiting max {}",
            ms(v),
            m.get("num_requests_waiting_max").map_or("n/a".into(), |w| format!("{w}"))
        ),
        (_, Some(v)) => format!("{:.2}%", v * 100.0),
    };
    if let Some((l, u)) = share_within {
        if l == u {
            let _ = write!(measured, "; {} within", pct(l));
        } else {
            let _ = write!(measured, "; {}–{} within", pct(l), pct(u));
        }
    }
    let mut note = String::new();
    let verdict = match ok {
        Ok(x) if x >= 1.0 => "PASS",
        Ok(_) => "FAIL",
        Err(Skip::Indeterminate) => {
            let obj = if objective == "ttft_p95" { o.ttft_p95 } else { o.itl_p95 };
            let lower = g("bucket_lower");
            let upper = g("bucket_upper");
            note = format!(
                "the objective {} lies inside the bucket ({}, {}]: between {} and {} of requests were within it, so the buckets cannot say whether 95% were; an objective at a bucket boundary ({}) would decide it",
                secs(obj),
                lower.map_or("0".into(), secs),
                upper.map_or("+Inf".into(), secs),
                share_within.map_or("n/a".into(), |s| pct(s.0)),
                share_within.map_or("n/a".into(), |s| pct(s.1)),
                [lower, upper].iter().flatten().map(|b| secs(*b)).collect::<Vec<_>>().join(" or "),
            );
            "INDETERMINATE"
        }
        Err(Skip::MismatchedBuckets) => {
            note = "the servers' histograms have different buckets, so no quantile of their sum means anything: see each server's fleet".into();
            "NO DATA"
        }
        Err(_) => "NO DATA",
    };
    Verdict { objective: objective.into(), scope, target, measured, verdict: verdict.into(), value, share_within, note }
}

/// Orders verdicts from worst to best: FAIL, INDETERMINATE, PASS, NO DATA;
/// within one, the larger measured value.
fn badness(v: &Verdict) -> (u8, f64) {
    let rank = match v.verdict.as_str() {
        "FAIL" => 3,
        "INDETERMINATE" => 2,
        "PASS" => 1,
        _ => 0,
    };
    (rank, v.value.unwrap_or(f64::NEG_INFINITY))
}

/// Evaluates every target at `end_ms` over the engine's window and builds the report.
pub fn build(engine: &mut Engine, end_ms: i64) -> Report {
    let keys: Vec<TargetKey> = engine.targets().cloned().collect();
    // One pass learns every target's schema (logged once); its derived
    // series give the per-engine scale signals.
    let derived: BTreeMap<TargetKey, Vec<crate::engine::Derived>> =
        keys.iter().map(|k| (k.clone(), engine.evaluate(k, end_ms).derived)).collect();
    let signal_on = |k: &TargetKey| {
        derived.get(k).is_some_and(|d| d.iter().any(|x| x.name == "infertel_scale_signal" && x.value == 1.0))
    };
    let targets: Vec<TargetInfo> = keys
        .iter()
        .map(|k| TargetInfo {
            job: k.job.to_string(),
            instance: k.instance.to_string(),
            schema: engine.schema(k).map(|s| s.as_str().to_string()),
            inference_server: engine.schema(k).and_then(|s| s.source().inference_server()).map(str::to_string),
        })
        .collect();
    // The kinds of server in the fleet, for the figures per kind and for
    // recommendations worded in each one's metric names and flags.
    let sources: Vec<Source> = {
        let mut v: Vec<Source> = keys
            .iter()
            .filter_map(|k| engine.schema(k).map(|s| s.source()))
            .filter(|s| s.inference_server().is_some())
            .collect();
        // vLLM first, then the others by name.
        v.sort_by_key(|s| (*s != Source::Vllm, s.inference_server()));
        v.dedup();
        v
    };
    let s: Settings = engine.settings.clone();
    let o = &s.objectives;
    let fleet = engine.fleet(end_ms);
    let fm = &fleet.measures;
    let m = fm.values();
    let instances: Vec<Instance> = fleet
        .rows
        .iter()
        .map(|r| Instance {
            job: r.target.job.to_string(),
            instance: r.target.instance.to_string(),
            inference_server: r.server.map(str::to_string),
            engines: r.engines,
            measurements: r.measures.values(),
        })
        .collect();
    let targets_of = |o: &str| -> String {
        match o {
            "ttft_p95" => format!("p95 ≤ {}", ms(s.objectives.ttft_p95)),
            "itl_p95" => format!("p95 ≤ {}", ms(s.objectives.itl_p95)),
            "queue" => format!("mean ≤ {}, waiting 0", ms(s.objectives.queue_time_max)),
            _ => format!("≤ {}", pct(s.objectives.error_abort_ratio)),
        }
    };
    let mixed = fleet.servers.len() > 1;
    let mut verdicts = Vec::new();
    for obj in ["ttft_p95", "itl_p95", "queue", "error_abort_ratio"] {
        verdicts.push(verdict(obj, "fleet".into(), targets_of(obj), fm, o));
        // A mixed fleet: each server's fleet too.
        if mixed {
            for (server, sm) in &fleet.servers {
                verdicts.push(verdict(obj, format!("fleet {server}"), targets_of(obj), sm, o));
            }
        }
        // With more than one instance, the worst one too, named.
        if fleet.rows.len() > 1 {
            let worst = fleet
                .rows
                .iter()
                .map(|r| verdict(obj, format!("worst instance {}", r.target), targets_of(obj), &r.measures, o))
                .max_by(|a, b| badness(a).partial_cmp(&badness(b)).unwrap_or(std::cmp::Ordering::Equal));
            verdicts.extend(worst);
        }
    }
    let waiting_max = m.get("num_requests_waiting_max").copied();
    let v1 = targets.iter().any(|t| t.schema.as_deref().is_some_and(|x| x.starts_with("vllm-v1")));
    let mut notes = Vec::new();
    if v1 {
        notes.push("vLLM V1 does not count client aborts (vLLM issue #31503): finished_reason=\"abort\" stays 0 and aborted requests are in no latency histogram, so the error/abort objective cannot see clients that gave up.".to_string());
    }
    // What a server cannot give, and so which objective cannot be judged
    // for its targets.
    for src in &sources {
        let Some(schema) = keys.iter().filter_map(|k| engine.schema(k)).find(|s| s.source() == *src) else { continue };
        for (series, why) in schema.not_derived() {
            notes.push(format!("{}: {series} is not derived: {why}.", src.display_name()));
        }
    }
    if targets.iter().any(|t| t.schema.as_deref() == Some("vllm-v0")) {
        notes.push("vLLM V0's prefix-cache hit rate (vllm:gpu_prefix_cache_hit_rate) is an average over the engine's lifetime, not over the window.".to_string());
    }
    let mut recs = Vec::new();
    let ev = |pairs: &[(&str, Option<f64>)]| -> Vec<Evidence> {
        pairs.iter().filter_map(|(k, v)| v.map(|v| Evidence { metric: k.to_string(), value: v })).collect()
    };
    let g = |k: &str| m.get(k).copied();
    // Instances whose figure `k` differs from the fleet's by more than a
    // quarter, named in the recommendations that cite it.
    let differ = |k: &str, fmt: &dyn Fn(f64) -> String| -> String {
        let Some(f) = g(k) else { return String::new() };
        let odd: Vec<String> = instances
            .iter()
            .filter_map(|i| i.measurements.get(k).map(|v| (i, *v)))
            .filter(|(_, v)| (v - f).abs() > 0.25 * f.abs().max(1e-12))
            .map(|(i, v)| format!("{}/{} {}", i.job, i.instance, fmt(v)))
            .collect();
        if odd.is_empty() || instances.len() < 2 {
            String::new()
        } else {
            format!(" Instances that differ: {}.", odd.join(", "))
        }
    };
    if let Some(share) = g("decode_share").filter(|s| *s >= 0.8) {
        let mut text = format!(
            "Decode takes {} of request time ({} decode vs {} prefill per request)",
            pct(share),
            g("request_decode_seconds_mean").map(ms).unwrap_or("n/a".into()),
            g("request_prefill_seconds_mean").map(ms).unwrap_or("n/a".into())
        );
        if let (Some(d), Some(t)) = (g("dram_active_mean"), g("tensor_active_mean")) {
            // The article's triad: GPU_UTIL says busy, the graphics engine
            // is busy, yet the tensor pipes idle while DRAM is saturated.
            let mut triad = Vec::new();
            if let Some(u) = g("gpu_util_percent_mean") {
                triad.push(format!("GPU_UTIL {u:.1}%"));
            }
            if let Some(gr) = g("gr_engine_active_mean") {
                triad.push(format!("graphics engine {} busy", pct(gr)));
            }
            let _ = write!(
                text,
                "; on the serving GPUs {}DRAM active {} vs tensor pipe {}",
                triad.iter().map(|x| format!("{x}, ")).collect::<String>(),
                pct(d),
                pct(t)
            );
            if g("memory_bound") == Some(1.0) {
                text.push_str(": memory-bandwidth bound");
            }
        }
        text.push_str(". Quantize (FP8/AWQ) or add tensor parallelism before buying hardware; prefill optimizations (chunked prefill, prompt compression) will not help this workload.");
        text.push_str(&differ("decode_share", &pct));
        recs.push(Recommendation {
            id: "decode_bound".into(),
            text,
            evidence: ev(&[
                ("infertel_decode_share", Some(share)),
                ("infertel_request_phase_seconds{phase=\"decode\"}", g("request_decode_seconds_mean")),
                ("infertel_request_phase_seconds{phase=\"prefill\"}", g("request_prefill_seconds_mean")),
                ("DCGM_FI_PROF_DRAM_ACTIVE", g("dram_active_mean")),
                ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", g("tensor_active_mean")),
                ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", g("gr_engine_active_mean")),
                ("DCGM_FI_DEV_GPU_UTIL", g("gpu_util_percent_mean")),
            ]),
        });
    }
    // The share of answers cut at the length limit: the fleet's, or in a
    // mixed fleet whose servers do not all report outcomes, each server's
    // that does (a fleet share of one server's requests would mislead).
    let length_scopes: Vec<(BTreeMap<String, f64>, Vec<Source>, String)> = if g("finished_ratio_length").is_some() {
        vec![(m.clone(), sources.clone(), String::new())]
    } else if mixed {
        fleet
            .servers
            .iter()
            .filter_map(|(sv, sm)| {
                let vals = sm.values();
                vals.get("finished_ratio_length")?;
                let src = *sources.iter().find(|s| s.inference_server() == Some(sv))?;
                Some((vals, vec![src], format!("{}: ", src.display_name())))
            })
            .collect()
    } else {
        Vec::new()
    };
    for (vals, sources, scope) in &length_scopes {
        let g = |k: &str| vals.get(k).copied();
        let Some(len) = g("finished_ratio_length").filter(|v| *v >= 0.1) else { continue };
        let differ = |k: &str, f: &dyn Fn(f64) -> String| if scope.is_empty() { differ(k, f) } else { String::new() };
        // "length" means max_tokens or max_model_len was reached: the
        // requested max_tokens tells which (as the article checked).
        let (generated, max_tokens) = (g("generation_tokens_per_request_mean"), g("max_tokens_per_request_mean"));
        let text = match (generated, max_tokens) {
            (Some(gen_mean), Some(mt)) if gen_mean < 0.5 * mt => format!(
                "{scope}{} of requests stopped with finished_reason=\"length\", yet they generated {gen_mean:.0} tokens on average against a requested max_tokens of {mt:.0}: the context limit (max_model_len) was reached, not max_tokens. Shorten prompts or raise {}; raising max_tokens will not help.{}",
                pct(len),
                names(sources, context_flag),
                differ("finished_ratio_length", &pct)
            ),
            (_, Some(mt)) => format!(
                "{scope}{} of requests stopped at max_tokens (finished_reason=\"length\", mean requested max_tokens {mt:.0}): answers are cut mid-sentence and no latency chart shows it. Raise max_tokens on the client.{}",
                pct(len),
                differ("finished_ratio_length", &pct)
            ),
            _ => format!(
                "{scope}{} of requests stopped with finished_reason=\"length\": max_tokens or max_model_len was reached ({} not exported, so which one cannot be told); answers are cut mid-sentence and no latency chart shows it. Check max_tokens on the client first.{}",
                pct(len),
                if sources.iter().all(|s| *s == Source::Vllm) {
                    "vllm:request_params_max_tokens is"
                } else {
                    "the requested max_tokens is"
                },
                differ("finished_ratio_length", &pct)
            ),
        };
        recs.push(Recommendation {
            id: "raise_max_tokens".into(),
            text,
            evidence: ev(&[
                ("infertel_finished_ratio{finished_reason=\"length\"}", Some(len)),
                ("infertel_finished_ratio{finished_reason=\"stop\"}", g("finished_ratio_stop")),
                ("generated tokens per request (mean)", generated),
                ("vllm:request_params_max_tokens (mean)", max_tokens),
            ]),
        });
    }
    if let Some(c) = g("prompt_tokens_cached_ratio").filter(|v| *v < 0.7) {
        recs.push(Recommendation {
            id: "standardize_prompt_prefix".into(),
            text: format!("Only {} of prompt tokens came from the prefix cache (aim for ~70%). Put the shared system prompt and boilerplate first, identical in every request; it costs nothing.{}", pct(c), differ("prompt_tokens_cached_ratio", &pct)),
            evidence: ev(&[("infertel_prompt_tokens_cached_ratio", Some(c))]),
        });
    }
    let kv = g("kv_cache_usage_ratio");
    let scale_now: Vec<String> = fleet
        .rows
        .iter()
        .filter(|r| {
            r.measures.get("kv_cache_usage_ratio").is_some_and(|k| k >= s.scale.kv_cache_usage)
                || r.measures.get("num_requests_waiting_max").is_some_and(|w| w > 0.0) && signal_on(&r.target)
        })
        .map(|r| r.target.to_string())
        .collect();
    if kv.is_some() || waiting_max.is_some() {
        let now = !scale_now.is_empty();
        let mut text = String::new();
        if now {
            let _ = write!(text, "Scale out now: the scale signal is on for {}. ", scale_now.join(", "));
        }
        let _ = write!(
            text,
            "Scale on {} (now {}, threshold {}) or {} > 0 sustained {}s (max now {}), never on DCGM_FI_DEV_GPU_UTIL (mean {}): it reads ~100% whenever a kernel is resident.",
            names(&sources, kv_metric),
            kv.map(pct).unwrap_or("n/a".into()),
            pct(s.scale.kv_cache_usage),
            names(&sources, waiting_metric),
            s.scale.waiting_sustained_ms / 1000,
            waiting_max.map_or("n/a".into(), |w| format!("{w}")),
            g("gpu_util_percent_mean").map_or("n/a".into(), |u| format!("{u:.1}%")),
        );
        recs.push(Recommendation {
            id: if now { "scale_out_now".into() } else { "scale_on_kv_and_waiting".into() },
            text,
            evidence: ev(&[
                ("infertel_kv_cache_usage_ratio", kv),
                (&format!("{} (max)", names(&sources, waiting_metric)), waiting_max),
                ("DCGM_FI_DEV_GPU_UTIL (mean)", g("gpu_util_percent_mean")),
            ]),
        });
    }
    if let Some(q) = g("request_queue_seconds_mean") {
        recs.push(Recommendation {
            id: "alert_on_queue_time".into(),
            text: format!(
                "Alert on {} (mean {} per request now), not on VRAM ({} used: {} reserves it at start-up, so it looks like an emergency and never changes).",
                names(&sources, queue_metric),
                ms(q),
                g("vram_used_ratio").map(pct).unwrap_or("n/a".into()),
                if sources.iter().all(|s| *s == Source::Vllm) { "vLLM" } else { "the engine" }
            ) + &differ("request_queue_seconds_mean", &ms),
            evidence: ev(&[("infertel_request_phase_seconds{phase=\"queue\"}", Some(q)), ("infertel_vram_used_ratio", g("vram_used_ratio"))]),
        });
    }
    let servers =
        if mixed { fleet.servers.iter().map(|(k, v)| (k.to_string(), v.values())).collect() } else { BTreeMap::new() };
    Report {
        window_seconds: s.window_ms as f64 / 1000.0,
        targets,
        verdicts,
        measurements: m,
        instances,
        servers,
        recommendations: recs,
        notes,
    }
}
