//! Number syntax: Go's `strconv.ParseFloat` as Prometheus 2.42 calls it for the
//! 0.0.4 format, and the OpenMetrics number and timestamp rules.
//!
//! Rust's `f64::from_str` is not usable on raw input: it accepts `+nan`,
//! `-infinity` with any case, and it turns `1e400` into `inf` where Go reports
//! a range error (which fails the scrape). So the grammar is checked here and
//! only a plain decimal string is handed to Rust for the actual conversion
//! (which rounds correctly, like Go's).

use infertel_model::canonical_nan;

/// A value as both formats write it: `NaN`, `+Inf`, `-Inf`, else the
/// shortest decimal that reads back to the same `f64`, without exponent
/// (which both parsers, and Go's `'f', -1`, agree on).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

/// Why a number was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatError {
    Syntax,
    Range,
}

impl FloatError {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FloatError::Syntax => "invalid syntax",
            FloatError::Range => "value out of range",
        }
    }
}

/// True for `[+-]? (d+ [. d*] | . d+) ([eE] [+-]? d+)?`, the decimal form
/// that both Go and Python accept and Rust parses identically.
fn is_decimal(s: &[u8]) -> bool {
    let mut i = 0;
    if matches!(s.first(), Some(b'+' | b'-')) {
        i = 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while s.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    let int = digits(&mut i);
    let mut frac = 0;
    if s.get(i) == Some(&b'.') {
        i += 1;
        frac = digits(&mut i);
    }
    if int + frac == 0 {
        return false;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == s.len()
}

/// Exact powers of ten (every one up to 1e22 is a double).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// The common case of the decimal grammar in one pass, without validating
/// and converting separately: at most 19 digits whose value fits in 53 bits,
/// scaled by at most 10^±22. Then the mantissa and the power of ten are both
/// exact doubles and one multiplication or division rounds correctly
/// (Clinger's fast path), so the result is bit for bit what the full
/// conversion gives. Anything else (long or huge mantissas, big exponents,
/// odd syntax) returns `None` and takes the full path.
fn fast_decimal(s: &[u8]) -> Option<f64> {
    decimal_prefix(s).filter(|&(_, n)| n == s.len()).map(|(v, _)| v)
}

/// [`fast_decimal`] of the longest prefix of `s` the decimal grammar reads,
/// with that prefix's length: a scraped line's value is read without first
/// looking for its end. A prefix followed by a byte that can end the value
/// token is the token, and the value is [`parse_go_float`]'s.
pub(crate) fn decimal_prefix(s: &[u8]) -> Option<(f64, usize)> {
    let mut i = 0;
    let neg = match s.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    // The digits before and after the point, each in a loop of its own.
    // The mantissa wraps past 19 digits, and such a number is refused below.
    let mut mantissa: u64 = 0;
    let mut run = |i: &mut usize| {
        let start = *i;
        while let Some(d) = s.get(*i).map(|b| b.wrapping_sub(b'0')).filter(|&d| d <= 9) {
            mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
            *i += 1;
        }
        *i - start
    };
    let mut digits = run(&mut i);
    let mut frac = 0;
    if s.get(i) == Some(&b'.') {
        i += 1;
        frac = run(&mut i);
        digits += frac;
    }
    if digits == 0 || digits > 19 {
        return None;
    }
    let frac = frac as i32;
    let mut exp = 0i32;
    if let Some(b'e' | b'E') = s.get(i) {
        i += 1;
        let eneg = match s.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let start = i;
        while let Some(&b) = s.get(i).filter(|b| b.is_ascii_digit()) {
            if i - start >= 4 {
                return None;
            }
            exp = exp * 10 + i32::from(b - b'0');
            i += 1;
        }
        if i == start {
            return None;
        }
        if eneg {
            exp = -exp;
        }
    }
    if mantissa > 1 << 53 {
        return None;
    }
    let e = exp - frac;
    let m = mantissa as f64;
    let v = match e {
        0..=22 => m * POW10[e as usize],
        -22..=-1 => m / POW10[(-e) as usize],
        _ => return None,
    };
    Some((if neg { -v } else { v }, i))
}

/// Converts a string that passed [`is_decimal`]; overflow to ±inf is a range error.
fn decimal(s: &[u8]) -> Result<f64, FloatError> {
    let text = std::str::from_utf8(s).map_err(|_| FloatError::Syntax)?;
    let v: f64 = text.parse().map_err(|_| FloatError::Syntax)?;
    if v.is_infinite() { Err(FloatError::Range) } else { Ok(v) }
}

/// Go's special values: `[+-]?(inf|infinity)` and unsigned `nan`, any case.
fn go_special(s: &[u8]) -> Option<f64> {
    let (neg, rest) = match s.first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
        return Some(if neg { f64::NEG_INFINITY } else { f64::INFINITY });
    }
    if rest.len() == s.len() && s.eq_ignore_ascii_case(b"nan") {
        return Some(canonical_nan(f64::NAN));
    }
    None
}

/// A 0.0.4 sample value, exactly as Prometheus 2.42 parses it: Go's
/// `ParseFloat(s, 64)` after refusing any `p`, `P` or `_` (so no hex floats and
/// no digit separators). NaN comes back canonical.
pub(crate) fn parse_go_float(s: &[u8]) -> Result<f64, FloatError> {
    if let Some(v) = fast_decimal(s) {
        return Ok(v);
    }
    if let Some(v) = go_special(s) {
        return Ok(v);
    }
    if !is_decimal(s) {
        return Err(FloatError::Syntax);
    }
    decimal(s)
}

/// An OpenMetrics number: a decimal, or `[+-]?(inf|infinity|nan)` in any case
/// (what the reference parser, Python's `float()`, accepts). NaN comes back
/// canonical.
pub(crate) fn parse_om_number(s: &[u8]) -> Result<f64, FloatError> {
    let rest = match s.first() {
        Some(b'+' | b'-') => &s[1..],
        _ => s,
    };
    if rest.eq_ignore_ascii_case(b"nan") {
        return Ok(canonical_nan(f64::NAN));
    }
    if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
        return Ok(if s[0] == b'-' { f64::NEG_INFINITY } else { f64::INFINITY });
    }
    if let Some(v) = fast_decimal(s) {
        return Ok(v);
    }
    if !is_decimal(s) {
        return Err(FloatError::Syntax);
    }
    // Python does not fail on overflow; an out-of-range value is simply ±inf.
    let text = std::str::from_utf8(s).map_err(|_| FloatError::Syntax)?;
    text.parse().map_err(|_| FloatError::Syntax)
}

