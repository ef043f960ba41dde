use super::*;

thread_local! {
    /// Makes the next frame write of this thread fail halfway with this kind.
    pub static FAIL_NEXT_WRITE: std::cell::Cell<Option<io::ErrorKind>> = const { std::cell::Cell::new(None) };
}

fn opts(segment_bytes: u64, max_bytes: u64) -> Options {
    Options { segment_bytes, max_bytes, fsync: false }
}

fn rec(i: u32, size: usize) -> Vec<u8> {
    let mut v = i.to_le_bytes().to_vec();
    v.resize(size.max(4), (i % 251) as u8);
    v
}

fn id(p: &[u8]) -> u32 {
    u32::from_le_bytes(p[..4].try_into().unwrap())
}

fn read_all(log: &mut Log) -> Vec<u32> {
    let mut out = Vec::new();
    loop {
        let got = log.read(1 << 20, |_, _| true).unwrap();
        if got.is_empty() {
            return out;
        }
        out.extend(got.iter().map(|(_, p)| id(p)));
    }
}

fn segs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

#[test]
fn appends_read_back_in_order_across_segments_and_reopen() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut log, rec0) = Log::open(d.path(), opts(200, 0)).unwrap();
        assert_eq!(rec0, Recovery::default());
        for i in 0..20 {
            assert!(log.append(&rec(i, 50)).unwrap().is_empty());
        }
        assert!(log.segment_count() > 3, "rotates at segment_bytes");
    }
    let (mut log, r) = Log::open(d.path(), opts(200, 0)).unwrap();
    assert_eq!(r.records, 20);
    assert_eq!(read_all(&mut log), (0..20).collect::<Vec<_>>());
}

#[test]
fn only_unacknowledged_records_are_replayed() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = Log::open(d.path(), opts(200, 0)).unwrap();
        for i in 0..10 {
            log.append(&rec(i, 40)).unwrap();
        }
        let got = log.read(120, |_, _| true).unwrap();
        assert_eq!(got.iter().map(|(_, p)| id(p)).collect::<Vec<_>>(), [0, 1, 2], "read stops at max_bytes");
        log.ack(got.last().unwrap().0.end()).unwrap();
        // Read but not acknowledged: in flight at the "crash".
        let inflight = log.read(80, |_, _| true).unwrap();
        assert_eq!(inflight.len(), 2);
    }
    let (mut log, r) = Log::open(d.path(), opts(200, 0)).unwrap();
    assert_eq!(r.records, 7);
    assert_eq!(read_all(&mut log), (3..10).collect::<Vec<_>>());
}

#[test]
fn acknowledged_segments_are_deleted() {
    let d = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(d.path(), opts(100, 0)).unwrap();
    for i in 0..10 {
        log.append(&rec(i, 40)).unwrap();
    }
    let n = segs(d.path()).len();
    assert!(n >= 5);
    let got = log.read(1 << 20, |_, _| true).unwrap();
    log.ack(got.last().unwrap().0.end()).unwrap();
    assert_eq!(segs(d.path()).len(), 1, "all but the newest segment deleted");
    assert_eq!(log.unacked().count(), 0);
    assert_eq!(log.bytes(), std::fs::metadata(&segs(d.path())[0]).unwrap().len());
}

#[test]
fn torn_tail_is_truncated_at_the_last_good_record() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
        for i in 0..5 {
            log.append(&rec(i, 30)).unwrap();
        }
    }
    let seg = segs(d.path()).pop().unwrap();
    let good = std::fs::metadata(&seg).unwrap().len();
    // A crash in the middle of a write: a frame header and half a payload.
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&30u32.to_le_bytes()).unwrap();
    f.write_all(&[1, 2, 3, 4, 5, 6, 7]).unwrap();
    drop(f);
    let (mut log, r) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
    assert_eq!(r, Recovery { records: 5, truncated_bytes: 11, truncated_segments: 1, ..Default::default() });
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), good);
    // Appends after recovery land after the last good record.
    log.append(&rec(5, 30)).unwrap();
    drop(log);
    let (mut log, r) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
    assert_eq!(r.truncated_bytes, 0);
    assert_eq!(read_all(&mut log), (0..6).collect::<Vec<_>>());
}

/// Before, a corrupt record cut everything after it; it costs only itself.
#[test]
fn corrupt_fourth_record_costs_only_itself() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
        for i in 0..5 {
            log.append(&rec(i, 30)).unwrap();
        }
    }
    let seg = segs(d.path()).pop().unwrap();
    let mut data = std::fs::read(&seg).unwrap();
    // Flip a payload byte of the fourth record (index 3): checksum mismatch.
    let at = 3 * 38 + 8 + 10;
    data[at] ^= 0xff;
    std::fs::write(&seg, &data).unwrap();
    let (mut log, r) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
    assert_eq!((r.records, r.corrupt_records), (4, 1));
    assert_eq!(r.truncated_bytes, 38, "the corrupt record's bytes");
    assert_eq!(read_all(&mut log), [0, 1, 2, 4]);
}

