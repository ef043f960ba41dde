//! Processor `preserve_names`: every series of the pipeline leaves every
//! exporter under its exact Prometheus series name and labels.
//!
//! Remote write always does that; the processor matters for the OTLP
//! exporters, which otherwise apply the OTel Prometheus compatibility mapping
//! (`infertel-otlp`, [`infertel_otlp::Naming::Otel`]). With it, they send one
//! OTLP metric per series name ([`infertel_otlp::Naming::Preserve`]):
//! counters, a histogram's `_bucket` (with `le`) and `_count` become
//! monotonic cumulative Sums, `_sum` a non-monotonic cumulative Sum, gauges,
//! untyped series, summary quantiles and `_created` series Gauges; every
//! label, `job` and `instance` included, stays a data-point attribute; the
//! family type is kept as `prometheus.type` metadata.
//!
//! How the mode reaches the exporters: naming is a property of the pipeline,
//! not of single batches, so the graph (`graph.rs`) hands each exporter of a
//! pipeline that lists `preserve_names` a consumer bound to
//! `Naming::Preserve`; the exporter's queue keeps the mode with every queued
//! batch, so one exporter shared by a preserving and a normal pipeline sends
//! each pipeline's data in its own mode. In the processor chain it passes
//! batches through unchanged, wherever it is listed.

use serde::Deserialize;

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct PreserveNamesConfig {}
