//! Codec tests: byte identity with prost, round trips, snappy block format.

use super::*;
use infertel_model::{Label as ML, MetricType as MT, Sample as MS, stale_nan};
use proptest::prelude::*;

fn series(pairs: &[(&str, &str)], samples: &[(i64, f64)]) -> Series {
    Series {
        labels: Labels::from_pairs(pairs.iter().copied()),
        samples: samples.iter().map(|&(t, v)| MS { timestamp_ms: t, value: v }).collect(),
    }
}

fn meta(family: &str, kind: MT, help: &str, unit: &str) -> Metadata {
    Metadata { family: family.into(), kind, help: help.into(), unit: unit.into() }
}

fn fixture() -> (Vec<Series>, Vec<Metadata>) {
    let s = vec![
        series(
            &[("__name__", "vllm:num_requests_running"), ("job", "vllm"), ("model_name", "Llama-3.1-8B")],
            &[(1_700_000_000_000, 3.0), (1_700_000_001_000, 0.0), (1_700_000_002_000, -0.5)],
        ),
        series(&[("__name__", "stale"), ("instance", "10.0.0.1:9400")], &[(1_700_000_000_000, stale_nan())]),
        series(
            &[("__name__", "inf"), ("v", "ünïcødé ✓ \"q\" \n")],
            &[(1, f64::INFINITY), (-5, f64::NEG_INFINITY), (0, f64::NAN)],
        ),
        series(&[("__name__", "no_samples")], &[]),
        // Label bodies of 127, 128 and 300 bytes: the short and long forms.
        series(
            &[("__name__", "long"), ("a", &"x".repeat(122)), ("b", &"y".repeat(123)), ("c", &"z".repeat(295))],
            &[(7, 1.0)],
        ),
    ];
    let m = vec![
        meta("vllm:num_requests_running", MT::Gauge, "Number of requests running.", ""),
        meta("DCGM_FI_DEV_GPU_TEMP", MT::Unknown, "", "celsius"),
        meta("x", MT::StateSet, "help\nwith newline", ""),
    ];
    (s, m)
}

fn bits(s: &[Series]) -> Vec<(Labels, Vec<(i64, u64)>)> {
    s.iter()
        .map(|s| (s.labels.clone(), s.samples.iter().map(|x| (x.timestamp_ms, x.value.to_bits())).collect()))
        .collect()
}

#[test]
fn hand_encoding_is_byte_identical_to_prost() {
    let (s, m) = fixture();
    let mut ours = Vec::new();
    encode_protobuf(&mut ours, &s, &m);
    let theirs = to_write_request(&s, &m).encode_to_vec();
    assert_eq!(ours, theirs);
    assert_eq!(encoded_size_hint(&s, &m), ours.len());
    assert_eq!(s.iter().map(series_size).sum::<usize>() + m.iter().map(metadata_size).sum::<usize>(), ours.len());
}

#[test]
fn round_trip_preserves_bits() {
    let (s, m) = fixture();
    let mut enc = Encoder::new();
    let body = enc.encode(&s, &m).to_vec();
    let (s2, m2) = to_model(&decode(&body).unwrap());
    assert_eq!(bits(&s2), bits(&s));
    assert_eq!(m2, m);
    let stale = &s2[1].samples[0];
    assert_eq!(stale.value.to_bits(), 0x7ff0_0000_0000_0002);
    assert_eq!(s2[2].samples[0].value, f64::INFINITY);
    assert_eq!(s2[2].samples[1].value, f64::NEG_INFINITY);
    assert_eq!(s2[2].samples[1].timestamp_ms, -5);
    assert_eq!(s2[0].labels.metric_name(), "vllm:num_requests_running");
}

#[test]
fn body_is_snappy_block_not_framed() {
    let (s, m) = fixture();
    let mut enc = Encoder::new();
    let body = enc.encode(&s, &m).to_vec();
    const FRAMED_MAGIC: [u8; 10] = [0xff, 0x06, 0x00, 0x00, 0x73, 0x4e, 0x61, 0x50, 0x50, 0x59];
    assert!(!body.starts_with(&FRAMED_MAGIC));
    // The block format starts with the uncompressed length as a varint.
    assert_eq!(snap::raw::decompress_len(&body).unwrap(), to_write_request(&s, &m).encoded_len());
}

#[test]
fn encoder_reuse_gives_same_bytes() {
    let (s, m) = fixture();
    let mut enc = Encoder::new();
    let first = enc.encode(&s, &m).to_vec();
    let _ = enc.encode(&s[..1], &[]);
    let again = enc.encode(&s, &m).to_vec();
    assert_eq!(first, again);
    let empty = enc.encode(&[], &[]).to_vec();
    assert_eq!(decode(&empty).unwrap(), WriteRequest::default());
}

