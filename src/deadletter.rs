//! The `_dead_letters` Delta table (docs/bad-input.md): rows that could not be decoded or
//! converted, kept verbatim with the reason. Its commits carry the same kind
//! of `txn` actions as data tables, so a replay never writes a dead letter twice.

use std::collections::HashMap;
use std::sync::Arc;

use crate::storage::Location;
use base64::Engine;
use deltalake::arrow::array::{
    ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use deltalake::arrow::datatypes::{DataType as ArrowType, Field, Schema, TimeUnit};
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{DataType, PrimitiveType, StructField, StructType, Transaction};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::{DeltaTable, Path};
use object_store::ObjectStoreExt;

use crate::table::{
    create_table, encode_parquet, file_stats, open_existing, Codec, Cuts, DataChange, FileAction,
    NewTable, StatsColumns, TableError,
};

#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub table: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub raw: Vec<u8>,
    pub error: String,
}

/// How a group of dead letters is made idempotent: a `txn` app id and version,
/// and whether the version is a Kafka next-offset (rows below it were written
/// already) or an opaque file content version (written iff equal).
#[derive(Debug, Clone)]
pub struct Group {
    pub app: String,
    pub version: i64,
    pub by_offset: bool,
    pub rows: Vec<DeadLetter>,
}

/// Appends the groups' rows that are not yet recorded, in one commit.
pub async fn append(loc: &Location, groups: Vec<Group>) -> Result<usize, TableError> {
    let uri = &crate::storage::redact_url(loc.uri());
    let derr =
        |e: deltalake::DeltaTableError| TableError::Delta { uri: uri.to_string(), source: e };
    let data_err = |msg: String| TableError::Data { uri: uri.to_string(), msg };
    let existing = open_existing(loc).await?;
    let (rows, txns) = fresh_rows(uri, existing.as_ref(), groups).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    // The same parquet settings as data tables (no business key to filter on).
    let batch = to_batch(&rows).map_err(data_err)?;
    let buf = encode_parquet(&batch, &[], Codec::Zstd, Cuts::default()).map_err(data_err)?;
    let stats = file_stats(&batch, &StatsColumns::default(), &batch.schema());
    let name = format!("part-{}.parquet", uuid::Uuid::new_v4());
    let file = FileAction {
        path: &name,
        partition_values: HashMap::new(),
        size: buf.len() as i64,
        rows: rows.len(),
        deletion_vector: None,
        stats: Some(&stats),
    };
    let add = crate::table::add(file, DataChange::Rows);
    // Appends commute (their `txn`s keep one group from landing twice), so
    // delta-rs may rebase them over other writers' commits; a create may not.
    let mut props = CommitProperties::default().with_application_transactions(txns);
    if existing.is_none() {
        props = props.with_max_retries(0);
    }
    let store = match &existing {
        Some(t) => t.object_store(),
        None => loc.object_store()?,
    };
    store.put(&Path::from(name.as_str()), buf.into()).await.map_err(|source| TableError::Io {
        uri: uri.to_string(),
        what: format!("writing {name}"),
        source,
    })?;
    match existing {
        None => {
            let new = NewTable {
                name: "_dead_letters",
                schema: delta_schema(),
                partition: None,
                properties: HashMap::new(),
                deletion_vectors: false,
            };
            create_table(loc, new, vec![add], props).await?;
        }
        Some(t) => {
            let snap = t.snapshot().map_err(derr)?;
            let op = DeltaOperation::Write {
                mode: SaveMode::Append,
                partition_by: None,
                predicate: None,
            };
            CommitBuilder::from(props)
                .with_actions(vec![add])
                .build(Some(snap), t.log_store(), op)
                .await
                .map_err(derr)?;
        }
    }
    Ok(rows.len())
}