#[test]
fn over_budget_drops_the_oldest_unread_records_and_reports_them() {
    let d = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(d.path(), opts(100, 300)).unwrap();
    let mut dropped = Vec::new();
    for i in 0..30 {
        for r in log.append(&rec(i, 42)).unwrap() {
            dropped.push(id(&r.head));
        }
        assert!(log.bytes() <= 300 + 100, "within budget plus one segment: {}", log.bytes());
    }
    let left = read_all(&mut log);
    // Every record is either dropped (reported) or still readable; oldest dropped first.
    let mut all = dropped.clone();
    all.extend(&left);
    assert_eq!(all, (0..30).collect::<Vec<_>>());
    assert!(!dropped.is_empty() && !left.is_empty());
}

#[test]
fn records_in_flight_are_not_reported_as_dropped() {
    let d = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(d.path(), opts(100, 200)).unwrap();
    log.append(&rec(0, 42)).unwrap();
    log.append(&rec(1, 42)).unwrap();
    let inflight = log.read(1 << 20, |_, _| true).unwrap();
    assert_eq!(inflight.len(), 2);
    let mut dropped = Vec::new();
    for i in 2..10 {
        dropped.extend(log.append(&rec(i, 42)).unwrap().iter().map(|r| id(&r.head)));
    }
    let left = read_all(&mut log);
    let mut all = vec![0, 1];
    all.extend(&dropped);
    all.extend(&left);
    assert_eq!(all, (0..10).collect::<Vec<_>>(), "in flight {{0,1}}, dropped {dropped:?}, left {left:?}");
    // Acknowledging the in-flight records after their segment went is fine.
    log.ack(inflight.last().unwrap().0.end()).unwrap();
}

#[test]
fn rewind_reads_unacknowledged_records_again() {
    let d = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(d.path(), opts(100, 0)).unwrap();
    for i in 0..6 {
        log.append(&rec(i, 40)).unwrap();
    }
    let a = log.read(90, |_, _| true).unwrap();
    log.ack(a.last().unwrap().0.end()).unwrap();
    let _ = log.read(90, |_, _| true).unwrap();
    log.rewind();
    assert_eq!(read_all(&mut log), [2, 3, 4, 5]);
}

#[test]
fn read_groups_only_while_the_predicate_holds() {
    let d = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
    for (i, kind) in [(0u32, 1u8), (1, 1), (2, 2), (3, 2)] {
        let mut p = rec(i, 20);
        p[4] = kind;
        log.append(&p).unwrap();
    }
    let same = |a: &[u8; HEAD], b: &[u8; HEAD]| a[4] == b[4];
    assert_eq!(log.read(1 << 20, same).unwrap().len(), 2);
    assert_eq!(log.read(1 << 20, same).unwrap().len(), 2);
    assert!(log.read(1 << 20, same).unwrap().is_empty());
}

#[test]
fn a_second_opener_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let _a = Log::open(d.path(), opts(100, 0)).unwrap();
    let e = Log::open(d.path(), opts(100, 0)).err().expect("locked");
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
}

#[test]
fn corrupt_ack_file_replays_everything() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
        for i in 0..3 {
            log.append(&rec(i, 20)).unwrap();
        }
        let a = log.read(1 << 20, |_, _| true).unwrap();
        log.ack(a[0].0.end()).unwrap();
    }
    std::fs::write(d.path().join("ack"), b"garbage").unwrap();
    let (mut log, r) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
    assert_eq!(r.records, 3, "at-least-once: a bad ack replays more, never less");
    assert_eq!(read_all(&mut log), [0, 1, 2]);
}

/// The queue holds scraped labels and values: its folder is 0700 and every
/// file it writes 0600, whatever the umask (issue 12, secrets).
#[cfg(unix)]
#[test]
fn folder_and_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let q = d.path().join("queue");
    std::fs::create_dir_all(&q).unwrap();
    std::fs::set_permissions(&q, std::fs::Permissions::from_mode(0o755)).unwrap();
    {
        let (mut log, _) = Log::open(&q, opts(200, 0)).unwrap();
        for i in 0..10 {
            log.append(&rec(i, 50)).unwrap();
        }
        let got = log.read(1 << 20, |_, _| true).unwrap();
        let (info, _) = got.last().unwrap();
        log.ack(info.end()).unwrap();
    }
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&q), 0o700, "queue folder");
    let files: Vec<PathBuf> = std::fs::read_dir(&q).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(files.len() >= 3, "segments, LOCK and ack: {files:?}");
    for f in files {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
}

/// A failed append (ENOSPC halfway through the frame) is rolled back: the
/// records after it land where the index says, and a reopen keeps them all.
#[test]
fn a_failed_append_is_rolled_back() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
        for i in 0..3 {
            log.append(&rec(i, 50)).unwrap();
        }
        FAIL_NEXT_WRITE.with(|c| c.set(Some(io::ErrorKind::Other)));
        assert!(log.append(&rec(3, 50)).is_err(), "the injected failure surfaces");
        log.append(&rec(4, 50)).unwrap();
        assert_eq!(read_all(&mut log), vec![0, 1, 2, 4], "read back at the right offsets");
    }
    let (mut log, r) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
    assert_eq!((r.truncated_bytes, r.records), (0, 4), "nothing cut at reopen: {r:?}");
    assert_eq!(read_all(&mut log), vec![0, 1, 2, 4]);
}

