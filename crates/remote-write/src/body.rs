//! A request body compressed as its protobuf is written.
//!
//! Snappy's block format compresses its input in independent blocks of
//! 64 KiB, each with its own hash table, and the body is the uncompressed
//! length (a varint) followed by the blocks' elements. So the protobuf does
//! not have to exist whole: [`Body`] keeps at most one block of it pending,
//! compresses each full block while it is still in cache, and writes the
//! length in front once the body is complete. The bytes are the same as
//! compressing the whole protobuf at once (tested), and a request of any
//! size needs one block of protobuf memory instead of a buffer as large as
//! the request (about 2 MB per sending consumer before, at 100 targets).

use crate::{EncodeError, SHRINK_ABOVE, SHRINK_AFTER, varint_len};
use std::ops::Range;

/// Snappy's block size: pieces of exactly this many bytes compress to the
/// same elements as the whole input does.
const BLOCK: usize = 1 << 16;

/// Room left in front of the elements for the body's length, a varint of at
/// most 32 bits (snappy's limit on a body).
const HEADER_ROOM: usize = 5;

/// The body being written: protobuf bytes not yet compressed, and the
/// compressed elements so far.
pub(crate) struct Body {
    /// Protobuf bytes written since the last compressed block: less than a
    /// block, plus at most the series being written.
    pending: Vec<u8>,
    /// Kept at its largest length so it is never zero-filled again; the
    /// elements so far are `compressed[HEADER_ROOM..out]`.
    compressed: Vec<u8>,
    out: usize,
    /// Protobuf bytes of this body already compressed.
    flushed: u64,
    snappy: snap::raw::Encoder,
    /// The most of `compressed` the bodies since the last settle needed.
    high: usize,
    /// Settles in a row whose buffers were far larger than needed.
    oversized: u32,
}

impl Body {
    pub(crate) fn new() -> Self {
        Body {
            pending: Vec::new(),
            compressed: Vec::new(),
            out: HEADER_ROOM,
            flushed: 0,
            snappy: snap::raw::Encoder::new(),
            high: 0,
            oversized: 0,
        }
    }

    /// Starts a body, forgetting whatever an interrupted one left.
    pub(crate) fn begin(&mut self) {
        self.pending.clear();
        self.out = HEADER_ROOM;
        self.flushed = 0;
    }

    /// Where the protobuf is written.
    #[inline]
    pub(crate) fn pending(&mut self) -> &mut Vec<u8> {
        &mut self.pending
    }

    #[inline]
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Protobuf bytes of the body so far.
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.flushed + self.pending.len() as u64
    }

    /// Compresses the pending bytes that fill whole blocks.
    #[inline]
    pub(crate) fn flush_blocks(&mut self) -> Result<(), EncodeError> {
        if self.pending.len() < BLOCK {
            return Ok(());
        }
        let mut start = 0;
        while self.pending.len() - start >= BLOCK {
            self.compress(start..start + BLOCK)?;
            start += BLOCK;
        }
        self.pending.drain(..start);
        Ok(())
    }

    /// Completes the body with the first `at` pending bytes and returns
    /// where it lies in [`Body::compressed`]; the rest of the pending bytes
    /// start the next body. The body stays there until the next write.
    pub(crate) fn cut(&mut self, at: usize) -> Result<Range<usize>, EncodeError> {
        let total = self.flushed + at as u64;
        if total > u64::from(u32::MAX) {
            return Err(EncodeError::Snappy(snap::Error::TooBig { given: total, max: u64::from(u32::MAX) }));
        }
        let mut start = 0;
        while start < at {
            let end = (start + BLOCK).min(at);
            self.compress(start..end)?;
            start = end;
        }
        if self.compressed.len() < HEADER_ROOM {
            self.compressed.resize(HEADER_ROOM, 0);
        }
        let head = HEADER_ROOM - varint_len(total);
        put_varint_slice(&mut self.compressed[head..HEADER_ROOM], total);
        let span = head..self.out;
        self.pending.drain(..at);
        self.out = HEADER_ROOM;
        self.flushed = 0;
        Ok(span)
    }

    /// Completes the body with everything pending.
    pub(crate) fn finish(&mut self) -> Result<Range<usize>, EncodeError> {
        self.cut(self.pending.len())
    }

    pub(crate) fn compressed(&self) -> &[u8] {
        &self.compressed
    }

    /// Compresses `pending[piece]` (at most one block) after the elements
    /// so far. snappy writes the piece's own length first: it goes over the
    /// last bytes written, which are put back.
    fn compress(&mut self, piece: Range<usize>) -> Result<(), EncodeError> {
        let n = piece.len();
        debug_assert!(n <= BLOCK);
        if n == 0 {
            return Ok(());
        }
        let head = varint_len(n as u64);
        let at = self.out - head;
        let need = at + snap::raw::max_compress_len(n);
        if self.compressed.len() < need {
            self.compressed.resize(need, 0);
        }
        self.high = self.high.max(need);
        let mut saved = [0u8; HEADER_ROOM];
        saved[..head].copy_from_slice(&self.compressed[at..self.out]);
        let written = self.snappy.compress(&self.pending[piece], &mut self.compressed[at..])?;
        self.compressed[at..self.out].copy_from_slice(&saved[..head]);
        self.out = at + written;
        self.flushed += n as u64;
        Ok(())
    }

    /// Gives back the buffers' memory when they have been far larger than
    /// what bodies needed for a while (see [`SHRINK_ABOVE`]): one big
    /// request (a backlog flushed at once) must not pin its buffer for
    /// good, as there is one encoder per sending consumer. Called after
    /// each encode.
    pub(crate) fn settle(&mut self) {
        let need = self.high.max(self.out);
        self.high = 0;
        let compressed_big = self.compressed.len() > SHRINK_ABOVE && self.compressed.len() > 4 * need;
        // Only a series larger than a block grows the pending buffer past
        // two blocks.
        let pending_big = self.pending.capacity() > SHRINK_ABOVE;
        if !(compressed_big || pending_big) {
            self.oversized = 0;
            return;
        }
        self.oversized += 1;
        if self.oversized >= SHRINK_AFTER {
            self.oversized = 0;
            if compressed_big {
                self.compressed.truncate(need);
                self.compressed.shrink_to_fit();
            }
            if pending_big {
                self.pending.shrink_to(2 * BLOCK);
            }
        }
    }

    /// The protobuf buffer's capacity and the compressed buffer's length.
    pub(crate) fn buffer_sizes(&self) -> (usize, usize) {
        (self.pending.capacity(), self.compressed.len())
    }
}

/// Writes `v` as a varint into `w`, which has exactly its length.
fn put_varint_slice(w: &mut [u8], mut v: u64) {
    let mut i = 0;
    while v >= 0x80 {
        w[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    w[i] = v as u8;
}
