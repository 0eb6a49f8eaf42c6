//! The commit: one run is one Delta version holding its file actions and its
//! progress markers (docs/commit-protocol.md).
//!
//! Nothing else records progress, so a crash before the commit loses nothing
//! and a crash after it repeats nothing. Tables are created by their first
//! commit, through [`create_table`], the one creation path (data tables and
//! the dead-letter table alike). After a durable commit the in-memory file
//! list and key index are updated ([`TableStore::finish_commit`]); never
//! before, so a failed commit leaves them as they were.

use std::collections::HashMap;
use std::sync::Arc;

use deltalake::arrow::array::RecordBatch;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{
    Action, DeletionVectorDescriptor, MetadataExt, Protocol, StructType, Transaction,
};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::{DeltaTable, Path};
use futures::StreamExt;
use object_store::ObjectStoreExt;

use super::actions::{self, DataChange, FileAction};
use super::files::FileMeta;
use super::index::Location as IndexLocation;
use super::parquet::Codec;
use super::Result;
use super::{
    TableError, TableStore, PROP_EXACT_TYPES, PROP_KEY, PROP_STRATEGY, PROP_TOMBSTONE_RETENTION,
    PROP_UNTYPED,
};
use crate::config::Strategy;
use crate::merge::{Key, Summary};
use crate::progress::Mark;
use crate::storage::Location;

/// Data files uploaded at once by [`TableStore::put_files`].
const PUTS_IN_FLIGHT: usize = 8;

/// A write set ready to commit.
#[derive(Default)]
pub struct PendingCommit {
    pub(super) actions: Vec<Action>,
    pub(super) new_files: Vec<NewFile>,
    pub(super) removed: Vec<u32>,
    /// Key-index updates of the merge (`None`: the key is gone).
    pub(super) index: Vec<(Key, Option<Summary>)>,
    /// Briefs of keys left without a current row (`deleted_briefs.rs`).
    pub(super) deleted_briefs: Vec<(Key, Option<Arc<[u8]>>)>,
    pub files_removed: usize,
    pub files_added: usize,
    pub rows_written: usize,
    /// Files whose deletion vector grew (merge-on-read) instead of being rewritten.
    pub files_masked: usize,
    /// Compaction: files are rearranged, no row changes (`dataChange: false`).
    pub(super) change: DataChange,
    /// Merge-on-read: files whose deletion vector grows.
    pub(super) dv_updates: Vec<DvUpdate>,
}

impl PendingCommit {
    /// A write set that only rearranges rows (compaction).
    pub(super) fn rearrange() -> PendingCommit {
        PendingCommit { change: DataChange::Rearrange, ..Default::default() }
    }
}

/// A data file staged by this commit, with the keys the key index must
/// place (current rows only; history files carry no index entries).
pub(super) struct NewFile {
    pub(super) meta: FileMeta,
    pub(super) keys: FileKeys,
}

/// Which keys of a new data file the key index places, and where.
pub(super) enum FileKeys {
    /// Every row's key, in row order: a file under a new id.
    Rows(Vec<Key>),
    /// A file under a new id, each key with its row (the rows a rewrite
    /// spills past `file_rows`; a stored row without a key has no entry).
    Sparse(Vec<(Key, u32)>),
    /// The file replaces live file `slot` under its id (a copy-on-write
    /// rewrite that kept its rows in place, `rewrite.rs`): a row at its old
    /// position keeps its index entry as it is; `moved` are the keys whose
    /// row is new or moved, with their rows.
    InPlace { slot: u32, moved: Vec<(Key, u32)> },
}

/// A file whose deletion vector this commit replaces.
pub(super) struct DvUpdate {
    pub(super) file: u32,
    pub(super) dv: roaring::RoaringTreemap,
    pub(super) descriptor: DeletionVectorDescriptor,
}

/// A data file to write: which partition, its keys in row order (current
/// rows), its rows.
pub(super) struct OutFile {
    pub(super) current: bool,
    pub(super) keys: Vec<Key>,
    pub(super) batch: RecordBatch,
    /// Current files: each row's brief of its key's closed versions, kept
    /// in the row companion only (`companions.rs`).
    pub(super) briefs: Option<deltalake::arrow::array::BinaryArray>,
}

