//! The slot in a label set's header for bytes derived from the set (the
//! remote-write encoder's label fields), in one word.
//!
//! Every live series has a label set, and most sets never keep anything: at
//! 1,000 targets the budget ([`DERIVED_BUDGET`](crate::DERIVED_BUDGET))
//! covers about a quarter of the series. A `OnceLock` of a tag and a boxed
//! slice took 32 bytes of every header; this slot takes 8, and the tag and
//! the length sit in front of the bytes, in their one allocation.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// In front of the bytes: the tag, then the length.
const HEAD: usize = 16;

/// Set at most once, read without a lock.
pub(crate) struct DerivedSlot(AtomicPtr<u8>);

fn layout(len: usize) -> Layout {
    // Only fails for a length near isize::MAX, which no slice can have.
    Layout::from_size_align(HEAD + len, 8).unwrap_or_else(|_| handle_alloc_error(Layout::new::<u64>()))
}

impl DerivedSlot {
    pub(crate) const fn new() -> Self {
        DerivedSlot(AtomicPtr::new(ptr::null_mut()))
    }

    /// The tag and the bytes kept, if any.
    #[inline]
    pub(crate) fn get(&self) -> Option<(u64, &[u8])> {
        let p = self.0.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null pointer was published by `set` after the tag,
        // the length and the bytes were written (Release, read here with
        // Acquire), and the allocation lives until the slot is dropped,
        // which `&self` rules out.
        unsafe {
            let tag = p.cast::<u64>().read();
            let len = p.add(8).cast::<u64>().read() as usize;
            Some((tag, std::slice::from_raw_parts(p.add(HEAD), len)))
        }
    }

    /// The address of what is kept (for a prefetch), without reading it.
    #[inline]
    pub(crate) fn address(&self) -> *const u8 {
        self.0.load(Ordering::Relaxed)
    }

    /// Keeps `bytes` under `tag`, counted against the process' budget;
    /// false when something is kept already or the budget is spent.
    pub(crate) fn set(&self, tag: u64, bytes: &[u8]) -> bool {
        if !self.0.load(Ordering::Acquire).is_null() || !crate::spend_derived(bytes.len()) {
            return false;
        }
        let layout = layout(bytes.len());
        // SAFETY: the layout is at least HEAD bytes, 8-aligned; the writes
        // stay inside it.
        let p = unsafe {
            let p = alloc(layout);
            if p.is_null() {
                handle_alloc_error(layout);
            }
            p.cast::<u64>().write(tag);
            p.add(8).cast::<u64>().write(bytes.len() as u64);
            ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(HEAD), bytes.len());
            p
        };
        match self.0.compare_exchange(ptr::null_mut(), p, Ordering::Release, Ordering::Acquire) {
            Ok(_) => true,
            Err(_) => {
                // A race lost: another thread's bytes are kept.
                // SAFETY: `p` was allocated above with this layout and never
                // published.
                unsafe { dealloc(p, layout) };
                crate::forget_derived(bytes.len());
                false
            }
        }
    }
}

impl Drop for DerivedSlot {
    fn drop(&mut self) {
        let p = *self.0.get_mut();
        if p.is_null() {
            return;
        }
        // SAFETY: published by `set` with the layout of its length, and
        // freed only here, once.
        unsafe {
            let len = p.add(8).cast::<u64>().read() as usize;
            crate::forget_derived(len);
            dealloc(p, layout(len));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DerivedSlot;

    #[test]
    fn holds_one_tagged_copy_in_one_word() {
        assert_eq!(std::mem::size_of::<DerivedSlot>(), 8);
        let s = DerivedSlot::new();
        assert!(s.get().is_none() && s.address().is_null());
        assert!(s.set(7, b"label fields"));
        assert!(!s.set(8, b"other"), "set once");
        assert_eq!(s.get(), Some((7, &b"label fields"[..])));
        let e = DerivedSlot::new();
        assert!(e.set(1, b""));
        assert_eq!(e.get(), Some((1, &b""[..])));
    }

    #[test]
    fn one_of_racing_setters_wins_and_readers_see_whole_bytes() {
        let s = DerivedSlot::new();
        let wins: usize = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8u64)
                .map(|t| {
                    let s = &s;
                    sc.spawn(move || {
                        let bytes = vec![t as u8; 1000 + t as usize];
                        let won = s.set(t, &bytes);
                        if let Some((tag, b)) = s.get() {
                            assert_eq!(b.len(), 1000 + tag as usize);
                            assert!(b.iter().all(|&x| x == tag as u8));
                        }
                        won as usize
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(wins, 1);
    }
}