#[test]
fn empty_values_are_never_sent() {
    // Labels cannot hold empty values, but the encoder must not rely on it.
    let s = series(&[("__name__", "x"), ("a", "")], &[(1, 1.0)]);
    let req = decode(Encoder::new().encode(&[s], &[])).unwrap();
    assert_eq!(req.timeseries[0].labels, vec![proto::Label { name: "__name__".into(), value: "x".into() }]);
}

#[test]
fn decode_rejects_garbage_and_bombs() {
    assert!(matches!(decode(b"\xff\xff\xff\xff\x0f"), Err(DecodeError::Snappy(_)) | Err(DecodeError::TooLarge { .. })));
    let mut big = Vec::new();
    put_varint(&mut big, 1 << 40);
    assert!(decode(&big).is_err());
    let body = snap::raw::Encoder::new().compress_vec(b"\x0a\x05\x0a").unwrap();
    assert!(matches!(decode(&body), Err(DecodeError::Protobuf(_))));
    let body = snap::raw::Encoder::new().compress_vec(&[0u8; 100]).unwrap();
    assert!(matches!(decode_with_limit(&body, 10), Err(DecodeError::TooLarge { len: 100, limit: 10 })));
}

#[test]
fn varint_len_matches_prost() {
    for v in [0u64, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX, (-1i64) as u64] {
        assert_eq!(varint_len(v), prost::encoding::encoded_len_varint(v), "{v}");
    }
}

#[test]
fn native_histogram_messages_round_trip() {
    let h = proto::Histogram {
        count: Some(proto::histogram::Count::CountInt(10)),
        sum: 2.5,
        schema: -2,
        zero_threshold: 1e-128,
        zero_count: Some(proto::histogram::ZeroCount::ZeroCountFloat(1.0)),
        positive_spans: vec![proto::BucketSpan { offset: -3, length: 2 }],
        positive_deltas: vec![4, -1],
        reset_hint: proto::histogram::ResetHint::Gauge as i32,
        timestamp: 1_700_000_000_000,
        ..Default::default()
    };
    let req = WriteRequest {
        timeseries: vec![TimeSeries {
            histograms: vec![h],
            exemplars: vec![proto::Exemplar { value: 1.0, timestamp: 2, labels: vec![] }],
            ..Default::default()
        }],
        metadata: vec![],
    };
    assert_eq!(WriteRequest::decode(req.encode_to_vec().as_slice()).unwrap(), req);
}

fn arb_series() -> impl Strategy<Value = Series> {
    // Values up to 80 characters (up to 320 bytes): labels on both sides of
    // the 128-byte one-byte-length fast path.
    let label = ("[a-zA-Z_][a-zA-Z0-9_:]{0,40}", "\\PC{0,80}");
    let sample = (any::<i64>(), any::<u64>().prop_map(f64::from_bits));
    (prop::collection::vec(label, 0..8), prop::collection::vec(sample, 0..6)).prop_map(|(labels, samples)| Series {
        labels: Labels::from_vec(labels.into_iter().map(|(n, v)| ML::new(n, v)).collect()),
        samples: samples.into_iter().map(|(t, v)| MS { timestamp_ms: t, value: v }).collect(),
    })
}

proptest! {
    #[test]
    fn proptest_round_trip(s in prop::collection::vec(arb_series(), 0..20), help in "\\PC{0,20}") {
        let m = vec![meta("fam", MT::Counter, &help, "seconds")];
        let mut enc = Encoder::new();
        let body = enc.encode(&s, &m).to_vec();
        let reference = to_write_request(&s, &m).encode_to_vec();
        // Compressed as written, the body is what snappy makes of the whole protobuf.
        prop_assert_eq!(&body, &snap::raw::Encoder::new().compress_vec(&reference).unwrap());
        let (s2, m2) = to_model(&decode(&body).unwrap());
        // -0.0 is sent as "absent" (proto3 default), exactly as Prometheus does.
        let norm = |v: &[Series]| -> Vec<(Labels, Vec<(i64, u64)>)> {
            bits(v).into_iter().map(|(l, xs)| (l, xs.into_iter().map(|(t, b)| (t, if b == (-0.0f64).to_bits() { 0 } else { b })).collect())).collect()
        };
        prop_assert_eq!(norm(&s2), norm(&s));
        prop_assert_eq!(m2, m);
    }
}

