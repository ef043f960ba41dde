//! How one scrape's body becomes series, with Prometheus 2.42's semantics:
//! parse, attach target labels (`honor_labels`, `exported_` on clash),
//! `metric_relabel_configs`, limits, and the per-target series cache that
//! finds the series that vanished (staleness markers) and reuses finished
//! label sets, so a steady-state scrape allocates no label strings.

use super::job::JobSettings;
use super::scrape_cache::{NewSlot, SlotTable};
use super::target::Target;
use crate::status::trace::ScrapeFate;
use infertel_exposition::{Buffers, Format, Guess, KnownLines};
use infertel_model::{Label, Labels, METRIC_NAME, Metadata, Sample, Series, stale_nan};
use rustc_hash::FxHashMap;
use std::time::Instant;

/// Why a scrape failed: the `reason` label of
/// `infertel_receiver_scrape_errors_total`, and the message logged.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeFailure {
    pub reason: &'static str,
    pub message: String,
    /// What the failed scrape read before it failed, reported as Prometheus
    /// reports it (`scrape_samples_scraped` and the others are not 0 when
    /// the body was read); `None` when no body was read.
    pub stats: Option<ScrapeStats>,
}

pub(super) fn fail(reason: &'static str, message: impl Into<String>) -> ScrapeFailure {
    ScrapeFailure { reason, message: message.into(), stats: None }
}

/// What one scrape produced (before report series).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ScrapeStats {
    pub scraped: u64,
    pub post_relabel: u64,
    pub series_added: u64,
    /// Samples not forwarded because the same series came twice (in the body,
    /// or after metric relabeling); Prometheus keeps the first too.
    pub duplicates: u64,
    /// Samples not forwarded because their explicit timestamp is not after
    /// the last one forwarded for the series (Prometheus drops them as out
    /// of order; a remote-write receiver would refuse the whole request).
    pub out_of_order: u64,
}

/// The per-target state that outlives a scrape: interned label sets and the
/// series seen on the last successful scrape.
#[derive(Default)]
pub struct SeriesCache {
    /// The target's series: by identity (the 128-bit XXH3 hash of the
    /// name and labels in name order, with separators no UTF-8 text
    /// contains; two series would have to collide on 128 bits, about 1e-27
    /// at a million series), and by the raw series key of each spelling
    /// seen on the last successful scrape ([`series_key`]), as Prometheus'
    /// scrape cache keys its own: a line seen before has only its value
    /// parsed. Two spellings of one series (label order, blanks) share it.
    ///
    /// [`series_key`]: infertel_exposition::series_key
    table: SlotTable,
    /// With metric relabeling, which series owns each finished label set, so
    /// a collision is found once, when a series first appears, instead of
    /// hashing every sample's labels on every scrape.
    owners: FxHashMap<Labels, u128>,
    /// Reused buffer for building the key.
    scratch: Vec<u8>,
    scrape_id: u64,
    pub(super) last_metadata: Option<Instant>,
    pub(super) warned_duplicates: bool,
    /// The target's report includes Prometheus' extra scrape metrics, so
    /// its end marks them stale too.
    pub(super) extra_report: bool,
    /// When the scrape in progress times out: parsing counts against the
    /// scrape timeout, so a hostile body fails it instead of holding a
    /// worker past it.
    pub(super) deadline: Option<Instant>,
}

impl SeriesCache {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A staleness marker at `ts` for each series the last scrape forwarded
    /// (not those with the target's own timestamps, nor shadowed ones).
    fn markers_for_last_scrape(&self, ts: i64) -> Vec<Series> {
        let prev = self.scrape_id;
        self.table
            .iter()
            .map(|(_, e)| e)
            .filter(|e| e.seen == prev as u32 && e.track_staleness && !e.shadowed)
            .filter_map(|e| e.out.clone())
            .map(|labels| Series {
                labels,
                samples: infertel_model::samples![Sample { timestamp_ms: ts, value: stale_nan() }],
            })
            .collect()
    }

    /// A failed scrape, as Prometheus ends one: stale markers at `ts` for
    /// the series of the last scrape the failed one did not reach; the
    /// cache keeps every series (so the next scrape does not count them as
    /// added again) and the series it reached become "the last scrape".
    pub fn failed(&mut self, ts: i64) -> Vec<Series> {
        let out = self.markers_for_last_scrape(ts);
        self.scrape_id += 1;
        out
    }

    /// Stale markers at `ts` for every series of the last scrape; empties
    /// the cache (a target that goes away).
    pub fn stale_all(&mut self, ts: i64) -> Vec<Series> {
        let out = self.markers_for_last_scrape(ts);
        self.table.clear();
        self.owners.clear();
        out
    }
}

