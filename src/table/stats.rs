//! A table's health in numbers, for `changelake tables`: files, rows,
//! small files and masked rows as compaction counts them, the log's size
//! and checkpoint, and the progress stored with the table.
//!
//! Everything comes from the Delta log and a listing of `_delta_log`; no
//! data file is read, so the numbers are cheap enough to look at often.

use std::collections::BTreeMap;

use deltalake::{DeltaTable, Path};
use futures::TryStreamExt;

use super::plan::is_small_for_compaction;
use super::{open_existing, Result, TableError};
use crate::config::Layout;
use crate::storage::Location;

/// What `tables` reports for one table.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TableStats {
    pub version: i64,
    /// Rows readers see (physical rows less those deletion vectors mask).
    pub live_rows: u64,
    pub files: usize,
    pub bytes: u64,
    /// Files compaction counts as small (docs/operations.md, table upkeep).
    pub small_files: usize,
    /// Rows masked by deletion vectors, still stored until their file is rewritten.
    pub masked_rows: u64,
    /// When the current version was committed (RFC 3339).
    pub last_commit: Option<String>,
    /// The newest checkpoint's version.
    pub last_checkpoint: Option<i64>,
    /// Commit, checkpoint and other files under `_delta_log`.
    pub log_files: usize,
    pub log_bytes: u64,
    /// Progress markers stored with the table: `txn` app id -> version.
    pub markers: BTreeMap<String, i64>,
}

/// The numbers of the Delta table at `uri`; `None` when there is none yet.
pub async fn table_stats(loc: &Location, layout: &Layout) -> Result<Option<TableStats>> {
    let Some(table) = open_existing(loc).await? else { return Ok(None) };
    stats_of(&table, layout).await.map(Some)
}

async fn stats_of(table: &DeltaTable, layout: &Layout) -> Result<TableStats> {
    let uri = crate::storage::redact_url(table.table_url().as_str());
    let data_err = |msg: String| TableError::Data { uri: uri.clone(), msg };
    let snap = table.snapshot().map_err(|e| TableError::Delta { uri: uri.clone(), source: e })?;
    let mut s = TableStats { version: snap.version() as i64, ..Default::default() };
    for f in snap.log_data() {
        let rows = f.num_records().unwrap_or(0) as u64;
        let masked = f.deletion_vector_descriptor().map_or(0, |d| d.cardinality.max(0) as u64);
        let live = rows.saturating_sub(masked);
        s.files += 1;
        s.bytes += f.size().max(0) as u64;
        s.live_rows += live;
        s.masked_rows += masked;
        s.small_files += usize::from(is_small_for_compaction(live as usize, layout));
    }
    let store = table.object_store();
    let log: Vec<object_store::ObjectMeta> = store
        .list(Some(&Path::from("_delta_log")))
        .try_collect()
        .await
        .map_err(|e| data_err(format!("listing _delta_log: {e}")))?;
    s.log_files = log.len();
    s.log_bytes = log.iter().map(|o| o.size).sum();
    let head = format!("{:020}.json", s.version);
    s.last_commit = log
        .iter()
        .find(|o| o.location.filename() == Some(head.as_str()))
        .map(|o| o.last_modified.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    s.last_checkpoint = log
        .iter()
        .filter_map(|o| checkpoint_version(o.location.filename()?))
        .filter(|&v| v <= s.version)
        .max();
    s.markers = crate::progress::read_markers(store.as_ref(), &log, s.last_checkpoint, s.version)
        .await
        .map_err(data_err)?;
    Ok(s)
}

/// The version of a checkpoint file name (single-file or multi-part).
fn checkpoint_version(name: &str) -> Option<i64> {
    let (v, rest) = name.split_once('.')?;
    (v.len() == 20 && rest.starts_with("checkpoint.") && rest.ends_with(".parquet"))
        .then(|| v.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_files_are_told_apart_from_commits_by_name() {
        assert_eq!(checkpoint_version("00000000000000000010.checkpoint.parquet"), Some(10));
        assert_eq!(
            checkpoint_version("00000000000000000020.checkpoint.0000000001.0000000002.parquet"),
            Some(20)
        );
        assert_eq!(checkpoint_version("00000000000000000010.json"), None);
        assert_eq!(checkpoint_version("_last_checkpoint"), None);
    }
}
