//! A built-in simulated vLLM (V1 engine, current metric names) and NVIDIA
//! dcgm-exporter; the same engine can speak as SGLang, TGI, llama.cpp,
//! trtllm-serve or Dynamo's frontend (`engines.rs`).
//!
//! It powers `infertel simulate` and `infertel demo`, so someone without a GPU
//! can watch the agent work, and it lets the inference processor's tests
//! drive every derived gauge with known inputs.
//!
//! * [`SimConfig`] (`config.rs`): workload, engine capacity and GPU.
//! * [`Simulator`] (`engine.rs`): the deterministic dynamics; all counters,
//!   histograms and gauges live here and only move in [`Simulator::advance_to`].
//! * `vllm.rs` / `dcgm.rs`: the two expositions, byte-for-byte in the style of
//!   the real captures in `shared/fixtures/real`.
//! * [`serve`] (`server.rs`): both `/metrics` endpoints over HTTP, advancing
//!   the simulator to wall-clock time on every scrape.
//!
//! ```
//! use infertel_simulator::{SimConfig, Simulator};
//! let mut sim = Simulator::new(SimConfig::default(), 1_774_000_000.0);
//! sim.advance_to(1_774_000_060.0);
//! assert!(sim.render_vllm().contains("vllm:generation_tokens_total{"));
//! assert!(sim.render_dcgm().contains("DCGM_FI_DEV_POWER_USAGE{"));
//! ```

mod config;
mod dcgm;
mod engine;
mod engines;
mod fmt;
mod hist;
mod server;
mod vllm;

pub use config::SimConfig;
pub use engine::{FINISHED_REASONS, Simulator};
pub use engines::ServerKind;
pub use server::{CONTENT_TYPE, SimServer, serve};

impl Simulator {
    /// vLLM's `/metrics` as its `prometheus_client` prints it (text 0.0.4).
    pub fn render_vllm(&self) -> String {
        vllm::render(self)
    }

    /// The inference server's `/metrics`: vLLM's, or the one `cfg.server`
    /// names (SGLang, TGI, llama.cpp, trtllm-serve, Dynamo's frontend).
    pub fn render_server(&self) -> String {
        match self.cfg.server {
            ServerKind::Vllm => vllm::render(self),
            other => engines::render(self, other),
        }
    }

    /// dcgm-exporter's `/metrics`.
    pub fn render_dcgm(&self) -> String {
        dcgm::render(self)
    }
}
