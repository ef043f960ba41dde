//! The `infertel` binary: a thin CLI over the pipeline crate.

mod allocator;
mod cli;
mod commands;
mod exit;
mod logging;

use clap::Parser;
use std::process::ExitCode;

/// The system allocator, with the heap sampling the `pprof` extension
/// serves (off, and one relaxed load per call, unless that extension runs).
#[global_allocator]
static ALLOCATOR: infertel_profile::SamplingAllocator = infertel_profile::SamplingAllocator;

fn main() -> ExitCode {
    let args = match cli::Cli::try_parse() {
        Ok(a) => a,
        Err(e) => {
            // --help and --version print and exit 0; usage errors exit 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { exit::OK });
        }
    };
    commands::dispatch(args)
}
