//! Processor `memory_limiter`: keeps the agent's memory under a limit by
//! refusing data before it runs out, as the Collector's memory_limiter.
//!
//! Every `check_interval` it measures the memory the agent's data takes:
//! the allocator's bytes in use (glibc `mallinfo2()`: `uordblks + hblkhd`),
//! as the Collector's memory_limiter measures the Go heap and not the
//! resident set. Above the soft limit (`limit - spike_limit`) it refuses:
//! batches reaching it are dropped and counted
//! (`infertel_processor_memory_limiter_refused_total{processor}`, in
//! samples); back under the soft limit it accepts again.
//!
//! Why not the resident set (`VmRSS`), which is what an OOM killer sees:
//! it also holds the binary's pages, thread stacks and memory the
//! allocator keeps after the data in it was freed (glibc keeps freed pages
//! for reuse, and fragmentation keeps some even after `malloc_trim`).
//! Refusing data cannot shrink any of that, so a limiter on the resident
//! set, once a backlog had pushed it over the soft limit, could stay over
//! it after the backlog was delivered and skip scrapes until the limit was
//! raised. The heap in use falls as soon as the data is sent. The resident
//! set is still read (`infertel_processor_memory_limiter_rss_bytes`): while
//! it is above the soft limit, memory the allocator keeps but does not use
//! is handed back to the OS (`malloc_trim`, at most once a second) so it
//! follows the heap down. Memory not counted as heap (binary, stacks, the
//! allocator's slack) comes on top of the limit: set the container's limit
//! above `limit_mib` by the agent's idle resident set plus some slack.
//! Where glibc's counters are not available (musl, other systems) the
//! resident set is measured instead, with the limit described above.
//!
//! Backpressure to scrapes: the Consumer interface returns nothing, so
//! instead of returning refused batches to the receiver, the limiter sets a
//! shared flag ([`Pressure`]) that every receiver feeding its pipeline
//! holds. The prometheus receiver checks it before each scrape and, while it
//! is set, does not scrape at all: the scrape is recorded as skipped
//! (`infertel_receiver_skipped_scrapes_total{receiver,job,instance,reason="memory_limit"}`),
//! no `up` sample is produced for it (it is not a failed scrape), the
//! series cache is kept (no stale markers), and the first skip and the
//! resumption are logged. Only a scrape already in flight when the limit is
//! crossed reaches the limiter and is refused there.

use crate::consumer::{BoxFuture, Consumer};
use crate::primitives::Duration;
use crate::telemetry::{Counter, Gauge, Telemetry};
use infertel_model::Batch;
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

const MIB: u64 = 1024 * 1024;

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryLimiterConfig {
    pub check_interval: Duration,
    pub limit_mib: u64,
    pub spike_limit_mib: u64,
    pub limit_percentage: u64,
    pub spike_limit_percentage: u64,
}

impl Default for MemoryLimiterConfig {
    fn default() -> Self {
        MemoryLimiterConfig {
            check_interval: Duration::from_millis(1000),
            limit_mib: 0,
            spike_limit_mib: 0,
            limit_percentage: 0,
            spike_limit_percentage: 0,
        }
    }
}

impl MemoryLimiterConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.check_interval.get().is_zero() {
            return Err("check_interval must be > 0".into());
        }
        match (self.limit_mib, self.limit_percentage) {
            (0, 0) => return Err("set limit_mib or limit_percentage".into()),
            (a, b) if a > 0 && b > 0 => {
                return Err("set only one of limit_mib and limit_percentage".into());
            }
            _ => {}
        }
        if self.limit_percentage > 100 {
            return Err("limit_percentage must be in 1..=100".into());
        }
        if self.limit_mib > 0 && self.spike_limit_mib >= self.limit_mib {
            return Err(format!("spike_limit_mib ({}) must be < limit_mib ({})", self.spike_limit_mib, self.limit_mib));
        }
        if self.limit_percentage > 0 && self.spike_limit_percentage >= self.limit_percentage {
            return Err(format!(
                "spike_limit_percentage ({}) must be < limit_percentage ({})",
                self.spike_limit_percentage, self.limit_percentage
            ));
        }
        if self.limit_mib > 0 && self.spike_limit_percentage > 0 {
            return Err("spike_limit_percentage goes with limit_percentage; use spike_limit_mib with limit_mib".into());
        }
        Ok(())
    }

    /// (hard limit, soft limit) in bytes; `total` is the memory the
    /// percentages refer to (cgroup limit, else the machine's).
    pub fn limits(&self, total: impl FnOnce() -> Option<u64>) -> Result<(u64, u64), String> {
        let (limit, spike) = if self.limit_mib > 0 {
            let l = self.limit_mib * MIB;
            (l, if self.spike_limit_mib > 0 { self.spike_limit_mib * MIB } else { l / 5 })
        } else {
            let t = total().ok_or("limit_percentage: cannot read the cgroup or machine memory size")?;
            let l = t / 100 * self.limit_percentage;
            let s = if self.spike_limit_percentage > 0 { t / 100 * self.spike_limit_percentage } else { l / 5 };
            (l, s)
        };
        Ok((limit, limit.saturating_sub(spike)))
    }
}

