//! Logs through `tracing`: human-readable by default, JSON with
//! `--log-format json`; level from `--log-level`, else RUST_LOG, else the
//! given default.

use crate::cli::{LogArgs, LogFormat};
use tracing_subscriber::EnvFilter;

/// Standard error with every configured secret scrubbed
/// (`infertel_pipeline::secrets`): the formatter writes a whole event per
/// call, so a secret is never split across writes.
struct Scrubbed;

impl std::io::Write for Scrubbed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(infertel_pipeline::secrets::scrub(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// `default_level` and `default_json` come from the config (or the command's
/// own default); the command line wins.
pub fn init(args: &LogArgs, default_level: &str, default_json: bool) {
    let filter = match &args.log_level {
        Some(l) => EnvFilter::try_new(l).unwrap_or_else(|_| EnvFilter::new(default_level)),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level)),
    };
    // Colours only for a person at a terminal; never in files or collectors.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(|| Scrubbed).with_ansi(ansi);
    let json = match args.log_format {
        Some(f) => f == LogFormat::Json,
        None => default_json,
    };
    let _ = if json { b.json().flatten_event(true).try_init() } else { b.try_init() };
}