/// An encoded data file ready to store.
pub(super) struct EncodedFile {
    pub(super) current: bool,
    pub(super) codec: Codec,
    pub(super) keys: FileKeys,
    pub(super) rows: usize,
    pub(super) bytes: bytes::Bytes,
    /// Its Delta statistics (`file_stats.rs`).
    pub(super) stats: String,
    /// Its row companion, written under a temporary name, when the table
    /// keeps them (`rowstore/`).
    pub(super) companion: Option<super::rowstore::Staged>,
}

/// What a commit records besides its files.
pub struct CommitRequest {
    /// The source positions the run consumed.
    pub progress: Vec<Mark>,
    /// The run's `_execution_id`, when it took one.
    pub execution: Option<i64>,
    /// Commit info (`changelake` key of the commit's `commitInfo`).
    pub info: serde_json::Value,
}

/// A table the first commit creates.
pub(crate) struct NewTable<'a> {
    pub(crate) name: &'a str,
    pub(crate) schema: StructType,
    pub(crate) partition: Option<String>,
    pub(crate) properties: HashMap<String, String>,
    /// Merge-on-read: the table supports deletion vectors.
    pub(crate) deletion_vectors: bool,
}

impl NewTable<'_> {
    /// Reader 1 / writer 2 without deletion vectors; with them exactly
    /// reader 3 / writer 7 + `deletionVectors` (delta-rs' create path would
    /// upgrade legacy writer features too, including `invariants`, which it
    /// cannot write without DataFusion).
    fn protocol(&self) -> std::result::Result<Protocol, serde_json::Error> {
        serde_json::from_value(if self.deletion_vectors {
            serde_json::json!({
                "minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]
            })
        } else {
            serde_json::json!({ "minReaderVersion": 1, "minWriterVersion": 2 })
        })
    }
}

/// Creates a table as version 0 holding `actions` (its first files), with
/// `props` (progress markers, commit info). Fails if a table already exists
/// there (another writer created it first).
pub(crate) async fn create_table(
    loc: &Location,
    new: NewTable<'_>,
    actions: Vec<Action>,
    props: CommitProperties,
) -> Result<DeltaTable> {
    let uri = crate::storage::redact_url(loc.uri());
    let delta = |e| TableError::Delta { uri: uri.clone(), source: e };
    let err = |msg: String| TableError::Data { uri: uri.clone(), msg };
    let mut properties = new.properties.clone();
    if new.deletion_vectors {
        properties.insert("delta.enableDeletionVectors".into(), "true".into());
    }
    let protocol = new.protocol().map_err(|e| err(format!("protocol: {e}")))?;
    let metadata = deltalake::kernel::new_metadata(&new.schema, new.partition.clone(), properties)
        .map_err(|e| err(format!("metadata: {e}")))?
        .with_name(new.name.to_string())
        .map_err(|e| err(format!("metadata: {e}")))?;
    let url = loc.url()?;
    let log_store = loc.builder()?.build_storage().map_err(delta)?;
    let op = DeltaOperation::Create {
        mode: SaveMode::ErrorIfExists,
        location: url.clone(),
        protocol: protocol.clone(),
        metadata: metadata.clone(),
    };
    let mut all = vec![Action::Protocol(protocol), Action::Metadata(metadata)];
    all.extend(actions);
    let finalized = CommitBuilder::from(props)
        .with_actions(all)
        .build(None, log_store, op)
        .await
        .map_err(delta)?;
    let mut t = loc.builder()?.with_version(finalized.version()).load().await.map_err(delta)?;
    t.state = Some(finalized.snapshot());
    Ok(t)
}

