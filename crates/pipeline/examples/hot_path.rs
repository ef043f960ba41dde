//! Runs the per-scrape hot path (build_series on a warm cache, then the
//! remote-write request) a fixed number of times, for profilers:
//! `valgrind --tool=callgrind target/release/examples/hot_path 200`
//! counts instructions, which stay stable on a busy machine.
//!
//! With `--inference T` the scrapes rotate over T targets (as peer-bench's
//! scrapes do) and each goes through the `inference` processor first, to
//! measure what that processor costs; `--targets T` rotates over T targets
//! without it (each keeps its own series cache, as in the agent). With
//! `--report` each scrape also carries `up` and the four `scrape_*` series,
//! their label sets built once per target, as the scrape loop keeps them.
//! With `--relabel` the job has the two `metric_relabel_configs` rules of
//! `bench/infertel-with-processors` (drop `python_gc_.*`, labeldrop
//! `pod_uid`). With `--body FILE` the targets serve that file instead of
//! `benches/data/node-1000.prom` (peer-bench's body: `gen_fixture.py
//! --series 1000`).

use infertel_model::Batch;
use infertel_model::Labels;
use infertel_pipeline::exporters::prometheusremotewrite::request_builder::RequestBuilder;
use infertel_pipeline::processors::inference::{InferenceConfig, InferenceProcessor};
use infertel_pipeline::receivers::prometheus::scrape::{
    JobSettings, REPORT_SERIES, SeriesCache, build_series, report_labels,
};
use infertel_pipeline::receivers::prometheus::target::Target;
use infertel_pipeline::{BoxFuture, Consumer, Telemetry};
use std::sync::Arc;
use std::time::Duration;

struct Sink;
impl Consumer for Sink {
    fn consume(&self, _: Batch) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

const BODY: &[u8] = include_bytes!("../benches/data/node-1000.prom");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let body: Vec<u8> = match args.iter().position(|a| a == "--body").and_then(|i| args.get(i + 1)) {
        Some(path) => std::fs::read(path).unwrap_or_else(|e| panic!("--body {path}: {e}")),
        None => BODY.to_vec(),
    };
    let inference_targets: Option<usize> =
        args.iter().position(|a| a == "--inference").and_then(|i| args.get(i + 1)).and_then(|a| a.parse().ok());
    let processor = inference_targets.map(|_| {
        InferenceProcessor::new("inference".into(), &InferenceConfig::default(), Arc::new(Sink), Telemetry::new())
    });
    let labels = Labels::from_pairs([("job", "bench"), ("instance", "127.0.0.1:21000")]);
    let t = Target {
        discovered: labels.clone(),
        all_labels: labels.clone(),
        labels,
        url: "http://127.0.0.1:21000/metrics".into(),
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
    };
    let mut j = JobSettings::new("prometheus");
    if args.iter().any(|a| a == "--relabel") {
        let rules: Vec<infertel_relabel::RelabelConfig> = serde_yaml::from_str(
            "[{source_labels: [__name__], regex: 'python_gc_.*', action: drop}, {regex: pod_uid, action: labeldrop}]",
        )
        .expect("rules");
        j.metric_relabel = infertel_relabel::Relabeler::new(&rules).expect("rules compile");
    }
    let target_count: usize = args
        .iter()
        .position(|a| a == "--targets")
        .and_then(|i| args.get(i + 1))
        .and_then(|a| a.parse().ok())
        .or(inference_targets)
        .unwrap_or(1);
    let targets: Vec<Target> = (0..target_count)
        .map(|k| {
            let instance = format!("127.0.0.1:{}", 21000 + k);
            let labels = Labels::from_pairs([("job", "bench"), ("instance", instance.as_str())]);
            Target { all_labels: labels.clone(), labels, url: format!("http://{instance}/metrics"), ..t.clone() }
        })
        .collect();
    let mut caches: Vec<SeriesCache> = targets.iter().map(|_| SeriesCache::default()).collect();
    let reports: Vec<Vec<Labels>> = targets
        .iter()
        .map(|t| REPORT_SERIES.iter().map(|name| report_labels(name, &t.labels, &[])).collect())
        .collect();
    let report = args.iter().any(|a| a == "--report");
    let mut rb = RequestBuilder::new(3_000_000, false, vec![]);
    let mut total = 0usize;
    for i in 0..n {
        let mut series = Vec::with_capacity(1024);
        let mut md = Vec::new();
        let k = i % targets.len();
        let now_ms = 1_700_000_000_000 + (i / targets.len()) as i64 * 1000;
        build_series(&body, None, now_ms, &targets[k], &j, &mut caches[k], &mut series, &mut md, false)
            .expect("fixture");
        if report {
            for labels in &reports[k] {
                series.push(infertel_model::Series {
                    labels: labels.clone(),
                    samples: infertel_model::samples![infertel_model::Sample { timestamp_ms: now_ms, value: 1.0 }],
                });
            }
        }
        if let Some(p) = &processor {
            let batch = Batch { series, metadata: vec![] };
            let derived = p.derive(&batch);
            series = batch.series;
            series.extend(derived.series);
        }
        total += rb.build(series, &[]).expect("encodes").requests.iter().map(|r| r.body.len()).sum::<usize>();
    }
    println!("{n} scrapes, {total} bytes of requests");
}