/// The refusal decision: refuse while the memory in use is above the soft
/// limit (`limit - spike`); accept again once it is at or below it.
pub fn should_refuse(used: u64, soft_limit: u64) -> bool {
    used > soft_limit
}

/// `VmRSS` of a `/proc/PID/status` text, in bytes.
pub fn parse_vmrss(status: &str) -> Option<u64> {
    let v = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kb: u64 = v.trim().strip_suffix("kB").unwrap_or(v).trim().parse().ok()?;
    Some(kb * 1024)
}

/// The process's resident set size, in bytes.
pub fn process_rss() -> Option<u64> {
    parse_vmrss(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// The memory the percentages refer to: the cgroup's limit (v2, then v1)
/// when there is one, else the machine's total.
pub fn total_memory() -> Option<u64> {
    for p in ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"] {
        if let Ok(s) = std::fs::read_to_string(p)
            && let Ok(v) = s.trim().parse::<u64>()
            && v < (1 << 60)
        {
            return Some(v);
        }
    }
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 =
        m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kb * 1024)
}

/// The bytes the allocator has handed out and not got back: glibc's
/// `mallinfo2()`, `uordblks` (in use in the arenas) + `hblkhd` (large
/// blocks, each its own mmap). Memory freed by the program but kept by the
/// allocator for reuse is not in it, which is why the limiter measures this
/// rather than the resident set. `None` where glibc is not the allocator.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn heap_in_use() -> Option<u64> {
    // SAFETY: mallinfo2 only reads glibc's own arena statistics under its locks.
    let m = unsafe { libc::mallinfo2() };
    Some((m.uordblks + m.hblkhd) as u64)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap_in_use() -> Option<u64> {
    None
}

/// Returns memory freed inside the process to the OS (glibc's
/// `malloc_trim`); true when that was attempted.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() -> bool {
    // SAFETY: malloc_trim only walks glibc's own heap under its locks.
    unsafe { libc::malloc_trim(0) };
    true
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

/// The backpressure flag a limiter sets and receivers read.
#[derive(Debug, Default)]
pub struct Pressure(AtomicBool);

impl Pressure {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
    pub fn set(&self, v: bool) {
        self.0.store(v, Ordering::Relaxed)
    }
}

/// What a receiver checks before each scrape: the flags of the limiters of
/// every pipeline it feeds. Shared by the receiver's scrape loops and
/// replaced in place when a reload changes which limiters sit downstream.
#[derive(Debug, Default, Clone)]
pub struct Backpressure(Arc<std::sync::RwLock<Vec<Arc<Pressure>>>>);

impl Backpressure {
    pub fn new(flags: Vec<Arc<Pressure>>) -> Self {
        Backpressure(Arc::new(std::sync::RwLock::new(flags)))
    }

    pub fn refusing(&self) -> bool {
        self.0.read().unwrap_or_else(|p| p.into_inner()).iter().any(|p| p.is_set())
    }

    /// The limiters downstream from now on.
    pub fn set(&self, flags: Vec<Arc<Pressure>>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = flags;
    }
}

pub struct MemoryLimiter {
    id: String,
    soft: u64,
    limit: u64,
    interval: std::time::Duration,
    pressure: Arc<Pressure>,
    next: Arc<dyn Consumer>,
    refused: Arc<Counter>,
    rss: Arc<Gauge>,
    used: Arc<Gauge>,
    /// When `malloc_trim` last ran: at most once a second.
    last_trim: std::sync::Mutex<Option<std::time::Instant>>,
}

