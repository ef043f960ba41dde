//! `scrape_config_files`, as Prometheus loads them: each entry is a glob
//! (relative paths from the directory of the file that names it), each
//! matched file holds `scrape_configs:` only, and its jobs join the
//! configuration's own (job names stay unique across all of them). Read
//! when the configuration is loaded, so a reload picks up changed files.
//! A glob that matches nothing adds nothing, as in Prometheus.

use super::discovery::expand_pattern;
use serde_yaml::{Mapping, Value};
use std::path::{Path, PathBuf};

/// What [`include`] read, and the literal paths (no glob) that do not
/// exist: Prometheus adds nothing for those, silently; here they are warned.
#[derive(Debug, Default)]
pub struct Included {
    pub read: Vec<PathBuf>,
    pub missing: Vec<PathBuf>,
}

/// Moves the jobs of the files `config` lists under `scrape_config_files`
/// into its `scrape_configs`, or the error naming the file.
pub fn include(config: &mut Mapping, base: &Path) -> Result<Included, String> {
    let Some(list) = config.remove(Value::String("scrape_config_files".into())) else {
        return Ok(Included::default());
    };
    let patterns: Vec<String> = match list {
        Value::Null => Vec::new(),
        Value::Sequence(v) => v
            .into_iter()
            .map(|p| p.as_str().map(str::to_string).ok_or("scrape_config_files: each entry is a path or glob"))
            .collect::<Result<_, _>>()?,
        _ => return Err("scrape_config_files: a list of paths or globs".into()),
    };
    let mut out = Included::default();
    let mut jobs: Vec<Value> = Vec::new();
    for p in patterns {
        let full = if Path::new(&p).is_absolute() { PathBuf::from(&p) } else { base.join(&p) };
        let Some(full) = full.to_str().map(str::to_string) else { continue };
        for file in expand_pattern(&full) {
            if !file.exists() && !full.contains(['*', '?']) {
                out.missing.push(file);
                continue;
            }
            let text =
                std::fs::read_to_string(&file).map_err(|e| format!("scrape_config_files: {}: {e}", file.display()))?;
            let v: Value =
                serde_yaml::from_str(&text).map_err(|e| format!("scrape_config_files: {}: {e}", file.display()))?;
            let Value::Mapping(m) = v else {
                return Err(format!("scrape_config_files: {}: expected a mapping with scrape_configs", file.display()));
            };
            for (k, v) in m {
                match k.as_str() {
                    Some("scrape_configs") => match v {
                        Value::Sequence(s) => jobs.extend(s),
                        Value::Null => {}
                        _ => {
                            return Err(format!(
                                "scrape_config_files: {}: scrape_configs must be a list",
                                file.display()
                            ));
                        }
                    },
                    Some(other) => {
                        return Err(format!(
                            "scrape_config_files: {}: only scrape_configs may be in a scrape config file, not {other:?}",
                            file.display()
                        ));
                    }
                    None => {}
                }
            }
            out.read.push(file);
        }
    }
    let key = Value::String("scrape_configs".into());
    match config.get_mut(&key) {
        Some(Value::Sequence(own)) => own.extend(jobs),
        _ => {
            config.insert(key, Value::Sequence(jobs));
        }
    }
    Ok(out)
}
