//! The Delta Lake table store: one changelake table, its layout, key index
//! and commits with progress.
//!
//! A run reads what the merge needs, stages new files and actions, and
//! commits them as one Delta version with its progress markers. Each step has
//! its own module, in the order a run uses them:
//!
//! | module | job |
//! | --- | --- |
//! | `mod.rs` | open a table, check it is ours and fits the config |
//! | `index.rs` | the key index: where each key's row lives, what it holds |
//! | `files.rs` | reading data files: whole, chosen rows, chosen columns |
//! | `state.rs` | building the index at open, loading what the merge needs |
//! | `index_snapshot.rs` | the saved key index's codec |
//! | `restart.rs` | saving the key index, loading it and replaying later commits |
//! | `history.rs` | finding closed scd2 versions without decoding history |
//! | `plan.rs` | pure layout decisions: rewrite or mask, waves, file sizes |
//! | `stage.rs` | turning a merge output into files and actions |
//! | `rewrite.rs` | copy-on-write: touched files rewritten with rows in place |
//! | `closes.rs` | scd2 closes copied into history at the Arrow level |
//! | `companions.rs` | merge-on-read scd2: writing, reading and rebuilding row companions |
//! | `rowstore/` | row companions: current rows kept row-wise for closes; where they live, their file format |
//! | `rowcodec.rs` | the row companions' record codec |
//! | `masks.rs` | merge-on-read: staging grown deletion vectors |
//! | `dv.rs` | the deletion-vector codec |
//! | `actions.rs` | `add` / `remove` actions |
//! | `commit.rs` | the commit, table creation, updating state after it |
//! | `compact.rs` | small-file compaction |
//! | `upkeep.rs` | checkpoints, vacuum and the orphan sweep |
//! | `scan.rs` | reads for inspection, without the key index |
//! | `stats.rs` | a table's health in numbers, from its log |
//! | `convert.rs` | Arrow <-> values, Delta and Arrow schemas |
//! | `parquet.rs` | parquet encoding and the key bloom filters |
//!
//! Hash-bucketing was considered for the layout and rejected: it spreads the
//! hot, recent keys across every bucket, so a 1% update would rewrite every
//! file (see `plan.rs` for the layout that was chosen).

mod actions;
mod briefs;
mod closes;
mod commit;
mod compact;
mod companions;
mod convert;
mod deleted_briefs;
mod dv;
mod file_stats;
mod files;
mod gather;
mod history;
mod index;
mod index_snapshot;
mod masks;
mod packed;
mod parquet;
mod plan;
mod restart;
mod rewrite;
mod rowcodec;
mod rowstore;
mod scan;
mod stage;
mod state;
mod stats;
mod upkeep;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deltalake::{DeltaTable, DeltaTableError, ObjectStore};

use crate::config::{Layout, Reserved, Strategy};
use crate::merge::Summary;
use crate::storage::{Location, StorageError};
use crate::value::DType;
use convert::dtype_of;
use files::FileMeta;
use index::KeyIndex;
use parquet::KeyFilter;

pub(crate) use actions::{add, DataChange, FileAction};
pub(crate) use commit::{create_table, NewTable};
pub use commit::{CommitRequest, PendingCommit};
pub use convert::cell;
pub(crate) use file_stats::{file_stats, StatsColumns};
pub(crate) use parquet::{encode_parquet, Codec, Cuts};
pub use restart::forget_saved_index;
pub use scan::{KeyRange, Projected, ScanFile};
pub use state::{ClosingRows, LoadedStates};
pub use stats::{table_stats, TableStats};
pub use upkeep::Upkept;

type FxMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;
type FxSet<K> = HashSet<K, rustc_hash::FxBuildHasher>;

/// Table property naming the strategy a table was created with.
pub const PROP_STRATEGY: &str = "changelake.strategy";
/// Table property holding the business key (a JSON list of column names).
pub const PROP_KEY: &str = "changelake.business_key";
/// Table property listing the columns with no type yet (a JSON list): only
/// NULLs so far, typed `string` in the schema until their first values
/// decide, and absent from every data file (docs/schema.md, no type yet).
pub const PROP_UNTYPED: &str = "changelake.untyped_columns";
/// Table property of tables created with exact types (`true`): decimals,
/// dates and declared types as docs/types.md maps them. Tables without it
/// were written by older versions and keep their column types.
pub const PROP_EXACT_TYPES: &str = "changelake.exact_types";
/// Delta's tombstone retention, set from `layout.vacuum_retention` when
/// changelake creates a table (see `upkeep::tombstone_retention`).
pub const PROP_TOMBSTONE_RETENTION: &str = "delta.deletedFileRetentionDuration";

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("table {uri}: {msg}")]
    Refused { uri: String, msg: String },
    #[error("table {uri}: {source}")]
    Delta {
        uri: String,
        #[source]
        source: DeltaTableError,
    },
    #[error("table {uri}: {msg}")]
    Data { uri: String, msg: String },
    /// A storage request failed (after the storage layer's own retries).
    #[error("table {uri}: {what}: {source}")]
    Io {
        uri: String,
        what: String,
        #[source]
        source: object_store::Error,
    },
}

