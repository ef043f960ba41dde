//! The data model that flows through an infertel pipeline.
//!
//! A scrape becomes a [`Batch`]: a list of [`Series`], each a sorted [`Labels`]
//! set (the metric name is the `__name__` label, as in Prometheus) with one or
//! more [`Sample`]s, plus the [`Metadata`] of the families those series belong
//! to. Labels are reference counted so that a receiver can intern a target's
//! label sets once and hand out cheap clones on every scrape; only values and
//! timestamps change between scrapes. Each [`Label`] is itself shared by
//! every set that carries it (see `label.rs`).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use triomphe::ThinArc;

mod label;
mod str;
pub use label::{Label, Pair, WIRE_CHUNK};
pub use str::Str;

/// Label name that carries the metric name.
pub const METRIC_NAME: &str = "__name__";

/// Bit pattern of the Prometheus staleness marker. Only staleness may carry it.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;
/// Bit pattern Prometheus gives every NaN it scrapes, so scraped data can
/// never be mistaken for a staleness marker.
pub const NORMAL_NAN_BITS: u64 = 0x7ff8_0000_0000_0001;

/// The staleness marker as an `f64`.
pub fn stale_nan() -> f64 {
    f64::from_bits(STALE_NAN_BITS)
}

/// True when `v` is bit for bit the staleness marker.
pub fn is_stale_nan(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// Replaces any NaN with the canonical scraped NaN (keeps other values).
pub fn canonical_nan(v: f64) -> f64 {
    if v.is_nan() { f64::from_bits(NORMAL_NAN_BITS) } else { v }
}

/// A label set sorted bytewise by name, without duplicate names and without
/// empty values (an empty value means "absent", as in Prometheus).
///
/// One allocation, behind a one-word pointer: the set's
/// [`stable_hash`](Labels::stable_hash), computed once when the set is
/// built (every sample sent is sharded by it), then the labels, one word
/// each. Equality, hashing and order are the labels' own.
#[derive(Clone)]
pub struct Labels(ThinArc<u64, Label>);

impl PartialEq for Labels {
    fn eq(&self, other: &Labels) -> bool {
        Labels::ptr_eq(self, other) || self.as_slice() == other.as_slice()
    }
}

impl Eq for Labels {}

impl Hash for Labels {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl PartialOrd for Labels {
    fn partial_cmp(&self, other: &Labels) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Labels {
    fn cmp(&self, other: &Labels) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Default for Labels {
    fn default() -> Labels {
        Labels::from_vec(Vec::new())
    }
}

impl Labels {
    /// Builds a label set: sorts by name, drops empty values. When a name
    /// repeats, the last one wins (callers that must reject duplicates check
    /// before building).
    pub fn from_vec(mut v: Vec<Label>) -> Self {
        v.retain(|l| !l.value.is_empty());
        // Stable sort keeps input order among equal names; keep the last.
        v.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        let mut out: Vec<Label> = Vec::with_capacity(v.len());
        for l in v {
            match out.last_mut() {
                Some(prev) if prev.name == l.name => *prev = l,
                _ => out.push(l),
            }
        }
        Labels(ThinArc::from_header_and_iter(values_hash(&out), out.into_iter()))
    }

    /// Builds from pairs of strings.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self::from_vec(pairs.into_iter().map(|(n, v)| Label::new(n, v)).collect())
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Label> {
        self.0.slice.iter()
    }

    pub fn as_slice(&self) -> &[Label] {
        &self.0.slice
    }

    pub fn len(&self) -> usize {
        self.0.slice.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.slice.is_empty()
    }

    /// Value of the label `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        let s = &self.0.slice;
        s.binary_search_by(|l| l.name.as_bytes().cmp(name.as_bytes())).ok().map(|i| &*s[i].value)
    }

    /// The metric name (`__name__`), or "" when absent.
    pub fn metric_name(&self) -> &str {
        self.get(METRIC_NAME).unwrap_or("")
    }

    /// True when both are the same allocation (the same interned label set),
    /// which implies equal content; a pointer comparison.
    pub fn ptr_eq(a: &Labels, b: &Labels) -> bool {
        a.0.ptr() == b.0.ptr()
    }

    /// Address of the shared allocation: an identity of this label set for
    /// as long as a clone of it is held.
    pub fn addr(&self) -> usize {
        self.0.ptr() as usize
    }

    /// A stable 64-bit hash of the label set, used to shard series across
    /// sending consumers (also for the on-disk queue's layout, so it must not
    /// change between runs or versions: it is written out here, not taken
    /// from a crate) and to spread scrapes. Every sample sent is sharded by
    /// it, so it is computed once, when the set is built, and kept in the
    /// header (hashing per sample was 6% of the agent's CPU under `perf`).
    /// Not a defence against crafted inputs: a collision only puts two
    /// series on the same consumer.
    pub fn stable_hash(&self) -> u64 {
        self.0.header.header
    }

    /// Asks the CPU to start loading this set's header and labels, for a
    /// loop that reads it a few series later: an exporter reads sets a
    /// receiver touched long before, so each first read is a cache miss (15%
    /// of the agent's CPU under `perf`, in one instruction). Two lines: the
    /// 24-byte header leaves room for five labels in the first, and the sets
    /// of real dcgm-exporter series hold 7 to 16 (`shared/fixtures/real`).
    /// A hint past the end of the allocation loads a line nobody reads, and
    /// cannot fault.
    #[inline]
    pub fn prefetch(&self) {
        let p: *const u8 = self.0.ptr().cast();
        prefetch_line(p);
        prefetch_line(p.wrapping_add(64));
    }

    /// Like [`Labels::prefetch`], for the labels the set points to (their
    /// encodings and lengths). Reads the set, so call it after `prefetch`
    /// had time to bring it.
    #[inline]
    pub fn prefetch_labels(&self) {
        for l in self.iter() {
            l.prefetch();
        }
    }

    /// Returns a copy with `name` set to `value` (removed when empty).
    pub fn with(&self, name: &str, value: &str) -> Labels {
        let mut v: Vec<Label> = self.iter().filter(|l| &*l.name != name).cloned().collect();
        if !value.is_empty() {
            v.push(Label::new(name, value));
        }
        Labels::from_vec(v)
    }
}

/// A hint to load the cache line at `p`; nothing on other architectures.
#[inline]
pub(crate) fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and cannot fault,
    // whatever the address; SSE, which it needs, is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// See [`Labels::stable_hash`].
fn values_hash(labels: &[Label]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    #[inline]
    fn mix(h: u64, w: u64) -> u64 {
        (h.rotate_left(23) ^ w).wrapping_mul(K)
    }
    #[inline]
    fn feed(mut h: u64, s: &[u8], sep: u64) -> u64 {
        let mut chunks = s.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            h = mix(h, u64::from_le_bytes(w));
        }
        // The tail, its length and which string this was, in one word,
        // so "ab" + "c" and "a" + "bc" differ.
        let mut w = 0u64;
        for (i, b) in chunks.remainder().iter().enumerate() {
            w |= u64::from(*b) << (8 * i);
        }
        mix(h, w ^ ((chunks.remainder().len() as u64) << 56) ^ (sep << 60))
    }
    // Values only, in name order, with the count of labels: equal label
    // sets hash equal, which is all sharding needs, and the names (a small
    // set, the same on every series of a family) would double the work
    // for little spread. `{a="x"}` and `{b="x"}` collide; that is fine.
    let mut h = K ^ labels.len() as u64;
    for l in labels.iter() {
        h = feed(h, l.value.as_bytes(), 1);
    }
    // Final avalanche (MurmurHash3's fmix64): consumers take it modulo a
    // small count, so the low bits must depend on every input bit.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl fmt::Display for Labels {
    /// Prometheus style: `name{a="1",b="2"}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{{", self.metric_name())?;
        let mut first = true;
        for l in self.iter().filter(|l| &*l.name != METRIC_NAME) {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{}={:?}", l.name, &*l.value)?;
        }
        f.write_str("}")
    }
}

/// One value at one time. Timestamps are milliseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub timestamp_ms: i64,
    pub value: f64,
}

