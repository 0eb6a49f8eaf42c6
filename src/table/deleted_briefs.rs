//! The closed versions in brief (`briefs.rs`, `merge::brief`) of scd2 keys
//! without a current row: deleted keys.
//!
//! A key's brief lives in its current row's companion record. A deleted key
//! has no current row, so a late row for it searched the history files
//! through their bloom filters, a cost that grew with the table's age (the
//! more keys deleted, the more late rows miss their brief; the more history
//! files, the more filters each such row probes). The merge hands back the
//! brief of every key it leaves without an open version
//! (`merge::Output::deleted_briefs`), and the table keeps them here, in
//! memory, bounded by the key index's size.
//!
//! They are saved next to the key index snapshot (`_changelake/deleted-briefs`,
//! naming the same snapshot: its Delta version and live files, whose paths
//! carry UUIDs, so a table recreated at the same path never matches) and
//! loaded with it. Replaying later
//! commits onto a snapshot drops the brief of every key those commits' new
//! history files hold (`state.rs`, `index_deleted_keys`): such a key may
//! have closed versions the saved brief lacks (a key with a current row
//! after the replay is skipped there). A brief is only ever used for a key
//! the index holds as deleted; one left behind by a key that came back is
//! replaced when the key is deleted again. That rests on every scd2 path
//! that leaves a key without an open version handing back its brief or
//! `None` (`merge/scd2.rs`: the close of a stored version, `finish`,
//! `snapshot_delete`): a new such path must too.

use std::sync::Arc;

use object_store::ObjectStoreExt;
use xxhash_rust::xxh3::xxh3_64;

use super::index_snapshot::Header;
use super::TableStore;
use crate::merge::{brief, Key, KeyMap, KeyState, Need, Spec};

/// Bytes one held brief is counted for besides its key and brief: the map
/// slot, the two allocations' headers and the brief's reference counts.
const HELD_OVERHEAD: usize = 64;

/// Where the saved briefs live, relative to the table root (beside the key
/// index snapshot, `index_snapshot::PATH`).
const PATH: &str = "_changelake/deleted-briefs";
const MAGIC: &[u8; 8] = b"CLDBRF01";

/// The key index snapshot saved briefs go with: its Delta version and a
/// hash of its live files' paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SnapshotId {
    version: i64,
    files: u64,
}

impl SnapshotId {
    pub(super) fn of(h: &Header) -> SnapshotId {
        let mut files = xxhash_rust::xxh3::Xxh3::new();
        for f in &h.files {
            files.update(f.as_bytes());
            files.update(&[0]);
        }
        SnapshotId { version: h.version, files: files.digest() }
    }
}

/// The briefs of deleted scd2 keys, as the commits so far left them.
#[derive(Default)]
pub(super) struct DeletedBriefs {
    held: KeyMap<Arc<[u8]>>,
    /// What `held` takes, counted as [`DeletedBriefs::cost`] says.
    bytes: usize,
}

impl DeletedBriefs {
    fn cost(key: &[u8], brief: &[u8]) -> usize {
        key.len() + brief.len() + HELD_OVERHEAD
    }

    /// A committed run's changes: a known brief is held while the total
    /// stays within `limit` bytes; an unknown one, or a key that has an
    /// open version again, drops what was held.
    pub(super) fn apply(&mut self, changes: Vec<(Key, Option<Arc<[u8]>>)>, limit: usize) {
        for (key, brief) in changes {
            self.remove(&key);
            let Some(brief) = brief else { continue };
            let cost = Self::cost(&key, &brief);
            if self.bytes + cost <= limit {
                self.bytes += cost;
                self.held.insert(key, brief);
            }
        }
    }

