//! `infertel simulate`: serves a simulated vLLM and dcgm-exporter.

use crate::cli::LogArgs;
use crate::exit;
use infertel_simulator::{serve, SimConfig};
use std::net::SocketAddr;

pub async fn simulate(log: &LogArgs, vllm: SocketAddr, dcgm: SocketAddr, concurrency: f64, capacity: f64, model: Option<String>, seed: u64) -> u8 {
    crate::logging::init(log, "info", false);
    let mut cfg = SimConfig { concurrency, capacity, seed, ..SimConfig::default() };
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
    println!("simulated vLLM:         http://{}/metrics", server.vllm_addr);
    println!("simulated dcgm-exporter: http://{}/metrics", server.dcgm_addr);
    println!("concurrency {concurrency} (capacity {capacity}); Ctrl-C to stop");
    super::shutdown_signal().await;
    server.shutdown();
    exit::OK
}
