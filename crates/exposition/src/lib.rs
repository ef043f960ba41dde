//! Parser for the two text formats a metrics endpoint can answer with:
//! Prometheus text **0.0.4** and **OpenMetrics 1.0**.
//!
//! [`parse`] turns a whole response body into an [`Exposition`]: the metric
//! families that were declared (`# TYPE`, `# HELP`, `# UNIT`) and every sample,
//! each tagged with the family it belongs to. Parsing borrows from the body:
//! names, label names and label values are `Cow::Borrowed` unless an escape
//! sequence forced an unescaped copy, and the labels of all samples live in a
//! single flat vector, so a scrape costs a handful of allocations however many
//! samples it has.
//!
//! * Prometheus text 0.0.4 follows what a Prometheus **2.42** scrape accepts
//!   and rejects (checked against the real binary, see `oracle/`), with two
//!   deliberate differences: families are resolved by name rather than by "the
//!   last TYPE line", and the quoted UTF-8 name syntax (`{"my.metric"}`) is
//!   accepted.
//! * OpenMetrics 1.0 is validated strictly, cross-line rules included; an
//!   error names the rule it broke ([`ParseError::rule`]).
//!
//! Every byte sequence gives `Ok` or `Err`; the parser never panics on input.

use std::borrow::Cow;
use std::ops::Range;

pub use infertel_model::MetricType;

mod error;
mod float;
mod lexer;
mod openmetrics;
mod text;

pub use error::ParseError;
pub use float::format_value;

/// Which text format a body is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `text/plain; version=0.0.4` (also what a missing or unknown content type means).
    PrometheusText,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Format {
    /// Picks the format from a response's `Content-Type`: OpenMetrics for
    /// `application/openmetrics-text…`, the 0.0.4 text format for anything
    /// else, a missing header included (what Prometheus 2.x does).
    pub fn from_content_type(ct: Option<&str>) -> Format {
        match ct {
            Some(ct)
                if ct
                    .trim_start()
                    .get(..28)
                    .is_some_and(|p| p.eq_ignore_ascii_case("application/openmetrics-text"))
                    && ct.trim_start()[28..].trim_start().chars().next().is_none_or(|c| c == ';')
                    && valid_media_type(ct) =>
            {
                Format::OpenMetrics
            }
            // Anything else, and an OpenMetrics type Go cannot parse
            // (`...; version`), is read as 0.0.4, as Prometheus reads it.
            _ => Format::PrometheusText,
        }
    }
}

/// Parses a whole exposition body in the given format.
pub fn parse(body: &[u8], format: Format) -> Result<Exposition<'_>, ParseError> {
    match format {
        Format::PrometheusText => text::parse(body, None),
        Format::OpenMetrics => openmetrics::parse(body),
    }
}

/// Parses a scraped body as a Prometheus 2.42 scrape reads it: OpenMetrics
/// syntax, `# EOF`, UNIT suffixes and exemplar placement are checked, the
/// spec's other rules (counter suffixes, histogram consistency, grouping,
/// value ranges, exemplar length) are not; the 0.0.4 format as [`parse`].
pub fn parse_as_prometheus(body: &[u8], format: Format) -> Result<Exposition<'_>, ParseError> {
    match format {
        Format::PrometheusText => text::parse(body, None),
        Format::OpenMetrics => openmetrics::parse_as_prometheus(body),
    }
}

/// Like [`parse_as_prometheus`], with a scrape cache's shortcut (what
/// Prometheus' scrape cache does with the raw series text of a line): for
/// each sample line of the 0.0.4 format, `known` is asked about the line's
/// [`raw series key`](series_key) (the hash of the bytes before the value).
/// When it answers with the caller's key for that series, the line's name
/// and labels are neither parsed nor checked, only its value and timestamp:
/// the sample carries the answer in [`ParsedSample::known`], an empty name,
/// no labels and no family. The caller must only answer for keys of lines
/// this parser accepted before; the bytes are then the same, so the name,
/// the labels and their checks would be too. OpenMetrics bodies are parsed
/// in full.
pub fn parse_as_prometheus_known<'a>(
    body: &'a [u8],
    format: Format,
    known: &mut dyn KnownLines,
) -> Result<Exposition<'a>, ParseError> {
    parse_as_prometheus_known_in(body, format, known, &mut Buffers::default())
}

/// [`parse_as_prometheus_known`] into the buffers of an earlier result
/// (see [`Buffers`]).
pub fn parse_as_prometheus_known_in<'a>(
    body: &'a [u8],
    format: Format,
    known: &mut dyn KnownLines,
    buffers: &mut Buffers,
) -> Result<Exposition<'a>, ParseError> {
    match format {
        Format::PrometheusText => text::parse_into(body, Some(known), buffers.lend()),
        Format::OpenMetrics => openmetrics::parse_as_prometheus(body),
    }
}

