//! The inputs of the derived series: for each, the wire names that carry
//! it, preferred first (vLLM's from 0.5 to 0.33, dcgm-exporter's classic and
//! DCGM 4.6 names, and the other servers' where they mean the same), and the
//! other servers' own families, tracked for detection and for the families
//! a dashboard would miss.

/// Candidate wire names per input, preferred first. The first one a target
/// exposes is used. Besides vLLM's, the names of the servers whose series
/// mean the same (SGLang, TensorRT-LLM's trtllm-serve, Dynamo's frontend:
/// histograms in seconds, token counters; TGI and llama.cpp for what they
/// have) are candidates too, so their targets go through the same
/// derivations (`docs/engines/`). TGI counts tokens only in histograms of
/// finished requests: their `_sum` stands for the counter.
pub struct Input {
    pub key: &'static str,
    pub names: &'static [&'static str],
}

macro_rules! inputs {
    ($($key:ident => [$($n:expr),+ $(,)?]),+ $(,)?) => {
        $(pub const $key: Input = Input { key: stringify!($key), names: &[$($n),+] };)+
    };
}

inputs! {
    PROMPT_TOKENS => ["vllm:prompt_tokens_total", "sglang:prompt_tokens_total", "trtllm_prompt_tokens_total", "trtllm:prompt_tokens_total", "llamacpp:prompt_tokens_total", "tgi_request_input_length_sum", "nv_llm_input_token_len_sum"],
    GENERATION_TOKENS => ["vllm:generation_tokens_total", "sglang:generation_tokens_total", "trtllm_generation_tokens_total", "trtllm:generation_tokens_total", "dynamo_frontend_output_tokens_total", "llamacpp:tokens_predicted_total", "tgi_request_generated_tokens_sum", "nv_llm_output_token_len_sum"],
    // Tokens since 0.9.0 (blocks in V1 before: still a hit ratio, in blocks).
    PREFIX_QUERIES => ["vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"],
    PREFIX_HITS => ["vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total", "trtllm_kv_cache_reused_blocks_total", "trtllm:kv_cache_reused_blocks_total"],
    // Triton: microsecond counters of time spent, the successful requests,
    // a first-response histogram in milliseconds, and the KV block pool's
    // used fraction as one child of a gauge (see `engine/rates.rs`).
    TRITON_SUCCESS_IN => ["nv_inference_request_success"],
    TRITON_DURATION_US => ["nv_inference_request_duration_us"],
    TRITON_QUEUE_US => ["nv_inference_queue_duration_us"],
    TRITON_FIRST_RESPONSE_MS => ["nv_inference_first_response_histogram_ms"],
    TRITON_KV_BLOCK_METRICS => ["nv_trt_llm_kv_cache_block_metrics"],
    // A Dynamo worker's KV usage, one gauge per data-parallel rank.
    DYNAMO_WORKER_KV_USAGE_IN => ["dynamo_component_gpu_cache_usage_percent"],
    // TensorRT-LLM counts reused and missed blocks, not queries.
    PREFIX_MISSES => ["trtllm_kv_cache_missed_blocks_total", "trtllm:kv_cache_missed_blocks_total"],
    // V0 exported the ratio itself as a gauge, -1 when unknown.
    PREFIX_HIT_RATE_V0 => ["vllm:gpu_prefix_cache_hit_rate"],
    PROMPT_TOKENS_CACHED => ["vllm:prompt_tokens_cached_total", "sglang:cached_tokens_total"],
    SUCCESS => ["vllm:request_success_total", "trtllm_request_success_total", "trtllm:request_success_total"],
    TTFT => ["vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds", "trtllm_time_to_first_token_seconds", "trtllm:time_to_first_token_seconds", "dynamo_frontend_time_to_first_token_seconds"],
    ITL => ["vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds", "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds", "trtllm_time_per_output_token_seconds", "trtllm:time_per_output_token_seconds", "dynamo_frontend_inter_token_latency_seconds", "tgi_request_mean_time_per_token_duration"],
    E2E => ["vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds", "trtllm_e2e_request_latency_seconds", "trtllm:e2e_request_latency_seconds", "dynamo_frontend_request_duration_seconds", "tgi_request_duration"],
    QUEUE => ["vllm:request_queue_time_seconds", "sglang:queue_time_seconds", "trtllm_request_queue_time_seconds", "trtllm:request_queue_time_seconds", "tgi_request_queue_duration"],
    PREFILL => ["vllm:request_prefill_time_seconds", "trtllm_request_prefill_time_seconds", "trtllm:request_prefill_time_seconds"],
    DECODE => ["vllm:request_decode_time_seconds", "trtllm_request_decode_time_seconds", "trtllm:request_decode_time_seconds"],
    INFERENCE => ["vllm:request_inference_time_seconds", "trtllm_request_inference_time_seconds", "trtllm:request_inference_time_seconds"],
    ITERATION_TOKENS => ["vllm:iteration_tokens_total"],
    REQUEST_PROMPT_TOKENS => ["vllm:request_prompt_tokens", "sglang:prompt_tokens_histogram", "dynamo_frontend_input_sequence_tokens", "tgi_request_input_length"],
    REQUEST_GENERATION_TOKENS => ["vllm:request_generation_tokens", "sglang:generation_tokens_histogram", "dynamo_frontend_output_sequence_tokens", "tgi_request_generated_tokens"],
    KV_USAGE => ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "trtllm_kv_cache_utilization", "trtllm:kv_cache_utilization"],
    WAITING => ["vllm:num_requests_waiting", "sglang:num_queue_reqs", "trtllm_num_requests_waiting", "trtllm:num_requests_waiting", "dynamo_frontend_queued_requests", "tgi_queue_size", "llamacpp:requests_deferred", "nv_inference_pending_request_count"],
    RUNNING => ["vllm:num_requests_running", "sglang:num_running_reqs", "trtllm_num_requests_running", "trtllm:num_requests_running", "dynamo_frontend_inflight_requests", "tgi_batch_current_size", "llamacpp:requests_processing"],
    HTTP_REQUESTS => ["http_requests_total"],
    MAX_TOKENS => ["vllm:request_params_max_tokens"],
    PREEMPTIONS => ["vllm:num_preemptions_total"],
    SPEC_DRAFTS => ["vllm:spec_decode_num_drafts_total"],
    SPEC_DRAFT_TOKENS => ["vllm:spec_decode_num_draft_tokens_total"],
    SPEC_ACCEPTED => ["vllm:spec_decode_num_accepted_tokens_total"],
    FB_USED => ["DCGM_FI_DEV_FB_USED"],
    FB_FREE => ["DCGM_FI_DEV_FB_FREE"],
    POWER => ["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS"],
    // mJ since boot (classic); DCGM 4.6.1's replacement counts joules.
    ENERGY => ["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"],
    // DCGM 4.6.1: the framebuffer share itself, where used/free are not exported.
    FB_USED_RATIO => ["DCGM_FI_DEV_FB_USED_RATIO"],
    SM_ACTIVE => ["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO"],
    SM_OCCUPANCY => ["DCGM_FI_PROF_SM_OCCUPANCY"],
    GPU_UTIL => ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"],
    DRAM_ACTIVE => ["DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO"],
    TENSOR_ACTIVE => ["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO"],
    GR_ENGINE_ACTIVE => ["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"],
}

