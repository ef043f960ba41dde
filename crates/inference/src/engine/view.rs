//! A target's samples as the derivations read them at one time: candidate
//! names picked, series selected by label group, rates, quantiles and gauge
//! statistics over the window.

use super::by_labels::{ByLabels, Entry};
use super::ingest::{TargetState, WireName, wire};
use crate::schema::{Input, Source};
use crate::window::{Increase, Skip};
use infertel_model::{Labels, Sample};
use std::collections::BTreeMap;
use std::ops::Range;

pub type LabelPairs = Vec<(String, String)>;

/// Per label value, a rate (see [`View::child_rates`]), or why there are none.
pub(crate) type ChildRates = Result<BTreeMap<String, f64>, Skip>;

// Both sorted bytewise (see `matches`). An engine group: vLLM's `engine`
// and `model_name`, Dynamo's `model`, and where it runs.
pub(crate) const VLLM_GROUP: &[&str; 7] = &["engine", "instance", "job", "model", "model_name", "namespace", "pod"];
pub(crate) const GPU_GROUP: &[&str] = &["GPU_I_ID", "Hostname", "UUID", "gpu", "hostname", "instance", "job"];

pub(crate) fn restrict(l: &Labels, names: &[&str]) -> LabelPairs {
    names.iter().filter_map(|n| l.get(n).map(|v| (n.to_string(), v.to_string()))).collect()
}

/// True when label name `a` sorts bytewise before `b`. Names nearly always
/// differ in their first byte, which settles it without a call to `memcmp`:
/// the merge passes below run for every input series of every evaluation.
#[inline]
fn before(a: &str, b: &str) -> bool {
    match (a.as_bytes().first(), b.as_bytes().first()) {
        (Some(x), Some(y)) if x != y => x < y,
        _ => a.as_bytes() < b.as_bytes(),
    }
}

/// String equality that first compares addresses: the values of interned
/// label sets that are equal are usually the same string.
#[inline]
pub(crate) fn same_str(a: &str, b: &str) -> bool {
    a.len() == b.len() && (std::ptr::eq(a.as_ptr(), b.as_ptr()) || a == b)
}

/// The values of `names` (sorted bytewise) in `l`, in one merge pass; what
/// [`restrict`] keeps, without copying.
pub(crate) fn project<'l, const N: usize>(l: &'l Labels, names: &[&str; N]) -> [Option<&'l str>; N] {
    let mut out = [None; N];
    let mut li = l.as_slice();
    for (n, o) in names.iter().zip(out.iter_mut()) {
        while let Some((x, rest)) = li.split_first()
            && before(&x.name, n)
        {
            li = rest;
        }
        *o = li.first().filter(|x| same_str(&x.name, n)).map(|x| &*x.value);
    }
    out
}

/// `base` with `extra` added, sorted, allocated once.
pub(crate) fn with_extra(base: &[(String, String)], extra: &[(&str, &str)]) -> LabelPairs {
    let mut v = Vec::with_capacity(base.len() + extra.len());
    v.extend(base.iter().cloned());
    with(v, extra)
}

pub(crate) fn with(mut base: LabelPairs, extra: &[(&str, &str)]) -> LabelPairs {
    for (k, v) in extra {
        base.push((k.to_string(), v.to_string()));
    }
    base.sort();
    base
}

