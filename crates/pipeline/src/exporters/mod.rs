//! Exporters: where data leaves. One folder per exporter type; the config
//! key `exporters.<type>` names the folder; `exporterhelper/` is what they
//! share (queue, persistent queue, probes, retry and TLS settings).

pub mod debug;
pub mod exporterhelper;
pub mod file;
pub mod otlp;
pub mod otlphttp;
pub mod prometheus;
pub mod prometheusremotewrite;

// The helper's modules under their short paths (`exporters::queue`, ...),
// which the exporters and the graph use.
pub use exporterhelper::{persistent, probe, queue, shared};

use crate::primitives::{ComponentKind, or_default};
use serde::Deserializer;

// Built once from the file; the size difference between variants is irrelevant.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ExporterConfig {
    PrometheusRemoteWrite(prometheusremotewrite::config::RemoteWriteConfig),
    Debug(debug::DebugConfig),
    Otlp(otlp::config::OtlpConfig),
    OtlpHttp(otlphttp::config::OtlpHttpConfig),
    Prometheus(prometheus::config::PrometheusConfig),
    File(file::config::FileConfig),
}

impl ComponentKind for ExporterConfig {
    const SECTION: &'static str = "exporter";
    const KNOWN: &'static [&'static str] =
        &["prometheusremotewrite", "debug", "otlp", "otlphttp", "prometheus", "file"];
    fn deserialize_kind<'de, D: Deserializer<'de>>(kind: &str, d: D) -> Result<Self, D::Error> {
        match kind {
            "prometheusremotewrite" => Ok(ExporterConfig::PrometheusRemoteWrite(serde::Deserialize::deserialize(d)?)),
            "debug" => Ok(ExporterConfig::Debug(or_default(d)?)),
            "otlp" => Ok(ExporterConfig::Otlp(serde::Deserialize::deserialize(d)?)),
            "otlphttp" => Ok(ExporterConfig::OtlpHttp(serde::Deserialize::deserialize(d)?)),
            "prometheus" => Ok(ExporterConfig::Prometheus(serde::Deserialize::deserialize(d)?)),
            "file" => Ok(ExporterConfig::File(serde::Deserialize::deserialize(d)?)),
            other => Err(serde::de::Error::custom(format!("unknown exporter type {other:?}"))),
        }
    }
}

impl ExporterConfig {
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ExporterConfig::PrometheusRemoteWrite(c) => c.validate(),
            ExporterConfig::Debug(_) => Ok(()),
            ExporterConfig::Otlp(c) => c.validate(),
            ExporterConfig::OtlpHttp(c) => c.validate(),
            ExporterConfig::Prometheus(c) => c.validate(),
            ExporterConfig::File(c) => c.validate(),
        }
    }

    /// The sending queue's settings, for exporters that have one.
    pub fn queue(&self) -> Option<&shared::QueueConfig> {
        match self {
            ExporterConfig::PrometheusRemoteWrite(c) => Some(&c.sending_queue),
            ExporterConfig::Debug(_) => None,
            ExporterConfig::Otlp(c) => Some(&c.sending_queue),
            ExporterConfig::OtlpHttp(c) => Some(&c.sending_queue),
            ExporterConfig::Prometheus(_) | ExporterConfig::File(_) => None,
        }
    }

    /// The on-disk queue a key of the exporter itself asks for (the
    /// Collector's `wal`), when no `file_storage` is named.
    pub fn own_storage(&self) -> Option<persistent::Storage> {
        match self {
            ExporterConfig::PrometheusRemoteWrite(c) => c.wal.as_ref().map(|w| w.storage()),
            _ => None,
        }
    }

    /// The `auth.authenticator` extension id, when the exporter uses one.
    pub fn authenticator(&self) -> Option<&str> {
        match self {
            ExporterConfig::PrometheusRemoteWrite(c) => c.auth.as_ref().map(|a| a.authenticator.as_str()),
            ExporterConfig::Debug(_) => None,
            ExporterConfig::Otlp(c) => c.auth.as_ref().map(|a| a.authenticator.as_str()),
            ExporterConfig::OtlpHttp(c) => c.auth.as_ref().map(|a| a.authenticator.as_str()),
            ExporterConfig::Prometheus(_) | ExporterConfig::File(_) => None,
        }
    }
}
