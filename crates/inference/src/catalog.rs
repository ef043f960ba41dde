//! Every derived series: name, HELP, unit. `docs/derived-metrics.md` gives
//! formulas and thresholds; a test checks both lists agree.

pub struct Def {
    pub name: &'static str,
    pub help: &'static str,
    pub unit: &'static str,
}

pub const CATALOG: &[Def] = &[
    Def {
        name: "infertel_prefix_cache_hit_ratio",
        help: "Prefix-cache hit ratio over the window: increase(prefix_cache_hits) / increase(prefix_cache_queries) (tokens; KV blocks on vLLM V1 before 0.9; V0: the gpu_prefix_cache_hit_rate gauge).",
        unit: "ratio",
    },
    Def {
        name: "infertel_prompt_tokens_cached_ratio",
        help: "Share of prompt tokens served from the prefix cache over the window: increase(prompt_tokens_cached) / increase(prompt_tokens) (before vLLM 0.16: prefix_cache_hits / prompt_tokens).",
        unit: "ratio",
    },
    Def {
        name: "infertel_generation_tokens_per_second",
        help: "Generated tokens per second over the window (no extrapolation).",
        unit: "tokens/s",
    },
    Def {
        name: "infertel_prompt_tokens_per_second",
        help: "Prompt tokens per second over the window (no extrapolation).",
        unit: "tokens/s",
    },
    Def {
        name: "infertel_tokens_per_watt",
        help: "Generated tokens per joule of the joined GPUs: tokens/s over the summed time-averaged power, or over the energy counter (mJ/1000) when exported.",
        unit: "tokens/J",
    },
    Def {
        name: "infertel_request_phase_seconds",
        help: "Mean seconds per finished request spent in a phase over the window: increase(<phase>_sum) / increase(e2e_request_latency_seconds_count).",
        unit: "seconds",
    },
    Def {
        name: "infertel_decode_share",
        help: "Share of end-to-end request time spent decoding: increase(request_decode_time_seconds_sum) / increase(e2e_request_latency_seconds_sum).",
        unit: "ratio",
    },
    Def {
        name: "infertel_time_to_first_token_seconds",
        help: "Time-to-first-token quantile over the window (histogram_quantile of the bucket increases).",
        unit: "seconds",
    },
    Def {
        name: "infertel_inter_token_latency_seconds",
        help: "Inter-token latency quantile over the window (histogram_quantile of the bucket increases; time_per_output_token_seconds before vLLM 0.10.2).",
        unit: "seconds",
    },
    Def {
        name: "infertel_e2e_latency_seconds",
        help: "End-to-end request latency quantile over the window (histogram_quantile of the bucket increases).",
        unit: "seconds",
    },
    Def {
        name: "infertel_tokens_per_iteration",
        help: "Tokens per engine step over the window (batch occupancy): increase(iteration_tokens_total_sum) / increase(iteration_tokens_total_count). Near 1 with several requests running means batching is not working.",
        unit: "tokens",
    },
    Def {
        name: "infertel_generation_to_prompt_ratio",
        help: "Generated tokens per prompt token of finished requests over the window (workload shape): increase(request_generation_tokens_sum) / increase(request_prompt_tokens_sum).",
        unit: "ratio",
    },
    Def {
        name: "infertel_finished_ratio",
        help: "Share of finished requests per finished_reason over the window; a high length share means answers are cut at max_tokens.",
        unit: "ratio",
    },
    Def {
        name: "infertel_error_abort_ratio",
        help: "Share of finished requests that ended in error or abort over the window.",
        unit: "ratio",
    },
    Def {
        name: "infertel_http_error_ratio",
        help: "Share of HTTP requests per handler answered 4xx or 5xx over the window (requests vLLM's engine metrics never see).",
        unit: "ratio",
    },
    Def {
        name: "infertel_vram_used_ratio",
        help: "Framebuffer used per GPU: FB_USED / (FB_USED + FB_FREE). Physical VRAM, mostly vLLM's up-front reservation: plan capacity on it, never alert on it. Not the KV-cache usage.",
        unit: "ratio",
    },
    Def {
        name: "infertel_kv_cache_usage_ratio",
        help: "vLLM KV block pool usage (0-1) per engine: how full the pre-allocated KV pool is, not VRAM. Scale on it.",
        unit: "ratio",
    },
    Def {
        name: "infertel_memory_bound",
        help: "1 when the GPU waits on memory: mean DRAM_ACTIVE over the window at or above the threshold while mean PIPE_TENSOR_ACTIVE is at or below its threshold; else 0.",
        unit: "bool",
    },
    Def {
        name: "infertel_slo_ok",
        help: "1 when the objective is met over the window, 0 when not (objectives: ttft_p95, itl_p95, queue, error_abort_ratio); for latency objectives decided by the bucket bounds of infertel_slo_share_within, absent when they disagree.",
        unit: "bool",
    },
    Def {
        name: "infertel_slo_share_within",
        help: "Share of requests within a latency objective over the window, bounded by the histogram buckets: bound=lower counts buckets with le <= objective, bound=upper adds the bucket containing it.",
        unit: "ratio",
    },
    Def {
        name: "infertel_gpu_idle_watts",
        help: "Power of the node's GPUs that serve no scraped engine (dcgm-exporter maps them to other pods or to none), over the window.",
        unit: "watts",
    },
    Def {
        name: "infertel_gpu_activity_ratio",
        help: "Window-mean activity of one GPU by unit: util (DCGM_FI_DEV_GPU_UTIL / 100, any kernel resident), graphics (GR_ENGINE_ACTIVE), sm (SM_ACTIVE), sm_occupancy, tensor (PIPE_TENSOR_ACTIVE), dram (DRAM_ACTIVE).",
        unit: "ratio",
    },
    Def {
        name: "infertel_http_client_abort_ratio",
        help: "Share of HTTP requests closed by the client (status 499, where the server or a proxy in front records it) over the window, per handler.",
        unit: "ratio",
    },
    Def {
        name: "infertel_slo_measured",
        help: "The measured value each objective is judged on (seconds for ttft_p95, itl_p95 and queue (mean queue time), ratio for error_abort_ratio).",
        unit: "mixed",
    },
    Def {
        name: "infertel_scale_signal",
        help: "1 when KV-cache usage reached the scale threshold or requests waited continuously for the sustained duration; else 0.",
        unit: "bool",
    },
    Def {
        name: "infertel_target_schema_info",
        help: "Metric schema a scraped target speaks (vLLM era, another inference server, or dcgm-exporter naming); value 1.",
        unit: "info",
    },
];

pub fn def(name: &str) -> Option<&'static Def> {
    CATALOG.iter().find(|d| d.name == name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn docs_and_readme_list_every_derived_series() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        for f in ["docs/derived-metrics.md", "README.md"] {
            let text = std::fs::read_to_string(format!("{root}/{f}")).unwrap();
            for d in super::CATALOG {
                let listed = text.contains(&format!("`{}`", d.name)) || text.contains(&format!("`{}{{", d.name));
                assert!(listed, "{f} does not document {}", d.name);
            }
        }
    }
}