// The other engines' families that feed (or, once their derivations are
// built, will feed) the same derived series: tracked for detection and for
// the families a dashboard would miss, never kept as samples. Names from
// `docs/engines/` and the fixtures written from each engine's source.
inputs! {
    SGLANG_PROMPT_TOKENS => ["sglang:prompt_tokens_total"],
    SGLANG_GENERATION_TOKENS => ["sglang:generation_tokens_total"],
    SGLANG_TTFT => ["sglang:time_to_first_token_seconds"],
    // 0.4.5 replaced `time_per_output_token_seconds` with the ITL histogram.
    SGLANG_ITL => ["sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"],
    SGLANG_E2E => ["sglang:e2e_request_latency_seconds"],
    SGLANG_QUEUE => ["sglang:queue_time_seconds"],
    // A 0-1 gauge computed by SGLang, not counters.
    SGLANG_CACHE_HIT_RATE => ["sglang:cache_hit_rate"],
    SGLANG_CACHED_TOKENS => ["sglang:cached_tokens_total"],
    SGLANG_TOKEN_USAGE => ["sglang:token_usage"],
    SGLANG_WAITING => ["sglang:num_queue_reqs"],
    TGI_E2E => ["tgi_request_duration"],
    TGI_QUEUE => ["tgi_request_queue_duration"],
    // inference time / generated tokens per request: prefill included.
    TGI_TIME_PER_TOKEN => ["tgi_request_mean_time_per_token_duration"],
    TGI_GENERATED_TOKENS => ["tgi_request_generated_tokens"],
    TGI_INPUT_LENGTH => ["tgi_request_input_length"],
    TGI_WAITING => ["tgi_queue_size"],
    LLAMACPP_PROMPT_TOKENS => ["llamacpp:prompt_tokens_total"],
    LLAMACPP_GENERATION_TOKENS => ["llamacpp:tokens_predicted_total"],
    LLAMACPP_WAITING => ["llamacpp:requests_deferred"],
    TRTLLM_PROMPT_TOKENS => ["trtllm_prompt_tokens_total", "trtllm:prompt_tokens_total"],
    TRTLLM_GENERATION_TOKENS => ["trtllm_generation_tokens_total", "trtllm:generation_tokens_total"],
    TRTLLM_TTFT => ["trtllm_time_to_first_token_seconds", "trtllm:time_to_first_token_seconds"],
    TRTLLM_ITL => ["trtllm_time_per_output_token_seconds", "trtllm:time_per_output_token_seconds"],
    TRTLLM_E2E => ["trtllm_e2e_request_latency_seconds", "trtllm:e2e_request_latency_seconds"],
    TRTLLM_QUEUE => ["trtllm_request_queue_time_seconds", "trtllm:request_queue_time_seconds"],
    TRTLLM_KV_HIT_RATE => ["trtllm_kv_cache_hit_rate", "trtllm:kv_cache_hit_rate"],
    TRTLLM_REUSED_BLOCKS => ["trtllm_kv_cache_reused_blocks_total", "trtllm:kv_cache_reused_blocks_total"],
    TRTLLM_KV_USAGE => ["trtllm_kv_cache_utilization", "trtllm:kv_cache_utilization"],
    TRTLLM_WAITING => ["trtllm_num_requests_waiting", "trtllm:num_requests_waiting"],
    // Triton's first response of a decoupled (streaming) model: TTFT.
    TRITON_FIRST_RESPONSE => ["nv_inference_first_response_histogram_ms"],
    TRITON_REQUEST_DURATION => ["nv_inference_request_duration_us"],
    TRITON_QUEUE_DURATION => ["nv_inference_queue_duration_us"],
    TRITON_OUTPUT_TOKENS => ["nv_llm_output_token_len"],
    TRITON_KV_BLOCKS => ["nv_trt_llm_kv_cache_block_metrics"],
    TRITON_WAITING => ["nv_inference_pending_request_count"],
    DYNAMO_TTFT => ["dynamo_frontend_time_to_first_token_seconds"],
    DYNAMO_ITL => ["dynamo_frontend_inter_token_latency_seconds"],
    DYNAMO_E2E => ["dynamo_frontend_request_duration_seconds"],
    DYNAMO_OUTPUT_TOKENS => ["dynamo_frontend_output_tokens_total"],
    DYNAMO_INPUT_TOKENS => ["dynamo_frontend_input_sequence_tokens"],
    DYNAMO_WAITING => ["dynamo_frontend_queued_requests"],
    DYNAMO_WORKER_KV_USAGE => ["dynamo_component_gpu_cache_usage_percent"],
    DYNAMO_WORKER_REQUESTS => ["dynamo_component_requests_total"],
}