/// True when `l` and `group` agree on every label of `names` (present in
/// both with the same value, or absent from both). `names` is sorted
/// bytewise, like `l` and `group`, so this is one merge pass over each; it
/// runs for every input series of every evaluation.
pub(crate) fn matches(l: &Labels, group: &LabelPairs, names: &[&str]) -> bool {
    let (mut li, mut gi) = (l.as_slice(), group.as_slice());
    for n in names {
        while let Some((x, rest)) = li.split_first()
            && before(&x.name, n)
        {
            li = rest;
        }
        while let Some(((k, _), rest)) = gi.split_first()
            && before(k, n)
        {
            gi = rest;
        }
        let lv = li.first().filter(|x| same_str(&x.name, n)).map(|x| &*x.value);
        let gv = gi.first().filter(|(k, _)| same_str(k, n)).map(|(_, v)| v.as_str());
        let agree = match (lv, gv) {
            (Some(a), Some(b)) => same_str(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        if !agree {
            return false;
        }
    }
    true
}

/// Which series of an input a figure reads: those of one engine group
/// (see `vllm::groups`), those a predicate on the label set keeps, or both.
/// A group is matched by the index each series holds, not by comparing its
/// labels: the engines' figures select every input series once per group.
#[derive(Clone, Copy)]
pub(crate) struct Keep<'k> {
    group: Option<u32>,
    pred: Option<&'k dyn Fn(&Labels) -> bool>,
}

impl<'k> Keep<'k> {
    pub(crate) const ALL: Keep<'static> = Keep { group: None, pred: None };

    /// The series of engine group `g` (an index into `TargetState::groups`).
    pub(crate) fn group(g: u32) -> Self {
        Keep { group: Some(g), pred: None }
    }

    /// The series `pred` keeps.
    pub(crate) fn when(pred: &'k dyn Fn(&Labels) -> bool) -> Self {
        Keep { group: None, pred: Some(pred) }
    }

    /// The same group, and `pred` instead of this one's predicate (which
    /// `pred` calls through [`labels`](Self::labels) to add to it).
    pub(crate) fn with<'p>(self, pred: &'p dyn Fn(&Labels) -> bool) -> Keep<'p>
    where
        'k: 'p,
    {
        Keep { group: self.group, pred: Some(pred) }
    }

    /// Whether the predicate keeps `l` (the group aside).
    pub(crate) fn labels(&self, l: &Labels) -> bool {
        self.pred.is_none_or(|p| p(l))
    }

    pub(crate) fn keeps(&self, e: &Entry) -> bool {
        self.group.is_none_or(|g| e.group == g) && self.labels(&e.labels)
    }
}

/// The series of one input a view selected, with their samples in the
/// window (Prometheus' range: staleness markers are never stored), all in
/// one buffer.
pub(crate) struct Selection<'a> {
    items: Vec<(&'a Entry, std::ops::Range<usize>)>,
    samples: Vec<Sample>,
}

impl<'a> Selection<'a> {
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'a Labels, &[Sample])> + '_ {
        self.items.iter().map(|(e, r)| (&e.labels, &self.samples[r.clone()]))
    }
}

/// Each series a view selected, with its increase over the window.
pub(crate) type Increases<'a> = Vec<(&'a Entry, Result<Increase, Skip>)>;

/// Per-target view at one time.
pub(crate) struct View<'a> {
    pub(crate) st: &'a TargetState,
    pub(crate) t: i64,
    pub(crate) w: i64,
    /// What [`pick`](Self::pick) answered, by input and suffix: every
    /// engine group of a target asks again for the same inputs.
    picked: std::cell::RefCell<Vec<(*const Input, &'static str, Option<&'static str>)>>,
    /// The rows of the window, `[t - w, t]`, and where the rows kept for
    /// the inputs kept for the window and for the longer ones start (see
    /// `TargetState::cutoffs`): found once, read for every series.
    rows: std::cell::OnceCell<(Range<usize>, usize, usize)>,
}

impl<'a> View<'a> {
    pub(crate) fn new(st: &'a TargetState, t: i64, w: i64) -> Self {
        View { st, t, w, picked: Default::default(), rows: Default::default() }
    }

