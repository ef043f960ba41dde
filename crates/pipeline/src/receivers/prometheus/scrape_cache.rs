//! The per-target scrape cache's table: one slot per series the target
//! sent, found either by the raw bytes of its line (Prometheus' scrape cache
//! shortcut) or by its identity (name and labels in name order).
//!
//! Slots live in one vector in the order series first appeared, so a scrape
//! of a target whose body keeps its order walks memory in order. The two
//! indexes hold 4-byte slot numbers and take their hashes from the slot:
//! a series costs its 64-byte slot plus about 10 bytes of index, where two
//! hash maps keyed by 128-bit hashes cost about 230.

use hashbrown::HashTable;
use infertel_model::Labels;
use rustc_hash::FxHashMap;

/// A 128-bit key kept as two words: 8-byte aligned, so a slot has no padding
/// for a `u128`'s 16-byte alignment.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct Key([u64; 2]);

impl Key {
    fn new(k: u128) -> Key {
        Key([k as u64, (k >> 64) as u64])
    }
    fn get(self) -> u128 {
        self.0[0] as u128 | (self.0[1] as u128) << 64
    }
    /// The table hash: the keys are XXH3 outputs, already well mixed.
    fn hash(self) -> u64 {
        self.0[0]
    }
}

/// One series of the target.
pub(super) struct Slot {
    /// Name and labels in name order, hashed: the series' identity.
    key: Key,
    /// The raw series key of the first spelling of the series seen (most
    /// series have one); other spellings are in `SlotTable::spellings`.
    raw: Key,
    /// Finished labels, or None when metric relabeling dropped the series.
    pub out: Option<Labels>,
    /// The scrape that last saw the series (its low 32 bits, as `raw_seen`).
    pub seen: u32,
    /// The timestamp of the sample forwarded this scrape: the same series
    /// again in the body is forwarded only with a later one (Prometheus
    /// keeps the first of equal timestamps and drops one going back).
    pub last_ts: i64,
    /// The scrape that last saw `raw` (its low 32 bits: a raw key not seen
    /// on a successful scrape goes, so the bits cannot come round).
    raw_seen: u32,
    /// How many bytes of its line `raw` covers: what a guess hashes.
    raw_len: u32,
    has_raw: bool,
    live: bool,
    /// Another scraped series already has these finished labels (metric
    /// relabeling made them equal): this one is skipped as a duplicate.
    pub shadowed: bool,
    /// Series with explicit timestamps get no staleness markers.
    pub track_staleness: bool,
}

/// No slot.
const NONE: u32 = u32::MAX;

/// What a new series starts with.
pub(super) struct NewSlot {
    pub out: Option<Labels>,
    pub seen: u32,
    pub shadowed: bool,
    pub track_staleness: bool,
}

/// The slots and their two indexes.
#[derive(Default)]
pub(super) struct SlotTable {
    slots: Vec<Slot>,
    /// Slots no series holds, reused first.
    free: Vec<u32>,
    by_key: HashTable<u32>,
    by_raw: HashTable<u32>,
    /// Raw keys of second and later spellings of a series (label order,
    /// blanks): (slot, scrape that last saw it).
    spellings: FxHashMap<u128, (u32, u64)>,
    /// For each slot, the slot of the line that followed its line on the
    /// last scrape that read it (`NONE` for none): what the parser guesses
    /// next. Beside the slots rather than in them, which are 64 bytes.
    next: Vec<u32>,
    /// The slot of the last scrape's first line.
    first: u32,
    /// Lines read by a right guess (for tests).
    #[cfg(test)]
    pub guessed: u64,
}

impl SlotTable {
    /// Live series.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Raw keys known (spellings that take the shortcut).
    #[cfg(test)]
    pub fn raw_keys(&self) -> usize {
        self.by_raw.len() + self.spellings.len()
    }

    /// The slot of a line whose raw key is known, marking the key seen by
    /// scrape `id`.
    pub fn find_raw(&mut self, raw: u128, id: u64) -> Option<u32> {
        let k = Key::new(raw);
        let slots = &mut self.slots;
        if let Some(&i) = self.by_raw.find(k.hash(), |&i| slots[i as usize].raw == k) {
            slots[i as usize].raw_seen = id as u32;
            return Some(i);
        }
        if self.spellings.is_empty() {
            return None;
        }
        self.spellings.get_mut(&raw).map(|(i, seen)| {
            *seen = id;
            *i
        })
    }

