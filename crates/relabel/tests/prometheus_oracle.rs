//! Differential test against a real Prometheus 2.42.
//!
//! `oracle/prometheus-2.42-results.json` was produced by
//! `oracle/run-prometheus-oracle.sh`: the same inputs and rules went through
//! Prometheus' scrape-time metric relabeling and target relabeling. Here they
//! go through our `Relabeler`, and the results must be identical.

use std::collections::{BTreeMap, BTreeSet};

use infertel_model::Labels;
use infertel_relabel::{RelabelConfig, Relabeler};
use serde::Deserialize;

type LabelMap = BTreeMap<String, String>;

#[derive(Deserialize)]
struct Results {
    prometheus_version: String,
    metric_cases: Vec<MetricCase>,
    target_cases: Vec<TargetCase>,
}

#[derive(Deserialize)]
struct MetricCase {
    name: String,
    configs: Vec<RelabelConfig>,
    inputs: Vec<LabelMap>,
    outputs: Vec<LabelMap>,
}

#[derive(Deserialize)]
struct TargetCase {
    name: String,
    configs: Vec<RelabelConfig>,
    targets: Vec<Target>,
}

#[derive(Deserialize)]
struct Target {
    input: LabelMap,
    output: Option<LabelMap>,
}

fn load() -> Results {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/oracle/prometheus-2.42-results.json");
    let text = std::fs::read_to_string(path).expect("oracle results file");
    let r: Results = serde_json::from_str(&text).expect("oracle results parse");
    assert!(r.prometheus_version.contains("2.42"), "recorded with {}", r.prometheus_version);
    r
}

fn to_labels(m: &LabelMap) -> Labels {
    Labels::from_pairs(m.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

fn to_map(l: &Labels) -> LabelMap {
    l.iter().map(|l| (l.name.to_string(), l.value.to_string())).collect()
}

#[test]
fn metric_relabeling_matches_prometheus() {
    let r = load();
    assert!(r.metric_cases.len() >= 10);
    for case in &r.metric_cases {
        let relabeler = Relabeler::new(&case.configs).unwrap_or_else(|e| panic!("case {}: {e}", case.name));
        // Prometheus stores each distinct resulting label set once.
        let ours: BTreeSet<LabelMap> =
            case.inputs.iter().filter_map(|i| relabeler.process(&to_labels(i))).map(|l| to_map(&l)).collect();
        let theirs: BTreeSet<LabelMap> = case.outputs.iter().cloned().collect();
        let missing: Vec<_> = theirs.difference(&ours).collect();
        let extra: Vec<_> = ours.difference(&theirs).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "case {}:\n  only Prometheus produced: {missing:#?}\n  only we produced: {extra:#?}",
            case.name
        );
    }
}

#[test]
fn target_relabeling_matches_prometheus() {
    let r = load();
    for case in &r.target_cases {
        let relabeler = Relabeler::new(&case.configs).unwrap_or_else(|e| panic!("case {}: {e}", case.name));
        let mut dropped = 0;
        for t in &case.targets {
            // What Prometheus does after relabeling a target: `__`-prefixed
            // labels are not public, and `instance` defaults to `__address__`.
            let ours = relabeler.process(&to_labels(&t.input)).map(|l| {
                let mut m = to_map(&l);
                if !m.contains_key("instance")
                    && let Some(addr) = m.get("__address__").cloned()
                {
                    m.insert("instance".into(), addr);
                }
                m.retain(|k, _| !k.starts_with("__"));
                m
            });
            dropped += usize::from(t.output.is_none());
            assert_eq!(ours, t.output, "case {} target {:?}", case.name, t.input.get("__address__"));
        }
        assert!(dropped > 0 && dropped < case.targets.len(), "the hashmod keep should drop some targets");
    }
}
