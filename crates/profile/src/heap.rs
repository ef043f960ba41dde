//! Heap profiles: [`SamplingAllocator`] wraps the system allocator and,
//! while sampling is on, records one allocation per `rate` bytes on average
//! (the distance to the next sample is drawn from an exponential
//! distribution, as Go's runtime draws it, so every byte has the same
//! chance) with the stack that made it, and forgets it when it is freed. A
//! profile scales each sample by `1 / (1 - e^(-size/rate))`, Go's
//! unsampling, so its totals estimate the whole heap.
//!
//! Cost: off, one relaxed load per allocation and free; on, a thread-local
//! countdown per allocation and one relaxed load of a 64 KiB table per free
//! (a free looks further only where a sampled block may live), plus a
//! stack walk per sample.
//!
//! Only allocations made while sampling is on are seen: the pprof
//! extension turns it on when it starts.

use crate::ProfileError;
use crate::proto::{Frame, ProfileBuilder, gzipped};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::SystemTime;

/// Go's default `MemProfileRate`.
pub const DEFAULT_RATE: usize = 512 * 1024;

const MAX_DEPTH: usize = 64;
const MARK_BITS: u32 = 14;

/// The global allocator of the `infertel` binary.
pub struct SamplingAllocator;

/// Mean bytes between samples; 0 = off.
static RATE: AtomicUsize = AtomicUsize::new(0);
/// Set by the first allocation through [`SamplingAllocator`].
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Sampled blocks still live; while 0, frees skip the table.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// How many live sampled blocks hash to each slot: a free whose slot is 0
/// is not sampled, without taking the lock.
static MARKS: [AtomicU32; 1 << MARK_BITS] = [const { AtomicU32::new(0) }; 1 << MARK_BITS];
static TABLE: Mutex<Option<Table>> = Mutex::new(None);
static STARTED: Mutex<Option<SystemTime>> = Mutex::new(None);

thread_local! {
    /// Bytes left before this thread's next sample.
    static UNTIL_SAMPLE: Cell<isize> = const { Cell::new(0) };
    /// Inside the sampler: its own allocations and frees are not looked at.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    static RNG: Cell<u64> = const { Cell::new(0) };
}

#[derive(Default)]
struct Table {
    stacks: Vec<Box<[usize]>>,
    stack_ids: HashMap<Box<[usize]>, usize>,
    /// Per stack: scaled objects and bytes allocated, and freed.
    totals: Vec<Totals>,
    live: HashMap<usize, Block>,
}

#[derive(Default, Clone, Copy)]
struct Totals {
    alloc_objects: f64,
    alloc_bytes: f64,
    free_objects: f64,
    free_bytes: f64,
}

struct Block {
    stack: usize,
    weight: f64,
    size: usize,
}

fn slot(ptr: usize) -> usize {
    (ptr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - MARK_BITS)
}

/// Turns sampling on at `rate` bytes (0 turns it off; blocks sampled
/// before are still forgotten when freed).
pub fn set_rate(rate: usize) {
    if rate > 0 {
        let mut s = STARTED.lock().unwrap_or_else(|p| p.into_inner());
        s.get_or_insert_with(SystemTime::now);
    }
    RATE.store(rate, Ordering::Relaxed);
}

pub fn rate() -> usize {
    RATE.load(Ordering::Relaxed)
}

/// Whether this process allocates through [`SamplingAllocator`].
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// A uniform draw in (0, 1] from a per-thread xorshift (no allocation).
fn uniform() -> f64 {
    RNG.try_with(|r| {
        let mut x = r.get();
        if x == 0 {
            // Seeded from the thread's own cell address and the clock.
            let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
            x = (r as *const _ as u64) ^ t.rotate_left(17) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    })
    .unwrap_or(0.5)
}

fn next_gap(rate: usize) -> isize {
    (-(uniform().ln()) * rate as f64).min(isize::MAX as f64 / 2.0) as isize
}

/// Go's unsampling: a block of `size` bytes is sampled with probability
/// `1 - e^(-size/rate)`.
fn weight(size: usize, rate: usize) -> f64 {
    let p = 1.0 - (-(size as f64) / rate as f64).exp();
    if p > 0.0 { 1.0 / p } else { 1.0 }
}

impl SamplingAllocator {
    #[inline]
    fn allocated(ptr: *mut u8, size: usize) {
        let rate = RATE.load(Ordering::Relaxed);
        if rate == 0 || ptr.is_null() {
            return;
        }
        let due = UNTIL_SAMPLE
            .try_with(|c| {
                let left = c.get() - size as isize;
                if left > 0 {
                    c.set(left);
                    false
                } else {
                    c.set(next_gap(rate));
                    true
                }
            })
            .unwrap_or(false);
        if due {
            sample(ptr as usize, size, rate);
        }
    }

    #[inline]
    fn freeing(ptr: *mut u8) {
        if LIVE.load(Ordering::Relaxed) == 0 || MARKS[slot(ptr as usize)].load(Ordering::Relaxed) == 0 {
            return;
        }
        forget(ptr as usize);
    }
}

/// Runs `f` with the thread marked busy; `None` when it already was.
fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    let entered = BUSY.try_with(|b| !b.replace(true)).unwrap_or(false);
    if !entered {
        return None;
    }
    let out = f();
    let _ = BUSY.try_with(|b| b.set(false));
    Some(out)
}

