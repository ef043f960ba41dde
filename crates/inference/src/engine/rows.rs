//! A target's input samples as rows: one row per scrape time, one column per
//! input series, the values of a row side by side.
//!
//! A scrape of a vLLM server with a few data-parallel engines brings some
//! 550 input series at one timestamp. Kept as one vector per series, every
//! scrape touched a cache line (and often a page) of each of them, and a
//! window of 100 targets was some 280 MiB that no cache holds: the agent
//! spent more time waiting on those lines than storing. As rows, a scrape is
//! written to one contiguous row, the time is stored once, and evaluation
//! finds a window's rows once per target instead of once per series.
//!
//! A column with no sample at a row's time holds [`ABSENT`] there (a series
//! missing from a scrape, a failed scrape, one that came later). Samples
//! with their own timestamps (exposition timestamps, pushed data) get rows
//! of their own times, inserted in order.

use crate::window::{Increase, Skip};
use infertel_model::Sample;
use std::collections::VecDeque;
use std::ops::Range;

/// The value of a column at a row where the series has no sample: a NaN
/// whose payload no source writes (a value with these bits is stored as the
/// usual NaN; see [`Rows::put`]). Staleness markers are not stored at all.
const ABSENT_BITS: u64 = 0x7ff8_0000_a85e_0001;

#[inline]
fn absent(v: f64) -> bool {
    v.to_bits() == ABSENT_BITS
}

/// The rows of one target, oldest first, in a ring: expiring rows moves
/// nothing (a vector drained from the front moved the whole window down).
#[derive(Clone, Default)]
pub(crate) struct Rows {
    /// The time of each row, strictly increasing.
    times: VecDeque<i64>,
    /// `capacity` rows of `stride` values; row `r` of `times` is at
    /// `(head + r) % capacity`.
    values: Vec<f64>,
    head: usize,
    capacity: usize,
    /// Columns per row (in use or not).
    stride: usize,
    /// Columns handed out so far, freed ones included.
    used: usize,
    /// Columns of series dropped, absent in every row, to be reused.
    free: Vec<u32>,
    /// Per column, the time of its newest sample that is lower than the
    /// one before it (a counter reset; `i64::MIN`: none). A window that
    /// starts at or after it holds no reset, so the counter's increase over
    /// it is its last value minus its first (see [`increase`](Self::increase)).
    breaks: Vec<i64>,
    /// How far back the rows reach when they are expired (newest time
    /// minus the last cutoff, see [`expire`](Self::expire)): with the
    /// interval between the last two rows, how many rows the ring will
    /// hold once the target is steady.
    span_ms: i64,
    /// Times the rows were laid out again (for tests).
    #[cfg(test)]
    pub(crate) relayouts: u32,
}

/// The most rows the ring grows to at once for its span (see
/// [`Rows::room`]); past it, it grows a quarter at a time.
const ROWS_FOR_SPAN_MAX: usize = 1024;

impl Rows {
    /// A column for a new series, absent in every row.
    pub(crate) fn column(&mut self) -> u32 {
        if let Some(c) = self.free.pop() {
            return c;
        }
        if self.used == self.stride {
            // Rows are re-laid out when they widen: by an eighth at a time,
            // so a target that adds series one by one does it rarely, and a
            // row wastes little.
            self.relayout(self.stride + self.stride / 8 + 8, self.capacity, None);
        }
        self.used += 1;
        (self.used - 1) as u32
    }

    /// Where row `r` starts in `values`.
    #[inline]
    fn at(&self, r: usize) -> usize {
        let p = self.head + r;
        (if p >= self.capacity { p - self.capacity } else { p }) * self.stride
    }