#[test]
fn chunked_encoding_cuts_at_series_boundaries() {
    use crate::{Encoder, decode, series_size, to_model};
    use infertel_model::{Labels, Metadata, MetricType, Sample, Series};
    let series: Vec<Series> = (0..50)
        .map(|i| Series {
            labels: Labels::from_pairs([("__name__", "x"), ("i", &format!("{i:04}"))]),
            samples: infertel_model::samples![Sample { timestamp_ms: 7 + i, value: i as f64 + 0.5 }],
        })
        .collect();
    let meta = vec![Metadata { family: "x".into(), kind: MetricType::Gauge, help: "h".into(), unit: "".into() }];
    let one = series_size(&series[1]);
    let mut enc = Encoder::new();
    let mut got = Vec::new();
    let mut metas = 0;
    let mut bodies = 0;
    enc.encode_chunked(&series, &meta, one * 7, |range, body| {
        let req = decode(body).unwrap();
        let (s, m) = to_model(&req);
        assert_eq!(s.len(), range.len());
        assert!(s.len() <= 7);
        metas += m.len();
        bodies += 1;
        got.extend(s);
    })
    .unwrap();
    assert_eq!(got, series);
    assert_eq!(metas, 1, "metadata rides once");
    assert!(bodies >= 8, "{bodies}");
    // The same bytes as a single encode when everything fits.
    let mut whole = Vec::new();
    enc.encode_chunked(&series, &[], usize::MAX, |_, b| whole.push(b.to_vec())).unwrap();
    assert_eq!(whole.len(), 1);
    assert_eq!(whole[0], Encoder::new().encode(&series, &[]).to_vec());
    // Metadata alone still goes out.
    let mut n = 0;
    enc.encode_chunked(&[], &meta, 10, |_, b| {
        n += 1;
        assert_eq!(to_model(&decode(b).unwrap()).1.len(), 1);
    })
    .unwrap();
    assert_eq!(n, 1);
}

/// Each label's encoding is kept with the label and a series' label fields
/// are copies of them, with the external labels merged in where a series
/// lacks them: the body is what prost writes for the same series with the
/// external labels added by building the label set anew (the reference),
/// on the first request and on every later one, for labels interned and
/// shared by many series, labels built once per series, long values (two-byte
/// lengths) and external labels that sort before, between and after a
/// series' own, that it already has, or that repeat.
#[test]
fn label_fields_are_byte_identical_to_prost_with_external_labels() {
    use crate::{Encoder, to_write_request, with_external};
    use infertel_model::{Label, Labels, Sample, Series};
    use prost::Message;
    let shared_model = Label::new("model_name", "Qwen/Qwen2.5-3B-Instruct");
    let long = "é".repeat(100);
    let live: Vec<Labels> = (0..3000)
        .map(|i| {
            let mut v = vec![
                Label::new("__name__", "vllm:num_requests_running"),
                Label::new("engine", format!("{}", i % 2).as_str()),
                Label::new("instance", format!("10.0.0.{}:8000", i % 200).as_str()),
                shared_model.clone(),
                Label::new("i", format!("{i}").as_str()),
            ];
            if i % 3 == 0 {
                v.push(Label::new("zone", "a"));
            }
            if i % 7 == 0 {
                v.push(Label::new("long", long.as_str()));
            }
            Labels::from_vec(v)
        })
        .collect();
    let external = vec![
        Label::new("zone", "first"),
        Label::new("cluster", "c1"),
        Label::new("a", "before-all"),
        Label::new("zz", "after-all"),
        Label::new("zone", "ext"),
        Label::new("empty", ""),
    ];
    let mut reference_external = external.clone();
    reference_external.retain(|l| &*l.value != "first");
    for mut enc in [Encoder::with_external_labels(external.clone()), Encoder::new()] {
        let with_ext = !enc.external.is_empty();
        for round in 0..3i64 {
            let mut series: Vec<Series> = live
                .iter()
                .map(|l| Series {
                    labels: l.clone(),
                    samples: infertel_model::samples![Sample {
                        timestamp_ms: 1_700_000_000_000 + round * 15_000,
                        value: round as f64 - 0.5
                    }],
                })
                .collect();
            series.push(Series {
                labels: Labels::from_pairs([("__name__", "derived"), ("x", "y")]),
                samples: infertel_model::samples![Sample { timestamp_ms: 5, value: 1.0 }],
            });
            let body = enc.encode(&series, &[]).to_vec();
            let reference: Vec<Series> = series
                .iter()
                .map(|s| Series {
                    labels: if with_ext { with_external(&s.labels, &reference_external) } else { s.labels.clone() },
                    samples: s.samples.clone(),
                })
                .collect();
            let want = to_write_request(&reference, &[]).encode_to_vec();
            assert_eq!(snap::raw::Decoder::new().decompress_vec(&body).unwrap(), want, "round {round}");
        }
    }
    let decoded = crate::decode(
        Encoder::with_external_labels(external)
            .encode(&[Series { labels: live[0].clone(), samples: Default::default() }], &[]),
    )
    .unwrap();
    let names: Vec<&str> = decoded.timeseries[0].labels.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["__name__", "a", "cluster", "engine", "i", "instance", "long", "model_name", "zone", "zz"]);
    assert_eq!(decoded.timeseries[0].labels[8].value, "a", "the series' own zone wins over the external one");
}

