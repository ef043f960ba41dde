//! Exit codes, a contract documented in the README.

/// Clean shutdown, valid config.
pub const OK: u8 = 0;
/// Any other failure (a port in use, an I/O error at runtime).
pub const FAILURE: u8 = 1;
/// Usage error (unknown flag, missing argument).
pub const USAGE: u8 = 2;
/// Invalid configuration (`validate`, or `run` refusing to start), as sysexits' EX_CONFIG.
pub const CONFIG: u8 = 78;