    /// Drops `key`'s brief, if held.
    pub(super) fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.held.remove(key) {
            self.bytes -= Self::cost(key, &old);
        }
    }

    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.held.get(key).map(|b| &b[..])
    }

    pub(super) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The saved form: magic, the snapshot it goes with (version, files'
    /// hash), the count, then per key its length (2 bytes) and bytes and its
    /// brief's length (4) and bytes, little-endian; last, the xxh3 of
    /// everything before.
    fn encode(&self, snapshot: SnapshotId) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.bytes);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&snapshot.version.to_le_bytes());
        out.extend_from_slice(&snapshot.files.to_le_bytes());
        let held: Vec<(&Key, &Arc<[u8]>)> = self
            .held
            .iter()
            .filter(|(k, b)| k.len() <= u16::MAX as usize && b.len() <= u32::MAX as usize)
            .collect();
        out.extend_from_slice(&(held.len() as u64).to_le_bytes());
        for (k, b) in held {
            out.extend_from_slice(&(k.len() as u16).to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        let sum = xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// The briefs saved with `snapshot`, within `limit` bytes; None when
    /// the bytes go with another snapshot, are of another format or damaged.
    fn decode(bytes: &[u8], snapshot: SnapshotId, limit: usize) -> Option<DeletedBriefs> {
        let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
        if xxh3_64(body).to_le_bytes() != *sum {
            return None;
        }
        let mut b = body.strip_prefix(MAGIC)?;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, rest) = b.split_at_checked(n)?;
            b = rest;
            Some(head)
        };
        if i64::from_le_bytes(take(8)?.try_into().ok()?) != snapshot.version
            || u64::from_le_bytes(take(8)?.try_into().ok()?) != snapshot.files
        {
            return None;
        }
        let n = u64::from_le_bytes(take(8)?.try_into().ok()?);
        let mut changes = Vec::with_capacity((n as usize).min(body.len() / 7));
        for _ in 0..n {
            let key_len = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
            let key: Key = take(key_len)?.into();
            let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
            changes.push((key, Some(Arc::from(take(len)?))));
        }
        if !b.is_empty() {
            return None;
        }
        let mut out = DeletedBriefs::default();
        out.apply(changes, limit);
        Some(out)
    }
}

impl TableStore {
    /// The bytes [`DeletedBriefs`] may hold: an eighth of what the key
    /// index's keys take at 64 bytes each, and at least 16 MiB.
    pub(super) fn deleted_briefs_limit(&self) -> usize {
        (self.index.len() * 8).max(16 << 20)
    }

    /// Deleted keys whose brief is kept (`needs`: late rows and rows that
    /// reopen them): their closed versions in brief, so neither a late row
    /// reads history nor a reopened key's new version lacks its brief.
    pub(super) fn take_deleted_briefs(
        &self,
        spec: &Spec,
        needs: &KeyMap<Need>,
        states: &mut KeyMap<KeyState>,
    ) {
        if self.deleted_briefs.is_empty() {
            return;
        }
        let Some((fingerprint, types)) = self.brief_decoding(spec) else { return };
        for (k, need) in needs {
            if !(need.history() || *need == Need::Reopen)
                || !self.index.get(k).is_some_and(|e| !e.has_row() && e.summary.deleted())
            {
                continue;
            }
            let Some(b) = self.deleted_briefs.get(k) else { continue };
            if let Some(list) = brief::decode(b, fingerprint, &types) {
                states.entry(k.clone()).or_default().brief = Some(list);
            }
        }
    }

    /// Saves the kept briefs with the key index `snapshot` just saved, for
    /// a table that keeps briefs. A failure is logged, not returned: the
    /// briefs saved earlier name another snapshot and are not used.
    pub(super) async fn save_deleted_briefs(&self, spec: &Spec, snapshot: SnapshotId) {
        if self.briefs(spec).is_none() {
            return;
        }
        let bytes = self.deleted_briefs.encode(snapshot);
        let put = async {
            self.store()?
                .put(&PATH.into(), bytes.into())
                .await
                .map_err(|e| self.io_err(format!("writing {PATH}"), e))
        };
        if let Err(e) = put.await {
            tracing::warn!(target: "changelake::table", table = %self.meta.name, error = %e, "deleted keys' briefs not saved; after a restart their late rows read history");
        }
    }

