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
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms == 0 {
            return f.write_str("0s");
        }
        if ms % 60_000 == 0 {
            write!(f, "{}m", ms / 60_000)
        } else if ms % 1000 == 0 {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{}ms", ms)
        }
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