/// The rows of each group not recorded yet, and the `txn` actions that will
/// record them: below a Kafka group's stored next offset everything was
/// written; a file group was written iff its stored version is equal.
async fn fresh_rows(
    uri: &str,
    existing: Option<&DeltaTable>,
    groups: Vec<Group>,
) -> Result<(Vec<DeadLetter>, Vec<Transaction>), TableError> {
    let mut rows: Vec<DeadLetter> = vec![];
    let mut txns = vec![];
    for g in groups {
        let stored = match existing {
            Some(t) => crate::progress::stored_version(t, &g.app)
                .await
                .map_err(|e| TableError::Delta { uri: uri.to_string(), source: e })?,
            None => None,
        };
        let fresh: Vec<DeadLetter> = match (stored, g.by_offset) {
            (Some(v), true) => g.rows.into_iter().filter(|r| r.offset >= v).collect(),
            (Some(v), false) if v == g.version => vec![],
            _ => g.rows,
        };
        if !fresh.is_empty() {
            rows.extend(fresh);
            txns.push(Transaction::new(&g.app, g.version));
        }
    }
    Ok((rows, txns))
}

/// Dead letters as one Arrow batch (raw bytes as base64, written now).
fn to_batch(rows: &[DeadLetter]) -> Result<RecordBatch, String> {
    let now = chrono::Utc::now().timestamp_micros();
    let b64 = base64::engine::general_purpose::STANDARD;
    let schema = Arc::new(Schema::new(vec![
        Field::new("table", ArrowType::Utf8, true),
        Field::new("topic", ArrowType::Utf8, true),
        Field::new("partition", ArrowType::Int32, true),
        Field::new("offset", ArrowType::Int64, true),
        Field::new("raw_base64", ArrowType::Utf8, true),
        Field::new("error", ArrowType::Utf8, true),
        Field::new("time", ArrowType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
    ]));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.table.as_str()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.topic.as_str()))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.partition))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.offset))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| b64.encode(&r.raw)))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.error.as_str()))),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(rows.iter().map(|_| now))
                .with_timezone("UTC"),
        ),
    ];
    RecordBatch::try_new(schema, cols).map_err(|e| e.to_string())
}

/// The dead-letter table's Delta schema (the Arrow one in `append`).
fn delta_schema() -> StructType {
    let p = DataType::Primitive;
    StructType::try_new([
        StructField::new("table", p(PrimitiveType::String), true),
        StructField::new("topic", p(PrimitiveType::String), true),
        StructField::new("partition", p(PrimitiveType::Integer), true),
        StructField::new("offset", p(PrimitiveType::Long), true),
        StructField::new("raw_base64", p(PrimitiveType::String), true),
        StructField::new("error", p(PrimitiveType::String), true),
        StructField::new("time", p(PrimitiveType::Timestamp), true),
    ])
    .expect("unique column names")
}

/// Reads every dead letter (for `demo` and tests): header and rows.
pub async fn read_all(
    loc: &Location,
) -> Result<(Vec<String>, Vec<Vec<crate::value::Value>>), TableError> {
    use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let Some(t) = open_existing(loc).await? else { return Ok((vec![], vec![])) };
    let uri = &crate::storage::redact_url(loc.uri());
    let derr =
        |e: deltalake::DeltaTableError| TableError::Delta { uri: uri.to_string(), source: e };
    let data_err = |msg: String| TableError::Data { uri: uri.to_string(), msg };
    let snap = t.snapshot().map_err(derr)?;
    let store = t.object_store();
    let header: Vec<String> = snap.schema().fields().map(|f| f.name().to_string()).collect();
    let mut rows = vec![];
    for f in snap.log_data() {
        let bytes = store
            .get(&Path::from(f.path().as_ref()))
            .await
            .map_err(|e| data_err(e.to_string()))?
            .bytes()
            .await
            .map_err(|e| data_err(e.to_string()))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| b.build())
            .map_err(|e| data_err(e.to_string()))?;
        for batch in reader {
            let batch = batch.map_err(|e| data_err(e.to_string()))?;
            for i in 0..batch.num_rows() {
                rows.push(
                    header
                        .iter()
                        .map(|h| {
                            batch
                                .column_by_name(h)
                                .map(|c| crate::table::cell(c, i))
                                .unwrap_or(crate::value::Value::Null)
                        })
                        .collect(),
                );
            }
        }
    }
    rows.sort_by(|a: &Vec<crate::value::Value>, b| crate::value::cmp_slices(&a[1..4], &b[1..4]));
    Ok((header, rows))
}
