//! What a scrape loop leaves to the loop that replaces it when a reload
//! changes its receiver: its series cache (what it scraped last, so that a
//! series that then vanishes still gets its staleness marker) and the
//! labels to end its series with. As in Prometheus' scrape-pool reload, the
//! replacing loop continues the target on the same schedule (the offset is
//! a hash of the target) without markers; a target the new configuration
//! no longer has is ended with markers by the new receiver, since only it
//! knows which targets it kept.

use super::series::{REPORT_SERIES, SeriesCache, report_labels};
use crate::consumer::Consumer;
use infertel_model::{Batch, Label, Labels, Sample, Series, stale_nan};
use std::collections::HashMap;
use std::sync::Mutex;

/// A target's identity across a reload: receiver, job, every label after
/// relabeling, URL.
pub type LoopKey = (String, String, Labels, String);

/// One stopped loop's state.
pub struct Handed {
    pub cache: SeriesCache,
    /// The labels attached to the target's series (`job`, `instance`, ...).
    pub target_labels: Labels,
    pub external_labels: Vec<Label>,
    /// When the stopped loop's next scrape was due, and its interval: the
    /// successor keeps that schedule (a scrape due during the handover is
    /// made at once), so no interval goes without a scrape.
    pub next_due: tokio::time::Instant,
    pub interval: std::time::Duration,
}

/// Loops handed over by a receiver a reload replaced, until their
/// successors claim them. One per process, shared by every receiver.
#[derive(Default)]
pub struct Handover(Mutex<HashMap<LoopKey, Handed>>);

impl Handover {
    pub fn put(&self, key: LoopKey, h: Handed) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(key, h);
    }

    /// The state a loop for `key` continues from, if its predecessor left one.
    pub fn take(&self, key: &LoopKey) -> Option<Handed> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key)
    }

    /// Every loop of `receiver` left unclaimed, whose job `keep` does not
    /// want to wait for (its successors are not coming).
    pub fn unclaimed(&self, receiver: &str, mut keep: impl FnMut(&str) -> bool) -> Vec<Handed> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let keys: Vec<LoopKey> = m.keys().filter(|k| k.0 == receiver && !keep(&k.1)).cloned().collect();
        keys.into_iter().filter_map(|k| m.remove(&k)).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }
}

/// The staleness markers that end a target: every series of its last
/// scrape and its report series (`up`, `scrape_duration_seconds`, ...).
pub fn end_of_target(cache: &mut SeriesCache, target_labels: &Labels, external: &[Label], ts: i64) -> Batch {
    let mut series = cache.stale_all(ts);
    let extra: &[&str] = if cache.extra_report {
        &["scrape_timeout_seconds", "scrape_sample_limit", "scrape_body_size_bytes"]
    } else {
        &[]
    };
    for name in REPORT_SERIES.iter().chain(extra) {
        series.push(Series {
            labels: report_labels(name, target_labels, external),
            samples: infertel_model::samples![Sample { timestamp_ms: ts, value: stale_nan() }],
        });
    }
    Batch { series, metadata: Vec::new() }
}

/// Ends the targets in `gone` (loops handed over that no successor claimed).
pub async fn end_unclaimed(gone: Vec<Handed>, next: &dyn Consumer, ts: i64) {
    for mut h in gone {
        let b = end_of_target(&mut h.cache, &h.target_labels, &h.external_labels, ts);
        next.consume(b).await;
    }
}