impl TableError {
    /// Storage hiccups and lost commit races are worth retrying; refusals,
    /// definite storage answers and bad data are not.
    pub fn retryable(&self) -> bool {
        match self {
            TableError::Delta { source: DeltaTableError::NotATable(_), .. } => false,
            TableError::Delta { source: DeltaTableError::ObjectStore { source }, .. } => {
                crate::storage::layer::transient(source)
            }
            TableError::Delta { .. } => true,
            TableError::Io { source, .. } => crate::storage::layer::transient(source),
            TableError::Refused { .. } | TableError::Data { .. } => false,
        }
    }

    /// Another writer committed the version this commit was for: the
    /// table moved on, so the run is merged again on it at once
    /// ([`crate::engine::Retries`]).
    pub fn lost_race(&self) -> bool {
        use deltalake::kernel::transaction::TransactionError as T;
        matches!(
            self,
            TableError::Delta {
                source: DeltaTableError::VersionAlreadyExists(_)
                    | DeltaTableError::Transaction {
                        source: T::MaxCommitAttempts(_) | T::VersionAlreadyExists(_)
                    },
                ..
            }
        )
    }
}

impl From<StorageError> for TableError {
    fn from(e: StorageError) -> TableError {
        match e {
            StorageError::Refused { uri, msg } => TableError::Refused { uri, msg },
            StorageError::Delta { uri, source } => TableError::Delta { uri, source },
        }
    }
}

type Result<T> = std::result::Result<T, TableError>;

/// Identity of a changelake table, recorded in its Delta table properties.
#[derive(Debug, Clone)]
pub struct TableMeta {
    pub name: String,
    pub strategy: Strategy,
    pub business_key: Vec<String>,
    pub reserved: Reserved,
    pub surrogate_key: bool,
    pub layout: Layout,
}

impl TableMeta {
    /// The partition column: scd2 tables keep current rows and closed
    /// history apart (`_is_current=true|false`).
    fn partition(&self) -> Option<&str> {
        (self.strategy == Strategy::Scd2).then_some(self.reserved.is_current.as_str())
    }

    /// System columns stored in data files, in order (the partition column is not).
    fn system_fields(&self) -> Vec<(String, DType)> {
        let r = &self.reserved;
        let mut f = vec![];
        if self.strategy == Strategy::Scd2 {
            f.push((r.valid_from.clone(), DType::Ts));
            f.push((r.valid_to.clone(), DType::Ts));
        }
        f.push((r.is_deleted.clone(), DType::Bool));
        f.push((r.execution_id.clone(), DType::Int));
        if self.strategy == Strategy::Scd2 && self.surrogate_key {
            f.push((r.sk.clone(), DType::Int));
        }
        f
    }

    fn is_system(&self, name: &str) -> bool {
        self.reserved.all().contains(&name)
    }

    /// The columns changelake itself writes into this table (its system
    /// columns and its partition column): no source column may take one
    /// of their names.
    pub fn written_columns(&self) -> Vec<String> {
        let system = self.system_fields().into_iter().map(|(n, _)| n);
        system.chain(self.partition().map(str::to_string)).collect()
    }
}

pub struct TableStore {
    /// The location as it may be printed (error messages, logs).
    pub uri: String,
    pub loc: Location,
    pub meta: TableMeta,
    table: Option<DeltaTable>,
    /// Data columns (source columns), in table order.
    pub columns: Vec<(String, DType)>,
    /// Columns with no type yet (see [`PROP_UNTYPED`]): in the schema, not in files.
    pub untyped: std::collections::BTreeSet<String>,
    /// Created with exact types (see [`PROP_EXACT_TYPES`]); true for a new table.
    pub exact_types: bool,
    /// Columns whose bounds go into each file's statistics (table properties).
    stats_columns: file_stats::StatsColumns,
    /// The version whose key index is saved next to the table (loaded from
    /// there, or saved since), so an unchanged table is not saved again.
    saved_index: Option<i64>,
    /// Columns added since the last commit (written with the next one).
    schema_changed: bool,
    files: Vec<Option<FileMeta>>,
    index: KeyIndex,
    pub last_exec: i64,
    file_counter: u64,
    /// Key filters of history files, by path, loaded when late rows first
    /// need them (`None`: a file written without bloom filters).
    filters: std::sync::Mutex<HashMap<String, Option<Arc<KeyFilter>>>>,
    /// The store of a table not created yet, built once: building one may
    /// resolve cloud credentials, which the first run's every file would
    /// otherwise repeat.
    unborn_store: std::sync::OnceLock<Arc<dyn ObjectStore>>,
    /// Row companions of current files, for scd2 closes (see `rowstore/`).
    rows: rowstore::RowStore,
    /// Briefs of deleted scd2 keys, from commits and the saved snapshot
    /// (`deleted_briefs.rs`).
    deleted_briefs: deleted_briefs::DeletedBriefs,
}

