//! The persistent side of the sending queue (`sending_queue.storage:
//! file_storage/NAME`): each consumer's FIFO is an `infertel-wal` segment
//! log instead of memory. A record is one batch (one scrape's share of that
//! consumer) in the naming mode it was queued in:
//!
//! ```text
//! head (16 bytes): samples u32 LE | naming u8 | 0 0 0 | queued_at_ms i64 LE
//! body: snappy(series count u32, per series: label count u16, (name, value)
//!       as u32-length-prefixed UTF-8, sample count u32, (ts i64, value f64
//!       bits) each; metadata count u32, per family: family, kind u8, help, unit)
//! ```
//!
//! A consumer reads up to [`READ_BYTES`] of records, delivers them as one
//! merged batch and acknowledges them once the exporter has accounted for
//! every sample (sent or dropped for a reason): after a crash only that
//! batch is delivered again (at least once, at most one batch per consumer
//! duplicated).

use infertel_model::{Batch, Label, Labels, Metadata, MetricType, Sample, Series};
use infertel_otlp::Naming;
use infertel_wal::{HEAD, Log, Options, Position, Recovery};
use std::io;
use std::path::Path;

/// Payload bytes a consumer reads (and delivers) at once.
pub const READ_BYTES: usize = 4 << 20;

/// A `file_storage` extension's settings as one queue sees them.
#[derive(Clone, Debug)]
pub struct Storage {
    pub directory: std::path::PathBuf,
    /// Budget of one consumer's log (the extension's `max_bytes` shared
    /// by the consumers of every queue using it).
    pub max_bytes: u64,
    pub fsync: Fsync,
}

/// When the queue's writes are forced to the disk (`file_storage.fsync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fsync {
    /// fdatasync after every append and acknowledgement: a power loss loses
    /// nothing acknowledged to the scrape; slowest.
    Always,
    /// fdatasync at most once a second: a power loss loses at most the
    /// last second of scrapes.
    #[default]
    Interval,
    /// Never forced: a power loss loses what the page cache held (a process
    /// crash loses nothing either way).
    Never,
}

/// How often [`Fsync::Interval`] syncs.
pub const FSYNC_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl<'de> serde::Deserialize<'de> for Fsync {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(Fsync::Always),
            Raw::Bool(false) => Ok(Fsync::Never),
            Raw::Word(w) => match w.as_str() {
                "always" => Ok(Fsync::Always),
                "interval" => Ok(Fsync::Interval),
                "never" => Ok(Fsync::Never),
                other => {
                    Err(serde::de::Error::custom(format!("fsync: {other:?} is not one of always, interval, never")))
                }
            },
        }
    }
}

fn naming_code(n: Naming) -> u8 {
    match n {
        Naming::Otel => 0,
        Naming::Preserve => 1,
    }
}

fn naming_of(c: u8) -> Naming {
    if c == 1 { Naming::Preserve } else { Naming::Otel }
}

const KINDS: [MetricType; 8] = [
    MetricType::Counter,
    MetricType::Gauge,
    MetricType::Histogram,
    MetricType::GaugeHistogram,
    MetricType::Summary,
    MetricType::Info,
    MetricType::StateSet,
    MetricType::Unknown,
];

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Encodes a batch as a record payload.
pub fn encode(batch: &Batch, naming: Naming, queued_at_ms: i64) -> Vec<u8> {
    let mut body = Vec::with_capacity(64 + batch.series.len() * 64);
    body.extend_from_slice(&(batch.series.len() as u32).to_le_bytes());
    for s in &batch.series {
        body.extend_from_slice(&(s.labels.len() as u16).to_le_bytes());
        for l in s.labels.iter() {
            put_str(&mut body, &l.name);
            put_str(&mut body, &l.value);
        }
        body.extend_from_slice(&(s.samples.len() as u32).to_le_bytes());
        for p in &s.samples {
            body.extend_from_slice(&p.timestamp_ms.to_le_bytes());
            body.extend_from_slice(&p.value.to_bits().to_le_bytes());
        }
    }
    body.extend_from_slice(&(batch.metadata.len() as u32).to_le_bytes());
    for m in &batch.metadata {
        put_str(&mut body, &m.family);
        body.push(KINDS.iter().position(|k| *k == m.kind).unwrap_or(7) as u8);
        put_str(&mut body, &m.help);
        put_str(&mut body, &m.unit);
    }
    let compressed = snap::raw::Encoder::new().compress_vec(&body).unwrap_or_default();
    let mut out = Vec::with_capacity(HEAD + compressed.len());
    out.extend_from_slice(&(batch.sample_count() as u32).to_le_bytes());
    out.extend_from_slice(&[naming_code(naming), 0, 0, 0]);
    out.extend_from_slice(&queued_at_ms.to_le_bytes());
    out.extend_from_slice(&compressed);
    out
}

