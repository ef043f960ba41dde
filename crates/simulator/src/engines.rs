//! The other inference servers' `/metrics`: SGLang, Hugging Face TGI,
//! llama.cpp's server, TensorRT-LLM's `trtllm-serve` and Dynamo's frontend,
//! driven by the same simulated engine as vLLM's.
//!
//! Each is rendered from its exposition in `tests/fixtures/engines/`, which
//! was written from the server's own source (commits in `docs/engines/`):
//! the template gives the family order, HELP, TYPE, labels and buckets as
//! the server prints them. The families that carry the simulated workload
//! (token counters, requests, latency histograms, running/waiting, KV
//! usage) take the simulation's values on their first child, added to the
//! template's (so counters start where the capture was and grow with the
//! simulation, and every histogram stays cumulative); the other families
//! (static configuration, features not simulated) keep the template's
//! values.

use crate::engine::{FINISHED_REASONS, Simulator};
use crate::hist::Histogram;
use std::collections::BTreeMap;

/// Which server the simulator speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServerKind {
    #[default]
    Vllm,
    Sglang,
    Tgi,
    Llamacpp,
    Trtllm,
    Dynamo,
}

impl ServerKind {
    pub fn parse(s: &str) -> Option<ServerKind> {
        Some(match s {
            "vllm" => ServerKind::Vllm,
            "sglang" => ServerKind::Sglang,
            "tgi" => ServerKind::Tgi,
            "llamacpp" => ServerKind::Llamacpp,
            "trtllm" => ServerKind::Trtllm,
            "dynamo" => ServerKind::Dynamo,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ServerKind::Vllm => "vllm",
            ServerKind::Sglang => "sglang",
            ServerKind::Tgi => "tgi",
            ServerKind::Llamacpp => "llamacpp",
            ServerKind::Trtllm => "trtllm",
            ServerKind::Dynamo => "dynamo",
        }
    }

    /// The exposition this server is rendered from (`None`: vLLM's own renderer).
    fn template(self) -> Option<&'static str> {
        Some(match self {
            ServerKind::Vllm => return None,
            ServerKind::Sglang => include_str!("../../../tests/fixtures/engines/sglang.prom"),
            ServerKind::Tgi => include_str!("../../../tests/fixtures/engines/tgi.prom"),
            ServerKind::Llamacpp => include_str!("../../../tests/fixtures/engines/llamacpp.prom"),
            ServerKind::Trtllm => include_str!("../../../tests/fixtures/engines/trtllm-serve.prom"),
            ServerKind::Dynamo => include_str!("../../../tests/fixtures/engines/dynamo-frontend.prom"),
        })
    }
}

/// What a simulated request or step records, in the units of every server
/// here (seconds, tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    Ttft,
    Itl,
    Tpot,
    E2e,
    Queue,
    Prefill,
    Decode,
    Inference,
    PromptLen,
    GenerationLen,
}

/// What the simulation supplies for a family of a template.
enum Live {
    Histogram(Role),
    /// Counted as tokens are processed (Dynamo's frontend, per chunk).
    GenerationTokens,
    /// Counted when a request finishes (SGLang, trtllm-serve, llama.cpp).
    PromptTokensAtFinish,
    GenerationTokensAtFinish,
    CachedTokens,
    /// Finished requests: all, or one `finished_reason` child each.
    Requests,
    SuccessByReason,
    Running,
    Waiting,
    KvUsage,
}