    /// Lays the rows out again, oldest first from the start, `stride` values
    /// a row and room for `capacity` rows, with an absent row before row
    /// `insert` if given (its time is set by the caller).
    fn relayout(&mut self, stride: usize, capacity: usize, insert: Option<usize>) {
        #[cfg(test)]
        {
            self.relayouts += 1;
        }
        let mut values = vec![f64::from_bits(ABSENT_BITS); capacity * stride];
        let mut to = 0;
        for r in 0..self.times.len() {
            if insert == Some(r) {
                to += 1;
            }
            let from = self.at(r);
            values[to * stride..to * stride + self.stride].copy_from_slice(&self.values[from..from + self.stride]);
            to += 1;
        }
        self.values = values;
        self.head = 0;
        self.capacity = capacity;
        self.stride = stride;
        self.breaks.resize(stride, i64::MIN);
    }

    /// Room for one more row. A full ring grows to the rows its span holds
    /// at the interval between its last two rows, when that is known and
    /// more than a quarter more: grown a quarter at a time, the rows of a
    /// target scraped each second (a 180 s span) were laid out again eight
    /// times in its first three minutes, the last ones copying 300 KB.
    fn room(&mut self) {
        let n = self.times.len();
        if n == self.capacity {
            let quarter = self.capacity + self.capacity / 4 + 8;
            let step = n.checked_sub(2).map_or(0, |r| self.times[n - 1] - self.times[r]);
            // An eighth more for a jittered interval.
            let rows = if step > 0 && self.span_ms > 0 { (self.span_ms / step) as usize } else { 0 };
            let for_span = if rows > 0 { rows + rows / 8 + 8 } else { 0 };
            self.relayout(self.stride, quarter.max(for_span.min(ROWS_FOR_SPAN_MAX)), None);
        }
    }

    /// Frees column `c` (its series was dropped): absent in every row, and
    /// handed out again later.
    pub(crate) fn release(&mut self, c: u32) {
        let c = c as usize;
        if c >= self.used {
            return;
        }
        for r in 0..self.capacity {
            self.values[r * self.stride + c] = f64::from_bits(ABSENT_BITS);
        }
        self.breaks[c] = i64::MIN;
        self.free.push(c as u32);
    }

    /// The index of the row at time `t`, added (absent everywhere) if there
    /// is none: at the end for a newer time, as nearly always, else in place.
    fn row_at(&mut self, t: i64) -> usize {
        match self.times.back() {
            Some(&last) if last == t => return self.times.len() - 1,
            Some(&last) if last > t => {}
            _ => {
                self.push_row(t);
                return self.times.len() - 1;
            }
        }
        let i = self.times.partition_point(|&x| x < t);
        if self.times[i] != t {
            let capacity =
                if self.times.len() == self.capacity { self.capacity + self.capacity / 4 + 8 } else { self.capacity };
            self.relayout(self.stride, capacity, Some(i));
            self.times.insert(i, t);
        }
        i
    }

    /// Stores the sample `(t, v)` of column `c` when it is newer than the
    /// column's newest (a sample out of order or repeated is not stored, as
    /// a per-series window would refuse it); true when stored.
    pub(crate) fn put(&mut self, c: u32, t: i64, v: f64) -> bool {
        let c = c as usize;
        if c >= self.stride {
            return false;
        }
        // The column's newest sample: usually in the last row or the one
        // before, found by walking back from the end.
        let prev = self.newest_in(c as u32, 0..self.times.len());
        if prev.is_some_and(|r| self.times[r] >= t) {
            return false;
        }
        let prev = prev.and_then(|r| self.value(c, r));
        let v = if absent(v) { f64::NAN } else { v };
        let r = self.row_at(t);
        let at = self.at(r) + c;
        self.values[at] = v;
        if prev.is_some_and(|p| v < p) {
            self.breaks[c] = t;
        }
        true
    }

    /// A new last row at `t` (newer than every row), absent everywhere:
    /// the scrape that repeats the last one writes its values into it with
    /// [`set_last`](Self::set_last). False (and nothing added) when `t` is
    /// not newer.
    pub(crate) fn push_row(&mut self, t: i64) -> bool {
        if self.times.back().is_some_and(|&last| last >= t) {
            return false;
        }
        self.room();
        self.times.push_back(t);
        let from = self.at(self.times.len() - 1);
        self.values[from..from + self.stride].fill(f64::from_bits(ABSENT_BITS));
        true
    }

