//! What the `prometheus` exporter serves: the latest sample of each series
//! and the metadata of its family, as received (the namespace and the
//! constant labels are applied when written out, so a reload that changes
//! them keeps the values). A staleness marker removes its series at once; a
//! series not updated within `metric_expiration` is removed when the page is
//! next written, counted in
//! `infertel_exporter_prometheus_expired_series_total{exporter}`.

use infertel_model::{Batch, Labels, is_stale_nan};
use infertel_otlp::MetadataStore;
use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct Latest {
    pub value: f64,
    pub timestamp_ms: i64,
    pub seen: Instant,
}

#[derive(Default)]
pub struct Store {
    pub series: FxHashMap<Labels, Latest>,
    pub metadata: MetadataStore,
}

impl Store {
    pub fn apply(&mut self, batch: &Batch, now: Instant) {
        self.metadata.update(&batch.metadata);
        for s in &batch.series {
            // The newest sample of the batch; samples are oldest first.
            let Some(last) = s.samples.iter().max_by_key(|x| x.timestamp_ms) else { continue };
            if is_stale_nan(last.value) {
                self.series.remove(&s.labels);
                continue;
            }
            match self.series.get_mut(&s.labels) {
                Some(l) if l.timestamp_ms > last.timestamp_ms => {}
                Some(l) => *l = Latest { value: last.value, timestamp_ms: last.timestamp_ms, seen: now },
                None => {
                    self.series.insert(
                        s.labels.clone(),
                        Latest { value: last.value, timestamp_ms: last.timestamp_ms, seen: now },
                    );
                }
            }
        }
    }

    /// Drops series not updated within `ttl`; how many.
    pub fn expire(&mut self, ttl: Duration, now: Instant) -> usize {
        let before = self.series.len();
        self.series.retain(|_, l| now.saturating_duration_since(l.seen) < ttl);
        before - self.series.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_model::{Sample, Series, stale_nan};

    fn series(name: &str, v: f64, t: i64) -> Series {
        Series {
            labels: Labels::from_pairs([("__name__", name)]),
            samples: infertel_model::samples![Sample { timestamp_ms: t, value: v }],
        }
    }

    #[test]
    fn latest_wins_staleness_removes_and_old_series_expire() {
        let mut s = Store::default();
        let t0 = Instant::now();
        s.apply(&Batch { series: vec![series("a", 1.0, 1000), series("b", 2.0, 1000)], metadata: vec![] }, t0);
        s.apply(&Batch { series: vec![series("a", 3.0, 2000)], metadata: vec![] }, t0 + Duration::from_secs(10));
        // An older sample arriving late does not replace a newer one.
        s.apply(&Batch { series: vec![series("a", 9.0, 1500)], metadata: vec![] }, t0 + Duration::from_secs(11));
        let a = s.series[&Labels::from_pairs([("__name__", "a")])];
        assert_eq!((a.value, a.timestamp_ms), (3.0, 2000));
        assert_eq!(s.expire(Duration::from_secs(5), t0 + Duration::from_secs(12)), 1, "b was last seen at t0");
        s.apply(
            &Batch { series: vec![series("a", stale_nan(), 3000)], metadata: vec![] },
            t0 + Duration::from_secs(13),
        );
        assert!(s.series.is_empty());
    }
}
