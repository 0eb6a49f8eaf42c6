//! The Delta Lake table store: layout, key index, commits with progress.
//!
//! ## Layout, and why
//!
//! A CDC run touches a small, usually *recent* slice of a table. Copy-on-write
//! Delta tables pay for every file a run rewrites, so the layout keeps each
//! run's rewrite proportional to the keys it touches, not to the table:
//!
//! * **Current rows** (scd1: the whole table; scd2: the `_is_current=true`
//!   partition) live in files that each hold a run of keys. A key stays in its
//!   file for its whole life; the key index remembers which file that is, so a
//!   run rewrites exactly the files holding touched keys and nothing else.
//! * **New keys** of a run are sorted by key and spread over up to `spread`
//!   files of at most `file_rows` rows (at least 16 per file). Keys that are
//!   inserted together — and for CRM data, created together — stay together,
//!   which is the locality real update streams have (most updates hit recent
//!   rows). Small inserts top up the newest file while it is under a quarter
//!   of `file_rows`, so a streaming table does not drown in tiny files.
//! * **Closed scd2 history** goes to the `_is_current=false` partition, one
//!   new file per run. It is append-only: closing a version moves it out of
//!   the current files, late versions are appended. Only business-time
//!   backdating, which must shorten a stored neighbour, rewrites a history file.
//!   A processing-time close (`Need::Close`) never becomes values: the stored
//!   rows are read with a parquet row selection (their physical rows come from
//!   the key index) and copied at the Arrow level with `_valid_to` and
//!   `_is_deleted` replaced.
//! * **Rewrites** (copy-on-write) go in waves of about a million stored rows,
//!   each written before the next is read, so memory follows the wave, not
//!   the table.
//!
//! Hash-bucketing was considered and rejected: it spreads the hot, recent keys
//! across every bucket, so a 1% update would rewrite every file.
//!
//! ## Merge-on-read (`layout.deletion_vectors`)
//!
//! Copy-on-write pays for every file a run touches, and uniformly spread
//! updates touch all of them, so a run's cost grows with the table. With
//! deletion vectors a touched file is not rewritten: the physical rows of
//! replaced and deleted keys are added to its Delta deletion vector (one DV
//! file per run, the standard RoaringTreemap format) and the new versions are
//! appended to new files, so a run costs what the batch changes. The key index
//! therefore keeps each key's physical row. A file whose DV would mask half of
//! it or more is rewritten instead (dropping the masked rows), and compaction
//! drops masked rows too. Off by default: readers need the `deletionVectors`
//! feature (Spark, delta-kernel, delta-rs' DataFusion `scan`; not pyarrow
//! datasets).
//!
//! ## Maintenance
//!
//! Small files (a streaming run's leftovers) are compacted into full ones with
//! `dataChange: false`; a checkpoint is written every `checkpoint_interval`
//! commits, and data files removed and deletion vectors replaced longer ago
//! than `vacuum_retention` are deleted (counted from the removing commit), as
//! are files a crashed writer never committed (see `TableStore::sweep`).
//!
//! ## Key index
//!
//! Opening a table reads its current rows once and keeps, per business key,
//! the file and physical row holding the key and a [`Summary`] (latest
//! sequence, deleted flag, latest `_valid_from`, row and tracked-column
//! hashes): 72 bytes per key, keys up to 14 bytes inline (`IndexKey`).
//! With it, older rows and exact replays are
//! settled without reading any data file (`merge::classify`), and the files a
//! run must rewrite are known without scanning. For scd2, keys whose latest
//! version is a deleted, closed one are found by a projected scan of history
//! at open.
//!
//! ## Commit protocol (SPEC 8)
//!
//! One run is one Delta commit: the remove/add actions plus one `txn` action
//! per consumed source position (`changelake/<table>/<source>`, version = next
//! position to read) and `changelake/<table>/_execution` holding the last
//! `_execution_id`. Nothing else records progress, so a crash before the
//! commit loses nothing and a crash after it repeats nothing.

use std::collections::{HashMap, HashSet};

mod actions;
mod closes;
mod commit;
mod compact;
mod convert;
pub use convert::cell;
mod dv;
mod files;
mod history;
mod index;
mod masks;
mod parquet;
mod plan;
mod stage;
mod state;
mod upkeep;

use std::sync::Arc;