/// The vectors of an [`Exposition`] the caller is done with, emptied, for
/// the next parse. A scrape loop parses body after body of about the same
/// size; the sample table alone is some 170 KB for a 1,000-line body, and
/// allocating it anew for every scrape made the heap grow and shrink by as
/// much (a `brk` and fresh zeroed pages each time) and had `malloc` sort its
/// free lists for a large block on every scrape.
#[derive(Default)]
pub struct Buffers {
    families: Vec<Family<'static>>,
    samples: Vec<ParsedSample<'static>>,
    labels: Vec<Label<'static>>,
}

impl Buffers {
    /// Tables longer than this are not kept (a sample entry is 144 bytes:
    /// 9 MB), so one huge body does not pin its memory for good.
    pub const KEEP_LINES: usize = 1 << 16;

    /// Keeps the vectors of `exp`, emptied (what they borrowed goes),
    /// unless one grew past [`Self::KEEP_LINES`].
    pub fn recycle(&mut self, exp: Exposition<'_>) {
        let huge = exp.samples.capacity().max(exp.labels.capacity()).max(exp.families.capacity()) > Self::KEEP_LINES;
        if huge {
            *self = Buffers::default();
            return;
        }
        self.families = emptied(exp.families);
        self.samples = emptied(exp.samples);
        self.labels = emptied(exp.labels);
    }

    fn lend<'a>(&mut self) -> Exposition<'a> {
        Exposition {
            families: emptied(std::mem::take(&mut self.families)),
            samples: emptied(std::mem::take(&mut self.samples)),
            labels: emptied(std::mem::take(&mut self.labels)),
        }
    }
}

/// `v`, emptied, as a vector of the same type with another lifetime, in
/// the same allocation: collecting a `vec::IntoIter` reuses its buffer when
/// the element layouts match, as they do here (only the lifetime differs).
/// `buffers_reused_across_bodies_give_what_a_fresh_parse_gives`
/// (`tests/real_fixtures.rs`) checks that the allocation comes through.
fn emptied<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().map(|_| -> U { unreachable!("the vector was emptied") }).collect()
}

/// What a scrape cache knows of a target's lines, for
/// [`parse_as_prometheus_known`].
///
/// A target sends its series in the same order scrape after scrape, so
/// before looking a line's key up the parser asks for a [`Guess`]: the line
/// that followed the last one found, last time. It hashes as many bytes as
/// the guessed line's series had and takes the guess only when the key is
/// the guessed one, a blank follows, and the rest of the line reads as a
/// value (and timestamp); otherwise it reads the line as without a guess.
/// A right guess spares the search for the end of the label set and the
/// lookup.
pub trait KnownLines {
    /// The caller's answer for a raw series key, or `None` for a key it
    /// has not seen.
    fn find(&mut self, raw_key: u128) -> Option<u128>;
    /// The line that probably starts here, if the caller has a guess.
    fn guess(&mut self) -> Option<Guess> {
        None
    }
    /// The guess was right: the line is the guessed series.
    fn confirm(&mut self, _guess: &Guess) {}
}

/// A guessed line: its series bytes' length and [raw key](series_key), and
/// the answer [`KnownLines::find`] would give for that key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guess {
    pub raw_len: usize,
    pub raw_key: u128,
    pub answer: u128,
}

/// A plain lookup, without guesses.
impl<F: FnMut(u128) -> Option<u128>> KnownLines for F {
    fn find(&mut self, raw_key: u128) -> Option<u128> {
        self(raw_key)
    }
}

/// The raw series key of a sample line: a 128-bit hash of its bytes from
/// the metric name to the end of the label set, seeded once per process (a
/// target cannot craft two lines with one key without knowing the seed).
/// Two spellings of one series (label order, blanks) have different keys.
pub fn series_key(raw: &[u8]) -> u128 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x696e_6665_7274_656c);
        h.finish()
    });
    xxhash_rust::xxh3::xxh3_128_with_seed(raw, seed)
}

/// Go's `mime.ParseMediaType` succeeds on `ct`: a `type/subtype` token and
/// `; key=value` parameters (a value a token or a quoted string), no key
/// twice. Prometheus reads a body whose content type fails it with the
/// 0.0.4 parser.
fn valid_media_type(ct: &str) -> bool {
    let token =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?=".contains(&b));
    let mut parts = ct.split(';');
    let media = parts.next().unwrap_or("").trim();
    let Some((t, sub)) = media.split_once('/') else { return false };
    if !token(t) || !token(sub) {
        return false;
    }
    let mut keys: Vec<String> = Vec::new();
    for p in parts {
        let p = p.trim();
        if p.is_empty() {
            continue; // a trailing `;`
        }
        let Some((k, v)) = p.split_once('=') else { return false };
        let (k, v) = (k.trim(), v.trim());
        let quoted = v.len() >= 2 && v.starts_with('"') && v.ends_with('"');
        if !token(k) || !(quoted || token(v)) {
            return false;
        }
        let k = k.to_ascii_lowercase();
        if keys.contains(&k) {
            return false;
        }
        keys.push(k);
    }
    true
}

