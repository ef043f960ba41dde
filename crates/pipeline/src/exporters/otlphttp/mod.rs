//! Exporter `otlphttp`: OTLP/HTTP, protobuf POSTed to `/v1/metrics`.
//!
//! - `config.rs`: what the user configures (`endpoint` + `/v1/metrics`, or `metrics_endpoint`);
//! - `service.rs`: one request: compression, headers, status classes;
//! - `sink.rs`: the shared OTLP queue and conversion (see `exporters/otlp/`).
//!
//! The request builder is `exporters/otlp/request_builder.rs`, shared.

pub mod config;
pub mod service;
pub mod sink;

pub use sink::{OtlpHttpExporter, new_exporter};
