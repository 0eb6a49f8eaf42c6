//! Upkeep of a long-running table: checkpoints, log cleanup, vacuum and the
//! orphan sweep.
//!
//! A checkpoint is written every `checkpoint_interval` commits, so readers
//! and restarts replay at most that many JSON commits. Commit files older
//! than `log_retention` that a checkpoint covers are then deleted, as
//! Delta's `delta.logRetentionDuration` cleanup does: the log stops growing,
//! and progress survives because every checkpoint holds every `txn`
//! (docs/operations.md, table upkeep). Data files removed
//! and deletion vectors replaced longer ago than `vacuum_retention` are then
//! deleted (counted from the removing commit), as are files a crashed writer
//! wrote but never committed. None of it changes what a reader of the
//! current version sees (docs/operations.md, table upkeep).

use super::dv::dv_file;
use super::Result;
use super::TableStore;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use deltalake::{DeltaTable, ObjectStore, Path};
use futures::StreamExt;
use object_store::ObjectStoreExt;
use std::collections::HashSet;
use std::time::Duration;

/// Files no commit references are vacuumed only once at least this old, even
/// with a shorter retention (another writer's file may await its commit).
pub(super) const ORPHAN_MIN_AGE_MS: i64 = 3_600_000;

/// How long checkpoints keep the tombstone of a removed file, for a table
/// vacuumed after `vacuum_retention` (its `delta.deletedFileRetentionDuration`,
/// set when changelake creates the table). Delta's default keeps them a week
/// whatever the vacuum does: a merge-on-read table replacing tens of
/// deletion vectors per commit then carries hundreds of thousands of
/// tombstones per day into every checkpoint, and each upkeep round (which
/// reads and writes the checkpoint) grows slower until the daemon falls
/// behind (seen in the soak: 62,000 tombstones after 30 minutes).
///
/// Longer than the vacuum's retention, so every tombstone stays visible to
/// upkeep rounds for a while after it became old enough to vacuum (by
/// `vacuum_retention`, at most a day, at least 10 minutes in all): its file
/// is deleted by the vacuum, not left to the orphan sweep.
pub(crate) fn tombstone_retention(vacuum_retention: Duration) -> Duration {
    const DAY: Duration = Duration::from_secs(24 * 3600);
    const FLOOR: Duration = Duration::from_secs(600);
    (vacuum_retention + vacuum_retention.min(DAY)).max(FLOOR)
}

/// A duration as a Delta interval property value (`interval 600 seconds`).
pub(crate) fn interval(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("interval {} seconds", d.as_secs())
    } else {
        format!("interval {} milliseconds", d.as_millis())
    }
}

/// What one round of upkeep deleted.
#[derive(Debug, Default, Clone, Copy)]
pub struct Upkept {
    /// Data and deletion-vector files (vacuum and orphan sweep).
    pub files_vacuumed: usize,
    /// Commit and checkpoint files of the Delta log (log cleanup).
    pub log_files_removed: usize,
}

/// A file entry of a checkpoint: an `add` (live) or a `remove` (tombstone).
pub(super) struct CheckpointFile {
    pub(super) path: String,
    /// Removal time of a tombstone, ms since the epoch.
    pub(super) removed_at: i64,
    /// The deletion-vector file the entry carries, if any (a data file whose
    /// DV was replaced is removed with its old DV and added with the new one).
    pub(super) dv: Option<String>,
}