    /// Writes each `(c, v)` at column `c` of the last row (one from
    /// [`push_row`](Self::push_row), where the columns have no sample yet).
    pub(crate) fn set_last(&mut self, values: impl Iterator<Item = (u32, f64)>) {
        let n = self.times.len();
        let Some(last) = n.checked_sub(1) else { return };
        let (t, to, stride) = (self.times[last], self.at(last), self.stride);
        // This runs for every input of every scrape, so it works on the two
        // rows as slices. A column's previous sample is nearly always in the
        // row before; the others (a series the last scrape missed) look
        // further back after the loop.
        let mut further: Vec<(usize, f64)> = Vec::new();
        let (cur, prev): (&mut [f64], Option<&[f64]>) = match last.checked_sub(1).map(|r| self.at(r)) {
            Some(b) if b < to => {
                let (lo, hi) = self.values.split_at_mut(to);
                (&mut hi[..stride], Some(&lo[b..b + stride]))
            }
            Some(b) => {
                let (lo, hi) = self.values.split_at_mut(b);
                (&mut lo[to..to + stride], Some(&hi[..stride]))
            }
            // The first row: no sample before it, so no reset.
            None => (&mut self.values[to..to + stride], None),
        };
        for (c, v) in values {
            let c = c as usize;
            let Some(slot) = cur.get_mut(c) else { continue };
            let v = if absent(v) { f64::NAN } else { v };
            *slot = v;
            let Some(prev) = prev else { continue };
            let p = prev[c];
            if absent(p) {
                further.push((c, v));
            } else if v < p {
                // False against NaN, as Prometheus' reset test is.
                self.breaks[c] = t;
            }
        }
        for (c, v) in further {
            let p = self.newest_in(c as u32, 0..last).and_then(|r| self.value(c, r)).unwrap_or(f64::NAN);
            if v < p {
                self.breaks[c] = t;
            }
        }
    }

    /// Drops the rows before `cutoff`: the ring's start moves past them.
    pub(crate) fn expire(&mut self, cutoff: i64) {
        if let Some(&newest) = self.times.back() {
            self.span_ms = newest.saturating_sub(cutoff);
        }
        while self.times.front().is_some_and(|&t| t < cutoff) {
            self.times.pop_front();
            self.head += 1;
            if self.head == self.capacity {
                self.head = 0;
            }
        }
        if self.times.is_empty() {
            self.head = 0;
        }
    }

    /// The rows whose time lies in `[from, to]`.
    pub(crate) fn between(&self, from: i64, to: i64) -> Range<usize> {
        let end = self.times.partition_point(|&x| x <= to);
        let start = self.times.partition_point(|&x| x < from).min(end);
        start..end
    }

    /// The rows from `cutoff` on (all of those kept, for a reader).
    pub(crate) fn since(&self, cutoff: i64) -> Range<usize> {
        self.times.partition_point(|&x| x < cutoff)..self.times.len()
    }

    /// Column `c`'s value at row `r`, when it has a sample there.
    #[inline]
    fn value(&self, c: usize, r: usize) -> Option<f64> {
        if c >= self.stride {
            return None;
        }
        let v = self.values[self.at(r) + c];
        (!absent(v)).then_some(v)
    }

