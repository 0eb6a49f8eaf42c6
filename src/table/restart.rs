//! The key index across restarts: saved as a snapshot next to the table
//! (codec in `index_snapshot.rs`), loaded at open, and brought up to the
//! table's version by replaying what changed since the snapshot was saved
//! (docs/commit-protocol.md, "Key index snapshots").
//!
//! Replaying works on the difference between the snapshot's live files and
//! the table's, not on the commits one by one: a file live in both is the
//! same parquet file (paths carry UUIDs), so its entries stay valid unless
//! its deletion vector now masks their row; a file only the table has is
//! read like a rebuild would read it; an entry whose file is gone is
//! resolved by those reads (the key's row moved), by the newest version in
//! new history files (scd2: a deleted key) or else dropped (the key is
//! gone). A graceful restart replays nothing; a crash replays the commits
//! since the last checkpoint's snapshot.

use std::collections::HashMap;

use std::sync::Arc;

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt};

use super::deleted_briefs::SnapshotId;
use super::index::{Bulk, GONE, NO_FILE};
use super::index_snapshot::{spec_fingerprint, Decoder, Encoder, Header, Rejected, PATH};
use super::{Result, TableStore};
use crate::config::Strategy;
use crate::merge::Spec;

/// Snapshot bytes handed to storage at a time (the multipart part size: S3
/// wants at least 5 MiB).
const CHUNK: usize = 8 << 20;
/// Snapshot bytes read at a time (two are in memory: one decoded, one arriving).
const READ_CHUNK: u64 = 4 << 20;

/// What loading a saved index did.
pub(super) struct Loaded {
    pub(super) saved_version: i64,
    /// Live files the snapshot did not know, read to replay later commits.
    pub(super) files_replayed: usize,
}

impl TableStore {
    /// Saves the key index as a snapshot of the table's current version.
    /// `Ok(None)`: nothing to save (no table yet, already saved at this
    /// version, or a sequence this format cannot store); `Ok(Some(keys))`: saved.
    pub async fn save_index(&mut self, spec: &Spec) -> Result<Option<usize>> {
        let Some(version) = self.version() else { return Ok(None) };
        if self.saved_index == Some(version) {
            return Ok(None);
        }
        let mut position = vec![NO_FILE; self.files.len()];
        let mut files = vec![];
        for (id, f) in self.files.iter().enumerate() {
            if let Some(f) = f {
                position[id] = files.len() as u32;
                files.push(f.path.clone());
            }
        }
        let keys = self.index.len();
        let header =
            Header { version, fingerprint: spec_fingerprint(spec), files, entries: keys as u64 };
        let snapshot = SnapshotId::of(&header);
        let store = self.store()?;
        let path = deltalake::Path::from(PATH);
        let fail = |e| self.io_err(format!("writing {PATH}"), e);
        let mut enc = Encoder::new(&header);
        // One PUT when the snapshot fits in a chunk; otherwise a multipart
        // upload, which becomes visible only when completed.
        let mut parts: Option<object_store::WriteMultipart> = None;
        // Ok(false): an entry this format cannot store.
        let written: std::result::Result<bool, object_store::Error> = async {
            for (key, entry) in self.index.iter() {
                // An entry naming a file that is not live is never saved (the
                // next open rebuilds instead).
                let file = match entry.file {
                    NO_FILE => NO_FILE,
                    f => position.get(f as usize).copied().unwrap_or(NO_FILE),
                };
                if (entry.file != NO_FILE && file == NO_FILE) || !enc.entry(key, entry, file) {
                    return Ok(false);
                }
                if enc.pending() >= CHUNK {
                    if parts.is_none() {
                        let upload = store.put_multipart(&path).await?;
                        parts =
                            Some(object_store::WriteMultipart::new_with_chunk_size(upload, CHUNK));
                    }
                    let w = parts.as_mut().expect("started above");
                    w.wait_for_capacity(2).await?;
                    w.write(&enc.take());
                }
            }
            Ok(true)
        }
        .await;
        match (written, parts) {
            (Ok(true), None) => {
                store.put(&path, enc.finish().into()).await.map(drop).map_err(fail)?
            }
            (Ok(true), Some(mut w)) => {
                w.write(&enc.finish());
                w.finish().await.map_err(fail)?;
            }
            // An upload that will not complete is aborted: nothing half-written stays.
            (outcome, w) => {
                if let Some(w) = w {
                    let _ = w.abort().await;
                }
                return outcome.map(|_| None).map_err(fail);
            }
        }
        self.saved_index = Some(version);
        self.save_deleted_briefs(spec, snapshot).await;
        Ok(Some(keys))
    }