    /// The candidate name this target exposes with the newest sample in the
    /// window (after a version switch the old name stops and the new one
    /// takes over; equal names, the one listed first); a name without a
    /// sample in the window only when none has one.
    pub(crate) fn pick(&self, input: &Input, suffix: &'static str) -> Option<&'static str> {
        let key = (input as *const Input, suffix);
        if let Some(&(_, _, found)) = self.picked.borrow().iter().find(|(i, s, _)| (*i, *s) == key) {
            return found;
        }
        let found = self.pick_now(input, suffix);
        self.picked.borrow_mut().push((key.0, key.1, found));
        found
    }

    fn pick_now(&self, input: &Input, suffix: &str) -> Option<&'static str> {
        let mut first = None;
        let mut best: Option<(i64, &'static str)> = None;
        for n in input.names {
            let Some(w) = wire_with_suffix(n, suffix) else { continue };
            let Some(m) = self.st.series.get(&WireName(w)) else { continue };
            first = first.or(Some(w));
            for c in m.columns() {
                if let Some(newest) = self.newest_in_window(m, c)
                    && best.is_none_or(|(b, _)| newest > b)
                {
                    best = Some((newest, w));
                }
            }
        }
        best.map(|(_, w)| w).or(first)
    }

    /// Per label value of `by`, the rate of `input` over the window, for
    /// counters whose label children appear as events happen (a first
    /// `finished_reason="error"`, a first HTTP 5xx). A child seen only inside
    /// the window counts from 0 at its `_created` time when that falls in
    /// the window, else from its first sample (so a single sample adds 0 and
    /// does not void the ratio). Rates share one duration, the longest span
    /// of a child, so that their ratios are ratios of increases.
    pub(crate) fn child_rates(&self, input: &Input, by: &str, keep: Keep<'_>) -> Result<BTreeMap<String, f64>, Skip> {
        let mut groups = self.child_rates_by(input, by, None, keep)?;
        groups.remove("").unwrap_or(Err(Skip::MissingInput))
    }

    /// [`child_rates`](Self::child_rates) of each value of label `group`
    /// (each as if its series alone were kept), in one pass over the
    /// series; with no `group`, of all of them, under `""`.
    pub(crate) fn child_rates_by(
        &self,
        input: &Input,
        by: &str,
        group: Option<&str>,
        keep: Keep<'_>,
    ) -> Result<BTreeMap<String, ChildRates>, Skip> {
        let name = self.pick(input, "").ok_or(Skip::MissingInput)?;
        let created = crate::schema::CREATED_OF
            .iter()
            .any(|i| i.names.contains(&name))
            .then(|| wire(&super::ingest::created_name(name)).map(|w| w.name))
            .flatten();
        // Per group: the deltas by `by`, and the longest span of a child.
        let mut groups: BTreeMap<String, (BTreeMap<String, f64>, f64)> = BTreeMap::new();
        let rows = self.window_rows(&self.st.series[&WireName(name)]);
        for (e, increase) in self.increases(input, "", keep)? {
            let l = &e.labels;
            let g = group.map_or("", |g| l.get(g).unwrap_or(""));
            let (deltas, seconds) = match groups.get_mut(g) {
                Some(x) => x,
                None => groups.entry(g.to_string()).or_default(),
            };
            let mut delta = match increase {
                Ok(i) => {
                    *seconds = seconds.max(i.seconds);
                    i.delta
                }
                Err(_) => 0.0,
            };
            let first = self.st.rows.first_in(e.column, rows.clone());
            let born = created.and_then(|c| self.created_ms(c, l));
            if let (Some(b), Some(f)) = (born, first)
                && b >= self.t - self.w
                && b <= f.timestamp_ms
            {
                delta += f.value;
            }
            // The child's key is copied only the first time it is met.
            let child = l.get(by).unwrap_or("");
            match deltas.get_mut(child) {
                Some(d) => *d += delta,
                None => {
                    // 0.0 + delta, as the default plus delta was (-0.0 stays 0.0).
                    deltas.insert(child.to_string(), 0.0 + delta);
                }
            }
        }
        Ok(groups
            .into_iter()
            .map(|(g, (deltas, seconds))| {
                let rates = if seconds <= 0.0 {
                    Err(Skip::FirstWindow)
                } else {
                    Ok(deltas.into_iter().map(|(k, d)| (k, d / seconds)).collect())
                };
                (g, rates)
            })
            .collect())
    }

    /// The `_created` time (ms) of the child `l`, from its `_created` series
    /// (the same labels but the name).
    fn created_ms(&self, created: &'static str, l: &Labels) -> Option<i64> {
        let m = self.st.series.get(&WireName(created))?;
        // The same labels but the name, compared in place.
        fn but_name(x: &Labels) -> impl Iterator<Item = &infertel_model::Label> {
            x.as_slice().iter().filter(|y| &*y.name != infertel_model::METRIC_NAME)
        }
        let same = |c: &Labels| but_name(c).eq(but_name(l));
        let (_, c) = m.into_iter().find(|(c, _)| same(c))?;
        let last = self.last(m, c)?;
        Some((last.value * 1000.0).round() as i64)
    }

    pub(crate) fn select(&self, input: &Input, suffix: &'static str, keep: Keep<'_>) -> Result<Selection<'a>, Skip> {
        let name = self.pick(input, suffix).ok_or(Skip::MissingInput)?;
        let m = &self.st.series[&WireName(name)];
        let rows = self.window_rows(m);
        let mut out = Selection {
            items: Vec::with_capacity(m.entries.len()),
            samples: Vec::with_capacity(m.entries.len() * rows.len()),
        };
        let times = self.st.rows.times_of(rows.clone());
        for e in &m.entries {
            if !keep.keeps(e) {
                continue;
            }
            let from = out.samples.len();
            self.st.rows.extend_samples(e.column, rows.clone(), &times, &mut out.samples);
            if out.samples.len() > from {
                out.items.push((e, from..out.samples.len()));
            }
        }
        if out.items.is_empty() { Err(Skip::MissingInput) } else { Ok(out) }
    }

