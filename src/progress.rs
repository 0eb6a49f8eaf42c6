//! Progress markers: the only record of how far a table has read.
//!
//! Every run commits its data together with one Delta `txn` action per source
//! position it consumed, so a crash before the commit loses nothing and a
//! crash after it repeats nothing (docs/commit-protocol.md, progress
//! markers). This module is the one place that names those markers (their
//! `txn` app ids), builds them and reads them back:
//!
//! | marker | app id | version |
//! | --- | --- | --- |
//! | Kafka partition | `changelake/<table>/<topic>/<partition>` | next offset to read |
//! | file | `changelake/<table>/file/<path>` | hash of the file's content |
//! | part of a file (a chunk of a large one) | `changelake/<table>/file-part/<hash>/<path>` | byte offset after the chunk |
//! | execution | `changelake/<table>/_execution` | last `_execution_id` |
//! | dead letters of a position (in `_dead_letters`) | `<marker's app id>/dead_letters` | the marker's version |
//!
//! Table names are identifiers (no `/`) and Kafka topic names cannot contain
//! `/`, so a partition marker has exactly one segment after the table for
//! the topic and one for the partition. A table reads one kind of source, so
//! its markers are read back knowing which kind to expect ([`parse`]): a
//! topic named `file` is never taken for a file marker.

use std::collections::BTreeMap;

use deltalake::arrow::array::Array;
use deltalake::kernel::Transaction;
use deltalake::{DeltaTable, DeltaTableError, ObjectStore, Path};
use object_store::{ObjectMeta, ObjectStoreExt};

const PREFIX: &str = "changelake";
const EXECUTION: &str = "_execution";
const FILE: &str = "file";
const FILE_PART: &str = "file-part";
const DEAD_LETTERS: &str = "dead_letters";

/// A progress marker committed with a run: `txn` app id and version.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub app: String,
    /// Next offset to read (Kafka) or the file's content version.
    pub version: i64,
    /// Kafka partition the marker belongs to; `None` for files.
    pub partition: Option<i32>,
}

impl Mark {
    /// A Kafka partition read up to `next_offset` (exclusive).
    pub fn partition(table: &str, topic: &str, partition: i32, next_offset: i64) -> Mark {
        Mark {
            app: partition_app_id(table, topic, partition),
            version: next_offset,
            partition: Some(partition),
        }
    }

    /// A file run whose content hashes to `content_version`.
    pub fn file(table: &str, path: &str, content_version: i64) -> Mark {
        Mark { app: file_app_id(table, path), version: content_version, partition: None }
    }

    /// The chunk of a large file (content version `content_version`) that
    /// ends at byte `end`: its run records how far into the file the table
    /// has read, so a crash resumes after the last committed chunk. The
    /// last chunk commits [`Mark::file`] instead.
    pub fn file_part(table: &str, path: &str, content_version: i64, end: u64) -> Mark {
        Mark {
            app: file_part_app_id(table, path, content_version),
            version: end as i64,
            partition: None,
        }
    }

    /// The app id recording, in the dead-letter table, that this position's
    /// dead letters were written (so a replay never writes them twice).
    pub fn dead_letter_app_id(&self) -> String {
        format!("{}/{DEAD_LETTERS}", self.app)
    }

    /// The `txn` action that records this marker in a commit.
    pub fn txn(&self) -> Transaction {
        Transaction::new(&self.app, self.version)
    }
}

/// The app id recording a table's next offset in one Kafka partition.
pub fn partition_app_id(table: &str, topic: &str, partition: i32) -> String {
    format!("{PREFIX}/{table}/{topic}/{partition}")
}

/// The app id recording the content version of one source file (`path`
/// relative to the source's directory).
pub fn file_app_id(table: &str, path: &str) -> String {
    format!("{PREFIX}/{table}/{FILE}/{path}")
}

/// The app id recording how far a table has read into one content version
/// of a large file, chunk by chunk ([`Mark::file_part`]). Not a
/// [`Marker::File`]: a file is done only when its [`file_app_id`] holds
/// its content version.
pub fn file_part_app_id(table: &str, path: &str, content_version: i64) -> String {
    format!("{PREFIX}/{table}/{FILE_PART}/{content_version:016x}/{path}")
}

/// The app id recording a table's last `_execution_id`.
pub fn execution_app_id(table: &str) -> String {
    format!("{PREFIX}/{table}/{EXECUTION}")
}

/// The `txn` action recording the run's `_execution_id`.
pub fn execution_txn(table: &str, exec: i64) -> Transaction {
    Transaction::new(execution_app_id(table), exec)
}

/// What a `txn` app id of a table names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker<'a> {
    Partition { topic: &'a str, partition: i32 },
    File { path: &'a str },
    Execution,
}

/// Which source markers a table's log holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Kafka,
    Files,
}

/// Reads an app id of `table` back, for a table reading `kind`; `None` for
/// another table's, another kind's or a foreign one.
pub fn parse<'a>(table: &str, kind: SourceKind, app_id: &'a str) -> Option<Marker<'a>> {
    let rest = app_id.strip_prefix(PREFIX)?.strip_prefix('/')?;
    let rest = rest.strip_prefix(table)?.strip_prefix('/')?;
    if rest == EXECUTION {
        return Some(Marker::Execution);
    }
    if kind == SourceKind::Files {
        let path = rest.strip_prefix(FILE).and_then(|r| r.strip_prefix('/'))?;
        return Some(Marker::File { path });
    }
    let (topic, partition) = rest.rsplit_once('/')?;
    if topic.is_empty() || topic.contains('/') {
        return None;
    }
    Some(Marker::Partition { topic, partition: partition.parse().ok()? })
}

