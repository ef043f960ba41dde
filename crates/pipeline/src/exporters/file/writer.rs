//! The file itself: opened at start (truncated unless `append`), written
//! through a buffer flushed every `flush_interval`, and, with `rotation`,
//! renamed once it would pass `max_megabytes`, as contrib's lumberjack does:
//! `data.json` becomes `data-2022-09-14T05-02-14.173.json` (UTC unless
//! `localtime`) and a new `data.json` is started; rotated files beyond
//! `max_backups` or older than `max_days` are removed, oldest first.

use super::config::{FileConfig, Rotation};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub struct Writer {
    path: PathBuf,
    rotation: Option<Rotation>,
    out: BufWriter<File>,
    size: u64,
}

/// Paths this process has opened: a reload that rebuilds the exporter
/// continues the file instead of truncating what the agent wrote.
fn opened() -> &'static std::sync::Mutex<std::collections::HashSet<PathBuf>> {
    static O: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<PathBuf>>> = std::sync::OnceLock::new();
    O.get_or_init(Default::default)
}

/// Opens for appending, truncating first unless `append` (or this process
/// wrote it already). Every handle appends, so an old exporter's last flush
/// during a reload lands after the new one's records, never over them.
fn open(path: &Path, append: bool) -> Result<(File, u64), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let first = opened().lock().unwrap_or_else(|p| p.into_inner()).insert(path.to_path_buf());
    if !append && first {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let f = OpenOptions::new().create(true).append(true).open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    Ok((f, size))
}

impl Writer {
    pub fn open(cfg: &FileConfig) -> Result<Writer, String> {
        let path = PathBuf::from(&cfg.path);
        // With rotation, an existing file is continued (it rotates when full),
        // as lumberjack does; otherwise `append` decides.
        let (f, size) = open(&path, cfg.append || cfg.rotation.is_some())?;
        Ok(Writer { path, rotation: cfg.rotation.clone(), out: BufWriter::with_capacity(256 * 1024, f), size })
    }

    pub fn write(&mut self, record: &[u8]) -> Result<(), String> {
        if let Some(r) = &self.rotation {
            let max = r.max_megabytes.saturating_mul(1024 * 1024);
            if self.size > 0 && self.size + record.len() as u64 > max {
                self.rotate()?;
            }
        }
        self.out.write_all(record).map_err(|e| format!("{}: {e}", self.path.display()))?;
        self.size += record.len() as u64;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<(), String> {
        self.out.flush().map_err(|e| format!("{}: {e}", self.path.display()))
    }

    fn rotate(&mut self) -> Result<(), String> {
        self.flush()?;
        let Some(r) = self.rotation.clone() else { return Ok(()) };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let stamp = timestamp(now.as_millis() as i64, r.localtime);
        let backup = backup_name(&self.path, &stamp);
        std::fs::rename(&self.path, &backup)
            .map_err(|e| format!("rotating {} to {}: {e}", self.path.display(), backup.display()))?;
        // The renamed file is gone from `path`: a fresh one.
        let (f, size) = open(&self.path, true)?;
        self.out = BufWriter::with_capacity(256 * 1024, f);
        self.size = size;
        prune(&self.path, &r, now.as_secs());
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

/// `dir/stem-STAMP.ext` (or `dir/name-STAMP` without an extension).
pub fn backup_name(path: &Path, stamp: &str) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let new = match name.rfind('.').filter(|i| *i > 0) {
        Some(i) => format!("{}-{stamp}{}", &name[..i], &name[i..]),
        None => format!("{name}-{stamp}"),
    };
    path.with_file_name(new)
}

/// Rotated files of `path`, oldest first, with their age in seconds.
fn backups(path: &Path) -> Vec<(PathBuf, String)> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (stem, ext) = match name.rfind('.').filter(|i| *i > 0) {
        Some(i) => (name[..i].to_string(), name[i..].to_string()),
        None => (name.clone(), String::new()),
    };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut out: Vec<(PathBuf, String)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let stamp = n.strip_prefix(&format!("{stem}-"))?.strip_suffix(ext.as_str())?.to_string();
            // 2006-01-02T15-04-05.000
            (stamp.len() == 23 && stamp.as_bytes()[10] == b'T').then(|| (e.path(), stamp))
        })
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

fn prune(path: &Path, r: &Rotation, now_s: u64) {
    let mut list = backups(path);
    if let Some(days) = r.max_days.filter(|d| *d > 0) {
        let cutoff = timestamp(((now_s.saturating_sub(days * 86_400)) * 1000) as i64, r.localtime);
        for (p, stamp) in list.iter().filter(|(_, s)| *s < cutoff) {
            if std::fs::remove_file(p).is_ok() {
                tracing::info!("file exporter: removed {} (older than max_days, {stamp})", p.display());
            }
        }
        list.retain(|(_, s)| *s >= cutoff);
    }
    if r.max_backups > 0 && list.len() as u64 > r.max_backups {
        let extra = list.len() - r.max_backups as usize;
        for (p, _) in list.iter().take(extra) {
            if std::fs::remove_file(p).is_ok() {
                tracing::info!("file exporter: removed {} (beyond max_backups)", p.display());
            }
        }
    }
}

/// `2006-01-02T15-04-05.000` for `ms` since the epoch, UTC or local time.
pub fn timestamp(ms: i64, local: bool) -> String {
    let offset_s = if local { local_offset_s(ms / 1000) } else { 0 };
    let t = ms + offset_s * 1000;
    let (secs, milli) = (t.div_euclid(1000), t.rem_euclid(1000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}-{:02}-{:02}.{milli:03}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The local time zone's offset from UTC at `secs`, from the C library.
fn local_offset_s(secs: i64) -> i64 {
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: localtime_r writes into `tm`, which lives for the call.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff as i64
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_contrib_writes_them() {
        // contrib's README example: data.json → data-2022-09-14T05-02-14.173.json
        let ms = 1_663_131_734_173;
        assert_eq!(timestamp(ms, false), "2022-09-14T05-02-14.173");
        assert_eq!(
            backup_name(Path::new("/d/data.json"), "2022-09-14T05-02-14.173"),
            PathBuf::from("/d/data-2022-09-14T05-02-14.173.json")
        );
        assert_eq!(backup_name(Path::new("/d/metrics"), "X"), PathBuf::from("/d/metrics-X"));
        assert_eq!(timestamp(0, false), "1970-01-01T00-00-00.000");
        assert_eq!(timestamp(951_782_400_000, false), "2000-02-29T00-00-00.000");
    }

    #[test]
    fn rotates_past_the_size_and_keeps_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.json");
        let cfg = FileConfig {
            path: path.to_string_lossy().into_owned(),
            rotation: Some(Rotation { max_megabytes: 1, max_days: None, max_backups: 2, localtime: false }),
            ..serde_yaml::from_str("path: x").unwrap()
        };
        let mut w = Writer::open(&cfg).unwrap();
        let line = vec![b'x'; 400 * 1024];
        for _ in 0..10 {
            w.write(&line).unwrap();
            // Rotated names have millisecond stamps: keep them distinct.
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
        w.flush().unwrap();
        let b = backups(&path);
        assert_eq!(b.len(), 2, "{b:?}");
        assert!(std::fs::metadata(&path).unwrap().len() <= 1024 * 1024);
        for (p, _) in &b {
            assert_eq!(std::fs::metadata(p).unwrap().len(), 2 * 400 * 1024, "{p:?}");
        }
    }
}
