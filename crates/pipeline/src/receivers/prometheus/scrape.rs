//! One target's scrape loop, with Prometheus 2.42's semantics:
//! fetch (Accept prefers text 0.0.4, gzip, timeout, body size limit), parse,
//! attach target labels (`honor_labels`, `exported_` on clash),
//! `metric_relabel_configs`, limits, staleness markers for series that
//! vanish or when the scrape fails, and the report series `up`,
//! `scrape_duration_seconds`, `scrape_samples_scraped`,
//! `scrape_samples_post_metric_relabeling`, `scrape_series_added`.
//!
//! A body that fails to parse, or breaks a limit, fails the whole scrape:
//! nothing from it is forwarded, `up` is 0, previously seen series get stale
//! markers, and the reason is logged and counted.
//!
//! Label sets are interned per target: a series seen on the previous scrape
//! reuses its finished `Labels` (only values and timestamps change), so a
//! steady-state scrape allocates no label strings.

use super::handover::{Handed, Handover, LoopKey, end_of_target};
use super::target::Target;
use crate::consumer::Consumer;
use crate::http::describe_error;
use crate::processors::memory_limiter::Backpressure;
use crate::telemetry::{Counter, Gauge, Telemetry};
use infertel_exposition::Format;
use infertel_model::{Batch, Label, Labels, METRIC_NAME, Metadata, Sample, Series, stale_nan};
use infertel_relabel::Relabeler;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue};
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// Text 0.0.4 first: vLLM's OpenMetrics output loses types (NOTES.md §H).
pub const ACCEPT_HEADER: &str = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,*/*;q=0.1";

/// How to authenticate scrapes; files are re-read on every scrape so a
/// rotated secret is picked up.
#[derive(Debug, Clone, Default)]
pub enum ScrapeAuth {
    #[default]
    None,
    Basic {
        username: String,
        password: Option<String>,
        password_file: Option<std::path::PathBuf>,
    },
    Token {
        scheme: String,
        credentials: Option<String>,
        credentials_file: Option<std::path::PathBuf>,
    },
}

impl ScrapeAuth {
    fn header(&self) -> Result<Option<HeaderValue>, String> {
        let v = match self {
            ScrapeAuth::None => return Ok(None),
            ScrapeAuth::Basic { username, password, password_file } => {
                let pw = match (password, password_file) {
                    (_, Some(f)) => crate::http::read_secret_file(f, "password_file")?,
                    (Some(p), None) => p.clone(),
                    (None, None) => String::new(),
                };
                format!("Basic {}", base64_encode(format!("{username}:{pw}").as_bytes()))
            }
            ScrapeAuth::Token { scheme, credentials, credentials_file } => {
                let c = match (credentials, credentials_file) {
                    (_, Some(f)) => crate::http::read_secret_file(f, "credentials_file")?,
                    (Some(c), None) => c.clone(),
                    (None, None) => String::new(),
                };
                format!("{scheme} {c}")
            }
        };
        let mut h = HeaderValue::from_str(&v)
            .map_err(|_| "credentials contain characters not allowed in a header".to_string())?;
        h.set_sensitive(true);
        Ok(Some(h))
    }
}

/// Standard base64, for basic auth.
pub fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 { T[(n >> 6) as usize & 63] as char } else { '=' });
        out.push(if c.len() > 2 { T[n as usize & 63] as char } else { '=' });
    }
    out
}

/// Per-job settings shared by all of the job's targets.
#[derive(Debug)]
pub struct JobSettings {
    pub receiver: String,
    pub honor_labels: bool,
    pub honor_timestamps: bool,
    pub sample_limit: u64,
    pub label_limit: u64,
    pub label_name_length_limit: u64,
    pub label_value_length_limit: u64,
    pub body_size_limit: u64,
    /// The Accept header from `scrape_protocols`; `None`: [`ACCEPT_HEADER`].
    pub accept: Option<String>,
    /// `enable_compression`: ask for gzip.
    pub compression: bool,
    /// `http_headers`: sent with every scrape (files read each time).
    pub headers: Vec<(String, super::config::HttpHeader)>,
    /// `fallback_scrape_protocol` is OpenMetrics: a body without a valid
    /// content type is parsed as OpenMetrics.
    pub fallback_openmetrics: bool,
    pub metric_relabel: Relabeler,
    pub external_labels: Vec<Label>,
    pub auth: ScrapeAuth,
    /// Label strings shared by every series of every target of the job.
    pub interner: Interner,
    /// Set while the job is over its `target_limit`: every target's scrape
    /// fails with it, as Prometheus forces the error on every loop of the
    /// pool (rather than scraping the first N).
    pub forced_error: std::sync::RwLock<Option<String>>,
}

/// Interns label names and values, so a string that appears in many series
/// (`model_name`, a GPU's UUID, `engine`, and in a fleet the same names on
/// every node) is stored once. Strings nobody uses any more are purged when
/// the set has doubled since the last purge, so churn does not grow it.
#[derive(Debug, Default)]
pub struct Interner {
    set: std::sync::Mutex<FxHashSet<Arc<str>>>,
    purge_at: std::sync::atomic::AtomicUsize,
}

impl Interner {
    pub fn get(&self, s: &str) -> Arc<str> {
        let mut set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = set.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        set.insert(a.clone());
        let limit = self.purge_at.load(std::sync::atomic::Ordering::Relaxed).max(4096);
        if set.len() > limit {
            set.retain(|a| Arc::strong_count(a) > 1);
            self.purge_at.store(set.len() * 2, std::sync::atomic::Ordering::Relaxed);
        }
        a
    }

    pub fn len(&self) -> usize {
        self.set.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a scrape failed: the `reason` label of
/// `infertel_receiver_scrape_errors_total`, and the message logged.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeFailure {
    pub reason: &'static str,
    pub message: String,
}

fn fail(reason: &'static str, message: impl Into<String>) -> ScrapeFailure {
    ScrapeFailure { reason, message: message.into() }
}

struct CacheEntry {
    /// Finished labels, or None when metric relabeling dropped the series.
    out: Option<Labels>,
    /// Another scraped series already has these finished labels (metric
    /// relabeling made them equal): this one is skipped as a duplicate.
    shadowed: bool,
    seen: u64,
    /// Series with explicit timestamps get no staleness markers.
    track_staleness: bool,
}

/// What one scrape produced (before report series).
#[derive(Debug, Default, PartialEq)]
pub struct ScrapeStats {
    pub scraped: u64,
    pub post_relabel: u64,
    pub series_added: u64,
    /// Samples not forwarded because the same series came twice (in the body,
    /// or after metric relabeling); Prometheus keeps the first too.
    pub duplicates: u64,
}

/// The per-target state that outlives a scrape: interned label sets and the
/// series seen on the last successful scrape.
#[derive(Default)]
pub struct SeriesCache {
    /// Keyed by the 128-bit XXH3 hash of the series as scraped (name, then
    /// label pairs in body order, with separators no UTF-8 text contains).
    /// Storing the hash instead of the scraped text keeps an entry small
    /// (one per active series); two different series would have to collide
    /// on 128 bits, about 1e-27 at a million series.
    entries: FxHashMap<u128, CacheEntry>,
    /// With metric relabeling, which entry owns each finished label set, so
    /// a collision is found once, when a series first appears, instead of
    /// hashing every sample's labels on every scrape.
    owners: FxHashMap<Labels, u128>,
    /// Reused buffer for building the key.
    scratch: Vec<u8>,
    scrape_id: u64,
    last_metadata: Option<Instant>,
    warned_duplicates: bool,
}

impl SeriesCache {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stale markers at `ts` for every series of the last scrape; empties
    /// the cache (a failed scrape or a target that goes away).
    pub fn stale_all(&mut self, ts: i64) -> Vec<Series> {
        let prev = self.scrape_id;
        let out = self
            .entries
            .values()
            .filter(|e| e.seen == prev && e.track_staleness)
            .filter(|e| !e.shadowed)
            .filter_map(|e| e.out.clone())
            .map(|labels| Series { labels, samples: vec![Sample { timestamp_ms: ts, value: stale_nan() }] })
            .collect();
        self.entries.clear();
        self.owners.clear();
        out
    }
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
        conflicting[i].name = name.into();
    }
    for c in conflicting {
        scraped.retain(|l| l.name != c.name);
        scraped.push(c);
    }
    scraped
}

pub(super) fn report_labels(name: &str, target: &Labels, external: &[Label]) -> Labels {
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
    // A missing or unknown content type: the job's fallback_scrape_protocol.
    let known = content_type.is_some_and(|c| {
        let c = c.trim_start().to_ascii_lowercase();
        c.starts_with("text/plain") || c.starts_with("application/openmetrics-text")
    });
    let format =
        if !known && job.fallback_openmetrics { Format::OpenMetrics } else { Format::from_content_type(content_type) };
    let exp = infertel_exposition::parse(body, format).map_err(|e| fail("parse", format!("parse error: {e}")))?;
    let id = cache.scrape_id + 1;
    let mut stats = ScrapeStats { scraped: exp.samples.len() as u64, ..Default::default() };
    let mut inserted: Vec<u128> = Vec::new();
    let mut touched: Vec<u128> = Vec::new();
    let check_collisions = !job.metric_relabel.is_empty();
    let start_len = out.len();
    let result = (|| {
        for s in &exp.samples {
            let raw = exp.labels(s);
            let scratch = &mut cache.scratch;
            scratch.clear();
            scratch.extend_from_slice(s.name.as_bytes());
            for (n, v) in raw {
                scratch.push(0xff);
                scratch.extend_from_slice(n.as_bytes());
                scratch.push(0xfe);
                scratch.extend_from_slice(v.as_bytes());
            }
            let key = xxhash_rust::xxh3::xxh3_128(scratch);
            let explicit_ts = job.honor_timestamps && s.timestamp_ms.is_some();
            let sample_ts = if explicit_ts { s.timestamp_ms.unwrap_or(ts) } else { ts };
            let labels: Option<Labels> = match cache.entries.get_mut(&key) {
                Some(e) => {
                    if e.seen == id {
                        // The same series twice in one body: Prometheus keeps the first.
                        stats.duplicates += 1;
                        continue;
                    }
                    e.seen = id;
                    touched.push(key);
                    if e.shadowed {
                        stats.duplicates += 1;
                        continue;
                    }
                    e.out.clone()
                }
                None => {
                    let labels = finish_labels(&s.name, raw, target, job)?;
                    if labels.is_some() {
                        stats.series_added += 1;
                    }
                    let mut shadowed = false;
                    if check_collisions && let Some(l) = &labels {
                        match cache.owners.get(l) {
                            Some(owner) if *owner != key => shadowed = true,
                            _ => {
                                cache.owners.insert(l.clone(), key);
                            }
                        }
                    }
                    cache.entries.insert(
                        key,
                        CacheEntry { out: labels.clone(), shadowed, seen: id, track_staleness: !explicit_ts },
                    );
                    inserted.push(key);
                    if shadowed {
                        stats.duplicates += 1;
                        continue;
                    }
                    labels
                }
            };
            let Some(labels) = labels else { continue };
            stats.post_relabel += 1;
            if job.sample_limit > 0 && stats.post_relabel > job.sample_limit {
                return Err(fail(
                    "sample_limit",
                    format!("sample_limit exceeded: more than {} samples", job.sample_limit),
                ));
            }
            out.push(Series { labels, samples: vec![Sample { timestamp_ms: sample_ts, value: s.value }] });
        }
        Ok(())
    })();
    if let Err(e) = result {
        // Roll back: nothing from a failed scrape is forwarded, and the cache
        // is as it was.
        out.truncate(start_len);
        for key in inserted {
            if let Some(CacheEntry { out: Some(l), shadowed: false, .. }) = cache.entries.remove(&key) {
                cache.owners.remove(&l);
            }
        }
        for key in touched {
            if let Some(e) = cache.entries.get_mut(&key) {
                e.seen = id - 1;
            }
        }
        return Err(e);
    }
    // Series of the previous scrape that did not come back go stale.
    let prev = cache.scrape_id;
    let owners = &mut cache.owners;
    let mut freed = false;
    cache.entries.retain(|key, e| {
        if e.seen == id {
            return true;
        }
        if let Some(l) = &e.out {
            if e.seen == prev && e.track_staleness && !e.shadowed {
                out.push(Series { labels: l.clone(), samples: vec![Sample { timestamp_ms: ts, value: stale_nan() }] });
            }
            if owners.get(l) == Some(key) {
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
        for (key, e) in cache.entries.iter_mut().filter(|(_, e)| e.shadowed) {
            if let Some(l) = &e.out
                && !cache.owners.contains_key(l)
            {
                cache.owners.insert(l.clone(), *key);
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
    Ok(stats)
}

fn finish_labels(
    name: &str,
    raw: &[(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)],
    target: &Target,
    job: &JobSettings,
) -> Result<Option<Labels>, ScrapeFailure> {
    let mut v: Vec<Label> = Vec::with_capacity(raw.len() + target.labels.len() + 1);
    v.push(Label { name: job.interner.get(METRIC_NAME), value: job.interner.get(name) });
    for (n, val) in raw {
        if n == METRIC_NAME {
            return Err(fail("invalid_labels", format!("series {name}: label __name__ inside braces")));
        }
        if v.iter().any(|l| *l.name == **n) {
            return Err(fail("invalid_labels", format!("series {name}: label name {n:?} is not unique")));
        }
        v.push(Label { name: job.interner.get(n), value: job.interner.get(val) });
    }
    let mut v = attach_target_labels(v, &target.labels, job.honor_labels);
    let labels = Labels::from_vec(std::mem::take(&mut v));
    let Some(labels) = job.metric_relabel.process(&labels) else { return Ok(None) };
    if labels.metric_name().is_empty() {
        return Err(fail("invalid_labels", format!("series {name}: no metric name (__name__) after relabeling")));
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

pub(super) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Self-metric handles for one target.
struct TargetMetrics {
    scraped: Arc<Counter>,
    up: Arc<Gauge>,
    telemetry: Telemetry,
    receiver: String,
    job: String,
    instance: String,
}

impl TargetMetrics {
    fn error(&self, reason: &str) {
        self.telemetry
            .counter(
                "infertel_receiver_scrape_errors_total",
                "Failed scrapes, by reason.",
                &[("receiver", &self.receiver), ("job", &self.job), ("instance", &self.instance), ("reason", reason)],
            )
            .inc();
    }
}

/// Why a scrape loop stops, which decides whether its series get
/// staleness markers, as in Prometheus: a target that went away (dropped by
/// discovery, its job removed) ends its series now; an agent that stops or
/// reloads writes none, so that a restarted or rolled agent continues every
/// series without a gap (Prometheus skips its end-of-run markers when the
/// scrape manager stops and for loops a reload replaces).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    Running,
    /// The target left discovery: staleness markers for its series.
    TargetGone,
    /// The agent stops: no markers.
    Shutdown,
    /// A reload replaces the loop: no markers; its state goes to the
    /// [`Handover`] for its successor.
    Handover,
}

/// Drives one target until `stop` leaves [`Stop::Running`].
pub struct ScrapeLoop {
    pub target: Target,
    pub job: Arc<JobSettings>,
    pub client: reqwest::Client,
    pub next: Arc<dyn Consumer>,
    /// Set while a memory_limiter downstream refuses: scrapes are skipped.
    pub backpressure: Backpressure,
    pub telemetry: Telemetry,
    /// Where the loop's state goes when a reload replaces it.
    pub handover: Arc<Handover>,
    /// The state of the loop this one replaces (taken from the handover
    /// when the loop is made, before the receiver ends what is unclaimed).
    pub resume: Option<Handed>,
}

impl ScrapeLoop {
    /// The target's identity across reloads.
    pub fn key(receiver: &str, target: &Target) -> LoopKey {
        (receiver.to_string(), target.job().to_string(), target.all_labels.clone(), target.url.clone())
    }

    /// Offset of this target inside the interval, so targets spread out.
    fn offset(&self) -> Duration {
        let iv = self.target.interval.as_nanos().max(1) as u64;
        Duration::from_nanos(self.target.hash() % iv)
    }

    pub async fn run(mut self, mut stop: watch::Receiver<Stop>) {
        let (job, instance) = (self.target.job().to_string(), self.target.instance().to_string());
        let m = TargetMetrics {
            scraped: self.telemetry.counter(
                "infertel_receiver_scraped_samples_total",
                "Samples scraped (before metric relabeling).",
                &[("receiver", &self.job.receiver), ("job", &job), ("instance", &instance)],
            ),
            up: self.telemetry.gauge(
                "infertel_receiver_target_up",
                "1 when the last scrape of the target succeeded.",
                &[("receiver", &self.job.receiver), ("job", &job), ("instance", &instance)],
            ),
            telemetry: self.telemetry.clone(),
            receiver: self.job.receiver.clone(),
            job,
            instance,
        };
        let iv = self.target.interval;
        // Align to the interval grid plus this target's offset.
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let phase = Duration::from_nanos((now.as_nanos() % iv.as_nanos().max(1)) as u64);
        let off = self.offset();
        let first_wait = if off >= phase { off - phase } else { iv - (phase - off) };
        let mut first = tokio::time::Instant::now() + first_wait;
        // A loop that replaces one (a reload changed the receiver) goes on
        // from its predecessor's last scrape, markers included, and on its
        // schedule: a scrape that fell due during the handover is made now.
        let mut cache = SeriesCache::default();
        if let Some(h) = self.resume.take() {
            cache = h.cache;
            if h.interval == iv {
                first = h.next_due;
            }
        }
        let mut ticker = tokio::time::interval_at(first, iv);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut next_due = first;
        let skipped = self.telemetry.counter(
            "infertel_receiver_skipped_scrapes_total",
            "Scrapes not made, by reason (memory_limit: a memory_limiter downstream refuses data); no up sample is produced for them.",
            &[("receiver", &m.receiver), ("job", &m.job), ("instance", &m.instance), ("reason", "memory_limit")],
        );
        let mut skipping = false;
        loop {
            tokio::select! {
                t = ticker.tick() => next_due = t + iv,
                _ = stop.changed() => break,
            }
            if *stop.borrow() != Stop::Running {
                break;
            }
            // Backpressure: not a failed scrape (no up=0, no stale markers),
            // a scrape not made.
            if self.backpressure.refusing() {
                skipped.inc();
                if !skipping {
                    tracing::warn!(receiver = %m.receiver, job = %m.job, instance = %m.instance, "skipping scrapes: a memory_limiter refuses data (memory above its soft limit)");
                    skipping = true;
                }
                continue;
            }
            if skipping {
                tracing::info!(receiver = %m.receiver, job = %m.job, instance = %m.instance, "scraping again: memory back under the limit ({} scrapes skipped so far)", skipped.get());
                skipping = false;
            }
            let mut buf = body_pool::take();
            let batch = self.scrape_once(&mut cache, &mut buf, &m).await;
            body_pool::give(buf);
            self.next.consume(batch).await;
        }
        let l = [("receiver", m.receiver.as_str()), ("job", m.job.as_str()), ("instance", m.instance.as_str())];
        self.telemetry.remove("infertel_receiver_target_up", &l);
        let why = *stop.borrow();
        match why {
            Stop::TargetGone => {
                // The target went away: its series and report series end now.
                let b = end_of_target(&mut cache, &self.target.labels, &self.job.external_labels, now_ms());
                self.next.consume(b).await;
            }
            Stop::Handover => {
                let h = Handed {
                    cache,
                    target_labels: self.target.labels.clone(),
                    external_labels: self.job.external_labels.clone(),
                    next_due,
                    interval: iv,
                };
                self.handover.put(Self::key(&self.job.receiver, &self.target), h);
            }
            // A closed channel (the receiver itself went away) is a shutdown.
            Stop::Running | Stop::Shutdown => {}
        }
    }

    async fn fetch(&self, buf: &mut Vec<u8>) -> Result<Option<String>, ScrapeFailure> {
        let t = &self.target;
        let mut req = self
            .client
            .get(&t.url)
            .header(ACCEPT, self.job.accept.as_deref().unwrap_or(ACCEPT_HEADER))
            .header("X-Prometheus-Scrape-Timeout-Seconds", format!("{}", t.timeout.as_secs_f64()));
        if !self.job.compression {
            req = req.header(reqwest::header::ACCEPT_ENCODING, "identity");
        }
        for (name, h) in &self.job.headers {
            for v in h.values.iter().chain(&h.secrets) {
                req = req.header(name.as_str(), v.as_str());
            }
            for f in &h.files {
                let v = crate::http::read_secret_file(f, &format!("http_headers {name} file"))
                    .map_err(|e| fail("auth", e))?;
                req = req.header(name.as_str(), v);
            }
        }
        if let Some(h) = self.job.auth.header().map_err(|e| fail("auth", e))? {
            req = req.header(AUTHORIZATION, h);
        }
        let fut = async {
            let mut resp = req.send().await.map_err(|e| classify(&e))?;
            let status = resp.status();
            if status != reqwest::StatusCode::OK {
                return Err(fail("http_status", format!("server returned HTTP status {status}")));
            }
            let ct =
                resp.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
            buf.clear();
            let limit = self.job.body_size_limit;
            // Room for the declared length in one allocation instead of
            // doubling; a claim past the limit fails below, and the header is
            // not trusted beyond 64 MiB.
            if let Some(n) = resp.content_length()
                && (limit == 0 || n <= limit)
            {
                buf.reserve(n.min(64 << 20) as usize);
            }
            while let Some(chunk) = resp.chunk().await.map_err(|e| classify(&e))? {
                // A body of exactly the limit fails too, as in Prometheus
                // (`n >= bodySizeLimit` after reading at most the limit).
                if limit > 0 && (buf.len() + chunk.len()) as u64 >= limit {
                    return Err(fail("body_size_limit", format!("body size limit exceeded: {limit} bytes or more")));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(ct)
        };
        match tokio::time::timeout(t.timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(fail("timeout", format!("scrape timed out after {:?}", t.timeout))),
        }
    }

    /// One scrape: the batch to forward (data, stale markers, report series).
    async fn scrape_once(&mut self, cache: &mut SeriesCache, buf: &mut Vec<u8>, m: &TargetMetrics) -> Batch {
        let start = Instant::now();
        let ts = now_ms();
        let mut series: Vec<Series> = Vec::with_capacity(cache.len() + 8);
        let mut metadata = Vec::new();
        let want_meta = cache.last_metadata.is_none_or(|t| t.elapsed() >= Duration::from_secs(60));
        let forced = self.job.forced_error.read().unwrap_or_else(|p| p.into_inner()).clone();
        let fetched = match forced {
            Some(e) => Err(fail("target_limit", e)),
            None => self.fetch(buf).await,
        };
        let result = match fetched {
            Ok(ct) => build_series(
                buf,
                ct.as_deref(),
                ts,
                &self.target,
                &self.job,
                cache,
                &mut series,
                &mut metadata,
                want_meta,
            ),
            Err(e) => Err(e),
        };
        let (up, stats) = match result {
            Ok(stats) => {
                if want_meta {
                    cache.last_metadata = Some(Instant::now());
                }
                m.scraped.add(stats.scraped);
                if stats.duplicates > 0 {
                    m.telemetry
                        .counter(
                            "infertel_receiver_dropped_samples_total",
                            "Scraped samples not forwarded, by reason (duplicate: the same series twice in one scrape).",
                            &[("receiver", &m.receiver), ("job", &m.job), ("instance", &m.instance), ("reason", "duplicate")],
                        )
                        .add(stats.duplicates);
                    if !cache.warned_duplicates {
                        cache.warned_duplicates = true;
                        tracing::warn!(
                            receiver = %self.job.receiver, job = %m.job, instance = %m.instance,
                            "{} samples dropped: the same series appears more than once in one scrape (the first is kept); logged once per target",
                            stats.duplicates
                        );
                    }
                }
                (1.0, stats)
            }
            Err(e) => {
                tracing::warn!(
                    receiver = %self.job.receiver, job = %m.job, instance = %m.instance, url = %self.target.url, reason = e.reason,
                    "scrape failed: {}", e.message
                );
                m.error(e.reason);
                series = cache.stale_all(ts);
                (0.0, ScrapeStats::default())
            }
        };
        m.up.set(up);
        let duration = start.elapsed().as_secs_f64();
        let report = [
            ("up", up),
            ("scrape_duration_seconds", duration),
            ("scrape_samples_scraped", stats.scraped as f64),
            ("scrape_samples_post_metric_relabeling", stats.post_relabel as f64),
            ("scrape_series_added", stats.series_added as f64),
        ];
        for (name, v) in report {
            series.push(Series {
                labels: report_labels(name, &self.target.labels, &self.job.external_labels),
                samples: vec![Sample { timestamp_ms: ts, value: v }],
            });
        }
        Batch { series, metadata }
    }
}

fn classify(e: &reqwest::Error) -> ScrapeFailure {
    let msg = describe_error(e);
    let reason = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connection"
    } else if e.is_decode() || e.is_body() {
        "body"
    } else {
        "http"
    };
    fail(reason, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_model::is_stale_nan;
    use infertel_relabel::RelabelConfig;

    fn target() -> Target {
        let labels = Labels::from_pairs([("job", "j"), ("instance", "h:1")]);
        Target {
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
        JobSettings {
            receiver: "prometheus".into(),
            honor_labels: false,
            honor_timestamps: true,
            sample_limit: 0,
            label_limit: 0,
            label_name_length_limit: 0,
            label_value_length_limit: 0,
            body_size_limit: 0,
            accept: None,
            compression: true,
            headers: Vec::new(),
            fallback_openmetrics: false,
            forced_error: Default::default(),
            metric_relabel: Relabeler::new(&rc).unwrap(),
            external_labels: vec![],
            auth: ScrapeAuth::None,
            interner: Interner::default(),
        }
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
    fn a_failed_scrape_forwards_nothing_and_marks_everything_stale() {
        let (j, mut c) = (job(""), SeriesCache::default());
        scrape("a 1\nb 2\n", 1000, &j, &mut c).unwrap();
        let e = scrape("a 1\nb{ 2\n", 2000, &j, &mut c).unwrap_err();
        assert_eq!(e.reason, "parse");
        let stale = c.stale_all(2000);
        assert_eq!(stale.len(), 2, "the failed scrape left the cache as it was");
        assert!(c.is_empty());
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
    fn label_sets_are_interned_across_scrapes() {
        let (j, mut c) = (job(""), SeriesCache::default());
        let (a, _) = scrape("a{x=\"1\"} 1\n", 1, &j, &mut c).unwrap();
        let (b, _) = scrape("a{x=\"1\"} 2\n", 2, &j, &mut c).unwrap();
        assert!(
            std::ptr::eq(a[0].labels.as_slice(), b[0].labels.as_slice()),
            "the second scrape reuses the first's Labels"
        );
    }
}

#[cfg(test)]
mod interner_tests {
    use super::*;

    #[test]
    fn interned_strings_are_shared_and_unused_ones_purged() {
        let i = Interner::default();
        let a = i.get("model_name");
        let b = i.get("model_name");
        assert!(Arc::ptr_eq(&a, &b));
        // Churn: many values nobody holds on to; the set stays bounded.
        for n in 0..20_000 {
            let _ = i.get(&format!("pod-{n}"));
        }
        assert!(i.len() <= 8193, "{}", i.len());
        assert!(Arc::ptr_eq(&a, &i.get("model_name")), "a string still in use survives a purge");
    }
}

/// Response bodies are read into buffers from one small shared pool rather
/// than a buffer per target: only scrapes in progress hold one, so this
/// memory follows how many scrapes run at once (few: they are spread over
/// the interval), not how many targets there are. With 100 targets of
/// 140 KB, per-target buffers held 25 MB for nothing.
mod body_pool {
    use std::sync::Mutex;

    /// Buffers kept for reuse; more are allocated when more scrapes overlap.
    const KEEP: usize = 8;
    /// A buffer that grew past this (one huge target) is not kept.
    const KEEP_BYTES: usize = 16 << 20;

    static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

    pub(super) fn take() -> Vec<u8> {
        POOL.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default()
    }

    pub(super) fn give(mut buf: Vec<u8>) {
        if buf.capacity() > KEEP_BYTES {
            return;
        }
        buf.clear();
        let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < KEEP {
            pool.push(buf);
        }
    }
}