/// The families of `kind` that carry the simulated workload.
fn live_families(kind: ServerKind) -> &'static [(&'static str, Live)] {
    use Live::*;
    use Role::*;
    match kind {
        ServerKind::Vllm => &[],
        ServerKind::Sglang => &[
            ("sglang:prompt_tokens_total", PromptTokensAtFinish),
            ("sglang:generation_tokens_total", GenerationTokensAtFinish),
            ("sglang:cached_tokens_total", CachedTokens),
            ("sglang:num_requests_total", Requests),
            ("sglang:num_running_reqs", Running),
            ("sglang:num_queue_reqs", Waiting),
            ("sglang:token_usage", KvUsage),
            ("sglang:time_to_first_token_seconds", Histogram(Ttft)),
            ("sglang:inter_token_latency_seconds", Histogram(Itl)),
            ("sglang:e2e_request_latency_seconds", Histogram(E2e)),
            ("sglang:request_time_per_output_token_seconds", Histogram(Tpot)),
            ("sglang:prompt_tokens_histogram", Histogram(PromptLen)),
            ("sglang:generation_tokens_histogram", Histogram(GenerationLen)),
            ("sglang:queue_time_seconds", Histogram(Queue)),
        ],
        ServerKind::Tgi => &[
            ("tgi_request_count", Requests),
            ("tgi_request_success", Requests),
            ("tgi_queue_size", Waiting),
            ("tgi_batch_current_size", Running),
            ("tgi_request_input_length", Histogram(PromptLen)),
            ("tgi_request_generated_tokens", Histogram(GenerationLen)),
            ("tgi_request_queue_duration", Histogram(Queue)),
            ("tgi_request_inference_duration", Histogram(Inference)),
            ("tgi_request_mean_time_per_token_duration", Histogram(Tpot)),
            ("tgi_request_duration", Histogram(E2e)),
        ],
        ServerKind::Llamacpp => &[
            ("llamacpp:prompt_tokens_total", PromptTokensAtFinish),
            ("llamacpp:tokens_predicted_total", GenerationTokensAtFinish),
            ("llamacpp:requests_processing", Running),
            ("llamacpp:requests_deferred", Waiting),
        ],
        ServerKind::Trtllm => &[
            ("trtllm_e2e_request_latency_seconds", Histogram(E2e)),
            ("trtllm_time_to_first_token_seconds", Histogram(Ttft)),
            ("trtllm_time_per_output_token_seconds", Histogram(Tpot)),
            ("trtllm_request_queue_time_seconds", Histogram(Queue)),
            ("trtllm_request_prefill_time_seconds", Histogram(Prefill)),
            ("trtllm_request_decode_time_seconds", Histogram(Decode)),
            ("trtllm_request_inference_time_seconds", Histogram(Inference)),
            ("trtllm_request_success_total", SuccessByReason),
            ("trtllm_prompt_tokens_total", PromptTokensAtFinish),
            ("trtllm_generation_tokens_total", GenerationTokensAtFinish),
            ("trtllm_num_requests_completed_total", Requests),
            ("trtllm_num_requests_running", Running),
            ("trtllm_num_requests_waiting", Waiting),
            ("trtllm_kv_cache_utilization", KvUsage),
        ],
        ServerKind::Dynamo => &[
            ("dynamo_frontend_time_to_first_token_seconds", Histogram(Ttft)),
            ("dynamo_frontend_inter_token_latency_seconds", Histogram(Itl)),
            ("dynamo_frontend_request_duration_seconds", Histogram(E2e)),
            ("dynamo_frontend_input_sequence_tokens", Histogram(PromptLen)),
            ("dynamo_frontend_output_sequence_tokens", Histogram(GenerationLen)),
            ("dynamo_frontend_output_tokens_total", GenerationTokens),
            ("dynamo_frontend_inflight_requests", Running),
            ("dynamo_frontend_queued_requests", Waiting),
        ],
    }
}

/// One sample line of a template: series name, its label text (without
/// braces) and value.
fn split(line: &str) -> Option<(&str, &str, f64)> {
    let (series, value) = line.rsplit_once(' ')?;
    let (name, labels) = match series.split_once('{') {
        Some((n, rest)) => (n, rest.strip_suffix('}').unwrap_or(rest)),
        None => (series, ""),
    };
    Some((name, labels, value.parse().ok()?))
}

/// The label text without `le`, identifying a histogram child.
fn child_of(labels: &str) -> String {
    labels.split(',').filter(|p| !p.starts_with("le=")).collect::<Vec<_>>().join(",")
}

fn le_of(labels: &str) -> Option<f64> {
    let v = labels.split("le=\"").nth(1)?.split('"').next()?;
    if v == "+Inf" { Some(f64::INFINITY) } else { v.parse().ok() }
}

fn histogram_family(name: &str, kind: ServerKind) -> Option<(&str, Role)> {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            for (f, live) in live_families(kind) {
                if *f == base
                    && let Live::Histogram(r) = live
                {
                    return Some((base, *r));
                }
            }
        }
    }
    None
}

/// The histograms the simulation fills for `kind`, each with the template's
/// bounds (those of its first child).
pub(crate) fn histograms(kind: ServerKind) -> BTreeMap<Role, Histogram> {
    let mut out = BTreeMap::new();
    let Some(t) = kind.template() else { return out };
    let mut first: BTreeMap<&str, String> = BTreeMap::new();
    let mut bounds: BTreeMap<Role, Vec<f64>> = BTreeMap::new();
    for line in t.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let Some((name, labels, _)) = split(line) else { continue };
        let Some(base) = name.strip_suffix("_bucket") else { continue };
        let Some((_, role)) = histogram_family(name, kind) else { continue };
        let child = child_of(labels);
        if first.entry(base).or_insert_with(|| child.clone()) != &child {
            continue;
        }
        if let Some(le) = le_of(labels).filter(|le| le.is_finite()) {
            bounds.entry(role).or_default().push(le);
        }
    }
    for (role, b) in bounds {
        out.insert(role, Histogram::new(&b));
    }
    out
}

