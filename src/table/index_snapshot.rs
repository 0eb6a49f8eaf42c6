//! The key index saved next to the table, so that opening a table of
//! millions of keys does not rebuild the index from every data file
//! (docs/commit-protocol.md, "Key index snapshots").
//!
//! A snapshot is saved when a process is done with a table (the end of
//! `run --once`, a graceful daemon shutdown) under `_changelake/key-index`
//! in the table's directory — a prefix Delta readers and VACUUM ignore. It is
//! only ever trusted for the exact table it describes: the same Delta
//! version, the same set of live files (paths carry UUIDs, so a recreated
//! table never matches), the same rules that derive its summaries (a
//! fingerprint of the merge spec and of this format), and an intact body
//! (length and xxh3 checksum). Anything else — a crash after later commits,
//! another writer, a changed `track_columns` — falls back to the rebuild.
//!
//! The codec here is pure; `TableStore::{save_index, load_saved_index}` do
//! the I/O.

use xxhash_rust::xxh3::xxh3_64;

use super::index::{Entry, NO_FILE};
use crate::merge::{Seq, Summary};

const MAGIC: &[u8; 8] = b"CLKIDX01";
/// Bump when the layout below or what a [`Summary`] means changes.
const FORMAT: u32 = 1;
const HEADER: usize = 8 + 4 + 8 + 8;

/// Where a snapshot lives, relative to the table root.
pub(super) const PATH: &str = "_changelake/key-index";

/// What a snapshot must match to be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Identity {
    pub(super) version: i64,
    /// [`spec_fingerprint`] of the table's merge spec.
    pub(super) fingerprint: u64,
}

/// One indexed key, with its file given as a position in the snapshot's file list.
pub(super) struct SavedEntry<'a> {
    pub(super) key: &'a [u8],
    pub(super) entry: &'a Entry,
}

/// Why a snapshot was not used (logged; the index is rebuilt).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum Rejected {
    #[error("not a key index snapshot of this format")]
    Format,
    #[error("damaged (length or checksum)")]
    Damaged,
    #[error("saved at version {saved}, the table is at {current}")]
    Version { saved: i64, current: i64 },
    #[error("saved under other merge settings")]
    Settings,
    #[error("its files are not the table's live files")]
    Files,
}

/// Encodes a snapshot: `files` are the live files' paths, entries refer to
/// them by position. `None` when an entry cannot be stored (a sequence of
/// several columns, or a file that is not live).
pub(super) fn encode<'a>(
    id: &Identity,
    files: &[&str],
    entries: impl ExactSizeIterator<Item = SavedEntry<'a>>,
    file_position: impl Fn(u32) -> u32,
) -> Option<Vec<u8>> {
    let mut body = Vec::with_capacity(64 + entries.len() * 48);
    body.extend_from_slice(&id.version.to_le_bytes());
    body.extend_from_slice(&id.fingerprint.to_le_bytes());
    body.extend_from_slice(&(files.len() as u32).to_le_bytes());
    for f in files {
        body.extend_from_slice(&(f.len() as u32).to_le_bytes());
        body.extend_from_slice(f.as_bytes());
    }
    body.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for SavedEntry { key, entry } in entries {
        let key_len = u16::try_from(key.len()).ok()?;
        body.extend_from_slice(&key_len.to_le_bytes());
        body.extend_from_slice(key);
        let file = match entry.file {
            NO_FILE => NO_FILE,
            // An entry naming a file that is not live: never saved as a
            // deleted key (the next open rebuilds instead).
            f => Some(file_position(f)).filter(|&p| p != NO_FILE)?,
        };
        body.extend_from_slice(&file.to_le_bytes());
        body.extend_from_slice(&entry.row.to_le_bytes());
        let s = &entry.summary;
        let (tag, seq) = match &s.seq {
            Seq::Int(v) => (0u8, *v),
            Seq::Ts(v) => (1u8, *v),
            Seq::Other(_) => return None,
        };
        body.push(tag | (u8::from(s.deleted) << 1));
        body.extend_from_slice(&seq.to_le_bytes());
        body.extend_from_slice(&s.valid_from.to_le_bytes());
        body.extend_from_slice(&s.row_hash.to_le_bytes());
        body.extend_from_slice(&s.tracked_hash.to_le_bytes());
    }
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&xxh3_64(&body).to_le_bytes());
    out.extend_from_slice(&body);
    Some(out)
}

/// A checked snapshot: the files it names, and its entries (file
/// positions), read one at a time straight from the bytes — no copy per key
/// for an index of millions.
pub(super) struct Decoded<'a> {
    pub(super) files: Vec<String>,
    pub(super) entries: Entries<'a>,
}