/// The live files and the tombstones of a checkpoint (it holds every
/// tombstone not yet expired). An error when the checkpoint is not laid out
/// as expected: the sweep must never run on a partial picture.
pub(super) fn checkpoint_files(
    checkpoint: bytes::Bytes,
) -> std::result::Result<(Vec<CheckpointFile>, Vec<CheckpointFile>), String> {
    use deltalake::arrow::array::{Array, AsArray};
    use deltalake::arrow::datatypes::Int64Type;
    use deltalake::parquet::arrow::ProjectionMask;
    let b = ParquetRecordBatchReaderBuilder::try_new(checkpoint).map_err(|e| e.to_string())?;
    let cols = [
        "add.path",
        "add.deletionVector",
        "remove.path",
        "remove.deletionTimestamp",
        "remove.deletionVector",
    ];
    let mask = ProjectionMask::columns(b.parquet_schema(), cols);
    let (mut adds, mut removes) = (vec![], vec![]);
    for batch in b.with_projection(mask).build().map_err(|e| e.to_string())? {
        let batch = batch.map_err(|e| e.to_string())?;
        for (action, out) in [("add", &mut adds), ("remove", &mut removes)] {
            let missing = || format!("no readable `{action}.path` column");
            let entry =
                batch.column_by_name(action).and_then(|c| c.as_struct_opt()).ok_or_else(missing)?;
            let path = entry
                .column_by_name("path")
                .and_then(|c| c.as_string_opt::<i32>())
                .ok_or_else(missing)?;
            let ts = entry
                .column_by_name("deletionTimestamp")
                .and_then(|c| c.as_primitive_opt::<Int64Type>());
            let dv = match entry.column_by_name("deletionVector") {
                None => None,
                Some(dv) => {
                    let bad = || {
                        format!(
                            "`{action}.deletionVector` is not laid out as the Delta protocol says"
                        )
                    };
                    let dv = dv.as_struct_opt().ok_or_else(bad)?;
                    let kind = dv
                        .column_by_name("storageType")
                        .and_then(|c| c.as_string_opt::<i32>())
                        .ok_or_else(bad)?;
                    let id = dv
                        .column_by_name("pathOrInlineDv")
                        .and_then(|c| c.as_string_opt::<i32>())
                        .ok_or_else(bad)?;
                    Some((dv, kind, id))
                }
            };
            for i in 0..batch.num_rows() {
                if !entry.is_valid(i) || !path.is_valid(i) {
                    continue;
                }
                let dv = match dv {
                    Some((dv, kind, id))
                        if dv.is_valid(i)
                            && kind.is_valid(i)
                            && kind.value(i) == "u"
                            && id.is_valid(i) =>
                    {
                        Some(dv_file(id.value(i))?)
                    }
                    _ => None,
                };
                // Compared with the paths this table writes (and lists), which need no escaping.
                out.push(CheckpointFile {
                    path: path.value(i).to_string(),
                    removed_at: ts.filter(|t| t.is_valid(i)).map_or(0, |t| t.value(i)),
                    dv,
                });
            }
        }
    }
    Ok((adds, removes))
}