/// A full disk (ENOSPC) with several segments: the oldest segment is given
/// up (its unread records returned, for the caller to count) and the append
/// succeeds; acknowledging also works when the ack file cannot be staged.
#[test]
fn a_full_disk_still_frees_space() {
    let d = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(d.path(), opts(120, 0)).unwrap();
    for i in 0..6 {
        log.append(&rec(i, 50)).unwrap();
    }
    let before = log.segment_count();
    assert!(before >= 3);
    FAIL_NEXT_WRITE.with(|c| c.set(Some(io::ErrorKind::StorageFull)));
    let evicted = log.append(&rec(6, 50)).unwrap();
    let ids: Vec<u32> = evicted.iter().map(|r| u32::from_le_bytes(r.head[..4].try_into().unwrap())).collect();
    assert_eq!(ids, vec![0, 1], "the oldest segment's records, to count as dropped");
    assert_eq!(read_all(&mut log), vec![2, 3, 4, 5, 6]);
    // An acknowledgement when no new file can be made: in place.
    std::fs::create_dir(d.path().join("ack.tmp")).unwrap();
    let end = log.unacked().last().unwrap().end();
    log.ack(end).unwrap();
    assert_eq!(read_ack(&d.path().join("ack")), Some(end));
}

/// The ack file reached the disk but the data did not (power loss): the
/// acknowledgement points past the segment's end. Clamped at open, records
/// appended afterwards are replayed after the next restart, not skipped.
#[test]
fn an_ack_beyond_the_data_is_clamped() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
        for i in 0..3 {
            log.append(&rec(i, 50)).unwrap();
        }
        let all = log.read(1 << 20, |_, _| true).unwrap();
        log.ack(all.last().unwrap().0.end()).unwrap();
    }
    let seg = segs(d.path())[0].clone();
    write_ack(d.path(), Position { seq: 1, offset: 10_000 }, false).unwrap();
    {
        let (mut log, r) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
        assert_eq!(r.records, 0);
        assert_eq!(log.acked(), Position { seq: 1, offset: std::fs::metadata(&seg).unwrap().len() });
        log.append(&rec(7, 50)).unwrap();
        log.append(&rec(8, 50)).unwrap();
    }
    let (mut log, r) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
    assert_eq!(r.records, 2, "the new records are unacknowledged: {r:?}");
    assert_eq!(read_all(&mut log), vec![7, 8]);
}

/// A zero-filled tail (a power loss on a filesystem that extends files
/// before their data) is cut and counted, not read as empty records.
#[test]
fn a_zero_filled_tail_is_cut_and_counted() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
        for i in 0..3 {
            log.append(&rec(i, 50)).unwrap();
        }
    }
    let seg = segs(d.path())[0].clone();
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[0u8; 4096]).unwrap();
    drop(f);
    let (mut log, r) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
    assert_eq!((r.records, r.truncated_bytes, r.truncated_segments), (3, 4096, 1), "{r:?}");
    assert_eq!(read_all(&mut log), vec![0, 1, 2]);
    assert!(log.append(&[]).is_err(), "no record is empty");
}

/// A corrupt record in the middle of a segment costs only that record: the
/// scan resynchronises at the next one, and the damaged record's head is
/// reported for the caller's sample count.
#[test]
fn a_corrupt_record_in_the_middle_costs_only_itself() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
        for i in 0..5 {
            log.append(&rec(i, 50)).unwrap();
        }
    }
    let seg = segs(d.path())[0].clone();
    let mut data = std::fs::read(&seg).unwrap();
    // Record 2 starts at 2 × 58; flip a byte in its payload (after its head).
    data[2 * 58 + 8 + 30] ^= 0xff;
    std::fs::write(&seg, &data).unwrap();
    let (mut log, r) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
    assert_eq!((r.records, r.corrupt_records), (4, 1), "{r:?}");
    assert_eq!(u32::from_le_bytes(r.corrupt_heads[0][..4].try_into().unwrap()), 2, "its head, for counting");
    assert_eq!(read_all(&mut log), vec![0, 1, 3, 4]);
}

/// Every record is checked when read: a block that goes bad after the open
/// is skipped and reported, not delivered.
#[test]
fn records_are_checked_when_read() {
    let d = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(d.path(), opts(1 << 20, 0)).unwrap();
    for i in 0..3 {
        log.append(&rec(i, 50)).unwrap();
    }
    let seg = segs(d.path())[0].clone();
    let f = OpenOptions::new().write(true).open(&seg).unwrap();
    f.write_all_at(&[0xAA], 58 + 8 + 20).unwrap();
    assert_eq!(read_all(&mut log), vec![0, 2]);
    let bad = log.take_corrupt();
    assert_eq!(bad.len(), 1);
    assert_eq!(u32::from_le_bytes(bad[0].head[..4].try_into().unwrap()), 1);
}