    /// Notes that, in the body being read, the series in slot `i` came
    /// after the one in slot `prev` (`None`: first).
    pub fn follows(&mut self, prev: Option<u32>, i: u32) {
        match prev.and_then(|p| self.next.get_mut(p as usize)) {
            Some(n) => *n = i,
            None => self.first = i,
        }
    }

    /// The guess for the line after the one whose series is in slot `prev`
    /// (`None`: the first line): the series that came next on the last
    /// scrape, in its first spelling, if it has one.
    pub fn guess(&self, prev: Option<u32>) -> Option<infertel_exposition::Guess> {
        let i = match prev {
            Some(p) => *self.next.get(p as usize)?,
            None => self.first,
        };
        let s = self.slots.get(i as usize).filter(|s| s.live && s.has_raw)?;
        Some(infertel_exposition::Guess { raw_len: s.raw_len as usize, raw_key: s.raw.get(), answer: u128::from(i) })
    }

    /// A right guess: marks slot `i`'s first spelling seen by scrape `id`.
    pub fn guessed(&mut self, i: u32, id: u64) {
        if let Some(s) = self.slots.get_mut(i as usize) {
            s.raw_seen = id as u32;
        }
        #[cfg(test)]
        {
            self.guessed += 1;
        }
    }

    /// The slot of the series with identity `key`.
    pub fn find(&self, key: u128) -> Option<u32> {
        let k = Key::new(key);
        self.by_key.find(k.hash(), |&i| self.slots[i as usize].key == k).copied()
    }

    /// A live slot (`None` for a number no live series holds).
    #[cfg(test)]
    pub fn get(&self, i: u32) -> Option<&Slot> {
        self.slots.get(i as usize).filter(|s| s.live)
    }

    pub fn get_mut(&mut self, i: u32) -> Option<&mut Slot> {
        self.slots.get_mut(i as usize).filter(|s| s.live)
    }

    /// The identity of a live slot.
    #[cfg(test)]
    pub fn key_of(&self, i: u32) -> u128 {
        self.slots[i as usize].key.get()
    }