    fn rows(&self) -> &(Range<usize>, usize, usize) {
        self.rows.get_or_init(|| {
            let r = &self.st.rows;
            let (short, long) = self.st.cutoffs;
            (r.between(self.t - self.w, self.t), r.since(short).start, r.since(long).start)
        })
    }

    /// The rows of `m`'s inputs that readers see (see `TargetState::cutoffs`).
    fn kept(&self, m: &ByLabels) -> Range<usize> {
        let &(_, short, long) = self.rows();
        (if m.long { long } else { short })..self.st.rows.len()
    }

    /// The rows of the window, `[t - w, t]`, of those kept for `m`.
    fn window_rows(&self, m: &ByLabels) -> Range<usize> {
        let (kept, win) = (self.kept(m), &self.rows().0);
        win.start.max(kept.start)..win.end.max(kept.start)
    }

    /// The increase over the window of each series of `input` (+ `suffix`)
    /// that `keep` keeps and that has a sample in the window, in entry
    /// order; `MissingInput` when there is none.
    pub(crate) fn increases(&self, input: &Input, suffix: &'static str, keep: Keep<'_>) -> Result<Increases<'a>, Skip> {
        let out: Vec<_> = self.each_increase(input, suffix, keep)?.collect();
        if out.is_empty() { Err(Skip::MissingInput) } else { Ok(out) }
    }

    /// Whether a series of `input` has a sample in the window (what makes
    /// [`select`](Self::select) succeed), without reading the samples.
    pub(crate) fn live(&self, input: &Input) -> bool {
        self.pick(input, "").and_then(|n| self.st.series.get(&WireName(n))).is_some_and(|m| {
            let rows = self.window_rows(m);
            m.columns().any(|c| self.st.rows.newest_in(c, rows.clone()).is_some())
        })
    }

    /// Column `c`'s samples in the window, after the newest sample before
    /// it when one is kept (the value in force at the window's start).
    pub(crate) fn window_and_before(&self, m: &ByLabels, c: u32) -> (Option<Sample>, Vec<Sample>) {
        let (kept, win) = (self.kept(m), self.window_rows(m));
        let before = self.st.rows.newest_before(c, win.start, kept.start);
        let before = before.and_then(|r| self.st.rows.samples(c, r..r + 1).next());
        (before, self.st.rows.samples(c, win).collect())
    }

    /// Every sample of column `c` kept, whatever `t`.
    pub(crate) fn history(&self, m: &ByLabels, c: u32) -> Vec<Sample> {
        self.st.rows.samples(c, self.kept(m)).collect()
    }

    /// Column `c`'s newest sample kept, whatever `t`.
    fn last(&self, m: &ByLabels, c: u32) -> Option<Sample> {
        let r = self.st.rows.newest_in(c, self.kept(m))?;
        self.st.rows.samples(c, r..r + 1).next()
    }

    /// The time of column `c`'s newest sample in the window.
    pub(crate) fn newest_in_window(&self, m: &ByLabels, c: u32) -> Option<i64> {
        self.st.rows.newest_in(c, self.window_rows(m)).map(|r| self.st.rows.time(r))
    }

    /// Each series of `input` (+ `suffix`) that `keep` keeps, with its
    /// increase over the window where it has a sample there, in entry
    /// order: what [`increases`](Self::increases) collects, for the readers
    /// that fold it (an evaluation reads some 50 sums per engine).
    fn each_increase<'v>(
        &'v self,
        input: &Input,
        suffix: &'static str,
        keep: Keep<'v>,
    ) -> Result<impl Iterator<Item = (&'a Entry, Result<Increase, Skip>)> + 'v, Skip> {
        let name = self.pick(input, suffix).ok_or(Skip::MissingInput)?;
        let m = &self.st.series[&WireName(name)];
        let rows = self.window_rows(m);
        Ok((m.entries.iter().filter(move |e| keep.keeps(e)))
            .filter_map(move |e| Some((e, self.st.rows.increase(e.column, rows.clone())?))))
    }

    /// Sum of per-series rates: the first series' reason when one has no
    /// rate; `MissingInput` without a series.
    pub(crate) fn rate(&self, input: &Input, suffix: &'static str, keep: Keep<'_>) -> Result<f64, Skip> {
        let mut sum = None;
        for (_, i) in self.each_increase(input, suffix, keep)? {
            sum = Some(sum.unwrap_or(0.0) + i?.rate());
        }
        sum.ok_or(Skip::MissingInput)
    }

    /// The bucket rates of histogram `input` (upper bound, rate) over the series `keep` selects.
    pub(crate) fn buckets(&self, input: &Input, keep: Keep<'_>) -> Result<Vec<(f64, f64)>, Skip> {
        // Only these histograms' buckets are kept (see `BUCKETS_READ`).
        debug_assert!(
            crate::schema::BUCKETS_READ.iter().any(|x| x.key == input.key),
            "the buckets of {} are not kept",
            input.key
        );
        let mut buckets = Vec::new();
        let mut any = false;
        for (e, increase) in self.each_increase(input, "_bucket", keep)? {
            any = true;
            if let Some(le) = e.le {
                buckets.push((le, increase?.rate()));
            }
        }
        if any { Ok(buckets) } else { Err(Skip::MissingInput) }
    }

    /// Gauge: (last, mean, max, min) over the window, summed over series for `last`.
    pub(crate) fn gauge(&self, input: &Input, keep: Keep<'_>) -> Result<GaugeStats, Skip> {
        let sel = self.select(input, "", keep)?;
        let mut g = GaugeStats { last: 0.0, mean: 0.0, max: f64::NEG_INFINITY, min: f64::INFINITY };
        for s in sel.iter().filter_map(|(_, s)| GaugeStats::of(s)) {
            g.last += s.last;
            g.mean += s.mean;
            g.max = g.max.max(s.max);
            g.min = g.min.min(s.min);
        }
        Ok(g)
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct GaugeStats {
    pub(crate) last: f64,
    pub(crate) mean: f64,
    pub(crate) max: f64,
    pub(crate) min: f64,
}

impl GaugeStats {
    /// Last, mean, max and min of one series' samples (staleness markers
    /// skipped); `None` without a value.
    pub(crate) fn of(samples: &[Sample]) -> Option<GaugeStats> {
        let mut g = GaugeStats { last: 0.0, mean: 0.0, max: f64::NEG_INFINITY, min: f64::INFINITY };
        let mut n = 0usize;
        for x in samples.iter().map(|x| x.value).filter(|x| !infertel_model::is_stale_nan(*x)) {
            g.last = x;
            g.mean += x;
            g.max = g.max.max(x);
            g.min = g.min.min(x);
            n += 1;
        }
        (n > 0).then(|| GaugeStats { mean: g.mean / n as f64, ..g })
    }
}

pub(crate) trait MaxPri {
    fn max_pri(self, o: Self) -> Self;
}
impl MaxPri for Skip {
    /// Which reason to report when series disagree: stale beats first window
    /// beats missing.
    fn max_pri(self, o: Skip) -> Skip {
        let rank = |s: Skip| match s {
            Skip::MissingInput => 0,
            Skip::FirstWindow => 1,
            Skip::ZeroDenominator | Skip::NonFinite | Skip::Indeterminate | Skip::MismatchedBuckets => 2,
            Skip::StaleInput => 3,
        };
        if rank(o) > rank(self) { o } else { self }
    }
}

pub(crate) fn source_of(st: &TargetState) -> Option<Source> {
    st.detected.map(|s| s.source())
}

/// `name` + `suffix` as the interned wire name, when the engine keeps it.
pub(crate) fn wire_with_suffix(name: &str, suffix: &str) -> Option<&'static str> {
    if suffix.is_empty() {
        return wire(name).map(|w| w.name);
    }
    let mut buf = String::with_capacity(name.len() + suffix.len());
    buf.push_str(name);
    buf.push_str(suffix);
    wire(&buf).map(|w| w.name)
}

pub(crate) fn parse_le(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "+inf" => Some(f64::INFINITY),
        _ => s.parse().ok(),
    }
}