/// A series' identity: the hash of its name and labels in name order, so
/// two spellings of one series (label order, blanks) are one series, as
/// Prometheus tracks a series by its label set. `scratch` is reused.
fn identity_key(scratch: &mut Vec<u8>, name: &str, raw: &[infertel_exposition::Label<'_>]) -> u128 {
    scratch.clear();
    scratch.extend_from_slice(name.as_bytes());
    let mut sorted: Vec<_> = raw.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for (n, v) in sorted {
        scratch.push(0xff);
        scratch.extend_from_slice(n.as_bytes());
        scratch.push(0xfe);
        scratch.extend_from_slice(v.as_bytes());
    }
    xxhash_rust::xxh3::xxh3_128(scratch)
}

/// Adds target labels to a sample's labels, as Prometheus 2.42's
/// `mutateSampleLabels`: with `honor_labels` the scraped value wins;
/// otherwise the target's wins and the scraped one moves to
/// `exported_<name>` (more `exported_` prefixes until the name is free).
pub fn attach_target_labels(mut scraped: Vec<Label>, target: &Labels, honor: bool) -> Vec<Label> {
    let has = |v: &[Label], n: &str| v.iter().any(|l| &*l.name == n && !l.value.is_empty());
    if honor {
        // Presence, not value, as Prometheus' `lset.Has`: a scraped
        // `instance=""` (Pushgateway writes them) keeps the target's out,
        // and is then dropped with the other empty labels.
        for t in target.iter() {
            if !scraped.iter().any(|l| l.name == t.name) {
                scraped.push(t.clone());
            }
        }
        scraped.retain(|l| !l.value.is_empty());
        return scraped;
    }
    let exposed: Vec<Label> = scraped.clone();
    let mut conflicting: Vec<Label> = Vec::new();
    for t in target.iter() {
        if let Some(l) = exposed.iter().find(|l| l.name == t.name && !l.value.is_empty()) {
            conflicting.push(l.clone());
        }
        scraped.retain(|l| l.name != t.name);
        scraped.push(t.clone());
    }
    conflicting.sort_by_key(|l| l.name.len());
    for i in 0..conflicting.len() {
        let mut name = conflicting[i].name.to_string();
        loop {
            name = format!("exported_{name}");
            let taken = has(&exposed, &name)
                || target.get(&name).is_some()
                || conflicting[..i].iter().any(|c| *c.name == *name);
            if !taken {
                break;
            }
        }
        conflicting[i] = Label::new(name, conflicting[i].value.clone());
    }
    for c in conflicting {
        scraped.retain(|l| l.name != c.name);
        scraped.push(c);
    }
    scraped
}

/// The series every scrape reports about itself, as Prometheus names them
/// (`extra_scrape_metrics` adds three more).
pub const REPORT_SERIES: [&str; 5] = [
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
];

/// The label set of report series `name` of a target (a scrape loop builds
/// it once).
pub fn report_labels(name: &str, target: &Labels, external: &[Label]) -> Labels {
    let mut v: Vec<Label> = target.iter().cloned().collect();
    v.push(Label::new(METRIC_NAME, name));
    add_external(&mut v, external);
    Labels::from_vec(v)
}

fn add_external(v: &mut Vec<Label>, external: &[Label]) {
    for e in external {
        if !v.iter().any(|l| l.name == e.name && !l.value.is_empty()) {
            v.push(e.clone());
        }
    }
}

/// The parser's tables (see `infertel_exposition::Buffers`), kept between
/// the scrapes a thread runs: one set per worker, not per target, as only
/// the scrape being parsed holds them. Lent for one `build_series` and
/// given back on drop, so every return keeps them.
struct ParseBuffers(Buffers);

thread_local! {
    static PARSE_BUFFERS: std::cell::RefCell<Buffers> = std::cell::RefCell::default();
}

impl ParseBuffers {
    fn lend() -> ParseBuffers {
        ParseBuffers(PARSE_BUFFERS.with(|b| b.take()))
    }
}

impl Drop for ParseBuffers {
    fn drop(&mut self) {
        let kept = std::mem::take(&mut self.0);
        // Not kept if the thread is already tearing its locals down.
        let _ = PARSE_BUFFERS.try_with(|b| b.replace(kept));
    }
}

/// Turns a parsed body into series, updating the cache. On error the cache
/// is left as before the scrape (the caller then marks everything stale).
// The scrape's inputs and its two output buffers (reused across scrapes).
#[allow(clippy::too_many_arguments)]
pub fn build_series(
    body: &[u8],
    content_type: Option<&str>,
    ts: i64,
    target: &Target,
    job: &JobSettings,
    cache: &mut SeriesCache,
    out: &mut Vec<Series>,
    metadata: &mut Vec<Metadata>,
    want_metadata: bool,
) -> Result<ScrapeStats, ScrapeFailure> {
    // The parser's tables, lent by this thread for the scrape and given
    // back when it returns, whichever way (see `ParseBuffers`).
    let mut lent = ParseBuffers::lend();
    let buffers = &mut lent.0;
    // A missing or unknown content type: the job's fallback_scrape_protocol.
    let known = content_type.is_some_and(|c| {
        let c = c.trim_start().to_ascii_lowercase();
        c.starts_with("text/plain") || c.starts_with("application/openmetrics-text")
    });
    let format =
        if !known && job.fallback_openmetrics { Format::OpenMetrics } else { Format::from_content_type(content_type) };
    let id = cache.scrape_id + 1;
    let tracing = job.status.tracer.active();
    // Lines seen before have only their values parsed; not while a trace is
    // open (it reports every sample's labels as scraped).
    // The parser carries the slot number of a known line.
    let mut known = KnownSlots { table: &mut cache.table, id, last: None };
    fn parse<'a>(
        body: &'a [u8],
        format: Format,
        tracing: bool,
        known: &mut dyn KnownLines,
        buffers: &mut Buffers,
    ) -> Result<infertel_exposition::Exposition<'a>, infertel_exposition::ParseError> {
        if tracing {
            infertel_exposition::parse_as_prometheus(body, format)
        } else {
            infertel_exposition::parse_as_prometheus_known_in(body, format, known, buffers)
        }
    }
    // A parse error fails the scrape after what came before the bad line
    // was read, as Prometheus appends line by line: the counts report it.
    let prefix: Vec<u8>;
    let (exp, parse_error) = match parse(body, format, tracing, &mut known, buffers) {
        Ok(exp) => (exp, None),
        Err(e) => {
            prefix = readable_prefix(body, e.line, format);
            let failure = fail("parse", format!("parse error: {e}"));
            known.last = None;
            match parse(&prefix, format, tracing, &mut known, buffers) {
                Ok(exp) => (exp, Some(failure)),
                Err(_) => return Err(failure),
            }
        }
    };
    if let Some(d) = cache.deadline
        && Instant::now() > d
    {
        return Err(fail("timeout", "scrape timed out while parsing the body (parsing counts against scrape_timeout)"));
    }
    let mut stats = ScrapeStats { scraped: exp.samples.len() as u64, ..Default::default() };
    let check_collisions = !job.metric_relabel.is_empty();
    let start_len = out.len();
    let mut failure: Option<ScrapeFailure> = None;
    let mut over_limit = false;
    let mut prev_slot = None;
    for (i, s) in exp.samples.iter().enumerate() {
        let raw = exp.labels(s);
        let explicit_ts = job.honor_timestamps && s.timestamp_ms.is_some();
        let sample_ts = if explicit_ts { s.timestamp_ms.unwrap_or(ts) } else { ts };
        // The series' slot, found by the parser from the raw bytes, or by
        // its identity, or new.
        let known = s.known.and_then(|i| u32::try_from(i).ok());
        let (slot, new) = match known {
            Some(i) => (i, false),
            None => {
                let key = identity_key(&mut cache.scratch, &s.name, raw);
                let (slot, new) = match cache.table.find(key) {
                    Some(i) => (i, false),
                    None => {
                        let labels = match finish_labels(&s.name, raw, target, job) {
                            Ok(l) => l,
                            Err(e) => {
                                // Prometheus stops at the series: it counts as read.
                                stats.scraped = i as u64 + 1;
                                failure = Some(e);
                                break;
                            }
                        };
                        let mut shadowed = false;
                        if check_collisions && let Some(l) = &labels {
                            match cache.owners.get(l) {
                                Some(owner) if *owner != key => shadowed = true,
                                _ => {
                                    cache.owners.insert(l.clone(), key);
                                }
                            }
                        }
                        let new = NewSlot { out: labels, seen: 0, shadowed, track_staleness: !explicit_ts };
                        (cache.table.insert(key, new), true)
                    }
                };
                if let Some(raw_key) = s.raw_key {
                    cache.table.add_raw(slot, raw_key, s.raw_len, id);
                }
                (slot, new)
            }
        };
        // The order of this body, for the next scrape's guesses.
        cache.table.follows(prev_slot, slot);
        prev_slot = Some(slot);
        let Some(e) = cache.table.get_mut(slot) else {
            // Cannot happen (a raw key is kept only while its slot is); if
            // it did, the labels were not parsed: start the cache over.
            cache.table.forget_raw();
            return Err(fail(
                "parse",
                "internal: the scrape cache lost a series; the next scrape reads the body in full",
            ));
        };
        let again = e.seen == id as u32;
        e.seen = id as u32;
        let (labels, shadowed, last_ts) = (e.out.clone(), e.shadowed, e.last_ts);
        // Someone traces this series (the status page): note its fate.
        let watched = if tracing { watch(&s.name, raw, target, job, labels.as_ref()) } else { None };
        let note = |fate: ScrapeFate, out: Option<&Labels>| {
            if let Some(w) = &watched {
                w.note(target, job, out, fate, s.value);
            }
        };
        // Dropped by metric relabeling: read, not kept.
        let Some(labels) = labels else {
            note(ScrapeFate::DroppedByRule { index: usize::MAX, action: String::new() }, None);
            continue;
        };
        stats.post_relabel += 1;
        if job.sample_limit > 0 && stats.post_relabel > job.sample_limit {
            // Prometheus reads on to the end, counting, then fails.
            over_limit = true;
            note(ScrapeFate::OverSampleLimit(job.sample_limit), Some(&labels));
            continue;
        }
        if new {
            stats.series_added += 1;
        }
        // The same series twice (in the body, or made equal by relabeling):
        // the first of one timestamp is kept, as Prometheus' TSDB keeps it;
        // a later explicit timestamp is a sample of its own.
        if shadowed || (again && sample_ts <= last_ts) {
            stats.duplicates += 1;
            note(ScrapeFate::Duplicate, Some(&labels));
            continue;
        }
        // A timestamp given by the target that does not move forward (the
        // same one scrape after scrape, or one going back): Prometheus drops
        // the sample; forwarding it would get the request refused.
        if sample_ts <= last_ts {
            stats.out_of_order += 1;
            note(ScrapeFate::OutOfOrder, Some(&labels));
            continue;
        }
        note(ScrapeFate::Kept, Some(&labels));
        if let Some(e) = cache.table.get_mut(slot) {
            e.last_ts = sample_ts;
        }
        out.push(Series {
            labels,
            samples: infertel_model::samples![Sample { timestamp_ms: sample_ts, value: s.value }],
        });
    }
    if failure.is_none() && over_limit {
        failure = Some(fail("sample_limit", format!("sample_limit exceeded: more than {} samples", job.sample_limit)));
    }
    if let Some(mut e) = failure.or(parse_error) {
        // Nothing of a failed scrape is forwarded; the series it read stay
        // known (Prometheus keeps them in its scrape cache).
        out.truncate(start_len);
        e.stats = Some(stats);
        buffers.recycle(exp);
        return Err(e);
    }
    // Series of the previous scrape that did not come back go stale.
    let prev = cache.scrape_id;
    let owners = &mut cache.owners;
    let mut freed = false;
    cache.table.retain(id, |key, e| {
        if e.seen == id as u32 {
            return true;
        }
        if let Some(l) = &e.out {
            if e.seen == prev as u32 && e.track_staleness && !e.shadowed {
                if tracing {
                    let who = format!("{}/{}", target.job(), target.instance());
                    for t in job.status.tracer.following(l) {
                        t.marked(&who, l, ScrapeFate::Stale);
                    }
                }
                out.push(Series {
                    labels: l.clone(),
                    samples: infertel_model::samples![Sample { timestamp_ms: ts, value: stale_nan() }],
                });
            }
            if owners.get(l) == Some(&key) {
                owners.remove(l);
                freed = true;
            }
        }
        false
    });
    if freed {
        // A series that shadowed the one that went away takes its place
        // from the next scrape on. (Rare: it needs relabeling that makes two
        // scraped series equal.)
        for (key, e) in cache.table.iter_mut().filter(|(_, e)| e.shadowed) {
            if let Some(l) = &e.out
                && !cache.owners.contains_key(l)
            {
                cache.owners.insert(l.clone(), key);
                e.shadowed = false;
            }
        }
    }
    cache.scrape_id = id;
    if want_metadata {
        for f in &exp.families {
            metadata.push(Metadata {
                family: (*f.name).into(),
                kind: f.kind,
                help: f.help.as_deref().unwrap_or("").into(),
                unit: f.unit.as_deref().unwrap_or("").into(),
            });
        }
    }
    buffers.recycle(exp);
    Ok(stats)
}