impl MemoryLimiter {
    pub fn new(
        id: String,
        cfg: &MemoryLimiterConfig,
        next: Arc<dyn Consumer>,
        telemetry: &Telemetry,
    ) -> Result<Arc<Self>, String> {
        cfg.validate()?;
        let (limit, soft) = cfg.limits(total_memory)?;
        let refused = telemetry.counter(
            "infertel_processor_memory_limiter_refused_total",
            "Samples the memory_limiter refused because the agent's memory was above its soft limit.",
            &[("processor", &id)],
        );
        let rss = telemetry.gauge(
            "infertel_processor_memory_limiter_rss_bytes",
            "The agent's resident set size at the memory_limiter's last check.",
            &[("processor", &id)],
        );
        let used = telemetry.gauge(
            "infertel_processor_memory_limiter_used_bytes",
            "The memory the memory_limiter compares with its limits at its last check: the allocator's bytes in use (the resident set where glibc's counters are not available).",
            &[("processor", &id)],
        );
        let l = Arc::new(MemoryLimiter {
            id,
            soft,
            limit,
            interval: cfg.check_interval.get(),
            pressure: Arc::default(),
            next,
            refused,
            rss,
            used,
            last_trim: Default::default(),
        });
        l.check();
        Ok(l)
    }

    pub fn pressure(&self) -> Arc<Pressure> {
        self.pressure.clone()
    }

    /// One measurement: sets or clears the flag, logs a change.
    fn check(&self) {
        let heap = heap_in_use();
        let mut rss = process_rss();
        let Some(mut used) = heap.or(rss) else { return };
        if rss.is_some_and(|r| should_refuse(r, self.soft)) && self.may_trim() && release_free_memory() {
            // What the allocator kept after the data was freed goes back to
            // the OS, so the resident set follows the heap down. The
            // decision does not depend on it when the allocator's counters
            // are measured; when the resident set is, measure again.
            rss = process_rss().or(rss);
            if heap.is_none() {
                used = rss.unwrap_or(used);
            }
        }
        self.decide(used, rss)
    }

    /// malloc_trim walks every arena under its lock: not more than once a second.
    fn may_trim(&self) -> bool {
        let mut last = self.last_trim.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(1)) {
            return false;
        }
        *last = Some(now);
        true
    }

    fn decide(&self, used: u64, rss: Option<u64>) {
        self.used.set(used as f64);
        if let Some(r) = rss {
            self.rss.set(r as f64);
        }
        let rss = rss.map_or_else(|| "?".to_string(), |r| (r / MIB).to_string());
        let refuse = should_refuse(used, self.soft);
        let was = self.pressure.is_set();
        if refuse != was {
            if refuse {
                tracing::warn!(
                    processor = %self.id,
                    "memory above the soft limit ({} MiB in use > {} MiB = limit {} MiB - spike; {rss} MiB resident): refusing data and skipping scrapes",
                    used / MIB, self.soft / MIB, self.limit / MIB
                );
            } else {
                tracing::info!(processor = %self.id, "memory back under the soft limit ({} MiB in use <= {} MiB; {rss} MiB resident): accepting data", used / MIB, self.soft / MIB);
            }
        }
        self.pressure.set(refuse);
    }

    /// Measures every check_interval until `stop`.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut t = tokio::time::interval(self.interval);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = t.tick() => self.check(),
                r = stop.changed() => if r.is_err() || *stop.borrow() { break },
            }
        }
        // Nothing more to protect: let the shutdown's stale markers through.
        self.pressure.set(false);
    }
}

impl Consumer for MemoryLimiter {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self.pressure.is_set() {
                let n: usize = batch.series.iter().map(|s| s.samples.len()).sum();
                self.refused.add(n as u64);
                tracing::debug!(processor = %self.id, "refused {n} samples: memory above the soft limit");
                return;
            }
            self.next.consume(batch).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(yaml: &str) -> MemoryLimiterConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn spike_defaults_to_a_fifth_of_the_limit() {
        let c = cfg("limit_mib: 100");
        c.validate().unwrap();
        assert_eq!(c.check_interval.get(), std::time::Duration::from_secs(1));
        assert_eq!(c.limits(|| None).unwrap(), (100 * MIB, 80 * MIB));
        let c = cfg("{limit_mib: 100, spike_limit_mib: 30}");
        assert_eq!(c.limits(|| None).unwrap(), (100 * MIB, 70 * MIB));
    }