pub(crate) fn ratio(num: Result<f64, Skip>, den: Result<f64, Skip>) -> Result<f64, Skip> {
    let (n, d) = (num?, den?);
    if d == 0.0 {
        return Err(Skip::ZeroDenominator);
    }
    let r = n / d;
    if r.is_finite() { Ok(r) } else { Err(Skip::NonFinite) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `matches` (one merge pass) agrees with the plain definition: every
    /// label of `names` present in both with equal values, or in neither.
    #[test]
    fn matches_agrees_with_definition() {
        let plain = |l: &Labels, g: &LabelPairs, names: &[&str]| {
            names.iter().all(|n| l.get(n) == g.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str()))
        };
        let sets = [
            Labels::from_pairs([("__name__", "x"), ("engine", "0"), ("job", "v"), ("model_name", "m")]),
            Labels::from_pairs([("engine", "0"), ("instance", "a"), ("job", "v"), ("model_name", "m"), ("pod", "p")]),
            Labels::from_pairs([("engine", "1"), ("instance", "a"), ("job", "v"), ("model_name", "m")]),
            Labels::from_pairs([("GPU_I_ID", "1"), ("Hostname", "h"), ("UUID", "u"), ("gpu", "0"), ("job", "d")]),
            Labels::from_pairs([("Hostname", "h"), ("UUID", "u"), ("gpu", "0"), ("job", "d"), ("namespace", "n")]),
            Labels::from_pairs([("instance", "a")]),
            Labels::default(),
        ];
        let mut compared = 0;
        for names in [VLLM_GROUP, GPU_GROUP] {
            assert!(names.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()), "{names:?} sorted");
            for a in &sets {
                for b in &sets {
                    let mut wide: Vec<&str> = names.to_vec();
                    wide.extend(["namespace", "pod"]);
                    wide.sort();
                    wide.dedup();
                    for g in [restrict(b, names), restrict(b, &wide)] {
                        assert_eq!(matches(a, &g, names), plain(a, &g, names), "{a:?} vs {g:?} on {names:?}");
                        compared += 1;
                    }
                }
            }
        }
        assert_eq!(compared, 2 * 7 * 7 * 2);
    }

    /// `groups` (vllm.rs) reads `model` and `model_name` at these places.
    #[test]
    fn group_names_where_groups_reads_them() {
        assert_eq!((VLLM_GROUP[3], VLLM_GROUP[4]), ("model", "model_name"));
    }
}