/// The scrape cache as the parser asks it: a line's slot by its raw key,
/// and a guess for the next line (the series that followed the last one
/// found, on the last scrape).
struct KnownSlots<'t> {
    table: &'t mut SlotTable,
    id: u64,
    last: Option<u32>,
}

impl KnownLines for KnownSlots<'_> {
    fn find(&mut self, raw_key: u128) -> Option<u128> {
        let i = self.table.find_raw(raw_key, self.id)?;
        self.last = Some(i);
        Some(u128::from(i))
    }

    fn guess(&mut self) -> Option<Guess> {
        self.table.guess(self.last)
    }

    fn confirm(&mut self, g: &Guess) {
        let i = g.answer as u32;
        self.table.guessed(i, self.id);
        self.last = Some(i);
    }
}

/// The lines of `body` before line `bad` (1-based), as a body the parser
/// reads (OpenMetrics gets its `# EOF`): what a scrape had read when it
/// failed there.
fn readable_prefix(body: &[u8], bad: usize, format: Format) -> Vec<u8> {
    let mut end = 0;
    for _ in 1..bad {
        match body[end..].iter().position(|&b| b == b'\n') {
            Some(p) => end += p + 1,
            None => {
                end = body.len();
                break;
            }
        }
    }
    let mut prefix = body[..end].to_vec();
    if format == Format::OpenMetrics {
        if !prefix.is_empty() && !prefix.ends_with(b"\n") {
            prefix.push(b'\n');
        }
        prefix.extend_from_slice(b"# EOF\n");
    }
    prefix
}

