//! The pprof profile format: the messages of Google's `profile.proto`
//! (github.com/google/pprof, proto/profile.proto; field numbers from there),
//! and [`ProfileBuilder`], which interns strings, functions and locations
//! as the format asks (index 0 of the string table is "", ids start at 1).

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, SystemTime};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// One frame of a symbolized stack: a function (demangled and raw
/// names), its file and line. An address can resolve to several, innermost
/// inlined function first.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    pub name: String,
    pub system_name: String,
    pub file: String,
    pub line: i64,
}

/// Builds a [`Profile`], interning as it goes.
pub struct ProfileBuilder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<Function>,
    function_ids: HashMap<(i64, i64, i64), u64>,
    locations: Vec<Location>,
    location_ids: HashMap<u64, u64>,
    samples: Vec<Sample>,
    sample_types: Vec<ValueType>,
    period_type: ValueType,
    period: i64,
    mapping: Mapping,
}

impl ProfileBuilder {
    /// `sample_types` as (type, unit) pairs, e.g. `("cpu", "nanoseconds")`;
    /// `period_type`/`period` as in the format.
    pub fn new(sample_types: &[(&str, &str)], period_type: (&str, &str), period: i64) -> Self {
        let mut b = ProfileBuilder {
            strings: vec![String::new()],
            string_ids: HashMap::from([(String::new(), 0)]),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
            samples: Vec::new(),
            sample_types: Vec::new(),
            period_type: ValueType::default(),
            period,
            mapping: Mapping::default(),
        };
        b.sample_types =
            sample_types.iter().map(|(t, u)| ValueType { r#type: b.string(t), unit: b.string(u) }).collect();
        b.period_type = ValueType { r#type: b.string(period_type.0), unit: b.string(period_type.1) };
        // One mapping, the executable, marked as symbolized: readers use the
        // names given here and do not look for the binary.
        let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "infertel".into());
        b.mapping = Mapping {
            id: 1,
            memory_limit: u64::MAX,
            filename: b.string(&exe),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
            ..Default::default()
        };
        b
    }

    pub fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    fn function(&mut self, f: &Frame) -> u64 {
        let key = (self.string(&f.name), self.string(&f.system_name), self.string(&f.file));
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        self.functions.push(Function { id, name: key.0, system_name: key.1, filename: key.2, start_line: 0 });
        self.function_ids.insert(key, id);
        id
    }

    /// The location known by `key` (the instruction address where there is
    /// one), made from `frames` the first time it is seen (innermost
    /// inlined function first, as the format orders lines).
    pub fn location(&mut self, key: u64, address: u64, frames: &[Frame]) -> u64 {
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let line = frames.iter().map(|f| Line { function_id: self.function(f), line: f.line }).collect();
        let id = self.locations.len() as u64 + 1;
        self.locations.push(Location { id, mapping_id: 1, address, line, is_folded: false });
        self.location_ids.insert(key, id);
        id
    }

    /// A sample: its stack (leaf first), one value per sample type, and
    /// string labels.
    pub fn sample(&mut self, location_id: Vec<u64>, value: Vec<i64>, labels: &[(&str, &str)]) {
        let label = labels
            .iter()
            .map(|(k, v)| Label { key: self.string(k), str: self.string(v), ..Default::default() })
            .collect();
        self.samples.push(Sample { location_id, value, label });
    }

    pub fn finish(mut self, start: SystemTime, duration: Duration, default_sample_type: Option<&str>) -> Profile {
        let default_sample_type = default_sample_type.map_or(0, |t| self.string(t));
        let time_nanos = start.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
        Profile {
            sample_type: self.sample_types,
            sample: self.samples,
            mapping: vec![self.mapping],
            location: self.locations,
            function: self.functions,
            string_table: self.strings,
            time_nanos,
            duration_nanos: duration.as_nanos() as i64,
            period_type: Some(self.period_type),
            period: self.period,
            default_sample_type,
            ..Default::default()
        }
    }
}

/// The profile as served: protobuf, gzipped (as Go serves it; readers
/// accept both).
pub fn gzipped(p: &Profile) -> Vec<u8> {
    use prost::Message;
    let raw = p.encode_to_vec();
    let mut z = flate2::write::GzEncoder::new(Vec::with_capacity(raw.len() / 3 + 64), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = z.write_all(&raw);
    z.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn interning_follows_the_format() {
        let mut b =
            ProfileBuilder::new(&[("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"), 10_000_000);
        let f = |n: &str, l| Frame { name: n.into(), system_name: n.into(), file: "a.rs".into(), line: l };
        let leaf = b.location(0x1000, 0x1000, &[f("inner", 3), f("outer", 9)]);
        let root = b.location(0x2000, 0x2000, &[f("main", 1)]);
        assert_eq!(b.location(0x1000, 0x1000, &[]), leaf, "an address is interned once");
        b.sample(vec![leaf, root], vec![2, 20_000_000], &[("thread", "w")]);
        let p = b.finish(SystemTime::UNIX_EPOCH + Duration::from_secs(1), Duration::from_secs(2), None);
        assert_eq!(p.string_table[0], "");
        assert_eq!((p.location[0].id, p.location[1].id), (1, 2));
        assert_eq!(p.location[0].line.len(), 2);
        assert_eq!(p.function.len(), 3, "inner, outer, main");
        assert_eq!(p.string_table[p.sample_type[1].r#type as usize], "cpu");
        assert_eq!(p.time_nanos, 1_000_000_000);
        let back = Profile::decode(&*{
            let z = gzipped(&p);
            let mut d = flate2::read::GzDecoder::new(&z[..]);
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut d, &mut v).unwrap();
            v
        })
        .unwrap();
        assert_eq!(back, p);
    }
}
