//! What each schema is expected to expose: the inputs a source of its kind
//! needs and the derived series each feeds, so a missing one is named with
//! the dashboard it empties.

use super::*;

/// Inputs a source of this kind needs, with the derived series each feeds:
/// a missing one means a dashboard on that series stays empty.
pub fn expectations(schema: Schema) -> Vec<(&'static Input, &'static str)> {
    match schema.source() {
        Source::Vllm => {
            let mut v: Vec<(&'static Input, &'static str)> = vec![
                (&GENERATION_TOKENS, "infertel_generation_tokens_per_second"),
                (&PROMPT_TOKENS, "infertel_prompt_tokens_per_second"),
                (&SUCCESS, "infertel_finished_ratio"),
                (&TTFT, "infertel_time_to_first_token_seconds"),
                (&ITL, "infertel_inter_token_latency_seconds"),
                (&E2E, "infertel_e2e_latency_seconds"),
                (&QUEUE, "infertel_request_phase_seconds"),
                (&PREFILL, "infertel_request_phase_seconds"),
                (&DECODE, "infertel_request_phase_seconds"),
                (&ITERATION_TOKENS, "infertel_tokens_per_iteration"),
                (&KV_USAGE, "infertel_kv_cache_usage_ratio"),
                (&WAITING, "infertel_scale_signal"),
            ];
            match schema {
                Schema::VllmV0 => v.push((&PREFIX_HIT_RATE_V0, "infertel_prefix_cache_hit_ratio")),
                // No prefix-cache metric at all in late V0.
                Schema::VllmV0Late => {}
                _ => v.push((&PREFIX_HITS, "infertel_prefix_cache_hit_ratio")),
            }
            if schema == Schema::VllmV1Current {
                v.push((&PROMPT_TOKENS_CACHED, "infertel_prompt_tokens_cached_ratio"));
            }
            v
        }
        Source::Dcgm => vec![
            (&FB_USED, "infertel_vram_used_ratio"),
            (&FB_FREE, "infertel_vram_used_ratio"),
            (&POWER, "infertel_tokens_per_watt"),
            (&DRAM_ACTIVE, "infertel_memory_bound"),
            (&TENSOR_ACTIVE, "infertel_memory_bound"),
        ],
        Source::Sglang => {
            let mut v: Vec<(&'static Input, &'static str)> = vec![
                (&SGLANG_GENERATION_TOKENS, "infertel_generation_tokens_per_second"),
                (&SGLANG_PROMPT_TOKENS, "infertel_prompt_tokens_per_second"),
                (&SGLANG_TTFT, "infertel_time_to_first_token_seconds"),
                (&SGLANG_ITL, "infertel_inter_token_latency_seconds"),
                (&SGLANG_E2E, "infertel_e2e_latency_seconds"),
                // Its cache_hit_rate gauge is one prefill batch's ratio (zeroed
                // by decode before 0.5.21): the counters tell the share.
                (&SGLANG_CACHED_TOKENS, "infertel_prompt_tokens_cached_ratio"),
                (&SGLANG_TOKEN_USAGE, "infertel_kv_cache_usage_ratio"),
                (&SGLANG_WAITING, "infertel_scale_signal"),
            ];
            if schema == Schema::Sglang05 {
                v.push((&SGLANG_QUEUE, "infertel_request_phase_seconds"));
            }
            v
        }
        Source::Tgi => vec![
            (&TGI_GENERATED_TOKENS, "infertel_generation_tokens_per_second"),
            (&TGI_INPUT_LENGTH, "infertel_prompt_tokens_per_second"),
            (&TGI_QUEUE, "infertel_request_phase_seconds"),
            (&TGI_TIME_PER_TOKEN, "infertel_inter_token_latency_seconds"),
            (&TGI_E2E, "infertel_e2e_latency_seconds"),
            (&TGI_WAITING, "infertel_scale_signal"),
        ],
        Source::Llamacpp => vec![
            (&LLAMACPP_GENERATION_TOKENS, "infertel_generation_tokens_per_second"),
            (&LLAMACPP_PROMPT_TOKENS, "infertel_prompt_tokens_per_second"),
            (&LLAMACPP_WAITING, "infertel_scale_signal"),
        ],
        Source::Trtllm => vec![
            (&TRTLLM_GENERATION_TOKENS, "infertel_generation_tokens_per_second"),
            (&TRTLLM_PROMPT_TOKENS, "infertel_prompt_tokens_per_second"),
            (&TRTLLM_TTFT, "infertel_time_to_first_token_seconds"),
            (&TRTLLM_ITL, "infertel_inter_token_latency_seconds"),
            (&TRTLLM_E2E, "infertel_e2e_latency_seconds"),
            (&TRTLLM_QUEUE, "infertel_request_phase_seconds"),
            (&TRTLLM_REUSED_BLOCKS, "infertel_prefix_cache_hit_ratio"),
            (&TRTLLM_KV_USAGE, "infertel_kv_cache_usage_ratio"),
            (&TRTLLM_WAITING, "infertel_scale_signal"),
        ],
        Source::Triton => {
            let mut v: Vec<(&'static Input, &'static str)> = vec![
                (&TRITON_FIRST_RESPONSE, "infertel_time_to_first_token_seconds"),
                (&TRITON_REQUEST_DURATION, "infertel_e2e_latency_seconds"),
                (&TRITON_QUEUE_DURATION, "infertel_request_phase_seconds"),
                (&TRITON_WAITING, "infertel_scale_signal"),
            ];
            if schema == Schema::TritonTrtllm {
                v.push((&TRITON_OUTPUT_TOKENS, "infertel_generation_tokens_per_second"));
                v.push((&TRITON_KV_BLOCKS, "infertel_kv_cache_usage_ratio"));
            }
            v
        }
        Source::Dynamo => match schema {
            Schema::DynamoWorker => vec![(&DYNAMO_WORKER_KV_USAGE, "infertel_kv_cache_usage_ratio")],
            _ => vec![
                (&DYNAMO_OUTPUT_TOKENS, "infertel_generation_tokens_per_second"),
                (&DYNAMO_INPUT_TOKENS, "infertel_prompt_tokens_per_second"),
                (&DYNAMO_TTFT, "infertel_time_to_first_token_seconds"),
                (&DYNAMO_ITL, "infertel_inter_token_latency_seconds"),
                (&DYNAMO_E2E, "infertel_e2e_latency_seconds"),
                (&DYNAMO_WAITING, "infertel_scale_signal"),
            ],
        },
        Source::Other => vec![],
    }
}
