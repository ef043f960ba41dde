//! The process allocator's setup, done once before any thread starts.

/// glibc gives each thread that meets a locked arena an arena of its own,
/// each holding its own free memory. The agent's threads are its workers
/// (plus the main thread and short-lived blocking ones), so more arenas than
/// workers only spread the same heap thinner: at 100 targets a second arena
/// held about 0.8 MB more. A `MALLOC_ARENA_MAX` or `GLIBC_TUNABLES` the
/// operator set wins.
pub fn limit_arenas(workers: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let set_by_operator = std::env::var_os("MALLOC_ARENA_MAX").is_some()
            || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("arena_max"));
        if !set_by_operator {
            let max = i32::try_from(workers).unwrap_or(i32::MAX).max(1);
            // SAFETY: mallopt only sets a tunable; called before the runtime
            // starts any thread.
            unsafe {
                libc::mallopt(libc::M_ARENA_MAX, max);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = workers;
}