    /// Adds a series not in the table.
    pub fn insert(&mut self, key: u128, new: NewSlot) -> u32 {
        let slot = Slot {
            key: Key::new(key),
            raw: Key::default(),
            out: new.out,
            seen: new.seen,
            last_ts: i64::MIN,
            raw_seen: 0,
            raw_len: 0,
            has_raw: false,
            live: true,
            shadowed: new.shadowed,
            track_staleness: new.track_staleness,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                self.next[i as usize] = NONE;
                i
            }
            None => {
                self.slots.push(slot);
                self.next.push(NONE);
                (self.slots.len() - 1) as u32
            }
        };
        let slots = &self.slots;
        self.by_key.insert_unique(Key::new(key).hash(), i, |&j| slots[j as usize].key.hash());
        i
    }

    /// Notes that lines with raw key `raw`, of `len` bytes, are the series
    /// in slot `i`.
    pub fn add_raw(&mut self, i: u32, raw: u128, len: u32, id: u64) {
        let k = Key::new(raw);
        let slot = &mut self.slots[i as usize];
        if slot.has_raw && slot.raw == k {
            slot.raw_seen = id as u32;
        } else if !slot.has_raw {
            slot.raw = k;
            slot.raw_len = len;
            slot.has_raw = true;
            slot.raw_seen = id as u32;
            let slots = &self.slots;
            self.by_raw.insert_unique(k.hash(), i, |&j| slots[j as usize].raw.hash());
        } else {
            self.spellings.insert(raw, (i, id));
        }
    }

    /// Keeps the slots `keep` says to keep, in slot order, and forgets the
    /// raw keys scrape `id` did not see.
    pub fn retain(&mut self, id: u64, mut keep: impl FnMut(u128, &Slot) -> bool) {
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if !s.live {
                continue;
            }
            let (key, raw, i32) = (s.key, s.raw, i as u32);
            if !keep(key.get(), s) {
                if let Ok(e) = self.by_key.find_entry(key.hash(), |&j| j == i32) {
                    e.remove();
                }
                if s.has_raw
                    && let Ok(e) = self.by_raw.find_entry(raw.hash(), |&j| j == i32)
                {
                    e.remove();
                }
                let s = &mut self.slots[i];
                s.live = false;
                s.has_raw = false;
                s.out = None;
                self.free.push(i32);
            } else if s.has_raw && s.raw_seen != id as u32 {
                if let Ok(e) = self.by_raw.find_entry(raw.hash(), |&j| j == i32) {
                    e.remove();
                }
                self.slots[i].has_raw = false;
            }
        }
        if !self.spellings.is_empty() {
            self.spellings.retain(|_, (_, seen)| *seen == id);
        }
    }

    /// The live slots with their identities, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u128, &Slot)> {
        self.slots.iter().filter(|s| s.live).map(|s| (s.key.get(), s))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u128, &mut Slot)> {
        self.slots.iter_mut().filter(|s| s.live).map(|s| (s.key.get(), s))
    }

    /// Forgets every raw key (the next scrape reads every line in full).
    pub fn forget_raw(&mut self) {
        self.by_raw.clear();
        self.spellings.clear();
        for s in &mut self.slots {
            s.has_raw = false;
        }
    }

    pub fn clear(&mut self) {
        *self = SlotTable::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_slot(seen: u32) -> NewSlot {
        NewSlot { out: None, seen, shadowed: false, track_staleness: true }
    }

    #[test]
    fn slots_are_found_by_key_and_raw_key_and_reused_when_freed() {
        let mut t = SlotTable::default();
        let a = t.insert(1, new_slot(1));
        let b = t.insert(2, new_slot(1));
        t.add_raw(a, 11, 2, 1);
        t.add_raw(b, 22, 2, 1);
        // A second spelling of a.
        t.add_raw(a, 111, 3, 1);
        assert_eq!((t.len(), t.raw_keys()), (2, 3));
        assert_eq!((t.find(1), t.find(2), t.find(3)), (Some(a), Some(b), None));
        assert_eq!((t.find_raw(11, 2), t.find_raw(111, 2), t.find_raw(22, 2)), (Some(a), Some(a), Some(b)));
        // Scrape 3 sees a's second spelling only, and not b.
        assert_eq!(t.find_raw(111, 3), Some(a));
        t.get_mut(a).unwrap().seen = 3;
        t.retain(3, |_, s| s.seen == 3);
        assert_eq!((t.len(), t.raw_keys()), (1, 1));
        assert_eq!((t.find(2), t.find_raw(22, 4), t.find_raw(11, 4)), (None, None, None));
        assert_eq!(t.find_raw(111, 4), Some(a));
        assert!(t.get(b).is_none());
        // b's slot is reused, and its old raw key does not find the new series.
        let c = t.insert(3, new_slot(4));
        assert_eq!(c, b);
        assert_eq!((t.find(3), t.find_raw(22, 4)), (Some(c), None));
        assert_eq!(t.iter().map(|(k, _)| k).collect::<Vec<_>>(), [1, 3]);
        t.forget_raw();
        assert_eq!((t.raw_keys(), t.find_raw(111, 5)), (0, None));
        assert_eq!(std::mem::size_of::<Slot>(), 64);
    }

    #[test]
    fn many_series_survive_growth_and_sweeps() {
        // Enough to make both tables grow several times, with keys that
        // share their low word (the table hash) in pairs.
        let mut t = SlotTable::default();
        let key = |n: u128| (n / 2) | (n % 2) << 64;
        let gone = |k: u128| (k as u64) % 3 == 0;
        for n in 0..5000u128 {
            let i = t.insert(key(n), new_slot(1));
            t.add_raw(i, key(n) + (1 << 100), 10, 1);
        }
        t.retain(1, |k, _| !gone(k));
        for n in 0..5000u128 {
            let (found, raw) = (t.find(key(n)), t.find_raw(key(n) + (1 << 100), 2));
            if gone(key(n)) {
                assert_eq!((found, raw), (None, None), "{n}");
            } else {
                assert_eq!(t.key_of(found.unwrap()), key(n));
                assert_eq!(raw, found, "{n}");
            }
        }
        assert_eq!(t.len(), (0..5000u128).filter(|&n| !gone(key(n))).count());
    }
}
