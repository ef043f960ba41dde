//! Prometheus text 0.0.4 edge cases (NOTES.md §1, T01–T45), each checked
//! against what a real Prometheus 2.42 scrape did with the same bytes.
//!
//! `oracle/cases/*.txt` are the bodies; `oracle/run-prometheus-oracle.py`
//! served them to `/usr/bin/prometheus` 2.42 and recorded, per case, `up`,
//! the stored series and the target metadata in
//! `oracle/prometheus-2.42-results.json`. This test replays every case
//! through our parser and requires: `Ok` exactly when 2.42 had `up=1`, the same
//! series (name, labels, value) that 2.42 stored, and the same TYPE/HELP.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use infertel_exposition::{Exposition, Format, MetricType, parse};
use serde_json::Value;

/// Cases where we differ from 2.42 on purpose: the quoted UTF-8 name syntax
/// (Prometheus 3) is accepted; 2.42 fails the scrape on it.
const ACCEPTED_ON_PURPOSE: &[&str] = &[
    "t24_quoted_name",
    "t24b_quoted_name_with_labels",
    "t24c_quoted_name_not_first",
    "t24d_quoted_legacy_name",
    "t24e_quoted_name_metadata",
    "t24j_quoted_label_name",
];

fn oracle_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("oracle")
}

fn load() -> (String, BTreeMap<String, Value>) {
    let text = std::fs::read_to_string(oracle_dir().join("prometheus-2.42-results.json")).expect("oracle results");
    let v: Value = serde_json::from_str(&text).expect("oracle json");
    let cases = v["cases"].as_object().expect("cases").clone().into_iter().collect();
    (v["prometheus"].as_str().unwrap_or_default().to_string(), cases)
}

fn body(name: &str) -> Vec<u8> {
    std::fs::read(oracle_dir().join("cases").join(format!("{name}.txt"))).expect("case body")
}

type Series = (String, Vec<(String, String)>, f64);

/// What 2.42 would store from our parse: samples without an explicit
/// timestamp (the cases' timestamps are years old, so 2.42 dropped them as
/// out of bounds), labels with empty values removed (a name with any empty
/// value is removed as a whole), first sample of a duplicated series kept.
fn as_stored(e: &Exposition<'_>) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for s in e.samples.iter().filter(|s| s.timestamp_ms.is_none()) {
        let labels = e.labels(s);
        let mut l: Vec<(String, String)> = labels
            .iter()
            .filter(|(n, _)| !labels.iter().any(|(m, v)| m == n && v.is_empty()))
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        l.sort();
        let key = (s.name.to_string(), l, s.value);
        if !out.iter().any(|o| o.0 == key.0 && o.1 == key.1) {
            out.push(key);
        }
    }
    out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    out
}

fn oracle_series(case: &Value) -> Vec<Series> {
    let mut out: Vec<Series> = case["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let mut l: Vec<(String, String)> = s["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            l.sort();
            let v = match s["value"].as_str().unwrap() {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                x => x.parse().unwrap(),
            };
            (s["name"].as_str().unwrap().to_string(), l, v)
        })
        .collect();
    out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    out
}

fn same_value(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b
}