impl TableStore {
    /// Stores encoded data files, several at a time, and stages their `add`
    /// actions in the files' order. Why several: on an object store each
    /// upload is at least a round trip, and a run's files (a few new ones,
    /// or a wave of rewritten ones) went up one after the other; on a local
    /// disk each write is a copy into the page cache that another core can
    /// make at the same time. A file that fails leaves the others written
    /// but uncommitted, as a crash before the commit does (the orphan
    /// sweep in `upkeep.rs` removes them).
    pub(super) async fn put_files(
        &mut self,
        files: Vec<EncodedFile>,
        exec: i64,
        pc: &mut PendingCommit,
    ) -> Result<()> {
        let files: Vec<(String, EncodedFile)> = (files.into_iter())
            .filter(|f| f.rows > 0)
            .map(|f| (self.new_file_path(exec, f.current, f.codec), f))
            .collect();
        if files.is_empty() {
            return Ok(());
        }
        let store = self.store()?;
        let uploads: Vec<(Path, bytes::Bytes)> =
            files.iter().map(|(path, f)| (Path::from(path.as_str()), f.bytes.clone())).collect();
        let puts = futures::stream::iter(uploads.into_iter().map(move |(path, bytes)| {
            let store = store.clone();
            async move { store.put(&path, bytes.into()).await.map_err(|e| (path, e)) }
        }));
        let done: Vec<_> = puts.buffered(PUTS_IN_FLIGHT).collect().await;
        for put in done {
            put.map_err(|(path, e)| self.io_err(format!("writing {path}"), e))?;
        }
        for (path, file) in files {
            crate::faults::hit("after_parquet_write");
            self.stage_added(path, file, pc);
        }
        Ok(())
    }

    /// A new data file's path: the run, a counter and a UUID in its name,
    /// as Spark names them, under its partition.
    fn new_file_path(&mut self, exec: i64, current: bool, codec: Codec) -> String {
        self.file_counter += 1;
        let name = format!(
            "part-{exec:010}-{:05}-{}.{}.parquet",
            self.file_counter,
            uuid::Uuid::new_v4(),
            codec.name()
        );
        match self.meta.partition() {
            Some(p) => format!("{p}={current}/{name}"),
            None => name,
        }
    }

    /// Stages the `add` of a stored data file, and names its row companion.
    fn stage_added(&self, path: String, file: EncodedFile, pc: &mut PendingCommit) {
        let EncodedFile { current, codec: _, keys, rows, bytes, stats, companion } = file;
        if let Some(c) = companion {
            // A cache: a close without it reads parquet instead.
            if let Err(e) = self.rows.adopt(c, &path) {
                tracing::warn!(target: "changelake::table", table = %self.meta.name, file = %path, error = %e, "row companion not written; closes of its rows will read parquet");
            }
        }
        let size = bytes.len() as i64;
        let pv = actions::partition_values(self.meta.partition(), current);
        let file = FileAction {
            path: &path,
            partition_values: pv,
            size,
            rows,
            deletion_vector: None,
            stats: Some(&stats),
        };
        pc.actions.push(actions::add(file, pc.change));
        pc.rows_written += rows;
        pc.files_added += 1;
        let stats = Some(Arc::from(stats));
        let meta = FileMeta { path, rows, size, current, dv: None, dv_desc: None, stats };
        pc.new_files.push(NewFile { meta, keys });
    }

    /// Stages the `remove` of a live file.
    pub(super) fn remove_file(&self, id: u32, pc: &mut PendingCommit) {
        self.remove_replaced_file(id, pc);
        pc.removed.push(id);
    }

    /// Stages the `remove` of a live file whose replacement takes its id
    /// ([`FileKeys::InPlace`]).
    pub(super) fn remove_replaced_file(&self, id: u32, pc: &mut PendingCommit) {
        let f = self.files[id as usize].as_ref().expect("live file");
        pc.actions.push(actions::remove(self.file_action(f), pc.change));
        pc.files_removed += 1;
    }

