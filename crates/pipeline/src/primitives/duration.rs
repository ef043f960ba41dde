//! Durations and sizes as users write them: Go/Prometheus style `15s`, `1m30s`,
//! `500ms`, and byte sizes like `10MB`, `512KiB`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::Duration as StdDuration;

/// A duration parsed from `1h2m3s4ms` style text (units: ns, us, µs, ms, s, m, h, d, w, y).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub StdDuration);

impl Duration {
    pub const fn from_secs(s: u64) -> Self {
        Duration(StdDuration::from_secs(s))
    }
    pub const fn from_millis(ms: u64) -> Self {
        Duration(StdDuration::from_millis(ms))
    }
    pub fn get(self) -> StdDuration {
        self.0
    }
}

impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Duration {
    /// As Prometheus writes a duration (`model.Duration.String`): `1m30s`,
    /// `1s500ms`, `1h`, `2d`; years and weeks only when exact. The
    /// `__scrape_interval__` and `__scrape_timeout__` labels carry it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ms = self.0.as_millis();
        if ms == 0 {
            return f.write_str("0s");
        }
        const UNITS: [(&str, u128, bool); 7] = [
            ("y", 365 * 24 * 3_600_000, true),
            ("w", 7 * 24 * 3_600_000, true),
            ("d", 24 * 3_600_000, false),
            ("h", 3_600_000, false),
            ("m", 60_000, false),
            ("s", 1000, false),
            ("ms", 1, false),
        ];
        for (unit, mult, exact) in UNITS {
            if exact && !ms.is_multiple_of(mult) {
                continue;
            }
            let v = ms / mult;
            if v > 0 {
                write!(f, "{v}{unit}")?;
                ms -= v * mult;
            }
        }
        Ok(())
    }
}

/// Parses a duration; the error says what was wrong.
pub fn parse_duration(s: &str) -> Result<StdDuration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if t == "0" {
        return Ok(StdDuration::ZERO);
    }
    let b = t.as_bytes();
    let mut i = 0;
    let mut total_ns: u128 = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
            i += 1;
        }
        if start == i {
            return Err(format!("invalid duration {s:?}: expected a number at byte {start}"));
        }
        let num: f64 = t[start..i].parse().map_err(|_| format!("invalid duration {s:?}: bad number"))?;
        let ustart = i;
        while i < b.len() && !(b[i].is_ascii_digit() || b[i] == b'.') {
            i += 1;
        }
        let unit = &t[ustart..i];
        let mult: f64 = match unit {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "d" => 86400e9,
            "w" => 7.0 * 86400e9,
            "y" => 365.0 * 86400e9,
            "" => return Err(format!("invalid duration {s:?}: missing unit (use ms, s, m, h)")),
            u => return Err(format!("invalid duration {s:?}: unknown unit {u:?} (use ms, s, m, h)")),
        };
        total_ns += (num * mult) as u128;
    }
    Ok(StdDuration::from_nanos(total_ns.min(u64::MAX as u128) as u64))
}

struct DurationVisitor;

impl serde::de::Visitor<'_> for DurationVisitor {
    type Value = Duration;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as \"15s\", \"500ms\" or \"1m30s\"")
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Duration, E> {
        parse_duration(s).map(Duration).map_err(E::custom)
    }
    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Duration, E> {
        // 0 needs no unit; any other bare number is ambiguous.
        if n == 0 {
            Ok(Duration(StdDuration::ZERO))
        } else {
            Err(E::custom(format!("ambiguous duration {n}: write a unit, e.g. \"{n}s\" or \"{n}ms\"")))
        }
    }
    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Duration, E> {
        if n < 0 { Err(E::custom(format!("negative duration {n}"))) } else { self.visit_u64(n as u64) }
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DurationVisitor)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A size as Prometheus reads one (`body_size_limit`, `units.Base2Bytes`):
/// every unit is a power of two, `10MB` = 10,485,760 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Base2Size(pub u64);

pub fn parse_base2_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    let k = 1024.0_f64;
    let mult = match unit.trim() {
        "" | "B" => 1.0,
        "KB" | "KiB" | "kB" => k,
        "MB" | "MiB" => k * k,
        "GB" | "GiB" => k * k * k,
        "TB" | "TiB" => k * k * k * k,
        u => {
            return Err(format!("invalid size {s:?}: unknown unit {u:?} (Prometheus base-2 units: B, KB, MB, GB, TB)"));
        }
    };
    Ok((n * mult) as u64)
}

struct Base2Visitor;

impl serde::de::Visitor<'_> for Base2Visitor {
    type Value = Base2Size;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size in bytes such as 1048576 or \"10MB\" (base 2, as Prometheus)")
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Base2Size, E> {
        parse_base2_size(s).map(Base2Size).map_err(E::custom)
    }
    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Base2Size, E> {
        Ok(Base2Size(n))
    }
    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Base2Size, E> {
        u64::try_from(n).map(Base2Size).map_err(|_| E::custom("a size must not be negative"))
    }
}

impl<'de> Deserialize<'de> for Base2Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Base2Visitor)
    }
}

/// A byte size: `10MB`, `512KiB`, `1048576`, `0` (no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ByteSize(pub u64);

pub fn parse_byte_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    let mult: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        u => return Err(format!("invalid size {s:?}: unknown unit {u:?} (use B, KB, MB, GB, KiB, MiB, GiB)")),
    };
    Ok((n * mult) as u64)
}

struct SizeVisitor;

impl serde::de::Visitor<'_> for SizeVisitor {
    type Value = ByteSize;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size in bytes such as 1048576, \"10MB\" or \"512KiB\"")
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ByteSize, E> {
        parse_byte_size(s).map(ByteSize).map_err(E::custom)
    }
    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ByteSize, E> {
        Ok(ByteSize(n))
    }
    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ByteSize, E> {
        u64::try_from(n).map(ByteSize).map_err(|_| E::custom(format!("negative size {n}")))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SizeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prometheus' `model.Duration.String()` and `units.Base2Bytes`.
    #[test]
    fn prometheus_formats_and_units() {
        let d = |ms: u64| Duration::from_millis(ms).to_string();
        assert_eq!(d(90_000), "1m30s");
        assert_eq!(d(1_500), "1s500ms");
        assert_eq!(d(60_000), "1m");
        assert_eq!(d(3_600_000), "1h");
        assert_eq!(d(90_061_000), "1d1h1m1s");
        assert_eq!(d(7 * 24 * 3_600_000), "1w");
        assert_eq!(d(8 * 24 * 3_600_000), "8d", "weeks only when exact");
        assert_eq!(d(0), "0s");
        assert_eq!(parse_base2_size("10MB").unwrap(), 10_485_760);
        assert_eq!(parse_base2_size("1KB").unwrap(), 1024);
        assert_eq!(parse_base2_size("512").unwrap(), 512);
        assert_eq!(parse_byte_size("10MB").unwrap(), 10_000_000, "other keys keep decimal MB");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s").unwrap(), StdDuration::from_secs(15));
        assert_eq!(parse_duration("1m30s").unwrap(), StdDuration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), StdDuration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), StdDuration::from_millis(1500));
        assert!(parse_duration("15").is_err());
        assert!(parse_duration("15x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_byte_size("10MB").unwrap(), 10_000_000);
        assert_eq!(parse_byte_size("1KiB").unwrap(), 1024);
        assert_eq!(parse_byte_size("0").unwrap(), 0);
        assert!(parse_byte_size("3 parsecs").is_err());
    }
}