/// What a record's head says: samples, naming, queued-at time.
pub fn head(h: &[u8; HEAD]) -> (u32, Naming, i64) {
    (
        u32::from_le_bytes(h[..4].try_into().unwrap_or_default()),
        naming_of(h[4]),
        i64::from_le_bytes(h[8..16].try_into().unwrap_or_default()),
    )
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "queue record: truncated body"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u16(&mut self) -> io::Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap_or_default()))
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default()))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default()))
    }
    fn str(&mut self) -> io::Result<std::sync::Arc<str>> {
        let n = self.u32()? as usize;
        std::str::from_utf8(self.take(n)?)
            .map(Into::into)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "queue record: bad UTF-8"))
    }
}

/// Decodes a record payload.
pub fn decode(payload: &[u8]) -> io::Result<(Batch, Naming)> {
    if payload.len() < HEAD {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "queue record: short"));
    }
    let (_, naming, _) = head(payload[..HEAD].try_into().unwrap_or(&[0; HEAD]));
    let body = snap::raw::Decoder::new()
        .decompress_vec(&payload[HEAD..])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("queue record: {e}")))?;
    let mut r = Reader(&body);
    let n = r.u32()? as usize;
    let mut series = Vec::with_capacity(n.min(1 << 20));
    for _ in 0..n {
        let nl = r.u16()? as usize;
        let mut labels = Vec::with_capacity(nl);
        for _ in 0..nl {
            let name = r.str()?;
            let value = r.str()?;
            labels.push(Label::new(name, value));
        }
        let ns = r.u32()? as usize;
        let mut samples = infertel_model::Samples::with_capacity(ns.min(1 << 20));
        for _ in 0..ns {
            let timestamp_ms = r.u64()? as i64;
            let value = f64::from_bits(r.u64()?);
            samples.push(Sample { timestamp_ms, value });
        }
        series.push(Series { labels: Labels::from_vec(labels), samples });
    }
    let nm = r.u32()? as usize;
    let mut metadata = Vec::with_capacity(nm.min(1 << 16));
    for _ in 0..nm {
        let family = r.str()?;
        let kind = KINDS.get(r.take(1)?[0] as usize).copied().unwrap_or_default();
        let help = r.str()?;
        let unit = r.str()?;
        metadata.push(Metadata { family, kind, help, unit });
    }
    Ok((Batch { series, metadata }, naming))
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or_default()
}

/// One consumer's persistent FIFO.
pub struct DiskQueue {
    log: Log,
    fsync: Fsync,
    synced: std::time::Instant,
}

/// A merged batch read from disk, to acknowledge after delivery.
pub struct Taken {
    pub batch: Batch,
    pub naming: Naming,
    pub end: Position,
    pub records: usize,
    /// Samples of records found corrupt when read (skipped, to count as
    /// dropped, reason `corrupt`).
    pub corrupt_samples: u64,
}

/// The sample count a corrupt record's head claims, when plausible (the
/// head is inside the damaged frame, so it may itself be damaged).
pub fn corrupt_samples(heads: &[[u8; HEAD]]) -> u64 {
    heads.iter().map(|h| head(h).0 as u64).filter(|n| *n <= 10_000_000).sum()
}

impl DiskQueue {
    pub fn open(dir: &Path, max_bytes: u64, fsync: Fsync) -> io::Result<(DiskQueue, Recovery)> {
        // Small enough that dropping one segment frees a fraction of the budget.
        let segment_bytes = (max_bytes / 8).clamp(4 << 10, 64 << 20);
        let always = fsync == Fsync::Always;
        let (log, rec) = Log::open(dir, Options { segment_bytes, max_bytes, fsync: always })?;
        Ok((DiskQueue { log, fsync, synced: std::time::Instant::now() }, rec))
    }

    /// Appends a batch; returns the samples of the oldest records dropped
    /// to stay within the budget (or to make room on a full disk).
    pub fn push(&mut self, batch: &Batch, naming: Naming) -> io::Result<u64> {
        let evicted = self.log.append(&encode(batch, naming, now_ms()))?;
        self.sync_if_due();
        Ok(evicted.iter().map(|r| head(&r.head).0 as u64).sum())
    }

    /// With [`Fsync::Interval`], forces what was written to the disk once
    /// [`FSYNC_INTERVAL`] has passed since the last time (called on append
    /// and by the queue's once-a-second gauge loop).
    pub fn sync_if_due(&mut self) {
        if self.fsync == Fsync::Interval && self.synced.elapsed() >= FSYNC_INTERVAL {
            self.synced = std::time::Instant::now();
            if let Err(e) = self.log.sync() {
                tracing::warn!("persistent queue: fsync failed: {e}");
            }
        }
    }