use deltalake::arrow::array::RecordBatch;
use deltalake::kernel::DeletionVectorDescriptor;
use deltalake::{DeltaTable, DeltaTableError, ObjectStore};
use url::Url;

use crate::config::{Layout, Reserved, Strategy};
use crate::merge::Summary;
use crate::value::DType;
use convert::dtype_of;
use dv::read_dv;
use files::FileMeta;
use index::IndexKey;
use parquet::KeyFilter;

type FxMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

type FxSet<K> = HashSet<K, rustc_hash::FxBuildHasher>;

pub const PROP_STRATEGY: &str = "changelake.strategy";

pub const PROP_KEY: &str = "changelake.business_key";

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
}

impl TableError {
    /// Storage hiccups are worth retrying; refusals and bad data are not.
    pub fn retryable(&self) -> bool {
        matches!(self, TableError::Delta { source, .. } if !matches!(source, DeltaTableError::NotATable(_)))
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
}

pub struct TableStore {
    pub uri: String,
    pub meta: TableMeta,
    table: Option<DeltaTable>,
    /// Data columns (source columns), in table order.
    pub columns: Vec<(String, DType)>,
    files: Vec<Option<FileMeta>>,
    /// Business key -> (file, physical row, summary).
    /// Dense entries plus a table of positions (indexmap): a hash table of
    /// 72-byte entries would be up to half empty after growing; here the
    /// slack costs 9 bytes per slot.
    index: indexmap::IndexMap<IndexKey, (u32, u32, Summary), rustc_hash::FxBuildHasher>,
    pub last_exec: i64,
    file_counter: u64,
    /// Decoded batches of the files the current run touches (see `batches`).
    cache: std::sync::Mutex<HashMap<u32, Arc<Vec<RecordBatch>>>>,
    /// Rows read by `load_states` for keys the merge will close (scd2
    /// `Need::Close`), per file: (sorted physical rows, those rows). Read in
    /// the same pass as the rows the merge needs as values, used by `stage`.
    selected: std::sync::Mutex<Vec<(u32, Vec<u32>, RecordBatch)>>,
    /// Key filters of history files, by path, loaded when late rows first
    /// need them (`None`: a file written without bloom filters).
    filters: std::sync::Mutex<HashMap<String, Option<Arc<KeyFilter>>>>,
}

pub fn table_url(uri: &str) -> Result<Url> {
    if uri.contains("://") {
        Url::parse(uri)
            .map_err(|e| TableError::Refused { uri: uri.into(), msg: format!("bad URL: {e}") })
    } else {
        std::fs::create_dir_all(uri).map_err(|e| TableError::Data {
            uri: uri.into(),
            msg: format!("cannot create directory: {e}"),
        })?;
        let abs = std::fs::canonicalize(uri)
            .map_err(|e| TableError::Data { uri: uri.into(), msg: e.to_string() })?;
        Url::from_directory_path(&abs).map_err(|_| TableError::Refused {
            uri: uri.into(),
            msg: "not an absolute path".into(),
        })
    }
}

/// Opens a Delta table if one exists at `uri`.
pub async fn open_existing(uri: &str) -> Result<Option<DeltaTable>> {
    if !uri.contains("://") && !std::path::Path::new(uri).join("_delta_log").exists() {
        return Ok(None);
    }
    let url = table_url(uri)?;
    match deltalake::open_table(url).await {
        Ok(t) => Ok(Some(t)),
        Err(DeltaTableError::NotATable(_)) => Ok(None),
        Err(e) => Err(TableError::Delta { uri: uri.into(), source: e }),
    }
}

impl TableStore {
    /// Opens (or prepares to create) the table. Call [`TableStore::load_index`]
    /// next, with the merge spec built from [`TableStore::columns`].
    pub async fn open(uri: &str, meta: TableMeta) -> Result<TableStore> {
        let mut store = TableStore {
            uri: uri.to_string(),
            meta,
            table: None,
            columns: vec![],
            files: vec![],
            index: Default::default(),
            last_exec: 0,
            file_counter: 0,
            cache: Default::default(),
            selected: Default::default(),
            filters: Default::default(),
        };
        let Some(table) = open_existing(uri).await? else {
            return Ok(store);
        };
        let snap = table.snapshot().map_err(|e| store.delta(e))?;
        let props = snap.metadata().configuration().clone();
        let refuse = |msg: String| TableError::Refused { uri: uri.to_string(), msg };
        match props.get(PROP_STRATEGY) {
            None => {
                return Err(refuse(
                    "exists but was not created by changelake (no changelake.strategy property); refusing to write into it".into(),
                ))
            }
            Some(s) if s != store.meta.strategy.as_str() => {
                return Err(refuse(format!(
                    "was created with strategy {s}, the config says {}; refusing to write",
                    store.meta.strategy.as_str()
                )))
            }
            _ => {}
        }
        if store.meta.layout.deletion_vectors
            && props.get("delta.enableDeletionVectors").map(String::as_str) != Some("true")
        {
            tracing::warn!(
                table = %store.meta.name,
                "layout.deletion_vectors applies to new tables only; this table was created without them and stays copy-on-write"
            );
            store.meta.layout.deletion_vectors = false;
        }
        let key_json = serde_json::to_string(&store.meta.business_key).unwrap_or_default();
        if let Some(k) = props.get(PROP_KEY) {
            if *k != key_json {
                return Err(refuse(format!("was created with business key {k}, the config says {key_json}; refusing to write")));
            }
        }
        for f in snap.schema().fields() {
            if store.meta.is_system(f.name()) {
                continue;
            }
            let t = dtype_of(f.data_type()).ok_or_else(|| {
                refuse(format!("column {} has unsupported type {:?}", f.name(), f.data_type()))
            })?;
            store.columns.push((f.name().to_string(), t));
        }
        let part = store.meta.partition().map(str::to_string);
        let views: Vec<(String, usize, i64, bool, Option<DeletionVectorDescriptor>)> = snap
            .log_data()
            .into_iter()
            .map(|fv| {
                let pv = fv.partition_values_map();
                let current = match &part {
                    None => true,
                    Some(p) => pv.get(p).cloned().flatten().as_deref() == Some("true"),
                };
                (
                    fv.path().to_string(),
                    fv.num_records().unwrap_or(0),
                    fv.size(),
                    current,
                    fv.deletion_vector_descriptor(),
                )
            })
            .collect();
        for (path, rows, size, current, dv_desc) in views {
            let dv = match &dv_desc {
                Some(d) => Some(Arc::new(
                    read_dv(&table, d)
                        .await
                        .map_err(|msg| refuse(format!("file {path}: {msg}")))?,
                )),
                None => None,
            };
            store.files.push(Some(FileMeta { path, rows, size, current, dv, dv_desc }));
        }
        store.last_exec = snap
            .transaction_version(table.log_store().as_ref(), store.exec_app_id())
            .await
            .map_err(|e| store.delta(e))?
            .unwrap_or(0);
        store.file_counter = store.files.len() as u64;
        store.table = Some(table);
        Ok(store)
    }

