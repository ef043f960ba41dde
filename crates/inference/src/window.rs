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
    /// An input family is not exposed by the source, or has no sample in the window.
    MissingInput,
    /// The target is gone (its `up` went stale: removed from discovery).
    StaleInput,
    /// Fewer than two samples in the window (the first window after start).
    FirstWindow,
    /// The denominator did not move (0/0 or x/0): nothing happened.
    ZeroDenominator,
    /// The result was NaN or ±Inf (a NaN input, or an overflow).
    NonFinite,
    /// An objective inside a histogram bucket: the buckets bound the share of
    /// requests within it from both sides and the bounds disagree.
    Indeterminate,
    /// Histograms with different bucket bounds summed (servers or versions
    /// that bucket differently): no quantile of the sum is meaningful.
    MismatchedBuckets,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::MissingInput => "missing_input",
            Skip::StaleInput => "stale_input",
            Skip::FirstWindow => "first_window",
            Skip::ZeroDenominator => "zero_denominator",
            Skip::NonFinite => "non_finite",
            Skip::Indeterminate => "indeterminate",
            Skip::MismatchedBuckets => "mismatched_buckets",
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

/// The samples of `all` (oldest first) inside `[t - window, t]` (closed, as
/// Prometheus 2.x selects a range; 3.x leaves the start open).
///
/// Staleness markers are not samples of a range, as in Prometheus: the
/// engine never stores them (see `ingest`), and any that are passed here are
/// skipped by the arithmetic below. A failed scrape therefore costs one
/// sample, not the window.
pub fn in_window(all: &[Sample], t: i64, window_ms: i64) -> Result<&[Sample], Skip> {
    let end = all.partition_point(|s| s.timestamp_ms <= t);
    let start = all[..end].partition_point(|s| s.timestamp_ms < t - window_ms);
    let slice = &all[start..end];
    if slice.iter().all(|s| infertel_model::is_stale_nan(s.value)) { Err(Skip::MissingInput) } else { Ok(slice) }
}

/// True when the gauge `all` was above zero for the whole of `[t - sustained,
/// t]`, judged as Prometheus looks a value up: from the last sample at or
/// before `t - sustained` (the value in force at the start) to the last at or
/// before `t`, every sample is `> 0`. False when there is no sample that old
/// (too little history to say).
pub fn sustained_above_zero(all: &[Sample], t: i64, sustained_ms: i64) -> bool {
    let live = |s: &&Sample| !infertel_model::is_stale_nan(s.value);
    let end = all.partition_point(|s| s.timestamp_ms <= t);
    let from = all[..end].partition_point(|s| s.timestamp_ms <= t - sustained_ms);
    // The sample in force at t - sustained: the last live one at or before it.
    let Some(first) = all[..from].iter().rposition(|s| live(&s)) else { return false };
    all[first..end].iter().filter(live).all(|s| s.value > 0.0)
}

/// The rate of a counter that its source refreshes more slowly than it is
/// scraped (dcgm-exporter refreshes its fields every 30 s by default): the
/// increase between the first and the last sample of the window at which the
/// counter changed, over the time between them. Taken between change points,
/// a 15 s scrape of a 30 s counter neither sees an update too many nor one
/// too few. `before` is the sample preceding the window, if kept, so that a
/// change at the window's first sample is seen. `None` unless the window
/// holds at least two changes (at least one whole refresh period between
/// them).
pub fn change_point_rate(before: Option<Sample>, window: &[Sample]) -> Option<f64> {
    let live: Vec<Sample> = window.iter().copied().filter(|s| !infertel_model::is_stale_nan(s.value)).collect();
    let mut prev = before.filter(|s| !infertel_model::is_stale_nan(s.value));
    let mut changes = Vec::new();
    for (i, s) in live.iter().enumerate() {
        if prev.is_some_and(|p| p.value != s.value) {
            changes.push(i);
        }
        prev = Some(*s);
    }
    let (&a, &b) = (changes.first()?, changes.last()?);
    if a == b {
        return None;
    }
    increase(&live[a..=b]).ok().map(|i| i.rate())
}

