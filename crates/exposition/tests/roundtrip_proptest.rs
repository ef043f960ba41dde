//! Property tests: generated expositions (names with colons, label values
//! with escapes and any UTF-8, values including NaN, ±Inf and huge numbers,
//! optional timestamps) are rendered to text, parsed back, and must come out
//! identical; and no input, however broken, makes the parser panic.

use infertel_exposition::{Format, MetricType, parse};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Gen {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
    ts_ms: Option<i64>,
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(9223372036854775794.0),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        (-1e6..1e6f64),
        (0u64..u64::MAX).prop_map(|v| v as f64),
    ]
}

fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 ._/-]{0,12}",
        "\\PC{0,12}",
        prop::collection::vec(
            prop_oneof![Just("\\"), Just("\""), Just("\n"), Just("x"), Just("\\n"), Just("é"), Just("#{}=,")],
            0..8
        )
        .prop_map(|v| v.concat()),
    ]
}

fn sample() -> impl Strategy<Value = Gen> {
    (
        "[a-zA-Z_:][a-zA-Z0-9_:]{0,12}",
        prop::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,8}", label_value(), 0..5),
        value(),
        prop::option::of(0i64..4_000_000_000_000),
    )
        .prop_map(|(name, labels, value, ts_ms)| Gen {
            name,
            labels: labels.into_iter().filter(|(n, _)| n != "__name__").collect(),
            value,
            ts_ms,
        })
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn render_value(v: f64, om: bool) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else if om {
        format!("{v:e}")
    } else {
        format!("{v:?}")
    }
}

fn render_labels(out: &mut String, labels: &[(String, String)], spaced: bool) {
    if labels.is_empty() {
        return;
    }
    out.push('{');
    for (i, (n, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push_str(if spaced { ", " } else { "," });
        }
        out.push_str(&format!("{n}=\"{}\"", escape(v)));
    }
    out.push('}');
}

fn same_value(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan() && b.to_bits() == infertel_model::NORMAL_NAN_BITS) || a.to_bits() == b.to_bits()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn text_roundtrip(samples in prop::collection::vec(sample(), 0..20), spaced in any::<bool>(), crlf_free_final_newline in any::<bool>()) {
        let mut body = String::new();
        for s in &samples {
            body.push_str(&s.name);
            render_labels(&mut body, &s.labels, spaced);
            body.push(' ');
            body.push_str(&render_value(s.value, false));
            if let Some(ts) = s.ts_ms {
                body.push_str(&format!(" {ts}"));
            }
            body.push('\n');
        }
        if !crlf_free_final_newline && body.ends_with('\n') {
            body.pop();
        }
        let e = parse(body.as_bytes(), Format::PrometheusText).map_err(|err| TestCaseError::fail(format!("{err}\n{body}")))?;
        prop_assert_eq!(e.samples.len(), samples.len());
        for (g, p) in samples.iter().zip(&e.samples) {
            prop_assert_eq!(&g.name, &p.name);
            prop_assert!(same_value(g.value, p.value), "{} vs {}", g.value, p.value);
            prop_assert_eq!(g.ts_ms, p.timestamp_ms);
            prop_assert_eq!(p.kind, MetricType::Unknown);
            let got: Vec<(String, String)> = e.labels(p).iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
            prop_assert_eq!(&g.labels, &got);
        }
    }

    #[test]
    fn openmetrics_roundtrip(samples in prop::collection::vec(sample(), 0..20)) {
        // One gauge family per distinct name, each sample its own label set.
        let mut body = String::new();
        let mut names: Vec<String> = Vec::new();
        let mut expected = Vec::new();
        for s in &samples {
            if names.contains(&s.name) {
                continue;
            }
            names.push(s.name.clone());
            body.push_str(&format!("# TYPE {} gauge\n# HELP {} help \\\\ \\n \\\" text\n", s.name, s.name));
            body.push_str(&s.name);
            render_labels(&mut body, &s.labels, false);
            body.push(' ');
            body.push_str(&render_value(s.value, true));
            if let Some(ts) = s.ts_ms {
                body.push_str(&format!(" {}.{:03}", ts / 1000, ts % 1000));
            }
            body.push('\n');
            expected.push(s.clone());
        }
        body.push_str("# EOF\n");
        let e = parse(body.as_bytes(), Format::OpenMetrics).map_err(|err| TestCaseError::fail(format!("{err}\n{body}")))?;
        prop_assert_eq!(e.samples.len(), expected.len());
        prop_assert_eq!(e.families.len(), expected.len());
        for (g, p) in expected.iter().zip(&e.samples) {
            prop_assert_eq!(&g.name, &p.name);
            prop_assert!(same_value(g.value, p.value), "{} vs {}", g.value, p.value);
            // As Prometheus converts `s.mmm`: int64(float(s.mmm) * 1000),
            // which can land a millisecond low (136914333.309 -> ...308).
            let go = g.ts_ms.map(|ts| (format!("{}.{:03}", ts / 1000, ts % 1000).parse::<f64>().unwrap() * 1000.0) as i64);
            prop_assert_eq!(go, p.timestamp_ms);
            prop_assert_eq!(p.kind, MetricType::Gauge);
            let f = &e.families[p.family.unwrap() as usize];
            prop_assert_eq!(f.help.as_deref(), Some("help \\ \n \" text"));
            let got: Vec<(String, String)> = e.labels(p).iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
            prop_assert_eq!(&g.labels, &got);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse(&body, Format::PrometheusText);
        let _ = parse(&body, Format::OpenMetrics);
    }

    #[test]
    fn mangled_text_never_panics(samples in prop::collection::vec(sample(), 1..6), cut in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut body = String::new();
        for s in &samples {
            body.push_str(&s.name);
            render_labels(&mut body, &s.labels, false);
            body.push_str(&format!(" {}\n", render_value(s.value, false)));
        }
        let mut bytes = body.into_bytes();
        let i = cut.index(bytes.len());
        bytes[i] = byte;
        let _ = parse(&bytes, Format::PrometheusText);
        bytes.extend_from_slice(b"# EOF\n");
        let _ = parse(&bytes, Format::OpenMetrics);
    }
}
