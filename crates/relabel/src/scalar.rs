//! Strings as Prometheus' YAML reads them: Go's yaml.v2 puts any scalar
//! into a string field as written (`regex: true`, `replacement: 9093`,
//! `labels: {port: 8000}`), so published configs do; serde would refuse a
//! boolean or a number where a string is expected.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;

struct ScalarText;

impl<'de> Visitor<'de> for ScalarText {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string (or a number or boolean, read as its text)")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
}

/// A string field that takes any scalar.
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_any(ScalarText)
}

struct Text(String);

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarText).map(Text)
    }
}

/// A list of strings whose items may be any scalar.
pub fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of strings")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(Text(s)) = seq.next_element()? {
                out.push(s);
            }
            Ok(out)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
    }
    d.deserialize_any(V)
}

/// A map of strings (label sets) whose values may be any scalar; `null`
/// is the empty map, as in Go.
pub fn string_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of names to strings")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((Text(k), Text(v))) = map.next_entry()? {
                out.insert(k, v);
            }
            Ok(out)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
    }
    d.deserialize_any(V)
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize)]
    struct T {
        #[serde(deserialize_with = "super::string")]
        s: String,
        #[serde(deserialize_with = "super::strings", default)]
        l: Vec<String>,
        #[serde(deserialize_with = "super::string_map", default)]
        m: std::collections::BTreeMap<String, String>,
    }

    #[test]
    fn scalars_read_as_text() {
        let t: T = serde_yaml::from_str("s: true\nl: [a, 9093, false]\nm: {port: 8000, on: true, x: y}").unwrap();
        assert_eq!(t.s, "true");
        assert_eq!(t.l, ["a", "9093", "false"]);
        assert_eq!(t.m["port"], "8000");
        assert_eq!(t.m["on"], "true");
        let t: T = serde_yaml::from_str("s: '9093'\nm: null").unwrap();
        assert_eq!(t.s, "9093");
        assert!(t.m.is_empty());
        assert!(serde_yaml::from_str::<T>("s: [a]").is_err());
    }
}