/// Counter increase between the first and last sample, resets corrected,
/// computed as Prometheus computes it (`extrapolatedRate` in
/// `promql/functions.go`): the last value minus the first, plus the value
/// before every reset (a sample lower than its predecessor). Summing the
/// deltas instead is the same number in exact arithmetic, not in floating
/// point; and a NaN between the first and the last sample leaves the
/// result alone, as in Prometheus (no comparison with NaN is a reset).
/// Staleness markers are skipped (a failed scrape in the middle of a
/// window), as Prometheus leaves them out of range vectors.
pub fn increase(samples: &[Sample]) -> Result<Increase, Skip> {
    let live = |s: &&Sample| !infertel_model::is_stale_nan(s.value);
    let mut it = samples.iter().filter(live);
    let Some(&first) = it.next() else { return Err(Skip::FirstWindow) };
    let mut last = first;
    let mut any_reset = false;
    let mut n = 1;
    for &s in it {
        // A sample lower than its predecessor is a reset: the counter
        // counted from 0 again.
        any_reset |= s.value < last.value;
        last = s;
        n += 1;
    }
    if n < 2 {
        return Err(Skip::FirstWindow);
    }
    let seconds = (last.timestamp_ms - first.timestamp_ms) as f64 / 1000.0;
    if seconds <= 0.0 {
        return Err(Skip::FirstWindow);
    }
    let mut delta = last.value - first.value;
    if any_reset {
        // The values before the resets, added in order, as Prometheus adds them.
        let mut prev = first.value;
        for s in samples.iter().filter(live).skip(1) {
            if s.value < prev {
                delta += prev;
            }
            prev = s.value;
        }
    }
    Ok(Increase { delta, seconds })
}

/// Prometheus' `histogram_quantile` on (upper bound, cumulative count) pairs,
/// as of Prometheus 2.49: sorted, equal bounds merged, counts forced
/// monotonic with differences below a relative 1e-12 ignored in either
/// direction (floating-point noise of summed rates), linear interpolation
/// inside the bucket, the highest finite bound when the rank falls in +Inf.
/// `None` where Prometheus returns NaN (no +Inf bucket, no observations).
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    if !(0.0..=1.0).contains(&q) {
        return quantile_of(q, &[]);
    }
    quantile_of(q, &cumulative(buckets)?)
}

/// A histogram's buckets as [`histogram_quantile`] and [`share_within`]
/// read them (sorted, merged, monotonic), worked out once for the several
/// quantiles and shares an evaluation reads of one histogram.
#[derive(Clone, Debug)]
pub struct Cumulative(Option<Vec<(f64, f64)>>);

impl Cumulative {
    pub fn of(buckets: &[(f64, f64)]) -> Cumulative {
        Cumulative(cumulative(buckets))
    }

    /// What [`histogram_quantile`] gives for these buckets.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if !(0.0..=1.0).contains(&q) {
            return quantile_of(q, &[]);
        }
        quantile_of(q, self.0.as_deref()?)
    }

    /// What [`share_within`] gives for these buckets.
    pub fn share_within(&self, objective: f64) -> Option<ShareWithin> {
        share_within_of(objective, self.0.as_deref()?)
    }
}

