//! `infertel simulate`: serves a simulated vLLM (or, with `--engine`, SGLang,
//! TGI, llama.cpp, trtllm-serve or Dynamo's frontend) and dcgm-exporter.

use crate::cli::{LogArgs, SimWorkload};
use crate::exit;
use infertel_simulator::{SimConfig, serve};
use std::net::SocketAddr;

#[allow(clippy::too_many_arguments)]
pub async fn simulate(
    log: &LogArgs,
    vllm: SocketAddr,
    dcgm: SocketAddr,
    concurrency: f64,
    capacity: f64,
    model: Option<String>,
    seed: u64,
    w: SimWorkload,
) -> u8 {
    crate::logging::init(log, "info", false);
    for (flag, v) in [
        ("--prefix-reuse", w.prefix_reuse),
        ("--length-share", w.length_share),
        ("--error-share", w.error_share),
        ("--abort-share", w.abort_share),
        ("--dram-active", w.dram_active),
        ("--tensor-active", w.tensor_active),
    ] {
        if !(0.0..=1.0).contains(&v) {
            eprintln!("error: {flag} is a share between 0 and 1, got {v}");
            return exit::USAGE;
        }
    }
    if w.length_share + w.error_share + w.abort_share > 1.0 {
        eprintln!("error: --length-share + --error-share + --abort-share must not exceed 1");
        return exit::USAGE;
    }
    let mut cfg = SimConfig {
        concurrency,
        capacity,
        seed,
        prefix_reuse: w.prefix_reuse,
        finished_length_share: w.length_share,
        error_share: w.error_share,
        abort_share: w.abort_share,
        prompt_tokens_mean: w.prompt_tokens,
        output_tokens_mean: w.output_tokens,
        gpu_count: w.gpus.max(1),
        power_watts: w.power_watts,
        dram_active: w.dram_active,
        tensor_active: w.tensor_active,
        server: w.engine,
        ..SimConfig::default()
    };
    if let Some(m) = model {
        cfg.model_name = m;
    }
    let server = match serve(cfg, vllm, dcgm).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot listen on {vllm} / {dcgm}: {e}");
            return exit::FAILURE;
        }
    };
    println!("simulated {}: http://{}/metrics", w.engine.as_str(), server.vllm_addr);
    println!("simulated dcgm-exporter: http://{}/metrics", server.dcgm_addr);
    println!("concurrency {concurrency} (capacity {capacity}); Ctrl-C to stop");
    super::shutdown_signal().await;
    server.shutdown();
    exit::OK
}