    /// Replaces the key index with the saved snapshot, brought up to the
    /// table's version (see the module comment); `Err(reason)` when there is
    /// none or it cannot be used (the caller rebuilds).
    pub(super) async fn load_saved_index(
        &mut self,
        spec: &Spec,
    ) -> std::result::Result<Loaded, String> {
        let started = std::time::Instant::now();
        let version = self.version().ok_or("no table yet")?;
        let store = self.store().map_err(|e| e.to_string())?;
        let mut ranges = match Ranges::open(store, deltalake::Path::from(PATH)).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Err("none saved".into()),
            Err(e) => return Err(e.to_string()),
        };
        let size = ranges.size;
        let damaged = || Rejected::Damaged.to_string();
        let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK as usize);
        let mut read_bytes = 0usize;
        let mut more = async |buf: &mut Vec<u8>| -> std::result::Result<bool, String> {
            match ranges.next().await {
                Some(chunk) => {
                    let chunk = chunk.map_err(|e| e.to_string())?;
                    read_bytes += chunk.len();
                    buf.reserve_exact(chunk.len());
                    buf.extend_from_slice(&chunk);
                    Ok(true)
                }
                None => Ok(false),
            }
        };
        let fingerprint = spec_fingerprint(spec);
        let (mut dec, header) = loop {
            if let Some((d, h, used)) =
                Decoder::header(&buf, size, version, fingerprint).map_err(|e| e.to_string())?
            {
                buf.drain(..used);
                break (d, h);
            }
            if !more(&mut buf).await? {
                return Err(damaged());
            }
        };
        // Snapshot file positions -> our file ids (GONE: no longer live).
        let ids: HashMap<&str, u32> = self
            .files
            .iter()
            .enumerate()
            .filter_map(|(id, f)| f.as_ref().map(|f| (f.path.as_str(), id as u32)))
            .collect();
        let file_ids: Vec<u32> =
            header.files.iter().map(|p| ids.get(p.as_str()).copied().unwrap_or(GONE)).collect();
        let mut bulk = Bulk::with_capacity(header.entries as usize);
        let mut gone = 0usize;
        while dec.left() > 0 {
            let used = dec
                .entries(&buf, |key, mut e| {
                    if e.file != NO_FILE {
                        let id = file_ids[e.file as usize];
                        let live = id != GONE
                            && self.files[id as usize].as_ref().is_some_and(|f| !f.deleted(e.row));
                        e.file = if live { id } else { GONE };
                        gone += usize::from(!live);
                    }
                    bulk.push(key, e);
                })
                .map_err(|e| e.to_string())?;
            buf.drain(..used);
            if dec.left() > 0 && !more(&mut buf).await? {
                return Err(damaged());
            }
        }
        while more(&mut buf).await? {}
        dec.finish(&buf).map_err(|e| e.to_string())?;
        drop(buf);
        let loaded = started.elapsed();
        self.index = bulk.build().ok_or_else(damaged)?;
        // Replaying below drops the briefs of keys in new history files.
        self.deleted_briefs = self.load_deleted_briefs(spec, SnapshotId::of(&header)).await;
        let built = started.elapsed();

        let known: std::collections::HashSet<u32> =
            file_ids.iter().copied().filter(|&id| id != GONE).collect();
        let fresh = |id: &u32| !known.contains(id);
        let fresh_current: Vec<u32> =
            self.live_files(|f| f.current).into_iter().filter(fresh).collect();
        // History the snapshot knew was rewritten (compaction): the new
        // files hold old versions, which only the whole history puts in
        // order (two versions may share a sequence; the execution that wrote
        // them decides, and the index does not keep it). Then all of it is
        // scanned, as a rebuild does.
        let history_rewritten = self.meta.partition().is_some_and(|p| {
            let history = format!("{p}=false/");
            let gone = header.files.iter().zip(&file_ids).filter(|(_, &id)| id == GONE);
            gone.map(|(path, _)| path).any(|path| path.starts_with(&history))
        });
        let mut fresh_history = self.live_files(|f| !f.current);
        if !history_rewritten {
            fresh_history.retain(fresh);
        }
        let files_replayed = fresh_current.len() + fresh_history.len();
        let replay = async {
            self.index_current_rows(&fresh_current, spec).await?;
            if self.meta.strategy == Strategy::Scd2 && !fresh_history.is_empty() {
                self.index_deleted_keys(&fresh_history, spec).await?;
            }
            Ok::<_, super::TableError>(())
        };
        replay.await.map_err(|e| format!("replaying later commits: {e}"))?;
        if gone > 0 {
            self.index.retain(|e| e.file != GONE);
        }
        self.saved_index = (header.version == version).then_some(version);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        tracing::debug!(
            target: "changelake::table",
            bytes = read_bytes,
            read_ms = ms(loaded),
            build_ms = ms(built - loaded),
            replay_ms = ms(started.elapsed() - built),
            entries_gone = gone,
            files_replayed,
            "key index snapshot phases"
        );
        Ok(Loaded { saved_version: header.version, files_replayed })
    }
}

