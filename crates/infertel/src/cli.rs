//! Command-line interface.

use clap::{Args, Parser, Subcommand, ValueEnum};
use infertel_simulator::ServerKind;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "infertel",
    version,
    about = "Telemetry agent for self-hosted LLM inference (vLLM + dcgm-exporter → Prometheus remote write / OTLP)"
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct LogArgs {
    /// Log format [default: service.telemetry.logs.encoding, else text].
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log level or filter (e.g. `info`, `debug`, `infertel_pipeline=debug`); overrides RUST_LOG.
    #[arg(long, global = true)]
    pub log_level: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct RuntimeArgs {
    /// Threads that run scrapes, processors and exporters. One core carries
    /// well over a million samples a second, and a node agent's load is a
    /// small fraction of that: a second worker mostly adds wake-ups between
    /// threads (about 10% more CPU per sample in peer-bench). Disk writes
    /// of the durable queue still run off the worker. Raise it for a large
    /// fleet of targets per agent.
    #[arg(
        long,
        global = true,
        env = "INFERTEL_WORKER_THREADS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    pub worker_threads: u16,
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
        /// Reload when the config file changes (checked every second), as
        /// on SIGHUP: the new config is validated and built first; an
        /// invalid one leaves the running config in place.
        #[arg(long)]
        watch_config: bool,
    },
    /// Check a config file without touching the network; exit 0 if valid, 78 if not.
    Validate {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Probe every exporter's endpoint as `run` does at startup (an empty
    /// write with the real headers and auth, never a GET) and print a table;
    /// exit 0 when every exporter is reachable and authorized, 1 otherwise,
    /// 78 for an invalid config.
    Check {
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
        /// The inference server the simulator speaks as.
        #[arg(long, default_value = "vllm", value_parser = parse_engine)]
        engine: ServerKind,
    },
    /// Sample vLLM and dcgm-exporter for a window (or replay recorded scrapes)
    /// and print the verdicts against the objectives and the recommendations.
    Report {
        /// Agent config: its prometheus receivers' static targets are sampled
        /// and its `inference` processor settings (objectives, scale) apply.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// A /metrics URL to sample (repeatable); job is `vllm` for :8000, `dcgm` for :9400.
        #[arg(long = "url")]
        urls: Vec<String>,
        /// How long to sample; rates and quantiles are taken over it.
        #[arg(long, default_value = "2m")]
        window: String,
        /// Time between samples.
        #[arg(long, default_value = "5s")]
        interval: String,
        #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
        format: ReportFormat,
        /// Read recorded scrapes instead: DIR/<job>/<unix seconds>.prom (or DIR/<unix seconds>.prom).
        #[arg(long)]
        replay: Option<PathBuf>,
        /// Also write every live scrape to DIR in the --replay layout.
        #[arg(long)]
        record: Option<PathBuf>,
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
        #[command(flatten)]
        workload: SimWorkload,
    },
}

/// `--engine`: the simulator's server kinds, by their names.
fn parse_engine(s: &str) -> Result<ServerKind, String> {
    ServerKind::parse(s).ok_or_else(|| format!("{s:?}: one of vllm, sglang, tgi, llamacpp, trtllm, dynamo"))
}

/// Knobs that drive every derived gauge and recommendation.
#[derive(Args, Debug, Clone)]
pub struct SimWorkload {
    /// The inference server whose /metrics is served (its names, labels,
    /// buckets and HELP, as its source prints them).
    #[arg(long, default_value = "vllm", value_parser = parse_engine)]
    pub engine: ServerKind,
    /// Share of prompt tokens served from the prefix cache (0-1).
    #[arg(long, default_value_t = 0.325)]
    pub prefix_reuse: f64,
    /// Share of requests stopped by max_tokens (finished_reason="length").
    #[arg(long, default_value_t = 0.02)]
    pub length_share: f64,
    /// Share of requests failing in the engine (finished_reason="error").
    #[arg(long, default_value_t = 0.002)]
    pub error_share: f64,
    /// Share of requests aborted by the client (finished_reason="abort").
    #[arg(long, default_value_t = 0.003)]
    pub abort_share: f64,
    /// Mean prompt length, tokens.
    #[arg(long, default_value_t = 50.0)]
    pub prompt_tokens: f64,
    /// Mean answer length, tokens.
    #[arg(long, default_value_t = 700.0)]
    pub output_tokens: f64,
    /// GPUs behind the engine (tensor parallel).
    #[arg(long, default_value_t = 1)]
    pub gpus: u32,
    /// Board power per GPU at capacity, watts.
    #[arg(long, default_value_t = 240.0)]
    pub power_watts: f64,
    /// DCGM_FI_PROF_DRAM_ACTIVE at capacity (0-1).
    #[arg(long, default_value_t = 0.804)]
    pub dram_active: f64,
    /// DCGM_FI_PROF_PIPE_TENSOR_ACTIVE at capacity (0-1).
    #[arg(long, default_value_t = 0.166)]
    pub tensor_active: f64,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    Table,
    Markdown,
    Json,
}