/// A big request's buffers are kept while requests of mixed sizes come
/// (no regrowth, no page faults each time), and given back once small
/// requests have come for a while.
#[test]
fn big_buffers_are_kept_through_mixed_sizes_and_shrunk_after_a_quiet_while() {
    use crate::{Encoder, SHRINK_ABOVE, SHRINK_AFTER};
    use infertel_model::{Labels, Sample, Series};
    let batch = |n: usize| -> Vec<Series> {
        (0..n)
            .map(|i| Series {
                labels: Labels::from_pairs([("__name__", "m"), ("i", &format!("{i:07}"))]),
                samples: infertel_model::samples![Sample { timestamp_ms: i as i64, value: i as f64 }],
            })
            .collect()
    };
    let (big, small) = (batch(200_000), batch(10));
    let mut enc = Encoder::new();
    enc.encode(&big, &[]);
    let (pending, compressed) = enc.buffer_sizes();
    // The protobuf is compressed as it is written: a 5 MB request holds a
    // block of it at a time.
    assert!(pending <= 2 << 16, "{pending}");
    assert!(compressed > SHRINK_ABOVE, "{compressed}");
    for round in 0..3 {
        for _ in 0..SHRINK_AFTER - 1 {
            enc.encode(&small, &[]);
        }
        assert_eq!(enc.buffer_sizes(), (pending, compressed), "round {round}: kept");
        enc.encode(&big, &[]);
    }
    for _ in 0..SHRINK_AFTER {
        enc.encode(&small, &[]);
    }
    let (_, c) = enc.buffer_sizes();
    assert!(c < SHRINK_ABOVE, "shrunk: {c}");
    // And still right.
    let body = enc.encode(&small, &[]).to_vec();
    let back = crate::decode(&body).unwrap();
    assert_eq!(back.timeseries.len(), 10);
}

/// Bodies compressed block by block as the protobuf is written are byte for
/// byte what snappy makes of each request's whole protobuf (prost's
/// encoding of the series the body holds), whether cut into requests or
/// not, with series that straddle blocks and a series larger than a block.
#[test]
fn streamed_bodies_equal_snappy_of_the_whole_protobuf() {
    use crate::{Encoder, to_write_request};
    let mut series: Vec<Series> = (0..20_000)
        .map(|i| Series {
            labels: Labels::from_pairs([
                ("__name__", "node_cpu_seconds_total"),
                ("cpu", &format!("{}", i % 64)),
                ("i", &format!("{i:06}")),
            ]),
            samples: infertel_model::samples![MS { timestamp_ms: 1_700_000_000_000 + i, value: i as f64 * 0.25 }],
        })
        .collect();
    // 70 KB of labels: more than a block on its own.
    series.insert(777, self::series(&[("__name__", "huge"), ("v", &"ab".repeat(35_000))], &[(5, 1.0)]));
    let m = vec![meta("node_cpu_seconds_total", MT::Counter, "Seconds the CPUs spent in each mode.", "")];
    let whole = |s: &[Series], m: &[Metadata]| {
        snap::raw::Encoder::new().compress_vec(&to_write_request(s, m).encode_to_vec()).unwrap()
    };
    let mut enc = Encoder::new();
    let one = enc.encode(&series, &m).to_vec();
    assert!(one.len() > 4 << 16, "several blocks: {}", one.len());
    assert_eq!(one, whole(&series, &m));
    for max_raw in [1 << 16, 300_000, 1 << 20] {
        let mut bodies = 0;
        let mut next = 0;
        enc.encode_chunked(&series, &m, max_raw, |range, body| {
            assert_eq!(range.start, next, "ranges follow each other");
            next = range.end;
            let meta = if range.start == 0 { &m[..] } else { &[] };
            // Metadata first in the first body, as encode_chunked writes it.
            let mut req = to_write_request(&series[range.clone()], meta);
            let expected = {
                let mut p = Vec::new();
                let meta_only = WriteRequest { timeseries: vec![], metadata: std::mem::take(&mut req.metadata) };
                meta_only.encode(&mut p).unwrap();
                req.encode(&mut p).unwrap();
                snap::raw::Encoder::new().compress_vec(&p).unwrap()
            };
            assert_eq!(body, expected.as_slice(), "body of {range:?} at max_raw {max_raw}");
            let len = snap::raw::decompress_len(body).unwrap();
            assert!(len <= max_raw || range.len() == 1, "{len} > {max_raw} with {} series", range.len());
            bodies += 1;
        })
        .unwrap();
        assert_eq!(next, series.len());
        assert!(bodies > 1, "max_raw {max_raw}: {bodies}");
    }
}
