//! Receivers: where data enters a pipeline. One folder per receiver type;
//! the config key `receivers.<type>` names the folder.

pub mod otlp;
pub mod prometheus;

use crate::primitives::{ComponentKind, or_default};
use serde::Deserializer;

#[derive(Debug)]
pub enum ReceiverConfig {
    Prometheus(prometheus::config::PrometheusConfig),
    Otlp(otlp::config::OtlpReceiverConfig),
}

impl ComponentKind for ReceiverConfig {
    const SECTION: &'static str = "receiver";
    const KNOWN: &'static [&'static str] = &["prometheus", "otlp"];
    fn deserialize_kind<'de, D: Deserializer<'de>>(kind: &str, d: D) -> Result<Self, D::Error> {
        match kind {
            "prometheus" => Ok(ReceiverConfig::Prometheus(or_default(d)?)),
            "otlp" => Ok(ReceiverConfig::Otlp(or_default(d)?)),
            other => Err(serde::de::Error::custom(format!("unknown receiver type {other:?}"))),
        }
    }
}

impl ReceiverConfig {
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ReceiverConfig::Prometheus(c) => c.validate(),
            ReceiverConfig::Otlp(c) => c.validate(),
        }
    }
}
