//! The samples a target keeps of one wire name, by label set: where ingest
//! stores input samples and evaluation reads them.

use infertel_model::{Labels, Sample};
use rustc_hash::FxHashMap;

/// Input samples of one wire name, by label set, oldest first.
///
/// Entries sit in a vector, so a series found once is found again by its
/// index: ingest remembers each series' index from the last scrape (see
/// [`Seen`]) and checks it by the identity of the interned label set, which
/// costs a pointer comparison instead of a hash lookup. A label set is also
/// indexed by its address: the receiver hands out the same interned label
/// set on every scrape, and the entry holds a clone, so the address cannot
/// be reused by another label set while it is a key. A label set equal in
/// content but newly allocated (the receiver re-interned it) takes over the
/// entry of the old one when first seen, so one series never has two.
#[derive(Default, Clone)]
pub(crate) struct ByLabels {
    pub(super) entries: Vec<(Labels, Vec<Sample>)>,
    by_addr: FxHashMap<usize, u32>,
}

impl ByLabels {
    /// The index of `l`'s entry, tried first at `hint` (its index on the
    /// last scrape), created if missing; and whether it was created.
    pub(super) fn slot(&mut self, l: &Labels, hint: u32) -> (usize, bool) {
        if let Some((k, _)) = self.entries.get(hint as usize)
            && Labels::ptr_eq(k, l)
        {
            return (hint as usize, false);
        }
        if let Some(&i) = self.by_addr.get(&l.addr()) {
            return (i as usize, false);
        }
        let (i, new) = match self.entries.iter().position(|(k, _)| k == l) {
            Some(i) => {
                self.by_addr.remove(&self.entries[i].0.addr());
                self.entries[i].0 = l.clone();
                (i, false)
            }
            None => {
                self.entries.push((l.clone(), Vec::new()));
                (self.entries.len() - 1, true)
            }
        };
        self.by_addr.insert(l.addr(), i as u32);
        (i, new)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Vec<Sample>> {
        self.entries.iter().map(|(_, v)| v)
    }

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&mut Vec<Sample>) -> bool) {
        let before = self.entries.len();
        self.entries.retain_mut(|(_, v)| keep(v));
        if self.entries.len() != before {
            self.by_addr.clear();
            for (i, (l, _)) in self.entries.iter().enumerate() {
                self.by_addr.insert(l.addr(), i as u32);
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<'a> IntoIterator for &'a ByLabels {
    type Item = (&'a Labels, &'a Vec<Sample>);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Labels, Vec<Sample>)>,
        fn(&'a (Labels, Vec<Sample>)) -> (&'a Labels, &'a Vec<Sample>),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(l, v)| (l, v))
    }
}

/// Drops the samples before `cutoff`, in chunks, not one per scrape:
/// shifting the window's samples down on every scrape would cost more than
/// the rest of ingest. Evaluation trims exactly first (see `evaluate`).
/// Drops when at least 16 are expired, or a quarter: the sample at that
/// count is before the cutoff (the samples are in order).
pub(super) fn expire(v: &mut Vec<Sample>, cutoff: i64) {
    let enough = 16.min(v.len().div_ceil(4)).max(1);
    if v.get(enough - 1).is_some_and(|x| x.timestamp_ms < cutoff) {
        let expired = v.partition_point(|x| x.timestamp_ms < cutoff);
        v.drain(..expired);
    }
}
