//! Encode + snappy of 1,000 series × 10 labels (one sample each), the shape
//! of a large dcgm-exporter/vLLM scrape going out in one request.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use infertel_model::{Label, Labels, Sample, Series};
use infertel_remote_write::{Encoder, encoded_size_hint};
use std::hint::black_box;

fn fixture() -> Vec<Series> {
    (0..1000)
        .map(|i| {
            let mut labels = vec![Label::new("__name__", format!("DCGM_FI_DEV_METRIC_{}", i % 50))];
            for j in 0..9 {
                labels.push(Label::new(format!("label_{j}"), format!("value-{}-{}", j, i * 7 + j)));
            }
            Series {
                labels: Labels::from_vec(labels),
                samples: infertel_model::samples![Sample {
                    timestamp_ms: 1_700_000_000_000 + i as i64,
                    value: i as f64 * 1.5
                }],
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let series = fixture();
    let mut enc = Encoder::new();
    let mut g = c.benchmark_group("remote_write");
    g.throughput(Throughput::Elements(series.len() as u64));
    g.bench_function("encode_snappy_1000x10", |b| b.iter(|| black_box(enc.encode(black_box(&series), &[]).len())));
    g.bench_function("encode_protobuf_only_1000x10", |b| {
        let mut buf = Vec::with_capacity(encoded_size_hint(&series, &[]));
        b.iter(|| {
            buf.clear();
            infertel_remote_write::encode_protobuf(&mut buf, black_box(&series), &[]);
            black_box(buf.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
