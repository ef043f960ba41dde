//! The shortcut for the usual batch: a target's scrape that repeats its
//! last one series for series is stored by position, known by one hash of
//! its label sets' addresses (see [`Repeat`]).

use super::super::targets::Slot;
use super::{Seen, TargetState, WireName, same_series, target_and_name};
use crate::engine::{Engine, KeyRef};
use infertel_model::{Labels, Series, is_stale_nan};

/// A shortcut for the usual batch: one target's scrape that repeats its
/// last scrape series for series (the same interned label sets, in the same
/// order), one live sample each. The last scrape was such a clean one too,
/// so everything ingest derives from the label sets (families, schema,
/// node, which series are inputs) is what it was; what is left is to check
/// that the batch is that repeat and to store the input samples, found by
/// position in the batch and by index in their `ByLabels`.
#[derive(Clone)]
pub(super) struct Repeat {
    /// The position of each input series in the batch, and its column in
    /// the target's rows (a series met twice in a scrape keeps its first
    /// sample, as the full ingest does).
    inputs: Vec<(u32, u32)>,
    /// The addresses of the label sets `order` holds, in order, hashed
    /// (see [`fingerprint`]); `None` when one is missing.
    fingerprint: Option<u128>,
}

/// A hash of label-set addresses, taken in order from `addrs` (8 bytes a
/// series). A batch whose addresses hash as the ones a target's `order`
/// holds is that order series for series: the sets held cannot be freed,
/// so no other set has one of their addresses, and two different
/// sequences collide with odds of about 2^-128. The hash is the one the
/// receiver keys raw lines with (XXH3-128, seeded per process); taking it
/// from there, not from a dependency of this crate's own, keeps the
/// symbol names `crates/infertel/symbol-order.txt` lists (they change
/// with a crate's dependencies).
fn fingerprint(addrs: &[u8]) -> u128 {
    infertel_exposition::series_key(addrs)
}

impl Repeat {
    /// The inputs of `order` (a clean scrape just ingested into `st`).
    pub(super) fn of(st: &TargetState, order: &[Seen]) -> Repeat {
        let mut taken = rustc_hash::FxHashSet::default();
        let mut inputs = Vec::new();
        for (k, x) in order.iter().enumerate() {
            let Some(w) = x.info.wire.filter(|w| w.kept) else { continue };
            let Some(column) =
                st.series.get(&WireName(w.name)).and_then(|m| m.entries.get(x.slot as usize)).map(|e| e.column)
            else {
                continue;
            };
            if taken.insert(column) {
                inputs.push((k as u32, column));
            }
        }
        let mut addrs = Vec::with_capacity(order.len() * 8);
        let held = order.iter().all(|x| match &x.labels {
            Some(l) => {
                addrs.extend_from_slice(&l.addr().to_ne_bytes());
                true
            }
            None => false,
        });
        Repeat { inputs, fingerprint: held.then(|| fingerprint(&addrs)) }
    }
}

impl Engine {
    /// The shortcut (see [`Repeat`]): `None` unless the batch is a clean
    /// repeat of its target's last scrape, which was clean too. Leaves the
    /// state as the full ingest would.
    pub(super) fn ingest_repeat(
        &mut self,
        series: &[Series],
        retention: i64,
        short_retention: i64,
    ) -> Option<super::Touched> {
        #[cfg(test)]
        if super::tests::FULL_ONLY.with(|f| f.get()) {
            return None;
        }
        let first = series.first()?;
        // The target, by the address of its first label set when that is
        // the one its last clean scrape began with: reading the job and
        // instance out of the set loads lines the receiver did not touch
        // (it passes known sets on by reference), a cache miss or two per
        // scrape. The hint is checked below like any other guess: the
        // batch is taken as a repeat only if it equals the target's order
        // series for series, so a stale hint costs one full ingest.
        let addr = first.labels.addr();
        // `hint`: the address to note once the batch proves a repeat.
        let (slot, hint) = match self.firsts.get(&addr) {
            Some(&slot) => (slot, None),
            None => {
                let (Some(job), Some(instance), _) = target_and_name(&first.labels) else { return None };
                // Found by borrowed strings: building the key would cost two
                // allocations per scrape.
                (self.targets.slot(&(job, instance) as &dyn KeyRef)?, Some(addr))
            }
        };
        let targets = self.targets.len();
        // The slot's own key: a hint may name a slot another target took
        // since, and then the checks below fail on its order.
        let (key, st) = self.targets.at_mut(slot)?;
        let repeat = st.repeat.as_mut()?;
        if st.order.len() != series.len() {
            return None;
        }
        // One time for the whole scrape, as a scrape loop stamps it.
        let newest = first.samples.first()?.timestamp_ms;
        // The series are known by the addresses of their label sets, hashed
        // in one pass over the batch: comparing them one by one with the
        // last scrape's read that order (some 50 KB a target, out of cache
        // at 100 targets) on every scrape.
        let addrs = &mut self.addrs;
        addrs.resize(series.len() * 8, 0);
        for (s, to) in series.iter().zip(addrs.chunks_exact_mut(8)) {
            let [x] = s.samples.as_slice() else { return None };
            if x.timestamp_ms != newest || is_stale_nan(x.value) {
                return None;
            }
            to.copy_from_slice(&s.labels.addr().to_ne_bytes());
        }
        let fp = fingerprint(addrs);
        if repeat.fingerprint != Some(fp) {
            // Other addresses: the same series only if equal one by one
            // (a source may build a set anew for every scrape). The order
            // then holds the batch's sets, so the next such batch is known
            // by its fingerprint.
            if !series
                .iter()
                .zip(&st.order)
                .all(|(s, seen)| seen.labels.as_ref().is_some_and(|l| same_series(l, &s.labels)))
            {
                return None;
            }
            for (s, seen) in series.iter().zip(&mut st.order) {
                if !seen.labels.as_ref().is_some_and(|l| Labels::ptr_eq(l, &s.labels)) {
                    seen.labels = Some(s.labels.clone());
                }
            }
            repeat.fingerprint = Some(fp);
        }
        // A repeat: the same live series as the last clean scrape, so the
        // families, schema, node and `up` are what they were.
        if !st.rows.push_row(newest) {
            return None;
        }
        #[cfg(test)]
        super::tests::REPEATS.with(|r| r.set(r.get() + 1));
        st.rows.set_last(repeat.inputs.iter().map(|&(at, column)| (column, series[at as usize].samples[0].value)));
        st.newest_ms = st.newest_ms.max(newest);
        st.keep_from(st.newest_ms.saturating_sub(short_retention), st.newest_ms.saturating_sub(retention));
        st.gone = false;
        let key = key.clone();
        if let Some(addr) = hint {
            self.hint(addr, slot, targets);
        }
        Some(vec![(key, newest)])
    }

    /// Notes that a batch beginning with the label set at `addr` is the
    /// target's in `slot` (see `firsts`), over a wrong hint if there was one.
    pub(super) fn hint(&mut self, addr: usize, slot: Slot, targets: usize) {
        // Stale hints (sets a source built anew, targets gone) are dropped
        // wholesale when they outnumber the targets.
        if self.firsts.len() > 2 * targets + 16 {
            self.firsts.clear();
        }
        self.firsts.insert(addr, slot);
    }
}
