//! A per-series memo for processors whose result depends only on a series'
//! labels (the attributes a processor writes, a filter's verdict). The
//! receiver hands out the same interned label set on every scrape, so the
//! result is found by the set's address and computed once per series, not
//! once per sample.
//!
//! Entries hold a clone of the label set they were computed for: the
//! allocation stays alive, so its address cannot be reused by another set
//! while the entry exists, and a lookup checks that it is the same
//! allocation. Two generations bound the memory: every `ROTATE` lookups the
//! current map becomes the previous one and what was not looked up since
//! is forgotten.

use infertel_model::Labels;
use rustc_hash::FxHashMap;
use std::sync::Mutex;

const ROTATE: u64 = 1 << 21;

struct Generations<V> {
    current: FxHashMap<usize, (Labels, V)>,
    previous: FxHashMap<usize, (Labels, V)>,
    lookups: u64,
}

pub struct SeriesCache<V> {
    inner: Mutex<Generations<V>>,
}

impl<V: Clone> Default for SeriesCache<V> {
    fn default() -> Self {
        SeriesCache {
            inner: Mutex::new(Generations {
                current: FxHashMap::default(),
                previous: FxHashMap::default(),
                lookups: 0,
            }),
        }
    }
}

/// The cache, held for one batch (one lock per batch, not per series).
pub struct Memo<'a, V>(std::sync::MutexGuard<'a, Generations<V>>);

impl<V: Clone> SeriesCache<V> {
    pub fn lock(&self) -> Memo<'_, V> {
        Memo(self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Forgets everything (what a result depends on changed).
    pub fn clear(&self) {
        let mut g = self.lock();
        g.0.current.clear();
        g.0.previous.clear();
    }

    pub fn len(&self) -> usize {
        let g = self.lock();
        g.0.current.len() + g.0.previous.len()
    }
}

impl<V: Clone> Memo<'_, V> {
    /// The remembered result for `labels`, or `compute`'s, remembered.
    pub fn get_or(&mut self, labels: &Labels, compute: impl FnOnce() -> V) -> V {
        let g = &mut *self.0;
        g.lookups += 1;
        if g.lookups % ROTATE == 0 {
            g.previous = std::mem::take(&mut g.current);
        }
        let addr = labels.addr();
        if let Some((l, v)) = g.current.get(&addr)
            && Labels::ptr_eq(l, labels)
        {
            return v.clone();
        }
        if let Some((l, v)) = g.previous.remove(&addr)
            && Labels::ptr_eq(&l, labels)
        {
            g.current.insert(addr, (l, v.clone()));
            return v;
        }
        let v = compute();
        g.current.insert(addr, (labels.clone(), v.clone()));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computes_once_per_label_set_and_tells_equal_sets_apart() {
        let c: SeriesCache<u32> = SeriesCache::default();
        let a = Labels::from_pairs([("__name__", "a")]);
        let a_copy = Labels::from_pairs([("__name__", "a")]);
        let mut calls = 0;
        for _ in 0..3 {
            c.lock().get_or(&a, || {
                calls += 1;
                1
            });
        }
        assert_eq!(calls, 1);
        // Equal content in another allocation is another entry, not a hit
        // on a stale address.
        assert_eq!(c.lock().get_or(&a_copy, || 2), 2);
        assert_eq!(c.len(), 2);
        c.clear();
        assert_eq!(c.lock().get_or(&a, || 3), 3);
    }
}
