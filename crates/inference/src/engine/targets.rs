//! The targets' states: each in a numbered slot, found by key through an
//! ordered index (what readers iterate, in key order) or by its slot number
//! directly (what the per-scrape path uses).
//!
//! Why slots: a scrape of a known target used to find its state by walking
//! a `BTreeMap` keyed by job and instance strings. At 100 targets that walk
//! compares some ten keys whose strings each live in their own allocation,
//! out of cache by the time the target's next scrape comes: a profile of the
//! agent put 1.4% of its CPU in the `memcmp` of that walk. A slot number,
//! remembered from the target's last clean scrape (`Engine::firsts`), finds
//! the state with no key compared.

use super::TargetKey;
use super::ingest::TargetState;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A slot's number.
pub(crate) type Slot = u32;

#[derive(Clone, Default)]
pub(crate) struct Targets {
    /// Key → slot, in key order.
    index: BTreeMap<TargetKey, Slot>,
    /// The states; `None` for a slot that is free (listed in `free`).
    slots: Vec<Option<(TargetKey, TargetState)>>,
    free: Vec<Slot>,
    /// The slot of the last target [`Targets::at_mut`] handed out: the
    /// processor asks whether the target of the batch just ingested is due,
    /// by key, right after the ingest.
    recent: Slot,
}

impl Targets {
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn slot<Q>(&self, key: &Q) -> Option<Slot>
    where
        TargetKey: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.index.get(key).copied()
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&TargetState>
    where
        TargetKey: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.at(self.slot(key)?).map(|(_, st)| st)
    }

    pub(crate) fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut TargetState>
    where
        TargetKey: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let slot = self.slot(key)?;
        self.at_mut(slot).map(|(_, st)| st)
    }

    /// [`Targets::get`], first trying the slot handed out last, which holds
    /// `key` when the caller asks about the batch it just ingested (the
    /// key's strings are then compared by address, not read).
    pub(crate) fn get_recent(&self, key: &TargetKey) -> Option<&TargetState> {
        match self.at(self.recent) {
            Some((k, st)) if Arc::ptr_eq(&k.job, &key.job) && Arc::ptr_eq(&k.instance, &key.instance) => Some(st),
            _ => self.get(key),
        }
    }

    pub(crate) fn at(&self, slot: Slot) -> Option<&(TargetKey, TargetState)> {
        self.slots.get(slot as usize)?.as_ref()
    }

    pub(crate) fn at_mut(&mut self, slot: Slot) -> Option<(&TargetKey, &mut TargetState)> {
        let (k, st) = self.slots.get_mut(slot as usize)?.as_mut()?;
        self.recent = slot;
        Some((k, st))
    }

    /// Sets `key`'s state, in its slot if it has one, else in a free one;
    /// returns the slot.
    pub(crate) fn insert(&mut self, key: TargetKey, st: TargetState) -> Slot {
        if let Some((k, &slot)) = self.index.get_key_value(&key) {
            // The key the index holds stays the slot's key too (one set of
            // strings per target, compared by address in `get_recent`).
            self.slots[slot as usize] = Some((k.clone(), st));
            return slot;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as Slot
            }
        };
        self.slots[slot as usize] = Some((key.clone(), st));
        self.index.insert(key, slot);
        slot
    }

    /// Takes `key`'s state out, freeing its slot.
    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<TargetState>
    where
        TargetKey: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let slot = self.index.remove(key)?;
        self.free.push(slot);
        self.slots[slot as usize].take().map(|(_, st)| st)
    }

    /// The targets in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&TargetKey, &TargetState)> {
        self.index.iter().filter_map(|(k, &slot)| self.at(slot).map(|(_, st)| (k, st)))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &TargetKey> {
        self.index.keys()
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &TargetState> {
        self.iter().map(|(_, st)| st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(newest_ms: i64) -> TargetState {
        let mut st = TargetState::default();
        st.newest_ms = newest_ms;
        st
    }

    #[test]
    fn slots_are_reused_and_the_index_stays_in_key_order() {
        let mut t = Targets::default();
        let (a, b, c) = (TargetKey::new("j", "b:1"), TargetKey::new("j", "a:1"), TargetKey::new("j", "c:1"));
        let sa = t.insert(a.clone(), st(1));
        let sb = t.insert(b.clone(), st(2));
        assert_ne!(sa, sb);
        // The same key keeps its slot.
        assert_eq!(t.insert(a.clone(), st(3)), sa);
        assert_eq!(t.get(&a).map(|s| s.newest_ms), Some(3));
        // A freed slot goes to the next new key; the old key is not found.
        assert_eq!(t.remove(&a).map(|s| s.newest_ms), Some(3));
        assert!(t.get(&a).is_none());
        assert_eq!(t.insert(c.clone(), st(4)), sa);
        assert_eq!(t.at(sa).map(|(k, s)| (k.clone(), s.newest_ms)), Some((c.clone(), 4)));
        let order: Vec<_> = t.iter().map(|(k, s)| (k.instance.to_string(), s.newest_ms)).collect();
        assert_eq!(order, [("a:1".to_string(), 2), ("c:1".to_string(), 4)]);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn the_recent_slot_answers_only_for_its_own_key() {
        let mut t = Targets::default();
        let (a, b) = (TargetKey::new("j", "a:1"), TargetKey::new("j", "b:1"));
        let sa = t.insert(a.clone(), st(1));
        t.insert(b.clone(), st(2));
        assert!(t.at_mut(sa).is_some());
        assert_eq!(t.get_recent(&a).map(|s| s.newest_ms), Some(1));
        // Another key (equal strings or not) goes through the index.
        assert_eq!(t.get_recent(&b).map(|s| s.newest_ms), Some(2));
        assert_eq!(t.get_recent(&TargetKey::new("j", "a:1")).map(|s| s.newest_ms), Some(1));
        assert!(t.get_recent(&TargetKey::new("j", "z:1")).is_none());
        // A freed recent slot, taken by another key, answers for that key only.
        t.remove(&a);
        let c = TargetKey::new("j", "c:1");
        assert_eq!(t.insert(c.clone(), st(3)), sa);
        assert!(t.at_mut(sa).is_some());
        assert!(t.get_recent(&a).is_none());
        assert_eq!(t.get_recent(&c).map(|s| s.newest_ms), Some(3));
    }
}
