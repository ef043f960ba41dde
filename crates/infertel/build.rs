//! Links the release binary with its functions in the order of
//! `symbol-order.txt`: the functions a running agent executes, from its
//! start through steady scraping and sending, placed together at the front
//! of the code.
//!
//! Why: the kernel maps a binary's code in 64 KiB runs around each page
//! first touched (fault-around). Left in the compiler's order, the ~2.3 MB of
//! functions an agent runs are spread over the 22 MB of code, and about 12 MB
//! of it ends up resident. Placed together, the resident code is close to
//! what runs. The file is written by `scripts/symbol-order.sh`, which runs
//! the release binary under callgrind on the agent's usual work and lists
//! every function it executed, hottest first.
//!
//! Names in the file carry the compiler's hashes for this profile and these
//! dependency versions; names the linker does not find are skipped without
//! a warning (`--no-warn-symbol-ordering`), so a stale file links as before
//! and only loses the benefit. `scripts/symbol-order.sh --check` says how
//! much of the file still matches.
//!
//! Only for release builds on x86_64 Linux with the toolchain's own linker
//! (rust-lld, the default there since Rust 1.90), which knows the option:
//! a toolchain without it in its sysroot (a distribution's rustc linking
//! with the system's `ld`) links as before. `INFERTEL_SYMBOL_ORDER=0` turns
//! it off (another linker set by hand, say).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether the compiler ships its own lld for this target (the
/// self-contained linker the official toolchains use by default here).
fn toolchain_has_lld() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    sysroot.join("lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld/ld.lld").exists()
}

fn main() {
    println!("cargo:rerun-if-changed=symbol-order.txt");
    println!("cargo:rerun-if-env-changed=INFERTEL_SYMBOL_ORDER");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let wanted = var("INFERTEL_SYMBOL_ORDER") != "0"
        && var("PROFILE") == "release"
        && var("TARGET") == "x86_64-unknown-linux-gnu"
        && !var("CARGO_ENCODED_RUSTFLAGS").contains("fuse-ld")
        && !var("CARGO_ENCODED_RUSTFLAGS").contains("linker");
    let file = Path::new(&var("CARGO_MANIFEST_DIR")).join("symbol-order.txt");
    if !wanted || std::fs::metadata(&file).map(|m| m.len() == 0).unwrap_or(true) || !toolchain_has_lld() {
        return;
    }
    println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", file.display());
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}
