//! The key index saved next to the table, so that opening a table of
//! millions of keys does not rebuild the index from every data file
//! (docs/commit-protocol.md, "Key index snapshots").
//!
//! A snapshot is saved at checkpoints and when a process is done with a
//! table, under `_changelake/key-index` in the table's directory — a prefix
//! Delta readers and VACUUM ignore. It names the Delta version it describes,
//! the live files at that version (paths carry UUIDs, so a recreated table
//! never matches) and a fingerprint of the rules that derive its summaries;
//! its last eight bytes are a checksum of everything before them. Opening a
//! table loads it and replays the commits made after its version
//! (`restart.rs`); a damaged one, one of other settings or of a later version
//! falls back to the rebuild.
//!
//! The codec here is pure and streams both ways: the encoder hands out
//! chunks as it fills them and the decoder takes entries from whatever bytes
//! have arrived, so neither side ever holds the whole snapshot (about 50
//! bytes per key) next to the index.

use xxhash_rust::xxh3::Xxh3;

use super::index::{Entry, NO_FILE};
use crate::merge::{Seq, Summary};
use crate::value::Value;

const MAGIC: &[u8; 8] = b"CLKIDX03";
/// Bump (with [`MAGIC`]) when the layout below or what a [`Summary`] means
/// changes (3: row hashes over the whole encoded row, [`crate::merge::Spec::hashes`]).
const FORMAT: u32 = 3;
/// An entry's bytes besides its key.
const ENTRY_FIXED: usize = 2 + 4 + 4 + 1 + 8 * 4;
const TRAILER: usize = 8;
/// An entry's flags: the sequence's kind (an integer when none is set) and
/// whether the latest version is deleted.
const TS: u8 = 1;
const DELETED: u8 = 2;
const NO_SEQUENCE: u8 = 4;
const NULL_SEQUENCE: u8 = 8;

/// Where a snapshot lives, relative to the table root.
pub(super) const PATH: &str = "_changelake/key-index";

/// What a snapshot says about itself, ahead of its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header {
    /// The Delta version it describes.
    pub(super) version: i64,
    /// [`spec_fingerprint`] of the merge spec it was built under.
    pub(super) fingerprint: u64,
    /// The live files at that version; entries name them by position.
    pub(super) files: Vec<String>,
    pub(super) entries: u64,
}

/// Why a snapshot was not used (logged; the index is rebuilt).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum Rejected {
    #[error("not a key index snapshot of this format")]
    Format,
    #[error("damaged (length or checksum)")]
    Damaged,
    #[error("saved at version {saved}, later than the table's {current}")]
    Version { saved: i64, current: i64 },
    #[error("saved under other merge settings")]
    Settings,
}

/// Encodes a snapshot in chunks: [`Encoder::entry`] appends, the caller
/// takes [`Encoder::take`] whenever [`Encoder::pending`] is large enough,
/// and [`Encoder::finish`] returns the rest with the checksum.
pub(super) struct Encoder {
    buf: Vec<u8>,
    hasher: Xxh3,
}