    /// Column `c`'s samples in `rows`, oldest first.
    pub(crate) fn samples(&self, c: u32, rows: Range<usize>) -> impl Iterator<Item = Sample> + '_ {
        let c = c as usize;
        rows.filter_map(move |r| self.value(c, r).map(|v| Sample { timestamp_ms: self.times[r], value: v }))
    }

    /// The times of `rows`, for [`extend_samples`](Self::extend_samples).
    pub(crate) fn times_of(&self, rows: Range<usize>) -> Vec<i64> {
        self.times.range(rows).copied().collect()
    }

    /// Appends column `c`'s samples in `rows` (whose times `times` are, from
    /// [`times_of`](Self::times_of)) to `out`, oldest first: what
    /// [`samples`](Self::samples) yields, in a plain loop over the ring's
    /// (at most two) runs of rows, for the evaluation's windows.
    pub(crate) fn extend_samples(&self, c: u32, rows: Range<usize>, times: &[i64], out: &mut Vec<Sample>) {
        let c = c as usize;
        if c >= self.stride || rows.is_empty() || times.len() != rows.len() {
            return;
        }
        let start = self.at(rows.start) / self.stride;
        let first = rows.len().min(self.capacity - start);
        for (from, times) in [(start, &times[..first]), (0, &times[first..])] {
            let values = &self.values[from * self.stride + c..];
            for (i, &t) in times.iter().enumerate() {
                let v = values[i * self.stride];
                if !absent(v) {
                    out.push(Sample { timestamp_ms: t, value: v });
                }
            }
        }
    }

    /// The increase of column `c`'s counter over `rows`, as
    /// [`crate::window::increase`] computes it from the samples there;
    /// `None` when it has none there. Without a reset after its first
    /// sample there (see `breaks`), that is its last value minus its first,
    /// read from two rows; else the samples are read.
    pub(crate) fn increase(&self, c: u32, rows: Range<usize>) -> Option<Result<Increase, Skip>> {
        let cu = c as usize;
        let first = rows.clone().find(|&r| self.value(cu, r).is_some())?;
        let last = self.newest_in(c, first..rows.end)?;
        if self.breaks.get(cu).is_some_and(|&b| b > self.times[first]) {
            let window: Vec<Sample> = self.samples(c, first..last + 1).collect();
            return Some(crate::window::increase(&window));
        }
        let seconds = (self.times[last] - self.times[first]) as f64 / 1000.0;
        if last == first || seconds <= 0.0 {
            return Some(Err(Skip::FirstWindow));
        }
        let (a, b) = (self.value(cu, first)?, self.value(cu, last)?);
        Some(Ok(Increase { delta: b - a, seconds }))
    }

    /// Column `c`'s oldest sample in `rows`.
    pub(crate) fn first_in(&self, c: u32, rows: Range<usize>) -> Option<Sample> {
        let r = rows.clone().find(|&r| self.value(c as usize, r).is_some())?;
        self.samples(c, r..r + 1).next()
    }

    /// The newest row of `rows` where column `c` has a sample.
    pub(crate) fn newest_in(&self, c: u32, rows: Range<usize>) -> Option<usize> {
        let c = c as usize;
        rows.rev().find(|&r| self.value(c, r).is_some())
    }

    /// The row before `before`, not older than `floor`, where column `c`
    /// has its newest sample: the sample in force at the start of a window.
    pub(crate) fn newest_before(&self, c: u32, before: usize, floor: usize) -> Option<usize> {
        self.newest_in(c, floor..before.max(floor))
    }

    /// Whether any column has a sample in `rows`.
    pub(crate) fn any_in(&self, rows: Range<usize>) -> bool {
        rows.into_iter().any(|r| {
            let from = self.at(r);
            self.values[from..from + self.stride].iter().any(|&x| !absent(x))
        })
    }

    /// Rows kept.
    pub(crate) fn len(&self) -> usize {
        self.times.len()
    }

    /// The time of row `r`.
    pub(crate) fn time(&self, r: usize) -> i64 {
        self.times[r]
    }

    /// Rows kept, and values per row (for tests of memory).
    #[cfg(test)]
    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.times.len(), self.stride)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn col(r: &Rows, c: u32) -> Vec<(i64, f64)> {
        r.samples(c, 0..r.times.len()).map(|s| (s.timestamp_ms, s.value)).collect()
    }

    /// A target scraped about every second (jittered), its rows expired to
    /// a 180 s span as the engine expires them: the ring is laid out again
    /// a few times while the interval is unknown, then once for the span,
    /// and holds every row of the span without growing again; the values
    /// read back are those written.
    #[test]
    fn the_ring_grows_once_to_its_span() {
        let mut next = xorshift(7);
        let mut r = Rows::default();
        let c = r.column();
        let mut t = 1_000_000i64;
        let mut written = Vec::new();
        for k in 0..600 {
            t += 1000 + (next() % 41) as i64 - 20;
            assert!(r.push_row(t));
            r.set_last(std::iter::once((c, k as f64)));
            written.push((t, k as f64));
            r.expire(t - 180_000);
        }
        // Growth to the span came at the first full ring with two rows;
        // the rows in the span at about 1 s fit with the margin.
        assert!(r.relayouts <= 3, "laid out again {} times", r.relayouts);
        assert!(r.capacity >= 190 && r.capacity <= 230, "capacity {}", r.capacity);
        let kept: Vec<(i64, f64)> = written.iter().copied().filter(|&(x, _)| x >= t - 180_000).collect();
        assert_eq!(col(&r, c), kept);
    }

    /// Rows keep each column's samples as a per-series window would: in
    /// order, out-of-order and repeated ones refused, rows inserted for
    /// earlier times, columns widened and reused with nothing left over.
    #[test]
    fn columns_hold_what_a_window_per_series_holds() {
        let mut r = Rows::default();
        let cols: Vec<u32> = (0..20).map(|_| r.column()).collect();
        assert_eq!(cols, (0..20).collect::<Vec<_>>());
        assert!(r.put(0, 1000, 1.0));
        assert!(r.put(1, 1000, 2.0));
        assert!(!r.put(0, 1000, 9.0), "a repeated time is refused");
        assert!(r.put(1, 3000, 4.0));
        assert!(r.put(0, 2000, 3.0), "older than the last row, newer than the column's last");
        assert!(!r.put(1, 2000, 5.0), "older than the column's last");
        assert_eq!(r.times, vec![1000, 2000, 3000]);
        assert_eq!(col(&r, 0), vec![(1000, 1.0), (2000, 3.0)]);
        assert_eq!(col(&r, 1), vec![(1000, 2.0), (3000, 4.0)]);
        // A NaN with the absent bits is stored as a NaN.
        assert!(r.put(2, 3000, f64::from_bits(ABSENT_BITS)));
        assert!(col(&r, 2)[0].1.is_nan());
        // Widening keeps every value in its column.
        let more: Vec<u32> = (0..100).map(|_| r.column()).collect();
        assert_eq!(more[0], 20);
        assert!(r.put(119, 3000, 7.0));
        assert_eq!(col(&r, 0), vec![(1000, 1.0), (2000, 3.0)]);
        assert_eq!(col(&r, 1), vec![(1000, 2.0), (3000, 4.0)]);
        assert_eq!(col(&r, 119), vec![(3000, 7.0)]);
        // A released column is handed out again, empty.
        r.release(1);
        assert_eq!(r.column(), 1);
        assert!(col(&r, 1).is_empty());
        // The last row repeated.
        assert!(r.push_row(4000));
        r.set_last([(0, 5.0)].into_iter());
        assert!(!r.push_row(4000));
        assert_eq!(col(&r, 0).last(), Some(&(4000, 5.0)));
        assert_eq!(r.newest_in(1, 0..4), None);
        assert_eq!(r.newest_in(0, 0..4), Some(3));
        assert_eq!(r.newest_before(0, 3, 0), Some(1));
        assert_eq!(r.between(1500, 3000), 1..3);
        assert!(r.any_in(2..3));
    }

    /// A small deterministic generator (xorshift), so that a failure repeats.
    pub(crate) fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// The increase read from a window's two ends is the increase computed
    /// from all its samples, bit for bit: over counters that reset, hold a
    /// NaN, skip scrapes, take samples out of order and keep going after
    /// the ring wraps, for every window of every column.
    #[test]
    fn increase_from_the_ends_is_the_increase_from_every_sample() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut r = Rows::default();
        let cols: Vec<u32> = (0..6).map(|_| r.column()).collect();
        let late = r.column();
        let mut value = [0.0f64; 6];
        let (mut fast, mut scanned) = (0, 0);
        for k in 0..400i64 {
            // Jittered, as a scrape loop stamps them.
            let t = 1_000_000 + k * 1000 + (next() % 7) as i64;
            for (i, &c) in cols.iter().enumerate() {
                match next() % 40 {
                    0 => continue,                                 // missed scrape
                    1 => value[i] = (next() % 5) as f64,           // reset
                    2 if i == 5 => value[i] = f64::NAN,            // a NaN
                    _ => value[i] += (next() % 1000) as f64 / 7.0, // fractional
                }
                if value[i].is_nan() && next() % 3 == 0 {
                    value[i] = 1.0;
                }
                r.put(c, t, value[i]);
            }
            // A sample of another column half a second earlier: a row of
            // its own, inserted before this scrape's.
            if k % 50 == 25 {
                assert!(r.put(late, t - 500, k as f64));
                assert_eq!(r.times[r.times.len() - 2], t - 500);
            }
            r.expire(t - 120_000);
            let n = r.times.len();
            for &c in cols.iter().chain([&late]) {
                for (from, to) in [(0, n), (n.saturating_sub(60), n), (n / 3, n / 2), (n - 1, n), (n / 2, n / 2)] {
                    let all: Vec<Sample> = r.samples(c, from..to).collect();
                    let want = if all.is_empty() { None } else { Some(crate::window::increase(&all)) };
                    let got = r.increase(c, from..to);
                    let bits = |x: &Option<Result<Increase, Skip>>| {
                        x.map(|y| y.map(|i| (i.delta.to_bits(), i.seconds.to_bits())))
                    };
                    assert_eq!(bits(&got), bits(&want), "column {c}, rows {from}..{to}, scrape {k}");
                    if r.breaks[c as usize] > all.first().map_or(i64::MAX, |s| s.timestamp_ms) {
                        scanned += 1;
                    } else {
                        fast += 1;
                    }
                }
            }
        }
        assert!(r.head > 0, "the ring wrapped");
        assert!(fast > 1000 && scanned > 1000, "both ways taken: {fast} from the ends, {scanned} scanned");
    }

    /// A repeated scrape's row written at once (`push_row` + `set_last`, the
    /// shortcut) holds what the same samples put one by one hold, and
    /// records the same resets: through missed scrapes (the reset test then
    /// looks further back than the row before), resets, NaNs, a value with
    /// the absent bits, and the ring's wrap.
    #[test]
    fn a_row_written_at_once_holds_and_records_what_samples_put_one_by_one_do() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let (mut one, mut row) = (Rows::default(), Rows::default());
        let cols: Vec<u32> = (0..8).map(|_| one.column()).collect();
        assert_eq!(cols, (0..8).map(|_| row.column()).collect::<Vec<_>>());
        let mut value = [0.0f64; 8];
        let mut away = [0i64; 8];
        let mut back = [false; 8];
        let mut resets_after_a_gap = 0;
        for k in 0..500i64 {
            let t = 5_000_000 + k * 1000 + (next() % 9) as i64;
            let mut present = Vec::new();
            for (i, &c) in cols.iter().enumerate() {
                if away[i] > 0 {
                    away[i] -= 1;
                    back[i] = away[i] == 0;
                    continue;
                }
                let returning = std::mem::take(&mut back[i]);
                match next() % 30 {
                    0 => {
                        away[i] = 1 + (next() % 4) as i64; // missing for a few scrapes
                        continue;
                    }
                    // A reset, often right after a gap.
                    r if r == 1 || returning && r % 3 == 0 => {
                        value[i] = (next() % 3) as f64;
                        resets_after_a_gap += returning as usize;
                    }
                    2 => value[i] = f64::NAN,
                    3 => value[i] = f64::from_bits(ABSENT_BITS),
                    _ => value[i] = if value[i].is_nan() { 1.0 } else { value[i] + (next() % 100) as f64 / 3.0 },
                }
                present.push((c, value[i]));
            }
            for &(c, v) in &present {
                one.put(c, t, v);
            }
            assert!(row.push_row(t));
            row.set_last(present.iter().copied());
            one.expire(t - 90_000);
            row.expire(t - 90_000);
            assert_eq!(one.breaks, row.breaks, "resets recorded, scrape {k}");
            let n = one.times.len();
            assert_eq!(n, row.times.len());
            for &c in &cols {
                let bits =
                    |r: &Rows| r.samples(c, 0..n).map(|s| (s.timestamp_ms, s.value.to_bits())).collect::<Vec<_>>();
                assert_eq!(bits(&one), bits(&row), "column {c}, scrape {k}");
            }
        }
        assert!(row.head > 0, "the ring wrapped");
        assert!(resets_after_a_gap > 5, "{resets_after_a_gap} resets right after a missed scrape");
    }

    /// Expiry drops exactly the rows before the cutoff, and the ring keeps
    /// each column's samples in order as it wraps and grows.
    #[test]
    fn expiry_drops_old_rows_as_the_ring_wraps() {
        let mut r = Rows::default();
        let c = r.column();
        for t in 0..300 {
            r.put(c, t * 1000, t as f64);
            // A second column, every other row (the ring wraps with gaps).
            if t % 2 == 0 {
                let d = if t == 0 { r.column() } else { 1 };
                r.put(d, t * 1000, -(t as f64));
            }
            r.expire(t * 1000 - 100_000);
            let (rows, _) = r.shape();
            assert_eq!(rows as i64, t.min(100) + 1, "rows at {t}");
            assert_eq!(r.times[0], (t * 1000 - 100_000).max(0));
            assert!(r.capacity <= 101 + 101 / 4 + 8, "capacity {} at {t}", r.capacity);
            let want: Vec<(i64, f64)> = ((t - 100).max(0)..=t).map(|k| (k * 1000, k as f64)).collect();
            assert_eq!(col(&r, c), want, "at {t}");
            let want: Vec<(i64, f64)> =
                ((t - 100).max(0)..=t).filter(|k| k % 2 == 0).map(|k| (k * 1000, -(k as f64))).collect();
            assert_eq!(col(&r, 1), want, "at {t}");
        }
        // A row inserted into a wrapped ring keeps every column in place.
        assert!(r.head > 0, "the ring has wrapped");
        // The evaluation's loop over the ring's runs reads what a row at a
        // time reads, across the wrap too.
        for c in [c, 1] {
            for rows in [0..r.times.len(), 3..90, 50..51, 0..0, 99..101] {
                let mut out = Vec::new();
                r.extend_samples(c, rows.clone(), &r.times_of(rows.clone()), &mut out);
                assert_eq!(out, r.samples(c, rows.clone()).collect::<Vec<_>>(), "{rows:?}");
            }
        }
        assert!(r.head + r.times.len() > r.capacity, "the rows run across the ring's end");
        let d = r.column();
        assert!(r.put(d, 250_500, 9.0));
        assert!(!r.put(d, 250_400, 8.0), "older than the column's newest");
        assert_eq!(col(&r, d), vec![(250_500, 9.0)]);
        let want: Vec<(i64, f64)> = (199..=299).map(|k| (k * 1000, k as f64)).collect();
        assert_eq!(col(&r, c), want);
        assert_eq!(col(&r, 1).len(), 50);
        assert_eq!(r.between(250_000, 251_000), 51..54);
    }
}
