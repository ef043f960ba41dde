//! Exporter `prometheusremotewrite`: Remote-Write 1.0 to Prometheus, Mimir,
//! VictoriaMetrics or Elasticsearch's `/_prometheus/.../api/v1/write`.
//!
//! - `config.rs`: what the user configures;
//! - `request_builder.rs`: how series become size-bounded, snappy-compressed WriteRequests;
//! - `service.rs`: how one request is sent: headers, auth, retries and what each status means;
//! - `elasticsearch.rs`: Elasticsearch's partial-failure answers (CONFLICT = already stored);
//! - `sink.rs`: what drives it: sharding by series, the sending queue, consumers, self-metrics.

pub mod config;
pub mod elasticsearch;
pub mod request_builder;
pub mod service;
pub mod sink;

pub use sink::{RemoteWriteExporter, new_exporter};
