//! The `file` exporter's config, contrib's `fileexporter` keys.

use crate::primitives::Duration;
use serde::Deserialize;

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The file written; required.
    #[serde(default)]
    pub path: String,
    /// `json` (OTLP JSON, a line per request; the default) or `proto`.
    #[serde(default = "json")]
    pub format: String,
    /// `zstd`, or none (the default).
    #[serde(default)]
    pub compression: String,
    /// Append to an existing file; default false (truncate at start).
    #[serde(default)]
    pub append: bool,
    /// How often buffered writes reach the file; default 1s.
    #[serde(default = "second")]
    pub flush_interval: Duration,
    #[serde(default)]
    pub rotation: Option<Rotation>,
    #[serde(default)]
    pub group_by: Option<GroupBy>,
    /// An encoding extension's id (contrib): not built here.
    #[serde(default)]
    pub encoding: Option<String>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rotation {
    /// Size in MiB past which the file is rotated; default 100.
    #[serde(default = "hundred")]
    pub max_megabytes: u64,
    /// Rotated files older than this many days are removed; default: kept.
    #[serde(default)]
    pub max_days: Option<u64>,
    /// Rotated files kept; default 100 (0: all).
    #[serde(default = "hundred")]
    pub max_backups: u64,
    /// Name rotated files by local time instead of UTC; default false.
    #[serde(default)]
    pub localtime: bool,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GroupBy {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub resource_attribute: Option<String>,
    #[serde(default)]
    pub max_open_files: Option<u64>,
}

fn json() -> String {
    "json".into()
}
fn second() -> Duration {
    Duration::from_secs(1)
}
fn hundred() -> u64 {
    100
}

impl FileConfig {
    /// Contrib's checks, with its messages where it has them.
    pub fn validate(&self) -> Result<(), String> {
        if self.path.is_empty() {
            return Err("path must be non-empty".into());
        }
        if self.format != "json" && self.format != "proto" {
            return Err(format!("format type is not supported: {:?} (json or proto)", self.format));
        }
        if !self.compression.is_empty() && self.compression != "zstd" {
            return Err(format!("compression is not supported: {:?} (zstd, or none)", self.compression));
        }
        if self.append && !self.compression.is_empty() {
            return Err("append and compression enabled at the same time is not supported".into());
        }
        if self.flush_interval.get().is_zero() {
            return Err("flush_interval must be larger than zero".into());
        }
        if let Some(r) = &self.rotation
            && r.max_megabytes == 0
        {
            return Err("rotation.max_megabytes must be larger than zero".into());
        }
        if self.group_by.as_ref().is_some_and(|g| g.enabled) {
            return Err("group_by is not built yet: write one file per exporter (give each its own path)".into());
        }
        if let Some(e) = &self.encoding {
            return Err(format!("encoding {e:?}: encoding extensions are not built yet; use format: json or proto"));
        }
        Ok(())
    }

    /// Each message length-prefixed (4 bytes, big-endian), as contrib
    /// writes proto and compressed data; otherwise a JSON line each.
    pub fn framed(&self) -> bool {
        self.format == "proto" || !self.compression.is_empty()
    }
}