/// [`histogram_quantile`] of `merged` (from [`cumulative`]); `merged` is
/// not read for a `q` outside 0..=1.
fn quantile_of(q: f64, merged: &[(f64, f64)]) -> Option<f64> {
    if q.is_nan() {
        return None;
    }
    if q < 0.0 {
        return Some(f64::NEG_INFINITY);
    }
    if q > 1.0 {
        return Some(f64::INFINITY);
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

/// Prometheus' relative tolerance for bucket-count differences (2.49+,
/// `smallDeltaTolerance`).
const SMALL_DELTA: f64 = 1e-12;

fn almost_equal(a: f64, b: f64) -> bool {
    const MIN_NORMAL: f64 = f64::MIN_POSITIVE;
    if a == b {
        return true;
    }
    let abs_sum = a.abs() + b.abs();
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || abs_sum < MIN_NORMAL {
        return diff < SMALL_DELTA * MIN_NORMAL;
    }
    diff / abs_sum.min(f64::MAX) < SMALL_DELTA
}

/// The buckets sorted, merged by bound and made monotonic as
/// `histogram_quantile` reads them; `None` without a +Inf bucket or with
/// fewer than two buckets.
fn cumulative(buckets: &[(f64, f64)]) -> Option<Vec<(f64, f64)>> {
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
    if merged.len() < 2 {
        return None;
    }
    // Decreases of any size and differences within the tolerance are
    // replaced by the last accepted count, which is not updated for them.
    let mut prev = merged[0].1;
    for x in merged.iter_mut().skip(1) {
        if x.1 == prev {
            continue;
        }
        if almost_equal(prev, x.1) || x.1 < prev {
            x.1 = prev;
            continue;
        }
        prev = x.1;
    }
    Some(merged)
}

/// The share of observations at or below `objective`, bounded by the
/// buckets: `lower` counts the buckets whose upper bound is at most the
/// objective, `upper` adds the bucket that contains it. Equal when the
/// objective is a bucket boundary. `None` without observations or +Inf.
pub fn share_within(objective: f64, buckets: &[(f64, f64)]) -> Option<ShareWithin> {
    share_within_of(objective, &cumulative(buckets)?)
}

/// [`share_within`] of `merged` (from [`cumulative`]).
fn share_within_of(objective: f64, merged: &[(f64, f64)]) -> Option<ShareWithin> {
    let total = merged[merged.len() - 1].1;
    if total == 0.0 || !total.is_finite() {
        return None;
    }
    let below = merged.iter().take_while(|x| x.0 <= objective).last().copied();
    let above = merged.iter().find(|x| x.0 >= objective).copied()?;
    Some(ShareWithin {
        lower: below.map_or(0.0, |b| b.1 / total),
        upper: above.1 / total,
        lower_bound: below.map(|b| b.0),
        upper_bound: above.0,
    })
}

/// See [`share_within`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShareWithin {
    pub lower: f64,
    pub upper: f64,
    /// The bucket boundaries the two shares were read at (`None`: below the
    /// first bucket).
    pub lower_bound: Option<f64>,
    pub upper_bound: f64,
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
    fn window_selection_ignores_staleness_markers() {
        let stale = infertel_model::stale_nan();
        let v = [s(0, 1.0), s(15_000, 2.0), s(30_000, 3.0), s(45_000, stale)];
        assert_eq!(in_window(&v, 30_000, 15_000).unwrap(), &v[1..3]);
        assert_eq!(in_window(&v, -1, 60_000), Err(Skip::MissingInput));
        assert_eq!(in_window(&v[3..], 45_000, 60_000), Err(Skip::MissingInput), "only a marker");
        // A failed scrape (a marker between samples) is left out of the
        // increase; the reset after it is still corrected.
        let tokens = [s(0, 1000.0), s(15_000, 1500.0), s(30_000, stale), s(45_000, 2500.0), s(60_000, 3000.0)];
        let i = increase(in_window(&tokens, 30_000, 60_000).unwrap()).unwrap();
        assert_eq!((i.delta, i.seconds), (500.0, 15.0));
        let i = increase(in_window(&tokens, 60_000, 60_000).unwrap()).unwrap();
        assert_eq!((i.delta, i.seconds), (2000.0, 60.0));
        let reset = [s(0, 1000.0), s(15_000, stale), s(30_000, 200.0)];
        assert_eq!(increase(&reset).unwrap().delta, 200.0);
    }

    #[test]
    fn sustained_means_every_sample_since_the_one_in_force() {
        // Scrape stamps jittered by a few ms, as a real scrape loop makes them.
        let t = |k: i64, j: i64| k * 15_000 + j;
        let v: Vec<Sample> = (0..12).map(|k| s(t(k, [3, -2, 5, 0, -4, 1][k as usize % 6]), 2.0)).collect();
        let now = v[11].timestamp_ms;
        // No sample exactly at now - 120 s: the one before it is in force.
        assert!(!v.iter().any(|x| x.timestamp_ms == now - 120_000));
        assert!(sustained_above_zero(&v, now, 120_000));
        // Too little history.
        assert!(!sustained_above_zero(&v, now, 200_000));
        let mut dip = v.clone();
        dip[5].value = 0.0;
        assert!(!sustained_above_zero(&dip, now, 120_000));
        // A dip before the sample in force does not count.
        let mut old = v.clone();
        old[1].value = 0.0;
        assert!(sustained_above_zero(&old, now, 120_000));
    }

    #[test]
    fn change_point_rate_over_a_slow_refresh() {
        // 240 W as mJ, refreshed every 30 s at phase 7 s, scraped every 15 s.
        let energy = |t: i64| ((t - 7_000).div_euclid(30_000) * 30_000 + 7_000) as f64 * 240.0;
        let all: Vec<Sample> = (0..20).map(|k| s(k * 15_000 + 1, energy(k * 15_000 + 1))).collect();
        for end in 8..20usize {
            let t = all[end].timestamp_ms;
            let start = all.partition_point(|x| x.timestamp_ms < t - 60_000);
            let r = change_point_rate(start.checked_sub(1).map(|i| all[i]), &all[start..=end]).unwrap();
            assert!((r / 1000.0 - 240.0).abs() < 1e-9, "{r} at {t}");
        }
        // One change only: no rate.
        assert_eq!(change_point_rate(None, &all[0..3]), None);
        // A counter that does not move: no change points.
        assert_eq!(change_point_rate(None, &[s(0, 5.0), s(15_000, 5.0), s(30_000, 5.0)]), None);
    }

    #[test]
    fn share_within_bounds_from_the_buckets() {
        let b = [(0.1, 50.0), (0.25, 90.0), (0.5, 100.0), (f64::INFINITY, 100.0)];
        let w = share_within(0.3, &b).unwrap();
        assert_eq!((w.lower, w.upper, w.lower_bound, w.upper_bound), (0.9, 1.0, Some(0.25), 0.5));
        let at = share_within(0.25, &b).unwrap();
        assert_eq!((at.lower, at.upper), (0.9, 0.9), "a boundary decides");
        let first = share_within(0.05, &b).unwrap();
        assert_eq!((first.lower, first.upper, first.lower_bound), (0.0, 0.5, None));
        assert_eq!(share_within(0.3, &[(0.1, 0.0), (f64::INFINITY, 0.0)]), None);
    }

    #[test]
    fn small_deltas_are_ignored_as_prometheus_2_49_does() {
        // Summed rates carry noise of 1e-13 relative: the last two buckets are
        // "equal" to the (0.1, 0.2] bucket's count for Prometheus ≥ 2.49, so
        // q=1 lands in (0.1, 0.2] at 0.2; read strictly (as 2.42 does), the
        // noise is a bucket of its own and q=1 gives 0.4.
        let n = 100.0 * (1.0 + 1e-13);
        let b = [(0.1, 50.0), (0.2, 100.0), (0.4, n), (f64::INFINITY, n)];
        assert_eq!(histogram_quantile(1.0, &b), Some(0.2));
        assert_eq!(histogram_quantile(0.5, &b), Some(0.1));
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

    /// The buckets made cumulative once answer every quantile and share as
    /// the one-shot functions do: out-of-range and NaN quantiles, no +Inf
    /// bucket, no observations, unsorted and repeated bounds, decreasing
    /// counts.
    #[test]
    fn cumulative_once_answers_as_each_call_does() {
        let inf = f64::INFINITY;
        let shapes: [&[(f64, f64)]; 7] = [
            &[(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (inf, 40.0)],
            &[(inf, 7.0), (0.5, 3.0), (0.5, 1.0), (0.1, 2.0)],
            &[(0.1, 5.0), (0.2, 4.0), (inf, 10.0)],
            &[(0.1, 0.0), (inf, 0.0)],
            &[(0.1, 1.0), (0.2, 2.0)],
            &[(inf, 3.0)],
            &[],
        ];
        let same = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) => x.to_bits() == y.to_bits(),
            (x, y) => x.is_none() && y.is_none(),
        };
        for b in shapes {
            let c = Cumulative::of(b);
            for q in [f64::NAN, -0.5, 0.0, 0.25, 0.5, 0.95, 0.99, 1.0, 1.5] {
                assert!(same(c.quantile(q), histogram_quantile(q, b)), "q={q} on {b:?}");
            }
            for objective in [0.0, 0.1, 0.3, 0.5, 2.0, inf] {
                assert_eq!(c.share_within(objective), share_within(objective, b), "{objective} on {b:?}");
            }
        }
    }
}
