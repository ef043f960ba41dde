//! The input series a target has of one wire name, by label set, each with
//! its column in the target's [`Rows`](super::rows::Rows) and its engine
//! group.

use infertel_model::Labels;
use rustc_hash::FxHashMap;

/// One input series.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) labels: Labels,
    /// Its column in the target's rows.
    pub(crate) column: u32,
    /// Its engine group: an index into `TargetState::groups`, worked out
    /// once when the series is first met (see `vllm::groups`).
    pub(crate) group: u32,
    /// Its `le` label, read as a bucket bound once (evaluation reads every
    /// bucket's on every evaluation).
    pub(crate) le: Option<f64>,
}

/// Input series of one wire name, by label set, with their columns.
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
    pub(super) entries: Vec<Entry>,
    by_addr: FxHashMap<usize, u32>,
    /// Kept for the longer retention (see `Wire::long`).
    pub(crate) long: bool,
}

impl ByLabels {
    pub(super) fn new(long: bool) -> Self {
        ByLabels { long, ..ByLabels::default() }
    }

    /// The index of `l`'s entry, tried first at `hint` (its index on the
    /// last scrape), created with the column and group `new` gives if
    /// missing; and whether it was created.
    pub(super) fn slot(&mut self, l: &Labels, hint: u32, new: impl FnOnce() -> (u32, u32)) -> (usize, bool) {
        if let Some(e) = self.entries.get(hint as usize)
            && Labels::ptr_eq(&e.labels, l)
        {
            return (hint as usize, false);
        }
        if let Some(&i) = self.by_addr.get(&l.addr()) {
            return (i as usize, false);
        }
        let (i, created) = match self.entries.iter().position(|e| &e.labels == l) {
            Some(i) => {
                self.by_addr.remove(&self.entries[i].labels.addr());
                self.entries[i].labels = l.clone();
                (i, false)
            }
            None => {
                let (column, group) = new();
                let le = l.get("le").and_then(super::view::parse_le);
                self.entries.push(Entry { labels: l.clone(), column, group, le });
                (self.entries.len() - 1, true)
            }
        };
        self.by_addr.insert(l.addr(), i as u32);
        (i, created)
    }

    /// The columns of the entries.
    pub(crate) fn columns(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.iter().map(|e| e.column)
    }

    /// Keeps the entries `keep` says to; true when any went.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| keep(e.column));
        if self.entries.len() == before {
            return false;
        }
        self.by_addr.clear();
        for (i, e) in self.entries.iter().enumerate() {
            self.by_addr.insert(e.labels.addr(), i as u32);
        }
        true
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<'a> IntoIterator for &'a ByLabels {
    type Item = (&'a Labels, u32);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, Entry>, fn(&'a Entry) -> (&'a Labels, u32)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|e| (&e.labels, e.column))
    }
}