/// Decodes and checks a snapshot against what the table is now.
pub(super) fn decode<'a>(bytes: &'a [u8], want: &Identity) -> Result<Decoded<'a>, Rejected> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC || u32_at(bytes, 8) != FORMAT {
        return Err(Rejected::Format);
    }
    let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes")) as usize;
    let sum = u64::from_le_bytes(bytes[20..28].try_into().expect("8 bytes"));
    let body = &bytes[HEADER..];
    if body.len() != len || xxh3_64(body) != sum {
        return Err(Rejected::Damaged);
    }
    let mut r = Reader { b: body, at: 0 };
    let version = r.i64()?;
    if version != want.version {
        return Err(Rejected::Version { saved: version, current: want.version });
    }
    if r.u64()? != want.fingerprint {
        return Err(Rejected::Settings);
    }
    let n_files = r.u32()? as usize;
    let mut files = Vec::with_capacity(n_files);
    for _ in 0..n_files {
        let n = r.u32()? as usize;
        files.push(String::from_utf8(r.take(n)?.to_vec()).map_err(|_| Rejected::Damaged)?);
    }
    let left = r.u64()?;
    let entries = Entries { r, left, files: files.len(), done: false };
    Ok(Decoded { files, entries })
}

/// The entries of a [`Decoded`] snapshot; a malformed one ends them with
/// `Err(Damaged)` (as do bytes left over after the last).
pub(super) struct Entries<'a> {
    r: Reader<'a>,
    left: u64,
    files: usize,
    done: bool,
}

impl<'a> Entries<'a> {
    /// Entries still to come, as the snapshot states.
    pub(super) fn len(&self) -> usize {
        self.left as usize
    }