#[inline(never)]
fn sample(ptr: usize, size: usize, rate: usize) {
    guarded(|| {
        let mut ips = [0usize; MAX_DEPTH];
        let mut n = 0;
        // SAFETY: the unsynchronized walk is used because the synchronized
        // one takes a lock that a frame below us may hold; walking our own
        // stack does not touch shared state beyond the loader's (which
        // glibc locks recursively).
        unsafe {
            backtrace::trace_unsynchronized(|f| {
                ips[n] = f.ip() as usize;
                n += 1;
                n < MAX_DEPTH
            });
        }
        let w = weight(size, rate);
        let mut t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        let t = t.get_or_insert_with(Table::default);
        let stack = match t.stack_ids.get(&ips[..n]) {
            Some(&i) => i,
            None => {
                let s: Box<[usize]> = ips[..n].into();
                t.stacks.push(s.clone());
                t.totals.push(Totals::default());
                t.stack_ids.insert(s, t.stacks.len() - 1);
                t.stacks.len() - 1
            }
        };
        let tot = &mut t.totals[stack];
        tot.alloc_objects += w;
        tot.alloc_bytes += w * size as f64;
        if t.live.insert(ptr, Block { stack, weight: w, size }).is_none() {
            MARKS[slot(ptr)].fetch_add(1, Ordering::Relaxed);
            LIVE.fetch_add(1, Ordering::Relaxed);
        }
    });
}

#[inline(never)]
fn forget(ptr: usize) {
    guarded(|| {
        let mut t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        let Some(t) = t.as_mut() else { return };
        if let Some(b) = t.live.remove(&ptr) {
            let tot = &mut t.totals[b.stack];
            tot.free_objects += b.weight;
            tot.free_bytes += b.weight * b.size as f64;
            MARKS[slot(ptr)].fetch_sub(1, Ordering::Relaxed);
            LIVE.fetch_sub(1, Ordering::Relaxed);
        }
    });
}

/// Read first: a store on every allocation would bounce the line between cores.
#[inline]
fn mark_installed() {
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed to the system allocator unchanged; the
// bookkeeping around it never touches the blocks.
unsafe impl GlobalAlloc for SamplingAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        mark_installed();
        let p = unsafe { System.alloc(layout) };
        Self::allocated(p, layout.size());
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        mark_installed();
        let p = unsafe { System.alloc_zeroed(layout) };
        Self::allocated(p, layout.size());
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Forgotten before the block can be handed out again.
        Self::freeing(ptr);
        unsafe { System.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A sampled block that moves or grows is forgotten and the new one
        // takes its chance like any allocation (a failed realloc leaves the
        // old block unsampled: a rare, small undercount).
        Self::freeing(ptr);
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        Self::allocated(p, new_size);
        p
    }
}

/// The frames one return address resolves to (innermost inlined first).
fn symbolize(ip: usize) -> Vec<Frame> {
    let mut out = Vec::new();
    backtrace::resolve(ip as *mut std::ffi::c_void, |s| {
        let system_name = s.name().and_then(|n| n.as_str().map(str::to_string)).unwrap_or_default();
        let name = s.name().map(|n| format!("{n:#}")).unwrap_or_else(|| format!("{ip:#x}"));
        out.push(Frame {
            name,
            system_name,
            file: s.filename().map(|f| f.display().to_string()).unwrap_or_default(),
            line: s.lineno().map_or(0, i64::from),
        });
    });
    if out.is_empty() {
        out.push(Frame { name: format!("{ip:#x}"), ..Default::default() });
    }
    out
}

