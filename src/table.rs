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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use deltalake::arrow::array::{
    Array, ArrayRef, BooleanArray, BooleanBuilder, Date32Array, Float32Array, Float64Array,
    Float64Builder, Int32Array, Int64Array, Int64Builder, LargeStringArray, RecordBatch,
    StringArray, StringBuilder, StringViewArray, TimestampMicrosecondArray,
    TimestampMicrosecondBuilder, TimestampMillisecondArray, TimestampNanosecondArray,
};
use deltalake::arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema, TimeUnit};
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{
    Action, Add, DataType as DeltaType, DeletionVectorDescriptor, MetadataExt, PrimitiveType,
    Remove, StorageType, StructField, StructType, Transaction,
};
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use deltalake::parquet::arrow::ArrowWriter;
use deltalake::parquet::basic::{Compression, ZstdLevel};
use deltalake::parquet::file::properties::WriterProperties;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::{DeltaTable, DeltaTableError, ObjectStore, Path};
use object_store::ObjectStoreExt;
use url::Url;

use crate::config::{Layout, Reserved, Strategy};
use crate::merge::{Key, KeyMap, KeyState, Loc, Need, Output, Seq, Spec, Summary, Version};
use crate::par::par_map;

type FxMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

/// A business key as the key index stores it: 16 bytes, inline up to 14
/// bytes (every integer key, short codes), otherwise behind one thin pointer.
/// Hashes and compares exactly as its bytes, so the index is looked up with a
/// plain `&[u8]`. With the 48-byte [`Summary`] and the file/row pair an entry
/// is 72 bytes (80 with the map's stored hash): 10M keys take about 1 GB.
#[derive(Clone)]
enum IndexKey {
    Inline(u8, [u8; 14]),
    Heap(Box<Box<[u8]>>),
}

const _: () = assert!(std::mem::size_of::<IndexKey>() == 16);
const _: () = assert!(std::mem::size_of::<(IndexKey, (u32, u32, Summary))>() == 72);

impl IndexKey {
    fn new(k: &[u8]) -> IndexKey {
        if k.len() <= 14 {
            let mut b = [0u8; 14];
            b[..k.len()].copy_from_slice(k);
            IndexKey::Inline(k.len() as u8, b)
        } else {
            IndexKey::Heap(Box::new(k.into()))
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            IndexKey::Inline(n, b) => &b[..*n as usize],
            IndexKey::Heap(b) => b,
        }
    }
}

impl std::borrow::Borrow<[u8]> for IndexKey {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::hash::Hash for IndexKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_slice().hash(h)
    }
}

impl PartialEq for IndexKey {
    fn eq(&self, o: &IndexKey) -> bool {
        self.as_slice() == o.as_slice()
    }
}

impl Eq for IndexKey {}
type FxSet<K> = HashSet<K, rustc_hash::FxBuildHasher>;
use crate::value::{DType, Value};

pub const PROP_STRATEGY: &str = "changelake.strategy";
pub const PROP_KEY: &str = "changelake.business_key";
const NO_FILE: u32 = u32::MAX;
/// Smallest file a large insert is split into: small tables still get several
/// files, so touching a few keys never rewrites all of them.
const MIN_FILE_ROWS: usize = 16;
/// Rows of touched files kept decoded between reading state and rewriting
/// (beyond this, files are read twice rather than held in memory).
const CACHE_ROWS: usize = 4_000_000;
/// Rows of stored files a copy-on-write run rewrites at a time (see `stage`).
const WAVE_ROWS: usize = 1_000_000;
/// Files under this many rows (or a quarter of `file_rows`) count as small for compaction.
const COMPACT_BELOW_ROWS: usize = 1024;
/// Files no commit references are vacuumed only once at least this old, even
/// with a shorter retention (another writer's file may await its commit).
const ORPHAN_MIN_AGE_MS: i64 = 3_600_000;
/// Magic number of a portable RoaringBitmapArray in a Delta deletion vector.
const DV_MAGIC: u32 = 1_681_511_377;

/// The table-relative file of a `u` (UUID relative path) deletion vector.
fn dv_file(path_or_inline: &str) -> std::result::Result<String, String> {
    if path_or_inline.len() < 20 {
        return Err(format!("deletion vector id `{path_or_inline}` is too short"));
    }
    let (prefix, z) = path_or_inline.split_at(path_or_inline.len() - 20);
    let raw = z85::decode(z).map_err(|e| format!("deletion vector id: {e}"))?;
    let uuid = uuid::Uuid::from_slice(&raw).map_err(|e| format!("deletion vector id: {e}"))?;
    Ok(if prefix.is_empty() {
        format!("deletion_vector_{uuid}.bin")
    } else {
        format!("{prefix}/deletion_vector_{uuid}.bin")
    })
}

/// A file entry of a checkpoint: an `add` (live) or a `remove` (tombstone).
struct CheckpointFile {
    path: String,
    /// Removal time of a tombstone, ms since the epoch.
    removed_at: i64,
    /// The deletion-vector file the entry carries, if any (a data file whose
    /// DV was replaced is removed with its old DV and added with the new one).
    dv: Option<String>,
}

