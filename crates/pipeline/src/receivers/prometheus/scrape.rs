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
//!
//! `job.rs` holds what a job's targets share, `fetch.rs` how a body is
//! fetched, `series.rs` how a body becomes series; this file drives one target: schedule, fetch, report
//! series, and how the loop ends (see [`Stop`]).

use super::fetch::{Direct, fetch};
use super::handover::{Handed, Handover, LoopKey, end_of_target};
pub use super::job::{ACCEPT_HEADER, Interner, JobSettings, ScrapeAuth, base64_decode, base64_encode};
use super::series::fail;
pub use super::series::{
    REPORT_SERIES, ScrapeFailure, ScrapeStats, SeriesCache, attach_target_labels, build_series, report_labels,
};
use super::target::Target;
use crate::consumer::Consumer;
use crate::processors::memory_limiter::Backpressure;
use crate::telemetry::{Counter, Gauge, Telemetry};
use infertel_model::{Batch, Labels, Sample, Series};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

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
    pub client: Arc<crate::http::LazyClient>,
    pub next: Arc<dyn Consumer>,
    /// Set while a memory_limiter downstream refuses: scrapes are skipped.
    pub backpressure: Backpressure,
    pub telemetry: Telemetry,
    /// Where the loop's state goes when a reload replaces it.
    pub handover: Arc<Handover>,
    /// The state of the loop this one replaces (taken from the handover
    /// when the loop is made, before the receiver ends what is unclaimed).
    pub resume: Option<Handed>,
    /// What the status page shows of this target.
    pub status: Arc<crate::status::targets::TargetStatus>,
    /// The label sets of the report series (`up`, `scrape_*`), built on
    /// first use: the target and job of a loop do not change, and one
    /// label set shared by every scrape is what lets downstream caches
    /// (processors, the exporters' encoded labels) know the series again
    /// by identity.
    pub report_labels: Vec<(&'static str, Labels)>,
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
        // A plain-http target's own connection (see `fetch.rs`).
        let mut direct = Direct::for_target(&self.target.url, &self.job);
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
            let batch = self.scrape_once(&mut cache, &mut direct, &mut buf, &m).await;
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

    /// One scrape: the batch to forward (data, stale markers, report series).
    async fn scrape_once(
        &mut self,
        cache: &mut SeriesCache,
        direct: &mut Option<Direct>,
        buf: &mut Vec<u8>,
        m: &TargetMetrics,
    ) -> Batch {
        let start = Instant::now();
        let ts = now_ms();
        let mut series: Vec<Series> = Vec::with_capacity(cache.len() + 8);
        let mut metadata = Vec::new();
        let want_meta = cache.last_metadata.is_none_or(|t| t.elapsed() >= Duration::from_secs(60));
        // Traces nobody looks at any more close here, once per scrape.
        self.job.status.tracer.expire();
        let forced = self.job.forced_error.read().unwrap_or_else(|p| p.into_inner()).clone();
        let fetched = match forced {
            Some(e) => Err(fail("target_limit", e)),
            None => fetch(&self.client, direct, &self.target, &self.job, buf).await,
        };
        cache.deadline = Some(start + self.target.timeout);
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
        let mut failure: Option<(&'static str, String)> = None;
        let (up, stats) = match result {
            Ok(stats) => {
                if want_meta {
                    cache.last_metadata = Some(Instant::now());
                }
                m.scraped.add(stats.scraped);
                let dropped = |reason: &str, n: u64| {
                    if n > 0 {
                        m.telemetry
                            .counter(
                                "infertel_receiver_dropped_samples_total",
                                "Scraped samples not forwarded, by reason (duplicate: the same series twice in one scrape; out_of_order: a timestamp from the target not after the last one forwarded).",
                                &[("receiver", &m.receiver), ("job", &m.job), ("instance", &m.instance), ("reason", reason)],
                            )
                            .add(n);
                    }
                };
                dropped("out_of_order", stats.out_of_order);
                dropped("duplicate", stats.duplicates);
                if stats.duplicates > 0 && !cache.warned_duplicates {
                    cache.warned_duplicates = true;
                    tracing::warn!(
                        receiver = %self.job.receiver, job = %m.job, instance = %m.instance,
                        "{} samples dropped: the same series appears more than once in one scrape (the first is kept); logged once per target",
                        stats.duplicates
                    );
                }
                (1.0, stats)
            }
            Err(e) => {
                tracing::warn!(
                    receiver = %self.job.receiver, job = %m.job, instance = %m.instance, url = %self.target.url, reason = e.reason,
                    "scrape failed: {}", e.message
                );
                m.error(e.reason);
                series = cache.failed(ts);
                if self.job.status.tracer.active() {
                    let who = format!("{}/{}", m.job, m.instance);
                    for s in &series {
                        for t in self.job.status.tracer.following(&s.labels) {
                            t.marked(
                                &who,
                                &s.labels,
                                crate::status::trace::ScrapeFate::ScrapeFailed(e.message.clone()),
                            );
                        }
                    }
                }
                failure = Some((e.reason, e.message));
                (0.0, e.stats.unwrap_or_default())
            }
        };
        m.up.set(up);
        let duration = start.elapsed().as_secs_f64();
        self.status.record(
            SystemTime::now(),
            start.elapsed(),
            failure.as_ref().map(|(r, msg)| (*r, msg.as_str())),
            [stats.scraped, stats.post_relabel, stats.series_added],
        );
        let values = [up, duration, stats.scraped as f64, stats.post_relabel as f64, stats.series_added as f64];
        let mut report: Vec<(&'static str, f64)> = REPORT_SERIES.into_iter().zip(values).collect();
        if self.job.extra_scrape_metrics {
            // Prometheus' extra-scrape-metrics: the body size of a success,
            // -1 when the body size limit failed the scrape, 0 otherwise.
            let body = match &failure {
                None => buf.len() as f64,
                Some(("body_size_limit", _)) => -1.0,
                Some(_) => 0.0,
            };
            report.push(("scrape_timeout_seconds", self.target.timeout.as_secs_f64()));
            report.push(("scrape_sample_limit", self.job.sample_limit as f64));
            report.push(("scrape_body_size_bytes", body));
            cache.extra_report = true;
        }
        for (name, v) in report {
            let labels = match self.report_labels.iter().find(|(n, _)| *n == name) {
                Some((_, l)) => l.clone(),
                None => {
                    let l = report_labels(name, &self.target.labels, &self.job.external_labels);
                    self.report_labels.push((name, l.clone()));
                    l
                }
            };
            series.push(Series { labels, samples: infertel_model::samples![Sample { timestamp_ms: ts, value: v }] });
        }
        Batch { series, metadata }
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
