//! An append-only segment log: the storage under infertel's persistent
//! sending queue (one log per queue consumer).
//!
//! On disk, a directory holds segment files `<seq>.seg` (20 decimal digits,
//! oldest first) and an `ack` file. A segment is a run of records:
//!
//! ```text
//! record = len: u32 LE | crc32(payload): u32 LE | payload (len bytes)
//! ack    = seq: u64 LE | offset: u64 LE | crc32(first 16 bytes): u32 LE
//! ```
//!
//! Appends go to the newest segment, which rotates at `segment_bytes`. A
//! reader takes records from its cursor and, once the backend accepted
//! them, acknowledges the position after them; the acknowledgement is
//! written to `ack` (write to a temporary file, then rename), so after a
//! crash, replay starts at the last acknowledged record: only what was in
//! flight is read again. Segments wholly before the acknowledgement are
//! deleted.
//!
//! The log is bounded by `max_bytes` (all its segments): when an append
//! exceeds it, whole segments are deleted oldest first and the records in
//! them that were never read are returned to the caller, to be counted
//! as dropped. Records already read (in flight) are not returned: the reader
//! accounts for them.
//!
//! Opening scans every record and checks its length and checksum. A torn
//! tail (a crash mid-write, a zero-filled tail after a power loss: no
//! record is empty, so zeros are never read as records) is truncated at the
//! last good record; a corrupt record in the middle costs only itself: the
//! scan resynchronises at the next valid record. Both are reported in
//! [`Recovery`]; the log opens regardless. Every record is checked again
//! when it is read ([`Log::read`] reports the ones that no longer match).
//!
//! A failed or partial append (ENOSPC, EIO on fsync) is rolled back to the
//! last good record, so later records land where the index says; on a full
//! disk the oldest segment is given up (its unread records returned, to be
//! counted) to make room, and acknowledgements delete segments before they
//! write, so a full disk still frees space.
//!
//! Each record's first [`HEAD`] bytes (zero-padded) are kept in memory as
//! its `head`, for the caller's bookkeeping (sample count, append time)
//! without reading the payload back.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes of each payload kept in memory.
pub const HEAD: usize = 16;
/// Bytes of a record's framing (length and checksum).
pub const FRAME: u64 = 8;
/// The largest payload accepted (a sanity bound when scanning, too).
pub const MAX_RECORD: usize = 256 << 20;

#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// A segment rotates once it holds this many bytes.
    pub segment_bytes: u64,
    /// All segments together; 0 = unbounded.
    pub max_bytes: u64,
    /// `fdatasync` after every append and acknowledgement.
    pub fsync: bool,
}

/// What opening found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Records waiting to be read (written, never acknowledged).
    pub records: usize,
    /// Bytes cut off at torn or corrupt tails.
    pub truncated_bytes: u64,
    /// Segments that had a torn or corrupt tail.
    pub truncated_segments: usize,
    /// Corrupt records skipped inside segments (the scan resynchronised
    /// after them), with the heads read from their frames where the frame
    /// was intact enough to have one (for the caller's sample count).
    pub corrupt_records: usize,
    pub corrupt_heads: Vec<[u8; HEAD]>,
}

/// One record as the log knows it in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordInfo {
    pub seq: u64,
    /// Offset of the record's frame in its segment.
    pub offset: u64,
    /// Payload length.
    pub len: u32,
    /// The payload's first bytes, zero-padded.
    pub head: [u8; HEAD],
}

impl RecordInfo {
    /// The position after this record (what to acknowledge).
    pub fn end(&self) -> Position {
        Position { seq: self.seq, offset: self.offset + FRAME + self.len as u64 }
    }
}

/// A place in the log: segment and byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    pub seq: u64,
    pub offset: u64,
}

struct Segment {
    seq: u64,
    size: u64,
    records: Vec<RecordInfo>,
}

pub struct Log {
    dir: PathBuf,
    opts: Options,
    segments: VecDeque<Segment>,
    writer: Option<(u64, File)>,
    reader: Option<(u64, File)>,
    /// Next record to read: (segment seq, index in that segment's records).
    cursor: (u64, usize),
    acked: Position,
    bytes: u64,
    /// Records found corrupt when read, not yet taken by the caller.
    corrupt_read: Vec<RecordInfo>,
    _lock: File,
}

fn seg_name(seq: u64) -> String {
    format!("{seq:020}.seg")
}

