//! TODO

use std::collections::HashMap;
use std::sync::Arc;

use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, DeletionVectorDescriptor, MetadataExt, Transaction};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::Path;
use object_store::ObjectStoreExt;

use super::files::FileMeta;
use super::index::{IndexKey, NO_FILE};
use super::Result;
use super::{table_url, FxMap, TableError, TableStore, PROP_KEY, PROP_STRATEGY};
use crate::config::Strategy;
use crate::merge::{Key, Seq, Summary};

/// A write set ready to commit.
#[derive(Default)]
pub struct PendingCommit {
    pub(super) actions: Vec<Action>,
    pub(super) new_files: Vec<(FileMeta, Vec<Key>)>,
    pub(super) removed: Vec<u32>,
    pub(super) index: Vec<(Key, Option<Summary>)>,
    pub files_removed: usize,
    pub files_added: usize,
    pub rows_written: usize,
    /// Files whose deletion vector grew (merge-on-read) instead of being rewritten.
    pub files_masked: usize,
    /// Compaction: files are rearranged, no row changes (`dataChange: false`).
    pub rearrange: bool,
    /// Merge-on-read: files whose deletion vector grows (file id, new DV).
    pub(super) dv_updates: Vec<(u32, roaring::RoaringTreemap, DeletionVectorDescriptor)>,
}

impl TableStore {
    pub(super) fn exec_app_id(&self) -> String {
        format!("changelake/{}/_execution", self.meta.name)
    }

    /// Stores an encoded data file and stages its `add` action.
    pub(super) async fn put_file(
        &mut self,
        current: bool,
        keys: Vec<Key>,
        rows: usize,
        buf: Vec<u8>,
        exec: i64,
        pc: &mut PendingCommit,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let data_err = |e: String| TableError::Data { uri: self.uri.clone(), msg: e };
        self.file_counter += 1;
        let name = format!(
            "part-{exec:010}-{:05}-{}.zstd.parquet",
            self.file_counter,
            uuid::Uuid::new_v4()
        );
        let mut pv = HashMap::new();
        let path = match self.meta.partition() {
            Some(p) => {
                pv.insert(p.to_string(), Some(current.to_string()));
                format!("{p}={current}/{name}")
            }
            None => name,
        };
        let size = buf.len() as i64;
        if let Some(t) = &self.table {
            t.object_store()
                .put(&Path::from(path.as_str()), buf.into())
                .await
                .map_err(|e| data_err(format!("writing {path}: {e}")))?;
        } else {
            // First commit creates the table; write through a local/remote store rooted at the URI.
            let url = table_url(&self.uri)?;
            let store = deltalake::DeltaTableBuilder::from_url(url)
                .map_err(|e| self.delta(e))?
                .build_storage()
                .map_err(|e| self.delta(e))?
                .object_store(None);
            store
                .put(&Path::from(path.as_str()), buf.into())
                .await
                .map_err(|e| data_err(format!("writing {path}: {e}")))?;
        }
        crate::faults::hit("after_parquet_write");
        pc.actions.push(Action::Add(Add {
            path: path.clone(),
            partition_values: pv,
            size,
            modification_time: chrono::Utc::now().timestamp_millis(),
            data_change: !pc.rearrange,
            stats: Some(format!("{{\"numRecords\":{rows}}}")),
            tags: None,
            deletion_vector: None,
            base_row_id: None,
            default_row_commit_version: None,
            clustering_provider: None,
        }));
        pc.rows_written += rows;
        pc.files_added += 1;
        pc.new_files.push((FileMeta { path, rows, size, current, dv: None, dv_desc: None }, keys));
        Ok(())
    }

    /// Commits staged work plus progress `txn`s; creates the table on first use.
    /// Returns the new table version.
    /// Commits staged files and `txn` actions as one Delta version, inside a
    /// `commit` span carrying the table, the version and the duration.
    pub async fn commit(
        &mut self,
        pc: PendingCommit,
        txns: Vec<(String, i64)>,
        exec: Option<i64>,
        schema_changed: bool,
        info: serde_json::Value,
    ) -> Result<i64> {
        use tracing::Instrument;
        let span = tracing::info_span!(
            "commit",
            table = %self.meta.name,
            files_added = pc.files_added,
            files_removed = pc.files_removed,
            version = tracing::field::Empty,
            duration_ms = tracing::field::Empty
        );
        let started = std::time::Instant::now();
        let r =
            self.commit_inner(pc, txns, exec, schema_changed, info).instrument(span.clone()).await;
        span.record("duration_ms", started.elapsed().as_millis() as u64);
        if let Ok(v) = &r {
            span.record("version", v);
            span.in_scope(|| tracing::debug!("delta commit written"));
        }
        r
    }

