//! Exporter `debug`: prints what flows. `basic` logs one line per batch,
//! `normal` adds one line per series, `detailed` adds HELP/TYPE metadata.

use crate::consumer::{BoxFuture, Consumer};
use infertel_model::{Batch, is_stale_nan};
use serde::Deserialize;
use std::io::Write;

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Verbosity {
    #[default]
    Basic,
    Normal,
    Detailed,
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct DebugConfig {
    #[serde(default)]
    pub verbosity: Verbosity,
}

pub struct DebugExporter {
    pub id: String,
    pub cfg: DebugConfig,
}

impl Consumer for DebugExporter {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        tracing::info!(exporter = %self.id, series = batch.series.len(), samples = batch.sample_count(), metadata = batch.metadata.len(), "batch");
        if self.cfg.verbosity != Verbosity::Basic {
            let mut out = std::io::stdout().lock();
            if self.cfg.verbosity == Verbosity::Detailed {
                for m in &batch.metadata {
                    let _ = writeln!(out, "# {} {} {:?}", m.family, m.kind.as_str(), &*m.help);
                }
            }
            for s in &batch.series {
                for p in &s.samples {
                    let v = if is_stale_nan(p.value) { "stale".to_string() } else { p.value.to_string() };
                    let _ = writeln!(out, "{} {} @{}", s.labels, v, p.timestamp_ms);
                }
            }
        }
        Box::pin(async {})
    }
}