    fn delta(&self, e: DeltaTableError) -> TableError {
        TableError::Delta { uri: self.uri.clone(), source: e }
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

    pub fn summary(&self, key: &[u8]) -> Option<&Summary> {
        self.index.get(key).map(|(_, _, s)| s)
    }

    /// Stored progress for a source position (`txn` version), if any.
    pub async fn txn_version(&self, app_id: &str) -> Result<Option<i64>> {
        let Some(t) = &self.table else {
            return Ok(None);
        };
        let snap = t.snapshot().map_err(|e| self.delta(e))?;
        snap.transaction_version(t.log_store().as_ref(), app_id).await.map_err(|e| self.delta(e))
    }

    /// Live data file paths (relative to the table root).
    pub fn file_paths(&self) -> Vec<String> {
        self.files.iter().flatten().map(|f| f.path.clone()).collect()
    }

    fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        let t = self.table.as_ref().ok_or_else(|| TableError::Data {
            uri: self.uri.clone(),
            msg: "table not created yet".into(),
        })?;
        Ok(t.object_store())
    }

    /// Adds new data columns (schema_policy additive). Returns true if the schema changed.
    pub fn add_columns(&mut self, cols: &[(String, DType)]) -> bool {
        let mut changed = false;
        for (n, t) in cols {
            if !self.columns.iter().any(|(c, _)| c == n) {
                self.columns.push((n.clone(), *t));
                changed = true;
            }
        }
        changed
    }
}