/// The other engines' inputs (see above), in the order they are tracked.
pub const ENGINE_INPUTS: &[&Input] = &[
    &SGLANG_PROMPT_TOKENS,
    &SGLANG_GENERATION_TOKENS,
    &SGLANG_TTFT,
    &SGLANG_ITL,
    &SGLANG_E2E,
    &SGLANG_QUEUE,
    &SGLANG_CACHE_HIT_RATE,
    &SGLANG_CACHED_TOKENS,
    &SGLANG_TOKEN_USAGE,
    &SGLANG_WAITING,
    &TGI_E2E,
    &TGI_QUEUE,
    &TGI_TIME_PER_TOKEN,
    &TGI_GENERATED_TOKENS,
    &TGI_INPUT_LENGTH,
    &TGI_WAITING,
    &LLAMACPP_PROMPT_TOKENS,
    &LLAMACPP_GENERATION_TOKENS,
    &LLAMACPP_WAITING,
    &TRTLLM_PROMPT_TOKENS,
    &TRTLLM_GENERATION_TOKENS,
    &TRTLLM_TTFT,
    &TRTLLM_ITL,
    &TRTLLM_E2E,
    &TRTLLM_QUEUE,
    &TRTLLM_KV_HIT_RATE,
    &TRTLLM_REUSED_BLOCKS,
    &TRTLLM_KV_USAGE,
    &TRTLLM_WAITING,
    &TRITON_FIRST_RESPONSE,
    &TRITON_REQUEST_DURATION,
    &TRITON_QUEUE_DURATION,
    &TRITON_OUTPUT_TOKENS,
    &TRITON_KV_BLOCKS,
    &TRITON_WAITING,
    &DYNAMO_TTFT,
    &DYNAMO_ITL,
    &DYNAMO_E2E,
    &DYNAMO_OUTPUT_TOKENS,
    &DYNAMO_INPUT_TOKENS,
    &DYNAMO_WAITING,
    &DYNAMO_WORKER_KV_USAGE,
    &DYNAMO_WORKER_REQUESTS,
];