/// A series' samples, oldest first. A scrape gives each series one sample,
/// which is kept inline: no allocation per scraped sample (one per sample
/// was a fifth of the agent's CPU in malloc and free); more spill to the heap.
pub type Samples = smallvec::SmallVec<[Sample; 1]>;

pub use smallvec::smallvec as samples;

/// A label set and its samples, oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub labels: Labels,
    pub samples: Samples,
}

/// Metric family type, as declared by `# TYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
    #[default]
    Unknown,
}

impl MetricType {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::GaugeHistogram => "gaugehistogram",
            MetricType::Summary => "summary",
            MetricType::Info => "info",
            MetricType::StateSet => "stateset",
            MetricType::Unknown => "unknown",
        }
    }
}

/// What `# HELP`, `# TYPE` and `# UNIT` said about one family.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Metadata {
    pub family: Arc<str>,
    pub kind: MetricType,
    pub help: Arc<str>,
    pub unit: Arc<str>,
}

/// What moves between pipeline components: series plus family metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub series: Vec<Series>,
    pub metadata: Vec<Metadata>,
}

impl Batch {
    pub fn sample_count(&self) -> usize {
        self.series.iter().map(|s| s.samples.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty() && self.metadata.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_its_labels() {
        use std::hash::BuildHasher;
        let a = Labels::from_pairs([("b", "2"), ("a", "1")]);
        let b = Labels::from_pairs([("a", "1"), ("b", "2"), ("c", "")]);
        assert!(!Labels::ptr_eq(&a, &b));
        let h = std::collections::hash_map::RandomState::new();
        assert_eq!(a, b);
        assert_eq!(h.hash_one(&a), h.hash_one(&b));
        assert_eq!(a.cmp(&b), std::cmp::Ordering::Equal);
        assert_eq!(a.stable_hash(), b.stable_hash());
        assert!(Labels::from_pairs([("a", "0")]) < a);
        assert_eq!(std::mem::size_of::<Labels>(), 8);
        assert_eq!(std::mem::size_of::<Option<Labels>>(), 8);
        assert_eq!(Labels::default().len(), 0);
    }

    const PINNED: u64 = 0xbc59_45d5_64c3_09ec;

    #[test]
    fn labels_sort_bytewise_and_drop_empty() {
        let l = Labels::from_pairs([("device", "nvidia0"), ("__name__", "x"), ("UUID", "GPU-1"), ("pod", "")]);
        let names: Vec<&str> = l.iter().map(|l| &*l.name).collect();
        assert_eq!(names, ["UUID", "__name__", "device"]);
        assert_eq!(l.get("pod"), None);
        assert_eq!(l.metric_name(), "x");
        assert_eq!(l.to_string(), r#"x{UUID="GPU-1",device="nvidia0"}"#);
    }

    /// The shard of a series on disk depends on this value: it is pinned.
    /// It tells apart label sets whose values differ only in where a string
    /// ends, and spreads sequential values evenly over a few consumers.
    #[test]
    fn stable_hash_is_pinned_and_spreads() {
        let l = Labels::from_pairs([("__name__", "up"), ("instance", "a:1"), ("job", "j")]);
        assert_eq!(l.stable_hash(), PINNED);
        let a = Labels::from_pairs([("a", "ab"), ("b", "c")]).stable_hash();
        assert_ne!(a, Labels::from_pairs([("a", "a"), ("b", "bc")]).stable_hash());
        assert_ne!(
            Labels::from_pairs([("x", "12345678")]).stable_hash(),
            Labels::from_pairs([("x", "1234567"), ("y", "8")]).stable_hash()
        );
        let mut counts = [0usize; 10];
        for i in 0..10_000 {
            let v = format!("{i}");
            counts[(Labels::from_pairs([("__name__", "m"), ("le", v.as_str())]).stable_hash() % 10) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (900..1100).contains(c)), "{counts:?}");
    }

    #[test]
    fn stale_marker_is_distinct_from_scraped_nan() {
        assert!(is_stale_nan(stale_nan()));
        assert!(!is_stale_nan(canonical_nan(f64::NAN)));
        assert_eq!(canonical_nan(f64::NAN).to_bits(), NORMAL_NAN_BITS);
    }

    #[test]
    fn stable_hash_differs_by_value() {
        let a = Labels::from_pairs([("a", "1")]);
        let b = Labels::from_pairs([("a", "2")]);
        assert_ne!(a.stable_hash(), b.stable_hash());
        assert_eq!(a.stable_hash(), Labels::from_pairs([("a", "1")]).stable_hash());
    }
}
