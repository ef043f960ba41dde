//! Exporters: where data leaves. One folder per exporter type; the config
//! key `exporters.<type>` names the folder.

pub mod debug;
pub mod prometheusremotewrite;
pub mod shared;

use crate::config::{or_default, ComponentKind};
use serde::Deserializer;

#[derive(Debug)]
pub enum ExporterConfig {
    PrometheusRemoteWrite(prometheusremotewrite::config::RemoteWriteConfig),
    Debug(debug::DebugConfig),
}

impl ComponentKind for ExporterConfig {
    const SECTION: &'static str = "exporter";
    const KNOWN: &'static [&'static str] = &["prometheusremotewrite", "debug"];
    fn deserialize_kind<'de, D: Deserializer<'de>>(kind: &str, d: D) -> Result<Self, D::Error> {
        match kind {
            "prometheusremotewrite" => Ok(ExporterConfig::PrometheusRemoteWrite(serde::Deserialize::deserialize(d)?)),
            "debug" => Ok(ExporterConfig::Debug(or_default(d)?)),
            other => Err(serde::de::Error::custom(format!("unknown exporter type {other:?}"))),
        }
    }
}

impl ExporterConfig {
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ExporterConfig::PrometheusRemoteWrite(c) => c.validate(),
            ExporterConfig::Debug(_) => Ok(()),
        }
    }

    /// The `auth.authenticator` extension id, when the exporter uses one.
    pub fn authenticator(&self) -> Option<&str> {
        match self {
            ExporterConfig::PrometheusRemoteWrite(c) => c.auth.as_ref().map(|a| a.authenticator.as_str()),
            ExporterConfig::Debug(_) => None,
        }
    }
}
