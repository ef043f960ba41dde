//! The Prometheus Remote-Write 1.0 codec.
//!
//! * [`Encoder`] turns model [`Series`] and [`Metadata`] into the HTTP body a
//!   remote-write receiver expects: a `prometheus.WriteRequest` protobuf,
//!   snappy **block** compressed (the framed format is forbidden by the spec).
//!   It writes the protobuf directly from the borrowed model types, without
//!   building an owned `WriteRequest`, and reuses its buffers across calls:
//!   this is the agent's hot path.
//! * [`decode`] and [`to_model`] go the other way, for tests and for a test
//!   receiver.
//! * [`series_size`] / [`metadata_size`] give the uncompressed bytes a series
//!   adds to a request, so an exporter can split batches by size.
//!
//! The prost message types in [`proto`] are the reference: a test proves the
//! hand encoding is byte-identical to prost's encoding of the same data.

mod body;
pub mod proto;

use infertel_model::{self as model, Labels, Metadata, Series};
use prost::Message;

pub use proto::{MetricMetadata, TimeSeries, WriteRequest};

/// `Content-Type` of a Remote-Write 1.0 request.
pub const CONTENT_TYPE: &str = "application/x-protobuf";
/// `Content-Encoding` of a Remote-Write request (snappy block format).
pub const CONTENT_ENCODING: &str = "snappy";
/// Name of the protocol version header.
pub const VERSION_HEADER: &str = "X-Prometheus-Remote-Write-Version";
/// Protocol version sent in [`VERSION_HEADER`] for Remote-Write 1.0.
pub const VERSION: &str = "0.1.0";

/// Upper bound [`decode`] accepts for the decompressed body, so a hostile
/// snappy header cannot make the receiver allocate gigabytes.
pub const DEFAULT_MAX_DECODED_LEN: usize = 256 << 20;

