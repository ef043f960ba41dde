//! [`Label`]: one name and value, shared by every series that carries them.
//!
//! A label set holds one pointer per label. The pointer leads to the name,
//! the value and the label's remote-write encoding, in one allocation that a
//! receiver's interner hands to every series with that pair: `job="vllm"`,
//! `model_name="..."` and a target's `instance` are each stored once, not
//! once per series. Before, a set held two string pointers per label (16
//! bytes) and the remote-write encoder kept each live series' encoded label
//! fields next to its set (about 118 bytes a series at 100 targets). Now a
//! label is 8 bytes in its set, and a request copies each label's encoding
//! from the pair, which is read by every series that has it and so is in
//! cache.

use crate::Str;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use triomphe::ThinArc;

/// One label: a name and a value. Read them as fields (`l.name`,
/// `l.value`, through [`Pair`]); build one with [`Label::new`]. Equality,
/// hashing and order are the pair's: by name, then value, as strings.
#[derive(Clone)]
pub struct Label(ThinArc<Pair, u8>);

/// What a [`Label`] holds.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pair {
    pub name: Str,
    pub value: Str,
    /// Bytes of the encoding (a function of name and value, so it changes
    /// nothing in comparisons); the slice after the pair holds them, then
    /// zeros up to a multiple of [`WIRE_CHUNK`].
    wire_len: usize,
}

/// The encoding a label keeps is padded with zeros to a multiple of this, so
/// that it can be copied in whole chunks of this size ([`Label::wire_chunks`]):
/// a request copies a handful of short encodings per series, and a call to
/// `memcpy` for each cost a fifth of the request's time in its benchmark.
pub const WIRE_CHUNK: usize = 16;

/// Field numbers of the remote-write protobuf (`prometheus.TimeSeries` and
/// `prometheus.Label`) a label's encoding is made of, as key bytes.
const TIMESERIES_LABELS: u8 = 1 << 3 | 2;
const LABEL_NAME: u8 = 1 << 3 | 2;
const LABEL_VALUE: u8 = 2 << 3 | 2;

impl Label {
    pub fn new(name: impl Into<Str>, value: impl Into<Str>) -> Label {
        let (name, value) = (name.into(), value.into());
        let mut wire = smallvec::SmallVec::<[u8; 96]>::new();
        put_wire(&mut wire, name.as_bytes(), value.as_bytes());
        let wire_len = wire.len();
        wire.resize(wire_len.next_multiple_of(WIRE_CHUNK), 0);
        Label(ThinArc::from_header_and_slice(Pair { name, value, wire_len }, &wire))
    }

    /// The label as one `labels` field of a remote-write `TimeSeries`: key,
    /// length and a `Label` message, as prost (and Prometheus) encode it,
    /// with an empty name or value left out as proto3 leaves it out. A
    /// series' label fields are these, in the set's order.
    #[inline]
    pub fn wire(&self) -> &[u8] {
        &self.0.slice[..self.wire_len]
    }

    /// [`Label::wire`] followed by zeros, as whole chunks of
    /// [`WIRE_CHUNK`] bytes (fewer than `WIRE_CHUNK` zeros: an encoding of
    /// 16 bytes is one chunk).
    #[inline]
    pub fn wire_chunks(&self) -> &[[u8; WIRE_CHUNK]] {
        let (chunks, rest) = self.0.slice.as_chunks::<WIRE_CHUNK>();
        debug_assert!(rest.is_empty());
        chunks
    }

    /// Both are the same allocation (the same interned label).
    pub fn ptr_eq(a: &Label, b: &Label) -> bool {
        std::ptr::eq(a.0.ptr(), b.0.ptr())
    }

    /// How many `Label`s hold this allocation (an interner forgets a label
    /// only it holds).
    pub fn strong_count(this: &Label) -> usize {
        ThinArc::strong_count(&this.0)
    }

