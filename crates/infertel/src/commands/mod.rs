//! One file per subcommand; shared config loading here.

mod check;
mod demo;
mod names;
mod report;
mod run;
mod simulate;
mod validate;

use crate::cli::{Cli, Command};
use crate::exit;
use infertel_pipeline::ConfigIssue;
use infertel_pipeline::config::Loaded;
use std::path::Path;
use std::process::ExitCode;

pub fn dispatch(cli: Cli) -> ExitCode {
    let workers = usize::from(cli.runtime.worker_threads);
    crate::allocator::limit_arenas(workers);
    // Multi-threaded even with one worker: the durable queue's disk I/O
    // hands the worker over (`block_in_place`) instead of stalling scrapes.
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let code = match cli.command {
        Command::Run { config, watch_config } => rt.block_on(run::run(&cli.log, &config, watch_config)),
        Command::Validate { config } => validate::validate(&cli.log, &config),
        Command::Check { config } => rt.block_on(check::check(&cli.log, &config)),
        Command::Names { config, target } => rt.block_on(names::names(&cli.log, &config, target.as_deref())),
        Command::Demo { duration, concurrency, interval, engine } => {
            rt.block_on(demo::demo(&cli.log, duration, concurrency, interval, engine))
        }
        Command::Simulate { vllm, dcgm, concurrency, capacity, model, seed, workload } => {
            rt.block_on(simulate::simulate(&cli.log, vllm, dcgm, concurrency, capacity, model, seed, workload))
        }
        Command::Report { config, urls, window, interval, format, replay, record } => rt.block_on(report::report(
            &cli.log,
            report::ReportArgs { config, urls, window, interval, format, replay, record },
        )),
    };
    // Don't wait for blocking tasks (stdin readers, DNS) on the way out.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    ExitCode::from(code)
}

pub fn print_issues(kind: &str, issues: &[ConfigIssue]) {
    for i in issues {
        eprintln!("{kind}: {i}");
    }
}

/// Reads, expands and validates a config file; prints what is wrong.
pub fn load_file(path: &Path) -> Result<Loaded, u8> {
    let origin = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {origin}: cannot read the config file: {e}");
            return Err(exit::CONFIG);
        }
    };
    load_text(&origin, &text)
}

pub fn load_text(origin: &str, text: &str) -> Result<Loaded, u8> {
    match infertel_pipeline::load_str(origin, text, &|n| std::env::var(n).ok()) {
        Ok(l) => {
            print_issues("warning", &l.warnings);
            Ok(l)
        }
        Err(refused) => {
            print_issues("warning", &refused.warnings);
            let errors = refused.errors;
            print_issues("error", &errors);
            eprintln!(
                "{origin}: invalid configuration ({} error{})",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
            Err(exit::CONFIG)
        }
    }
}

/// Resolves when SIGINT or SIGTERM arrives.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