    /// Creates a merge-on-read table as version 0 with a protocol of exactly
    /// reader 3 / writer 7 + `deletionVectors` (delta-rs' create path would
    /// upgrade legacy writer features too, including `invariants`, which it
    /// cannot write without DataFusion), then finishes like any commit.
    pub(super) async fn create_with_deletion_vectors(
        &mut self,
        pc: PendingCommit,
        txns: Vec<Transaction>,
        mut config: HashMap<String, Option<String>>,
        app_meta: HashMap<String, serde_json::Value>,
        exec: Option<i64>,
    ) -> Result<i64> {
        config.insert("delta.enableDeletionVectors".into(), Some("true".into()));
        let err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let protocol: deltalake::kernel::Protocol = serde_json::from_value(serde_json::json!({
            "minReaderVersion": 3, "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]
        }))
        .map_err(|e| err(format!("protocol: {e}")))?;
        let conf: Vec<(String, String)> =
            config.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect();
        let metadata = deltalake::kernel::new_metadata(
            &self.delta_schema(),
            self.meta.partition().map(str::to_string),
            conf,
        )
        .map_err(|e| err(format!("metadata: {e}")))?
        .with_name(self.meta.name.clone())
        .map_err(|e| err(format!("metadata: {e}")))?;
        let url = table_url(&self.uri)?;
        let log_store = deltalake::DeltaTableBuilder::from_url(url.clone())
            .map_err(|e| self.delta(e))?
            .build_storage()
            .map_err(|e| self.delta(e))?;
        let op = DeltaOperation::Create {
            mode: SaveMode::ErrorIfExists,
            location: url.clone(),
            protocol: protocol.clone(),
            metadata: metadata.clone(),
        };
        let mut actions = vec![Action::Protocol(protocol), Action::Metadata(metadata)];
        let mut pc = pc;
        actions.append(&mut pc.actions);
        let finalized = CommitBuilder::from(
            CommitProperties::default().with_application_transactions(txns).with_metadata(app_meta),
        )
        .with_actions(actions)
        .build(None, log_store, op)
        .await
        .map_err(|e| self.delta(e))?;
        let v = finalized.version();
        let mut t = deltalake::DeltaTableBuilder::from_url(url)
            .map_err(|e| self.delta(e))?
            .with_version(v)
            .load()
            .await
            .map_err(|e| self.delta(e))?;
        t.state = Some(finalized.snapshot());
        self.table = Some(t);
        self.finish_commit(pc, v as i64, exec)
    }