/// The live files and the tombstones of a checkpoint (it holds every
/// tombstone not yet expired). An error when the checkpoint is not laid out
/// as expected: the sweep must never run on a partial picture.
fn checkpoint_files(
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

/// Reads a deletion vector written as `changelake` writes them (stored
/// relative to the table, `u`): other storage types are refused.
async fn read_dv(
    table: &DeltaTable,
    d: &DeletionVectorDescriptor,
) -> std::result::Result<roaring::RoaringTreemap, String> {
    if d.storage_type != StorageType::UuidRelativePath || d.path_or_inline_dv.len() < 20 {
        return Err(format!(
            "deletion vector storage {:?} is not supported (only relative `u` files)",
            d.storage_type
        ));
    }
    let path = dv_file(&d.path_or_inline_dv)?;
    let bytes = table
        .object_store()
        .get(&Path::from(path.as_str()))
        .await
        .map_err(|e| format!("reading {path}: {e}"))?
        .bytes()
        .await
        .map_err(|e| format!("reading {path}: {e}"))?;
    let start = d.offset.unwrap_or(1) as usize;
    let size = d.size_in_bytes as usize;
    if bytes.first() != Some(&1) {
        return Err(format!("{path}: unknown deletion vector file version"));
    }
    if bytes.len() < start + 4 + size + 4 || size < 4 {
        return Err(format!("{path}: deletion vector out of bounds"));
    }
    if u32::from_be_bytes(bytes[start..start + 4].try_into().expect("4 bytes")) as usize != size {
        return Err(format!("{path}: deletion vector size does not match the log"));
    }
    let body = &bytes[start + 4..start + 4 + size];
    if u32::from_le_bytes(body[0..4].try_into().expect("4 bytes")) != DV_MAGIC {
        return Err(format!("{path}: not a portable roaring bitmap"));
    }
    let crc =
        u32::from_be_bytes(bytes[start + 4 + size..start + 8 + size].try_into().expect("4 bytes"));
    if crc != crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(body) {
        return Err(format!("{path}: deletion vector checksum mismatch"));
    }
    roaring::RoaringTreemap::deserialize_from(&body[4..]).map_err(|e| format!("{path}: {e}"))
}

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

#[derive(Debug, Clone)]
struct FileMeta {
    path: String,
    /// Physical rows in the parquet file (deleted ones included).
    rows: usize,
    size: i64,
    current: bool,
    /// Deletion vector: physical rows masked out (merge-on-read tables).
    dv: Option<Arc<roaring::RoaringTreemap>>,
    dv_desc: Option<DeletionVectorDescriptor>,
}

impl FileMeta {
    fn deleted(&self, row: u32) -> bool {
        self.dv.as_ref().is_some_and(|d| d.contains(row as u64))
    }
    fn live_rows(&self) -> usize {
        self.rows.saturating_sub(self.dv.as_ref().map_or(0, |d| d.len() as usize))
    }
}

/// A key's newest version seen in history so far (see `history_heads`).
struct HistoryHead {
    seq: Vec<Value>,
    exec: i64,
    deleted: bool,
    file: u32,
    row: u32,
}

impl HistoryHead {
    /// Versions order by sequence, then by run (SPEC 5).
    fn newer_than(&self, other: &HistoryHead) -> bool {
        crate::value::cmp_slices(&self.seq, &other.seq).then(self.exec.cmp(&other.exec))
            == std::cmp::Ordering::Greater
    }

    /// Keeps `h` as `key`'s head if it is the first seen or newer (a tie keeps the first).
    fn offer(heads: &mut KeyMap<HistoryHead>, key: &[u8], h: HistoryHead) {
        match heads.get_mut(key) {
            Some(old) if !h.newer_than(old) => {}
            Some(old) => *old = h,
            None => {
                heads.insert(key.into(), h);
            }
        }
    }
}

/// One file's decoded rows.
struct FileRows {
    keys: Vec<Option<Key>>,
    versions: Vec<Version>,
}

/// A write set ready to commit.
#[derive(Default)]
pub struct PendingCommit {
    actions: Vec<Action>,
    new_files: Vec<(FileMeta, Vec<Key>)>,
    removed: Vec<u32>,
    index: Vec<(Key, Option<Summary>)>,
    pub files_removed: usize,
    pub files_added: usize,
    pub rows_written: usize,
    /// Files whose deletion vector grew (merge-on-read) instead of being rewritten.
    pub files_masked: usize,
    /// Compaction: files are rearranged, no row changes (`dataChange: false`).
    pub rearrange: bool,
    /// Merge-on-read: files whose deletion vector grows (file id, new DV).
    dv_updates: Vec<(u32, roaring::RoaringTreemap, DeletionVectorDescriptor)>,
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

/// Which business keys a file may hold: the parquet bloom filters (split
/// block, xxhash; readable by any parquet reader) of its key columns, per row
/// group. Late scd2 rows need a key's closed versions; without these, every
/// batch with a late row decoded the key columns of the whole history, a
/// cost that grows with the table's age instead of the batch. A few bytes
/// per history row in memory, loaded from the file footers on first use.
pub struct KeyFilter {
    /// Per row group, per key column: the filter, if the column has one of a
    /// type it can be probed with.
    groups: Vec<Vec<Option<(deltalake::parquet::bloom_filter::Sbbf, KeyProbe)>>>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum KeyProbe {
    /// BYTE_ARRAY column: a string key hashes as its UTF-8 bytes.
    Bytes,
    /// INT64 column: an integer key hashes as its little-endian bytes.
    Int64,
}

impl KeyFilter {
    /// False only when no row group can hold a row with these key values
    /// (a NULL part, an unprobeable column or a type mismatch counts as a
    /// maybe: the filter never hides a row).
    pub fn may_contain(&self, key: &[Value]) -> bool {
        self.groups.iter().any(|cols| {
            cols.iter().zip(key).all(|(f, v)| match (f, v) {
                (Some((f, KeyProbe::Bytes)), Value::Str(s)) => f.check(s.as_str()),
                (Some((f, KeyProbe::Int64)), Value::Int(i)) => f.check(i),
                _ => true,
            })
        })
    }

    /// Reads the filters of `columns` from a parquet footer and its bloom
    /// filter blocks, each fetched with `range`. None when a key column has
    /// no filter in some row group (files written before filters existed).
    async fn load<F, Fut>(
        size: u64,
        columns: &[String],
        range: F,
    ) -> std::result::Result<Option<KeyFilter>, String>
    where
        F: Fn(std::ops::Range<u64>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<bytes::Bytes, String>>,
    {
        use deltalake::parquet::basic::Type as Physical;
        use deltalake::parquet::bloom_filter::Sbbf;
        use deltalake::parquet::file::metadata::ParquetMetaDataReader;
        if size < 12 {
            return Err("not a parquet file".into());
        }
        let tail_len = size.min(64 * 1024);
        let mut tail = range(size - tail_len..size).await?;
        let n = tail.len();
        if n < 8 || &tail[n - 4..] != b"PAR1" {
            return Err("not a parquet file (no PAR1 footer)".into());
        }
        let meta_len = u32::from_le_bytes(tail[n - 8..n - 4].try_into().expect("4 bytes")) as u64;
        if meta_len + 8 > size {
            return Err("parquet footer longer than the file".into());
        }
        if meta_len + 8 > tail_len {
            tail = range(size - 8 - meta_len..size).await?;
        }
        let n = tail.len();
        let meta = ParquetMetaDataReader::decode_metadata(&tail[n - 8 - meta_len as usize..n - 8])
            .map_err(|e| e.to_string())?;
        let mut groups = vec![];
        for rg in meta.row_groups() {
            let mut cols = vec![];
            for name in columns {
                let Some(c) = rg
                    .columns()
                    .iter()
                    .find(|c| c.column_path().parts() == std::slice::from_ref(name))
                else {
                    return Ok(None);
                };
                let (Some(off), Some(len)) = (c.bloom_filter_offset(), c.bloom_filter_length())
                else {
                    return Ok(None);
                };
                let probe = match c.column_type() {
                    Physical::BYTE_ARRAY => Some(KeyProbe::Bytes),
                    Physical::INT64 => Some(KeyProbe::Int64),
                    _ => None,
                };
                let bytes = range(off as u64..off as u64 + len as u64).await?;
                let sbbf = Sbbf::from_bytes(&bytes).map_err(|e| e.to_string())?;
                cols.push(probe.map(|p| (sbbf, p)));
            }
            groups.push(cols);
        }
        Ok(Some(KeyFilter { groups }))
    }
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

fn delta_type(t: DType) -> DeltaType {
    DeltaType::Primitive(match t {
        DType::Bool => PrimitiveType::Boolean,
        DType::Int => PrimitiveType::Long,
        DType::Float => PrimitiveType::Double,
        DType::Str => PrimitiveType::String,
        DType::Ts => PrimitiveType::Timestamp,
    })
}

fn dtype_of(t: &DeltaType) -> Option<DType> {
    match t {
        DeltaType::Primitive(p) => Some(match p {
            PrimitiveType::Boolean => DType::Bool,
            PrimitiveType::Long
            | PrimitiveType::Integer
            | PrimitiveType::Short
            | PrimitiveType::Byte => DType::Int,
            PrimitiveType::Double | PrimitiveType::Float => DType::Float,
            PrimitiveType::String => DType::Str,
            PrimitiveType::Timestamp | PrimitiveType::TimestampNtz | PrimitiveType::Date => {
                DType::Ts
            }
            _ => return None,
        }),
        _ => None,
    }
}

fn arrow_type(t: DType) -> ArrowType {
    match t {
        DType::Bool => ArrowType::Boolean,
        DType::Int => ArrowType::Int64,
        DType::Float => ArrowType::Float64,
        DType::Str => ArrowType::Utf8,
        DType::Ts => ArrowType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
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

    fn exec_app_id(&self) -> String {
        format!("changelake/{}/_execution", self.meta.name)
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

    /// Where each key's stored row lives (file, row; the file is `NO_FILE`
    /// for a key kept only as deleted), looked up on all cores. Each lookup
    /// into an index of millions of keys is a cache miss or two, and a run
    /// makes several per changed key: one after another they were a tenth
    /// of an scd2 run on the 1M-key bench.
    fn locate<T: Sync>(
        &self,
        items: &[T],
        key: impl Fn(&T) -> &[u8] + Sync,
    ) -> Vec<Option<(u32, u32)>> {
        use rayon::prelude::*;
        items
            .par_iter()
            .with_min_len(4096)
            .map(|t| self.index.get(key(t)).map(|(f, r, _)| (*f, *r)))
            .collect()
    }

    /// Positions in the index's dense entries (see [`TableStore::locate`]).
    fn positions<T: Sync>(
        &self,
        items: &[T],
        key: impl Fn(&T) -> &[u8] + Sync,
    ) -> Vec<Option<usize>> {
        use rayon::prelude::*;
        items.par_iter().with_min_len(4096).map(|t| self.index.get_index_of(key(t))).collect()
    }

    /// Stored keys with a live current row (snapshot merge candidates).
    pub fn live_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.index
            .iter()
            .filter(|(_, (f, _, s))| *f != NO_FILE && !s.deleted)
            .map(|(k, _)| k.as_slice())
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

    /// Reads the current rows (and, for scd2, the deleted latest versions)
    /// into the key index. A table that does not exist yet has nothing to load.
    pub async fn load_index(&mut self, spec: &Spec) -> Result<()> {
        let current: Vec<u32> = (0..self.files.len() as u32)
            .filter(|&i| self.files[i as usize].as_ref().is_some_and(|f| f.current))
            .collect();
        for id in current {
            let rows = self.read_file(id, spec).await?;
            for (k, v) in rows.keys.into_iter().zip(rows.versions) {
                if let Some(k) = k {
                    let row = v.loc.map_or(0, |l| l.row);
                    self.index.insert(IndexKey::new(&k), (id, row, spec.summary(&v)));
                }
            }
        }
        if self.meta.strategy != Strategy::Scd2 {
            return Ok(());
        }
        // scd2 keys without a current row: the newest version in history
        // decides (a deleted one is indexed so a later row reopens the key).
        // Found from a few columns of each history file; only the rows that
        // are indexed are read in full.
        let history: Vec<u32> = (0..self.files.len() as u32)
            .filter(|&i| self.files[i as usize].as_ref().is_some_and(|f| !f.current))
            .collect();
        let mut heads: KeyMap<HistoryHead> = KeyMap::default();
        for wave in history.chunks(16) {
            let mut todo = vec![];
            for &id in wave {
                todo.push((id, self.fetch(id).await?));
            }
            for found in par_map(todo, |(id, bytes)| self.history_heads(id, spec, bytes)) {
                for (k, h) in found? {
                    HistoryHead::offer(&mut heads, &k, h);
                }
            }
        }
        let mut want: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for h in heads.values().filter(|h| h.deleted) {
            want.entry(h.file).or_default().push(h.row);
        }
        for rows in want.values_mut() {
            rows.sort_unstable();
            rows.dedup();
        }
        for (id, rows, batch) in self.read_selected(want).await? {
            for v in self.versions_of(id, &batch, rows.into_iter().enumerate()) {
                if let Some(k) = spec.key_of(&v.data) {
                    self.index.insert(IndexKey::new(&k), (NO_FILE, 0, spec.summary(&v)));
                }
            }
        }
        Ok(())
    }

    /// Per key without a current row, its newest version in one history
    /// file, from the key, sequence, `_is_deleted` and `_execution_id`
    /// columns alone: decoding every column of the whole history made a
    /// restart cost what the table's age is.
    fn history_heads(
        &self,
        id: u32,
        spec: &Spec,
        bytes: bytes::Bytes,
    ) -> Result<Vec<(Key, HistoryHead)>> {
        let f = self.files[id as usize].as_ref().expect("live file");
        let data_err = |msg: String| TableError::Data {
            uri: self.uri.clone(),
            msg: format!("parquet {}: {msg}", f.path),
        };
        let r = &self.meta.reserved;
        let names: Vec<&str> = spec
            .key
            .iter()
            .chain(&spec.seq)
            .map(|&i| self.columns[i].0.as_str())
            .chain([r.is_deleted.as_str(), r.execution_id.as_str()])
            .collect();
        let reader = self.columns_of(f, bytes, &names)?;
        let mut heads: KeyMap<HistoryHead> = KeyMap::default();
        let mut row_no = 0u32;
        let mut buf = Vec::with_capacity(32);
        for batch in reader {
            let batch = batch.map_err(|e| data_err(e.to_string()))?;
            let col =
                |name: &str| batch.schema().index_of(name).ok().map(|i| batch.column(i).clone());
            let typed = |idx: &[usize]| -> Vec<(Option<ArrayRef>, DType)> {
                idx.iter().map(|&i| (col(&self.columns[i].0), self.columns[i].1)).collect()
            };
            let (key_cols, seq_cols) = (typed(&spec.key), typed(&spec.seq));
            let keys = KeyCols::new(&key_cols);
            let (del, exec) = (col(&r.is_deleted), col(&r.execution_id));
            for i in 0..batch.num_rows() {
                let row = row_no;
                row_no += 1;
                if f.deleted(row) || !keys.encode(i, &mut buf) || self.index.contains_key(&buf[..])
                {
                    continue;
                }
                let h = HistoryHead {
                    seq: seq_cols
                        .iter()
                        .map(|(c, t)| {
                            c.as_ref()
                                .map(|c| cell(c, i))
                                .unwrap_or(Value::Null)
                                .convert(*t)
                                .unwrap_or(Value::Null)
                        })
                        .collect(),
                    exec: match exec.as_ref().map(|c| cell(c, i)) {
                        Some(Value::Int(e)) => e,
                        _ => 0,
                    },
                    deleted: matches!(del.as_ref().map(|c| cell(c, i)), Some(Value::Bool(true))),
                    file: id,
                    row,
                };
                HistoryHead::offer(&mut heads, &buf, h);
            }
        }
        Ok(heads.into_iter().collect())
    }

    fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        let t = self.table.as_ref().ok_or_else(|| TableError::Data {
            uri: self.uri.clone(),
            msg: "table not created yet".into(),
        })?;
        Ok(t.object_store())
    }

    /// The file as Arrow batches in the table's current schema (columns added
    /// since it was written are NULL; a changed type is converted as
    /// [`Value::convert`] does).
    async fn read_batches(&self, id: u32) -> Result<Vec<RecordBatch>> {
        let bytes = self.fetch(id).await?;
        self.decode_file(id, bytes, None)
    }

    async fn fetch(&self, id: u32) -> Result<bytes::Bytes> {
        let f = self.files[id as usize].clone().expect("live file");
        let store = self.store()?;
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let bytes = store
            .get(&Path::from(f.path.as_str()))
            .await
            .map_err(|e| data_err(format!("reading {}: {e}", f.path)))?
            .bytes()
            .await
            .map_err(|e| data_err(format!("reading {}: {e}", f.path)))?;
        Ok(bytes)
    }

    /// The key filter of a file (cached; read from its footer on first use).
    /// None when the file has no key bloom filters or they cannot be read:
    /// the file is then scanned, never skipped.
    async fn key_filter(&self, f: &FileMeta, key_columns: &[String]) -> Option<Arc<KeyFilter>> {
        if let Some(hit) = self.filters.lock().unwrap_or_else(|e| e.into_inner()).get(&f.path) {
            return hit.clone();
        }
        let store = self.store().ok()?;
        let path = Path::from(f.path.as_str());
        let loaded = KeyFilter::load(f.size as u64, key_columns, |r| {
            let (store, path) = (store.clone(), path.clone());
            async move { store.get_range(&path, r).await.map_err(|e| e.to_string()) }
        })
        .await;
        let filter = match loaded {
            Ok(f) => f.map(Arc::new),
            Err(e) => {
                tracing::warn!(file = %f.path, error = %e, "key bloom filters unreadable; the file is scanned");
                None
            }
        };
        self.filters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(f.path.clone(), filter.clone());
        filter
    }

    /// Decodes a file in the table's current schema; with `selection` (sorted
    /// physical rows) only those rows, in that order: the parquet reader
    /// skips the values of every other row instead of materialising them.
    fn decode_file(
        &self,
        id: u32,
        bytes: bytes::Bytes,
        selection: Option<&[u32]>,
    ) -> Result<Vec<RecordBatch>> {
        use deltalake::parquet::arrow::arrow_reader::{RowSelection, RowSelector};
        let f = self.files[id as usize].as_ref().expect("live file");
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| {
                let b = b.with_batch_size(64 * 1024);
                match selection {
                    None => b.build(),
                    Some(rows) => {
                        let mut sel = vec![];
                        let mut at = 0usize;
                        for &r in rows {
                            let r = r as usize;
                            if r > at {
                                sel.push(RowSelector::skip(r - at));
                            }
                            match sel.last_mut() {
                                Some(s) if !s.skip && r == at => s.row_count += 1,
                                _ => sel.push(RowSelector::select(1)),
                            }
                            at = r + 1;
                        }
                        b.with_row_selection(RowSelection::from(sel)).build()
                    }
                }
            })
            .map_err(|e| data_err(format!("parquet {}: {e}", f.path)))?;
        let schema = self.arrow_schema();
        let mut out = vec![];
        for batch in reader {
            let batch = batch.map_err(|e| data_err(format!("parquet {}: {e}", f.path)))?;
            let n = batch.num_rows();
            let mut cols = Vec::with_capacity(schema.fields().len());
            for (fi, field) in schema.fields().iter().enumerate() {
                let col = match batch
                    .schema()
                    .index_of(field.name())
                    .ok()
                    .map(|i| batch.column(i).clone())
                {
                    Some(c) if c.data_type() == field.data_type() => c,
                    Some(c) => {
                        let t = self.columns.get(fi).map(|(_, t)| *t).or_else(|| {
                            self.meta
                                .system_fields()
                                .into_iter()
                                .find(|(name, _)| name == field.name())
                                .map(|(_, t)| t)
                        });
                        let t = t.expect("schema field is a data or system column");
                        build_array(
                            t,
                            (0..n).map(|i| cell(&c, i).convert(t).unwrap_or(Value::Null)),
                        )
                    }
                    None => deltalake::arrow::array::new_null_array(field.data_type(), n),
                };
                cols.push(col);
            }
            out.push(
                RecordBatch::try_new(schema.clone(), cols).map_err(|e| data_err(e.to_string()))?,
            );
        }
        Ok(out)
    }

    /// Reads and decodes files into the run cache, decoding on all cores
    /// (a uniform update touches every file; decoding dominates).
    async fn prefetch(&self, ids: &[u32]) -> Result<()> {
        let mut todo = vec![];
        let mut rows = 0;
        for &id in ids {
            if self.cache.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&id) {
                continue;
            }
            rows += self.files[id as usize].as_ref().map_or(0, |f| f.rows);
            if rows > CACHE_ROWS {
                break;
            }
            todo.push((id, self.fetch(id).await?));
        }
        let decoded = par_map(todo, |(id, bytes)| (id, self.decode_file(id, bytes, None)));
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        for (id, d) in decoded {
            c.insert(id, Arc::new(d?));
        }
        Ok(())
    }

    /// A file's batches, from the run's cache or read (and cached with `keep`:
    /// `load_states` reads the files `stage` will rewrite, so each touched
    /// file is decoded once per run).
    async fn batches(&self, id: u32, keep: bool) -> Result<Arc<Vec<RecordBatch>>> {
        if let Some(b) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            if b.first().is_none_or(|x| x.schema() == self.arrow_schema()) {
                return Ok(b.clone());
            }
        }
        let b = Arc::new(self.read_batches(id).await?);
        if keep {
            let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            let cached: usize =
                c.values().map(|v| v.iter().map(|x| x.num_rows()).sum::<usize>()).sum();
            if cached < CACHE_ROWS {
                c.insert(id, b.clone());
            }
        }
        Ok(b)
    }

    /// Business keys of a batch's rows (only the key columns are converted).
    fn batch_keys(&self, spec: &Spec, batch: &RecordBatch) -> Vec<Option<Key>> {
        let cols: Vec<(ArrayRef, DType)> =
            spec.key.iter().map(|&i| (batch.column(i).clone(), self.columns[i].1)).collect();
        let mut vals = vec![Value::Null; cols.len()];
        (0..batch.num_rows())
            .map(|r| {
                for (j, (c, t)) in cols.iter().enumerate() {
                    vals[j] = cell(c, r).convert(*t).unwrap_or(Value::Null);
                }
                crate::merge::key_from(vals.iter())
            })
            .collect()
    }

    /// Reads chosen physical rows of several files (each list sorted), one
    /// batch per file in row order. Files already decoded in the run cache
    /// are taken from it; the others are read with a row selection, on all cores.
    async fn read_selected(
        &self,
        want: BTreeMap<u32, Vec<u32>>,
    ) -> Result<Vec<(u32, Vec<u32>, RecordBatch)>> {
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let schema = self.arrow_schema();
        let mut out = vec![];
        let mut todo = vec![];
        for (id, rows) in want {
            let cached = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned();
            match cached.filter(|b| b.first().is_none_or(|x| x.schema() == schema)) {
                Some(batches) => {
                    // Take from each decoded batch its share of the rows; only the taken rows are copied.
                    let (mut parts, mut next, mut start) = (vec![], 0, 0u32);
                    for b in batches.iter() {
                        let n = b.num_rows() as u32;
                        let here = rows[next..].iter().take_while(|&&r| r < start + n).count();
                        if here > 0 {
                            let idx = deltalake::arrow::array::UInt32Array::from_iter_values(
                                rows[next..next + here].iter().map(|r| r - start),
                            );
                            parts.push(
                                deltalake::arrow::compute::take_record_batch(b, &idx)
                                    .map_err(|e| data_err(e.to_string()))?,
                            );
                        }
                        next += here;
                        start += n;
                    }
                    if next < rows.len() {
                        return Err(data_err(format!("file {id}: rows beyond its end selected")));
                    }
                    let taken = deltalake::arrow::compute::concat_batches(&schema, &parts)
                        .map_err(|e| data_err(e.to_string()))?;
                    out.push((id, rows, taken));
                }
                None => todo.push((id, rows, self.fetch(id).await?)),
            }
        }
        for r in par_map(todo, |(id, rows, bytes)| {
            let batches = self.decode_file(id, bytes, Some(&rows))?;
            let all = deltalake::arrow::compute::concat_batches(&self.arrow_schema(), &batches)
                .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() })?;
            if all.num_rows() != rows.len() {
                return Err(TableError::Data {
                    uri: self.uri.clone(),
                    msg: format!(
                        "file {id}: {} of {} selected rows read",
                        all.num_rows(),
                        rows.len()
                    ),
                });
            }
            Ok((id, rows, all))
        }) {
            out.push(r?);
        }
        Ok(out)
    }

    /// Reads only the named columns of a file (those it has; a column added
    /// since it was written is absent from its batches).
    fn columns_of(
        &self,
        f: &FileMeta,
        bytes: bytes::Bytes,
        names: &[&str],
    ) -> Result<deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReader> {
        use deltalake::parquet::arrow::ProjectionMask;
        let data_err = |e: deltalake::parquet::errors::ParquetError| TableError::Data {
            uri: self.uri.clone(),
            msg: format!("parquet {}: {e}", f.path),
        };
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(data_err)?;
        let mask = ProjectionMask::columns(builder.parquet_schema(), names.iter().copied());
        builder.with_projection(mask).with_batch_size(64 * 1024).build().map_err(data_err)
    }

    /// The versions of one history file whose keys are in `wanted`: a pass over
    /// the key columns alone finds their rows, then only those rows are decoded.
    fn history_rows(
        &self,
        id: u32,
        spec: &Spec,
        bytes: bytes::Bytes,
        wanted: &FxSet<&[u8]>,
    ) -> Result<Vec<(Key, Version)>> {
        let f = self.files[id as usize].as_ref().expect("live file");
        let data_err = |msg: String| TableError::Data {
            uri: self.uri.clone(),
            msg: format!("parquet {}: {msg}", f.path),
        };
        let key_names: Vec<&str> = spec.key.iter().map(|&i| self.columns[i].0.as_str()).collect();
        let reader = self.columns_of(f, bytes.clone(), &key_names)?;
        let mut hits: Vec<(u32, Key)> = vec![];
        let mut row_no = 0u32;
        let mut buf = Vec::with_capacity(32);
        for batch in reader {
            let batch = batch.map_err(|e| data_err(e.to_string()))?;
            let cols: Vec<(Option<ArrayRef>, DType)> = key_names
                .iter()
                .zip(&spec.key)
                .map(|(n, &k)| {
                    (
                        batch.schema().index_of(n).ok().map(|i| batch.column(i).clone()),
                        self.columns[k].1,
                    )
                })
                .collect();
            let keys = KeyCols::new(&cols);
            for i in 0..batch.num_rows() {
                let row = row_no;
                row_no += 1;
                if !f.deleted(row) && keys.encode(i, &mut buf) && wanted.contains(&buf[..]) {
                    hits.push((row, buf.as_slice().into()));
                }
            }
        }
        if hits.is_empty() {
            return Ok(vec![]);
        }
        let rows: Vec<u32> = hits.iter().map(|(r, _)| *r).collect();
        let batches = self.decode_file(id, bytes, Some(&rows))?;
        let all = deltalake::arrow::compute::concat_batches(&self.arrow_schema(), &batches)
            .map_err(|e| data_err(e.to_string()))?;
        if all.num_rows() != rows.len() {
            return Err(data_err(format!(
                "{} of {} selected rows read",
                all.num_rows(),
                rows.len()
            )));
        }
        Ok(hits
            .into_iter()
            .map(|(_, k)| k)
            .zip(self.versions_of(id, &all, rows.into_iter().enumerate()))
            .collect())
    }

    /// Versions of chosen rows of a batch: `(row in the batch, physical row in the file)`.
    fn versions_of(
        &self,
        id: u32,
        batch: &RecordBatch,
        rows: impl Iterator<Item = (usize, u32)>,
    ) -> Vec<Version> {
        let current = self.files[id as usize].as_ref().is_some_and(|f| f.current);
        let r = &self.meta.reserved;
        let col = |name: &str| batch.schema().index_of(name).ok().map(|i| batch.column(i).clone());
        let data_cols: Vec<Option<ArrayRef>> = self.columns.iter().map(|(n, _)| col(n)).collect();
        let (vf, vt, del, ex, sk) = (
            col(&r.valid_from),
            col(&r.valid_to),
            col(&r.is_deleted),
            col(&r.execution_id),
            col(&r.sk),
        );
        rows.map(|(i, row)| {
            let data: Vec<Value> = data_cols
                .iter()
                .zip(&self.columns)
                .map(|(c, (_, t))| {
                    c.as_ref()
                        .map(|c| cell(c, i))
                        .unwrap_or(Value::Null)
                        .convert(*t)
                        .unwrap_or(Value::Null)
                })
                .collect();
            let ts = |c: &Option<ArrayRef>| match c.as_ref().map(|c| cell(c, i)) {
                Some(Value::Ts(t)) => Some(t),
                _ => None,
            };
            Version {
                valid_from: ts(&vf),
                valid_to: ts(&vt),
                current,
                deleted: matches!(del.as_ref().map(|c| cell(c, i)), Some(Value::Bool(true))),
                exec: match ex.as_ref().map(|c| cell(c, i)) {
                    Some(Value::Int(e)) => e,
                    _ => 0,
                },
                sk: match sk.as_ref().map(|c| cell(c, i)) {
                    Some(Value::Int(e)) => Some(e),
                    _ => None,
                },
                loc: Some(Loc { file: id, row }),
                data,
            }
        })
        .collect()
    }

    /// Reads a file's live rows as versions.
    async fn read_file(&self, id: u32, spec: &Spec) -> Result<FileRows> {
        let f = self.files[id as usize].clone().expect("live file");
        let batches = self.batches(id, false).await?;
        let mut out = FileRows { keys: vec![], versions: vec![] };
        let mut row_no = 0u32;
        for batch in batches.iter() {
            let n = batch.num_rows() as u32;
            let chosen =
                (row_no..row_no + n).filter(|&r| !f.deleted(r)).map(|r| ((r - row_no) as usize, r));
            for v in self.versions_of(id, batch, chosen) {
                out.keys.push(spec.key_of(&v.data));
                out.versions.push(v);
            }
            row_no += n;
        }
        Ok(out)
    }

    /// Loads the stored versions the merge asked for (see `merge::classify`).
    /// `closing`: keys whose stored rows `stage` will copy into history
    /// (read now, in the same pass, and kept as Arrow rows).
    pub async fn load_states(
        &self,
        spec: &Spec,
        needs: &KeyMap<Need>,
        closing: &[&Key],
    ) -> Result<KeyMap<KeyState>> {
        self.selected.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let mut states: KeyMap<KeyState> = KeyMap::default();
        // Current rows are located by the key index: only those rows are read.
        let mut by_file: BTreeMap<u32, Vec<(u32, &Key)>> = BTreeMap::new();
        let mut want_history = false;
        let mut look: Vec<&Key> = vec![];
        for (k, need) in needs {
            if *need == Need::Nothing {
                continue;
            }
            if *need == Need::Replace {
                states.insert(k.clone(), KeyState { replace: true, ..Default::default() });
                continue;
            }
            want_history |= *need == Need::History;
            look.push(k);
        }
        let found = self.locate(&look, |k| k);
        for (k, at) in look.into_iter().zip(found) {
            if let Some((f, row)) = at.filter(|(f, _)| *f != NO_FILE) {
                by_file.entry(f).or_default().push((row, k));
            }
        }
        let mut keys_at: FxMap<(u32, u32), &Key> = FxMap::default();
        let mut want: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (id, rows) in &by_file {
            want.entry(*id).or_default().extend(rows.iter().map(|(r, _)| *r));
            keys_at.extend(rows.iter().map(|(r, k)| ((*id, *r), *k)));
        }
        for (f, row) in self.locate(closing, |k| k).into_iter().flatten() {
            if f != NO_FILE {
                want.entry(f).or_default().push(row);
            }
        }
        for rows in want.values_mut() {
            rows.sort_unstable();
            rows.dedup();
        }
        let mut stash = vec![];
        let t0 = std::time::Instant::now();
        let read = self.read_selected(want).await?;
        let t1 = std::time::Instant::now();
        for (id, rows, batch) in read {
            let pos: Vec<u32> = (0..rows.len() as u32)
                .filter(|&i| keys_at.contains_key(&(id, rows[i as usize])))
                .collect();
            if !pos.is_empty() {
                let idx = deltalake::arrow::array::UInt32Array::from(pos.clone());
                let mine = deltalake::arrow::compute::take_record_batch(&batch, &idx)
                    .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() })?;
                let phys: Vec<u32> = pos.iter().map(|&i| rows[i as usize]).collect();
                for v in self.versions_of(id, &mine, phys.into_iter().enumerate()) {
                    let k = keys_at[&(id, v.loc.map_or(0, |l| l.row))];
                    states.entry(k.clone()).or_default().current = Some(v);
                }
            }
            stash.push((id, rows, batch));
        }
        tracing::debug!(
            read_ms = (t1 - t0).as_secs_f64() * 1e3,
            versions_ms = t1.elapsed().as_secs_f64() * 1e3,
            "load_states phases"
        );
        if !closing.is_empty() {
            *self.selected.lock().unwrap_or_else(|e| e.into_inner()) = stash;
        }
        if want_history {
            // Late rows are rare: scan closed history for just those keys.
            // Only the key columns of history files are decoded to find the
            // keys' rows, then only those rows are read in full, on all cores.
            // Files whose key bloom filters rule out every late key are skipped.
            let hist_keys: Vec<(&[u8], Option<Vec<Value>>)> = needs
                .iter()
                .filter(|(_, n)| **n == Need::History)
                .map(|(k, _)| (&k[..], Value::decode_all(k)))
                .collect();
            let (mut todo, mut history_files) = (vec![], 0usize);
            let key_columns = key_columns(spec);
            for (id, f) in self.files.iter().enumerate() {
                let Some(f) = f.as_ref().filter(|f| !f.current) else { continue };
                history_files += 1;
                let filter = self.key_filter(f, &key_columns).await;
                let wanted: FxSet<&[u8]> = hist_keys
                    .iter()
                    .filter(|(_, v)| match (&filter, v) {
                        (Some(filter), Some(v)) => filter.may_contain(v),
                        _ => true,
                    })
                    .map(|(k, _)| *k)
                    .collect();
                if !wanted.is_empty() {
                    todo.push((id as u32, self.fetch(id as u32).await?, wanted));
                }
            }
            tracing::debug!(
                late_keys = hist_keys.len(),
                history_files,
                scanned = todo.len(),
                "late rows: history files scanned"
            );
            for found in
                par_map(todo, |(id, bytes, wanted)| self.history_rows(id, spec, bytes, &wanted))
            {
                for (k, v) in found? {
                    states.entry(k).or_default().history.push(v);
                }
            }
            for (k, st) in states.iter_mut() {
                if st.current.is_none() && self.index.get(&k[..]).is_some_and(|(_, _, s)| s.deleted)
                {
                    st.latest_closed = st
                        .history
                        .iter()
                        .max_by(|a, b| spec.cmp_seq(&a.data, &b.data).then(a.exec.cmp(&b.exec)))
                        .cloned();
                }
            }
        }
        Ok(states)
    }

    /// Turns a merge output into files and actions (nothing is committed yet).
    /// Takes the output's key-index entries (they move into the pending commit).
    pub async fn stage(
        &mut self,
        spec: &Spec,
        out: &mut Output,
        exec: i64,
    ) -> Result<PendingCommit> {
        let mut pc = PendingCommit { index: std::mem::take(&mut out.index), ..Default::default() };
        let out = &*out;
        let mut lap = std::time::Instant::now();
        let mut phases: Vec<(&str, f64)> = vec![];
        let mut mark = |name: &'static str, phases: &mut Vec<(&str, f64)>| {
            phases.push((name, lap.elapsed().as_secs_f64() * 1e3));
            lap = std::time::Instant::now();
        };
        // Current partition: group upserts/removes by the file holding the key.
        // One index lookup per key: where its stored row lives, if anywhere.
        let mut touched: BTreeMap<u32, ()> = BTreeMap::new();
        let mut located: Vec<(&Key, &Version, u32, u32)> = vec![];
        let mut new_rows: Vec<(&Key, &Version)> = vec![];
        let found = self.locate(&out.upserts, |(k, _)| k);
        for ((k, v), at) in out.upserts.iter().zip(found) {
            match at {
                Some((f, row)) if f != NO_FILE => {
                    touched.insert(f, ());
                    located.push((k, v, f, row));
                }
                _ => new_rows.push((k, v)),
            }
        }
        let mut removed_at: Vec<(u32, u32)> = vec![];
        for (f, row) in self.locate(&out.removes, |k| k).into_iter().flatten() {
            if f != NO_FILE {
                touched.insert(f, ());
                removed_at.push((f, row));
            }
        }
        // Top up the newest small current file with new keys.
        let layout = self.meta.layout.clone();
        if !new_rows.is_empty() && !layout.deletion_vectors {
            if let Some((id, _)) = self
                .files
                .iter()
                .enumerate()
                .rev()
                .find_map(|(i, f)| f.as_ref().filter(|f| f.current).map(|f| (i, f)))
                .filter(|(_, f)| f.rows < layout.file_rows / 4)
            {
                touched.insert(id as u32, ());
            }
        }
        // Merge-on-read: a touched file keeps its rows and gets them masked by
        // a deletion vector, the new versions go to new files; the run then
        // costs what the batch changes, not the files it touches. A file
        // whose DV would mask half of it or more is rewritten instead.
        let mut dv_rows: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        if layout.deletion_vectors {
            for (f, row) in
                located.iter().map(|(_, _, f, r)| (*f, *r)).chain(removed_at.iter().copied())
            {
                dv_rows.entry(f).or_default().push(row as u64);
            }
        }
        let mut dv_new: Vec<(u32, roaring::RoaringTreemap)> = vec![];
        for (id, rows) in dv_rows {
            let f = self.files[id as usize].as_ref().expect("live file");
            let mut dv = f.dv.as_ref().map(|d| (**d).clone()).unwrap_or_default();
            dv.extend(rows);
            if dv.len() * 2 < f.rows as u64 {
                touched.remove(&id);
                dv_new.push((id, dv));
            }
        }
        // Replaced rows in masked files are appended like new ones; those in
        // files being rewritten are replaced in place by the rewrite below.
        let mut replace: FxMap<&Key, &Version> = FxMap::default();
        for &(k, v, f, _) in &located {
            if touched.contains_key(&f) {
                replace.insert(k, v);
            } else {
                new_rows.push((k, v));
            }
        }
        let removes: FxSet<&Key> =
            if touched.is_empty() { FxSet::default() } else { out.removes.iter().collect() };
        new_rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
        mark("plan", &mut phases);
        let mut pending_new: std::collections::VecDeque<(&Key, &Version)> = new_rows.into();
        let mut queue: Vec<(bool, Vec<Key>, RecordBatch)> = vec![];
        // scd2 closes (Need::Close): where each closed open version lives.
        let mut close_at: BTreeMap<u32, Vec<(u32, i64, bool, &Key)>> = BTreeMap::new();
        let found = self.locate(&out.closes, |(k, _, _)| k);
        for ((k, to, deleted), at) in out.closes.iter().zip(found) {
            match at {
                Some((f, row)) if f != NO_FILE => {
                    close_at.entry(f).or_default().push((row, *to, *deleted, k))
                }
                _ => {
                    return Err(TableError::Data {
                        uri: self.uri.clone(),
                        msg: "closing a version the key index does not locate".into(),
                    })
                }
            }
        }
        // Rewrites go in waves of about WAVE_ROWS rows, each decoded, filtered,
        // encoded and written before the next is read: a batch touching every
        // file of a 10M-row table holds one wave in memory, not the table.
        let mut waves: Vec<Vec<u32>> = vec![];
        let mut wave_rows = usize::MAX;
        for &id in touched.keys() {
            let rows = self.files[id as usize].as_ref().map_or(0, |f| f.rows);
            if wave_rows.saturating_add(rows) > WAVE_ROWS {
                waves.push(vec![]);
                wave_rows = 0;
            }
            wave_rows += rows;
            waves.last_mut().expect("a wave").push(id);
        }
        let many_waves = waves.len() > 1;
        for wave in waves {
            self.prefetch(&wave).await?;
            for &id in &wave {
                // Copy-on-write at the Arrow level: untouched rows are filtered
                // through as columns (never converted to values); only replaced
                // and new rows are built from versions.
                let mut keys: Vec<Key> = vec![];
                let mut kept: Vec<RecordBatch> = vec![];
                let mut changed: Vec<Version> = vec![];
                let mut changed_keys: Vec<Key> = vec![];
                let fmeta = self.files[id as usize].clone().expect("live file");
                let mut row_no = 0u32;
                for batch in self.batches(id, false).await?.iter() {
                    let bk = self.batch_keys(spec, batch);
                    let mut mask = BooleanBuilder::with_capacity(bk.len());
                    for k in bk {
                        let row = row_no;
                        row_no += 1;
                        let keep = match k {
                            // Masked by the file's deletion vector: gone (a newer version lives elsewhere).
                            _ if fmeta.deleted(row) => false,
                            None => false,
                            Some(k) if removes.contains(&k) => false,
                            Some(k) => match replace.get(&k) {
                                Some(v) => {
                                    changed.push((*v).clone());
                                    changed_keys.push(k);
                                    false
                                }
                                None => {
                                    keys.push(k);
                                    true
                                }
                            },
                        };
                        mask.append_value(keep);
                    }
                    let f = deltalake::arrow::compute::filter_record_batch(batch, &mask.finish())
                        .map_err(|e| TableError::Data {
                        uri: self.uri.clone(),
                        msg: e.to_string(),
                    })?;
                    if f.num_rows() > 0 {
                        kept.push(f);
                    }
                }
                let small =
                    self.files[id as usize].as_ref().is_some_and(|f| f.rows < layout.file_rows / 4);
                while small
                    && keys.len() + changed.len() < layout.file_rows
                    && !pending_new.is_empty()
                {
                    let (k, v) = pending_new.pop_front().unwrap();
                    changed_keys.push(k.clone());
                    changed.push(v.clone());
                }
                if !changed.is_empty() {
                    kept.push(self.to_batch(&changed)?);
                    keys.extend(changed_keys);
                }
                self.remove_file(id, &mut pc);
                let all = deltalake::arrow::compute::concat_batches(&self.arrow_schema(), &kept)
                    .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() })?;
                let mut start = 0;
                while start < all.num_rows() {
                    let len = layout.file_rows.min(all.num_rows() - start);
                    queue.push((true, keys[start..start + len].to_vec(), all.slice(start, len)));
                    start += len;
                }
            }
            if many_waves {
                let encoded =
                    encode_all(queue.iter().map(|(_, _, b)| b).collect(), &key_columns(spec))
                        .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e })?;
                for ((current, keys, batch), bytes) in
                    std::mem::take(&mut queue).into_iter().zip(encoded)
                {
                    self.put_file(current, keys, batch.num_rows(), bytes, exec, &mut pc).await?;
                }
                let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                for id in &wave {
                    c.remove(id);
                }
            }
        }
        mark("rewrite", &mut phases);
        if !pending_new.is_empty() {
            let n = pending_new.len();
            let chunk = if layout.deletion_vectors {
                // Even files (not one full and one remainder): they are encoded in parallel.
                n.div_ceil(n.div_ceil(layout.file_rows.max(1)))
            } else {
                n.div_ceil(layout.spread.max(1))
                    .clamp(MIN_FILE_ROWS.min(layout.file_rows), layout.file_rows)
            };
            let all: Vec<(&Key, &Version)> = pending_new.into_iter().collect();
            for c in all.chunks(chunk) {
                let keys: Vec<Key> = c.iter().map(|(k, _)| (*k).clone()).collect();
                let vs: Vec<&Version> = c.iter().map(|(_, v)| *v).collect();
                queue.push((true, keys, self.to_batch_refs(&vs)?));
            }
        }
        mark("build", &mut phases);
        if !dv_new.is_empty() {
            self.stage_deletion_vectors(dv_new, &mut pc).await?;
        }
        mark("deletion_vectors", &mut phases);
        // History partition: appends go to new files, replacements rewrite theirs.
        let mut hist_touched: BTreeMap<u32, HashMap<u32, &Version>> = BTreeMap::new();
        for (loc, v) in &out.history_replacements {
            hist_touched.entry(loc.file).or_default().insert(loc.row, v);
        }
        let mut appends: Vec<Version> = out.history_appends.clone();
        for (id, repl) in hist_touched {
            let rows = self.read_file(id, spec).await?;
            for v in rows.versions {
                // `Loc.row` is the physical row (rows masked by a DV are not in `rows`).
                let row = v.loc.map_or(u32::MAX, |l| l.row);
                appends.push(repl.get(&row).map(|v| (*v).clone()).unwrap_or(v));
            }
            self.remove_file(id, &mut pc);
        }
        for c in appends.chunks(layout.file_rows.max(1)) {
            let keys = c.iter().filter_map(|v| spec.key_of(&v.data)).collect();
            queue.push((false, keys, self.to_batch(c)?));
        }
        let (closed, closed_keys) = self.stage_closes(close_at).await?;
        if !closed.is_empty() {
            // One run's closes go to full history files, not one small file per source file.
            let all = deltalake::arrow::compute::concat_batches(&self.arrow_schema(), &closed)
                .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() })?;
            let n = all.num_rows();
            let chunk = n.div_ceil(n.div_ceil(layout.file_rows.max(1)));
            let mut start = 0;
            while start < n {
                let len = chunk.min(n - start);
                queue.push((
                    false,
                    closed_keys[start..start + len].to_vec(),
                    all.slice(start, len),
                ));
                start += len;
            }
        }
        mark("closes", &mut phases);
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // Parquet encoding is the CPU-heavy part: spread it over the cores.
        mark("history", &mut phases);
        let encoded = encode_all(queue.iter().map(|(_, _, b)| b).collect(), &key_columns(spec))
            .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e })?;
        mark("encode", &mut phases);
        for ((current, keys, batch), bytes) in queue.into_iter().zip(encoded) {
            self.put_file(current, keys, batch.num_rows(), bytes, exec, &mut pc).await?;
        }
        mark("put", &mut phases);
        tracing::debug!(phases_ms = ?phases, "stage phases");
        Ok(pc)
    }

    /// scd2 closes at the Arrow level: the stored rows are read as they are
    /// (only those rows, see [`TableStore::read_selected`]), `_valid_to` and
    /// `_is_deleted` set, and returned for history files with their keys.
    /// Nothing becomes a value; every other column (data, `_valid_from`,
    /// `_execution_id`, surrogate key) is carried over.
    async fn stage_closes(
        &self,
        close_at: BTreeMap<u32, Vec<(u32, i64, bool, &Key)>>,
    ) -> Result<(Vec<RecordBatch>, Vec<Key>)> {
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let r = &self.meta.reserved;
        let mut want = BTreeMap::new();
        let mut meta = BTreeMap::new();
        for (id, mut rows) in close_at {
            rows.sort_unstable_by_key(|x| x.0);
            want.insert(id, rows.iter().map(|x| x.0).collect::<Vec<u32>>());
            meta.insert(id, rows);
        }
        // Rows `load_states` already read for these closes; anything else is read now.
        let stash = std::mem::take(&mut *self.selected.lock().unwrap_or_else(|e| e.into_inner()));
        let mut got = vec![];
        for (id, rows, batch) in stash {
            let Some(need) = want.get(&id) else { continue };
            let pos: Option<Vec<u32>> =
                need.iter().map(|r| rows.binary_search(r).ok().map(|p| p as u32)).collect();
            if let Some(pos) = pos {
                let idx = deltalake::arrow::array::UInt32Array::from(pos);
                got.push((
                    id,
                    deltalake::arrow::compute::take_record_batch(&batch, &idx)
                        .map_err(|e| data_err(e.to_string()))?,
                ));
                want.remove(&id);
            }
        }
        for (id, _, batch) in self.read_selected(want).await? {
            got.push((id, batch));
        }
        let (mut closed, mut keys) = (vec![], vec![]);
        for (id, batch) in got {
            let here = &meta[&id];
            let schema = batch.schema();
            let mut cols = batch.columns().to_vec();
            let at = |name: &str| schema.index_of(name).map_err(|e| data_err(e.to_string()));
            cols[at(&r.valid_to)?] = Arc::new(
                TimestampMicrosecondArray::from_iter_values(here.iter().map(|x| x.1))
                    .with_timezone("UTC"),
            );
            cols[at(&r.is_deleted)?] =
                Arc::new(BooleanArray::from_iter(here.iter().map(|x| Some(x.2))));
            closed.push(RecordBatch::try_new(schema, cols).map_err(|e| data_err(e.to_string()))?);
            keys.extend(here.iter().map(|x| x.3.clone()));
        }
        Ok((closed, keys))
    }

    /// Writes one deletion-vector file for the run (Delta format: version
    /// byte, then per vector its big-endian size, the portable RoaringTreemap
    /// with its magic, and a big-endian CRC-32) and stages, per file, the
    /// remove of its old `add` and an `add` of the same path with the new DV.
    async fn stage_deletion_vectors(
        &mut self,
        dvs: Vec<(u32, roaring::RoaringTreemap)>,
        pc: &mut PendingCommit,
    ) -> Result<()> {
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
        let mut buf = vec![1u8];
        let mut spans = vec![];
        for (_, dv) in &dvs {
            let mut body = DV_MAGIC.to_le_bytes().to_vec();
            dv.serialize_into(&mut body).map_err(|e| data_err(format!("deletion vector: {e}")))?;
            spans.push((buf.len() as i32, body.len() as i32));
            buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
            buf.extend_from_slice(&body);
            buf.extend_from_slice(&crc.checksum(&body).to_be_bytes());
        }
        let uuid = uuid::Uuid::new_v4();
        let path = format!("deletion_vector_{uuid}.bin");
        self.store()?
            .put(&Path::from(path.as_str()), buf.into())
            .await
            .map_err(|e| data_err(format!("writing {path}: {e}")))?;
        let z = z85::encode(uuid.as_bytes());
        for ((id, dv), (offset, size)) in dvs.into_iter().zip(spans) {
            let f = self.files[id as usize].clone().expect("live file");
            let desc = DeletionVectorDescriptor {
                storage_type: StorageType::UuidRelativePath,
                path_or_inline_dv: z.clone(),
                offset: Some(offset),
                size_in_bytes: size,
                cardinality: dv.len() as i64,
            };
            let mut pv = HashMap::new();
            if let Some(p) = self.meta.partition() {
                pv.insert(p.to_string(), Some(f.current.to_string()));
            }
            pc.actions.push(Action::Remove(Remove {
                path: f.path.clone(),
                data_change: true,
                deletion_timestamp: Some(chrono::Utc::now().timestamp_millis()),
                extended_file_metadata: Some(true),
                partition_values: Some(pv.clone()),
                size: Some(f.size),
                tags: None,
                deletion_vector: f.dv_desc.clone(),
                base_row_id: None,
                default_row_commit_version: None,
            }));
            pc.actions.push(Action::Add(Add {
                path: f.path.clone(),
                partition_values: pv,
                size: f.size,
                modification_time: chrono::Utc::now().timestamp_millis(),
                data_change: true,
                stats: Some(format!("{{\"numRecords\":{}}}", f.rows)),
                tags: None,
                deletion_vector: Some(desc.clone()),
                base_row_id: None,
                default_row_commit_version: None,
                clustering_provider: None,
            }));
            pc.dv_updates.push((id, dv, desc));
            pc.files_masked += 1;
        }
        Ok(())
    }

    /// Small-file compaction: once a partition holds `compact_min_files` files
    /// under a quarter of `file_rows` (streaming runs add small files), they
    /// are rewritten into full ones. Rows are moved as Arrow columns, never
    /// changed; the commit marks the actions `dataChange: false`, so readers
    /// see the same rows before and after and streaming readers skip it.
    /// Returns the staged commit, or None when nothing needs compacting.
    pub async fn stage_compaction(&mut self, spec: &Spec) -> Result<Option<PendingCommit>> {
        let layout = self.meta.layout.clone();
        if layout.compact_min_files == 0 || self.table.is_none() {
            return Ok(None);
        }
        let mut pc = PendingCommit { rearrange: true, ..Default::default() };
        // Small = a streaming run's leftovers, not the deliberately spread
        // files of a bulk load (those keep updates to recent keys cheap).
        let small_file = (layout.file_rows / 4).min(COMPACT_BELOW_ROWS);
        for current in [true, false] {
            let small: Vec<u32> = self
                .files
                .iter()
                .enumerate()
                .filter_map(|(i, f)| {
                    f.as_ref()
                        .filter(|f| f.current == current && f.live_rows() < small_file)
                        .map(|_| i as u32)
                })
                .collect();
            if small.len() < layout.compact_min_files {
                continue;
            }
            let mut batches = vec![];
            let mut keys: Vec<Key> = vec![];
            for &id in &small {
                let f = self.files[id as usize].clone().expect("live file");
                let mut row_no = 0u32;
                for b in self.batches(id, false).await?.iter() {
                    // Rows masked by a deletion vector are dropped here for good
                    // (and, in the current partition, rows without a key: the
                    // key list must stay aligned with the rows written).
                    let bk = if current { self.batch_keys(spec, b) } else { vec![] };
                    let live: BooleanArray = (0..b.num_rows())
                        .map(|r| {
                            Some(!f.deleted(row_no + r as u32) && (!current || bk[r].is_some()))
                        })
                        .collect();
                    row_no += b.num_rows() as u32;
                    let b =
                        deltalake::arrow::compute::filter_record_batch(b, &live).map_err(|e| {
                            TableError::Data { uri: self.uri.clone(), msg: e.to_string() }
                        })?;
                    keys.extend(
                        bk.into_iter()
                            .enumerate()
                            .filter(|(r, k)| k.is_some() && live.value(*r))
                            .map(|(_, k)| k.expect("some")),
                    );
                    batches.push(b);
                }
                self.remove_file(id, &mut pc);
            }
            let all = deltalake::arrow::compute::concat_batches(&self.arrow_schema(), &batches)
                .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() })?;
            let mut queue = vec![];
            let mut start = 0;
            while start < all.num_rows() {
                let len = layout.file_rows.min(all.num_rows() - start);
                let k = if current { keys[start..start + len].to_vec() } else { vec![] };
                queue.push((current, k, all.slice(start, len)));
                start += len;
            }
            let encoded = encode_all(queue.iter().map(|(_, _, b)| b).collect(), &key_columns(spec))
                .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e })?;
            for ((cur, k, batch), bytes) in queue.into_iter().zip(encoded) {
                self.put_file(cur, k, batch.num_rows(), bytes, 0, &mut pc).await?;
            }
        }
        Ok((pc.files_removed > 0).then_some(pc))
    }

    /// Writes a Delta checkpoint of the current version, then vacuums files
    /// removed longer ago than the retention. Neither changes what a reader
    /// of the current version sees.
    pub async fn checkpoint_and_vacuum(&mut self) -> Result<usize> {
        let Some(t) = self.table.clone() else { return Ok(0) };
        deltalake::checkpoints::create_checkpoint(&t, None).await.map_err(|e| self.delta(e))?;
        let Some(retention) = self.meta.layout.vacuum_retention else { return Ok(0) };
        let retention = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::days(7));
        // The vacuum's own log entries (VACUUM START/END) carry no data; our
        // table state stays at our last commit (see `commit_inner`).
        let (_, m) = t
            .clone()
            .vacuum()
            .with_retention_period(retention)
            .with_enforce_retention_duration(false)
            .await
            .map_err(|e| self.delta(e))?;
        let swept = self.sweep(&t, retention).await?;
        Ok(m.files_deleted.len() + swept)
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
    async fn sweep(&self, t: &DeltaTable, retention: chrono::Duration) -> Result<usize> {
        use deltalake::table::config::TablePropertiesExt;
        let Some(version) = t.version() else { return Ok(0) };
        let store = self.store()?;
        let checkpoint = Path::from(format!("_delta_log/{version:020}.checkpoint.parquet"));
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let bytes = match store.get(&checkpoint).await {
            Ok(r) => r.bytes().await.map_err(|e| data_err(format!("reading {checkpoint}: {e}")))?,
            Err(e) => {
                tracing::debug!(%checkpoint, error = %e, "no single-file checkpoint; deletion vectors and orphans not swept this time");
                return Ok(0);
            }
        };
        let now = chrono::Utc::now().timestamp_millis();
        let cutoff = now - retention.num_milliseconds();
        // What is live comes from the checkpoint (the snapshot at this
        // version, other writers' commits included), not from our own view.
        let (adds, tombs) =
            checkpoint_files(bytes).map_err(|e| data_err(format!("{checkpoint}: {e}")))?;
        let mut keep: HashSet<String> = HashSet::new();
        for f in adds {
            keep.extend(f.dv);
            keep.insert(f.path);
        }
        let mut expired: HashSet<String> = HashSet::new();
        for t in &tombs {
            keep.insert(t.path.clone());
            if let Some(dv) = &t.dv {
                if t.removed_at < cutoff {
                    expired.insert(dv.clone());
                } else {
                    keep.insert(dv.clone());
                }
            }
        }
        let mut doomed: Vec<String> = expired.difference(&keep).cloned().collect();
        let tombstone_retention = t
            .snapshot()
            .map_err(|e| self.delta(e))?
            .table_config()
            .deleted_file_retention_duration();
        if retention.to_std().is_ok_and(|r| r <= tombstone_retention) {
            let ours = |name: &str| {
                (name.starts_with("part-") && name.ends_with(".parquet"))
                    || (name.starts_with("deletion_vector_") && name.ends_with(".bin"))
            };
            let top = store
                .list_with_delimiter(None)
                .await
                .map_err(|e| data_err(format!("listing the table: {e}")))?;
            let mut objects = top.objects;
            for dir in top.common_prefixes {
                if dir.filename().is_some_and(|d| {
                    self.meta.partition().is_some_and(|p| d.starts_with(&format!("{p}=")))
                }) {
                    objects.extend(
                        store
                            .list_with_delimiter(Some(&dir))
                            .await
                            .map_err(|e| data_err(format!("listing {dir}: {e}")))?
                            .objects,
                    );
                }
            }
            // Another writer's file may wait a while for its commit: never
            // take one younger than an hour for an orphan, whatever the retention.
            let orphan_cutoff = cutoff.min(now - ORPHAN_MIN_AGE_MS);
            for o in objects {
                let path = o.location.to_string();
                let old = o.last_modified.timestamp_millis() < orphan_cutoff;
                if o.location.filename().is_some_and(ours)
                    && old
                    && !keep.contains(&path)
                    && !expired.contains(&path)
                {
                    doomed.push(path);
                }
            }
        }
        let mut deleted = 0;
        for file in doomed {
            match store.delete(&Path::from(file.as_str())).await {
                Ok(()) => deleted += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(data_err(format!("deleting {file}: {e}"))),
            }
        }
        Ok(deleted)
    }

    fn remove_file(&self, id: u32, pc: &mut PendingCommit) {
        let f = self.files[id as usize].as_ref().expect("live file");
        let mut pv = HashMap::new();
        if let Some(p) = self.meta.partition() {
            pv.insert(p.to_string(), Some(f.current.to_string()));
        }
        pc.actions.push(Action::Remove(Remove {
            path: f.path.clone(),
            data_change: !pc.rearrange,
            deletion_timestamp: Some(chrono::Utc::now().timestamp_millis()),
            extended_file_metadata: Some(true),
            partition_values: Some(pv),
            size: Some(f.size),
            tags: None,
            deletion_vector: f.dv_desc.clone(),
            base_row_id: None,
            default_row_commit_version: None,
        }));
        pc.removed.push(id);
        pc.files_removed += 1;
    }

    fn arrow_schema(&self) -> Arc<ArrowSchema> {
        let mut fields: Vec<Field> =
            self.columns.iter().map(|(n, t)| Field::new(n, arrow_type(*t), true)).collect();
        for (n, t) in self.meta.system_fields() {
            fields.push(Field::new(n, arrow_type(t), true));
        }
        Arc::new(ArrowSchema::new(fields))
    }

    /// The Delta schema: data columns, system columns, then the partition column.
    pub fn delta_schema(&self) -> StructType {
        let mut fields: Vec<StructField> = self
            .columns
            .iter()
            .map(|(n, t)| StructField::new(n.clone(), delta_type(*t), true))
            .collect();
        for (n, t) in self.meta.system_fields() {
            fields.push(StructField::new(n, delta_type(t), true));
        }
        if let Some(p) = self.meta.partition() {
            fields.push(StructField::new(p.to_string(), delta_type(DType::Bool), true));
        }
        StructType::try_new(fields).expect("unique column names")
    }

    /// Stores an encoded data file and stages its `add` action.
    async fn put_file(
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

    fn to_batch(&self, versions: &[Version]) -> Result<RecordBatch> {
        self.to_batch_refs(&versions.iter().collect::<Vec<_>>())
    }

    fn to_batch_refs(&self, versions: &[&Version]) -> Result<RecordBatch> {
        // Column by column on all cores: each column is an independent pass over the versions.
        let cols: Vec<(usize, DType)> =
            self.columns.iter().enumerate().map(|(i, (_, t))| (i, *t)).collect();
        let mut arrays: Vec<ArrayRef> = par_map(cols, |(i, t)| {
            build_array_ref(t, versions.iter().map(|v| v.data.get(i).unwrap_or(&Value::Null)))
        });
        for (n, t) in self.meta.system_fields() {
            let r = &self.meta.reserved;
            let vals: Vec<Value> = versions
                .iter()
                .map(|v| {
                    if n == r.valid_from {
                        v.valid_from.map(Value::Ts).unwrap_or(Value::Null)
                    } else if n == r.valid_to {
                        v.valid_to.map(Value::Ts).unwrap_or(Value::Null)
                    } else if n == r.is_deleted {
                        Value::Bool(v.deleted)
                    } else if n == r.execution_id {
                        Value::Int(v.exec)
                    } else {
                        v.sk.map(Value::Int).unwrap_or(Value::Null)
                    }
                })
                .collect();
            arrays.push(build_array(t, vals.into_iter()));
        }
        RecordBatch::try_new(self.arrow_schema(), arrays)
            .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() })
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
    async fn create_with_deletion_vectors(
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

    async fn commit_inner(
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
    fn finish_commit(&mut self, pc: PendingCommit, version: i64, exec: Option<i64>) -> Result<i64> {
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

    /// Reads every row of the table (for `show` and tests).
    pub async fn read_all(&self, spec: &Spec) -> Result<Vec<Version>> {
        let mut out = vec![];
        for id in 0..self.files.len() as u32 {
            if self.files[id as usize].is_some() {
                out.extend(self.read_file(id, spec).await?.versions);
            }
        }
        Ok(out)
    }
}

/// Like [`build_array`], borrowing the values (no per-cell clone).
fn build_array_ref<'a>(t: DType, vals: impl Iterator<Item = &'a Value>) -> ArrayRef {
    match t {
        DType::Bool => Arc::new(
            vals.map(|v| if let Value::Bool(x) = v { Some(*x) } else { None })
                .collect::<BooleanArray>(),
        ),
        DType::Int => Arc::new(
            vals.map(|v| if let Value::Int(x) = v { Some(*x) } else { None })
                .collect::<Int64Array>(),
        ),
        DType::Float => Arc::new(
            vals.map(|v| match v {
                Value::Float(x) => Some(*x),
                Value::Int(x) => Some(*x as f64),
                _ => None,
            })
            .collect::<Float64Array>(),
        ),
        DType::Str => {
            let mut b = StringBuilder::new();
            for v in vals {
                match v {
                    Value::Null => b.append_null(),
                    Value::Str(s) => b.append_value(s),
                    other => b.append_value(other.to_string()),
                }
            }
            Arc::new(b.finish())
        }
        DType::Ts => Arc::new(
            vals.map(|v| if let Value::Ts(x) = v { Some(*x) } else { None })
                .collect::<TimestampMicrosecondArray>()
                .with_timezone("UTC"),
        ),
    }
}

fn build_array(t: DType, vals: impl Iterator<Item = Value>) -> ArrayRef {
    match t {
        DType::Bool => {
            let mut b = BooleanBuilder::new();
            vals.for_each(|v| b.append_option(if let Value::Bool(x) = v { Some(x) } else { None }));
            Arc::new(b.finish())
        }
        DType::Int => {
            let mut b = Int64Builder::new();
            vals.for_each(|v| b.append_option(if let Value::Int(x) = v { Some(x) } else { None }));
            Arc::new(b.finish())
        }
        DType::Float => {
            let mut b = Float64Builder::new();
            vals.for_each(|v| {
                b.append_option(match v {
                    Value::Float(x) => Some(x),
                    Value::Int(x) => Some(x as f64),
                    _ => None,
                })
            });
            Arc::new(b.finish())
        }
        DType::Str => {
            let mut b = StringBuilder::new();
            vals.for_each(|v| {
                if v.is_null() {
                    b.append_null()
                } else {
                    b.append_value(v.to_string())
                }
            });
            Arc::new(b.finish())
        }
        DType::Ts => {
            let mut b = TimestampMicrosecondBuilder::new().with_timezone("UTC");
            vals.for_each(|v| b.append_option(if let Value::Ts(x) = v { Some(x) } else { None }));
            Arc::new(b.finish())
        }
    }
}

fn encode_parquet(
    batch: &RecordBatch,
    key_columns: &[String],
) -> std::result::Result<Vec<u8>, String> {
    // ZSTD level 1: most of level 3's ratio on CRM text at about twice the speed. No
    // dictionaries: CRM columns are mostly unique text, where building a dictionary
    // and then falling back cost a quarter of the encoding time and ZSTD alone
    // compressed the bench table 17% smaller.
    let level = ZstdLevel::try_new(1).map_err(|e| e.to_string())?;
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_dictionary_enabled(false);
    // Bloom filters on the business key (see `KeyFilter`), sized for the
    // file's rows at 1% false positives (the writer folds them down to fit).
    for k in key_columns.iter().filter(|k| batch.schema().index_of(k).is_ok()) {
        let path = deltalake::parquet::schema::types::ColumnPath::from(k.as_str());
        props = props
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path.clone(), 0.01)
            .set_column_bloom_filter_max_ndv(path, batch.num_rows().max(1) as u64);
    }
    let props = props.build();
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut w =
        ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).map_err(|e| e.to_string())?;
    w.write(batch).map_err(|e| e.to_string())?;
    w.close().map_err(|e| e.to_string())?;
    Ok(buf)
}