/// Why a body could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("invalid snappy block: {0}")]
    Snappy(#[from] snap::Error),
    #[error("decompressed body would be {len} bytes, over the {limit} byte limit")]
    TooLarge { len: usize, limit: usize },
    #[error("invalid protobuf WriteRequest: {0}")]
    Protobuf(#[from] prost::DecodeError),
}

/// Why a body could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// Snappy's block format cannot hold more than about 4 GiB.
    #[error("snappy compression failed: {0}")]
    Snappy(#[from] snap::Error),
}

// Protobuf wire types.
const WT_VARINT: u8 = 0;
const WT_FIXED64: u8 = 1;
const WT_LEN: u8 = 2;

// Field keys (tag << 3 | wire type); every tag used here is < 16, so a key is
// one byte.
const WRITE_REQUEST_TIMESERIES: u8 = 1 << 3 | WT_LEN;
const WRITE_REQUEST_METADATA: u8 = 3 << 3 | WT_LEN;
const TIMESERIES_SAMPLES: u8 = 2 << 3 | WT_LEN;
const SAMPLE_VALUE: u8 = 1 << 3 | WT_FIXED64;
const SAMPLE_TIMESTAMP: u8 = 2 << 3 | WT_VARINT;
const METADATA_TYPE: u8 = 1 << 3 | WT_VARINT;
const METADATA_FAMILY: u8 = 2 << 3 | WT_LEN;
const METADATA_HELP: u8 = 4 << 3 | WT_LEN;
const METADATA_UNIT: u8 = 5 << 3 | WT_LEN;

#[inline]
fn varint_len(v: u64) -> usize {
    // 1 byte per 7 bits, at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Size of a length-delimited field with a one-byte key and `len` bytes of body.
#[inline]
fn len_field(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// Proto3 omits empty strings; so does prost, and so must we to stay identical.
#[inline]
fn string_field_size(s: &str) -> usize {
    if s.is_empty() { 0 } else { len_field(s.len()) }
}

#[inline]
fn put_string_field(buf: &mut Vec<u8>, key: u8, s: &str) {
    if !s.is_empty() {
        buf.push(key);
        put_varint(buf, s.len() as u64);
        buf.extend_from_slice(s.as_bytes());
    }
}

/// Body size of one `Sample` message. Proto3 (and so prost and Prometheus'
/// gogo code) omits a value equal to 0.0, which includes -0.0: the sign of a
/// negative zero is lost on the wire exactly as it is with Prometheus.
#[inline]
fn sample_body_size(s: &model::Sample) -> usize {
    let v = if s.value != 0.0 { 9 } else { 0 };
    let t = if s.timestamp_ms != 0 { 1 + varint_len(s.timestamp_ms as u64) } else { 0 };
    v + t
}

/// Body size of one `TimeSeries` message.
fn series_body_size(series: &Series) -> usize {
    let labels: usize = series.labels.iter().map(|l| l.wire().len()).sum();
    labels + samples_size(&series.samples)
}

/// Bytes the `samples` fields of a `TimeSeries` take.
#[inline]
fn samples_size(samples: &[model::Sample]) -> usize {
    samples.iter().map(|s| len_field(sample_body_size(s))).sum()
}

/// Uncompressed bytes `series` adds to a `WriteRequest` (key, length prefix
/// and body), so `sum(series_size) + sum(metadata_size)` is the protobuf size.
pub fn series_size(series: &Series) -> usize {
    len_field(series_body_size(series))
}

fn metadata_type(kind: model::MetricType) -> proto::MetricType {
    match kind {
        model::MetricType::Counter => proto::MetricType::Counter,
        model::MetricType::Gauge => proto::MetricType::Gauge,
        model::MetricType::Histogram => proto::MetricType::Histogram,
        model::MetricType::GaugeHistogram => proto::MetricType::GaugeHistogram,
        model::MetricType::Summary => proto::MetricType::Summary,
        model::MetricType::Info => proto::MetricType::Info,
        model::MetricType::StateSet => proto::MetricType::StateSet,
        model::MetricType::Unknown => proto::MetricType::Unknown,
    }
}

fn metadata_body_size(m: &Metadata) -> usize {
    let t = metadata_type(m.kind) as i32;
    let t = if t != 0 { 1 + varint_len(t as u64) } else { 0 };
    t + string_field_size(&m.family) + string_field_size(&m.help) + string_field_size(&m.unit)
}

/// Uncompressed bytes one metadata entry adds to a `WriteRequest`.
pub fn metadata_size(metadata: &Metadata) -> usize {
    len_field(metadata_body_size(metadata))
}

/// Uncompressed protobuf size of a whole request.
pub fn encoded_size_hint(series: &[Series], metadata: &[Metadata]) -> usize {
    series.iter().map(series_size).sum::<usize>() + metadata.iter().map(metadata_size).sum::<usize>()
}

/// Writes the `WriteRequest` protobuf for `series` and `metadata` to `buf`
/// (appending), straight from the borrowed model types.
pub fn encode_protobuf(buf: &mut Vec<u8>, series: &[Series], metadata: &[Metadata]) {
    // No up-front `reserve(encoded_size_hint(..))`: that is a full extra pass,
    // and the Encoder's buffer keeps its capacity between calls anyway.
    for s in series {
        put_series(buf, &s.labels, &[], &s.samples);
    }
    for m in metadata {
        buf.push(WRITE_REQUEST_METADATA);
        put_varint(buf, metadata_body_size(m) as u64);
        let t = metadata_type(m.kind) as i32;
        if t != 0 {
            buf.push(METADATA_TYPE);
            put_varint(buf, t as u64);
        }
        put_string_field(buf, METADATA_FAMILY, &m.family);
        put_string_field(buf, METADATA_HELP, &m.help);
        put_string_field(buf, METADATA_UNIT, &m.unit);
    }
}

/// Appends one `TimeSeries`: its label fields, each label's encoding as
/// the label keeps it ([`model::Label::wire`]), with each of `external` the
/// set lacks in name order, then the samples.
#[inline]
fn put_series(buf: &mut Vec<u8>, labels: &Labels, external: &[model::Label], samples: &[model::Sample]) {
    let mut fields = 0;
    for_each_label(labels, external, |l| fields += l.wire().len());
    buf.push(WRITE_REQUEST_TIMESERIES);
    put_varint(buf, (fields + samples_size(samples)) as u64);
    put_label_fields(buf, labels, external, fields);
    for sample in samples {
        buf.push(TIMESERIES_SAMPLES);
        // At most 1 + 8 + 1 + 10 bytes: a one-byte length.
        buf.push(sample_body_size(sample) as u8);
        if sample.value != 0.0 {
            buf.push(SAMPLE_VALUE);
            buf.extend_from_slice(&sample.value.to_bits().to_le_bytes());
        }
        if sample.timestamp_ms != 0 {
            buf.push(SAMPLE_TIMESTAMP);
            put_varint(buf, sample.timestamp_ms as u64);
        }
    }
}

/// Appends the encodings of the labels `for_each_label` gives, `fields`
/// bytes in all. Each is copied in whole chunks of [`model::WIRE_CHUNK`]
/// bytes, its zero padding included, and the next one starts where its
/// encoding ends, over that padding: short copies without a call to
/// `memcpy` each (with one call per label, the request benchmark took
/// 104 µs; with this, 86 µs).
#[inline]
fn put_label_fields(buf: &mut Vec<u8>, labels: &Labels, external: &[model::Label], fields: usize) {
    // Room for the last chunk's padding too.
    buf.reserve(fields + model::WIRE_CHUNK);
    let start = buf.len();
    let room = buf.capacity() - start;
    let base = buf.spare_capacity_mut().as_mut_ptr().cast::<u8>();
    let mut at = 0;
    for_each_label(labels, external, |l| {
        let chunks = l.wire_chunks();
        // Checked, not assumed: `fields` came from the same labels, so this
        // holds, and a slip panics instead of writing out of bounds.
        assert!(at + chunks.len() * model::WIRE_CHUNK <= room, "label fields longer than counted");
        // SAFETY: in bounds of the spare capacity, checked just above.
        let mut d = unsafe { base.add(at) }.cast::<[u8; model::WIRE_CHUNK]>();
        for c in chunks {
            // SAFETY: as above; unaligned, as the output is bytes.
            unsafe {
                d.write_unaligned(*c);
                d = d.add(1);
            }
        }
        at += l.wire().len();
    });
    assert_eq!(at, fields, "label fields of another length than counted");
    // SAFETY: the `fields` bytes after `start` were all written above (each
    // encoding in full; its padding overwritten by the next or left past
    // the end, within the reserved room).
    unsafe { buf.set_len(start + fields) }
}

/// Calls `f` with each label that goes on the wire for `labels` with the
/// external labels `external` (sorted by name): the set's own, and each
/// external one whose name the set lacks, as Prometheus adds
/// `external_labels` (a label of the series wins), in name order.
///
/// An empty value means "absent" and must not be sent; a set never holds
/// one ([`Labels::from_vec`], its only constructor, drops them), and the
/// external labels are filtered once in [`Encoder::with_external_labels`].
/// It is not checked again here: that reads each value's string, a cache
/// miss per label, and was about 40% of the request build under `perf`.
#[inline]
fn for_each_label<'a>(labels: &'a Labels, external: &'a [model::Label], mut f: impl FnMut(&'a model::Label)) {
    if external.is_empty() {
        labels.iter().for_each(f);
        return;
    }
    let mut ext = external.iter().peekable();
    for l in labels.iter() {
        while let Some(e) = ext.next_if(|e| e.name.as_bytes() <= l.name.as_bytes()) {
            if e.name != l.name {
                f(e);
            }
        }
        f(l);
    }
    ext.for_each(f);
}

/// `labels` with each of `external` whose name it lacks, as Prometheus adds
/// `external_labels` (a label of the series wins over an external one).
pub fn with_external(labels: &Labels, external: &[model::Label]) -> Labels {
    if external.iter().all(|e| labels.get(&e.name).is_some()) {
        return labels.clone();
    }
    let mut v: Vec<model::Label> = labels.iter().cloned().collect();
    v.extend(external.iter().filter(|e| labels.get(&e.name).is_none()).cloned());
    Labels::from_vec(v)
}

/// Starts loading what [`Encoder::put`] reads of the series a few places
/// ahead of `i`: the label set 16 ahead, the labels it points to 8 ahead
/// (their addresses are in the set, loaded by then). The sets were last
/// touched when scraped, and a request reads the labels of thousands of
/// sets, so without this each is a cache miss (the request build was 12%
/// of the agent's CPU under `perf`, most of it waiting for these loads).
#[inline]
fn prefetch_ahead(series: &[Series], i: usize) {
    if let Some(s) = series.get(i + 16) {
        s.labels.prefetch();
    }
    if let Some(s) = series.get(i + 8) {
        s.labels.prefetch_labels();
    }
}

/// Buffers larger than this are shrunk once [`SHRINK_AFTER`] requests in a
/// row needed under a quarter of them; below it they are kept whatever their
/// use, to avoid reallocating.
pub const SHRINK_ABOVE: usize = 1 << 20;

/// How many requests in a row must need under a quarter of a large buffer
/// before it is shrunk. Shrinking at the first small request made buffers
/// go back and forth when batch sizes vary: each regrowth zero-fills and
/// faults in fresh pages (8% of the agent's CPU under `perf` in one run).
pub const SHRINK_AFTER: u32 = 64;

/// Reusable Remote-Write 1.0 body encoder. Keep one per sending shard: the
/// buffers and snappy's hash table are reused, and the protobuf is
/// compressed as it is written (see [`body`]).
pub struct Encoder {
    body: body::Body,
    /// Added to every series' labels (see [`Encoder::with_external_labels`]),
    /// sorted by name.
    external: Vec<model::Label>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (pending, compressed) = self.body.buffer_sizes();
        f.debug_struct("Encoder").field("pending_capacity", &pending).field("compressed_capacity", &compressed).finish()
    }
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    pub fn new() -> Self {
        Encoder { body: body::Body::new(), external: Vec::new() }
    }

    /// An encoder that adds `external` to every series' labels (each one a
    /// series lacks), as Prometheus adds `external_labels`.
    pub fn with_external_labels(mut external: Vec<model::Label>) -> Self {
        // A name given twice: the last wins, as in a label set.
        external.reverse();
        external.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        external.dedup_by(|a, b| a.name == b.name);
        external.retain(|l| !l.value.is_empty());
        Encoder { external, ..Encoder::new() }
    }

    /// Appends the `TimeSeries` of `s` to the body. From one request to the
    /// next only a series' samples change; its labels are shared with every
    /// series that carries them and each keeps its own encoding, so the
    /// label fields are copies, not encodings.
    #[inline]
    fn put(&mut self, s: &Series) {
        put_series(self.body.pending(), &s.labels, &self.external, &s.samples);
    }

    /// Encodes and snappy-compresses (block format) one request body. The
    /// slice is valid until the next call.
    ///
    /// # Panics
    /// Only if the uncompressed protobuf exceeds snappy's ~4 GiB block limit;
    /// split batches with [`series_size`] well before that, or use
    /// [`Encoder::try_encode`].
    pub fn encode(&mut self, series: &[Series], metadata: &[Metadata]) -> &[u8] {
        match self.try_encode(series, metadata) {
            Ok(body) => body,
            Err(e) => panic!("remote-write body too large to compress: {e}"),
        }
    }

    /// Like [`Encoder::encode`], returning an error instead of panicking.
    pub fn try_encode(&mut self, series: &[Series], metadata: &[Metadata]) -> Result<&[u8], EncodeError> {
        self.body.begin();
        for (i, s) in series.iter().enumerate() {
            prefetch_ahead(series, i);
            self.put(s);
            self.body.flush_blocks()?;
        }
        encode_protobuf(self.body.pending(), &[], metadata);
        let span = self.body.finish()?;
        self.body.settle();
        Ok(&self.body.compressed()[span])
    }

    /// Encodes `series` (and `metadata`) as one or more request bodies of at
    /// most `max_raw` uncompressed bytes each, calling `emit(series range,
    /// body)` for each; a single series larger than `max_raw` goes alone.
    /// Metadata rides in the first body. One encoding pass: the WriteRequest
    /// is a concatenation of repeated fields, so cutting it at series
    /// boundaries gives valid requests.
    pub fn encode_chunked(
        &mut self,
        series: &[Series],
        metadata: &[Metadata],
        max_raw: usize,
        mut emit: impl FnMut(std::ops::Range<usize>, &[u8]),
    ) -> Result<(), EncodeError> {
        self.body.begin();
        // Metadata first: it rides with the first series.
        encode_protobuf(self.body.pending(), &[], metadata);
        let mut first = 0; // index of the first series of the current body
        for (i, s) in series.iter().enumerate() {
            prefetch_ahead(series, i);
            let (at, before) = (self.body.pending_len(), self.body.len());
            self.put(s);
            let size = (self.body.pending_len() - at) as u64;
            if i > first && before + size > max_raw as u64 {
                // This series starts the next body.
                let span = self.body.cut(at)?;
                emit(first..i, &self.body.compressed()[span]);
                first = i;
            }
            self.body.flush_blocks()?;
        }
        if !series.is_empty() || self.body.len() > 0 {
            let span = self.body.finish()?;
            emit(first..series.len(), &self.body.compressed()[span]);
        }
        self.body.settle();
        Ok(())
    }

    /// The protobuf buffer's capacity and the compressed buffer's length
    /// (for tests).
    pub fn buffer_sizes(&self) -> (usize, usize) {
        self.body.buffer_sizes()
    }
}

