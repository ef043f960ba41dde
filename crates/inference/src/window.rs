//! Window arithmetic with Prometheus semantics, minus extrapolation.
//!
//! A counter's increase over a window is the difference between the last and
//! the first sample inside it, plus the value before every reset (a sample
//! lower than its predecessor), exactly as Prometheus' `increase()` corrects
//! resets. The rate is that increase divided by the time between those two
//! samples, so the ratio of two rates taken from the same scrapes is exact.

use infertel_model::Sample;

/// Why a derived value was not produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    /// An input family is not exposed by the source.
    MissingInput,
    /// An input's newest sample is a staleness marker (target gone, series gone).
    StaleInput,
    /// Fewer than two samples in the window (the first window after start).
    FirstWindow,
    /// The denominator did not move (0/0 or x/0): nothing happened.
    ZeroDenominator,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::MissingInput => "missing_input",
            Skip::StaleInput => "stale_input",
            Skip::FirstWindow => "first_window",
            Skip::ZeroDenominator => "zero_denominator",
        }
    }
}

/// An increase over a window: value, and the seconds between the two samples
/// it was taken from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Increase {
    pub delta: f64,
    pub seconds: f64,
}

impl Increase {
    pub fn rate(&self) -> f64 {
        self.delta / self.seconds
    }
}

/// The samples of `all` (oldest first) inside `[t - window, t]`, or why there
/// are none usable: the newest sample at or before `t` being a staleness
/// marker makes the series stale, as in Prometheus' instant lookups.
pub fn in_window(all: &[Sample], t: i64, window_ms: i64) -> Result<&[Sample], Skip> {
    let end = all.partition_point(|s| s.timestamp_ms <= t);
    if end == 0 {
        return Err(Skip::MissingInput);
    }
    if infertel_model::is_stale_nan(all[end - 1].value) {
        return Err(Skip::StaleInput);
    }
    let start = all[..end].partition_point(|s| s.timestamp_ms < t - window_ms);
    // Stale markers inside the window (a series that came back) split it: use
    // the part after the last one.
    let slice = &all[start..end];
    let from = slice.iter().rposition(|s| infertel_model::is_stale_nan(s.value)).map_or(0, |i| i + 1);
    let slice = &slice[from..];
    if slice.is_empty() { Err(Skip::MissingInput) } else { Ok(slice) }
}

/// Counter increase between the first and last sample, resets corrected.
pub fn increase(samples: &[Sample]) -> Result<Increase, Skip> {
    if samples.len() < 2 {
        return Err(Skip::FirstWindow);
    }
    let first = samples[0];
    let last = samples[samples.len() - 1];
    let mut delta = last.value - first.value;
    for w in samples.windows(2) {
        if w[1].value < w[0].value {
            delta += w[0].value;
        }
    }
    let seconds = (last.timestamp_ms - first.timestamp_ms) as f64 / 1000.0;
    if seconds <= 0.0 {
        return Err(Skip::FirstWindow);
    }
    Ok(Increase { delta, seconds })
}

/// Prometheus' `histogram_quantile` on (upper bound, cumulative count) pairs:
/// sorted, equal bounds merged, counts forced monotonic, linear interpolation
/// inside the bucket, the highest finite bound when the rank falls in +Inf.
/// `None` where Prometheus returns NaN (no +Inf bucket, no observations).
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    if q.is_nan() {
        return None;
    }
    if q < 0.0 {
        return Some(f64::NEG_INFINITY);
    }
    if q > 1.0 {
        return Some(f64::INFINITY);
    }
    let mut b: Vec<(f64, f64)> = buckets.to_vec();
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    if !b.last().is_some_and(|l| l.0 == f64::INFINITY) {
        return None;
    }
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(b.len());
    for (ub, c) in b {
        match merged.last_mut() {
            Some(last) if last.0 == ub => last.1 += c,
            _ => merged.push((ub, c)),
        }
    }
    let mut max = f64::NEG_INFINITY;
    for x in merged.iter_mut() {
        if x.1 < max {
            x.1 = max;
        } else {
            max = x.1;
        }
    }
    if merged.len() < 2 {
        return None;
    }
    let observations = merged[merged.len() - 1].1;
    if observations == 0.0 || observations.is_nan() {
        return None;
    }
    let mut rank = q * observations;
    let n = merged.len() - 1;
    let i = merged[..n].partition_point(|x| x.1 < rank);
    if i == n {
        return Some(merged[n - 1].0);
    }
    if i == 0 && merged[0].0 <= 0.0 {
        return Some(merged[0].0);
    }
    let bucket_end = merged[i].0;
    let mut count = merged[i].1;
    let mut bucket_start = 0.0;
    if i > 0 {
        bucket_start = merged[i - 1].0;
        count -= merged[i - 1].1;
        rank -= merged[i - 1].1;
    }
    Some(bucket_start + (bucket_end - bucket_start) * (rank / count))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: i64, v: f64) -> Sample {
        Sample { timestamp_ms: t, value: v }
    }

    #[test]
    fn increase_corrects_resets_like_prometheus() {
        // 10 → 20 → reset to 5 → 15: increase = (20-10) + 5 + (15-5) = 25.
        let v = [s(0, 10.0), s(15_000, 20.0), s(30_000, 5.0), s(45_000, 15.0)];
        let i = increase(&v).unwrap();
        assert_eq!(i.delta, 25.0);
        assert_eq!(i.seconds, 45.0);
        assert_eq!(increase(&v[..1]), Err(Skip::FirstWindow));
    }

    #[test]
    fn window_selection_and_staleness() {
        let stale = infertel_model::stale_nan();
        let v = [s(0, 1.0), s(15_000, 2.0), s(30_000, 3.0), s(45_000, stale)];
        assert_eq!(in_window(&v, 30_000, 15_000).unwrap(), &v[1..3]);
        assert_eq!(in_window(&v, 45_000, 60_000), Err(Skip::StaleInput));
        assert_eq!(in_window(&v, -1, 60_000), Err(Skip::MissingInput));
        let back = [s(0, 1.0), s(15_000, stale), s(30_000, 3.0), s(45_000, 4.0)];
        assert_eq!(in_window(&back, 45_000, 60_000).unwrap(), &back[2..4]);
    }

    #[test]
    fn quantile_matches_prometheus_rules() {
        let b = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (f64::INFINITY, 40.0)];
        // rank 20 falls in (0.1, 0.5]: 0.1 + 0.4 * (10/20) = 0.3.
        assert!((histogram_quantile(0.5, &b).unwrap() - 0.3).abs() < 1e-15);
        // rank 40 at q=1 stops at the first bucket reaching it: 1.0.
        assert_eq!(histogram_quantile(1.0, &b), Some(1.0));
        // Rank in +Inf: the highest finite bound.
        let inf = [(0.1, 1.0), (f64::INFINITY, 10.0)];
        assert_eq!(histogram_quantile(0.99, &inf), Some(0.1));
        assert_eq!(histogram_quantile(0.5, &[(0.1, 0.0), (f64::INFINITY, 0.0)]), None);
        assert_eq!(histogram_quantile(0.5, &[(0.1, 1.0)]), None, "no +Inf bucket");
        // Non-monotonic counts are forced up.
        let nm = [(0.1, 5.0), (0.2, 4.0), (f64::INFINITY, 10.0)];
        assert_eq!(histogram_quantile(0.45, &nm), Some(0.1 * (4.5 / 5.0)));
    }
}