/// Business-key column names: every file gets parquet bloom filters on them
/// (see [`KeyFilter`]).
fn key_columns(spec: &Spec) -> Vec<String> {
    spec.key.iter().map(|&i| spec.names[i].clone()).collect()
}

/// Encodes batches on all cores, results in input order.
fn encode_all(
    batches: Vec<&RecordBatch>,
    key_columns: &[String],
) -> std::result::Result<Vec<Vec<u8>>, String> {
    par_map(batches, |b| encode_parquet(b, key_columns)).into_iter().collect()
}

/// The key columns of one Arrow batch, encoded row by row into key bytes
/// exactly as [`crate::merge::key_from`] over converted cells would, without
/// building a [`Value`] per cell: scanning history for keys touches every
/// stored row, and a String per row cost most of that scan.
struct KeyCols<'a>(Vec<KeyCol<'a>>);

enum KeyCol<'a> {
    Str(&'a StringArray),
    Int(&'a Int64Array),
    Other(&'a ArrayRef, DType),
    Missing,
}

impl<'a> KeyCols<'a> {
    fn new(cols: &'a [(Option<ArrayRef>, DType)]) -> Self {
        KeyCols(
            cols.iter()
                .map(|(c, t)| match (c, t) {
                    (None, _) => KeyCol::Missing,
                    (Some(c), DType::Str) if c.as_any().is::<StringArray>() => {
                        KeyCol::Str(c.as_any().downcast_ref().expect("checked"))
                    }
                    (Some(c), DType::Int) if c.as_any().is::<Int64Array>() => {
                        KeyCol::Int(c.as_any().downcast_ref().expect("checked"))
                    }
                    (Some(c), t) => KeyCol::Other(c, *t),
                })
                .collect(),
        )
    }

    /// Row `i`'s key into `out` (cleared first); false when every part is NULL.
    fn encode(&self, i: usize, out: &mut Vec<u8>) -> bool {
        out.clear();
        let mut any = false;
        for c in &self.0 {
            match c {
                KeyCol::Str(a) if a.is_valid(i) => {
                    let v = a.value(i);
                    out.push(4);
                    out.extend_from_slice(&(v.len() as u32).to_be_bytes());
                    out.extend_from_slice(v.as_bytes());
                    any = true;
                }
                KeyCol::Int(a) if a.is_valid(i) => {
                    out.push(2);
                    out.extend_from_slice(&a.value(i).to_be_bytes());
                    any = true;
                }
                KeyCol::Other(a, t) => {
                    let v = cell(a, i).convert(*t).unwrap_or(Value::Null);
                    any |= !v.is_null();
                    v.encode(out);
                }
                _ => out.push(0),
            }
        }
        any
    }
}

/// One Arrow cell as a [`Value`].
pub fn cell(a: &ArrayRef, i: usize) -> Value {
    if a.is_null(i) {
        return Value::Null;
    }
    let any = a.as_any();
    if let Some(x) = any.downcast_ref::<Int64Array>() {
        Value::Int(x.value(i))
    } else if let Some(x) = any.downcast_ref::<Int32Array>() {
        Value::Int(x.value(i) as i64)
    } else if let Some(x) = any.downcast_ref::<Float64Array>() {
        Value::Float(x.value(i))
    } else if let Some(x) = any.downcast_ref::<Float32Array>() {
        Value::Float(x.value(i) as f64)
    } else if let Some(x) = any.downcast_ref::<BooleanArray>() {
        Value::Bool(x.value(i))
    } else if let Some(x) = any.downcast_ref::<StringArray>() {
        Value::Str(x.value(i).to_string())
    } else if let Some(x) = any.downcast_ref::<LargeStringArray>() {
        Value::Str(x.value(i).to_string())
    } else if let Some(x) = any.downcast_ref::<StringViewArray>() {
        Value::Str(x.value(i).to_string())
    } else if let Some(x) = any.downcast_ref::<TimestampMicrosecondArray>() {
        Value::Ts(x.value(i))
    } else if let Some(x) = any.downcast_ref::<TimestampMillisecondArray>() {
        Value::Ts(x.value(i) * 1000)
    } else if let Some(x) = any.downcast_ref::<TimestampNanosecondArray>() {
        Value::Ts(x.value(i) / 1000)
    } else if let Some(x) = any.downcast_ref::<Date32Array>() {
        Value::Ts(x.value(i) as i64 * 86_400_000_000)
    } else {
        Value::Null
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn filter_of(bytes: Vec<u8>, keys: &[String]) -> Option<KeyFilter> {
        let bytes = bytes::Bytes::from(bytes);
        KeyFilter::load(bytes.len() as u64, keys, |r| {
            let b = bytes.clone();
            async move { Ok(b.slice(r.start as usize..r.end as usize)) }
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn key_bloom_filters_never_hide_a_stored_key_and_rule_out_most_others() {
        let schema = Arc::new(ArrowSchema::new(vec![
            Field::new("id", ArrowType::Utf8, true),
            Field::new("n", ArrowType::Int64, true),
            Field::new("city", ArrowType::Utf8, true),
        ]));
        let ids: Vec<Option<String>> =
            (0..5000).map(|i| (i % 100 != 0).then(|| format!("acc-{i}"))).collect();
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(ids.clone())),
                Arc::new(Int64Array::from_iter_values((0..5000).map(|i| i * 3))),
                Arc::new(StringArray::from_iter_values((0..5000).map(|i| format!("c{i}")))),
            ],
        )
        .unwrap();
        let keys = vec!["id".to_string(), "n".to_string()];
        let f = filter_of(encode_parquet(&batch, &keys).unwrap(), &keys)
            .await
            .expect("filters written");
        for i in 0..5000i64 {
            let id = ids[i as usize].clone().map_or(Value::Null, Value::Str);
            assert!(f.may_contain(&[id, Value::Int(i * 3)]), "stored key {i} hidden");
        }
        let absent = (5000..15000)
            .filter(|i| f.may_contain(&[Value::Str(format!("acc-{i}")), Value::Int(*i)]))
            .count();
        assert!(absent < 100, "{absent} of 10000 absent keys pass a 1% filter");
        // Only one column ruled out is enough; types the filter cannot probe pass.
        assert!(!(5000..5100)
            .all(|i| f.may_contain(&[Value::Str("acc-1".into()), Value::Int(i * 3 + 1)])));
        assert!(
            f.may_contain(&[Value::Int(17), Value::Str("x".into())]),
            "a type mismatch is a maybe"
        );
        // Files without filters (written before them) give no filter: they are scanned.
        assert!(filter_of(encode_parquet(&batch, &[]).unwrap(), &keys).await.is_none());
    }
}