impl TableStore {
    /// Writes a Delta checkpoint of the current version, then vacuums files
    /// removed longer ago than the retention. Neither changes what a reader
    /// of the current version sees.
    pub async fn checkpoint_and_vacuum(&mut self) -> Result<Upkept> {
        let mut done = Upkept::default();
        let Some(mut t) = self.table.clone() else { return Ok(done) };
        deltalake::checkpoints::create_checkpoint(&t, None).await.map_err(|e| self.delta(e))?;
        crate::faults::hit("after_checkpoint");
        if let Some(version) = t.version() {
            // Our snapshot was built from commit files the cleanup may
            // delete; the same version read from the checkpoint just written
            // needs none of them (and stays at our own last commit).
            t.load_version(version).await.map_err(|e| self.delta(e))?;
            self.table = Some(t.clone());
            // Only what the checkpoint just written (or an older one) covers
            // and what is older than the retention; `_last_checkpoint` and
            // the checkpoint itself stay.
            let retention = chrono::Duration::from_std(self.meta.layout.log_retention)
                .unwrap_or(chrono::Duration::days(30));
            let cutoff = (chrono::Utc::now() - retention).timestamp_millis();
            done.log_files_removed = deltalake::checkpoints::cleanup_expired_logs_for(
                version,
                t.log_store().as_ref(),
                cutoff,
                None,
            )
            .await
            .map_err(|e| self.delta(e))?;
            crate::faults::hit("after_log_cleanup");
        }
        let Some(retention) = self.meta.layout.vacuum_retention else { return Ok(done) };
        let retention = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::days(7));
        // delta-rs plans the vacuum (expired tombstones of data files) and
        // we delete the files: its own execution would add VACUUM START/END
        // commits, and a table changing under our last commit makes the
        // next data commit lose its race and re-read the whole table (seen
        // in the soak as a retry and a latency spike at every checkpoint).
        // The protocol asks for no log entry; a reader sees nothing either way.
        let (_, plan) = t
            .clone()
            .vacuum()
            .with_retention_period(retention)
            .with_enforce_retention_duration(false)
            .with_dry_run(true)
            .await
            .map_err(|e| self.delta(e))?;
        // In bulk where the store has it (S3 DeleteObjects: 1,000 per request).
        let doomed = plan.files_deleted.into_iter().map(|f| Ok(Path::from(f)));
        let mut deleted = self.store()?.delete_stream(futures::stream::iter(doomed).boxed());
        let mut vacuumed = 0;
        while let Some(r) = deleted.next().await {
            match r {
                Ok(_) => vacuumed += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.data_err(format!("vacuum: deleting a file: {e}"))),
            }
        }
        crate::faults::hit("after_vacuum");
        let swept = self.sweep(&t, retention).await?;
        done.files_vacuumed = vacuumed + swept;
        Ok(done)
    }

    /// Deletes what delta-rs' vacuum leaves behind, each file judged by when
    /// the table stopped needing it:
    /// - deletion vectors replaced longer ago than the retention. delta-rs
    ///   deletes the data files of expired `remove` actions but never the DV
    ///   a remove names (the data file usually stays live with a newer DV);
    ///   its "full" mode judges a DV by when it was written, not by when it
    ///   was replaced, and would delete one a reader of the previous version
    ///   still needs. A DV file goes when every tombstone naming it expired
    ///   and no live file uses it.
    /// - files no commit ever referenced (a writer that died between writing
    ///   a file and committing it), once older than the retention: our own
    ///   `part-*.parquet` / `deletion_vector_*.bin` names only, in the table
    ///   directory and its `_is_current=` partitions, never a nested table.
    ///   Only when the retention is within the table's tombstone retention
    ///   (`delta.deletedFileRetentionDuration`), so a file removed inside the
    ///   retention always still has its tombstone and is never taken for one.
    ///
    /// The tombstones come from the checkpoint just written (it holds every
    /// unexpired one).
    pub(super) async fn sweep(&self, t: &DeltaTable, retention: chrono::Duration) -> Result<usize> {
        use deltalake::table::config::TablePropertiesExt;
        let Some(version) = t.version() else { return Ok(0) };
        let store = self.store()?;
        let checkpoint = Path::from(format!("_delta_log/{version:020}.checkpoint.parquet"));
        let bytes = match store.get(&checkpoint).await {
            Ok(r) => {
                r.bytes().await.map_err(|e| self.data_err(format!("reading {checkpoint}: {e}")))?
            }
            Err(e) => {
                tracing::debug!(target: "changelake::table", %checkpoint, error = %e, "no single-file checkpoint; deletion vectors and orphans not swept this time");
                return Ok(0);
            }
        };
        let now = chrono::Utc::now().timestamp_millis();
        let cutoff = now - retention.num_milliseconds();
        // What is live comes from the checkpoint (the snapshot at this
        // version, other writers' commits included), not from our own view.
        let (adds, tombs) =
            checkpoint_files(bytes).map_err(|e| self.data_err(format!("{checkpoint}: {e}")))?;
        let needed = Needed::from_checkpoint(adds, &tombs, cutoff);
        let mut doomed: Vec<String> = needed.expired.difference(&needed.keep).cloned().collect();
        let tombstone_retention = t
            .snapshot()
            .map_err(|e| self.delta(e))?
            .table_config()
            .deleted_file_retention_duration();
        if retention.to_std().is_ok_and(|r| r <= tombstone_retention) {
            // Another writer's file may wait a while for its commit: never
            // take one younger than an hour for an orphan, whatever the retention.
            let orphan_cutoff = cutoff.min(now - ORPHAN_MIN_AGE_MS);
            for o in self.list_own_files(store.as_ref()).await? {
                let path = o.location.to_string();
                let old = o.last_modified.timestamp_millis() < orphan_cutoff;
                if old && !needed.keep.contains(&path) && !needed.expired.contains(&path) {
                    doomed.push(path);
                }
            }
        }
        let mut deleted = 0;
        for file in doomed {
            match store.delete(&Path::from(file.as_str())).await {
                Ok(()) => deleted += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.data_err(format!("deleting {file}: {e}"))),
            }
        }
        Ok(deleted)
    }

    /// Files under this crate's own names (`part-*.parquet`,
    /// `deletion_vector_*.bin`) in the table directory and its
    /// `_is_current=` partitions; never a nested table or a foreign file.
    async fn list_own_files(
        &self,
        store: &dyn ObjectStore,
    ) -> Result<Vec<object_store::ObjectMeta>> {
        let ours = |name: &str| {
            (name.starts_with("part-") && name.ends_with(".parquet"))
                || (name.starts_with("deletion_vector_") && name.ends_with(".bin"))
        };
        let top = store
            .list_with_delimiter(None)
            .await
            .map_err(|e| self.data_err(format!("listing the table: {e}")))?;
        let mut objects = top.objects;
        for dir in top.common_prefixes {
            let partition =
                |d: &str| self.meta.partition().is_some_and(|p| d.starts_with(&format!("{p}=")));
            if dir.filename().is_some_and(partition) {
                let listed = store
                    .list_with_delimiter(Some(&dir))
                    .await
                    .map_err(|e| self.data_err(format!("listing {dir}: {e}")))?;
                objects.extend(listed.objects);
            }
        }
        objects.retain(|o| o.location.filename().is_some_and(ours));
        Ok(objects)
    }
}