impl Encoder {
    pub(super) fn new(h: &Header) -> Encoder {
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&h.version.to_le_bytes());
        buf.extend_from_slice(&h.fingerprint.to_le_bytes());
        buf.extend_from_slice(&(h.files.len() as u32).to_le_bytes());
        for f in &h.files {
            buf.extend_from_slice(&(f.len() as u32).to_le_bytes());
            buf.extend_from_slice(f.as_bytes());
        }
        buf.extend_from_slice(&h.entries.to_le_bytes());
        Encoder { buf, hasher: Xxh3::new() }
    }

    /// Appends one entry, its file given as a position in the header's list
    /// (or `NO_FILE`). `false` when it cannot be stored: a sequence of
    /// several columns or of a non-integer, non-timestamp value, or a key
    /// longer than 64 KiB.
    pub(super) fn entry(&mut self, key: &[u8], entry: &Entry, file: u32) -> bool {
        let Ok(key_len) = u16::try_from(key.len()) else { return false };
        let s = &entry.summary;
        let Some((tag, seq)) = s.seq_with(|v| match v {
            [Value::Int(v)] => Some((0u8, *v)),
            [Value::Ts(v)] => Some((TS, *v)),
            // No `sequence_by` (the default): every sequence is empty.
            [] => Some((NO_SEQUENCE, 0)),
            [Value::Null] => Some((NULL_SEQUENCE, 0)),
            _ => None,
        }) else {
            return false;
        };
        let b = &mut self.buf;
        b.extend_from_slice(&key_len.to_le_bytes());
        b.extend_from_slice(key);
        b.extend_from_slice(&file.to_le_bytes());
        b.extend_from_slice(&entry.row.to_le_bytes());
        b.push(tag | if s.deleted() { DELETED } else { 0 });
        b.extend_from_slice(&seq.to_le_bytes());
        b.extend_from_slice(&s.valid_from().to_le_bytes());
        b.extend_from_slice(&s.row_hash().to_le_bytes());
        b.extend_from_slice(&s.tracked_hash().to_le_bytes());
        true
    }

    /// Bytes encoded and not yet taken.
    pub(super) fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The bytes encoded so far.
    pub(super) fn take(&mut self) -> Vec<u8> {
        self.hasher.update(&self.buf);
        let cap = self.buf.capacity();
        std::mem::replace(&mut self.buf, Vec::with_capacity(cap))
    }

    /// The last bytes: what is pending and the checksum.
    pub(super) fn finish(mut self) -> Vec<u8> {
        let mut last = self.take();
        last.extend_from_slice(&self.hasher.digest().to_le_bytes());
        last
    }
}

/// Decodes a snapshot from bytes as they arrive: feed the front of the
/// stream to [`Decoder::header`] until it answers, then to
/// [`Decoder::entries`] until none are left, then [`Decoder::finish`] with
/// the last bytes. Each call says how many bytes it consumed; the caller
/// drops those and keeps the rest for the next call.
pub(super) struct Decoder {
    hasher: Xxh3,
    files: usize,
    left: u64,
}

impl Decoder {
    /// The header, once `buf` holds all of it (`Ok(None)`: not yet), checked
    /// against the table: a snapshot of a later version or of other settings
    /// is refused before its entries are read.
    /// `size` is the snapshot's length: an entry count it cannot hold is
    /// damage (it would otherwise size allocations before the checksum is
    /// reached).
    pub(super) fn header(
        buf: &[u8],
        size: u64,
        current: i64,
        fingerprint: u64,
    ) -> Result<Option<(Decoder, Header, usize)>, Rejected> {
        if buf.len() >= MAGIC.len() && &buf[..MAGIC.len()] != MAGIC {
            return Err(Rejected::Format);
        }
        let mut r = Reader { b: buf, at: MAGIC.len() };
        let Some(h) = (|| {
            let version = r.i64()?;
            let fp = r.u64()?;
            let n = r.u32()? as usize;
            let mut files = Vec::with_capacity(n.min(1 << 16));
            for _ in 0..n {
                let len = r.u32()? as usize;
                files.push(r.take(len)?.to_vec());
            }
            Some((version, fp, files, r.u64()?))
        })() else {
            return Ok(None);
        };
        let (version, fp, files, entries) = h;
        if entries > size / ENTRY_FIXED as u64 {
            return Err(Rejected::Damaged);
        }
        if version > current {
            return Err(Rejected::Version { saved: version, current });
        }
        if fp != fingerprint {
            return Err(Rejected::Settings);
        }
        let files = files
            .into_iter()
            .map(String::from_utf8)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Rejected::Damaged)?;
        let used = r.at;
        let mut hasher = Xxh3::new();
        hasher.update(&buf[..used]);
        let d = Decoder { hasher, files: files.len(), left: entries };
        Ok(Some((d, Header { version, fingerprint: fp, files, entries }, used)))
    }

    /// Entries still to come.
    pub(super) fn left(&self) -> u64 {
        self.left
    }

    /// Hands every whole entry at the front of `buf` to `out`; returns the
    /// bytes consumed.
    pub(super) fn entries(
        &mut self,
        buf: &[u8],
        mut out: impl FnMut(&[u8], Entry),
    ) -> Result<usize, Rejected> {
        let mut at = 0;
        while self.left > 0 && buf.len() - at >= 2 {
            let key_len = u16::from_le_bytes([buf[at], buf[at + 1]]) as usize;
            if buf.len() - at < ENTRY_FIXED + key_len {
                break;
            }
            let mut r = Reader { b: buf, at: at + 2 };
            let key = r.take(key_len).expect("whole entry");
            let file = r.u32().expect("whole entry");
            if file != NO_FILE && file as usize >= self.files {
                return Err(Rejected::Damaged);
            }
            let row = r.u32().expect("whole entry");
            let flags = r.take(1).expect("whole entry")[0];
            let seq = r.i64().expect("whole entry");
            let seq = match flags & !DELETED {
                0 => Seq::Int(seq),
                TS => Seq::Ts(seq),
                NO_SEQUENCE => Seq::Other(Box::default()),
                NULL_SEQUENCE => Seq::Other(Box::new(Box::new([Value::Null]))),
                _ => return Err(Rejected::Damaged),
            };
            let summary = Summary {
                seq,
                deleted: flags & DELETED != 0,
                valid_from: r.i64().expect("whole entry"),
                row_hash: r.u64().expect("whole entry"),
                tracked_hash: r.u64().expect("whole entry"),
            };
            out(key, Entry::new(file, row, summary));
            at = r.at;
            self.left -= 1;
        }
        self.hasher.update(&buf[..at]);
        Ok(at)
    }

    /// Checks the checksum against the bytes after the last entry, which
    /// must be exactly the checksum.
    pub(super) fn finish(self, rest: &[u8]) -> Result<(), Rejected> {
        let sum = (self.left == 0 && rest.len() == TRAILER)
            .then(|| u64::from_le_bytes(rest.try_into().expect("8 bytes")));
        match sum {
            Some(sum) if sum == self.hasher.digest() => Ok(()),
            _ => Err(Rejected::Damaged),
        }
    }
}

