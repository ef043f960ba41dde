//! Processor `inference`: derived series for vLLM and dcgm-exporter (the math
//! is in the `infertel-inference` crate; `docs/derived-metrics.md` lists them).

pub mod config;
pub mod processor;

pub use config::InferenceConfig;
pub use processor::InferenceProcessor;
