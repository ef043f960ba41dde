//! Runs the per-scrape hot path (build_series on a warm cache, then the
//! remote-write request) a fixed number of times, for profilers:
//! `valgrind --tool=callgrind target/release/examples/hot_path 200`
//! counts instructions, which stay stable on a busy machine.

use infertel_model::Labels;
use infertel_pipeline::exporters::prometheusremotewrite::request_builder::RequestBuilder;
use infertel_pipeline::receivers::prometheus::scrape::{JobSettings, ScrapeAuth, SeriesCache, build_series};
use infertel_pipeline::receivers::prometheus::target::Target;
use infertel_relabel::Relabeler;
use std::time::Duration;

const BODY: &[u8] = include_bytes!("../benches/data/node-1000.prom");

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let labels = Labels::from_pairs([("job", "bench"), ("instance", "127.0.0.1:21000")]);
    let t = Target {
        all_labels: labels.clone(),
        labels,
        url: "http://127.0.0.1:21000/metrics".into(),
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
    };
    let j = JobSettings {
        receiver: "prometheus".into(),
        honor_labels: false,
        honor_timestamps: true,
        sample_limit: 0,
        label_limit: 0,
        label_name_length_limit: 0,
        label_value_length_limit: 0,
        body_size_limit: 0,
        metric_relabel: Relabeler::default(),
        external_labels: vec![],
        auth: ScrapeAuth::None,
        interner: Default::default(),
    };
    let mut cache = SeriesCache::default();
    let mut rb = RequestBuilder::new(3_000_000, false, vec![]);
    let mut total = 0usize;
    for i in 0..n {
        let mut series = Vec::with_capacity(1024);
        let mut md = Vec::new();
        build_series(BODY, None, i as i64, &t, &j, &mut cache, &mut series, &mut md, false).expect("fixture");
        total += rb.build(series, &[]).expect("encodes").iter().map(|r| r.body.len()).sum::<usize>();
    }
    println!("{n} scrapes, {total} bytes of requests");
}
