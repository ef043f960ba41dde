//! What infertel derives from vLLM and dcgm-exporter series: the pure part.
//!
//! * [`window`]: counter increase with Prometheus' reset correction and no
//!   extrapolation, Prometheus' `histogram_quantile`.
//! * [`schema`]: vLLM metric names from 0.5 (V0) to 0.33 and dcgm-exporter's
//!   classic and DCGM 4.6 names, era detection, expected families.
//! * [`engine`]: per-target sample windows, the derived series, the GPU join,
//!   staleness of derived series, skip reasons.
//! * [`catalog`]: name, HELP and unit of every derived series.
//! * [`report`]: verdicts against the objectives and recommendations.
//!
//! No I/O, no async: the processor (`infertel-pipeline`,
//! `processors/inference/`) and `infertel report` wrap it.

pub mod article;
pub mod catalog;
pub mod engine;
pub mod report;
pub mod schema;
pub mod scrape;
pub mod window;

pub use engine::{
    Derived, Engine, Evaluation, Join, MemoryBound, Objectives, Scale, SchemaEvent, Settings, TargetKey, Touched,
};
pub use window::Skip;