/// Decompresses (snappy block) and decodes a Remote-Write 1.0 body, refusing
/// bodies that decompress to more than [`DEFAULT_MAX_DECODED_LEN`].
pub fn decode(body: &[u8]) -> Result<WriteRequest, DecodeError> {
    decode_with_limit(body, DEFAULT_MAX_DECODED_LEN)
}

/// [`decode`] with an explicit limit on the decompressed size.
pub fn decode_with_limit(body: &[u8], limit: usize) -> Result<WriteRequest, DecodeError> {
    let len = snap::raw::decompress_len(body)?;
    if len > limit {
        return Err(DecodeError::TooLarge { len, limit });
    }
    let raw = snap::raw::Decoder::new().decompress_vec(body)?;
    Ok(WriteRequest::decode(raw.as_slice())?)
}

/// Converts a decoded request back to model types. Labels are re-sorted and
/// empty values dropped (as [`Labels::from_vec`] does); unknown metric types
/// become `Unknown`. Exemplars and native histograms are not represented in
/// the model and are ignored.
pub fn to_model(req: &WriteRequest) -> (Vec<Series>, Vec<Metadata>) {
    let series = req
        .timeseries
        .iter()
        .map(|ts| Series {
            labels: Labels::from_vec(
                ts.labels.iter().map(|l| model::Label::new(l.name.as_str(), l.value.as_str())).collect(),
            ),
            samples: ts.samples.iter().map(|s| model::Sample { timestamp_ms: s.timestamp, value: s.value }).collect(),
        })
        .collect();
    let metadata = req
        .metadata
        .iter()
        .map(|m| Metadata {
            family: m.metric_family_name.as_str().into(),
            kind: match proto::MetricType::try_from(m.r#type) {
                Ok(proto::MetricType::Counter) => model::MetricType::Counter,
                Ok(proto::MetricType::Gauge) => model::MetricType::Gauge,
                Ok(proto::MetricType::Histogram) => model::MetricType::Histogram,
                Ok(proto::MetricType::GaugeHistogram) => model::MetricType::GaugeHistogram,
                Ok(proto::MetricType::Summary) => model::MetricType::Summary,
                Ok(proto::MetricType::Info) => model::MetricType::Info,
                Ok(proto::MetricType::StateSet) => model::MetricType::StateSet,
                Ok(proto::MetricType::Unknown) | Err(_) => model::MetricType::Unknown,
            },
            help: m.help.as_str().into(),
            unit: m.unit.as_str().into(),
        })
        .collect();
    (series, metadata)
}

/// Builds the prost `WriteRequest` for model data: the slow, obviously
/// correct path the hand encoder is tested against.
pub fn to_write_request(series: &[Series], metadata: &[Metadata]) -> WriteRequest {
    WriteRequest {
        timeseries: series
            .iter()
            .map(|s| TimeSeries {
                labels: (s.labels.iter())
                    .filter(|l| !l.value.is_empty())
                    .map(|l| proto::Label { name: l.name.to_string(), value: l.value.to_string() })
                    .collect(),
                samples: s
                    .samples
                    .iter()
                    .map(|x| proto::Sample { value: x.value, timestamp: x.timestamp_ms })
                    .collect(),
                exemplars: Vec::new(),
                histograms: Vec::new(),
            })
            .collect(),
        metadata: metadata
            .iter()
            .map(|m| MetricMetadata {
                r#type: metadata_type(m.kind) as i32,
                metric_family_name: m.family.to_string(),
                help: m.help.to_string(),
                unit: m.unit.to_string(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests;
