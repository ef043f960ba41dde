//! Where targets come from: `static_configs`, `file_sd_configs` (JSON or
//! YAML lists of `{targets, labels}`; the last path component may be a
//! `*`/`?` glob, as in Prometheus; watched, in `discovery/file.rs`),
//! `http_sd_configs` (polled, in `discovery/http.rs`), `dns_sd_configs`
//! (polled, in `discovery/dns.rs`) and `kubernetes_sd_configs` (watched, in
//! `discovery/kubernetes.rs`).

pub mod dns;
pub mod file;
pub mod http;
pub mod kubernetes;

use super::config::{FileSdConfig, ScrapeConfig};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Go's `net.JoinHostPort`, as Prometheus' discovery writes addresses:
/// an IPv6 host in brackets.
pub(crate) fn join_host_port(host: &str, port: impl std::fmt::Display) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// Targets sharing labels, from one source.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetGroup {
    pub source: String,
    pub targets: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGroup {
    #[serde(default)]
    targets: Vec<String>,
    #[serde(default, deserialize_with = "infertel_relabel::scalar::string_map")]
    labels: BTreeMap<String, String>,
}

pub fn static_groups(sc: &ScrapeConfig) -> Vec<TargetGroup> {
    sc.static_configs
        .iter()
        .enumerate()
        .map(|(i, s)| TargetGroup {
            source: format!("static/{i}"),
            targets: s.targets.clone(),
            labels: s.labels.clone(),
        })
        .collect()
}

fn wildcard_match(pat: &str, s: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pat.chars().collect(), s.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0usize, 0usize, None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(sp) = star {
            pi = sp + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

pub(crate) fn expand_pattern(pattern: &str) -> Vec<PathBuf> {
    let path = Path::new(pattern);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !name.contains(['*', '?']) {
        return vec![path.to_path_buf()];
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_str().is_some_and(|n| wildcard_match(name, n)))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Reads every file of a `file_sd_configs` entry at once (tests, `check`);
/// the agent reads them through [`file::FileSd`], file by file.
pub fn read_file_sd(cfg: &FileSdConfig) -> Result<Vec<TargetGroup>, String> {
    let mut groups = Vec::new();
    for pattern in &cfg.files {
        for file in expand_pattern(pattern) {
            groups.extend(read_one(&file)?);
        }
    }
    Ok(groups)
}

/// One file's groups; errors name the file.
pub(crate) fn read_one(file: &Path) -> Result<Vec<TargetGroup>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("file_sd {}: {e}", file.display()))?;
    let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
    let parsed: Vec<FileGroup> = match ext {
        "json" => serde_json::from_str(&text).map_err(|e| format!("file_sd {}: {e}", file.display()))?,
        "yml" | "yaml" => serde_yaml::from_str::<Option<Vec<FileGroup>>>(&text)
            .map_err(|e| format!("file_sd {}: {e}", file.display()))?
            .unwrap_or_default(),
        _ => return Err(format!("file_sd {}: unknown extension (use .json, .yml or .yaml)", file.display())),
    };
    Ok(parsed
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let mut labels = g.labels;
            labels.insert("__meta_filepath".into(), file.display().to_string());
            TargetGroup { source: format!("{}:{i}", file.display()), targets: g.targets, labels }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::Duration;

    #[test]
    fn globs() {
        assert!(wildcard_match("*.json", "a.json"));
        assert!(wildcard_match("t?.yml", "t1.yml"));
        assert!(!wildcard_match("*.json", "a.yml"));
    }

    #[test]
    fn reads_json_and_yaml() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.json"), r#"[{"targets":["h:1"],"labels":{"env":"x"}}]"#).unwrap();
        std::fs::write(dir.path().join("b.yml"), "- targets: [h:2]\n").unwrap();
        let cfg = FileSdConfig {
            files: vec![format!("{}/*", dir.path().display())],
            refresh_interval: Duration::from_secs(1),
        };
        let g = read_file_sd(&cfg).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].targets, ["h:1"]);
        assert_eq!(g[0].labels["env"], "x");
        assert!(g[1].labels["__meta_filepath"].ends_with("b.yml"));
    }

    #[test]
    fn bad_file_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.json");
        std::fs::write(&p, "{not json").unwrap();
        let cfg = FileSdConfig { files: vec![p.display().to_string()], refresh_interval: Duration::from_secs(1) };
        let e = read_file_sd(&cfg).unwrap_err();
        assert!(e.contains("bad.json"), "{e}");
    }
}
