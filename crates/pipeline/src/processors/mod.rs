//! Processors: transform batches between receivers and exporters. One folder
//! per processor type; the config key `processors.<type>` names the folder.

pub mod actions;
pub mod attributes;
pub mod batch;
pub mod filter;
pub mod inference;
pub mod matching;
pub mod memory_limiter;
pub mod pdata;
pub mod preserve_names;
pub mod resource;
pub mod resourcedetection;
pub mod rewrite;
pub mod series_cache;

use crate::primitives::{ComponentKind, or_default};
use serde::Deserializer;

#[derive(Debug)]
pub enum ProcessorConfig {
    Attributes(attributes::AttributesConfig),
    Batch(batch::BatchConfig),
    Filter(filter::FilterConfig),
    Inference(inference::InferenceConfig),
    MemoryLimiter(memory_limiter::MemoryLimiterConfig),
    PreserveNames(preserve_names::PreserveNamesConfig),
    Resource(resource::ResourceConfig),
    ResourceDetection(resourcedetection::ResourceDetectionConfig),
}

impl ComponentKind for ProcessorConfig {
    const SECTION: &'static str = "processor";
    const KNOWN: &'static [&'static str] = &[
        "attributes",
        "batch",
        "filter",
        "inference",
        "memory_limiter",
        "preserve_names",
        "resource",
        "resourcedetection",
    ];
    fn deserialize_kind<'de, D: Deserializer<'de>>(kind: &str, d: D) -> Result<Self, D::Error> {
        match kind {
            "attributes" => Ok(ProcessorConfig::Attributes(or_default(d)?)),
            "batch" => Ok(ProcessorConfig::Batch(or_default(d)?)),
            "filter" => {
                let v: Option<serde_yaml::Value> = serde::Deserialize::deserialize(d)?;
                let c = v.map(filter::FilterConfig::from_value).transpose().map_err(serde::de::Error::custom)?;
                Ok(ProcessorConfig::Filter(c.unwrap_or_default()))
            }
            "resource" => Ok(ProcessorConfig::Resource(or_default(d)?)),
            "resourcedetection" => {
                let v: serde_yaml::Value = serde::Deserialize::deserialize(d)?;
                let c = resourcedetection::ResourceDetectionConfig::from_value(v).map_err(serde::de::Error::custom)?;
                Ok(ProcessorConfig::ResourceDetection(c))
            }
            "inference" => Ok(ProcessorConfig::Inference(or_default(d)?)),
            "memory_limiter" => Ok(ProcessorConfig::MemoryLimiter(or_default(d)?)),
            "preserve_names" => Ok(ProcessorConfig::PreserveNames(or_default(d)?)),
            other => Err(serde::de::Error::custom(format!("unknown processor type {other:?}"))),
        }
    }
}

/// Deserializes `v` as `T`, first refusing each key of `refused` with its
/// reason (keys the Collector has for other signals): the strict struct
/// then lists, for any other unknown key, only what infertel accepts.
pub fn refusing<T: serde::de::DeserializeOwned>(v: serde_yaml::Value, refused: &[(&str, &str)]) -> Result<T, String> {
    if let Some(m) = v.as_mapping() {
        for (k, why) in refused {
            if m.contains_key(*k) {
                return Err(format!("{k}: {why}"));
            }
        }
    }
    serde_yaml::from_value(v).map_err(|e| e.to_string())
}

impl ProcessorConfig {
    /// Errors as `(key relative to the processor, message)`; the key is
    /// empty when the message is about the processor as a whole.
    pub fn check(&self) -> Result<(), (String, String)> {
        match self {
            ProcessorConfig::Attributes(c) => c.check().map(|_| ()),
            ProcessorConfig::Filter(c) => c.check().map(|_| ()),
            ProcessorConfig::Resource(c) => c.check().map(|_| ()),
            ProcessorConfig::ResourceDetection(c) => c.check(),
            other => other.validate().map_err(|e| (String::new(), e)),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        match self {
            ProcessorConfig::Attributes(c) => c.check().map(|_| ()).map_err(|(k, e)| format!("{k}: {e}")),
            ProcessorConfig::Filter(c) => c.check().map(|_| ()).map_err(|(k, e)| format!("{k}: {e}")),
            ProcessorConfig::Resource(c) => c.check().map(|_| ()).map_err(|(k, e)| format!("{k}: {e}")),
            ProcessorConfig::ResourceDetection(c) => c.check().map_err(|(k, e)| format!("{k}: {e}")),
            ProcessorConfig::Batch(c) => c.validate(),
            ProcessorConfig::Inference(c) => c.validate(),
            ProcessorConfig::MemoryLimiter(c) => c.validate(),
            ProcessorConfig::PreserveNames(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
