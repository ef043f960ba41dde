//! What a Prometheus 2.42 scrape accepts in OpenMetrics, accepted by
//! `parse_as_prometheus` (the strict `parse` still follows the spec's
//! suite), and the cost of hostile label lists. The cases are the ones
//! Prometheus' `openmetricsparse.go` reads without error (issue 13 §4).

use infertel_exposition::{Format, parse, parse_as_prometheus};

fn om(body: &str) -> (bool, bool) {
    (
        parse(body.as_bytes(), Format::OpenMetrics).is_ok(),
        parse_as_prometheus(body.as_bytes(), Format::OpenMetrics).is_ok(),
    )
}

#[test]
fn openmetrics_as_prometheus_reads_it() {
    let long = "x".repeat(140);
    for (case, body) in [
        ("counter without _total", "# TYPE c counter\nc 1\n# EOF\n".to_string()),
        ("negative counter", "# TYPE c counter\nc_total -3\n# EOF\n".to_string()),
        ("histogram without +Inf", "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_count 2\nh_sum 1\n# EOF\n".to_string()),
        ("repeated HELP", "# HELP g a\n# HELP g b\n# TYPE g gauge\ng 1\n# EOF\n".to_string()),
        (
            "non-contiguous family",
            "# TYPE a gauge\na{x=\"1\"} 1\n# TYPE b gauge\nb 1\n# TYPE a gauge\na{x=\"2\"} 2\n# EOF\n".to_string(),
        ),
        ("long exemplar", format!("# TYPE c counter\nc_total 4 # {{trace_id=\"{long}\"}} 1.0\n# EOF\n")),
        ("quantile out of range", "# TYPE s summary\ns{quantile=\"2\"} 1\n# EOF\n".to_string()),
        ("timestamps backwards", "# TYPE g gauge\ng 1 2\ng 1 1\n# EOF\n".to_string()),
    ] {
        assert_eq!(om(&body), (false, true), "{case}: strict refuses, Prometheus' reading accepts");
    }
    // What Prometheus refuses too.
    for (case, body) in [
        ("no # EOF", "# TYPE g gauge\ng 1\n"),
        ("text after # EOF", "# TYPE g gauge\ng 1\n# EOF\ng 2\n"),
        ("unit not a suffix", "# TYPE g gauge\n# UNIT g seconds\ng 1\n# EOF\n"),
        ("exemplar on a gauge name", "# TYPE g gauge\ng 1 # {a=\"b\"} 1\n# EOF\n"),
        ("blank line", "# TYPE g gauge\n\ng 1\n# EOF\n"),
        ("bad type", "# TYPE g gauges\ng 1\n# EOF\n"),
    ] {
        assert_eq!(om(body), (false, false), "{case}");
    }
    // Read as written: the sample keeps its name and its family's type.
    let e = parse_as_prometheus(b"# TYPE c counter\nc 5\n# EOF\n", Format::OpenMetrics).unwrap();
    assert_eq!(e.samples[0].name, "c");
    assert_eq!(e.samples[0].kind, infertel_model::MetricType::Counter);
}

#[test]
fn timestamps_truncate_to_milliseconds_as_prometheus() {
    // int64(ts * 1000): 1.0005 s is 1000 ms, 1.5 s 1500 ms, -1.0005 s -1000 ms.
    for (ts, want) in [("1.0005", 1000), ("1.5", 1500), ("123.123", 123123), ("-1.0005", -1000), ("1.001", 1000)] {
        let body = format!("# TYPE g gauge\ng 1 {ts}\n# EOF\n");
        let e = parse_as_prometheus(body.as_bytes(), Format::OpenMetrics).unwrap();
        assert_eq!(e.samples[0].timestamp_ms, Some(want), "{ts}");
    }
}

#[test]
fn a_line_with_80000_labels_is_parsed_in_linear_time() {
    // Quadratic duplicate checks would compare 3.2e9 pairs here: minutes on
    // one core. Distinct names, then the same line with one repeat.
    let labels: Vec<String> = (0..80_000).map(|i| format!("l{i}=\"v\"")).collect();
    let text = format!("hostile{{{}}} 1\n", labels.join(","));
    let e = parse_as_prometheus(text.as_bytes(), Format::PrometheusText).unwrap();
    assert_eq!(e.labels(&e.samples[0]).len(), 80_000);
    let om_body = format!("# TYPE hostile gauge\n{text}# EOF\n");
    assert!(parse_as_prometheus(om_body.as_bytes(), Format::OpenMetrics).is_ok());
    let repeated = format!("hostile{{{},l5=\"w\"}} 1\n", labels.join(","));
    let err = parse_as_prometheus(repeated.as_bytes(), Format::PrometheusText).unwrap_err();
    assert!(err.to_string().contains("l5"), "{err}");
    let om_rep = format!("# TYPE hostile gauge\n{repeated}# EOF\n");
    assert!(parse_as_prometheus(om_rep.as_bytes(), Format::OpenMetrics).is_err());
}