/// Opens a Delta table if one exists at `loc`.
pub async fn open_existing(loc: &Location) -> Result<Option<DeltaTable>> {
    if !loc.uri().contains("://") && !std::path::Path::new(loc.uri()).join("_delta_log").exists() {
        return Ok(None);
    }
    let uri = crate::storage::redact_url(loc.uri());
    match loc.builder()?.load().await {
        Ok(t) => Ok(Some(t)),
        Err(DeltaTableError::NotATable(_)) => Ok(None),
        Err(e) => Err(TableError::Delta { uri, source: e }),
    }
}

impl TableStore {
    /// Opens (or prepares to create) the table. Call [`TableStore::load_index`]
    /// next, with the merge spec built from [`TableStore::columns`].
    pub async fn open(loc: &Location, meta: TableMeta) -> Result<TableStore> {
        let mut store = TableStore {
            uri: crate::storage::redact_url(loc.uri()),
            loc: loc.clone(),
            meta,
            table: None,
            columns: vec![],
            untyped: Default::default(),
            exact_types: true,
            stats_columns: Default::default(),
            saved_index: None,
            schema_changed: false,
            files: vec![],
            index: Default::default(),
            last_exec: 0,
            file_counter: 0,
            filters: Default::default(),
            unborn_store: Default::default(),
            rows: Default::default(),
            deleted_briefs: Default::default(),
        };
        store.rows = store.row_store();
        let Some(table) = open_existing(loc).await? else {
            return Ok(store);
        };
        let snap = table.snapshot().map_err(|e| store.delta(e))?;
        store.check_identity(snap.metadata().configuration())?;
        store.rows = store.row_store();
        if let Some(u) = snap.metadata().configuration().get(PROP_UNTYPED) {
            store.untyped = serde_json::from_str(u).unwrap_or_default();
        }
        store.exact_types =
            snap.metadata().configuration().get(PROP_EXACT_TYPES).is_some_and(|v| v == "true");
        store.stats_columns =
            file_stats::StatsColumns::from_properties(snap.metadata().configuration());
        store.load_columns(snap.schema().fields())?;
        store.load_files(&table).await?;
        let exec_app = crate::progress::execution_app_id(&store.meta.name);
        store.last_exec = crate::progress::stored_version(&table, &exec_app)
            .await
            .map_err(|e| store.delta(e))?
            .unwrap_or(0);
        store.file_counter = store.files.len() as u64;
        store.table = Some(table);
        Ok(store)
    }

    /// Refuses a table changelake did not create, or created with another
    /// strategy or business key; a merge-on-read layout applies to new
    /// tables only (docs/commit-protocol.md, table properties).
    fn check_identity(&mut self, props: &HashMap<String, String>) -> Result<()> {
        let refuse = |msg: String| TableError::Refused { uri: self.uri.clone(), msg };
        match props.get(PROP_STRATEGY) {
            None => {
                return Err(refuse(
                    "exists but was not created by changelake (no changelake.strategy property); refusing to write into it".into(),
                ))
            }
            Some(s) if s != self.meta.strategy.as_str() => {
                return Err(refuse(format!(
                    "was created with strategy {s}, the config says {}; refusing to write",
                    self.meta.strategy.as_str()
                )))
            }
            _ => {}
        }
        let key_json = serde_json::to_string(&self.meta.business_key).unwrap_or_default();
        if let Some(k) = props.get(PROP_KEY) {
            if *k != key_json {
                return Err(refuse(format!("was created with business key {k}, the config says {key_json}; refusing to write")));
            }
        }
        if let Some(d) = props.get("delta.setTransactionRetentionDuration") {
            return Err(refuse(format!(
                "has delta.setTransactionRetentionDuration = {d}: Delta would expire the `txn` progress markers after it, and a restart or replay would then apply events twice or skip them; unset the property (ALTER TABLE ... UNSET TBLPROPERTIES) to let changelake write"
            )));
        }
        // A table created before changelake set it keeps Delta's week of
        // tombstones; a value someone set is theirs to keep.
        let week = std::time::Duration::from_secs(7 * 24 * 3600);
        match self.meta.layout.vacuum_retention {
            Some(r) if r < week && !props.contains_key(PROP_TOMBSTONE_RETENTION) => {
                tracing::warn!(
                    table = %self.meta.name,
                    suggested = %upkeep::interval(upkeep::tombstone_retention(r)),
                    "delta.deletedFileRetentionDuration is unset: checkpoints keep every tombstone for 7 days and upkeep slows down with churn; set it (docs/operations.md, table upkeep)"
                );
            }
            _ => {}
        }
        let has_dvs = props.get("delta.enableDeletionVectors").map(String::as_str) == Some("true");
        if self.meta.layout.deletion_vectors && !has_dvs {
            tracing::warn!(
                table = %self.meta.name,
                "layout.deletion_vectors applies to new tables only; this table was created without them and stays copy-on-write"
            );
            self.meta.layout.deletion_vectors = false;
        }
        Ok(())
    }