/// The version a table's log holds for `app_id`, if any.
pub async fn stored_version(
    table: &DeltaTable,
    app_id: &str,
) -> Result<Option<i64>, DeltaTableError> {
    let snap = table.snapshot()?;
    snap.transaction_version(table.log_store().as_ref(), app_id).await
}

/// Every progress marker a table's log holds at `version` (app id ->
/// version), for reports; runs ask for one marker with [`stored_version`].
/// Read from the checkpoint at `checkpoint` (its `txn` columns only) and the
/// JSON commits after it, as the Delta protocol reconciles them: the newest
/// `txn` of an app id wins. `log` is a listing of `_delta_log`.
pub async fn read_markers(
    store: &dyn ObjectStore,
    log: &[ObjectMeta],
    checkpoint: Option<i64>,
    version: i64,
) -> Result<BTreeMap<String, i64>, String> {
    use deltalake::arrow::array::AsArray;
    use deltalake::arrow::datatypes::Int64Type;
    use deltalake::parquet::arrow::{
        arrow_reader::ParquetRecordBatchReaderBuilder, ProjectionMask,
    };
    let get = |path: Path| async move {
        let got = store.get(&path).await.map_err(|e| format!("reading {path}: {e}"))?;
        got.bytes().await.map_err(|e| format!("reading {path}: {e}"))
    };
    let mut out = BTreeMap::new();
    if let Some(cp) = checkpoint {
        let prefix = format!("{cp:020}.checkpoint.");
        for part in
            log.iter().filter(|o| o.location.filename().is_some_and(|n| n.starts_with(&prefix)))
        {
            let bytes = get(part.location.clone()).await?;
            let b = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| e.to_string())?;
            let mask = ProjectionMask::columns(b.parquet_schema(), ["txn.appId", "txn.version"]);
            for batch in b.with_projection(mask).build().map_err(|e| e.to_string())? {
                let batch = batch.map_err(|e| e.to_string())?;
                let Some(txn) = batch.column_by_name("txn").and_then(|c| c.as_struct_opt()) else {
                    continue;
                };
                let app = txn.column_by_name("appId").and_then(|c| c.as_string_opt::<i32>());
                let ver =
                    txn.column_by_name("version").and_then(|c| c.as_primitive_opt::<Int64Type>());
                let (Some(app), Some(ver)) = (app, ver) else { continue };
                for i in 0..batch.num_rows() {
                    if txn.is_valid(i) && app.is_valid(i) && ver.is_valid(i) {
                        out.insert(app.value(i).to_string(), ver.value(i));
                    }
                }
            }
        }
    }
    for v in checkpoint.map_or(0, |c| c + 1)..=version {
        let bytes = get(Path::from(format!("_delta_log/{v:020}.json"))).await?;
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let action: serde_json::Value =
                serde_json::from_slice(line).map_err(|e| format!("commit {v}: {e}"))?;
            if let Some(txn) = action.get("txn") {
                if let (Some(app), Some(ver)) = (
                    txn.get("appId").and_then(|a| a.as_str()),
                    txn.get("version").and_then(|v| v.as_i64()),
                ) {
                    out.insert(app.to_string(), ver);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_markers_read_back_as_what_they_name() {
        let m = Mark::partition("account", "crm.public.account", 3, 42);
        assert_eq!(m.app, "changelake/account/crm.public.account/3");
        assert_eq!((m.version, m.partition), (42, Some(3)));
        assert_eq!(
            parse("account", SourceKind::Kafka, &m.app),
            Some(Marker::Partition { topic: "crm.public.account", partition: 3 })
        );
        let f = Mark::file("account", "2024/01/a.csv", 7);
        assert_eq!(f.app, "changelake/account/file/2024/01/a.csv");
        assert_eq!(
            parse("account", SourceKind::Files, &f.app),
            Some(Marker::File { path: "2024/01/a.csv" })
        );
        // A chunk of a large file is progress inside it, not the file done.
        let part = Mark::file_part("account", "2024/01/a.csv", 7, 1 << 20);
        assert_eq!(part.app, "changelake/account/file-part/0000000000000007/2024/01/a.csv");
        assert_eq!(part.version, 1 << 20);
        assert_eq!(parse("account", SourceKind::Files, &part.app), None);
        assert_eq!(execution_app_id("account"), "changelake/account/_execution");
        assert_eq!(
            parse("account", SourceKind::Kafka, &execution_app_id("account")),
            Some(Marker::Execution)
        );
        assert_eq!(m.dead_letter_app_id(), "changelake/account/crm.public.account/3/dead_letters");
        // A topic named `file` stays a topic for a table reading Kafka.
        let odd = Mark::partition("account", "file", 3, 9);
        assert_eq!(
            parse("account", SourceKind::Kafka, &odd.app),
            Some(Marker::Partition { topic: "file", partition: 3 })
        );
        // Another table's markers are never read as this one's.
        assert_eq!(parse("acc", SourceKind::Kafka, &m.app), None);
        assert_eq!(parse("account", SourceKind::Kafka, "changelake/account/a/b/3"), None);
    }

    #[test]
    fn progress_markers_of_other_tables_are_not_read_as_ours() {
        let other = partition_app_id("account_history", "t", 0);
        assert_eq!(parse("account", SourceKind::Kafka, &other), None);
        assert_eq!(parse("account", SourceKind::Kafka, "kafka-delta-ingest/account/0"), None);
        assert_eq!(
            parse("account", SourceKind::Kafka, "changelake/account/topic/not-a-number"),
            None
        );
    }
}