/// A label as parsed: name and unescaped value.
pub type Label<'a> = (Cow<'a, str>, Cow<'a, str>);

/// The result of parsing one body.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exposition<'a> {
    /// Declared families, in order of first declaration.
    pub families: Vec<Family<'a>>,
    /// Every sample, in input order.
    pub samples: Vec<ParsedSample<'a>>,
    /// Labels of all samples, back to back; each sample holds a range into it
    /// so that a scrape does not allocate one vector per sample.
    labels: Vec<Label<'a>>,
}

impl<'a> Exposition<'a> {
    /// The labels of `s` in input order, unescaped, without `__name__`.
    /// `s` must come from this exposition (another one gives an empty or
    /// unrelated slice, never a panic).
    pub fn labels(&self, s: &ParsedSample<'a>) -> &[Label<'a>] {
        self.labels.get(s.labels.start as usize..s.labels.end as usize).unwrap_or(&[])
    }

    /// The family `s` belongs to, if any.
    pub fn family(&self, s: &ParsedSample<'a>) -> Option<&Family<'a>> {
        s.family.and_then(|i| self.families.get(i as usize))
    }
}

/// One declared metric family.
#[derive(Clone, Debug, PartialEq)]
pub struct Family<'a> {
    pub name: Cow<'a, str>,
    pub kind: MetricType,
    pub help: Option<Cow<'a, str>>,
    pub unit: Option<Cow<'a, str>>,
}

impl<'a> Family<'a> {
    fn new(name: Cow<'a, str>) -> Self {
        Family { name, kind: MetricType::Unknown, help: None, unit: None }
    }
}

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedSample<'a> {
    /// Metric name as written (e.g. `vllm:request_success_total`, `x_bucket`).
    pub name: Cow<'a, str>,
    /// The value; any NaN is the canonical scraped NaN (`NORMAL_NAN_BITS`).
    pub value: f64,
    /// Explicit timestamp in milliseconds (OpenMetrics seconds are converted).
    pub timestamp_ms: Option<i64>,
    /// Index into [`Exposition::families`] when the sample belongs to a declared family.
    pub family: Option<u32>,
    /// Type of that family; `Unknown` when untyped.
    pub kind: MetricType,
    /// 1-based line number of the sample.
    pub line: u32,
    /// The line's [`series_key`] (0.0.4 lines that start with a metric
    /// name; `None` for OpenMetrics and for `{"quoted.name"}` lines).
    pub raw_key: Option<u128>,
    /// How many bytes of the line `raw_key` covers (0 without a key).
    pub raw_len: u32,
    /// What the caller's `known` answered for `raw_key` (see
    /// [`parse_as_prometheus_known`]); when `Some`, the name and labels
    /// were not parsed: `name` is empty, [`Exposition::labels`] is empty
    /// and `family` is `None` for this sample.
    pub known: Option<u128>,
    labels: Range<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_type_selects_format() {
        assert_eq!(Format::from_content_type(None), Format::PrometheusText);
        assert_eq!(Format::from_content_type(Some("text/plain; version=0.0.4; charset=utf-8")), Format::PrometheusText);
        assert_eq!(
            Format::from_content_type(Some("application/openmetrics-text; version=1.0.0; charset=utf-8")),
            Format::OpenMetrics
        );
        assert_eq!(Format::from_content_type(Some("Application/OpenMetrics-Text")), Format::OpenMetrics);
        // Parameters are not read, but must parse as Go's mime package parses them.
        for ok in [
            "application/openmetrics-text; version=abc",
            "application/openmetrics-text;",
            "application/openmetrics-text; version=\"1.0.0\"; charset=utf-8",
        ] {
            assert_eq!(Format::from_content_type(Some(ok)), Format::OpenMetrics, "{ok}");
        }
        for bad in [
            "application/openmetrics-text; version",
            "application/openmetrics-text; version=",
            "application/openmetrics-text version=1",
            "application/openmetrics-text; a=1; a=2",
            "application/openmetrics-textx",
        ] {
            assert_eq!(Format::from_content_type(Some(bad)), Format::PrometheusText, "{bad}");
        }
        assert_eq!(Format::from_content_type(Some("application/openmetrics")), Format::PrometheusText);
        assert_eq!(Format::from_content_type(Some("")), Format::PrometheusText);
    }

    #[test]
    fn labels_of_foreign_sample_do_not_panic() {
        let a = parse(b"a{x=\"1\",y=\"2\"} 1\n", Format::PrometheusText).unwrap();
        let b = parse(b"b 1\n", Format::PrometheusText).unwrap();
        assert!(b.labels(&a.samples[0]).is_empty());
    }
}
