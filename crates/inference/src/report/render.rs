//! The report as text: JSON, an aligned table for a terminal, Markdown.

use super::wording::{ms, pct};
use super::{Instance, Report};
use std::fmt::Write as _;

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
        add(
            "GPU_UTIL / graphics engine / SM active",
            match (g("gpu_util_percent_mean"), g("gr_engine_active_mean")) {
                (Some(a), Some(b)) => {
                    Some(format!("{a:.1}% / {} / {}", pct(b), g("sm_active_mean").map_or("n/a".into(), pct)))
                }
                _ => None,
            },
        );
        add("GPU power (joined GPUs)", g("gpu_watts").map(|x| format!("{x:.1} W")));
        add("tokens per joule (per watt)", g("tokens_per_watt").map(|x| format!("{x:.2}")));
        add("requests per minute", g("requests_per_minute").map(|x| format!("{x:.1}")));
        add(
            "prompt / generated tokens per request",
            match (g("prompt_tokens_per_request_mean"), g("generation_tokens_per_request_mean")) {
                (Some(a), Some(b)) => Some(format!("{a:.0} / {b:.0}")),
                _ => None,
            },
        );
        add("requested max_tokens (mean)", g("max_tokens_per_request_mean").map(|x| format!("{x:.0}")));
        add(
            "batching: tokens per iteration per running request",
            g("tokens_per_iteration_per_running_request").map(|x| format!("{x:.2}")),
        );
        add(
            "headroom (objective / measured p95; an estimate at this concurrency)",
            match (g("headroom_ttft_p95"), g("headroom_itl_p95")) {
                (Some(a), Some(b)) => Some(format!("TTFT {a:.1}x, ITL {b:.1}x")),
                _ => None,
            },
        );
        add("preemptions per minute", g("preemptions_per_minute").map(|x| format!("{x:.2}")));
        add(
            "speculative decoding: acceptance / mean acceptance length",
            match (g("spec_decode_acceptance_ratio"), g("spec_decode_mean_acceptance_length")) {
                (Some(a), Some(b)) => Some(format!("{} / {b:.2}", pct(a))),
                _ => None,
            },
        );
        v
    }

    /// One line per instance with the figures that most often differ.
    fn instance_rows(&self) -> Vec<[String; 6]> {
        let f = |i: &Instance, k: &str, fmt: &dyn Fn(f64) -> String| {
            i.measurements.get(k).map_or("n/a".into(), |v| fmt(*v))
        };
        let mut rows = vec![[
            "instance".to_string(),
            "gen tok/s".into(),
            "cached prompt".into(),
            "TTFT p95".into(),
            "ITL p95".into(),
            "KV usage".into(),
        ]];
        for i in &self.instances {
            rows.push([
                format!(
                    "{}/{}{}{}",
                    i.job,
                    i.instance,
                    match (&i.inference_server, self.servers.is_empty()) {
                        (Some(sv), false) => format!(" [{sv}]"),
                        _ => String::new(),
                    },
                    if i.engines > 1 { format!(" ({} engines)", i.engines) } else { String::new() }
                ),
                f(i, "generation_tokens_per_second", &|x| format!("{x:.1}")),
                f(i, "prompt_tokens_cached_ratio", &pct),
                f(i, "ttft_seconds_p95", &ms),
                f(i, "itl_seconds_p95", &ms),
                f(i, "kv_cache_usage_ratio", &pct),
            ]);
        }
        rows
    }

    /// One line per kind of server (a mixed fleet), as the instance rows.
    fn server_rows(&self) -> Vec<Vec<String>> {
        let mut rows = vec![vec![
            "server fleet".to_string(),
            "gen tok/s".into(),
            "TTFT p95".into(),
            "ITL p95".into(),
            "KV usage".into(),
        ]];
        for (sv, m) in &self.servers {
            let f = |k: &str, fmt: &dyn Fn(f64) -> String| m.get(k).map_or("n/a".into(), |v| fmt(*v));
            rows.push(vec![
                sv.clone(),
                f("generation_tokens_per_second", &|x| format!("{x:.1}")),
                f("ttft_seconds_p95", &ms),
                f("itl_seconds_p95", &ms),
                f("kv_cache_usage_ratio", &pct),
            ]);
        }
        rows
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
        let rows: Vec<Vec<String>> = std::iter::once(vec![
            "objective".to_string(),
            "scope".into(),
            "target".into(),
            "measured".into(),
            "verdict".into(),
        ])
        .chain(self.verdicts.iter().map(|v| {
            vec![v.objective.clone(), v.scope.clone(), v.target.clone(), v.measured.clone(), v.verdict.clone()]
        }))
        .collect();
        table(&mut out, &rows);
        for v in self.verdicts.iter().filter(|v| !v.note.is_empty()) {
            let _ = writeln!(out, "  {} ({}): {}", v.objective, v.scope, v.note);
        }
        if !self.servers.is_empty() {
            let _ = writeln!(out, "\nservers:");
            table(&mut out, &self.server_rows());
        }
        if self.instances.len() > 1 {
            let _ = writeln!(out, "\ninstances:");
            let rows: Vec<Vec<String>> = self.instance_rows().into_iter().map(|r| r.to_vec()).collect();
            table(&mut out, &rows);
        }
        let _ = writeln!(out, "\nmeasured:");
        for (k, v) in self.facts() {
            let _ = writeln!(out, "  {k}: {v}");
        }
        let _ = writeln!(out, "\nrecommendations:");
        for (i, r) in self.recommendations.iter().enumerate() {
            let _ = writeln!(out, "  {}. [{}] {}", i + 1, r.id, r.text);
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out, "\nnotes:");
            for n in &self.notes {
                let _ = writeln!(out, "  - {n}");
            }
        }
        out
    }

    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "## infertel report ({}s window)\n", self.window_seconds);
        let _ = writeln!(out, "| objective | scope | target | measured | verdict |\n|---|---|---|---|---|");
        for v in &self.verdicts {
            let _ =
                writeln!(out, "| {} | {} | {} | {} | **{}** |", v.objective, v.scope, v.target, v.measured, v.verdict);
        }
        for v in self.verdicts.iter().filter(|v| !v.note.is_empty()) {
            let _ = writeln!(out, "\n{} ({}): {}", v.objective, v.scope, v.note);
        }
        if !self.servers.is_empty() {
            let rows = self.server_rows();
            let _ = writeln!(out, "\n| {} |\n|{}", rows[0].join(" | "), "---|".repeat(rows[0].len()));
            for r in &rows[1..] {
                let _ = writeln!(out, "| {} |", r.join(" | "));
            }
        }
        if self.instances.len() > 1 {
            let rows = self.instance_rows();
            let _ = writeln!(out, "\n| {} |\n|{}", rows[0].join(" | "), "---|".repeat(rows[0].len()));
            for r in &rows[1..] {
                let _ = writeln!(out, "| {} |", r.join(" | "));
            }
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
        if !self.notes.is_empty() {
            let _ = writeln!(out, "\n### Notes\n");
            for n in &self.notes {
                let _ = writeln!(out, "- {n}");
            }
        }
        out
    }
}

/// Writes `rows` as an aligned text table, a rule under the first row.
fn table(out: &mut String, rows: &[Vec<String>]) {
    let cols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let w: Vec<usize> =
        (0..cols).map(|i| rows.iter().map(|r| r.get(i).map_or(0, |c| c.chars().count())).max().unwrap_or(0)).collect();
    for (n, r) in rows.iter().enumerate() {
        let cells: Vec<String> =
            r.iter().enumerate().map(|(i, c)| format!("{c}{}", " ".repeat(w[i] - c.chars().count()))).collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        if n == 0 {
            let _ = writeln!(out, "{}", w.iter().map(|x| "-".repeat(*x)).collect::<Vec<_>>().join("  "));
        }
    }
}
