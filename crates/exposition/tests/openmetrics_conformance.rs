//! Runs the OpenMetrics project's parser test suite (211 cases, copied byte
//! for byte into `shared/conformance/openmetrics`): each case must parse when
//! `shouldParse` is true and be rejected, with an OpenMetrics rule named,
//! when it is false.
//!
//! The shared folder is found at `$INFERTEL_SHARED/conformance/openmetrics`
//! when `INFERTEL_SHARED` is set, else three levels above this crate.

use std::path::{Path, PathBuf};

use infertel_exposition::{Format, parse};

fn suite_dir() -> PathBuf {
    match std::env::var_os("INFERTEL_SHARED") {
        Some(shared) => PathBuf::from(shared).join("conformance/openmetrics"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/openmetrics"),
    }
}

#[test]
fn openmetrics_suite_211_of_211() {
    let dir = suite_dir();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("test.json").is_file())
        .collect();
    cases.sort();
    let mut failures = Vec::new();
    let mut rules = std::collections::BTreeMap::<&'static str, usize>::new();
    let mut run = 0;
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(case.join("test.json")).unwrap()).unwrap();
        if meta["type"] != "text" {
            continue;
        }
        run += 1;
        let should_parse = meta["shouldParse"].as_bool().expect("shouldParse");
        let body = std::fs::read(case.join(meta["file"].as_str().unwrap_or("metrics"))).unwrap();
        match (parse(&body, Format::OpenMetrics), should_parse) {
            (Ok(_), true) => {}
            (Err(e), false) => match e.rule {
                Some(rule) => *rules.entry(rule).or_default() += 1,
                None => failures.push(format!("{name}: rejected without a rule: {e}")),
            },
            (Ok(_), false) => failures.push(format!("{name}: accepted, should fail")),
            (Err(e), true) => failures.push(format!("{name}: rejected, should parse: {e}")),
        }
    }
    println!("OpenMetrics conformance: {}/{run} cases passed", run - failures.len());
    println!("rules seen: {rules:?}");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(run, 211, "expected the 211 upstream cases in {}", dir.display());
}
