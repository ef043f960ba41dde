//! The agent's per-scrape hot path, stage by stage, on the body peer-bench
//! serves (`shared/bench/gen_fixture.py --series 1000`: one 4-GPU node,
//! vLLM + dcgm, 977 samples, 140 KB; copied to `benches/data/`):
//! parse → label and intern (`build_series`, warm cache) → remote-write
//! request (protobuf + snappy), and the alternatives: the same scrape with
//! a typical `metric_relabel_configs` (what relabeling adds), and the OTLP
//! mapping + protobuf encode of the same series.
//! Run: `cargo bench -p infertel-pipeline`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use infertel_model::Labels;
use infertel_pipeline::exporters::prometheusremotewrite::request_builder::RequestBuilder;
use infertel_pipeline::receivers::prometheus::scrape::{JobSettings, SeriesCache, build_series};
use infertel_pipeline::receivers::prometheus::target::Target;
use infertel_relabel::Relabeler;
use std::hint::black_box;
use std::time::Duration;

const BODY: &[u8] = include_bytes!("data/node-1000.prom");

fn target() -> Target {
    let labels = Labels::from_pairs([("job", "bench"), ("instance", "127.0.0.1:21000")]);
    Target {
        discovered: labels.clone(),
        all_labels: labels.clone(),
        labels,
        url: "http://127.0.0.1:21000/metrics".into(),
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
    }
}

fn job() -> JobSettings {
    job_with(Relabeler::default())
}

fn job_with(metric_relabel: Relabeler) -> JobSettings {
    JobSettings { metric_relabel, ..JobSettings::new("prometheus") }
}

fn bench(c: &mut Criterion) {
    let (t, j) = (target(), job());
    let mut cache = SeriesCache::default();
    let mut series = Vec::new();
    let mut md = Vec::new();
    let samples =
        build_series(BODY, None, 1, &t, &j, &mut cache, &mut series, &mut md, true).expect("fixture").post_relabel;
    let mut g = c.benchmark_group("hot_path");
    g.throughput(Throughput::Elements(samples));
    g.bench_function("parse", |b| {
        b.iter(|| {
            infertel_exposition::parse(black_box(BODY), infertel_exposition::Format::PrometheusText)
                .map(|e| e.samples.len())
        })
    });
    // The scrape cache's shortcut: every line known (a steady-state scrape)
    // against none known (a target's first scrape).
    let keys: std::collections::HashSet<u128> = infertel_exposition::parse_as_prometheus_known(
        BODY,
        infertel_exposition::Format::PrometheusText,
        &mut |_: u128| None,
    )
    .expect("fixture")
    .samples
    .iter()
    .filter_map(|s| s.raw_key)
    .collect();
    g.bench_function("parse_cache_hit", |b| {
        b.iter(|| {
            infertel_exposition::parse_as_prometheus_known(
                black_box(BODY),
                infertel_exposition::Format::PrometheusText,
                &mut |k: u128| keys.contains(&k).then_some(k),
            )
            .map(|e| e.samples.len())
        })
    });
    g.bench_function("parse_cache_miss", |b| {
        b.iter(|| {
            infertel_exposition::parse_as_prometheus_known(
                black_box(BODY),
                infertel_exposition::Format::PrometheusText,
                &mut |_: u128| None,
            )
            .map(|e| e.samples.len())
        })
    });
    g.bench_function("build_series_cold", |b| {
        b.iter(|| {
            series.clear();
            md.clear();
            let mut cold = SeriesCache::default();
            build_series(black_box(BODY), None, 1, &t, &j, &mut cold, &mut series, &mut md, false)
                .map(|s| s.post_relabel)
        })
    });
    let mut ts = 2;
    g.bench_function("build_series_warm", |b| {
        b.iter(|| {
            series.clear();
            md.clear();
            ts += 1;
            build_series(black_box(BODY), None, ts, &t, &j, &mut cache, &mut series, &mut md, false)
                .map(|s| s.post_relabel)
        })
    });
    // What a typical metric_relabel_configs adds: drop the Python runtime
    // families, drop a label, rename one by regex.
    let rc: Vec<infertel_relabel::RelabelConfig> = serde_yaml::from_str(
        "- {source_labels: [__name__], regex: 'python_.*|process_.*', action: drop}\n- {regex: pod_uid, action: labeldrop}\n- {source_labels: [modelName], target_label: gpu_model}\n",
    )
    .expect("relabel config");
    let jr = job_with(Relabeler::new(&rc).expect("relabel rules"));
    let mut cache_r = SeriesCache::default();
    let mut ts_r = 1;
    g.bench_function("build_series_warm_metric_relabel", |b| {
        b.iter(|| {
            series.clear();
            md.clear();
            ts_r += 1;
            build_series(black_box(BODY), None, ts_r, &t, &jr, &mut cache_r, &mut series, &mut md, false)
                .map(|s| s.post_relabel)
        })
    });
    series.clear();
    md.clear();
    build_series(BODY, None, ts + 1, &t, &j, &mut cache, &mut series, &mut md, true).expect("fixture");
    let mut rb = RequestBuilder::new(3_000_000, false, vec![]);
    g.bench_function("request_build", |b| {
        b.iter(|| rb.build(black_box(series.clone()), &[]).map(|r| r.requests.len()))
    });
    // Request building for series whose labels are not kept anywhere else
    // (built for one batch, or read back from a disk queue): no cached
    // label encoding.
    g.bench_function("request_build_unshared_labels", |b| {
        b.iter_batched(
            || {
                series
                    .iter()
                    .map(|s| infertel_model::Series {
                        labels: infertel_model::Labels::from_vec(s.labels.iter().cloned().collect()),
                        samples: s.samples.clone(),
                    })
                    .collect::<Vec<_>>()
            },
            |fresh| rb.build(black_box(fresh), &[]).map(|r| r.requests.len()),
            criterion::BatchSize::LargeInput,
        )
    });
    // The whole per-scrape path on a warm cache: body to request bodies.
    let mut rb_whole = RequestBuilder::new(3_000_000, false, vec![]);
    let mut ts_w = ts + 10;
    g.bench_function("scrape_to_request", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(1024);
            md.clear();
            ts_w += 1;
            build_series(black_box(BODY), None, ts_w, &t, &j, &mut cache, &mut out, &mut md, false).expect("fixture");
            rb_whole.build(out, &[]).map(|r| r.requests.len())
        })
    });
    let mut store = infertel_otlp::MetadataStore::default();
    store.update(&md);
    let targets = infertel_otlp::TargetInfo::default();
    let mut conv = infertel_otlp::Converter::new(infertel_otlp::Naming::Otel, false);
    g.bench_function("otlp_convert_encode", |b| {
        b.iter(|| conv.convert(black_box(&series), &store, &targets).map(|r| prost::Message::encode_to_vec(&r).len()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
