//! Command-line interface.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "infertel", version, about = "Telemetry agent for self-hosted LLM inference (vLLM + dcgm-exporter → Prometheus remote write / OTLP)")]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level or filter (e.g. `info`, `debug`, `infertel_pipeline=debug`); overrides RUST_LOG.
    #[arg(long, global = true)]
    pub log_level: Option<String>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the agent with a config file.
    Run {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check a config file without touching the network; exit 0 if valid, 78 if not.
    Validate {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Dry run: scrape once (or read a file) and print, per exporter, each
    /// metric's final name, type and labels, with warnings where a backend
    /// will misread them.
    Names {
        #[arg(long, short)]
        config: PathBuf,
        /// A URL to scrape or a file to read instead of the configured targets.
        #[arg(long)]
        target: Option<String>,
    },
    /// Start a simulated vLLM + dcgm-exporter on loopback, scrape it with the
    /// default pipeline and show what flows (no GPU, no backend needed).
    Demo {
        /// Stop after this long (e.g. `30s`); runs until Ctrl-C when absent.
        #[arg(long)]
        duration: Option<String>,
        /// Concurrent requests the simulated users send.
        #[arg(long, default_value_t = 12.0)]
        concurrency: f64,
        /// Scrape interval for the demo pipeline.
        #[arg(long, default_value = "2s")]
        interval: String,
    },
    /// Serve a simulated vLLM (V1, current metric names) and dcgm-exporter.
    Simulate {
        /// Address for the vLLM /metrics endpoint.
        #[arg(long, default_value = "127.0.0.1:8000")]
        vllm: SocketAddr,
        /// Address for the dcgm-exporter /metrics endpoint.
        #[arg(long, default_value = "127.0.0.1:9400")]
        dcgm: SocketAddr,
        /// Concurrent requests; above --capacity requests queue.
        #[arg(long, default_value_t = 12.0)]
        concurrency: f64,
        /// Sequences the engine runs at once before queueing.
        #[arg(long, default_value_t = 16.0)]
        capacity: f64,
        /// Served model name.
        #[arg(long)]
        model: Option<String>,
        /// Random seed (the simulation is deterministic for a seed).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}