    /// The next records of one naming mode, merged.
    pub fn take(&mut self) -> io::Result<Option<Taken>> {
        let got = self.log.read(READ_BYTES, |a, b| a[4] == b[4])?;
        let corrupt = self.log.take_corrupt();
        let corrupt_samples: u64 = corrupt.iter().map(|r| head(&r.head).0 as u64).sum();
        let last_good = got.last().map(|(r, _)| r.end());
        let last_bad = corrupt.last().map(|r| r.end());
        // Past a corrupt record too, so that it is acknowledged, not read forever.
        let Some(end) = last_good.into_iter().chain(last_bad).max() else {
            return Ok(None);
        };
        if !corrupt.is_empty() {
            tracing::error!(
                "persistent queue: {} records ({corrupt_samples} samples) failed their checksum when read back: skipped (a disk fault)",
                corrupt.len()
            );
        }
        let records = got.len();
        let mut out = Batch::default();
        let mut naming = Naming::Otel;
        for (info, payload) in got {
            match decode(&payload) {
                Ok((b, n)) => {
                    naming = n;
                    out.series.extend(b.series);
                    out.metadata.extend(b.metadata);
                }
                // Checksummed, so this is a bug or a format change: say so, skip it.
                Err(e) => tracing::error!(
                    "persistent queue: skipping an undecodable record ({} samples): {e}",
                    head(&info.head).0
                ),
            }
        }
        Ok(Some(Taken { batch: out, naming, end, records, corrupt_samples }))
    }

    pub fn ack(&mut self, end: Position) -> io::Result<()> {
        self.log.ack(end)
    }

    /// Reads again what was taken but not acknowledged.
    pub fn rewind(&mut self) {
        self.log.rewind()
    }

    pub fn bytes(&self) -> u64 {
        self.log.bytes()
    }

    /// Unacknowledged samples and the oldest one's queued-at time.
    pub fn backlog(&self) -> (u64, Option<i64>) {
        let mut n = 0;
        let mut oldest = None;
        for r in self.log.unacked() {
            let (s, _, t) = head(&r.head);
            n += s as u64;
            oldest.get_or_insert(t);
        }
        (n, oldest)
    }

    pub fn unread_records(&self) -> usize {
        self.log.unread_records()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> Batch {
        Batch {
            series: vec![
                Series {
                    labels: Labels::from_pairs([("__name__", "up"), ("job", "a")]),
                    samples: infertel_model::samples![
                        Sample { timestamp_ms: 1, value: 1.0 },
                        Sample { timestamp_ms: 2, value: infertel_model::stale_nan() },
                    ],
                },
                Series {
                    labels: Labels::from_pairs([("__name__", "x_total"), ("le", "+Inf")]),
                    samples: infertel_model::samples![Sample { timestamp_ms: -5, value: -0.5 }],
                },
            ],
            metadata: vec![Metadata {
                family: "x".into(),
                kind: MetricType::Counter,
                help: "h é".into(),
                unit: "".into(),
            }],
        }
    }

    #[test]
    fn codec_round_trips_exactly_including_stale_markers() {
        let b = batch();
        let p = encode(&b, Naming::Preserve, 42);
        assert_eq!(head(p[..HEAD].try_into().unwrap()), (3, Naming::Preserve, 42));
        let (d, n) = decode(&p).unwrap();
        assert_eq!(n, Naming::Preserve);
        assert_eq!(d.series.len(), 2);
        assert_eq!(d.series[0].labels, b.series[0].labels);
        assert!(infertel_model::is_stale_nan(d.series[0].samples[1].value));
        assert_eq!(d.series[1], b.series[1]);
        assert_eq!(d.metadata, b.metadata);
        assert!(decode(&p[..p.len() - 3]).is_err());
    }

    #[test]
    fn disk_queue_merges_by_naming_and_replays_unacknowledged() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut q, _) = DiskQueue::open(d.path(), 1 << 20, Fsync::Never).unwrap();
            q.push(&batch(), Naming::Otel).unwrap();
            q.push(&batch(), Naming::Otel).unwrap();
            q.push(&batch(), Naming::Preserve).unwrap();
            let t = q.take().unwrap().unwrap();
            assert_eq!((t.records, t.batch.sample_count(), t.naming), (2, 6, Naming::Otel));
            q.ack(t.end).unwrap();
            let t = q.take().unwrap().unwrap();
            assert_eq!((t.records, t.naming), (1, Naming::Preserve));
            assert_eq!(q.backlog().0, 3);
            // Not acknowledged: a crash here replays it.
        }
        let (mut q, rec) = DiskQueue::open(d.path(), 1 << 20, Fsync::Never).unwrap();
        assert_eq!(rec.records, 1);
        let t = q.take().unwrap().unwrap();
        assert_eq!((t.records, t.naming, t.batch.sample_count()), (1, Naming::Preserve, 3));
        assert!(q.take().unwrap().is_none());
    }
}