#[test]
fn every_case_matches_prometheus_2_42() {
    let (version, cases) = load();
    assert!(version.contains("2.42"), "oracle was recorded with {version}");
    assert!(cases.len() >= 170, "only {} oracle cases", cases.len());
    let on_disk = std::fs::read_dir(oracle_dir().join("cases")).unwrap().count();
    assert_eq!(on_disk, cases.len(), "cases/ and the results JSON differ: rerun the oracle");
    let mut failures = Vec::new();
    let (mut accepted, mut rejected) = (0, 0);
    for (name, case) in &cases {
        let bytes = body(name);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(case["body_hex"].as_str().unwrap(), hex, "{name}: body changed since the oracle ran");
        let up = case["up"].as_i64().unwrap() == 1;
        let result = parse(&bytes, Format::PrometheusText);
        let expect_ok = up || ACCEPTED_ON_PURPOSE.contains(&name.as_str());
        if result.is_ok() {
            accepted += 1
        } else {
            rejected += 1
        }
        match (&result, expect_ok) {
            (Ok(_), false) => failures.push(format!("{name}: we accept, 2.42 failed: {}", case["last_error"])),
            (Err(e), true) => failures.push(format!("{name}: we reject ({e}), 2.42 accepted")),
            _ => {}
        }
        let (Ok(e), true) = (&result, up) else {
            continue;
        };
        let ours = as_stored(e);
        let theirs = oracle_series(case);
        let same = ours.len() == theirs.len()
            && ours.iter().zip(&theirs).all(|(a, b)| a.0 == b.0 && a.1 == b.1 && same_value(a.2, b.2));
        if !same {
            failures.push(format!("{name}: series differ\n  ours:   {ours:?}\n  2.42:   {theirs:?}"));
        }
        for m in case["metadata"].as_array().unwrap() {
            let metric = m["metric"].as_str().unwrap();
            let Some(f) = e.families.iter().find(|f| f.name == metric) else {
                failures.push(format!("{name}: no family {metric}"));
                continue;
            };
            let help = f.help.as_deref().unwrap_or("");
            if f.kind.as_str() != m["type"].as_str().unwrap() || help != m["help"].as_str().unwrap() {
                failures.push(format!("{name}: family {metric}: ours {:?} {help:?}, 2.42 {m}", f.kind));
            }
        }
    }
    println!("{} oracle cases: {accepted} accepted, {rejected} rejected", cases.len());
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

fn ok(body: &str) -> Exposition<'_> {
    parse(body.as_bytes(), Format::PrometheusText).unwrap_or_else(|e| panic!("{body:?}: {e}"))
}

// The rest pin down what the oracle cannot show: types and families by name,
// our deliberate extensions, and error positions.

#[test]
fn t16_untyped_sample_does_not_inherit_previous_type() {
    let b = std::fs::read_to_string(oracle_dir().join("cases/t16_untyped_inherits_trap.txt")).unwrap();
    let e = ok(&b);
    let wind = e.samples.iter().find(|s| s.name == "wind_speed").unwrap();
    assert_eq!((wind.kind, wind.family), (MetricType::Unknown, None));
    assert!(e.samples.iter().filter(|s| s.name.starts_with("h_")).all(|s| s.kind == MetricType::Histogram));
}

#[test]
fn t21_metadata_block_first_types_by_name() {
    let b = std::fs::read_to_string(oracle_dir().join("cases/t21_dcgm_metadata_first.txt")).unwrap();
    let e = ok(&b);
    let kinds: Vec<_> = e.samples.iter().map(|s| (s.name.as_ref(), s.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("DCGM_FI_DEV_SM_CLOCK", MetricType::Gauge),
            ("DCGM_FI_DEV_XID_ERRORS", MetricType::Gauge),
            ("DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL", MetricType::Counter)
        ]
    );
    assert_eq!(e.samples[2].value, 9223372036854775794.0);
    // dcgm's `", "` separators and empty values are kept as written.
    let l = e.labels(&e.samples[0]);
    assert_eq!(l[0], ("gpu".into(), "0".into()));
    assert_eq!(l.last().unwrap(), &("pod".into(), "".into()));
}

#[test]
fn t40_suffixes_join_a_family_only_when_its_type_says_so() {
    let e = ok(
        "fake_sum 1\nfake_count 2\n# TYPE foo_count gauge\nfoo_count 3\n# TYPE s summary\ns 1\ns_sum 1\ns_count 1\ns_bucket 1\n# TYPE c counter\nc_total 1\nc_sum 1\n",
    );
    let k: Vec<_> = e.samples.iter().map(|s| (s.name.as_ref(), s.kind, s.family)).collect();
    assert_eq!(
        k,
        [
            ("fake_sum", MetricType::Unknown, None),
            ("fake_count", MetricType::Unknown, None),
            ("foo_count", MetricType::Gauge, Some(0)),
            ("s", MetricType::Summary, Some(1)),
            ("s_sum", MetricType::Summary, Some(1)),
            ("s_count", MetricType::Summary, Some(1)),
            ("s_bucket", MetricType::Unknown, None),
            ("c_total", MetricType::Counter, Some(2)),
            ("c_sum", MetricType::Unknown, None),
        ]
    );
}