/// What a checkpoint says is still needed: live files and their deletion
/// vectors, tombstoned files (vacuum's business) and deletion vectors
/// replaced within the retention (`keep`); and deletion vectors whose
/// replacement is older than the retention (`expired`, deleted unless also
/// in `keep`).
struct Needed {
    keep: HashSet<String>,
    expired: HashSet<String>,
}

impl Needed {
    fn from_checkpoint(adds: Vec<CheckpointFile>, tombs: &[CheckpointFile], cutoff: i64) -> Needed {
        let mut keep: HashSet<String> = HashSet::new();
        for f in adds {
            keep.extend(f.dv);
            keep.insert(f.path);
        }
        let mut expired: HashSet<String> = HashSet::new();
        for t in tombs {
            keep.insert(t.path.clone());
            if let Some(dv) = &t.dv {
                if t.removed_at < cutoff {
                    expired.insert(dv.clone());
                } else {
                    keep.insert(dv.clone());
                }
            }
        }
        Needed { keep, expired }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tombstones_outlive_the_vacuum_retention_by_as_much_again_within_bounds() {
        let min = |m: u64| Duration::from_secs(60 * m);
        // The soak's 5 minutes: 10 (also the floor, which covers 0s in tests).
        assert_eq!(tombstone_retention(min(5)), min(10));
        assert_eq!(tombstone_retention(Duration::ZERO), min(10));
        assert_eq!(tombstone_retention(min(60)), min(120));
        // The default week: one more day, not another week.
        assert_eq!(tombstone_retention(min(7 * 24 * 60)), min(8 * 24 * 60));
        assert_eq!(interval(min(10)), "interval 600 seconds");
        assert_eq!(interval(Duration::from_millis(1500)), "interval 1500 milliseconds");
    }

    fn file(path: &str, removed_at: i64, dv: Option<&str>) -> CheckpointFile {
        CheckpointFile { path: path.into(), removed_at, dv: dv.map(str::to_string) }
    }

    #[test]
    fn vacuum_deletes_a_replaced_deletion_vector_only_once_no_reader_can_need_it() {
        let adds =
            vec![file("a.parquet", 0, Some("dv2.bin")), file("b.parquet", 0, Some("dv1.bin"))];
        let tombs = vec![
            // a's first DV, replaced long ago: expired.
            file("a.parquet", 100, Some("dv0.bin")),
            // b's old DV dv1 expired, but b still uses it: kept.
            file("b.parquet", 100, Some("dv1.bin")),
            // c's DV replaced within the retention: kept.
            file("c.parquet", 900, Some("dv3.bin")),
        ];
        let n = Needed::from_checkpoint(adds, &tombs, 500);
        let mut doomed: Vec<&String> = n.expired.difference(&n.keep).collect();
        doomed.sort();
        assert_eq!(doomed, vec!["dv0.bin"]);
        for live in ["a.parquet", "b.parquet", "c.parquet", "dv1.bin", "dv2.bin", "dv3.bin"] {
            assert!(n.keep.contains(live), "{live}");
        }
    }
}
