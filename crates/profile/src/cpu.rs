//! CPU profiles: pprof-rs samples every thread's stack on SIGPROF (the
//! process' CPU time, `frequency` times a second); the report becomes a
//! pprof profile with `samples/count` and `cpu/nanoseconds`, as Go's.
//! One profiler runs at a time in a process, as in Go.

use crate::ProfileError;
use crate::proto::{Frame, ProfileBuilder, gzipped};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

static RUNNING: AtomicBool = AtomicBool::new(false);

/// Frames in these libraries are left out of the samples (pprof-rs would
/// otherwise unwind through the signal trampoline and the C library).
const BLOCKLIST: &[&str] = &["libc", "libgcc", "pthread", "vdso"];

/// A running CPU profile; [`CpuProfiler::finish`] turns it into a pprof
/// profile. Dropping it stops the sampling.
pub struct CpuProfiler {
    guard: Option<pprof::ProfilerGuard<'static>>,
    started: SystemTime,
    frequency: i32,
}

impl CpuProfiler {
    /// Starts sampling `frequency` times per CPU second (Go uses 100).
    pub fn start(frequency: i32) -> Result<CpuProfiler, ProfileError> {
        if RUNNING.swap(true, Ordering::AcqRel) {
            return Err(ProfileError::CpuBusy);
        }
        let frequency = frequency.clamp(1, 1000);
        match pprof::ProfilerGuardBuilder::default().frequency(frequency).blocklist(BLOCKLIST).build() {
            Ok(guard) => Ok(CpuProfiler { guard: Some(guard), started: SystemTime::now(), frequency }),
            Err(e) => {
                RUNNING.store(false, Ordering::Release);
                Err(ProfileError::Cpu(e.to_string()))
            }
        }
    }

    /// Stops sampling and returns the gzipped profile.
    pub fn finish(mut self) -> Result<Vec<u8>, ProfileError> {
        let guard = self.guard.take().ok_or_else(|| ProfileError::Cpu("already finished".into()))?;
        // The profile covers the sampling, not the symbolizing after it.
        let sampled = self.started.elapsed().unwrap_or_default();
        let report = guard.report().build().map_err(|e| ProfileError::Cpu(e.to_string()));
        drop(guard);
        RUNNING.store(false, Ordering::Release);
        let report = report?;
        let period = 1_000_000_000 / i64::from(self.frequency);
        let mut b =
            ProfileBuilder::new(&[("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"), period);
        let mut frames_at = Vec::new();
        for (frames, &count) in &report.data {
            let mut stack = Vec::with_capacity(frames.frames.len());
            // The sampler's own frames (the signal handler's stack walk) sit
            // on top of every stack: the sample starts below them.
            let own =
                frames.frames.iter().take_while(|symbols| symbols.iter().all(|s| is_profiler_frame(&s.name()))).count();
            for symbols in &frames.frames[own..] {
                // pprof-rs gives a frame's symbols, whose address is the
                // function's, not the instruction's: a location is keyed by
                // what it resolved to (every function and line).
                let Some(first) = symbols.first() else { continue };
                frames_at.clear();
                frames_at.extend(symbols.iter().map(|s| Frame {
                    name: s.name(),
                    system_name: s.sys_name().into_owned(),
                    file: s.filename.as_ref().map(|f| f.display().to_string()).unwrap_or_default(),
                    line: s.lineno.map_or(0, i64::from),
                }));
                let mut h = std::collections::hash_map::DefaultHasher::new();
                for f in &frames_at {
                    std::hash::Hash::hash(&(&f.system_name, &f.file, f.line), &mut h);
                }
                let key = std::hash::Hasher::finish(&h);
                stack.push(b.location(key, first.addr.map_or(0, |a| a as u64), &frames_at));
            }
            let count = count.max(0) as i64;
            b.sample(stack, vec![count, count * period], &[("thread", &frames.thread_name)]);
        }
        drop(report);
        // Symbolizing loads the binary's debug info into a cache that would
        // otherwise stay resident (tens of MiB): let it go.
        crate::release_symbol_memory();
        Ok(gzipped(&b.finish(self.started, sampled, None)))
    }
}

impl Drop for CpuProfiler {
    fn drop(&mut self) {
        if self.guard.take().is_some() {
            RUNNING.store(false, Ordering::Release);
        }
    }
}

/// A frame of pprof-rs' signal handler or its stack walk.
fn is_profiler_frame(name: &str) -> bool {
    name.starts_with("backtrace::")
        || name.starts_with("pprof::")
        || name.starts_with("<pprof::")
        || name.contains("perf_signal_handler")
        || name.starts_with("__restore_rt")
}

/// Profiles for `duration` (blocking the calling thread, so call it off
/// the async runtime), ending early when `cancelled` turns true.
pub fn profile_for(duration: Duration, frequency: i32, cancelled: &AtomicBool) -> Result<Vec<u8>, ProfileError> {
    let p = CpuProfiler::start(frequency)?;
    let end = std::time::Instant::now() + duration;
    while !cancelled.load(Ordering::Relaxed) {
        let now = std::time::Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(100)));
    }
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Profile;
    use prost::Message;

    #[inline(never)]
    fn spin_for(d: Duration) -> u64 {
        let end = std::time::Instant::now() + d;
        let mut x = 1u64;
        while std::time::Instant::now() < end {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
            }
        }
        x
    }

    #[test]
    fn a_busy_loop_is_in_the_profile_and_one_runs_at_a_time() {
        let p = CpuProfiler::start(200).unwrap();
        assert!(matches!(CpuProfiler::start(100), Err(ProfileError::CpuBusy)));
        spin_for(Duration::from_millis(1000));
        let z = p.finish().unwrap();
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&z[..]), &mut raw).unwrap();
        let prof = Profile::decode(&raw[..]).unwrap();
        let s = |i: i64| prof.string_table[i as usize].as_str();
        assert_eq!(s(prof.sample_type[1].r#type), "cpu");
        assert_eq!(prof.period, 5_000_000);
        let total: i64 = prof.sample.iter().map(|x| x.value[0]).sum();
        // A second of spinning at 200 Hz is up to 200 samples of CPU time;
        // on a loaded machine the thread gets a share of that (a tenth still
        // gives 20), and the timer is coarse: only a wide band is asserted.
        assert!((20..=400).contains(&total), "samples: {total}");
        let names: Vec<&str> = prof.function.iter().map(|f| s(f.name)).collect();
        assert!(names.iter().any(|n| n.contains("spin_for")), "{names:?}");
        // No sample starts in the profiler's own stack walk.
        for x in &prof.sample {
            let leaf = &prof.location[x.location_id[0] as usize - 1];
            let name = s(prof.function[leaf.line[0].function_id as usize - 1].name);
            assert!(!is_profiler_frame(name), "{name}");
        }
        // Released: another may start.
        drop(CpuProfiler::start(100).unwrap());
    }
}