/// Deletes the saved key index of the table at `loc`, if any: the next open
/// rebuilds the index from the data files (the bench measures that).
pub async fn forget_saved_index(loc: &crate::storage::Location) -> Result<()> {
    let store = loc.object_store()?;
    match store.delete(&deltalake::Path::from(PATH)).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(super::TableError::Io {
            uri: crate::storage::redact_url(loc.uri()),
            what: format!("deleting {PATH}"),
            source: e,
        }),
    }
}

/// An object read in [`READ_CHUNK`]-sized ranges, the next range fetched while
/// the current one is decoded. (The local store's own stream hands out 8 KiB
/// pieces, each read on a blocking task: 6,000 of them for a 50 MB
/// snapshot, which made reading it take ten times as long as decoding.)
struct Ranges {
    store: Arc<dyn ObjectStore>,
    path: deltalake::Path,
    size: u64,
    at: u64,
    next: Option<tokio::task::JoinHandle<object_store::Result<Bytes>>>,
}

impl Ranges {
    async fn open(
        store: Arc<dyn ObjectStore>,
        path: deltalake::Path,
    ) -> object_store::Result<Ranges> {
        let size = store.head(&path).await?.size;
        let mut r = Ranges { store, path, size, at: 0, next: None };
        r.fetch_next();
        Ok(r)
    }

    fn fetch_next(&mut self) {
        if self.at >= self.size {
            return;
        }
        let range = self.at..self.size.min(self.at + READ_CHUNK);
        self.at = range.end;
        let (store, path) = (self.store.clone(), self.path.clone());
        self.next = Some(tokio::spawn(async move { store.get_range(&path, range).await }));
    }

    async fn next(&mut self) -> Option<object_store::Result<Bytes>> {
        let fetching = self.next.take()?;
        self.fetch_next();
        Some(fetching.await.unwrap_or_else(|e| {
            Err(object_store::Error::Generic { store: "snapshot read", source: Box::new(e) })
        }))
    }
}
