//! Simulation parameters: the workload, the engine's capacity and the GPU.
//!
//! Defaults reproduce the setup of the reference article: Qwen2.5-3B-Instruct
//! on one NVIDIA A10G (24 GB), short prompts (~50 tokens), long answers,
//! a third of prompt tokens served from the prefix cache, 240 W under load,
//! memory-bound decode (DRAM active 0.804, tensor pipe 0.166).

/// Everything the simulator needs to know. Build with struct-update syntax
/// from [`SimConfig::default`] so that new fields never break callers.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Closed-loop client count: each client sends its next request as soon
    /// as the previous one finished. Fractional values are rounded.
    pub concurrency: f64,
    /// Maximum concurrent sequences in the engine (vLLM `--max-num-seqs`);
    /// requests beyond it wait in the queue.
    pub capacity: f64,
    /// `model_name` label (vLLM `--served-model-name`).
    pub model_name: String,
    /// Mean prompt length in tokens (uniform in 0.5×..1.5× the mean).
    pub prompt_tokens_mean: f64,
    /// Mean answer length in tokens (uniform in 0.6×..1.4× the mean).
    pub output_tokens_mean: f64,
    /// Share of prompt tokens served from the prefix cache (0–1).
    pub prefix_reuse: f64,
    /// Share of requests that run into `max_tokens` (`finished_reason="length"`).
    pub finished_length_share: f64,
    /// Share of requests that fail inside the engine (`finished_reason="error"`,
    /// HTTP 5xx).
    pub error_share: f64,
    /// Share of requests the client abandons mid-answer (`finished_reason="abort"`).
    pub abort_share: f64,
    /// GPUs behind the engine (tensor parallel); dcgm-exporter shows one series each.
    pub gpu_count: u32,
    /// dcgm-exporter `modelName` label.
    pub gpu_model: String,
    /// Board power per GPU with the engine at capacity, in watts.
    pub power_watts: f64,
    /// `DCGM_FI_PROF_DRAM_ACTIVE` at capacity (ratio 0–1).
    pub dram_active: f64,
    /// `DCGM_FI_PROF_PIPE_TENSOR_ACTIVE` at capacity (ratio 0–1).
    pub tensor_active: f64,
    /// Framebuffer visible to the process (FB_USED + FB_FREE), MiB.
    pub fb_total_mib: f64,
    /// RNG seed; the same seed and the same sequence of `advance_to` times
    /// give the same exposition.
    pub seed: u64,
    /// The inference server whose `/metrics` the engine is shown as.
    pub server: crate::engines::ServerKind,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            concurrency: 8.0,
            capacity: 16.0,
            model_name: "Qwen/Qwen2.5-3B-Instruct".into(),
            prompt_tokens_mean: 50.0,
            output_tokens_mean: 700.0,
            prefix_reuse: 0.325,
            finished_length_share: 0.02,
            // The article's SLO allows 0.5 % error + abort; split it.
            error_share: 0.002,
            abort_share: 0.003,
            gpu_count: 1,
            gpu_model: "NVIDIA A10G".into(),
            power_watts: 240.0,
            dram_active: 0.804,
            tensor_active: 0.166,
            fb_total_mib: 22835.0,
            seed: 0x1f0e_7e11,
            server: crate::engines::ServerKind::Vllm,
        }
    }
}

impl SimConfig {
    /// The workload the article actually measured at 8 concurrent requests:
    /// generated/prompt token ratio 2.04 (≈102 output tokens for 50-token
    /// prompts), which is what makes decode 97 % of end-to-end latency,
    /// ~10.4 tokens per iteration and ~480 generated tokens/s.
    pub fn article_workload() -> Self {
        SimConfig { concurrency: 8.0, output_tokens_mean: 102.0, ..SimConfig::default() }
    }
}
