//! How series become requests: splits a shard's series into WriteRequests of
//! at most `max_batch_size_bytes` (uncompressed), adds metadata when
//! `send_metadata` is on (each family at most once a minute), and encodes
//! with the reusable remote-write encoder (protobuf + snappy block format).

use infertel_model::{Label, Metadata, Series};
use infertel_remote_write::Encoder;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One encoded request and what it carries, for accounting.
pub struct Request {
    pub body: bytes::Bytes,
    pub samples: usize,
    /// The series it holds, as indices into the built list (see
    /// [`Built`]), so that a request refused as too large can be split.
    pub range: std::ops::Range<usize>,
}

/// Requests and the series they were encoded from (the encoder adds the
/// external labels; these are as they came).
pub struct Built {
    pub series: Vec<Series>,
    pub requests: Vec<Request>,
}

pub struct RequestBuilder {
    max_bytes: usize,
    send_metadata: bool,
    /// Adds the external labels, and keeps each live series' encoded labels.
    encoder: Encoder,
    metadata_sent: HashMap<Arc<str>, (Metadata, Instant)>,
}

const METADATA_EVERY: Duration = Duration::from_secs(60);

impl RequestBuilder {
    pub fn new(max_bytes: usize, send_metadata: bool, external: Vec<Label>) -> Self {
        RequestBuilder {
            max_bytes,
            send_metadata,
            encoder: Encoder::with_external_labels(external),
            metadata_sent: HashMap::new(),
        }
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

    /// Encodes `series` into one or more requests. The error (a series too
    /// large for a snappy block, over 4 GiB) carries the samples lost.
    pub fn build(&mut self, series: Vec<Series>, metadata: &[Metadata]) -> Result<Built, (usize, String)> {
        let meta = self.fresh_metadata(metadata);
        let mut out = Vec::new();
        let r = self.encoder.encode_chunked(&series, &meta, self.max_bytes, |range, body| {
            let samples = series[range.clone()].iter().map(|s| s.samples.len()).sum();
            out.push(Request { body: bytes::Bytes::copy_from_slice(body), samples, range });
        });
        match r {
            Ok(()) => Ok(Built { series, requests: out }),
            Err(e) => {
                let sent: usize = out.iter().map(|r| r.samples).sum();
                let total: usize = series.iter().map(|s| s.samples.len()).sum();
                Err((total - sent, e.to_string()))
            }
        }
    }

    /// One request of `series[range]` (no metadata: it rode with the
    /// request that is being split), for resending a half.
    pub fn encode_range(&mut self, series: &[Series], range: std::ops::Range<usize>) -> Request {
        let samples = series[range.clone()].iter().map(|s| s.samples.len()).sum();
        let body = bytes::Bytes::copy_from_slice(self.encoder.encode(&series[range.clone()], &[]));
        Request { body, samples, range }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_model::Labels;
    use infertel_model::{MetricType, Sample};
    use infertel_remote_write::series_size;

    fn series(n: usize) -> Vec<Series> {
        (0..n)
            .map(|i| Series {
                labels: Labels::from_pairs([
                    ("__name__", "vllm:num_requests_running"),
                    ("pod", &format!("vllm-{i:03}")),
                ]),
                samples: infertel_model::samples![Sample { timestamp_ms: 1000 + i as i64, value: i as f64 }],
            })
            .collect()
    }

    fn meta() -> Vec<Metadata> {
        vec![Metadata {
            family: "vllm:num_requests_running".into(),
            kind: MetricType::Gauge,
            help: "Running.".into(),
            unit: "".into(),
        }]
    }

    #[test]
    fn splits_by_size_and_keeps_every_sample_in_order() {
        // Series 0 has the value 0.0, which protobuf leaves out: size from series 1.
        let one = series_size(&series(2)[1]);
        let mut b = RequestBuilder::new(one * 10, false, vec![]);
        let reqs = b.build(series(95), &[]).unwrap().requests;
        assert_eq!(reqs.len(), 10, "ten full requests of ten, and five left");
        let mut got = Vec::new();
        for r in &reqs {
            let w = infertel_remote_write::decode(&r.body).unwrap();
            let (s, _) = infertel_remote_write::to_model(&w);
            assert!(s.len() <= 10);
            assert_eq!(r.samples, s.len());
            got.extend(s);
        }
        assert_eq!(got, series(95));
    }

    #[test]
    fn a_series_bigger_than_the_limit_still_goes_out_alone() {
        let mut b = RequestBuilder::new(1, false, vec![]);
        assert_eq!(b.build(series(3), &[]).unwrap().requests.len(), 3);
    }

    #[test]
    fn metadata_rides_once_a_minute_and_only_when_asked() {
        let mut b = RequestBuilder::new(1 << 20, true, vec![]);
        let first = infertel_remote_write::decode(&b.build(series(2), &meta()).unwrap().requests[0].body).unwrap();
        assert_eq!(first.metadata.len(), 1);
        assert_eq!(first.metadata[0].metric_family_name, "vllm:num_requests_running");
        assert_eq!(first.metadata[0].help, "Running.");
        let again = infertel_remote_write::decode(&b.build(series(2), &meta()).unwrap().requests[0].body).unwrap();
        assert!(again.metadata.is_empty(), "not resent within a minute");
        let mut off = RequestBuilder::new(1 << 20, false, vec![]);
        assert!(
            infertel_remote_write::decode(&off.build(series(2), &meta()).unwrap().requests[0].body)
                .unwrap()
                .metadata
                .is_empty()
        );
    }

    #[test]
    fn external_labels_fill_in_but_never_override() {
        let mut b =
            RequestBuilder::new(1 << 20, false, vec![Label::new("cluster", "gpu-a"), Label::new("pod", "nope")]);
        let w = infertel_remote_write::decode(&b.build(series(1), &[]).unwrap().requests[0].body).unwrap();
        let (s, _) = infertel_remote_write::to_model(&w);
        assert_eq!(s[0].labels.get("cluster"), Some("gpu-a"));
        assert_eq!(s[0].labels.get("pod"), Some("vllm-000"));
    }
}
