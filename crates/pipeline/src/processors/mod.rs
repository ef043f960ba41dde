//! Processors: transform batches between receivers and exporters. One folder
//! per processor type; the config key `processors.<type>` names the folder.

pub mod batch;
pub mod inference;
pub mod memory_limiter;
pub mod preserve_names;

use crate::config::{ComponentKind, or_default};
use serde::Deserializer;

#[derive(Debug)]
pub enum ProcessorConfig {
    Batch(batch::BatchConfig),
    Inference(inference::InferenceConfig),
    MemoryLimiter(memory_limiter::MemoryLimiterConfig),
    PreserveNames(preserve_names::PreserveNamesConfig),
}

impl ComponentKind for ProcessorConfig {
    const SECTION: &'static str = "processor";
    const KNOWN: &'static [&'static str] = &["batch", "inference", "memory_limiter", "preserve_names"];
    fn deserialize_kind<'de, D: Deserializer<'de>>(kind: &str, d: D) -> Result<Self, D::Error> {
        match kind {
            "batch" => Ok(ProcessorConfig::Batch(or_default(d)?)),
            "inference" => Ok(ProcessorConfig::Inference(or_default(d)?)),
            "memory_limiter" => Ok(ProcessorConfig::MemoryLimiter(or_default(d)?)),
            "preserve_names" => Ok(ProcessorConfig::PreserveNames(or_default(d)?)),
            other => Err(serde::de::Error::custom(format!("unknown processor type {other:?}"))),
        }
    }
}

impl ProcessorConfig {
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ProcessorConfig::Batch(c) => c.validate(),
            ProcessorConfig::Inference(c) => c.validate(),
            ProcessorConfig::MemoryLimiter(c) => c.validate(),
            ProcessorConfig::PreserveNames(_) => Ok(()),
        }
    }
}
