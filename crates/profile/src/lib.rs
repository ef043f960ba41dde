//! The agent's own profiles, in the pprof protobuf format (gzipped, as Go's
//! `net/http/pprof` serves them), readable by `go tool pprof` and every
//! tool that reads Go's profiles:
//!
//! - `cpu.rs`: CPU profiles, sampled on SIGPROF by pprof-rs;
//! - `heap.rs`: heap profiles, from a global allocator that records a sample
//!   of allocations with their stacks (on average one per 512 KiB, as Go's
//!   runtime samples);
//! - `proto.rs`: the profile messages (Google's `profile.proto`) and the
//!   builder that interns strings, functions and locations.

pub mod cpu;
pub mod heap;
pub mod proto;

pub use cpu::CpuProfiler;
pub use heap::SamplingAllocator;

/// Why a profile could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("a CPU profile is already being taken (one at a time; with save_to_file the whole run is one)")]
    CpuBusy,
    #[error("the CPU profiler failed: {0}")]
    Cpu(String),
    #[error(
        "heap profiles need infertel's sampling allocator, which this binary does not install (only the infertel binary does)"
    )]
    HeapNotInstalled,
    #[error("heap sampling is off: it starts with the pprof extension")]
    HeapOff,
}

/// Lets go of what symbolizing a profile took: the debug info the unwinder
/// loaded (tens of MiB, more for a binary built with full debug info) and,
/// on glibc, the freed heap it leaves, which glibc would otherwise keep
/// mapped (the resident set stayed about 110 MiB higher after one heap
/// profile was fetched from the agent at 100 targets).
pub(crate) fn release_symbol_memory() {
    backtrace::clear_symbol_cache();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own heap under its locks.
    unsafe {
        libc::malloc_trim(0);
    }
}
