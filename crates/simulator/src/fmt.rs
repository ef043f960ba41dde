//! Number formatting exactly as the two exporters print values.
//!
//! vLLM exposes metrics through Python's `prometheus_client`, which formats
//! every value with `floatToGoString`: Python's `repr(float)` (shortest
//! round-trip digits, always a fractional part or an exponent), except that
//! positive numbers with seven or more integer digits are rewritten into an
//! exponent form "because Go switches to exponents sooner than Python"
//! (`1048576.0` becomes `1.048576e+06`). dcgm-exporter is a Go text template
//! printing int64 fields with `%d` and doubles with `%f`.

/// Python `repr(float)`.
pub fn py_repr(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    // Rust's `{:e}` gives the shortest round-trip digits, like Python's repr.
    let sci = format!("{:e}", v.abs());
    let (mant, exp) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let sign = if v < 0.0 { "-" } else { "" };
    // Python switches to scientific notation when the decimal point position
    // (exp + 1) is <= -4 or > 16.
    if !(-4..16).contains(&exp) {
        let m = if digits.len() == 1 { digits.clone() } else { format!("{}.{}", &digits[..1], &digits[1..]) };
        let es = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{es}{:02}", exp.abs());
    }
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        let zeros = "0".repeat((-point) as usize);
        format!("{sign}0.{zeros}{digits}")
    } else if point as usize >= digits.len() {
        let zeros = "0".repeat(point as usize - digits.len());
        format!("{sign}{digits}{zeros}.0")
    } else {
        let (a, b) = digits.split_at(point as usize);
        format!("{sign}{a}.{b}")
    }
}

/// `prometheus_client.utils.floatToGoString`, used for every sample value and
/// for the `le` label.
pub fn py_value(v: f64) -> String {
    if v == f64::INFINITY {
        return "+Inf".into();
    }
    if v == f64::NEG_INFINITY {
        return "-Inf".into();
    }
    if v.is_nan() {
        return "NaN".into();
    }
    let s = py_repr(v);
    let dot = s.find('.');
    match dot {
        Some(dot) if v > 0.0 && dot > 6 => {
            // Same string surgery as the Python code, quirks included
            // (`1e7` prints as `1.e+07`, `1e10` as `1.e+010`).
            let joined = format!("{}{}", &s[..dot], &s[dot + 1..]);
            let mantissa = joined.trim_end_matches(['0', '.']);
            format!("{}.{}e+0{}", &mantissa[..1], &mantissa[1..], dot - 1)
        }
        _ => s,
    }
}

/// Go `%f`: six decimals, as dcgm-exporter prints double fields.
pub fn go_f(v: f64) -> String {
    format!("{v:.6}")
}

/// Go `%d` for int64 fields (values are rounded to the nearest integer first).
pub fn go_d(v: f64) -> String {
    format!("{}", v.round() as i64)
}

/// Escape a label value as both exporters do (`\`, `"`, newline).
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_repr_matches_cpython() {
        for (v, want) in [
            (0.0, "0.0"),
            (1.0, "1.0"),
            (14250.0, "14250.0"),
            (16.22, "16.22"),
            (0.001, "0.001"),
            (0.0001, "0.0001"),
            (3.5e-05, "3.5e-05"),
            (1e-05, "1e-05"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (-2.5, "-2.5"),
            (1774011461.2872875, "1774011461.2872875"),
        ] {
            assert_eq!(py_repr(v), want, "{v}");
        }
    }

    #[test]
    fn float_to_go_string_matches_prometheus_client() {
        for (v, want) in [
            (0.0, "0.0"),
            (48.0, "48.0"),
            (16384.0, "16384.0"),
            (1048576.0, "1.048576e+06"),
            (9035190272.0, "9.035190272e+09"),
            (1126473728.0, "1.126473728e+09"),
            (1774011384.6, "1.7740113846e+09"),
            (1774011461.2872875, "1.7740114612872875e+09"),
            (1774011461.28755, "1.77401146128755e+09"),
            (1e7, "1.e+07"),
            (1e10, "1.e+010"),
            (f64::INFINITY, "+Inf"),
            (0.3, "0.3"),
        ] {
            assert_eq!(py_value(v), want, "{v}");
        }
    }

    #[test]
    fn go_formats() {
        assert_eq!(go_f(40.979), "40.979000");
        assert_eq!(go_f(0.004656), "0.004656");
        assert_eq!(go_d(455497156.4), "455497156");
    }
}
