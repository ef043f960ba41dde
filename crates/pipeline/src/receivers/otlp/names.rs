//! OTLP names as Prometheus names them (`prometheus/otlptranslator`, which
//! Prometheus' OTLP endpoint uses), per `otlp_translation_strategy`:
//!
//! - `UnderscoreEscapingWithSuffixes` (the default): the name split into
//!   tokens at every character outside `[a-zA-Z0-9:]` (so `_` runs
//!   collapse), the unit's words added unless a token already is one
//!   (`s` → `seconds`, `By/s` → `bytes_per_second`, `{annotations}`
//!   dropped), `total` moved to the end of a monotonic sum, `ratio` to the
//!   end of a gauge of unit `1`, a `_` before a leading digit;
//! - `UnderscoreEscapingWithoutSuffixes`: invalid characters escaped only;
//! - `NoTranslation`: names and attribute keys as sent.
//!
//! Label names as Prometheus' defaults write them: every character outside
//! `[a-zA-Z0-9_]` becomes `_` (runs kept), a leading digit gets `key_`, a
//! single leading `_` gets `key`.

use super::config::Strategy;

/// What the namer needs to know of a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    MonotonicCounter,
    NonMonotonicCounter,
    Histogram,
    Summary,
}

fn valid(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == ':'
}

const UNITS: &[(&str, &str)] = &[
    ("d", "days"),
    ("h", "hours"),
    ("min", "minutes"),
    ("s", "seconds"),
    ("ms", "milliseconds"),
    ("us", "microseconds"),
    ("ns", "nanoseconds"),
    ("By", "bytes"),
    ("KiBy", "kibibytes"),
    ("MiBy", "mebibytes"),
    ("GiBy", "gibibytes"),
    ("TiBy", "tibibytes"),
    ("KBy", "kilobytes"),
    ("MBy", "megabytes"),
    ("GBy", "gigabytes"),
    ("TBy", "terabytes"),
    ("m", "meters"),
    ("V", "volts"),
    ("A", "amperes"),
    ("J", "joules"),
    ("W", "watts"),
    ("g", "grams"),
    ("Cel", "celsius"),
    ("Hz", "hertz"),
    ("1", ""),
    ("%", "percent"),
];

const PER_UNITS: &[(&str, &str)] =
    &[("s", "second"), ("m", "minute"), ("h", "hour"), ("d", "day"), ("w", "week"), ("mo", "month"), ("y", "year")];

