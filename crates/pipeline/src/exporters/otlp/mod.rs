//! Exporter `otlp`: OTLP/gRPC (`MetricsService/Export`) with tonic and the
//! opentelemetry-proto types, to an OpenTelemetry Collector, Elastic's
//! managed OTLP endpoint or any OTLP backend.
//!
//! - `config.rs`: what the user configures (shared pieces used by `otlphttp`);
//! - `request_builder.rs`: batches → `ExportMetricsServiceRequest` (mapping in `infertel-otlp`);
//! - `service.rs`: one request over gRPC, and the retry loop both OTLP exporters share;
//! - `sink.rs`: the sending queue and sharding by data point.

pub mod config;
pub mod request_builder;
pub mod service;
pub mod sink;

pub use sink::{OtlpExporter, new_exporter};