/// Prometheus 2.42's `model.IsValidMetricName`.
fn valid_metric_name(n: &str) -> bool {
    let mut b = n.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// Prometheus 2.42's `LabelName.IsValid`.
fn valid_label_name(n: &str) -> bool {
    let mut b = n.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A sample some trace follows: its labels as scraped (target labels
/// attached, before metric relabeling) and the traces.
struct Watched {
    scraped_as: Labels,
    traces: Vec<std::sync::Arc<crate::status::trace::Trace>>,
}

impl Watched {
    fn note(&self, target: &Target, job: &JobSettings, out: Option<&Labels>, mut fate: ScrapeFate, value: f64) {
        if let ScrapeFate::DroppedByRule { index, action } = &mut fate {
            // Which rule dropped it: stepped through again, for this one series.
            match job.metric_relabel.steps(&self.scraped_as).last() {
                Some(step) if step.output.is_none() => {
                    *index = step.index;
                    *action = step.action.as_str().to_string();
                }
                _ => fate = ScrapeFate::Emptied,
            }
        }
        let who = format!("{}/{}", target.job(), target.instance());
        for t in &self.traces {
            t.scraped(&who, &self.scraped_as, out, fate.clone(), value);
        }
    }
}

/// The traces following a sample, if any (only called while one is open).
fn watch(
    name: &str,
    raw: &[(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)],
    target: &Target,
    job: &JobSettings,
    out: Option<&Labels>,
) -> Option<Watched> {
    let tracer = &job.status.tracer;
    if !tracer.may_follow(name) && !out.is_some_and(|o| tracer.may_follow(o.metric_name())) {
        return None;
    }
    let mut v: Vec<Label> = vec![Label::new(METRIC_NAME, name)];
    v.extend(raw.iter().map(|(n, x)| Label::new(n.as_ref(), x.as_ref())));
    let scraped_as = Labels::from_vec(attach_target_labels(v, &target.labels, job.honor_labels));
    let mut traces = tracer.following(&scraped_as);
    if let Some(o) = out {
        for t in tracer.following(o) {
            if !traces.iter().any(|x| std::sync::Arc::ptr_eq(x, &t)) {
                traces.push(t);
            }
        }
    }
    (!traces.is_empty()).then_some(Watched { scraped_as, traces })
}

fn finish_labels(
    name: &str,
    raw: &[(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)],
    target: &Target,
    job: &JobSettings,
) -> Result<Option<Labels>, ScrapeFailure> {
    let mut v: Vec<Label> = Vec::with_capacity(raw.len() + target.labels.len() + 1);
    v.push(job.interner.label(METRIC_NAME, name));
    for (n, val) in raw {
        if n == METRIC_NAME {
            return Err(fail("invalid_labels", format!("series {name}: label __name__ inside braces")));
        }
        if v.iter().any(|l| *l.name == **n) {
            return Err(fail("invalid_labels", format!("series {name}: label name {n:?} is not unique")));
        }
        v.push(job.interner.label(n, val));
    }
    let mut v = attach_target_labels(v, &target.labels, job.honor_labels);
    let scraped = Labels::from_vec(std::mem::take(&mut v));
    let relabeled = !job.metric_relabel.is_empty();
    let Some(labels) = job.metric_relabel.process(&scraped) else { return Ok(None) };
    // A label relabeling made (a `replace` that sets `cluster` on every
    // series, say) is its own allocation in each set: through the interner
    // every series shares it again.
    let labels = if Labels::ptr_eq(&labels, &scraped) { labels } else { job.interner.labels(&labels) };
    // Relabeling that removed every label drops the series, silently.
    if labels.is_empty() {
        return Ok(None);
    }
    if labels.metric_name().is_empty() {
        return Err(fail(
            "invalid_labels",
            format!("series {name}: missing metric name (__name__ label) after relabeling"),
        ));
    }
    // After relabeling the names must be valid, as Prometheus 2.42 checks
    // them (`labels.IsValid`); names as scraped are the parser's business
    // (it accepts Prometheus 3's quoted UTF-8 names).
    if relabeled {
        let scraped = |n: &str| raw.iter().any(|(r, _)| r == n);
        let bad_name = labels.metric_name() != name && !valid_metric_name(labels.metric_name());
        let bad_label =
            labels.iter().any(|l| &*l.name != METRIC_NAME && !valid_label_name(&l.name) && !scraped(&l.name));
        if bad_name || bad_label {
            return Err(fail("invalid_labels", format!("invalid metric name or label names: {labels}")));
        }
    }
    // As Prometheus' verifyLabelLimits: `__name__` counts, external labels
    // (which Prometheus adds at send time) do not.
    if job.label_limit > 0 && labels.len() as u64 > job.label_limit {
        return Err(fail(
            "label_limit",
            format!("label_limit exceeded: series {labels} has {} labels (limit {})", labels.len(), job.label_limit),
        ));
    }
    let labels = if job.external_labels.is_empty() {
        labels
    } else {
        let mut v: Vec<Label> = labels.iter().cloned().collect();
        add_external(&mut v, &job.external_labels);
        Labels::from_vec(v)
    };
    for l in labels.iter() {
        if job.label_name_length_limit > 0 && l.name.len() as u64 > job.label_name_length_limit {
            return Err(fail("label_limit", format!("label_name_length_limit exceeded: {:?} in {labels}", l.name)));
        }
        if job.label_value_length_limit > 0 && l.value.len() as u64 > job.label_value_length_limit {
            return Err(fail(
                "label_limit",
                format!("label_value_length_limit exceeded: label {} of {labels}", l.name),
            ));
        }
    }
    Ok(Some(labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_model::is_stale_nan;
    use infertel_relabel::RelabelConfig;
    use infertel_relabel::Relabeler;
    use std::time::Duration;

    fn target() -> Target {
        let labels = Labels::from_pairs([("job", "j"), ("instance", "h:1")]);
        Target {
            discovered: labels.clone(),
            all_labels: labels.clone(),
            labels,
            url: "http://h:1/metrics".into(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        }
    }

    fn job(metric_relabel: &str) -> JobSettings {
        let rc: Vec<RelabelConfig> =
            if metric_relabel.is_empty() { vec![] } else { serde_yaml::from_str(metric_relabel).unwrap() };
        JobSettings { metric_relabel: Relabeler::new(&rc).unwrap(), ..JobSettings::new("prometheus") }
    }

    fn scrape(
        body: &str,
        ts: i64,
        job: &JobSettings,
        cache: &mut SeriesCache,
    ) -> Result<(Vec<Series>, ScrapeStats), ScrapeFailure> {
        let mut out = Vec::new();
        let mut md = Vec::new();
        build_series(body.as_bytes(), None, ts, &target(), job, cache, &mut out, &mut md, false).map(|s| (out, s))
    }

    /// The real `/metrics` captures in `shared/fixtures/real`, sorted.
    fn real_captures() -> Vec<std::path::PathBuf> {
        let dir = match std::env::var_os("INFERTEL_SHARED") {
            Some(shared) => std::path::PathBuf::from(shared).join("fixtures/real"),
            None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/real"),
        };
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "prom"))
            .collect();
        files.sort();
        assert!(files.len() >= 9, "{files:?}");
        files
    }

    fn names(v: &[Series]) -> Vec<String> {
        v.iter().map(|s| s.labels.to_string()).collect()
    }

    #[test]
    fn vanished_series_get_one_stale_marker() {
        let (j, mut c) = (job(""), SeriesCache::default());
        let (out, st) = scrape("a 1\nb 2\n", 1000, &j, &mut c).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(st.series_added, 2);
        let (out, st) = scrape("a 1\n", 2000, &j, &mut c).unwrap();
        assert_eq!(st.series_added, 0);
        let stale: Vec<_> = out.iter().filter(|s| is_stale_nan(s.samples[0].value)).collect();
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].labels.metric_name(), "b");
        assert_eq!(stale[0].samples[0].timestamp_ms, 2000);
        // Only once.
        let (out, _) = scrape("a 1\n", 3000, &j, &mut c).unwrap();
        assert!(!out.iter().any(|s| is_stale_nan(s.samples[0].value)));
    }

    #[test]
    fn a_failed_scrape_forwards_nothing_and_marks_what_it_did_not_reach() {
        let (j, mut c) = (job(""), SeriesCache::default());
        scrape("a 1\nb 2\n", 1000, &j, &mut c).unwrap();
        let e = scrape("a 1\nb{ 2\n", 2000, &j, &mut c).unwrap_err();
        assert_eq!(e.reason, "parse");
        // As Prometheus reports it: the line before the bad one was read.
        assert_eq!(e.stats, Some(ScrapeStats { scraped: 1, post_relabel: 1, ..Default::default() }));
        // b was not reached: it ends; a was, and has a gap instead.
        let stale = c.failed(2000);
        assert_eq!(names(&stale), ["b{instance=\"h:1\",job=\"j\"}"]);
        // The cache still knows both: the next scrape adds nothing.
        let (_, st) = scrape("a 1\nb 2\n", 3000, &j, &mut c).unwrap();
        assert_eq!(st.series_added, 0, "no spike after a failed scrape");
    }

    #[test]
    fn a_series_spelled_another_way_is_the_same_series() {
        // Labels reordered, blanks added: new raw bytes, the same series. As
        // in Prometheus (staleness by label set), no marker, nothing added,
        // and the same interned labels.
        let (j, mut c) = (job(""), SeriesCache::default());
        let (first, _) = scrape("a{x=\"1\",y=\"2\"} 1\nb 1\n", 1000, &j, &mut c).unwrap();
        let (out, st) = scrape("a {y=\"2\", x=\"1\"} 2\nb 2\n", 2000, &j, &mut c).unwrap();
        assert_eq!(st.series_added, 0);
        assert_eq!(out.len(), 2, "{:?}", names(&out));
        assert!(!out.iter().any(|s| is_stale_nan(s.samples[0].value)));
        assert!(Labels::ptr_eq(&first[0].labels, &out[0].labels));
        assert_eq!(out[0].samples[0].value, 2.0);
        // Both spellings in one body: the second is a duplicate.
        let (out, st) = scrape("a{x=\"1\",y=\"2\"} 3\na {y=\"2\", x=\"1\"} 4\nb 3\n", 3000, &j, &mut c).unwrap();
        assert_eq!((out.len(), st.duplicates), (2, 1));
        assert_eq!(out[0].samples[0].value, 3.0);
        // The raw keys of spellings no longer sent are forgotten.
        scrape("a{x=\"1\",y=\"2\"} 5\n", 4000, &j, &mut c).unwrap();
        assert_eq!((c.len(), c.table.raw_keys()), (1, 1));
    }

    #[test]
    fn the_shortcut_gives_what_a_full_read_gives_over_scrapes() {
        // A second scrape reads values only; a third, with new values, a
        // raw newline in a label value, escapes and a `}` in a value, must
        // forward what a fresh cache (full reads only) forwards.
        let body = |v: u32| {
            format!(
                "# TYPE h histogram\nh_bucket{{le=\"1\"}} {v}\nh_bucket{{le=\"+Inf\"}} {v}\nh_sum {v}.5\nh_count {v}\n\
                 e{{p=\"a\\\"}}\\\\\",q=\"}}\"}} {v}\nn{{v=\"two\nlines\"}} {v}\nt\t{v} {v}000\n"
            )
        };
        let (j, mut warm) = (job(""), SeriesCache::default());
        for (i, ts) in [1000, 2000, 3000].into_iter().enumerate() {
            let (hot, hs) = scrape(&body(i as u32 + 1), ts, &j, &mut warm).unwrap();
            let (cold, mut cs) = scrape(&body(i as u32 + 1), ts, &j, &mut SeriesCache::default()).unwrap();
            cs.series_added = hs.series_added;
            assert_eq!(hs, cs);
            assert_eq!(names(&hot), names(&cold));
            let values =
                |v: &[Series]| v.iter().map(|s| (s.samples[0].value, s.samples[0].timestamp_ms)).collect::<Vec<_>>();
            assert_eq!(values(&hot), values(&cold));
            assert_eq!(hot.len(), 7, "{:?}", names(&hot));
        }
        // The lines that can take the shortcut did (all but the one with a
        // newline in a value).
        assert_eq!(warm.table.raw_keys(), 6);
    }

    /// Real captures scraped again and again as targets change them: new
    /// values, series gone, series added (into freed slots), blocks moved.
    /// Each scrape with a warm cache (guesses from the last scrape's order,
    /// then lookups) forwards what a fresh cache forwards, plus one stale
    /// marker for each series of the previous body that is not in this one;
    /// the bodies that keep their order are read almost wholly by guesses.
    #[test]
    fn guessed_lines_give_what_a_full_read_gives_as_real_bodies_change() {
        let files = real_captures();
        let j = job("");
        for f in &files {
            let body = std::fs::read_to_string(f).unwrap();
            let lines: Vec<&str> = body.lines().collect();
            let samples: Vec<usize> =
                (0..lines.len()).filter(|&i| !lines[i].is_empty() && !lines[i].starts_with('#')).collect();
            let n = samples.len();
            // Bodies in scrape order, each with the sample-line indexes it
            // keeps (in its own order) and its value.
            let revalue = |idx: &[usize], v: u32| -> String {
                idx.iter()
                    .map(|&i| {
                        let l = lines[i];
                        let Some((head, _)) = l.rsplit_once(' ').filter(|_| !l.starts_with('#')) else {
                            return format!("{l}\n");
                        };
                        format!("{head} {v}\n")
                    })
                    .collect()
            };
            let all: Vec<usize> = (0..lines.len()).collect();
            let without: Vec<usize> = all.iter().copied().filter(|i| !samples[n / 3..n / 2].contains(i)).collect();
            let mut moved: Vec<usize> = all[lines.len() / 2..].to_vec();
            moved.extend(&all[..lines.len() / 2]);
            let added = |v: u32| format!("{}churn_new{{k=\"{v}\"}} 1\n", revalue(&without, v));
            let bodies = [
                revalue(&all, 1),
                revalue(&all, 2),
                revalue(&without, 3),
                added(4),
                added(5),
                revalue(&moved, 6),
                revalue(&moved, 7),
                revalue(&all, 8),
            ];
            let mut warm = SeriesCache::default();
            let mut prev: std::collections::BTreeSet<String> = Default::default();
            for (k, b) in bodies.iter().enumerate() {
                let what = format!("{} scrape {k}", f.display());
                let ts = 1000 * (k as i64 + 1);
                let guessed_before = warm.table.guessed;
                let (hot, _) = scrape(b, ts, &j, &mut warm).unwrap();
                let guessed = warm.table.guessed - guessed_before;
                let (cold, _) = scrape(b, ts, &j, &mut SeriesCache::default()).unwrap();
                let (stale, live): (Vec<&Series>, Vec<&Series>) =
                    hot.iter().partition(|s| is_stale_nan(s.samples[0].value));
                let show = |v: &[&Series]| {
                    v.iter().map(|s| (s.labels.to_string(), s.samples[0].value.to_bits())).collect::<Vec<_>>()
                };
                assert_eq!(show(&live), show(&cold.iter().collect::<Vec<_>>()), "{what}");
                let now: std::collections::BTreeSet<String> = names(&cold).into_iter().collect();
                let gone: Vec<String> = prev.difference(&now).cloned().collect();
                let mut marked = names(&stale.into_iter().cloned().collect::<Vec<_>>());
                marked.sort();
                assert_eq!(marked, gone, "{what}: stale markers");
                if k == 1 || k == 4 || k == 6 {
                    // The same order as the scrape before: every line but
                    // the first of each moved block and a new one guessed.
                    assert!(guessed as usize + 3 >= cold.len(), "{what}: {guessed} of {} guessed", cold.len());
                }
                prev = now;
            }
        }
    }

    #[test]
    fn parsing_counts_against_the_scrape_timeout() {
        let (j, mut c) = (job(""), SeriesCache::default());
        c.deadline = Some(Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        let e = scrape("a 1\n", 1000, &j, &mut c).unwrap_err();
        assert_eq!(e.reason, "timeout");
        c.deadline = Some(Instant::now() + Duration::from_secs(60));
        assert!(scrape("a 1\n", 2000, &j, &mut c).is_ok());
    }

    #[test]
    fn sample_limit_reads_to_the_end_and_counts_as_prometheus() {
        let j = JobSettings { sample_limit: 2, ..job("") };
        let mut c = SeriesCache::default();
        let e = scrape("a 1\nb 2\nc 3\nd 4\n", 1000, &j, &mut c).unwrap_err();
        assert_eq!(e.reason, "sample_limit");
        assert_eq!(e.stats, Some(ScrapeStats { scraped: 4, post_relabel: 4, series_added: 2, ..Default::default() }));
        let e = scrape("a 1\nb 2\nc 3\nd 4\n", 2000, &j, &mut c).unwrap_err();
        assert_eq!(e.stats.map(|s| s.series_added), Some(0));
    }

    #[test]
    fn invalid_names_after_relabeling_fail_and_an_emptied_series_is_dropped() {
        let j = job("- {source_labels: [__name__], regex: b, target_label: __name__, replacement: 1abc}");
        let e = scrape("a 1\nb 2\nc 3\n", 1000, &j, &mut SeriesCache::default()).unwrap_err();
        assert_eq!(e.reason, "invalid_labels");
        assert!(e.message.contains("invalid metric name or label names"), "{}", e.message);
        assert_eq!(e.stats.map(|s| (s.scraped, s.post_relabel)), Some((2, 1)));
        let j = job("- {action: labeldrop, regex: '.*'}");
        let (out, st) = scrape("a 1\nb 2\n", 1000, &j, &mut SeriesCache::default()).unwrap();
        assert!(out.is_empty());
        assert_eq!((st.scraped, st.post_relabel), (2, 0));
    }

    #[test]
    fn explicit_timestamps_that_do_not_move_forward_are_not_forwarded() {
        let (j, mut c) = (job(""), SeriesCache::default());
        // Ascending in one body: both go.
        let (out, st) = scrape("t 1 1000\nt 2 2000\n", 5000, &j, &mut c).unwrap();
        assert_eq!(out.iter().map(|s| s.samples[0].timestamp_ms).collect::<Vec<_>>(), [1000, 2000]);
        assert_eq!((st.post_relabel, st.out_of_order), (2, 0));
        // The same body again: nothing new (Prometheus drops both): the
        // first as out of order, the second as its repeat in the body.
        let (out, st) = scrape("t 1 1000\nt 2 2000\n", 6000, &j, &mut c).unwrap();
        assert!(out.iter().all(|s| s.labels.metric_name() != "t"), "{out:?}");
        assert_eq!((st.post_relabel, st.out_of_order, st.duplicates), (2, 1, 1));
        // A later one goes.
        let (out, _) = scrape("t 3 3000\n", 7000, &j, &mut c).unwrap();
        assert_eq!(out[0].samples[0].timestamp_ms, 3000);
    }

    #[test]
    fn duplicates_keep_the_first_and_are_counted() {
        let (j, mut c) = (job(""), SeriesCache::default());
        let (out, st) = scrape("a{x=\"1\"} 1\na{x=\"1\"} 2\n", 1000, &j, &mut c).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].samples[0].value, 1.0);
        assert_eq!(st.duplicates, 1);
        // Two series that metric relabeling makes identical: the first wins,
        // every scrape, and the other takes over once the first is gone.
        let j = job("- {regex: x, action: labeldrop}");
        let mut c = SeriesCache::default();
        for ts in [1000, 2000] {
            let (out, st) = scrape("a{x=\"1\"} 1\na{x=\"2\"} 2\n", ts, &j, &mut c).unwrap();
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].samples[0].value, 1.0);
            assert_eq!(st.duplicates, 1);
        }
        let (out, _) = scrape("a{x=\"2\"} 2\n", 3000, &j, &mut c).unwrap();
        assert!(out.iter().all(|s| is_stale_nan(s.samples[0].value)), "the gone owner is marked stale");
        let (out, st) = scrape("a{x=\"2\"} 2\n", 4000, &j, &mut c).unwrap();
        assert_eq!((out.len(), out[0].samples[0].value, st.duplicates), (1, 2.0, 0));
    }

    #[test]
    fn explicit_timestamps_are_honoured_and_get_no_stale_marker() {
        let (j, mut c) = (job(""), SeriesCache::default());
        let (out, _) = scrape("a 1 12345\n", 1000, &j, &mut c).unwrap();
        assert_eq!(out[0].samples[0].timestamp_ms, 12345);
        let (out, _) = scrape("", 2000, &j, &mut c).unwrap();
        assert!(out.is_empty(), "no stale marker for a series with its own timestamp");
        let mut j = job("");
        j.honor_timestamps = false;
        let (out, _) = scrape("a 1 12345\n", 1000, &j, &mut SeriesCache::default()).unwrap();
        assert_eq!(out[0].samples[0].timestamp_ms, 1000);
    }

    #[test]
    fn limits_fail_the_scrape() {
        let mut j = job("");
        j.sample_limit = 1;
        assert_eq!(scrape("a 1\nb 1\n", 1, &j, &mut SeriesCache::default()).unwrap_err().reason, "sample_limit");
        let mut j = job("");
        j.label_limit = 3;
        assert_eq!(
            scrape("a{x=\"1\"} 1\n", 1, &j, &mut SeriesCache::default()).unwrap_err().reason,
            "label_limit",
            "__name__ + x + job + instance = 4 labels (Prometheus counts __name__)"
        );
        // External labels are added at send time in Prometheus: not counted.
        let mut j = job("");
        j.label_limit = 4;
        j.external_labels = vec![Label::new("cluster", "c"), Label::new("region", "r")];
        assert!(scrape("a{x=\"1\"} 1\n", 1, &j, &mut SeriesCache::default()).is_ok(), "4 labels, limit 4");
        let mut j = job("");
        j.label_value_length_limit = 3;
        assert_eq!(scrape("a{x=\"long\"} 1\n", 1, &j, &mut SeriesCache::default()).unwrap_err().reason, "label_limit");
    }

    #[test]
    fn target_labels_win_and_scraped_ones_are_exported() {
        let (j, mut c) = (job(""), SeriesCache::default());
        let (out, _) = scrape("a{job=\"orig\",exported_job=\"x\"} 1\n", 1, &j, &mut c).unwrap();
        assert_eq!(names(&out), [r#"a{exported_exported_job="orig",exported_job="x",instance="h:1",job="j"}"#]);
        let mut j = job("");
        j.honor_labels = true;
        let (out, _) = scrape("a{job=\"orig\"} 1\n", 1, &j, &mut SeriesCache::default()).unwrap();
        assert_eq!(names(&out), [r#"a{instance="h:1",job="orig"}"#]);
        // A scraped empty label is "present" for honor_labels: the
        // target's is not attached, and the empty one is dropped.
        let (out, _) = scrape("a{instance=\"\"} 1\n", 1, &j, &mut SeriesCache::default()).unwrap();
        assert_eq!(names(&out), [r#"a{job="j"}"#]);
    }

    #[test]
    fn metric_relabel_removing_the_name_fails_the_scrape() {
        let j = job("- {regex: __name__, action: labeldrop}");
        assert_eq!(scrape("a 1\n", 1, &j, &mut SeriesCache::default()).unwrap_err().reason, "invalid_labels");
    }

    #[test]
    fn labels_made_by_metric_relabeling_are_shared() {
        let j = job("- {target_label: cluster, replacement: c1}\n- {source_labels: [x], target_label: y}");
        let (out, _) =
            scrape("a{x=\"1\"} 1\nb{x=\"1\"} 1\nc{x=\"2\"} 1\n", 1, &j, &mut SeriesCache::default()).unwrap();
        assert_eq!(names(&out)[0], r#"a{cluster="c1",instance="h:1",job="j",x="1",y="1"}"#);
        let label = |i: usize, n: &str| out[i].labels.iter().find(|l| &*l.name == n).unwrap().clone();
        assert!(Label::ptr_eq(&label(0, "cluster"), &label(1, "cluster")));
        assert!(Label::ptr_eq(&label(0, "cluster"), &label(2, "cluster")));
        assert!(Label::ptr_eq(&label(0, "y"), &label(1, "y")));
        assert!(Label::ptr_eq(&label(0, "x"), &label(1, "x")), "scraped labels stay shared");
        assert_eq!(&*label(2, "y").value, "2");
    }

    /// What a scrape of real captures sends, from two replicas of each, over
    /// two scrapes at jittered times (the second takes the cache shortcut),
    /// with a relabel rule that sets a label on every series and external
    /// labels (one the rule's label shadows): each request body is what
    /// prost writes for the same series rebuilt from their label strings,
    /// with the external labels added by name as Prometheus adds them.
    #[test]
    fn real_captures_from_two_replicas_encode_as_prost_does() {
        use infertel_remote_write::{Encoder, to_write_request};
        use prost::Message;
        let files = real_captures();
        let j = job("- {target_label: cluster, replacement: c1}\n\
                     - {source_labels: [__name__], regex: 'vllm:(.*)', target_label: family, replacement: '$1'}");
        let external = [("cluster", "ext"), ("region", "eu")];
        let mut enc = Encoder::with_external_labels(external.iter().map(|(n, v)| Label::new(*n, *v)).collect());
        let mut sent = 0;
        for f in &files {
            let body = std::fs::read(f).unwrap();
            let replicas = ["10.0.0.1:8000", "10.0.0.2:8000"].map(|i| {
                let labels = Labels::from_pairs([("job", "vllm"), ("instance", i)]);
                let t = Target { discovered: labels.clone(), all_labels: labels.clone(), labels, ..target() };
                (t, SeriesCache::default())
            });
            let mut replicas = replicas;
            for ts in [1_700_000_000_123, 1_700_000_015_371] {
                for (t, cache) in &mut replicas {
                    let mut out = Vec::new();
                    build_series(&body, None, ts, t, &j, cache, &mut out, &mut Vec::new(), false)
                        .unwrap_or_else(|e| panic!("{}: {}", f.display(), e.message));
                    let got = snap::raw::Decoder::new().decompress_vec(enc.encode(&out, &[])).unwrap();
                    let reference: Vec<Series> = out
                        .iter()
                        .map(|s| {
                            let mut pairs: Vec<(String, String)> =
                                s.labels.iter().map(|l| (l.name.to_string(), l.value.to_string())).collect();
                            for (n, v) in external {
                                if !pairs.iter().any(|(have, _)| have == n) {
                                    pairs.push((n.into(), v.into()));
                                }
                            }
                            let labels = Labels::from_pairs(pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())));
                            Series { labels, samples: s.samples.clone() }
                        })
                        .collect();
                    assert_eq!(got, to_write_request(&reference, &[]).encode_to_vec(), "{} at {ts}", f.display());
                    assert!(out.iter().all(|s| s.labels.get("cluster") == Some("c1")));
                    sent += out.len();
                }
            }
        }
        // Four scrapes of each capture, a series per sample line.
        assert!(sent > 4 * 200, "{sent}");
    }

    #[test]
    fn label_sets_are_interned_across_scrapes() {
        let (j, mut c) = (job(""), SeriesCache::default());
        let (a, _) = scrape("a{x=\"1\"} 1\n", 1, &j, &mut c).unwrap();
        let (b, _) = scrape("a{x=\"1\"} 2\n", 2, &j, &mut c).unwrap();
        assert!(
            std::ptr::eq(a[0].labels.as_slice(), b[0].labels.as_slice()),
            "the second scrape reuses the first's Labels"
        );
    }

    #[test]
    fn a_trace_sees_each_decision_of_the_scrape() {
        let j = job("- {source_labels: [__name__], regex: dropme, action: drop}\n- {regex: pod, action: labeldrop}");
        let tracer = &j.status.tracer;
        let (kept, dropped, dup) =
            (tracer.open("a").unwrap(), tracer.open("dropme").unwrap(), tracer.open("d").unwrap());
        let mut c = SeriesCache::default();
        scrape("a{pod=\"p\"} 1\ndropme 1\nd{pod=\"x\"} 1\nd{pod=\"y\"} 2\n", 1000, &j, &mut c).unwrap();
        let f = kept.fates();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].scrape, Some(ScrapeFate::Kept));
        assert_eq!(f[0].scraped_as, "a{instance=\"h:1\",job=\"j\",pod=\"p\"}");
        assert_eq!(f[0].forwarded_as.as_deref(), Some("a{instance=\"h:1\",job=\"j\"}"));
        assert_eq!(f[0].value, 1.0);
        let f = dropped.fates();
        assert_eq!(f[0].scrape, Some(ScrapeFate::DroppedByRule { index: 0, action: "drop".into() }));
        // Made equal by dropping `pod`: the second is shadowed.
        let f = dup.fates();
        assert!(f.iter().any(|x| x.scrape == Some(ScrapeFate::Kept)), "{f:?}");
        assert!(f.iter().any(|x| x.scrape == Some(ScrapeFate::Duplicate)), "{f:?}");
        // Gone from the next scrape: staled.
        scrape("dropme 1\n", 2000, &j, &mut c).unwrap();
        assert_eq!(kept.fates()[0].scrape, Some(ScrapeFate::Stale));
        assert_eq!(kept.fates().len(), 1, "the marker is noted on the same series");
    }
}