    /// A live file as its `add` / `remove` actions describe it.
    pub(super) fn file_action<'a>(&self, f: &'a FileMeta) -> FileAction<'a> {
        FileAction {
            path: &f.path,
            partition_values: actions::partition_values(self.meta.partition(), f.current),
            size: f.size,
            rows: f.rows,
            deletion_vector: f.dv_desc.clone(),
            stats: f.stats.as_deref(),
        }
    }

    /// Commits staged files and progress `txn`s as one Delta version (creating
    /// the table on first use), inside a `commit` span carrying the table,
    /// the version and the duration. Returns the new version.
    pub async fn commit(&mut self, pc: PendingCommit, req: CommitRequest) -> Result<i64> {
        use tracing::Instrument;
        let span = tracing::info_span!(
            target: "changelake::table",
            "commit",
            table = %self.meta.name,
            files_added = pc.files_added,
            files_removed = pc.files_removed,
            version = tracing::field::Empty,
            duration_ms = tracing::field::Empty
        );
        let started = std::time::Instant::now();
        let r = self.commit_inner(pc, req).instrument(span.clone()).await;
        span.record("duration_ms", started.elapsed().as_millis() as u64);
        if let Ok(v) = &r {
            span.record("version", v);
            span.in_scope(|| tracing::debug!(target: "changelake::table", "delta commit written"));
        }
        r
    }

    async fn commit_inner(&mut self, mut pc: PendingCommit, req: CommitRequest) -> Result<i64> {
        let started = std::time::Instant::now();
        let mut txns: Vec<Transaction> = req.progress.iter().map(Mark::txn).collect();
        if let Some(e) = req.execution {
            txns.push(crate::progress::execution_txn(&self.meta.name, e));
        }
        let app_meta: HashMap<String, serde_json::Value> =
            [("changelake".to_string(), req.info)].into_iter().collect();
        // Strict: the commit must land right after the version this run read.
        // delta-rs would otherwise rebase it over another writer's commit
        // whenever the two touch different files — two inserts of one new
        // key, or an older row landing after a newer one — and the table
        // would hold a duplicate or a stale row. A lost race fails here;
        // the engine re-reads the table and merges again
        // (docs/commit-protocol.md, concurrent writers).
        let props = CommitProperties::default()
            .with_application_transactions(txns)
            .with_metadata(app_meta)
            .with_max_retries(0);
        let actions = std::mem::take(&mut pc.actions);
        let version = match &self.table {
            None => {
                let t = create_table(&self.loc, self.new_table(), actions, props).await?;
                let v = t.version().unwrap_or(0);
                self.table = Some(t);
                v
            }
            Some(t) => {
                let snap = t.snapshot().map_err(|e| self.delta(e))?;
                let mut all = vec![];
                if self.schema_changed {
                    let untyped = serde_json::to_string(&self.untyped).unwrap_or_default();
                    let md = snap
                        .metadata()
                        .clone()
                        .with_schema(&self.delta_schema())
                        .and_then(|m| m.add_config_key(PROP_UNTYPED.to_string(), untyped))
                        .map_err(|e| self.data_err(e.to_string()))?;
                    all.push(Action::Metadata(md));
                }
                all.extend(actions);
                let op = DeltaOperation::Write {
                    mode: SaveMode::Append,
                    partition_by: self.meta.partition().map(|p| vec![p.to_string()]),
                    predicate: None,
                };
                let finalized = CommitBuilder::from(props)
                    .with_actions(all)
                    .build(Some(snap), t.log_store(), op)
                    .await
                    .map_err(|e| self.delta(e))?;
                let v = finalized.version();
                let mut t = t.clone();
                // Advance to *our* commit, not to the latest version: commits by
                // another writer after ours must stay after our read version, so
                // that our next commit is checked against them (txn conflicts)
                // instead of silently building on an index that never saw them.
                // The finalized commit carries that snapshot (no log re-read).
                t.state = Some(finalized.snapshot());
                self.table = Some(t);
                v
            }
        };
        self.schema_changed = false;
        let written = started.elapsed();
        let v = self.finish_commit(pc, version as i64, req.execution);
        tracing::debug!(
            target: "changelake::table",
            log_ms = written.as_secs_f64() * 1e3,
            index_ms = (started.elapsed() - written).as_secs_f64() * 1e3,
            "commit phases"
        );
        v
    }

    /// This table as its first commit creates it, with its identity in the
    /// table properties.
    fn new_table(&self) -> NewTable<'_> {
        let layout = &self.meta.layout;
        let mut properties: HashMap<String, String> = [
            (PROP_STRATEGY, self.meta.strategy.as_str().to_string()),
            (PROP_KEY, serde_json::to_string(&self.meta.business_key).unwrap_or_default()),
            ("changelake.file_rows", layout.file_rows.to_string()),
            (PROP_UNTYPED, serde_json::to_string(&self.untyped).unwrap_or_default()),
            (PROP_EXACT_TYPES, "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(r) = layout.vacuum_retention {
            let keep = super::upkeep::tombstone_retention(r);
            properties.insert(PROP_TOMBSTONE_RETENTION.into(), super::upkeep::interval(keep));
        }
        NewTable {
            name: &self.meta.name,
            schema: self.delta_schema(),
            partition: self.meta.partition().map(str::to_string),
            properties,
            deletion_vectors: layout.deletion_vectors,
        }
    }

    /// What is kept beside a file that left the table: its key filters and
    /// its row companion.
    fn forget_file(&self, path: &str) {
        self.filters.lock().unwrap_or_else(|e| e.into_inner()).remove(path);
        self.rows.remove(path);
    }

    /// After a durable commit: update the in-memory file list and key index.
    pub(super) fn finish_commit(
        &mut self,
        pc: PendingCommit,
        version: i64,
        exec: Option<i64>,
    ) -> Result<i64> {
        crate::faults::hit("after_delta_commit");
        for id in pc.removed {
            if let Some(f) = self.files[id as usize].take() {
                self.forget_file(&f.path);
            }
        }
        for u in pc.dv_updates {
            if let Some(f) = self.files[u.file as usize].as_mut() {
                f.dv = Some(Arc::new(u.dv));
                f.dv_desc = Some(u.descriptor);
            }
        }
        let mut next_id = self.files.len() as u32;
        let mut placed: Vec<(&[u8], IndexLocation)> = vec![];
        for f in &pc.new_files {
            match &f.keys {
                FileKeys::Rows(keys) => {
                    let id = next_id;
                    next_id += 1;
                    if f.meta.current {
                        placed.extend(
                            keys.iter().enumerate().map(|(row, k)| {
                                (&k[..], IndexLocation { file: id, row: row as u32 })
                            }),
                        );
                    }
                }
                FileKeys::Sparse(keys) => {
                    let id = next_id;
                    next_id += 1;
                    if f.meta.current {
                        placed.extend(
                            keys.iter()
                                .map(|(k, row)| (&k[..], IndexLocation { file: id, row: *row })),
                        );
                    }
                }
                FileKeys::InPlace { slot, moved } => placed.extend(
                    moved.iter().map(|(k, row)| (&k[..], IndexLocation { file: *slot, row: *row })),
                ),
            }
        }
        let deleted_has_no_row = self.meta.strategy == Strategy::Scd2;
        self.index.apply_commit(placed, &pc.index, deleted_has_no_row);
        let limit = self.deleted_briefs_limit();
        self.deleted_briefs.apply(pc.deleted_briefs, limit);
        // The commit's keys (a run's worth) are freed on the pool, off the
        // committing thread: copied on other cores, freed here they took
        // the allocator's cross-thread path and nearly doubled a narrow
        // merge-on-read commit (10 -> 18 ms at 1M keys).
        crate::par::drop_later(pc.index);
        let mut spent = Vec::with_capacity(pc.new_files.len());
        for f in pc.new_files {
            match &f.keys {
                FileKeys::Rows(_) | FileKeys::Sparse(_) => self.files.push(Some(f.meta)),
                FileKeys::InPlace { slot, .. } => {
                    if let Some(old) = self.files[*slot as usize].replace(f.meta) {
                        self.forget_file(&old.path);
                    }
                }
            }
            spent.push(f.keys);
        }
        crate::par::drop_later(spent);
        if let Some(e) = exec {
            self.last_exec = self.last_exec.max(e);
        }
        Ok(version)
    }
}