/// A value as `kind`'s exporter prints it: Python's `prometheus_client`
/// (SGLang, trtllm-serve), Rust's `Display` (TGI's metrics-exporter,
/// Dynamo's prometheus crate: `12`, `15.195290965833859`), or a C++ stream's
/// six significant digits (llama.cpp: `2.34568e+06`).
fn number(kind: ServerKind, v: f64) -> String {
    match kind {
        ServerKind::Sglang | ServerKind::Trtllm | ServerKind::Vllm => crate::fmt::py_value(v),
        ServerKind::Tgi | ServerKind::Dynamo => format!("{v}"),
        ServerKind::Llamacpp => cpp_stream(v),
    }
}

/// `std::ostream << double` with the default precision (6): `%g`.
fn cpp_stream(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v.is_infinite() {
            if v > 0.0 { "inf".into() } else { "-inf".into() }
        } else {
            "0".into()
        };
    }
    let exp = v.abs().log10().floor() as i32;
    if (-4..6).contains(&exp) {
        let decimals = (5 - exp).max(0) as usize;
        let s = format!("{v:.decimals$}");
        if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
    } else {
        let m = v / 10f64.powi(exp);
        let ms = format!("{m:.5}");
        let ms = ms.trim_end_matches('0').trim_end_matches('.');
        format!("{ms}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// `sim`'s exposition as `kind` prints it.
pub(crate) fn render(sim: &Simulator, kind: ServerKind) -> String {
    let Some(t) = kind.template() else { return String::new() };
    let s = &sim.stats;
    let requests: f64 = s.success.iter().sum();
    let mut first_child: BTreeMap<&str, String> = BTreeMap::new();
    let mut out = String::with_capacity(t.len() + 1024);
    for line in t.lines() {
        if line.starts_with('#') || line.is_empty() {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let Some((name, labels, value)) = split(line) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let live = if let Some((base, role)) = histogram_family(name, kind) {
            let child = child_of(labels);
            let is_first = first_child.entry(base).or_insert_with(|| child.clone()) == &child;
            let h = sim.alt.get(&role);
            match (is_first, h) {
                (true, Some(h)) => {
                    if name.ends_with("_bucket") {
                        let le = le_of(labels).unwrap_or(f64::INFINITY);
                        h.cumulative().iter().find(|(b, _)| *b == le).map(|(_, c)| *c as f64)
                    } else if name.ends_with("_sum") {
                        Some(h.sum)
                    } else {
                        Some(h.count as f64)
                    }
                }
                _ => None,
            }
        } else {
            let family = name;
            let entry = live_families(kind).iter().find(|(f, _)| *f == family);
            let child = labels.to_string();
            let is_first = first_child.entry(family).or_insert_with(|| child.clone()) == &child;
            match entry.map(|(_, l)| l) {
                Some(Live::SuccessByReason) => {
                    let reason = labels.split("finished_reason=\"").nth(1).and_then(|r| r.split('"').next());
                    reason.and_then(|r| FINISHED_REASONS.iter().position(|x| *x == r)).map(|i| s.success[i])
                }
                Some(_) if !is_first => None,
                Some(Live::GenerationTokens) => Some(s.generation_tokens),
                Some(Live::PromptTokensAtFinish) => Some(s.request_prompt_tokens.sum),
                Some(Live::GenerationTokensAtFinish) => Some(s.request_generation_tokens.sum),
                Some(Live::CachedTokens) => Some(s.prompt_local_cache_hit),
                Some(Live::Requests) => Some(requests),
                // Gauges replace the template's value.
                Some(Live::Running) => Some(sim.running() as f64 - value),
                Some(Live::Waiting) => Some(sim.waiting() as f64 - value),
                Some(Live::KvUsage) => Some(sim.kv_cache_usage() - value),
                Some(Live::Histogram(_)) | None => None,
            }
        };
        match live {
            Some(add) => {
                let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
                out.push_str(&format!("{name}{braces} {}\n", number(kind, value + add)));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_stream_is_printf_g() {
        // Values from llama.cpp's capture-style fixture, and printf's %g.
        assert_eq!(cpp_stream(2_345_680.0), "2.34568e+06");
        assert_eq!(cpp_stream(612_345.0), "612345");
        assert_eq!(cpp_stream(1876.54), "1876.54");
        assert_eq!(cpp_stream(42.1613), "42.1613");
        assert_eq!(cpp_stream(0.000012345), "1.2345e-05");
        assert_eq!(cpp_stream(8.0), "8");
    }
}