#[test]
fn t44_created_series_are_their_own_gauges() {
    let b = std::fs::read_to_string(oracle_dir().join("cases/t44_created_gauges.txt")).unwrap();
    let e = ok(&b);
    assert_eq!(e.samples[0].kind, MetricType::Counter);
    assert_eq!(e.families[e.samples[0].family.unwrap() as usize].name, "vllm:request_success_total");
    assert_eq!(e.samples[1].kind, MetricType::Gauge);
    assert_eq!(e.families[e.samples[1].family.unwrap() as usize].name, "vllm:request_success_created");
}

#[test]
fn t17_type_after_samples_and_duplicates_last_wins() {
    let e = ok("a 1\n# TYPE a gauge\n# TYPE b counter\n# TYPE b gauge\nb 1\n");
    assert_eq!(e.samples[0].kind, MetricType::Gauge);
    assert_eq!(e.samples[1].kind, MetricType::Gauge);
}

#[test]
fn t24_quoted_names_are_accepted_on_purpose() {
    let e = ok(
        "# TYPE \"my.metric\" counter\n{\"my.metric\",a=\"b\"} 1\n{a=\"c\", \"my.metric\" ,} 2\nx{\"dotted.label\"=\"v\"} 3\n{\"esc\\\"aped\"} 4\n",
    );
    assert_eq!(e.samples[0].name, "my.metric");
    assert_eq!(e.samples[0].kind, MetricType::Counter);
    assert_eq!(e.labels(&e.samples[0]), &[("a".into(), "b".into())]);
    assert_eq!(e.samples[1].name, "my.metric");
    assert_eq!(e.labels(&e.samples[1]), &[("a".into(), "c".into())]);
    assert_eq!(e.labels(&e.samples[2]), &[("dotted.label".into(), "v".into())]);
    assert_eq!(e.samples[3].name, "esc\"aped");
    for bad in ["{a=\"ok\"} 1\n", "{} 1\n", "a{\"b\"} 1\n", "{\"a\",\"b\"} 1\n", "{\"\"} 1\n"] {
        assert!(parse(bad.as_bytes(), Format::PrometheusText).is_err(), "{bad:?}");
    }
}

#[test]
fn borrowing_and_escapes() {
    let e = ok("a{b=\"plain\",c=\"q\\\"q\"} 1\n");
    let l = e.labels(&e.samples[0]);
    assert!(matches!(l[0].1, std::borrow::Cow::Borrowed(_)));
    assert!(matches!(l[1].1, std::borrow::Cow::Owned(_)));
    assert_eq!(l[1].1, "q\"q");
    assert!(matches!(e.samples[0].name, std::borrow::Cow::Borrowed(_)));
}

#[test]
fn line_numbers_and_error_positions() {
    let e = ok("\n# HELP a x\na 1\n\nb{c=\"x\ny\"} 2\nd 3");
    let lines: Vec<u32> = e.samples.iter().map(|s| s.line).collect();
    assert_eq!(lines, [3, 5, 7]);
    let err = parse(b"a 1\nb{c=\"1\",,} 2\n", Format::PrometheusText).unwrap_err();
    assert_eq!((err.line, err.column, err.rule), (2, 9, None));
    assert!(err.to_string().starts_with("line 2:9: expected label name"), "{err}");
    let err = parse(b"a 1\nb 1e400\n", Format::PrometheusText).unwrap_err();
    assert_eq!((err.line, err.column), (2, 3));
    assert!(err.reason.contains("out of range"));
}

#[test]
fn nan_is_canonical_and_values() {
    let e = ok("a NaN\nb nan\nc 1e-400\nd -0\ne 0.1000000000000000055511151231257827021181583404541015625\n");
    assert_eq!(e.samples[0].value.to_bits(), infertel_model::NORMAL_NAN_BITS);
    assert_eq!(e.samples[1].value.to_bits(), infertel_model::NORMAL_NAN_BITS);
    assert_eq!(e.samples[2].value, 0.0);
    assert!(e.samples[3].value == 0.0 && e.samples[3].value.is_sign_negative());
    assert_eq!(e.samples[4].value, 0.1);
}

#[test]
fn timestamps_are_int_ms() {
    let e = ok("a 1 1395066363000\nb 2 0 \n");
    assert_eq!(e.samples[0].timestamp_ms, Some(1395066363000));
    assert_eq!(e.samples[1].timestamp_ms, Some(0));
}