fn lookup(table: &[(&str, &'static str)], k: &str) -> Option<&'static str> {
    table.iter().find(|(u, _)| *u == k).map(|(_, w)| *w)
}

/// Every character outside `[a-zA-Z0-9:]` to `_`, runs collapsed, one
/// leading `_` removed (otlptranslator's `cleanUpUnit`).
fn clean_unit(s: &str) -> String {
    let mapped: String = s.chars().map(|c| if valid(c) { c } else { '_' }).collect();
    let mut out = String::with_capacity(mapped.len());
    for c in mapped.chars() {
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    out.strip_prefix('_').map(str::to_string).unwrap_or(out)
}

/// `(main, per)` suffixes of a unit.
fn unit_suffixes(unit: &str) -> (String, String) {
    let mut parts = unit.splitn(2, '/');
    let main = parts.next().unwrap_or("").trim();
    let per = parts.next().map(str::trim);
    let main = if main.is_empty() || main.contains(['{', '}']) {
        String::new()
    } else {
        clean_unit(lookup(UNITS, main).unwrap_or(main))
    };
    let per = match per {
        Some(p) if !p.is_empty() && !p.contains(['{', '}']) => {
            format!("per_{}", clean_unit(lookup(PER_UNITS, p).unwrap_or(p)))
        }
        _ => String::new(),
    };
    (main, per)
}

/// The metric's Prometheus name; `Err` when nothing valid is left.
pub fn metric_name(name: &str, unit: &str, kind: Kind, strategy: Strategy) -> Result<String, String> {
    match strategy {
        Strategy::NoTranslation | Strategy::NoUTF8EscapingWithSuffixes => Ok(name.to_string()),
        Strategy::UnderscoreEscapingWithoutSuffixes => {
            let tokens: Vec<&str> = name.split(|c: char| !valid(c) && c != '_').filter(|t| !t.is_empty()).collect();
            let mut out = tokens.join("_");
            if out.is_empty() {
                return Err(format!("normalization for metric {name:?} resulted in empty name"));
            }
            if out != name && out.chars().all(|c| c == '_') {
                return Err(format!("normalization for metric {name:?} resulted in invalid name {out:?}"));
            }
            if out.starts_with(|c: char| c.is_ascii_digit()) {
                out.insert(0, '_');
            }
            Ok(out)
        }
        Strategy::UnderscoreEscapingWithSuffixes => {
            let mut tokens: Vec<String> =
                name.split(|c: char| !valid(c)).filter(|t| !t.is_empty()).map(str::to_string).collect();
            let (main, per) = unit_suffixes(unit);
            let mut main = main;
            let mut per = per;
            if !main.is_empty() && tokens.contains(&main) {
                main.clear();
            }
            if per == "per_" {
                per.clear();
            } else if !per.is_empty() {
                let p = per.trim_end_matches('_').to_string();
                per = if tokens.contains(&p) { String::new() } else { p };
            }
            if !per.is_empty() {
                main = main.trim_end_matches('_').to_string();
            }
            if !main.is_empty() {
                tokens.push(main);
            }
            if !per.is_empty() {
                tokens.push(per);
            }
            if kind == Kind::MonotonicCounter {
                tokens.retain(|t| t != "total");
                tokens.push("total".into());
            }
            if unit == "1" && kind == Kind::Gauge {
                tokens.retain(|t| t != "ratio");
                tokens.push("ratio".into());
            }
            let mut out = tokens.join("_");
            if out.is_empty() {
                return Err(format!("normalization for metric {name:?} resulted in empty name"));
            }
            if out.starts_with(|c: char| c.is_ascii_digit()) {
                out.insert(0, '_');
            }
            Ok(out)
        }
    }
}

/// The metadata unit Prometheus records (`main_per`, `main` or `per`).
pub fn metadata_unit(unit: &str) -> String {
    let (main, per) = unit_suffixes(unit);
    let s = match (main.is_empty(), per.is_empty()) {
        (false, false) => format!("{main}_{per}"),
        (false, true) => main,
        (true, false) => per,
        (true, true) => String::new(),
    };
    let s = s.strip_prefix('_').unwrap_or(&s);
    s.strip_suffix('_').unwrap_or(s).to_string()
}

/// An attribute key as a label name; `Err` when it cannot be one.
pub fn label_name(key: &str, strategy: Strategy) -> Result<String, String> {
    if key.is_empty() {
        return Err("label name is empty".into());
    }
    if matches!(strategy, Strategy::NoTranslation | Strategy::NoUTF8EscapingWithSuffixes) {
        if key.chars().all(|c| c == '_') {
            return Err(format!("label name {key:?} contains only underscores"));
        }
        return Ok(key.to_string());
    }
    let mut out: String = key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "key_");
    } else if out.starts_with('_') && !out.starts_with("__") {
        out.insert_str(0, "key");
    }
    if out.chars().all(|c| c == '_') {
        return Err(format!("normalization for label name {key:?} resulted in invalid name {out:?}"));
    }
    Ok(out)
}

/// A bucket bound or quantile as Prometheus writes it (Go's `'f', -1`).
pub use infertel_exposition::format_value as plain_float;

#[cfg(test)]
mod tests {
    use super::*;
    use Kind::*;
    use Strategy::*;

    const S: Strategy = UnderscoreEscapingWithSuffixes;

    /// The vectors of otlptranslator's metric_namer_test.go.
    #[test]
    fn metric_names_as_otlptranslator_builds_them() {
        let cases: &[(&str, &str, Kind, &str)] = &[
            ("requests", "", MonotonicCounter, "requests_total"),
            ("cpu_usage", "1", Gauge, "cpu_usage_ratio"),
            ("items", "1", MonotonicCounter, "items_total"),
            ("response_time", "ms", Gauge, "response_time_milliseconds"),
            ("memory_usage", "By", Gauge, "memory_usage_bytes"),
            ("requests", "1/s", Gauge, "requests_per_second"),
            ("throughput", "By/s", Gauge, "throughput_bytes_per_second"),
            ("custom_metric", "custom_unit", Gauge, "custom_metric_custom_unit"),
            ("custom_metric", "{custom}", Gauge, "custom_metric"),
            ("custom_metric", "By/{custom}", Gauge, "custom_metric_bytes"),
            ("requests_total", "", MonotonicCounter, "requests_total"),
            ("cpu_usage_ratio", "1", Gauge, "cpu_usage_ratio"),
            ("response_time_seconds", "s", Gauge, "response_time_seconds"),
            (
                "metric__with__multiple__underscores",
                "unit__multiple__underscores",
                Gauge,
                "metric_with_multiple_underscores_unit_multiple_underscores",
            ),
            ("custom_metric", "unit@with#special/chars", Gauge, "custom_metric_unit_with_special_per_chars"),
            ("active_connections", "", NonMonotonicCounter, "active_connections"),
            ("request_duration", "s", Histogram, "request_duration_seconds"),
            ("custom", "1/custom_unit", Gauge, "custom_per_custom_unit"),
            ("invoices", "1/mo", Gauge, "invoices_per_month"),
            ("metric", "By/", Gauge, "metric_bytes"),
            ("metric", " By / s ", Gauge, "metric_bytes_per_second"),
            ("metric", "/", Gauge, "metric"),
            ("http.request.duration", "ms", Histogram, "http_request_duration_milliseconds"),
            ("http.requests", "1", MonotonicCounter, "http_requests_total"),
            ("system.network.packets.dropped", "packets", Gauge, "system_network_packets_dropped"),
            ("system.network.dropped", "{packets}", MonotonicCounter, "system_network_dropped_total"),
            ("hw.fan.speed_ratio", "1", Gauge, "hw_fan_speed_ratio"),
            ("system.cpu.load_average.15m", "1", Gauge, "system_cpu_load_average_15m_ratio"),
            ("broken.metric.success_ratio", "%", Gauge, "broken_metric_success_ratio_percent"),
            ("broken.metric.speed", "km/h", Gauge, "broken_metric_speed_km_per_hour"),
            ("broken.metric.speed", "km/°", Gauge, "broken_metric_speed_km"),
            ("3.14 digits", "", Gauge, "_3_14_digits"),
            ("envoy__rule_engine_zlib_buf_error", "", Gauge, "envoy_rule_engine_zlib_buf_error"),
            (":foo::bar", "", MonotonicCounter, ":foo::bar_total"),
            ("metric_with_字符_foreign_characters", "", MonotonicCounter, "metric_with_foreign_characters_total"),
            ("temperature", "%*()°:C", Gauge, "temperature_:C"),
            ("\t system.filesystem.usage   ", "  By\t", Gauge, "system_filesystem_usage_bytes"),
            ("vllm:generation_tokens", "{token}", MonotonicCounter, "vllm:generation_tokens_total"),
        ];
        for (name, unit, kind, want) in cases {
            assert_eq!(metric_name(name, unit, *kind, S).as_deref(), Ok(*want), "{name:?} {unit:?} {kind:?}");
        }
        assert_eq!(
            metric_name("@#$%", "", Gauge, S).unwrap_err(),
            "normalization for metric \"@#$%\" resulted in empty name"
        );
        assert_eq!(
            metric_name("http.request.duration", "ms", Histogram, NoTranslation).unwrap(),
            "http.request.duration"
        );
        let w = UnderscoreEscapingWithoutSuffixes;
        assert_eq!(metric_name("metric@with#special$chars", "", Gauge, w).unwrap(), "metric_with_special_chars");
        assert_eq!(metric_name("123metric", "", Gauge, w).unwrap(), "_123metric");
        assert_eq!(metric_name("metric@@##$$name", "", Gauge, w).unwrap(), "metric_name");
        assert_eq!(
            metric_name("@_#_$_%", "", Gauge, w).unwrap_err(),
            "normalization for metric \"@_#_$_%\" resulted in invalid name \"_____\""
        );
    }

    /// label_namer_test.go, in Prometheus' default mode (underscore
    /// sanitization on, multiple underscores preserved).
    #[test]
    fn label_names_as_prometheus_defaults_write_them() {
        let cases = [
            ("label:with:colons", "label_with_colons"),
            ("LabelWithCapitalLetters", "LabelWithCapitalLetters"),
            ("label!with&special$chars)", "label_with_special_chars_"),
            ("label.with.dots", "label_with_dots"),
            ("123label", "key_123label"),
            ("label_with_foreign_characters_字符", "label_with_foreign_characters___"),
            (".foo", "key_foo"),
            ("_label_starting_with_underscore", "key_label_starting_with_underscore"),
            ("__label_starting_with_2underscores", "__label_starting_with_2underscores"),
            ("label__with__double__underscores", "label__with__double__underscores"),
            ("label.name__with&&special##chars", "label_name__with__special__chars"),
            ("__reserved__label__name__", "__reserved__label__name__"),
            ("trailing_underscores___", "trailing_underscores___"),
        ];
        for (k, want) in cases {
            assert_eq!(label_name(k, S).as_deref(), Ok(want), "{k}");
        }
        assert!(label_name("ようこそ", S).unwrap_err().contains("resulted in invalid name \"____\""));
        assert!(label_name("__", S).is_err());
        assert_eq!(label_name("service.name", NoTranslation).unwrap(), "service.name");
    }

    #[test]
    fn units_and_bounds() {
        assert_eq!(metadata_unit("s"), "seconds");
        assert_eq!(metadata_unit("By/s"), "bytes_per_second");
        assert_eq!(metadata_unit("{token}"), "");
        assert_eq!(metadata_unit("1"), "");
        assert_eq!(plain_float(0.005), "0.005");
        assert_eq!(plain_float(1_000_000.0), "1000000");
        assert_eq!(plain_float(2.5e-7), "0.00000025");
    }
}
