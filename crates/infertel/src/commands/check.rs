//! `infertel check --config FILE`: the startup probes of `run`, for every
//! network exporter (also those with `startup_check: off`), as a table.
//! Exit 0 when every exporter is reachable and authorized, 1 otherwise (78
//! when the config itself is invalid): usable as an init container or in CI.

use crate::cli::LogArgs;
use crate::exit;
use infertel_pipeline::exporters::probe::Verdict;
use infertel_pipeline::{Service, Telemetry};
use std::path::Path;

pub async fn check(log: &LogArgs, path: &Path) -> u8 {
    crate::logging::init(log, "warn", false);
    let loaded = match super::load_file(path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let service = match Service::build_dry(loaded.config, Telemetry::new()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            return exit::CONFIG;
        }
    };
    let probes = service.probe_exporters(true).await;
    if probes.is_empty() {
        println!("{}: no network exporter to check", path.display());
        return exit::OK;
    }
    let rows: Vec<[String; 5]> = probes
        .iter()
        .map(|p| {
            let verdict = match p.result.verdict {
                Verdict::Ok => "ok",
                Verdict::Config => "CONFIG",
                Verdict::Transient => "transient",
            };
            [
                p.id.clone(),
                p.endpoint.clone(),
                verdict.to_string(),
                format!("{} ({})", p.result.class, p.result.status),
                p.result.message.clone(),
            ]
        })
        .collect();
    let head = ["EXPORTER", "ENDPOINT", "VERDICT", "RESULT", "WHAT TO CHECK"];
    let mut w = [0usize; 4];
    for r in rows.iter().map(|r| r.each_ref().map(|s| s.as_str())).chain(std::iter::once(head)) {
        for i in 0..4 {
            w[i] = w[i].max(r[i].chars().count());
        }
    }
    let line = |r: [&str; 5]| {
        format!(
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        )
    };
    println!("{}", line(head));
    for (r, p) in rows.iter().zip(&probes) {
        println!("{}", line(r.each_ref().map(|s| s.as_str())));
        if !p.result.detail.is_empty() {
            println!(
                "{:w$}  {} said: {}",
                "",
                if p.result.status.starts_with("HTTP") || p.result.status.starts_with("gRPC") {
                    "receiver"
                } else {
                    "error"
                },
                p.result.detail,
                w = w[0]
            );
        }
    }
    let bad = probes.iter().filter(|p| !p.result.is_ok()).count();
    if bad == 0 {
        println!("all {} exporter endpoints are reachable and authorized", probes.len());
        exit::OK
    } else {
        println!("{bad} of {} exporter endpoints are not reachable and authorized", probes.len());
        exit::FAILURE
    }
}
