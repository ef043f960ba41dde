//! Receiver `prometheus`: scrapes targets with Prometheus semantics.
//!
//! - `config.rs`: what the user configures (Prometheus `scrape_configs`);
//! - `config_files.rs`: `scrape_config_files`, read into `scrape_configs` at load;
//! - `discovery.rs` and `discovery/`: where targets come from (static, file, HTTP, DNS, Kubernetes);
//! - `target.rs`: how a discovered target becomes labels and a URL (`relabel_configs`);
//! - `job.rs`: what a job's targets share (settings, auth, interned strings);
//! - `series.rs`: how a scraped body becomes series (labels, relabeling, limits, cache);
//! - `scrape_cache.rs`: the per-target table of series that cache uses (by raw bytes, by identity);
//! - `fetch.rs`: how a scrape's body is fetched (the request, a plain-http target's own connection, limits);
//! - `scrape.rs`: one target's scrape loop: fetch, parse, label, stale markers, report series;
//! - `handover.rs`: what a loop a reload replaces leaves to its successor;
//! - `receiver.rs`: what drives it: one loop per live target, started and stopped as discovery changes.

pub mod config;
pub mod config_files;
pub mod discovery;
mod fetch;
pub mod handover;
pub mod job;
pub mod receiver;
pub mod scrape;
mod scrape_cache;
pub mod series;
pub mod target;

pub use receiver::PrometheusReceiver;
