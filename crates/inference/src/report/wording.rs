//! How the report words things: durations and shares, and each inference
//! server's own names for what a recommendation cites (its metrics, its
//! flags), joined when the fleet holds several servers.

use crate::schema::Source;

pub(super) fn ms(v: f64) -> String {
    format!("{:.2} ms", v * 1000.0)
}

pub(super) fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

pub(super) fn secs(v: f64) -> String {
    if v < 1.0 { format!("{:.0} ms", v * 1000.0) } else { format!("{v} s") }
}

/// Each server's name for a thing, joined: one name when the fleet is one
/// kind of server, "a (vLLM) / b (SGLang)" when it is several.
pub(super) fn names(sources: &[Source], of: fn(Source) -> Option<&'static str>) -> String {
    let have: Vec<(Source, &str)> = sources.iter().filter_map(|s| of(*s).map(|n| (*s, n))).collect();
    match have.as_slice() {
        [] => of(Source::Vllm).unwrap_or_default().to_string(),
        [(_, n)] => n.to_string(),
        many => many.iter().map(|(s, n)| format!("{n} ({})", s.display_name())).collect::<Vec<_>>().join(" / "),
    }
}

/// The KV-pool usage gauge of a server, where it has one.
pub(super) fn kv_metric(s: Source) -> Option<&'static str> {
    match s {
        Source::Vllm => Some("vllm:kv_cache_usage_perc"),
        Source::Sglang => Some("sglang:token_usage"),
        Source::Trtllm => Some("trtllm_kv_cache_utilization"),
        _ => None,
    }
}

/// The requests-waiting gauge of a server.
pub(super) fn waiting_metric(s: Source) -> Option<&'static str> {
    match s {
        Source::Vllm => Some("vllm:num_requests_waiting"),
        Source::Sglang => Some("sglang:num_queue_reqs"),
        Source::Trtllm => Some("trtllm_num_requests_waiting"),
        Source::Tgi => Some("tgi_queue_size"),
        Source::Llamacpp => Some("llamacpp:requests_deferred"),
        Source::Dynamo => Some("dynamo_frontend_queued_requests"),
        _ => None,
    }
}

/// The queue-time histogram of a server.
pub(super) fn queue_metric(s: Source) -> Option<&'static str> {
    match s {
        Source::Vllm => Some("vllm:request_queue_time_seconds"),
        Source::Sglang => Some("sglang:queue_time_seconds"),
        Source::Trtllm => Some("trtllm_request_queue_time_seconds"),
        Source::Tgi => Some("tgi_request_queue_duration"),
        _ => None,
    }
}

/// The flag that sets a server's context length.
pub(super) fn context_flag(s: Source) -> Option<&'static str> {
    match s {
        Source::Vllm => Some("--max-model-len"),
        Source::Sglang => Some("--context-length"),
        Source::Trtllm => Some("--max_seq_len"),
        Source::Tgi => Some("--max-total-tokens"),
        Source::Llamacpp => Some("--ctx-size"),
        _ => None,
    }
}
