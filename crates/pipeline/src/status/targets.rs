//! The scrape pools (one per receiver and job) and their targets, as the
//! receiver last discovered them, with each target's last scrape: what
//! `/targets`, `/service-discovery` and `/api/v1/targets` show.

use infertel_model::Labels;
use infertel_relabel::RelabelConfig;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

/// Dropped targets kept per pool (the rest are counted): Kubernetes
/// discovery can drop thousands of pods a job does not want.
pub const KEEP_DROPPED: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Health {
    #[default]
    Unknown,
    Up,
    Down,
}

impl Health {
    /// As Prometheus' targets API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Up => "up",
            Health::Down => "down",
        }
    }
}

/// A target's last scrape.
#[derive(Debug, Clone, Default)]
pub struct LastScrape {
    pub at: Option<SystemTime>,
    pub duration: Duration,
    pub health: Health,
    /// Empty when the scrape succeeded.
    pub error: String,
    /// The error's class (`http_status`, `timeout`, `parse`, ...).
    pub reason: &'static str,
    pub samples: u64,
    pub post_relabel: u64,
    pub series_added: u64,
    pub scrapes: u64,
    pub failures: u64,
}

/// One active target.
#[derive(Debug)]
pub struct TargetStatus {
    /// The labels discovery gave, before `relabel_configs`.
    pub discovered: Labels,
    /// Every label after relabeling, `__` ones included.
    pub all_labels: Labels,
    /// What scraped series get.
    pub labels: Labels,
    pub url: String,
    pub interval: Duration,
    pub timeout: Duration,
    last: Mutex<LastScrape>,
}

impl TargetStatus {
    pub fn new(t: &crate::receivers::prometheus::target::Target) -> Arc<Self> {
        Arc::new(TargetStatus {
            discovered: t.discovered.clone(),
            all_labels: t.all_labels.clone(),
            labels: t.labels.clone(),
            url: t.url.clone(),
            interval: t.interval,
            timeout: t.timeout,
            last: Mutex::new(LastScrape::default()),
        })
    }

    pub fn last(&self) -> LastScrape {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records a scrape's outcome.
    pub fn record(&self, at: SystemTime, duration: Duration, failure: Option<(&'static str, &str)>, stats: [u64; 3]) {
        let mut l = self.last.lock().unwrap_or_else(|p| p.into_inner());
        l.at = Some(at);
        l.duration = duration;
        l.scrapes += 1;
        match failure {
            None => {
                l.health = Health::Up;
                l.error.clear();
                l.reason = "";
            }
            Some((reason, msg)) => {
                l.health = Health::Down;
                l.error = msg.to_string();
                l.reason = reason;
                l.failures += 1;
            }
        }
        [l.samples, l.post_relabel, l.series_added] = stats;
    }

    pub fn job(&self) -> &str {
        self.labels.get("job").unwrap_or("")
    }

    pub fn instance(&self) -> &str {
        self.labels.get("instance").unwrap_or("")
    }
}

#[derive(Debug, Default)]
struct PoolState {
    active: Vec<Arc<TargetStatus>>,
    dropped: Vec<Labels>,
    /// Dropped targets beyond [`KEEP_DROPPED`].
    dropped_uncounted: usize,
    discovered_at: Option<SystemTime>,
}

/// One job of one receiver.
#[derive(Debug)]
pub struct Pool {
    pub receiver: String,
    pub job: String,
    pub relabel_configs: Vec<RelabelConfig>,
    pub metric_relabel_configs: Vec<RelabelConfig>,
    state: RwLock<PoolState>,
}

impl Pool {
    /// What the last discovery round found.
    pub fn set_targets(&self, active: Vec<Arc<TargetStatus>>, mut dropped: Vec<Labels>) {
        let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
        s.dropped_uncounted = dropped.len().saturating_sub(KEEP_DROPPED);
        dropped.truncate(KEEP_DROPPED);
        s.active = active;
        s.dropped = dropped;
        s.discovered_at = Some(SystemTime::now());
    }

    pub fn active(&self) -> Vec<Arc<TargetStatus>> {
        self.state.read().unwrap_or_else(|p| p.into_inner()).active.clone()
    }

    /// The dropped targets' discovered labels, and how many more were not kept.
    pub fn dropped(&self) -> (Vec<Labels>, usize) {
        let s = self.state.read().unwrap_or_else(|p| p.into_inner());
        (s.dropped.clone(), s.dropped_uncounted)
    }

    pub fn discovered_at(&self) -> Option<SystemTime> {
        self.state.read().unwrap_or_else(|p| p.into_inner()).discovered_at
    }
}

/// Every pool of the process, by (receiver, job).
#[derive(Debug, Default)]
pub struct TargetBook {
    pools: RwLock<BTreeMap<(String, String), Arc<Pool>>>,
}

impl TargetBook {
    /// The pool a job starts with (replacing the one a reloaded receiver had).
    pub fn open(
        &self,
        receiver: &str,
        job: &str,
        relabel_configs: Vec<RelabelConfig>,
        metric_relabel_configs: Vec<RelabelConfig>,
    ) -> Arc<Pool> {
        let p = Arc::new(Pool {
            receiver: receiver.into(),
            job: job.into(),
            relabel_configs,
            metric_relabel_configs,
            state: RwLock::new(PoolState::default()),
        });
        self.pools.write().unwrap_or_else(|p| p.into_inner()).insert((receiver.into(), job.into()), p.clone());
        p
    }

    /// A job ended: its pool goes, unless a newer one took its place.
    pub fn close(&self, pool: &Arc<Pool>) {
        let mut m = self.pools.write().unwrap_or_else(|p| p.into_inner());
        let k = (pool.receiver.clone(), pool.job.clone());
        if m.get(&k).is_some_and(|p| Arc::ptr_eq(p, pool)) {
            m.remove(&k);
        }
    }

    pub fn pools(&self) -> Vec<Arc<Pool>> {
        self.pools.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    pub fn pool(&self, receiver: &str, job: &str) -> Option<Arc<Pool>> {
        self.pools.read().unwrap_or_else(|p| p.into_inner()).get(&(receiver.to_string(), job.to_string())).cloned()
    }
}
