//! `infertel validate --config FILE`: everything `run` checks before it
//! starts, without touching the network.

use crate::cli::LogArgs;
use crate::exit;
use infertel_pipeline::{Service, Telemetry};
use std::path::Path;

pub fn validate(log: &LogArgs, path: &Path) -> u8 {
    crate::logging::init(log, "warn", false);
    let loaded = match super::load_file(path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    // Building the graph checks what needs more than one section (TLS
    // files, authenticators) without opening a connection.
    if let Err(e) = Service::build_dry(loaded.config, Telemetry::new()) {
        eprintln!("error: {}: {e}", path.display());
        return exit::CONFIG;
    }
    println!("{}: configuration is valid", path.display());
    exit::OK
}
