//! Recent values: the agent's own counters sampled every few seconds (the
//! overview's rates) and the inference processors' derived gauges (the
//! `/inference` charts), bounded in time and count.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How far back charts and rates look.
pub const WINDOW: Duration = Duration::from_secs(600);
/// Points kept per derived series.
pub const MAX_POINTS: usize = 240;
/// Derived series kept (the oldest-updated go first).
pub const MAX_SERIES: usize = 2000;

/// A derived series' identity: processor, `job/instance`, series name and
/// its other labels (quantile, phase, objective...).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SeriesKey {
    pub processor: String,
    pub target: String,
    pub name: String,
    pub labels: String,
}

#[derive(Debug, Default)]
pub struct History {
    /// (when, counter totals by key).
    counters: Mutex<VecDeque<(Instant, BTreeMap<String, f64>)>>,
    derived: Mutex<BTreeMap<SeriesKey, VecDeque<(i64, f64)>>>,
}

impl History {
    /// One sample of the agent's counters.
    pub fn sample_counters(&self, values: BTreeMap<String, f64>) {
        let mut q = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        q.push_back((now, values));
        while q.front().is_some_and(|(t, _)| now.duration_since(*t) > WINDOW) {
            q.pop_front();
        }
    }

    /// Per-second rates of every sampled counter over the last `over` (or
    /// as much of it as was sampled); empty before two samples.
    pub fn rates(&self, over: Duration) -> BTreeMap<String, f64> {
        let q = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        let Some((t1, last)) = q.back() else { return BTreeMap::new() };
        let Some((t0, first)) = q.iter().find(|(t, _)| t1.duration_since(*t) <= over) else { return BTreeMap::new() };
        let dt = t1.duration_since(*t0).as_secs_f64();
        if dt <= 0.0 {
            return BTreeMap::new();
        }
        last.iter()
            .map(|(k, v)| {
                // A counter that went down (a reload replaced the component) restarts from 0.
                let d = v - first.get(k).copied().unwrap_or(0.0);
                (k.clone(), if d < 0.0 { v / dt } else { d / dt })
            })
            .collect()
    }

    /// One derived value at `at_ms`.
    pub fn push_derived(&self, key: SeriesKey, at_ms: i64, value: f64) {
        let mut m = self.derived.lock().unwrap_or_else(|p| p.into_inner());
        if !m.contains_key(&key) && m.len() >= MAX_SERIES {
            // The series updated longest ago makes room.
            if let Some(old) =
                m.iter().min_by_key(|(_, q)| q.back().map(|p| p.0).unwrap_or(i64::MIN)).map(|(k, _)| k.clone())
            {
                m.remove(&old);
            }
        }
        let q = m.entry(key).or_default();
        if q.back().is_some_and(|(t, _)| *t >= at_ms) {
            return;
        }
        q.push_back((at_ms, value));
        let oldest = at_ms - WINDOW.as_millis() as i64;
        while q.len() > MAX_POINTS || q.front().is_some_and(|(t, _)| *t < oldest) {
            q.pop_front();
        }
    }

    /// The points of every derived series, by key.
    pub fn derived(&self) -> BTreeMap<SeriesKey, Vec<(i64, f64)>> {
        let m = self.derived.lock().unwrap_or_else(|p| p.into_inner());
        m.iter().map(|(k, q)| (k.clone(), q.iter().copied().collect())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_points_are_bounded_and_ordered() {
        let h = History::default();
        let k = SeriesKey { processor: "p".into(), target: "j/i".into(), name: "x".into(), labels: String::new() };
        for i in 0..(MAX_POINTS as i64 + 10) {
            h.push_derived(k.clone(), 1_000_000 + i * 1000, i as f64);
        }
        // An older or repeated point is ignored.
        h.push_derived(k.clone(), 1_000_000, -1.0);
        let pts = &h.derived()[&k];
        assert_eq!(pts.len(), MAX_POINTS);
        assert_eq!(pts.last().map(|p| p.1), Some((MAX_POINTS + 9) as f64));
        assert!(pts.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn rates_need_two_samples() {
        let h = History::default();
        assert!(h.rates(Duration::from_secs(60)).is_empty());
        h.sample_counters([("a".to_string(), 10.0)].into());
        std::thread::sleep(Duration::from_millis(50));
        h.sample_counters([("a".to_string(), 20.0)].into());
        let r = h.rates(Duration::from_secs(60));
        assert!(r["a"] > 10.0 / 0.2 && r["a"] < 10.0 / 0.04, "{r:?}");
    }
}