    fn entry(&mut self) -> Result<(&'a [u8], Entry), Rejected> {
        let r = &mut self.r;
        let key_len = u16::from_le_bytes(r.take(2)?.try_into().expect("2 bytes")) as usize;
        let key = r.take(key_len)?;
        let file = r.u32()?;
        if file != NO_FILE && file as usize >= self.files {
            return Err(Rejected::Damaged);
        }
        let row = r.u32()?;
        let flags = r.take(1)?[0];
        let seq = r.i64()?;
        let seq = if flags & 1 == 0 { Seq::Int(seq) } else { Seq::Ts(seq) };
        let summary = Summary {
            seq,
            deleted: flags & 2 != 0,
            valid_from: r.i64()?,
            row_hash: r.u64()?,
            tracked_hash: r.u64()?,
        };
        Ok((key, Entry { file, row, summary }))
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<(&'a [u8], Entry), Rejected>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.left == 0 {
            self.done = true;
            return (self.r.at != self.r.b.len()).then_some(Err(Rejected::Damaged));
        }
        self.left -= 1;
        let e = self.entry();
        self.done = e.is_err();
        Some(e)
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
    xxh3_64(text.as_bytes())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Rejected> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or(Rejected::Damaged)?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, Rejected> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, Rejected> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn i64(&mut self) -> Result<i64, Rejected> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

impl super::TableStore {
    /// Saves the key index as a snapshot of the table's current version.
    /// `Ok(None)`: nothing to save (no table yet, already saved at this
    /// version, or a sequence this format cannot store); `Ok(Some(keys))`: saved.
    pub async fn save_index(&mut self, spec: &crate::merge::Spec) -> super::Result<Option<usize>> {
        use object_store::ObjectStoreExt;
        let Some(version) = self.version() else { return Ok(None) };
        if self.saved_index == Some(version) {
            return Ok(None);
        }
        let mut position = vec![u32::MAX; self.files.len()];
        let mut paths = vec![];
        for (id, f) in self.files.iter().enumerate() {
            if let Some(f) = f {
                position[id] = paths.len() as u32;
                paths.push(f.path.as_str());
            }
        }
        let id = Identity { version, fingerprint: spec_fingerprint(spec) };
        let entries = self.index.iter().map(|(key, entry)| SavedEntry { key, entry });
        let Some(bytes) = encode(&id, &paths, entries, |f| position[f as usize]) else {
            return Ok(None);
        };
        let keys = self.index.len();
        self.store()?
            .put(&deltalake::Path::from(PATH), bytes.into())
            .await
            .map_err(|e| self.io_err(format!("writing {PATH}"), e))?;
        self.saved_index = Some(version);
        Ok(Some(keys))
    }

    /// Replaces the key index with the saved snapshot when it describes the
    /// table exactly as it is now; `Err(reason)` otherwise (the caller
    /// rebuilds).
    pub(super) async fn load_saved_index(
        &mut self,
        spec: &crate::merge::Spec,
    ) -> std::result::Result<usize, String> {
        use object_store::ObjectStoreExt;
        let started = std::time::Instant::now();
        let version = self.version().ok_or("no table yet")?;
        let store = self.store().map_err(|e| e.to_string())?;
        let bytes = match store.get(&deltalake::Path::from(PATH)).await {
            Ok(r) => r.bytes().await.map_err(|e| e.to_string())?,
            Err(object_store::Error::NotFound { .. }) => return Err("none saved".into()),
            Err(e) => return Err(e.to_string()),
        };
        let read = started.elapsed();
        let want = Identity { version, fingerprint: spec_fingerprint(spec) };
        let Decoded { files, entries } = decode(&bytes, &want).map_err(|e| e.to_string())?;
        let checked = started.elapsed();
        let ids: std::collections::HashMap<&str, u32> = self
            .files
            .iter()
            .enumerate()
            .filter_map(|(id, f)| f.as_ref().map(|f| (f.path.as_str(), id as u32)))
            .collect();
        if files.len() != ids.len() {
            return Err(Rejected::Files.to_string());
        }
        let mut file_ids = Vec::with_capacity(files.len());
        for path in &files {
            file_ids.push(*ids.get(path.as_str()).ok_or_else(|| Rejected::Files.to_string())?);
        }
        let mut index = super::index::KeyIndex::with_capacity(entries.len());
        for e in entries {
            let (key, mut entry) = e.map_err(|e| e.to_string())?;
            if entry.file != NO_FILE {
                entry.file = file_ids[entry.file as usize];
            }
            index.insert(key, entry);
        }
        self.index = index;
        self.saved_index = Some(version);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        tracing::debug!(
            target: "changelake::table",
            bytes = bytes.len(),
            read_ms = ms(read),
            check_ms = ms(checked - read),
            build_ms = ms(started.elapsed() - checked),
            "key index snapshot phases"
        );
        Ok(self.index.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(file: u32, row: u32, seq: Seq, deleted: bool) -> Entry {
        Entry {
            file,
            row,
            summary: Summary { seq, deleted, valid_from: -5, row_hash: 7, tracked_hash: 9 },
        }
    }

    fn snapshot(id: &Identity, entries: &[(Vec<u8>, Entry)]) -> Option<Vec<u8>> {
        // Our file ids 10 and 20 are positions 0 and 1 in the list.
        encode(
            id,
            &["a.parquet", "_is_current=true/b.parquet"],
            entries.iter().map(|(k, e)| SavedEntry { key: k, entry: e }),
            |f| f / 10 - 1,
        )
    }

    #[test]
    fn a_snapshot_round_trips_with_files_by_position() {
        let id = Identity { version: 42, fingerprint: 99 };
        let entries = vec![
            (b"k1".to_vec(), entry(10, 3, Seq::Int(17), false)),
            (vec![0u8; 300], entry(20, 0, Seq::Ts(-1), true)),
            (b"gone".to_vec(), entry(NO_FILE, 0, Seq::Int(2), true)),
        ];
        let bytes = snapshot(&id, &entries).unwrap();
        let d = decode(&bytes, &id).unwrap();
        assert_eq!(d.files, ["a.parquet", "_is_current=true/b.parquet"]);
        assert_eq!(d.entries.len(), 3);
        let entries: Vec<(&[u8], Entry)> = d.entries.collect::<Result<_, _>>().unwrap();
        let (k, e) = &entries[1];
        assert_eq!(*k, &[0u8; 300][..]);
        assert_eq!((e.file, e.row, e.summary.deleted), (1, 0, true));
        assert_eq!(e.summary.seq, Seq::Ts(-1));
        assert_eq!(entries[0].1.file, 0);
        assert_eq!(entries[2].1.file, NO_FILE);
        assert_eq!(entries[0].1.summary.row_hash, 7);
    }

    #[test]
    fn a_snapshot_is_never_trusted_for_another_table_state() {
        let id = Identity { version: 42, fingerprint: 99 };
        let bytes = snapshot(&id, &[(b"k".to_vec(), entry(10, 0, Seq::Int(1), false))]).unwrap();
        assert_eq!(
            decode(&bytes, &Identity { version: 43, fingerprint: 99 }).err(),
            Some(Rejected::Version { saved: 42, current: 43 })
        );
        assert_eq!(
            decode(&bytes, &Identity { version: 42, fingerprint: 98 }).err(),
            Some(Rejected::Settings)
        );
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(decode(&flipped, &id).err(), Some(Rejected::Damaged));
        assert_eq!(decode(&bytes[..bytes.len() - 3], &id).err(), Some(Rejected::Damaged));
        assert_eq!(decode(b"garbage", &id).err(), Some(Rejected::Format));
    }

    #[test]
    fn a_sequence_of_several_columns_is_not_saved() {
        let id = Identity { version: 1, fingerprint: 1 };
        let other = Seq::Other(Box::new(vec![crate::value::Value::Int(1)].into_boxed_slice()));
        assert!(snapshot(&id, &[(b"k".to_vec(), entry(10, 0, other, false))]).is_none());
    }
}