    pub(super) async fn commit_inner(
        &mut self,
        mut pc: PendingCommit,
        txns: Vec<(String, i64)>,
        exec: Option<i64>,
        schema_changed: bool,
        info: serde_json::Value,
    ) -> Result<i64> {
        let mut txns: Vec<Transaction> =
            txns.into_iter().map(|(a, v)| Transaction::new(a, v)).collect();
        if let Some(e) = exec {
            txns.push(Transaction::new(self.exec_app_id(), e));
        }
        let app_meta: HashMap<String, serde_json::Value> =
            [("changelake".to_string(), info)].into_iter().collect();
        let version = match &self.table {
            None => {
                let url = table_url(&self.uri)?;
                let schema = self.delta_schema();
                let mut config: HashMap<String, Option<String>> = HashMap::new();
                config.insert(PROP_STRATEGY.into(), Some(self.meta.strategy.as_str().into()));
                config.insert(
                    PROP_KEY.into(),
                    Some(serde_json::to_string(&self.meta.business_key).unwrap_or_default()),
                );
                config.insert(
                    "changelake.file_rows".into(),
                    Some(self.meta.layout.file_rows.to_string()),
                );
                if self.meta.layout.deletion_vectors {
                    return self
                        .create_with_deletion_vectors(pc, txns, config, app_meta, exec)
                        .await;
                }
                let mut b = deltalake::operations::create::CreateBuilder::new()
                    .with_location(url.to_string())
                    .with_table_name(self.meta.name.clone())
                    .with_columns(schema.fields().cloned())
                    .with_configuration(config)
                    .with_raise_if_key_not_exists(false)
                    .with_actions(std::mem::take(&mut pc.actions))
                    .with_commit_properties(
                        CommitProperties::default()
                            .with_application_transactions(txns)
                            .with_metadata(app_meta),
                    );
                if let Some(p) = self.meta.partition() {
                    b = b.with_partition_columns([p.to_string()]);
                }
                let t = b.await.map_err(|e| self.delta(e))?;
                let v = t.version().unwrap_or(0);
                self.table = Some(t);
                v
            }
            Some(t) => {
                let snap = t.snapshot().map_err(|e| self.delta(e))?;
                let mut actions = vec![];
                if schema_changed {
                    let md =
                        snap.metadata().clone().with_schema(&self.delta_schema()).map_err(|e| {
                            TableError::Data { uri: self.uri.clone(), msg: e.to_string() }
                        })?;
                    actions.push(Action::Metadata(md));
                }
                actions.append(&mut pc.actions);
                let op = DeltaOperation::Write {
                    mode: SaveMode::Append,
                    partition_by: self.meta.partition().map(|p| vec![p.to_string()]),
                    predicate: None,
                };
                let finalized = CommitBuilder::from(
                    CommitProperties::default()
                        .with_application_transactions(txns)
                        .with_metadata(app_meta),
                )
                .with_actions(actions)
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
        self.finish_commit(pc, version as i64, exec)
    }

    /// After a durable commit: update the in-memory layout and key index.
    pub(super) fn finish_commit(
        &mut self,
        pc: PendingCommit,
        version: i64,
        exec: Option<i64>,
    ) -> Result<i64> {
        crate::faults::hit("after_delta_commit");
        // The commit is durable: now update the in-memory layout and index.
        for id in pc.removed {
            if let Some(f) = self.files[id as usize].take() {
                self.filters.lock().unwrap_or_else(|e| e.into_inner()).remove(&f.path);
            }
        }
        for (id, dv, desc) in pc.dv_updates {
            if let Some(f) = self.files[id as usize].as_mut() {
                f.dv = Some(Arc::new(dv));
                f.dv_desc = Some(desc);
            }
        }
        // Keys are looked up on all cores first (see `locate`); the updates
        // then go by position. Inserts append (positions stay valid); removals
        // (`swap_remove` moves the last entry) come last.
        let mut placed: Vec<(&[u8], u32, u32)> = vec![];
        for (id, (fm, keys)) in (self.files.len() as u32..).zip(&pc.new_files) {
            if fm.current {
                placed.extend(keys.iter().enumerate().map(|(row, k)| (&k[..], id, row as u32)));
            }
        }
        let at = self.positions(&placed, |(k, _, _)| k);
        let summaries: Vec<(&[u8], &Summary)> =
            pc.index.iter().filter_map(|(k, s)| s.as_ref().map(|s| (&k[..], s))).collect();
        let at_summary = self.positions(&summaries, |(k, _)| k);
        let mut inserted: FxMap<&[u8], usize> = FxMap::default();
        let is_scd2 = self.meta.strategy == Strategy::Scd2;
        for ((k, id, row), at) in placed.into_iter().zip(at) {
            match at {
                Some(i) => {
                    let e = self.index.get_index_mut(i).expect("position").1;
                    e.0 = id;
                    e.1 = row;
                }
                None => {
                    // Placeholder; the summary follows below.
                    let s = Summary {
                        seq: Seq::Int(0),
                        deleted: false,
                        valid_from: i64::MIN,
                        row_hash: 0,
                        tracked_hash: 0,
                    };
                    inserted.insert(k, self.index.insert_full(IndexKey::new(k), (id, row, s)).0);
                }
            }
        }
        for ((k, s), at) in summaries.into_iter().zip(at_summary) {
            let i = match at.or_else(|| inserted.get(k).copied()) {
                Some(i) => i,
                None => self.index.insert_full(IndexKey::new(k), (NO_FILE, 0, s.clone())).0,
            };
            let e = self.index.get_index_mut(i).expect("position").1;
            if s.deleted && is_scd2 {
                e.0 = NO_FILE;
            }
            e.2 = s.clone();
        }
        for (k, s) in &pc.index {
            if s.is_none() {
                self.index.swap_remove(&k[..]);
            }
        }
        for (fm, _) in pc.new_files {
            self.files.push(Some(fm));
        }
        if let Some(e) = exec {
            self.last_exec = self.last_exec.max(e);
        }
        Ok(version)
    }
}