fn head_of(payload: &[u8]) -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    let n = payload.len().min(HEAD);
    h[..n].copy_from_slice(&payload[..n]);
    h
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// The frame at `off`, if it is a whole, valid record: (payload length).
fn frame_at(data: &[u8], off: usize) -> Option<usize> {
    if off + FRAME as usize > data.len() {
        return None;
    }
    let len = u32::from_le_bytes(data[off..off + 4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(data[off + 4..off + 8].try_into().ok()?);
    let start = off + FRAME as usize;
    // No record is empty: a zero-filled region (len 0, crc32 of nothing is
    // 0) must not read as a run of records.
    if len == 0 || len > MAX_RECORD || start + len > data.len() {
        return None;
    }
    (crc32fast::hash(&data[start..start + len]) == crc).then_some(len)
}

/// What a segment's bytes hold.
struct Scanned {
    records: Vec<RecordInfo>,
    /// The end of the last good record: what follows is a torn tail.
    good_end: u64,
    /// Corrupt regions skipped between good records: (bytes, head of the
    /// damaged frame when its length was readable).
    skipped: Vec<(u64, Option<[u8; HEAD]>)>,
}

/// Scans a segment: the good records, resynchronising after a corrupt one
/// at the next offset that holds a valid record.
fn scan(seq: u64, data: &[u8]) -> Scanned {
    let mut out = Scanned { records: Vec::new(), good_end: 0, skipped: Vec::new() };
    let mut off = 0usize;
    while off + FRAME as usize <= data.len() {
        if let Some(len) = frame_at(data, off) {
            let start = off + FRAME as usize;
            out.records.push(RecordInfo {
                seq,
                offset: off as u64,
                len: len as u32,
                head: head_of(&data[start..start + len]),
            });
            off = start + len;
            out.good_end = off as u64;
            continue;
        }
        // Corrupt or torn: find the next valid record, if any.
        let Some(next) = (off + 1..data.len()).find(|&o| frame_at(data, o).is_some()) else { break };
        let len = u32::from_le_bytes(data[off..off + 4].try_into().unwrap_or_default()) as usize;
        let head = (len > 0 && off + FRAME as usize + HEAD.min(len) <= data.len())
            .then(|| head_of(&data[off + FRAME as usize..(off + FRAME as usize + len).min(data.len())]));
        out.skipped.push(((next - off) as u64, head));
        off = next;
    }
    out
}

/// Writes a record's frame. Tests make it fail after part of the frame (a
/// disk that fills up mid-write).
fn write_frame(f: &mut File, frame: &[u8]) -> io::Result<()> {
    #[cfg(test)]
    if let Some(kind) = tests::FAIL_NEXT_WRITE.with(|c| c.take()) {
        f.write_all(&frame[..frame.len() / 2])?;
        return Err(io::Error::new(kind, "injected write failure"));
    }
    f.write_all(frame)
}

/// Files the log creates are the user's alone (0600).
fn private(o: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o
}

impl Log {
    /// Opens (creating) the log in `dir`; fails if another process holds it.
    pub fn open(dir: &Path, opts: Options) -> io::Result<(Log, Recovery)> {
        // The queue holds scraped labels and values: readable by this user
        // only (0700 folder, 0600 files), whatever the umask.
        std::fs::create_dir_all(dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        let lock = private(OpenOptions::new().create(true).truncate(false).write(true)).open(dir.join("LOCK"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("{} is in use by another process", dir.display()),
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        let acked = read_ack(&dir.join("ack")).unwrap_or_default();
        let mut seqs: Vec<u64> = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            if let Some(s) = name.strip_suffix(".seg")
                && let Ok(n) = s.parse::<u64>()
            {
                seqs.push(n);
            }
        }
        seqs.sort_unstable();
        let mut rec = Recovery::default();
        let mut segments = VecDeque::new();
        let mut bytes = 0;
        for seq in seqs {
            let path = dir.join(seg_name(seq));
            if seq < acked.seq {
                std::fs::remove_file(&path)?;
                continue;
            }
            let mut data = Vec::new();
            File::open(&path)?.read_to_end(&mut data)?;
            let scanned = scan(seq, &data);
            for (_, head) in &scanned.skipped {
                rec.corrupt_records += 1;
                rec.corrupt_heads.extend(head);
            }
            rec.truncated_bytes += scanned.skipped.iter().map(|(b, _)| b).sum::<u64>();
            let (records, good) = (scanned.records, scanned.good_end);
            if good < data.len() as u64 {
                rec.truncated_bytes += data.len() as u64 - good;
                rec.truncated_segments += 1;
                let f = OpenOptions::new().write(true).open(&path)?;
                f.set_len(good)?;
                f.sync_all()?;
            }
            bytes += good;
            segments.push_back(Segment { seq, size: good, records });
        }
        // An acknowledgement beyond the data (power lost after the ack file
        // reached the disk but before the data did) is clamped to it: else
        // records appended later at lower offsets would count as delivered.
        let mut acked = acked;
        let clamped = match segments.iter().find(|s| s.seq == acked.seq) {
            Some(s) if acked.offset > s.size => Some(s.size),
            None if acked.offset > 0 && segments.back().is_none_or(|s| s.seq < acked.seq) => Some(0),
            _ => None,
        };
        if let Some(offset) = clamped {
            acked.offset = offset;
            // Written back, or the next open would clamp to a longer
            // segment and count the records appended since as delivered.
            write_ack(dir, acked, opts.fsync)?;
        }
        // The cursor: the first record at or after the acknowledgement.
        let mut cursor = (acked.seq, 0);
        if let Some(first) = segments.front() {
            cursor = (first.seq, 0);
            if first.seq == acked.seq {
                cursor.1 = first.records.iter().position(|r| r.offset >= acked.offset).unwrap_or(first.records.len());
            }
        }
        let log = Log {
            dir: dir.to_path_buf(),
            opts,
            segments,
            writer: None,
            reader: None,
            cursor,
            acked,
            bytes,
            corrupt_read: Vec::new(),
            _lock: lock,
        };
        rec.records = log.unread_records();
        Ok((log, rec))
    }

    fn seg_index(&self, seq: u64) -> Option<usize> {
        // Segments are in seq order; their count is small.
        self.segments.iter().position(|s| s.seq == seq)
    }

    /// Appends one record. Returns the never-read records deleted to stay
    /// within `max_bytes`, oldest first (and, on a full disk, those of the
    /// oldest segment given up to make room).
    pub fn append(&mut self, payload: &[u8]) -> io::Result<Vec<RecordInfo>> {
        if payload.is_empty() || payload.len() > MAX_RECORD {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "record empty or too large"));
        }
        match self.try_append(payload) {
            Ok(evicted) => Ok(evicted),
            Err(e) if e.kind() == io::ErrorKind::StorageFull && self.segments.len() > 1 => {
                // A full disk: give up the oldest segment (counted by the
                // caller, like the budget) and try once more.
                let mut evicted = self.evict_oldest()?;
                evicted.extend(self.try_append(payload)?);
                Ok(evicted)
            }
            Err(e) => Err(e),
        }
    }

    fn try_append(&mut self, payload: &[u8]) -> io::Result<Vec<RecordInfo>> {
        let need = FRAME + payload.len() as u64;
        let rotate = match self.segments.back() {
            None => true,
            Some(s) => s.size > 0 && s.size + need > self.opts.segment_bytes,
        };
        if rotate {
            let seq = self.segments.back().map(|s| s.seq + 1).unwrap_or(self.acked.seq.max(1));
            let f = private(OpenOptions::new().create(true).append(true)).open(self.dir.join(seg_name(seq)))?;
            if self.opts.fsync {
                sync_dir(&self.dir);
            }
            self.segments.push_back(Segment { seq, size: 0, records: Vec::new() });
            self.writer = Some((seq, f));
        }
        let back_seq = self.segments.back().map(|s| s.seq).unwrap_or_default();
        if self.writer.as_ref().is_none_or(|(s, _)| *s != back_seq) {
            let f = OpenOptions::new().append(true).open(self.dir.join(seg_name(back_seq)))?;
            self.writer = Some((back_seq, f));
        }
        let mut frame = Vec::with_capacity(need as usize);
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        frame.extend_from_slice(payload);
        let good = self.segments.back().map(|s| s.size).unwrap_or_default();
        let (_, f) = self.writer.as_mut().expect("writer");
        let written = write_frame(f, &frame).and_then(|()| if self.opts.fsync { f.sync_data() } else { Ok(()) });
        if let Err(e) = written {
            // Back to the last good record: a partial frame left in place
            // would put every later record where the index does not say,
            // and the next open would cut the good records after it.
            let _ = f.set_len(good);
            self.writer = None;
            return Err(e);
        }
        let seg = self.segments.back_mut().expect("segment");
        seg.records.push(RecordInfo {
            seq: seg.seq,
            offset: seg.size,
            len: payload.len() as u32,
            head: head_of(payload),
        });
        seg.size += need;
        self.bytes += need;
        self.enforce_budget()
    }

    /// Deletes the oldest segment; its never-read records, oldest first.
    fn evict_oldest(&mut self) -> io::Result<Vec<RecordInfo>> {
        let Some(seg) = self.segments.pop_front() else { return Ok(Vec::new()) };
        let first_unread = match seg.seq.cmp(&self.cursor.0) {
            std::cmp::Ordering::Less => seg.records.len(),
            std::cmp::Ordering::Equal => self.cursor.1,
            std::cmp::Ordering::Greater => 0,
        };
        let evicted = seg.records[first_unread.min(seg.records.len())..].to_vec();
        if self.cursor.0 <= seg.seq {
            self.cursor = (self.segments.front().map(|s| s.seq).unwrap_or(seg.seq + 1), 0);
        }
        if self.reader.as_ref().is_some_and(|(s, _)| *s == seg.seq) {
            self.reader = None;
        }
        self.bytes -= seg.size;
        std::fs::remove_file(self.dir.join(seg_name(seg.seq)))?;
        Ok(evicted)
    }

    fn enforce_budget(&mut self) -> io::Result<Vec<RecordInfo>> {
        let mut evicted = Vec::new();
        while self.opts.max_bytes > 0 && self.bytes > self.opts.max_bytes && self.segments.len() > 1 {
            evicted.extend(self.evict_oldest()?);
        }
        Ok(evicted)
    }

    /// Reads records from the cursor onwards, advancing it: at least one
    /// when any is unread, then more while `more(first head, next head)`
    /// holds and the payloads stay within `max_bytes`.
    pub fn read(
        &mut self,
        max_bytes: usize,
        more: impl Fn(&[u8; HEAD], &[u8; HEAD]) -> bool,
    ) -> io::Result<Vec<(RecordInfo, Vec<u8>)>> {
        let mut out: Vec<(RecordInfo, Vec<u8>)> = Vec::new();
        let mut total = 0usize;
        loop {
            let Some(i) = self.seg_index(self.cursor.0).or_else(|| {
                // The cursor's segment is gone (evicted) or not yet made.
                self.segments.iter().position(|s| s.seq > self.cursor.0)
            }) else {
                break;
            };
            let seg = &self.segments[i];
            if seg.seq != self.cursor.0 {
                self.cursor = (seg.seq, 0);
            }
            if self.cursor.1 >= seg.records.len() {
                match self.segments.get(i + 1) {
                    Some(n) => {
                        self.cursor = (n.seq, 0);
                        continue;
                    }
                    None => break,
                }
            }
            let r = seg.records[self.cursor.1];
            if let Some((first, _)) = out.first()
                && (total + r.len as usize > max_bytes || !more(&first.head, &r.head))
            {
                break;
            }
            if self.reader.as_ref().is_none_or(|(s, _)| *s != r.seq) {
                self.reader = Some((r.seq, File::open(self.dir.join(seg_name(r.seq)))?));
            }
            let (_, f) = self.reader.as_ref().expect("reader");
            let mut frame = vec![0u8; FRAME as usize + r.len as usize];
            f.read_exact_at(&mut frame, r.offset)?;
            self.cursor.1 += 1;
            let crc = u32::from_le_bytes(frame[4..8].try_into().unwrap_or_default());
            let buf = frame.split_off(FRAME as usize);
            // Checked again when read: a block that went bad since the open
            // is skipped and reported, not delivered as data.
            if crc32fast::hash(&buf) != crc {
                self.corrupt_read.push(r);
                continue;
            }
            total += buf.len();
            out.push((r, buf));
        }
        Ok(out)
    }

    /// Records the backend has everything before `pos`; deletes segments
    /// wholly before it.
    pub fn ack(&mut self, pos: Position) -> io::Result<()> {
        if pos <= self.acked {
            return Ok(());
        }
        self.acked = pos;
        // Segments wholly acknowledged go first: on a full disk the ack file
        // itself needs room. A crash in between replays from the previous
        // acknowledgement's first remaining segment: nothing is lost.
        while self.segments.len() > 1
            && self.segments.front().is_some_and(|s| s.seq < pos.seq || (s.seq == pos.seq && pos.offset >= s.size))
        {
            let seg = self.segments.pop_front().expect("segment");
            if self.reader.as_ref().is_some_and(|(s, _)| *s == seg.seq) {
                self.reader = None;
            }
            self.bytes -= seg.size;
            std::fs::remove_file(self.dir.join(seg_name(seg.seq)))?;
        }
        write_ack(&self.dir, pos, self.opts.fsync)
    }

    /// Forces what was appended to the disk (fdatasync of the segment being
    /// written).
    pub fn sync(&mut self) -> io::Result<()> {
        match &self.writer {
            Some((_, f)) => f.sync_data(),
            None => Ok(()),
        }
    }

    /// Records found corrupt by [`Log::read`] since the last call (skipped,
    /// not delivered): for the caller to count.
    pub fn take_corrupt(&mut self) -> Vec<RecordInfo> {
        std::mem::take(&mut self.corrupt_read)
    }

    /// Moves the cursor back to the acknowledgement: what was read but not
    /// acknowledged is read again (a delivery that will be retried later).
    pub fn rewind(&mut self) {
        let acked = self.acked;
        self.cursor = match self.segments.iter().find(|s| s.seq >= acked.seq) {
            Some(s) if s.seq == acked.seq => {
                (s.seq, s.records.iter().position(|r| r.offset >= acked.offset).unwrap_or(s.records.len()))
            }
            Some(s) => (s.seq, 0),
            None => self.cursor,
        };
    }

    /// Bytes of all segments on disk.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Records after the cursor.
    pub fn unread_records(&self) -> usize {
        self.unread().count()
    }

    /// The records after the cursor, oldest first.
    pub fn unread(&self) -> impl Iterator<Item = &RecordInfo> {
        let cursor = self.cursor;
        self.segments.iter().filter(move |s| s.seq >= cursor.0).flat_map(move |s| {
            let from = if s.seq == cursor.0 { cursor.1 } else { 0 };
            s.records[from.min(s.records.len())..].iter()
        })
    }

    /// The records after the acknowledgement (unread or in flight), oldest first.
    pub fn unacked(&self) -> impl Iterator<Item = &RecordInfo> {
        let acked = self.acked;
        self.segments
            .iter()
            .flat_map(|s| s.records.iter())
            .filter(move |r| r.seq > acked.seq || (r.seq == acked.seq && r.offset >= acked.offset))
    }

    pub fn acked(&self) -> Position {
        self.acked
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }
}

fn read_ack(path: &Path) -> Option<Position> {
    let data = std::fs::read(path).ok()?;
    if data.len() != 20 || crc32fast::hash(&data[..16]).to_le_bytes() != data[16..20] {
        return None;
    }
    Some(Position {
        seq: u64::from_le_bytes(data[..8].try_into().ok()?),
        offset: u64::from_le_bytes(data[8..16].try_into().ok()?),
    })
}

fn write_ack(dir: &Path, pos: Position, fsync: bool) -> io::Result<()> {
    let mut data = Vec::with_capacity(20);
    data.extend_from_slice(&pos.seq.to_le_bytes());
    data.extend_from_slice(&pos.offset.to_le_bytes());
    let crc = crc32fast::hash(&data);
    data.extend_from_slice(&crc.to_le_bytes());
    let tmp = dir.join("ack.tmp");
    let staged = private(OpenOptions::new().create(true).write(true).truncate(true)).open(&tmp).and_then(|mut f| {
        f.write_all(&data)?;
        if fsync {
            f.sync_data()?;
        }
        Ok(())
    });
    if let Err(e) = staged {
        // No room for a new file (a full disk): overwrite the 20 bytes of
        // the existing one in place; its checksum catches a torn write,
        // which falls back to replaying from the start (duplicates, no loss).
        let _ = std::fs::remove_file(&tmp);
        let mut f = private(OpenOptions::new().create(true).write(true)).open(dir.join("ack")).map_err(|_| e)?;
        f.write_all(&data)?;
        if fsync {
            f.sync_data()?;
        }
        return Ok(());
    }
    std::fs::rename(&tmp, dir.join("ack"))?;
    if fsync {
        sync_dir(dir);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