/// Every input of every derived series.
pub const ALL_INPUTS: &[&Input] = &[
    &PROMPT_TOKENS,
    &GENERATION_TOKENS,
    &PREFIX_QUERIES,
    &PREFIX_HITS,
    &PREFIX_MISSES,
    &TRITON_SUCCESS_IN,
    &TRITON_DURATION_US,
    &TRITON_QUEUE_US,
    &TRITON_FIRST_RESPONSE_MS,
    &TRITON_KV_BLOCK_METRICS,
    &DYNAMO_WORKER_KV_USAGE_IN,
    &PREFIX_HIT_RATE_V0,
    &PROMPT_TOKENS_CACHED,
    &SUCCESS,
    &TTFT,
    &ITL,
    &E2E,
    &QUEUE,
    &PREFILL,
    &DECODE,
    &INFERENCE,
    &ITERATION_TOKENS,
    &REQUEST_PROMPT_TOKENS,
    &REQUEST_GENERATION_TOKENS,
    &KV_USAGE,
    &WAITING,
    &RUNNING,
    &HTTP_REQUESTS,
    &FB_USED,
    &FB_FREE,
    &POWER,
    &ENERGY,
    &GPU_UTIL,
    &DRAM_ACTIVE,
    &TENSOR_ACTIVE,
    &GR_ENGINE_ACTIVE,
    &FB_USED_RATIO,
    &SM_ACTIVE,
    &SM_OCCUPANCY,
    &MAX_TOKENS,
    &PREEMPTIONS,
    &SPEC_DRAFTS,
    &SPEC_DRAFT_TOKENS,
    &SPEC_ACCEPTED,
];

/// The histograms whose buckets are read (quantiles, SLO shares). The
/// `_bucket` series of the other inputs are not kept: their figures read
/// `_sum` and `_count` only, and on a vLLM target those buckets (queue,
/// prefill, decode, inference time, token counts) are half of the inputs,
/// so half of what every scrape writes and every window holds.
pub const BUCKETS_READ: &[&Input] = &[&TTFT, &ITL, &E2E, &TRITON_FIRST_RESPONSE_MS];

/// Counters whose label children appear as events happen; their `_created`
/// series are kept so that a child born inside the window counts from 0.
pub const CREATED_OF: &[&Input] = &[&SUCCESS, &HTTP_REQUESTS];