    /// The briefs saved with the key index `snapshot`; none when there are
    /// none for it or they cannot be read.
    pub(super) async fn load_deleted_briefs(
        &self,
        spec: &Spec,
        snapshot: SnapshotId,
    ) -> DeletedBriefs {
        if self.briefs(spec).is_none() {
            return DeletedBriefs::default();
        }
        let got = async { self.store().ok()?.get(&PATH.into()).await.ok()?.bytes().await.ok() };
        let limit = self.deleted_briefs_limit();
        let loaded = got.await.and_then(|b| DeletedBriefs::decode(&b, snapshot, limit));
        if loaded.is_none() {
            tracing::debug!(target: "changelake::table", table = %self.meta.name, version = snapshot.version, "no deleted keys' briefs saved for this key index snapshot");
        }
        loaded.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(key: u8, brief: Option<&[u8]>) -> (Key, Option<Arc<[u8]>>) {
        (vec![key].into(), brief.map(Into::into))
    }

    #[test]
    fn deleted_keys_briefs_are_held_within_the_bound_and_dropped_when_unknown() {
        let mut held = DeletedBriefs::default();
        let one = DeletedBriefs::cost(&[1], &[9; 10]);
        held.apply(vec![change(1, Some(&[9; 10])), change(2, Some(&[8; 10]))], 2 * one);
        assert_eq!((held.get(&[1]), held.get(&[2])), (Some(&[9u8; 10][..]), Some(&[8u8; 10][..])));
        // Past the bound a brief is not held, and the key's old one goes.
        held.apply(vec![change(3, Some(&[7; 10])), change(1, Some(&[6; 40]))], 2 * one);
        assert_eq!((held.get(&[1]), held.get(&[3])), (None, None));
        assert_eq!(held.bytes, one, "key 2 alone");
        // An unknown brief (or a key back with an open version) drops it.
        held.apply(vec![change(2, None)], 2 * one);
        assert!(held.is_empty());
        assert_eq!(held.bytes, 0);
    }

    #[test]
    fn saved_briefs_read_back_only_with_their_snapshot_and_undamaged() {
        let mut held = DeletedBriefs::default();
        held.apply(
            vec![change(1, Some(&[9; 10])), change(2, Some(&[])), change(3, Some(&[7; 3]))],
            1 << 20,
        );
        let snapshot = |version: i64, files: &[&str]| {
            let files = files.iter().map(|f| f.to_string()).collect();
            SnapshotId::of(&Header { version, fingerprint: 1, files, entries: 3 })
        };
        let at = snapshot(42, &["a-1.parquet", "b-2.parquet"]);
        let bytes = held.encode(at);
        let back = DeletedBriefs::decode(&bytes, at, 1 << 20).unwrap();
        assert_eq!(back.held, held.held);
        assert_eq!(back.bytes, held.bytes);
        let other = snapshot(43, &["a-1.parquet", "b-2.parquet"]);
        assert!(DeletedBriefs::decode(&bytes, other, 1 << 20).is_none(), "another version");
        let recreated = snapshot(42, &["a-9.parquet", "b-2.parquet"]);
        assert!(DeletedBriefs::decode(&bytes, recreated, 1 << 20).is_none(), "other files");
        for cut in [0, 8, bytes.len() - 9, bytes.len() - 1] {
            assert!(DeletedBriefs::decode(&bytes[..cut], at, 1 << 20).is_none(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[30] ^= 1;
        assert!(DeletedBriefs::decode(&flipped, at, 1 << 20).is_none(), "checksum");
        // Loaded within a smaller bound: some are left out, never more.
        let one = DeletedBriefs::cost(&[1], &[9; 10]);
        let some = DeletedBriefs::decode(&bytes, at, one).unwrap();
        assert!(some.bytes <= one && some.held.len() <= 1);
        let empty = DeletedBriefs::default().encode(at);
        assert!(DeletedBriefs::decode(&empty, at, 0).unwrap().is_empty());
    }
}