/// Frames of the sampler and the allocation machinery above the caller.
fn is_allocator_frame(f: &Frame) -> bool {
    let n = f.name.as_str();
    n.starts_with("infertel_profile::heap::")
        || n.starts_with("<infertel_profile::heap::")
        || n.starts_with("backtrace::")
        || n.starts_with("__rust_")
        || n.starts_with("__rustc::")
        || n.starts_with("__rdl_")
        || n.starts_with("alloc::alloc::")
        || n.starts_with("<alloc::alloc::Global as core::alloc::Allocator>")
        || n.starts_with("std::thread::local")
        || n.starts_with("std::sys::")
}

/// The heap profile, gzipped: `alloc_objects`, `alloc_space`,
/// `inuse_objects`, `inuse_space` (Go's four), estimated from the samples;
/// `default` names the one a reader shows first (`inuse_space` for
/// `/heap`, `alloc_space` for `/allocs`).
pub fn profile(default: &str) -> Result<Vec<u8>, ProfileError> {
    if !installed() {
        return Err(ProfileError::HeapNotInstalled);
    }
    let started = *STARTED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(started) = started else { return Err(ProfileError::HeapOff) };
    // A snapshot, taken busy so that the copy's allocations are not sampled.
    let snapshot = guarded(|| {
        let t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        t.as_ref().map(|t| (t.stacks.clone(), t.totals.clone())).unwrap_or_default()
    })
    .unwrap_or_default();
    let rate = RATE.load(Ordering::Relaxed).max(1) as i64;
    let mut b = ProfileBuilder::new(
        &[("alloc_objects", "count"), ("alloc_space", "bytes"), ("inuse_objects", "count"), ("inuse_space", "bytes")],
        ("space", "bytes"),
        rate,
    );
    let mut resolved: HashMap<usize, Vec<Frame>> = HashMap::new();
    for (stack, tot) in snapshot.0.iter().zip(snapshot.1.iter()) {
        let mut locations = Vec::with_capacity(stack.len());
        let mut in_allocator = true;
        for (i, &ip) in stack.iter().enumerate().filter(|(_, ip)| **ip != 0) {
            // A return address points after the call: the call is the byte
            // before it (the first is the sampler's own, trimmed anyway).
            let at = if i == 0 { ip } else { ip.saturating_sub(1) };
            let frames = resolved.entry(at).or_insert_with(|| symbolize(at));
            if in_allocator && frames.iter().all(is_allocator_frame) {
                continue;
            }
            in_allocator = false;
            locations.push(b.location(at as u64, at as u64, frames));
        }
        let v = |x: f64| x.round() as i64;
        b.sample(
            locations,
            vec![
                v(tot.alloc_objects),
                v(tot.alloc_bytes),
                v(tot.alloc_objects - tot.free_objects),
                v(tot.alloc_bytes - tot.free_bytes),
            ],
            &[],
        );
    }
    drop(resolved);
    // Symbolizing loads the binary's debug info into a cache that would
    // otherwise stay resident (tens of MiB): let it go.
    crate::release_symbol_memory();
    let now = SystemTime::now();
    Ok(gzipped(&b.finish(now, now.duration_since(started).unwrap_or_default(), Some(default))))
}

/// Live sampled blocks and their estimated bytes (for the agent's own
/// metrics and tests).
pub fn inuse_estimate() -> (usize, f64) {
    guarded(|| {
        let t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        t.as_ref().map_or((0, 0.0), |t| (t.live.len(), t.live.values().map(|b| b.weight * b.size as f64).sum()))
    })
    .unwrap_or((0, 0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_is_gos_unsampling() {
        // A block as large as the rate is sampled with p = 1 - 1/e.
        let w = weight(DEFAULT_RATE, DEFAULT_RATE);
        assert!((w - 1.0 / (1.0 - (-1.0f64).exp())).abs() < 1e-12);
        // Huge blocks are (almost) always sampled and count once.
        assert!((weight(1 << 40, DEFAULT_RATE) - 1.0).abs() < 1e-9);
        // A small block stands for about rate/size blocks.
        let w = weight(64, DEFAULT_RATE);
        assert!((w - DEFAULT_RATE as f64 / 64.0).abs() / w < 1e-3, "{w}");
    }

    #[test]
    fn gaps_average_the_rate() {
        let n = 200_000;
        let mean = (0..n).map(|_| next_gap(1000) as f64).sum::<f64>() / n as f64;
        assert!((mean - 1000.0).abs() < 15.0, "{mean}");
    }

    #[test]
    fn not_installed_in_a_test_binary() {
        // The test harness allocates through the system allocator.
        assert!(matches!(profile("inuse_space"), Err(ProfileError::HeapNotInstalled)));
    }
}