    /// A hint to load the label's name, value and encoding, for a loop that
    /// reads it a few series later.
    #[inline]
    pub fn prefetch(&self) {
        crate::prefetch_line(self.0.ptr().cast());
    }
}

/// Appends the encoding [`Label::wire`] returns.
fn put_wire(buf: &mut smallvec::SmallVec<[u8; 96]>, n: &[u8], v: &[u8]) {
    let field = |len: usize| if len == 0 { 0 } else { 1 + varint_len(len) + len };
    put_varint(buf, u64::from(TIMESERIES_LABELS));
    put_varint(buf, (field(n.len()) + field(v.len())) as u64);
    for (key, s) in [(LABEL_NAME, n), (LABEL_VALUE, v)] {
        if !s.is_empty() {
            buf.push(key);
            put_varint(buf, s.len() as u64);
            buf.extend_from_slice(s);
        }
    }
}

fn varint_len(v: usize) -> usize {
    (64 - (v as u64 | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(buf: &mut smallvec::SmallVec<[u8; 96]>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

impl Deref for Label {
    type Target = Pair;
    #[inline]
    fn deref(&self) -> &Pair {
        &self.0.header.header
    }
}

impl PartialEq for Label {
    fn eq(&self, other: &Label) -> bool {
        Label::ptr_eq(self, other) || **self == **other
    }
}

impl Eq for Label {}

impl Hash for Label {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

impl PartialOrd for Label {
    fn partial_cmp(&self, other: &Label) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Label {
    fn cmp(&self, other: &Label) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl fmt::Debug for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?}", self.name, self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_one_word_and_its_pair() {
        assert_eq!(std::mem::size_of::<Label>(), 8);
        let a = Label::new("job", "vllm");
        let b = Label::new(Str::new("job"), Str::new("vllm"));
        assert!(!Label::ptr_eq(&a, &b));
        assert_eq!(a, b);
        assert_eq!((&*a.name, &*a.value), ("job", "vllm"));
        assert!(Label::new("job", "a") < a && a < Label::new("jobs", ""));
        assert_eq!(format!("{a:?}"), r#"job="vllm""#);
        let h = std::collections::hash_map::RandomState::new();
        use std::hash::BuildHasher;
        assert_eq!(h.hash_one(&a), h.hash_one(&b));
        assert_eq!(Label::strong_count(&a), 1);
        let c = a.clone();
        assert!(Label::ptr_eq(&a, &c));
        assert_eq!(Label::strong_count(&a), 2);
    }

    /// The encoding is checked against prost's by the remote-write crate's
    /// tests; here, the bytes worked out by hand from the protobuf spec.
    #[test]
    fn the_wire_form_is_a_timeseries_labels_field() {
        assert_eq!(Label::new("a", "bc").wire(), [0x0a, 7, 0x0a, 1, b'a', 0x12, 2, b'b', b'c']);
        assert_eq!(Label::new("a", "").wire(), [0x0a, 3, 0x0a, 1, b'a']);
        assert_eq!(Label::new("", "").wire(), [0x0a, 0]);
        let long = "v".repeat(200);
        let w = Label::new("n", long.as_str());
        // Label body: 3 (name) + 1 + 2 + 200 (value) = 206 = 0xce 0x01.
        assert_eq!(&w.wire()[..8], [0x0a, 0xce, 0x01, 0x0a, 1, b'n', 0x12, 0xc8]);
        assert_eq!(w.wire()[8], 0x01);
        assert_eq!(w.wire().len(), 3 + 206);
        for l in [Label::new("a", "bc"), Label::new("", ""), w, Label::new("n", "v".repeat(11).as_str())] {
            let padded = l.wire_chunks().as_flattened();
            assert_eq!(&padded[..l.wire().len()], l.wire());
            assert!(padded[l.wire().len()..].iter().all(|&b| b == 0));
            assert_eq!(padded.len(), l.wire().len().next_multiple_of(WIRE_CHUNK), "{l:?}");
        }
    }
}