/// An OpenMetrics timestamp in seconds: a decimal, never NaN or infinite.
pub(crate) fn parse_om_timestamp(s: &[u8]) -> Result<f64, FloatError> {
    if !is_decimal(s) {
        return Err(FloatError::Syntax);
    }
    let text = std::str::from_utf8(s).map_err(|_| FloatError::Syntax)?;
    let v: f64 = text.parse().map_err(|_| FloatError::Syntax)?;
    if v.is_finite() { Ok(v) } else { Err(FloatError::Range) }
}

/// Seconds to milliseconds as Prometheus converts them (`int64(ts * 1000)`:
/// a float product truncated toward zero, so `1.0005` is 1000), saturating
/// at the `i64` range (OpenMetrics allows timestamps far beyond it).
pub(crate) fn seconds_to_ms(secs: f64) -> i64 {
    (secs * 1000.0) as i64
}

/// A 0.0.4 timestamp: ASCII digits only (Prometheus 2.42's lexer has no sign),
/// fitting in an `i64`.
pub(crate) fn parse_ms_timestamp(s: &[u8]) -> Result<i64, FloatError> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return Err(FloatError::Syntax);
    }
    let mut v: i64 = 0;
    for &b in s {
        v = v.checked_mul(10).and_then(|v| v.checked_add(i64::from(b - b'0'))).ok_or(FloatError::Range)?;
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_model::NORMAL_NAN_BITS;

    #[test]
    fn go_float_accepts() {
        for (s, v) in [
            ("1", 1.0),
            ("-3e3", -3000.0),
            ("1.7560473e+07", 17560473.0),
            ("+5", 5.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("08", 8.0),
            ("1E3", 1000.0),
            ("+Inf", f64::INFINITY),
            ("-Inf", f64::NEG_INFINITY),
            ("inf", f64::INFINITY),
            ("+inf", f64::INFINITY),
            ("-InFiNiTy", f64::NEG_INFINITY),
            ("1e-400", 0.0),
            ("9223372036854775794", 9223372036854775807.0),
            ("1.7976931348623157e308", f64::MAX),
        ] {
            assert_eq!(parse_go_float(s.as_bytes()), Ok(v), "{s}");
        }
        for s in ["NaN", "nan", "nAn"] {
            assert_eq!(parse_go_float(s.as_bytes()).unwrap().to_bits(), NORMAL_NAN_BITS);
        }
    }

    #[test]
    fn go_float_rejects() {
        for s in [
            "", "0x1", "0X1", "0x1p-3", "0b1", "0o1", "1_2", "true", "StaleNaN", "+NaN", "-nan", "infin", "1e", "1e+",
            "--1", "1.2.3", ".", "+", "1 ", " 1", "1\r", "١",
        ] {
            assert_eq!(parse_go_float(s.as_bytes()), Err(FloatError::Syntax), "{s:?}");
        }
        for s in ["1e400", "-1e400", "1.8e308"] {
            assert_eq!(parse_go_float(s.as_bytes()), Err(FloatError::Range), "{s}");
        }
    }

    /// The full path: grammar check, then Rust's correctly rounded conversion.
    fn slow(s: &str) -> Option<f64> {
        is_decimal(s.as_bytes()).then(|| s.parse::<f64>().ok()).flatten()
    }

    #[test]
    fn fast_path_is_the_full_conversion_bit_for_bit() {
        let mut taken = 0;
        for s in [
            "0",
            "-0",
            "+0",
            "1",
            "08",
            "5.",
            ".5",
            "0.1",
            "0.3",
            "123.456",
            "-3e3",
            "1.7560473e+07",
            "9007199254740992",
            "9007199254740993",
            "1.74969978319e+09",
            "3.6727328723e+010",
            "1e22",
            "1e23",
            "1e-22",
            "1e-23",
            "0.000001",
            "9999999999999999999",
            "99999999999999999999",
            "1e",
            "1e+",
            "1.2.3",
            ".",
            "+",
            "-",
            "1e00001",
            "4.9e-324",
            "2.2250738585072014e-308",
            "0.5034303665161133",
            "321950.71",
            "1.0",
            "34592.0",
        ] {
            let fast = fast_decimal(s.as_bytes());
            if let Some(v) = fast {
                taken += 1;
                assert_eq!(Some(v.to_bits()), slow(s).map(f64::to_bits), "{s}");
            }
        }
        assert!(taken >= 20, "the fast path takes the common forms ({taken})");
        assert_eq!(fast_decimal(b"-0").map(f64::to_bits), Some((-0.0f64).to_bits()));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 20_000, ..Default::default() })]
        /// Random decimal-looking strings: whenever the fast path answers, it
        /// answers what the full conversion does; and it refuses nothing the
        /// grammar refuses.
        #[test]
        fn fast_path_agrees(s in r"[+-]?[0-9]{0,20}(\.[0-9]{0,20})?([eE][+-]?[0-9]{0,5})?") {
            match fast_decimal(s.as_bytes()) {
                Some(v) => proptest::prop_assert_eq!(Some(v.to_bits()), slow(&s).map(f64::to_bits), "{}", s),
                None => {}
            }
            proptest::prop_assert_eq!(parse_go_float(s.as_bytes()).ok().map(f64::to_bits), {
                let r = if is_decimal(s.as_bytes()) { decimal(s.as_bytes()).ok() } else { None };
                r.map(f64::to_bits)
            });
        }
    }

    #[test]
    fn ms_timestamps() {
        assert_eq!(parse_ms_timestamp(b"1395066363000"), Ok(1395066363000));
        assert_eq!(parse_ms_timestamp(b"9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_ms_timestamp(b"9223372036854775808"), Err(FloatError::Range));
        assert_eq!(parse_ms_timestamp(b"-1"), Err(FloatError::Syntax));
        assert_eq!(parse_ms_timestamp(b""), Err(FloatError::Syntax));
    }

    #[test]
    fn om_timestamps_are_seconds() {
        assert_eq!(parse_om_timestamp(b"1.5e3").map(seconds_to_ms), Ok(1_500_000));
        assert_eq!(parse_om_timestamp(b"12345678901234567890.1234567890").map(seconds_to_ms), Ok(i64::MAX));
        assert!(parse_om_timestamp(b"NaN").is_err());
        assert!(parse_om_timestamp(b"Inf").is_err());
        assert!(parse_om_timestamp(b"1_0").is_err());
    }
}