    /// The data columns of the stored schema (system columns left out).
    fn load_columns<'a>(
        &mut self,
        fields: impl Iterator<Item = &'a deltalake::kernel::StructField>,
    ) -> Result<()> {
        for f in fields {
            if self.meta.is_system(f.name()) {
                continue;
            }
            let t = dtype_of(f.data_type()).ok_or_else(|| TableError::Refused {
                uri: self.uri.clone(),
                msg: format!("column {} has unsupported type {:?}", f.name(), f.data_type()),
            })?;
            self.columns.push((f.name().to_string(), t));
        }
        Ok(())
    }

    fn delta(&self, e: DeltaTableError) -> TableError {
        TableError::Delta { uri: self.uri.clone(), source: e }
    }

    fn data_err(&self, msg: impl Into<String>) -> TableError {
        TableError::Data { uri: self.uri.clone(), msg: msg.into() }
    }

    /// A storage request that failed (retryable when the store did not answer).
    fn io_err(&self, what: String, source: object_store::Error) -> TableError {
        TableError::Io { uri: self.uri.clone(), what, source }
    }

    pub fn exists(&self) -> bool {
        self.table.is_some()
    }

    pub fn version(&self) -> Option<i64> {
        self.table.as_ref().and_then(|t| t.version()).map(|v| v as i64)
    }

    pub fn key_count(&self) -> usize {
        self.index.len()
    }

    /// The key index's summaries of many keys, in item order (looked up on
    /// all cores, grouped by index shard: much faster than one lookup after
    /// another for a batch's keys).
    pub fn summaries<T: Sync>(
        &self,
        items: &[T],
        key: impl Fn(&T) -> &[u8] + Sync,
    ) -> Vec<Option<Summary>> {
        self.index.summaries(items, key)
    }

    /// Stored keys with a live current row (snapshot merge candidates).
    pub fn live_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.index.live_keys()
    }

    /// Stored progress for a source position (`txn` version), if any.
    pub async fn txn_version(&self, app_id: &str) -> Result<Option<i64>> {
        let Some(t) = &self.table else {
            return Ok(None);
        };
        crate::progress::stored_version(t, app_id).await.map_err(|e| self.delta(e))
    }

    /// Live data file paths (relative to the table root).
    pub fn file_paths(&self) -> Vec<String> {
        self.files.iter().flatten().map(|f| f.path.clone()).collect()
    }

    /// The table's object store; before the first commit creates the table,
    /// a store rooted at its location.
    fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        match &self.table {
            Some(t) => Ok(t.object_store()),
            None => {
                if let Some(s) = self.unborn_store.get() {
                    return Ok(s.clone());
                }
                let s = self.loc.object_store()?;
                Ok(self.unborn_store.get_or_init(|| s).clone())
            }
        }
    }

    /// Adds new data columns (schema_policy additive) and types the columns
    /// that had no type yet; `untyped` lists those still without one. The
    /// schema is written with the next commit.
    pub fn add_columns(&mut self, cols: &[(String, DType)], untyped: &[String]) {
        for (n, t) in cols {
            match self.columns.iter_mut().find(|(c, _)| c == n) {
                None => {
                    self.columns.push((n.clone(), *t));
                    self.schema_changed = true;
                }
                Some((_, stored)) if *stored != *t && self.untyped.contains(n) => {
                    *stored = *t;
                    self.schema_changed = true;
                }
                Some(_) => {}
            }
        }
        let untyped: std::collections::BTreeSet<String> = untyped.iter().cloned().collect();
        if untyped != self.untyped {
            self.untyped = untyped;
            self.schema_changed = true;
        }
    }

    /// Is this data column written to files (it has a type)?
    fn stored(&self, name: &str) -> bool {
        !self.untyped.contains(name)
    }
}
