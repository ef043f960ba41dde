//! infertel's pipeline: the config schema, the components (receivers,
//! processors, exporters, extensions), the consumer interface that chains
//! them, the graph built from the config, and the agent's own metrics.
//!
//! Find a component from its config key in one step: `receivers.prometheus`
//! is `receivers/prometheus/`, `exporters.prometheusremotewrite` is
//! `exporters/prometheusremotewrite/`, `processors.batch` is
//! `processors/batch/`, `processors.inference` is `processors/inference/`.

pub mod config;
pub mod consumer;
pub mod exporters;
pub mod extensions;
pub mod graph;
pub mod http;
pub mod primitives;
pub mod processors;
pub mod receivers;
pub mod secrets;
pub mod self_otlp;
pub mod status;
pub mod telemetry;

pub use config::{Config, ConfigIssue, load_str};
pub use consumer::{BoxFuture, Consumer};
pub use graph::Service;
pub use telemetry::Telemetry;