/// The fingerprint of everything a stored summary depends on besides the
/// data: the merge spec's columns, key, sequence and tracked columns, and
/// this format.
pub(super) fn spec_fingerprint(spec: &crate::merge::Spec) -> u64 {
    let text = format!(
        "{FORMAT}|{:?}|{:?}|{:?}|{:?}|{:?}|{}",
        spec.strategy,
        spec.names,
        spec.key,
        spec.seq,
        spec.tracked,
        env!("CARGO_PKG_VERSION"),
    );
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len())?;
        let s = &self.b[self.at..end];
        self.at = end;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(file: u32, row: u32, seq: Seq, deleted: bool) -> Entry {
        Entry::new(
            file,
            row,
            Summary { seq, deleted, valid_from: -5, row_hash: 7, tracked_hash: 9 },
        )
    }

    fn header(version: i64, entries: u64) -> Header {
        let files = vec!["a.parquet".to_string(), "_is_current=true/b.parquet".to_string()];
        Header { version, fingerprint: 99, files, entries }
    }

    /// Encodes with a chunk taken after every entry.
    fn encode(h: &Header, entries: &[(Vec<u8>, Entry)]) -> Option<Vec<u8>> {
        let mut e = Encoder::new(h);
        let mut out = vec![];
        for (k, en) in entries {
            if !e.entry(k, en, en.file) {
                return None;
            }
            out.extend(e.take());
        }
        out.extend(e.finish());
        Some(out)
    }

    type Decoded = (Header, Vec<(Vec<u8>, Entry)>);

    /// Decodes feeding `step` bytes at a time, as a stream would.
    fn decode(bytes: &[u8], step: usize, current: i64) -> Result<Decoded, Rejected> {
        let (mut buf, mut fed, mut out) = (vec![], 0, vec![]);
        let mut feed = |buf: &mut Vec<u8>| {
            let end = (fed + step).min(bytes.len());
            buf.extend_from_slice(&bytes[fed..end]);
            let more = end > fed;
            fed = end;
            more
        };
        let (mut d, h) = loop {
            if let Some((d, h, used)) = Decoder::header(&buf, bytes.len() as u64, current, 99)? {
                buf.drain(..used);
                break (d, h);
            }
            if !feed(&mut buf) {
                return Err(Rejected::Damaged);
            }
        };
        while d.left() > 0 {
            let used = d.entries(&buf, |k, e| out.push((k.to_vec(), e)))?;
            buf.drain(..used);
            if d.left() > 0 && !feed(&mut buf) {
                return Err(Rejected::Damaged);
            }
        }
        while feed(&mut buf) {}
        d.finish(&buf)?;
        Ok((h, out))
    }

    #[test]
    fn a_snapshot_round_trips_whatever_the_chunks() {
        let entries = vec![
            (b"k1".to_vec(), entry(0, 3, Seq::Int(17), false)),
            (vec![0u8; 300], entry(1, 0, Seq::Ts(-1), true)),
            (b"gone".to_vec(), entry(NO_FILE, 0, Seq::Int(2), true)),
        ];
        let bytes = encode(&header(42, 3), &entries).unwrap();
        for step in [1, 7, 64, bytes.len()] {
            let (h, got) = decode(&bytes, step, 42).unwrap();
            assert_eq!(h, header(42, 3));
            assert_eq!(got.len(), 3);
            let (k, e) = &got[1];
            assert_eq!(k, &vec![0u8; 300]);
            assert_eq!((e.file, e.row, e.summary.deleted()), (1, 0, true));
            assert_eq!(e.summary.seq(), Seq::Ts(-1));
            assert_eq!((got[0].1.file, got[0].1.row), (0, 3));
            assert_eq!(got[2].1.file, NO_FILE);
            assert_eq!(got[0].1.summary.row_hash(), 7);
        }
    }

    #[test]
    fn a_snapshot_is_never_trusted_beyond_what_it_describes() {
        let bytes =
            encode(&header(42, 1), &[(b"k".to_vec(), entry(0, 0, Seq::Int(1), false))]).unwrap();
        // An older snapshot is replayed forward; a later one is refused.
        assert!(decode(&bytes, 5, 50).is_ok());
        assert_eq!(decode(&bytes, 5, 41).err(), Some(Rejected::Version { saved: 42, current: 41 }));
        let mut other = bytes.clone();
        other[16] ^= 1; // the fingerprint
        assert_eq!(decode(&other, 5, 42).err(), Some(Rejected::Settings));
        for at in [40, bytes.len() - 20, bytes.len() - 1] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 1;
            assert_eq!(decode(&flipped, 5, 42).err(), Some(Rejected::Damaged), "byte {at}");
        }
        assert_eq!(decode(&bytes[..bytes.len() - 3], 5, 42).err(), Some(Rejected::Damaged));
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer, 5, 42).err(), Some(Rejected::Damaged));
        assert_eq!(decode(b"garbage!", 5, 42).err(), Some(Rejected::Format));
    }

    #[test]
    fn tables_without_a_sequence_and_null_sequences_are_saved() {
        let none = Seq::Other(Box::default());
        let null = Seq::Other(Box::new(vec![Value::Null].into_boxed_slice()));
        let entries = vec![
            (b"a".to_vec(), entry(0, 0, none.clone(), false)),
            (b"b".to_vec(), entry(1, 1, null.clone(), true)),
        ];
        let (_, got) = decode(&encode(&header(3, 2), &entries).unwrap(), 9, 3).unwrap();
        assert_eq!((got[0].1.summary.seq(), got[0].1.summary.deleted()), (none, false));
        assert_eq!((got[1].1.summary.seq(), got[1].1.summary.deleted()), (null, true));
    }

    #[test]
    fn an_entry_count_the_snapshot_cannot_hold_is_damage_not_an_allocation() {
        let bytes =
            encode(&header(42, 1), &[(b"k".to_vec(), entry(0, 0, Seq::Int(1), false))]).unwrap();
        let mut huge = bytes.clone();
        // The count sits right after the file list, 8 bytes before the first entry.
        let at = bytes.len() - TRAILER - (ENTRY_FIXED + 1) - 8;
        huge[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(decode(&huge, 64, 42).err(), Some(Rejected::Damaged));
    }

    #[test]
    fn a_sequence_of_several_columns_is_not_saved() {
        let two = vec![crate::value::Value::Int(1), crate::value::Value::Int(2)];
        let other = Seq::Other(Box::new(two.into_boxed_slice()));
        assert!(encode(&header(1, 1), &[(b"k".to_vec(), entry(0, 0, other, false))]).is_none());
    }
}
