//! How series become requests: splits a shard's series into WriteRequests of
//! at most `max_batch_size_bytes` (uncompressed), adds metadata when
//! `send_metadata` is on (each family at most once a minute), and encodes
//! with the reusable remote-write encoder (protobuf + snappy block format).

use infertel_model::{Label, Labels, Metadata, Series};
use infertel_remote_write::{series_size, Encoder};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One encoded request and what it carries, for accounting.
pub struct Request {
    pub body: bytes::Bytes,
    pub samples: usize,
}

pub struct RequestBuilder {
    max_bytes: usize,
    send_metadata: bool,
    external: Vec<Label>,
    encoder: Encoder,
    metadata_sent: HashMap<Arc<str>, (Metadata, Instant)>,
}

const METADATA_EVERY: Duration = Duration::from_secs(60);

impl RequestBuilder {
    pub fn new(max_bytes: usize, send_metadata: bool, external: Vec<Label>) -> Self {
        RequestBuilder { max_bytes, send_metadata, external, encoder: Encoder::new(), metadata_sent: HashMap::new() }
    }

    fn fresh_metadata(&mut self, metadata: &[Metadata]) -> Vec<Metadata> {
        if !self.send_metadata {
            return Vec::new();
        }
        let now = Instant::now();
        let mut out = Vec::new();
        for m in metadata {
            let due = match self.metadata_sent.get(&m.family) {
                Some((prev, at)) => prev != m || now.duration_since(*at) >= METADATA_EVERY,
                None => true,
            };
            if due && !out.iter().any(|o: &Metadata| o.family == m.family) {
                self.metadata_sent.insert(m.family.clone(), (m.clone(), now));
                out.push(m.clone());
            }
        }
        out
    }

    fn with_external(&self, series: Vec<Series>) -> Vec<Series> {
        if self.external.is_empty() {
            return series;
        }
        series
            .into_iter()
            .map(|mut s| {
                let missing: Vec<&Label> = self.external.iter().filter(|e| s.labels.get(&e.name).is_none()).collect();
                if !missing.is_empty() {
                    let mut v: Vec<Label> = s.labels.iter().cloned().collect();
                    v.extend(missing.into_iter().cloned());
                    s.labels = Labels::from_vec(v);
                }
                s
            })
            .collect()
    }

    /// Encodes `series` into one or more requests.
    pub fn build(&mut self, series: Vec<Series>, metadata: &[Metadata]) -> Vec<Request> {
        let series = self.with_external(series);
        let meta = self.fresh_metadata(metadata);
        let mut out = Vec::new();
        let mut start = 0;
        let mut size = 0;
        let mut first = true;
        for (i, s) in series.iter().enumerate() {
            let sz = series_size(s);
            if i > start && size + sz > self.max_bytes {
                out.push(self.encode(&series[start..i], if first { &meta } else { &[] }));
                first = false;
                start = i;
                size = 0;
            }
            size += sz;
        }
        if start < series.len() || (first && !meta.is_empty()) {
            out.push(self.encode(&series[start..], if first { &meta } else { &[] }));
        }
        out
    }

    fn encode(&mut self, series: &[Series], meta: &[Metadata]) -> Request {
        let samples = series.iter().map(|s| s.samples.len()).sum();
        let body = bytes::Bytes::copy_from_slice(self.encoder.encode(series, meta));
        Request { body, samples }
    }
}
