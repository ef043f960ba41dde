//! Processor `memory_limiter`: keeps the agent's memory under a limit by
//! refusing data before it runs out, as the Collector's memory_limiter.
//!
//! Every `check_interval` it reads the process's resident set size
//! (`VmRSS` of `/proc/self/status`). Above the soft limit (`limit -
//! spike_limit`) it refuses: batches reaching it are dropped and counted
//! (`infertel_processor_memory_limiter_refused_total{processor}`, in
//! samples); back under the soft limit it accepts again. Above the soft
//! limit it first returns memory the allocator holds but no longer uses to
//! the OS (glibc `malloc_trim`) and measures again: the resident set of a
//! Rust process does not shrink by itself when its data is freed.
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

use crate::config::Duration;
use crate::consumer::{BoxFuture, Consumer};
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

/// The refusal decision: refuse while the resident set is above the soft
/// limit (`limit - spike`); accept again once it is at or below it.
pub fn should_refuse(rss: u64, soft_limit: u64) -> bool {
    rss > soft_limit
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

/// Returns memory freed inside the process to the OS (glibc's
/// `malloc_trim`); true when that was attempted.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() -> bool {
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: malloc_trim only walks glibc's own heap under its locks.
    unsafe { malloc_trim(0) };
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
/// every pipeline it feeds.
#[derive(Debug, Default, Clone)]
pub struct Backpressure(pub Vec<Arc<Pressure>>);

impl Backpressure {
    pub fn refusing(&self) -> bool {
        self.0.iter().any(|p| p.is_set())
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
        let l = Arc::new(MemoryLimiter {
            id,
            soft,
            limit,
            interval: cfg.check_interval.get(),
            pressure: Arc::default(),
            next,
            refused,
            rss,
        });
        l.check();
        Ok(l)
    }

    pub fn pressure(&self) -> Arc<Pressure> {
        self.pressure.clone()
    }

    /// One measurement: sets or clears the flag, logs a change.
    fn check(&self) {
        let Some(mut rss) = process_rss() else { return };
        if should_refuse(rss, self.soft) && release_free_memory() {
            // Freed memory the allocator kept is not in use: give it back
            // and measure again, or the resident set would stay above the
            // soft limit after the data is gone and scraping never resume
            // (the Collector forces a GC for the same reason).
            rss = process_rss().unwrap_or(rss);
        }
        self.rss.set(rss as f64);
        let refuse = should_refuse(rss, self.soft);
        let was = self.pressure.is_set();
        if refuse != was {
            if refuse {
                tracing::warn!(
                    processor = %self.id,
                    "memory above the soft limit ({} MiB resident > {} MiB = limit {} MiB - spike): refusing data and skipping scrapes",
                    rss / MIB, self.soft / MIB, self.limit / MIB
                );
            } else {
                tracing::info!(processor = %self.id, "memory back under the soft limit ({} MiB resident <= {} MiB): accepting data", rss / MIB, self.soft / MIB);
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
                samples: vec![infertel_model::Sample { timestamp_ms: 1, value: 1.0 }],
            })
            .collect();
        Batch { series, metadata: Vec::new() }
    }

    #[tokio::test]
    async fn a_limit_below_the_resident_set_refuses_and_counts() {
        let t = Telemetry::new();
        let sink = Arc::new(Sink(Default::default()));
        // 1 MiB: any process is above it.
        let l = MemoryLimiter::new("memory_limiter".into(), &cfg("limit_mib: 1"), sink.clone(), &t).unwrap();
        assert!(l.pressure().is_set(), "the first check runs at construction");
        assert!(Backpressure(vec![l.pressure()]).refusing());
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
        assert!(!Backpressure(vec![l2.pressure()]).refusing());
        assert!(Backpressure(vec![l2.pressure(), l.pressure()]).refusing());
    }
}