    #[test]
    fn percentages_refer_to_the_total() {
        let c = cfg("{limit_percentage: 50, spike_limit_percentage: 10}");
        c.validate().unwrap();
        assert_eq!(c.limits(|| Some(1000 * MIB)).unwrap(), (500 * MIB, 400 * MIB));
        assert_eq!(cfg("limit_percentage: 50").limits(|| Some(1000 * MIB)).unwrap(), (500 * MIB, 400 * MIB));
        assert!(c.limits(|| None).is_err());
    }

    #[test]
    fn invalid_settings_are_refused() {
        assert!(cfg("{}").validate().unwrap_err().contains("limit_mib"));
        assert!(cfg("{limit_mib: 10, spike_limit_mib: 10}").validate().is_err());
        assert!(cfg("{limit_mib: 10, limit_percentage: 10}").validate().is_err());
        assert!(cfg("{limit_percentage: 101}").validate().is_err());
        assert!(cfg("{limit_mib: 10, check_interval: 0s}").validate().is_err());
        assert!(serde_yaml::from_str::<MemoryLimiterConfig>("{limit_mib: 10, ballast: 1}").is_err());
    }

    #[test]
    fn refuses_above_the_soft_limit_only() {
        assert!(!should_refuse(80 * MIB, 80 * MIB));
        assert!(should_refuse(80 * MIB + 1, 80 * MIB));
        assert!(!should_refuse(10 * MIB, 80 * MIB));
    }

    #[test]
    fn reads_vmrss() {
        let s = "Name:\tx\nVmPeak:\t  999 kB\nVmRSS:\t    1234 kB\nThreads: 3\n";
        assert_eq!(parse_vmrss(s), Some(1234 * 1024));
        assert_eq!(parse_vmrss("Name: x\n"), None);
        assert!(process_rss().unwrap() > 0, "this process has a resident set");
        assert!(total_memory().unwrap() > 0);
    }

    struct Sink(std::sync::Mutex<usize>);
    impl Consumer for Sink {
        fn consume(&self, b: Batch) -> BoxFuture<'_, ()> {
            Box::pin(async move { *self.0.lock().unwrap() += b.series.len() })
        }
    }

    fn batch(n: usize) -> Batch {
        let series = (0..n)
            .map(|i| infertel_model::Series {
                labels: infertel_model::Labels::from_pairs([("__name__", "x"), ("i", &i.to_string())]),
                samples: infertel_model::samples![infertel_model::Sample { timestamp_ms: 1, value: 1.0 }],
            })
            .collect();
        Batch { series, metadata: Vec::new() }
    }

    #[tokio::test]
    async fn a_limit_below_the_heap_in_use_refuses_and_counts() {
        let t = Telemetry::new();
        let sink = Arc::new(Sink(Default::default()));
        // 1 MiB (soft 0.8 MiB): under what this holds.
        let hold = vec![1u8; 2 * MIB as usize];
        let l = MemoryLimiter::new("memory_limiter".into(), &cfg("limit_mib: 1"), sink.clone(), &t).unwrap();
        assert!(l.pressure().is_set(), "the first check runs at construction");
        assert!(Backpressure::new(vec![l.pressure()]).refusing());
        l.consume(batch(3)).await;
        assert_eq!(*sink.0.lock().unwrap(), 0);
        assert_eq!(l.refused.get(), 3);
        // A limit far above: accepted and passed on.
        let sink2 = Arc::new(Sink(Default::default()));
        let l2 = MemoryLimiter::new("m2".into(), &cfg("limit_mib: 1000000"), sink2.clone(), &t).unwrap();
        assert!(!l2.pressure().is_set());
        l2.consume(batch(3)).await;
        assert_eq!(*sink2.0.lock().unwrap(), 3);
        assert_eq!(l2.refused.get(), 0);
        assert!(!Backpressure::new(vec![l2.pressure()]).refusing());
        assert!(Backpressure::new(vec![l2.pressure(), l.pressure()]).refusing());
        drop(hold);
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn heap_in_use_follows_allocations_and_frees() {
        // Large blocks are their own mmap (hblkhd), counted untouched;
        // other tests allocating meanwhile move it by far less than this.
        const BIG: u64 = 256 * MIB;
        let before = heap_in_use().unwrap();
        let v: Vec<u8> = Vec::with_capacity(BIG as usize);
        let with = heap_in_use().unwrap();
        assert!(with >= before + BIG - 64 * MIB, "{before} -> {with}");
        drop(v);
        let after = heap_in_use().unwrap();
        assert!(after + BIG - 64 * MIB <= with, "freed: {with} -> {after}");
    }
}
