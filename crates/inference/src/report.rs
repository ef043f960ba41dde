//! `infertel report`: verdicts against the objectives and the
//! recommendations the measured numbers support, each citing its numbers.

use crate::engine::{Derived, Engine, Settings, TargetKey};
use crate::schema;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TargetInfo {
    pub job: String,
    pub instance: String,
    pub schema: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Verdict {
    /// `ttft_p95`, `itl_p95`, `queue`, `error_abort_ratio`.
    pub objective: String,
    pub target: String,
    pub measured: String,
    /// `PASS`, `FAIL` or `NO DATA`.
    pub verdict: String,
    pub value: Option<f64>,
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

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub window_seconds: f64,
    pub targets: Vec<TargetInfo>,
    pub verdicts: Vec<Verdict>,
    /// Measured values by name (ratios 0–1, seconds, tokens/s, ...).
    pub measurements: BTreeMap<String, f64>,
    pub recommendations: Vec<Recommendation>,
}

fn first(d: &[Derived], name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    d.iter().filter(|x| x.name == name && label.is_none_or(|(k, v)| x.label(k) == Some(v))).map(|x| x.value).next()
}

fn worst(d: &[Derived], name: &str, label: (&str, &str)) -> Option<f64> {
    d.iter()
        .filter(|x| x.name == name && x.label(label.0) == Some(label.1))
        .map(|x| x.value)
        .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
}

fn ms(v: f64) -> String {
    format!("{:.2} ms", v * 1000.0)
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// Evaluates every target at `end_ms` over the engine's window and builds the report.
pub fn build(engine: &mut Engine, end_ms: i64) -> Report {
    let keys: Vec<TargetKey> = engine.targets().cloned().collect();
    // Twice: the first pass learns every target's schema (the power join needs
    // the GPU targets classified).
    for k in &keys {
        engine.evaluate(k, end_ms);
    }
    let mut all = Vec::new();
    let mut targets = Vec::new();
    for k in &keys {
        let e = engine.evaluate(k, end_ms);
        all.extend(e.derived);
        targets.push(TargetInfo {
            job: k.job.clone(),
            instance: k.instance.clone(),
            schema: engine.schema(k).map(|s| s.as_str().to_string()),
        });
    }
    let s: Settings = engine.settings.clone();
    let o = &s.objectives;
    let mut m: BTreeMap<String, f64> = BTreeMap::new();
    fn put(m: &mut BTreeMap<String, f64>, k: &str, v: Option<f64>) {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    }
    for p in ["queue", "prefill", "decode", "inference", "e2e"] {
        put(
            &mut m,
            &format!("request_{p}_seconds_mean"),
            first(&all, "infertel_request_phase_seconds", Some(("phase", p))),
        );
    }
    for (n, key) in [
        ("infertel_time_to_first_token_seconds", "ttft"),
        ("infertel_inter_token_latency_seconds", "itl"),
        ("infertel_e2e_latency_seconds", "e2e"),
    ] {
        for q in ["0.5", "0.95", "0.99"] {
            put(&mut m, &format!("{key}_seconds_p{}", &q[2..]), first(&all, n, Some(("quantile", q))));
        }
    }
    for n in [
        "decode_share",
        "prefix_cache_hit_ratio",
        "prompt_tokens_cached_ratio",
        "tokens_per_iteration",
        "generation_tokens_per_second",
        "prompt_tokens_per_second",
        "generation_to_prompt_ratio",
        "error_abort_ratio",
        "kv_cache_usage_ratio",
        "vram_used_ratio",
        "memory_bound",
        "tokens_per_watt",
        "scale_signal",
    ] {
        put(&mut m, n, first(&all, &format!("infertel_{n}"), None));
    }
    for d in all.iter().filter(|d| d.name == "infertel_finished_ratio") {
        let r = d.label("finished_reason").unwrap_or("").to_string();
        m.entry(format!("finished_ratio_{r}")).or_insert(d.value);
    }
    put(&mut m, "num_requests_waiting_max", engine.gauge_over(&schema::WAITING, end_ms, true));
    put(&mut m, "num_requests_running_max", engine.gauge_over(&schema::RUNNING, end_ms, true));
    put(&mut m, "gpu_util_percent_mean", engine.gauge_over(&schema::GPU_UTIL, end_ms, false));
    put(&mut m, "dram_active_mean", engine.gauge_over(&schema::DRAM_ACTIVE, end_ms, false));
    put(&mut m, "tensor_active_mean", engine.gauge_over(&schema::TENSOR_ACTIVE, end_ms, false));
    put(&mut m, "gpu_power_watts_mean", engine.gauge_over(&schema::POWER, end_ms, false));

    let verdict = |objective: &str, target: String, value: Option<f64>, measured: String, ok: Option<f64>| Verdict {
        objective: objective.into(),
        target,
        measured: if value.is_some() { measured } else { "n/a".into() },
        verdict: match ok {
            Some(x) if x >= 1.0 => "PASS".into(),
            Some(_) => "FAIL".into(),
            None => "NO DATA".into(),
        },
        value,
    };
    // The worst instance decides: any 0 in slo_ok fails.
    let ok = |obj: &str| {
        all.iter()
            .filter(|x| x.name == "infertel_slo_ok" && x.label("objective") == Some(obj))
            .map(|x| x.value)
            .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.min(v))))
    };
    let ttft = worst(&all, "infertel_slo_measured", ("objective", "ttft_p95"));
    let itl = worst(&all, "infertel_slo_measured", ("objective", "itl_p95"));
    let queue = worst(&all, "infertel_slo_measured", ("objective", "queue"));
    let ea = worst(&all, "infertel_slo_measured", ("objective", "error_abort_ratio"));
    let waiting_max = m.get("num_requests_waiting_max").copied();
    let verdicts = vec![
        verdict(
            "ttft_p95",
            format!("p95 ≤ {}", ms(o.ttft_p95)),
            ttft,
            ttft.map(ms).unwrap_or_default(),
            ok("ttft_p95"),
        ),
        verdict(
            "itl_p95",
            format!("p95 ≤ {}", ms(o.itl_p95)),
            itl,
            itl.map(|v| format!("{} (≈{:.0} tok/s)", ms(v), 1.0 / v)).unwrap_or_default(),
            ok("itl_p95"),
        ),
        verdict(
            "queue",
            format!("mean ≤ {}, waiting 0", ms(o.queue_time_max)),
            queue,
            queue
                .map(|v| format!("{}, waiting max {}", ms(v), waiting_max.map_or("n/a".into(), |w| format!("{w}"))))
                .unwrap_or_default(),
            ok("queue"),
        ),
        verdict(
            "error_abort_ratio",
            format!("≤ {}", pct(o.error_abort_ratio)),
            ea,
            ea.map(|v| format!("{:.2}%", v * 100.0)).unwrap_or_default(),
            ok("error_abort_ratio"),
        ),
    ];

    let mut recs = Vec::new();
    let ev = |pairs: &[(&str, Option<f64>)]| -> Vec<Evidence> {
        pairs.iter().filter_map(|(k, v)| v.map(|v| Evidence { metric: k.to_string(), value: v })).collect()
    };
    let g = |k: &str| m.get(k).copied();
    if let Some(share) = g("decode_share").filter(|s| *s >= 0.8) {
        let mut text = format!(
            "Decode takes {} of request time ({} decode vs {} prefill per request)",
            pct(share),
            g("request_decode_seconds_mean").map(ms).unwrap_or("n/a".into()),
            g("request_prefill_seconds_mean").map(ms).unwrap_or("n/a".into())
        );
        if let (Some(d), Some(t)) = (g("dram_active_mean"), g("tensor_active_mean")) {
            let _ = write!(text, "; DRAM active {} vs tensor pipe {}", pct(d), pct(t));
            if g("memory_bound") == Some(1.0) {
                text.push_str(": memory-bandwidth bound");
            }
        }
        text.push_str(". Quantize (FP8/AWQ) or add tensor parallelism before buying hardware; prefill optimizations (chunked prefill, prompt compression) will not help this workload.");
        recs.push(Recommendation {
            id: "decode_bound".into(),
            text,
            evidence: ev(&[
                ("infertel_decode_share", Some(share)),
                ("infertel_request_phase_seconds{phase=\"decode\"}", g("request_decode_seconds_mean")),
                ("infertel_request_phase_seconds{phase=\"prefill\"}", g("request_prefill_seconds_mean")),
                ("DCGM_FI_PROF_DRAM_ACTIVE", g("dram_active_mean")),
                ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", g("tensor_active_mean")),
            ]),
        });
    }
    if let Some(len) = g("finished_ratio_length").filter(|v| *v >= 0.1) {
        recs.push(Recommendation {
            id: "raise_max_tokens".into(),
            text: format!("{} of requests stopped at max_tokens (finished_reason=\"length\"): answers are cut mid-sentence and no latency chart shows it. Raise max_tokens on the client.", pct(len)),
            evidence: ev(&[("infertel_finished_ratio{finished_reason=\"length\"}", Some(len)), ("infertel_finished_ratio{finished_reason=\"stop\"}", g("finished_ratio_stop"))]),
        });
    }
    if let Some(c) = g("prompt_tokens_cached_ratio").filter(|v| *v < 0.7) {
        recs.push(Recommendation {
            id: "standardize_prompt_prefix".into(),
            text: format!("Only {} of prompt tokens came from the prefix cache (aim for ~70%). Put the shared system prompt and boilerplate first, identical in every request; it costs nothing.", pct(c)),
            evidence: ev(&[("infertel_prompt_tokens_cached_ratio", Some(c))]),
        });
    }
    let kv = g("kv_cache_usage_ratio");
    if kv.is_some() || waiting_max.is_some() {
        let now = g("scale_signal") == Some(1.0);
        let mut text = String::new();
        if now {
            text.push_str("Scale out now: the scale signal is on. ");
        }
        let _ = write!(
            text,
            "Scale on vllm:kv_cache_usage_perc (now {}, threshold {}) or vllm:num_requests_waiting > 0 sustained {}s (max now {}), never on DCGM_FI_DEV_GPU_UTIL (mean {}): it reads ~100% whenever a kernel is resident.",
            kv.map(pct).unwrap_or("n/a".into()),
            pct(s.scale.kv_cache_usage),
            s.scale.waiting_sustained_ms / 1000,
            waiting_max.map_or("n/a".into(), |w| format!("{w}")),
            g("gpu_util_percent_mean").map_or("n/a".into(), |u| format!("{u:.1}%")),
        );
        recs.push(Recommendation {
            id: if now { "scale_out_now".into() } else { "scale_on_kv_and_waiting".into() },
            text,
            evidence: ev(&[
                ("infertel_kv_cache_usage_ratio", kv),
                ("vllm:num_requests_waiting (max)", waiting_max),
                ("DCGM_FI_DEV_GPU_UTIL (mean)", g("gpu_util_percent_mean")),
                ("infertel_scale_signal", g("scale_signal")),
            ]),
        });
    }
    if let Some(q) = g("request_queue_seconds_mean") {
        recs.push(Recommendation {
            id: "alert_on_queue_time".into(),
            text: format!(
                "Alert on vllm:request_queue_time_seconds (mean {} per request now), not on VRAM ({} used: vLLM reserves it at start-up, so it looks like an emergency and never changes).",
                ms(q),
                g("vram_used_ratio").map(pct).unwrap_or("n/a".into())
            ),
            evidence: ev(&[("infertel_request_phase_seconds{phase=\"queue\"}", Some(q)), ("infertel_vram_used_ratio", g("vram_used_ratio"))]),
        });
    }
    Report { window_seconds: s.window_ms as f64 / 1000.0, targets, verdicts, measurements: m, recommendations: recs }
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    fn facts(&self) -> Vec<(String, String)> {
        let g = |k: &str| self.measurements.get(k).copied();
        let mut v = Vec::new();
        let mut add = |k: &str, s: Option<String>| {
            if let Some(s) = s {
                v.push((k.to_string(), s));
            }
        };
        add(
            "queue / prefill / decode per request",
            match (g("request_queue_seconds_mean"), g("request_prefill_seconds_mean"), g("request_decode_seconds_mean"))
            {
                (Some(a), Some(b), Some(c)) => Some(format!("{} / {} / {}", ms(a), ms(b), ms(c))),
                _ => None,
            },
        );
        add("decode share", g("decode_share").map(pct));
        add("prompt tokens from prefix cache", g("prompt_tokens_cached_ratio").map(pct));
        add("prefix-cache hit ratio", g("prefix_cache_hit_ratio").map(pct));
        add("tokens per iteration", g("tokens_per_iteration").map(|x| format!("{x:.2}")));
        add("generated tokens/s", g("generation_tokens_per_second").map(|x| format!("{x:.1}")));
        add("generated / prompt tokens", g("generation_to_prompt_ratio").map(|x| format!("{x:.2}")));
        add("finished: length share", g("finished_ratio_length").map(pct));
        add("KV-cache usage (pool, not VRAM)", g("kv_cache_usage_ratio").map(pct));
        add("VRAM used", g("vram_used_ratio").map(pct));
        add(
            "DRAM active / tensor active",
            match (g("dram_active_mean"), g("tensor_active_mean")) {
                (Some(a), Some(b)) => Some(format!("{} / {}", pct(a), pct(b))),
                _ => None,
            },
        );
        add("tokens per joule (per watt)", g("tokens_per_watt").map(|x| format!("{x:.2}")));
        v
    }

    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "infertel report: window {}s, targets: {}",
            self.window_seconds,
            self.targets
                .iter()
                .map(|t| format!("{}/{} ({})", t.job, t.instance, t.schema.as_deref().unwrap_or("unknown")))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(out);
        let rows: Vec<[String; 4]> =
            std::iter::once(["objective".to_string(), "target".into(), "measured".into(), "verdict".into()])
                .chain(
                    self.verdicts
                        .iter()
                        .map(|v| [v.objective.clone(), v.target.clone(), v.measured.clone(), v.verdict.clone()]),
                )
                .collect();
        let w: Vec<usize> = (0..4).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
        for (n, r) in rows.iter().enumerate() {
            let cells: Vec<String> =
                r.iter().enumerate().map(|(i, c)| format!("{c}{}", " ".repeat(w[i] - c.chars().count()))).collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
            if n == 0 {
                let _ = writeln!(out, "{}", w.iter().map(|x| "-".repeat(*x)).collect::<Vec<_>>().join("  "));
            }
        }
        let _ = writeln!(out, "\nmeasured:");
        for (k, v) in self.facts() {
            let _ = writeln!(out, "  {k}: {v}");
        }
        let _ = writeln!(out, "\nrecommendations:");
        for (i, r) in self.recommendations.iter().enumerate() {
            let _ = writeln!(out, "  {}. [{}] {}", i + 1, r.id, r.text);
        }
        out
    }

    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "## infertel report ({}s window)\n", self.window_seconds);
        let _ = writeln!(out, "| objective | target | measured | verdict |\n|---|---|---|---|");
        for v in &self.verdicts {
            let _ = writeln!(out, "| {} | {} | {} | **{}** |", v.objective, v.target, v.measured, v.verdict);
        }
        let _ = writeln!(out, "\n| measured | value |\n|---|---|");
        for (k, v) in self.facts() {
            let _ = writeln!(out, "| {k} | {v} |");
        }
        let _ = writeln!(out, "\n### Recommendations\n");
        for r in &self.recommendations {
            let ev: Vec<String> = r.evidence.iter().map(|e| format!("`{}` = {}", e.metric, e.value)).collect();
            let _ = writeln!(out, "- **{}**: {} ({})", r.id, r.text, ev.join(", "));
        }
        out
    }
}
