//! `file_sd_configs` as Prometheus runs them: the files (the last path
//! component may be a `*`/`?` glob) are watched (inotify, through the
//! `notify` crate) so a change is picked up within about a second, and
//! re-read every `refresh_interval` as a fallback; each file keeps its own
//! last good target list, so a file that fails to parse keeps its targets
//! and is reported without freezing the other files; a file that is
//! deleted (or no longer matches the glob) takes its targets with it.

use super::super::config::FileSdConfig;
use super::{TargetGroup, expand_pattern, read_one};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Notify;

/// One `file_sd_configs` entry's files and their last good groups.
pub struct FileSd {
    cfg: FileSdConfig,
    last: BTreeMap<PathBuf, Vec<TargetGroup>>,
    /// Kept alive for its watches; `None` when watching failed (the
    /// refresh interval still applies).
    _watcher: Option<notify::RecommendedWatcher>,
}

impl FileSd {
    /// Starts watching the directories of `cfg`'s files; `changed` is
    /// notified on any event in them.
    pub fn new(cfg: FileSdConfig, changed: Arc<Notify>) -> (FileSd, Option<String>) {
        use notify::Watcher;
        let mut err = None;
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if res.is_ok() {
                changed.notify_one();
            }
        });
        let watcher = match watcher {
            Ok(mut w) => {
                let mut dirs: Vec<PathBuf> = cfg
                    .files
                    .iter()
                    .map(|p| {
                        std::path::Path::new(p)
                            .parent()
                            .filter(|d| !d.as_os_str().is_empty())
                            .map(|d| d.to_path_buf())
                            .unwrap_or_else(|| PathBuf::from("."))
                    })
                    .collect();
                dirs.sort();
                dirs.dedup();
                for d in dirs {
                    if let Err(e) = w.watch(&d, notify::RecursiveMode::NonRecursive) {
                        err = Some(format!(
                            "file_sd: cannot watch {}: {e} (re-read every {} instead)",
                            d.display(),
                            cfg.refresh_interval
                        ));
                    }
                }
                Some(w)
            }
            Err(e) => {
                err =
                    Some(format!("file_sd: cannot watch files: {e} (re-read every {} instead)", cfg.refresh_interval));
                None
            }
        };
        (FileSd { cfg, last: BTreeMap::new(), _watcher: watcher }, err)
    }

    /// Re-reads every file: the groups of all files (last good ones for a
    /// file that fails now), and the errors, each naming its file.
    pub fn refresh(&mut self) -> (Vec<TargetGroup>, Vec<String>) {
        let mut now: Vec<PathBuf> = self.cfg.files.iter().flat_map(|p| expand_pattern(p)).collect();
        now.sort();
        now.dedup();
        let mut errors = Vec::new();
        let mut next = BTreeMap::new();
        for f in now {
            match read_one(&f) {
                Ok(g) => {
                    next.insert(f, g);
                }
                // Gone between the listing and the read, or a literal
                // path that does not exist (yet): no targets from it.
                Err(_) if !f.exists() => {}
                Err(e) => {
                    errors.push(format!("{e} (keeping its previous targets)"));
                    if let Some(g) = self.last.remove(&f) {
                        next.insert(f, g);
                    }
                }
            }
        }
        self.last = next;
        (self.last.values().flatten().cloned().collect(), errors)
    }
}
