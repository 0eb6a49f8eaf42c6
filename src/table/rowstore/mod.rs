//! Current rows kept row-wise beside the table, so that an scd2 close reads
//! only the rows it closes (docs/scd2.md, "Closing without reading column
//! chunks").
//!
//! Closing a version copies the stored row into history, so the close needs
//! every value of that row. In parquet a row's values sit in one page per
//! column, and with updates spread over the keys every page of every current
//! file holds some row being closed: reading a hundred thousand rows out of
//! ten million decompressed and decoded all ten million (docs/performance.md).
//! So each merge-on-read scd2 current file gets a companion written with it:
//! the same rows as one contiguous record per row (`rowcodec.rs`), with a
//! directory of where each row ends and a checksum of each row. A close then
//! costs a few small reads per row, whatever the table's size.
//!
//! The companion is a cache, never the truth: the Delta table is unchanged
//! and readers never see it. Data files never change once written, so a
//! companion named after its data file is valid for as long as that file is
//! live. One that is missing, damaged or unreadable is rebuilt from its data
//! file by the next run that needs its rows (if that fails too, the rows are
//! read from parquet, as before); one whose data file has left the table is
//! deleted after the commit that removed it, and by the sweep a writer runs
//! when it loads the table.
//!
//! The file format is `format.rs`.

mod format;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use deltalake::arrow::array::RecordBatch;
use deltalake::arrow::datatypes::{Field, Schema};
use deltalake::arrow::error::ArrowError;

use super::rowcodec::{CodecError, Columns};
pub(super) use format::{encode, Encoded};

/// Threads reading companions at once (see [`RowStore::read_many`]).
const READERS: usize = 16;
/// Rows per read job.
const PIECE_ROWS: usize = 1024;

/// Why a companion could not be used (the rows are then read from parquet).
#[derive(Debug, thiserror::Error)]
pub(super) enum RowStoreError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a row companion of this format")]
    Format,
    #[error("damaged: {0}")]
    Damaged(String),
    #[error("arrow: {0}")]
    Arrow(#[from] deltalake::arrow::error::ArrowError),
    #[error("{0}")]
    Codec(#[from] CodecError),
}

type Result<T> = std::result::Result<T, RowStoreError>;

/// A companion written under a temporary name (see [`RowStore::stage`]).
#[derive(Debug)]
pub(super) struct Staged(PathBuf);

/// Where a table's row companions live; `None` when the table keeps none.
#[derive(Debug, Clone, Default)]
pub(super) struct RowStore {
    dir: Option<PathBuf>,
    /// The table, for `changelake_row_companion_bytes_total`.
    table: Arc<str>,
}

impl RowStore {
    /// Companions under `dir` (created on the first write).
    pub(super) fn at(dir: PathBuf, table: &str) -> RowStore {
        RowStore { dir: Some(dir), table: table.into() }
    }

    /// A store that keeps nothing (every close reads parquet).
    pub(super) fn none() -> RowStore {
        RowStore { dir: None, table: "".into() }
    }

    pub(super) fn enabled(&self) -> bool {
        self.dir.is_some()
    }

    /// The companion of a data file (named after the file: its name carries a UUID).
    fn path(&self, data_file: &str) -> Option<PathBuf> {
        let name = data_file.rsplit('/').next().unwrap_or(data_file);
        Some(self.dir.as_ref()?.join(format!("{name}.rows")))
    }

    /// Is there a companion for this data file?
    pub(super) fn holds(&self, data_file: &str) -> bool {
        self.path(data_file).is_some_and(|p| p.is_file())
    }

    /// Stores a data file's companion at once (see [`RowStore::stage`]).
    pub(super) fn put(&self, data_file: &str, companion: &Encoded) -> Result<()> {
        self.adopt(self.stage(companion)?, data_file)
    }

    #[cfg(test)]
    fn write(&self, data_file: &str, batch: &RecordBatch) -> Result<()> {
        self.put(data_file, &encode(batch)?)
    }

    /// Writes a companion ([`encode`]d from all of a data file's physical
    /// rows, in order) under a temporary name, before its data file has
    /// one: encoding threads write their own, then [`RowStore::adopt`] names
    /// it. Only whole companions ever carry a real name; a temporary one
    /// left by a crash is deleted by a later sweep.
    pub(super) fn stage(&self, companion: &Encoded) -> Result<Staged> {
        let dir = self.dir.as_ref().ok_or(RowStoreError::Format)?;
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".{}.tmp", uuid::Uuid::new_v4()));
        let written = std::fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(&companion.head).and_then(|()| f.write_all(&companion.data))
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e.into());
        }
        let len = (companion.head.len() + companion.data.len()) as u64;
        crate::telemetry::row_companion_bytes(&self.table, "written", len);
        Ok(Staged(tmp))
    }

    /// Gives a staged companion its data file's name.
    pub(super) fn adopt(&self, staged: Staged, data_file: &str) -> Result<()> {
        let path = self.path(data_file).ok_or(RowStoreError::Format)?;
        std::fs::rename(&staged.0, &path).inspect_err(|_| {
            let _ = std::fs::remove_file(&staged.0);
        })?;
        Ok(())
    }

    /// Chosen physical rows (sorted, distinct) of a data file, in its
    /// companion's schema (the table's when the file was written).
    pub(super) fn read(
        &self,
        data_file: &str,
        rows: &[u32],
        columns: Columns<'_>,
    ) -> Result<RecordBatch> {
        let path = self.path(data_file).ok_or(RowStoreError::Format)?;
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        let (batch, read) = format::read_rows(&file, len, rows, columns)?;
        crate::telemetry::row_companion_bytes(&self.table, "read", read);
        Ok(batch)
    }

    /// Chosen rows (sorted, distinct) of several data files, one result per
    /// file, in order. The reads are spread over [`READERS`] threads in
    /// pieces of at most [`PIECE_ROWS`] rows: when a table's companions do
    /// not fit in the page cache, each read may wait for the disk, and a
    /// disk serves many waiting reads at once far faster than one after
    /// the other.
    pub(super) fn read_many(&self, want: &[(&str, &[u32])]) -> Vec<Result<RecordBatch>> {
        let pieces: Vec<(usize, &str, &[u32])> = (want.iter().enumerate())
            .flat_map(|(i, (file, rows))| rows.chunks(PIECE_ROWS).map(move |c| (i, *file, c)))
            .collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut done: Vec<Option<Result<RecordBatch>>> = Vec::new();
        done.resize_with(pieces.len(), || None);
        let done = std::sync::Mutex::new(done);
        std::thread::scope(|s| {
            for _ in 0..READERS.min(pieces.len()) {
                s.spawn(|| loop {
                    let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((_, file, rows)) = pieces.get(at) else { break };
                    let got = self.read(file, rows, Columns::Filled);
                    done.lock().unwrap_or_else(|e| e.into_inner())[at] = Some(got);
                });
            }
        });
        let done = done.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut per_file: Vec<Vec<RecordBatch>> = want.iter().map(|_| vec![]).collect();
        let mut failed: Vec<Option<RowStoreError>> = want.iter().map(|_| None).collect();
        for ((i, _, _), got) in pieces.iter().zip(done) {
            match got.expect("every piece is read") {
                Ok(b) => per_file[*i].push(b),
                Err(e) => failed[*i] = failed[*i].take().or(Some(e)),
            }
        }
        per_file
            .into_iter()
            .zip(failed)
            .map(|(batches, failed)| match (failed, batches.is_empty()) {
                (Some(e), _) => Err(e),
                (None, false) => Ok(joined(&batches)?),
                (None, true) => Err(RowStoreError::Damaged("no rows asked for".into())),
            })
            .collect()
    }

    /// Deletes a data file's companion (its file left the table).
    pub(super) fn remove(&self, data_file: &str) {
        if let Some(p) = self.path(data_file) {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(target: "changelake::table", path = %p.display(), error = %e, "could not delete a row companion")
                }
            }
        }
    }

    /// Deletes every companion whose data file is not live, and temporary
    /// files of interrupted writes once an hour old (a table has one writer,
    /// but a process that lost it may still be finishing a write). Returns
    /// how many were deleted.
    pub(super) fn sweep<'a>(&self, live: impl IntoIterator<Item = &'a str>) -> usize {
        let Some(dir) = &self.dir else { return 0 };
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        let keep: std::collections::HashSet<PathBuf> =
            live.into_iter().filter_map(|f| self.path(f)).collect();
        let hour = std::time::Duration::from_secs(3600);
        let mut deleted = 0;
        for e in entries.flatten() {
            let p = e.path();
            let temporary = e.file_name().to_string_lossy().ends_with(".tmp");
            let young = || {
                e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|a| a < hour))
            };
            if keep.contains(&p) || (temporary && young()) {
                continue;
            }
            if std::fs::remove_file(&p).is_ok() {
                deleted += 1;
            }
        }
        deleted
    }
}

/// A file's pieces as one batch. Each piece holds the columns with a value
/// in its rows (`Columns::Filled`), so pieces may differ: the result holds
/// every column some piece holds, NULL in the rows of pieces without it.
fn joined(pieces: &[RecordBatch]) -> std::result::Result<RecordBatch, ArrowError> {
    let first = pieces[0].schema();
    if pieces.iter().all(|p| p.schema() == first) {
        return deltalake::arrow::compute::concat_batches(&first, pieces);
    }
    let mut fields: Vec<Arc<Field>> = vec![];
    let mut seen = std::collections::HashSet::new();
    for p in pieces {
        for f in p.schema().fields() {
            if seen.insert(f.name().clone()) {
                fields.push(f.clone());
            }
        }
    }
    let schema = Arc::new(Schema::new_with_metadata(fields, first.metadata().clone()));
    // Each piece (at most `PIECE_ROWS` rows) padded with NULL columns of
    // its own length, then joined column by column.
    let padded = (pieces.iter())
        .map(|p| super::convert::padded_to(p.clone(), &schema))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    deltalake::arrow::compute::concat_batches(&schema, &padded)
}

#[cfg(test)]
mod tests {
    use super::format::{encode_within, schema_bytes, MAGIC_V1};
    use super::*;
    use crate::table::rowcodec;
    use deltalake::arrow::array::{
        BooleanArray, Decimal128Array, Float64Array, Int64Array, StringArray,
        TimestampMicrosecondArray,
    };
    use deltalake::arrow::datatypes::{DataType, Field, TimeUnit};
    use xxhash_rust::xxh3::xxh3_64;

    fn batch(n: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, true),
            Field::new("amount", DataType::Decimal128(18, 2), true),
            Field::new("score", DataType::Float64, true),
            Field::new("count", DataType::Int64, true),
            Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
            Field::new("deleted", DataType::Boolean, true),
        ]));
        let text =
            |i: usize| (i % 7 != 3).then(|| format!("customer-{i:06}-{}", "x".repeat(i % 50)));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter((0..n).map(text))),
                Arc::new(
                    Decimal128Array::from_iter(
                        (0..n).map(|i| (i % 5 != 0).then_some(i as i128 * 101)),
                    )
                    .with_precision_and_scale(18, 2)
                    .unwrap(),
                ),
                Arc::new(Float64Array::from_iter((0..n).map(|i| Some(i as f64 / 3.0)))),
                Arc::new(Int64Array::from_iter(
                    (0..n).map(|i| (i % 4 != 0).then_some(-(i as i64))),
                )),
                Arc::new(
                    TimestampMicrosecondArray::from_iter(
                        (0..n).map(|i| Some(i as i64 * 1_000_003)),
                    )
                    .with_timezone("UTC"),
                ),
                Arc::new(BooleanArray::from_iter(
                    (0..n).map(|i| (i % 3 != 0).then_some(i % 2 == 0)),
                )),
            ],
        )
        .unwrap()
    }

    fn take(b: &RecordBatch, rows: &[u32]) -> RecordBatch {
        let idx = deltalake::arrow::array::UInt32Array::from(rows.to_vec());
        deltalake::arrow::compute::take_record_batch(b, &idx).unwrap()
    }

    /// A batch without its columns that are NULL in every row, as
    /// `read_many` reads rows (`Columns::Filled`).
    fn filled(b: RecordBatch) -> RecordBatch {
        let keep: Vec<usize> =
            (0..b.num_columns()).filter(|&i| b.column(i).null_count() < b.num_rows()).collect();
        b.project(&keep).unwrap()
    }

    #[test]
    fn chosen_rows_read_back_equal_to_the_written_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = RowStore::at(dir.path().join("rows"), "t");
        let b = batch(5000);
        store.write("_is_current=true/part-1.parquet", &b).unwrap();
        assert!(store.holds("_is_current=true/part-1.parquet"));
        for rows in [vec![0u32], vec![4999], vec![0, 1, 2, 3], vec![7, 900, 901, 2500, 4998, 4999]]
        {
            let got = store.read("_is_current=true/part-1.parquet", &rows, Columns::All).unwrap();
            assert_eq!(got, take(&b, &rows), "rows {rows:?}");
        }
        let every_third: Vec<u32> = (0..5000).step_by(3).collect();
        assert_eq!(
            store.read("part-1.parquet", &every_third, Columns::All).unwrap(),
            take(&b, &every_third)
        );
        // Several files at once, in pieces: each file's rows in order.
        store.write("part-2.parquet", &batch(3000)).unwrap();
        let some: Vec<u32> = (0..3000).step_by(7).collect();
        let got = store.read_many(&[
            ("part-1.parquet", &every_third),
            ("part-2.parquet", &some),
            ("part-9.parquet", &[1]),
        ]);
        // Every third row has no `deleted` value: it is not built.
        assert_eq!(got[0].as_ref().unwrap(), &filled(take(&b, &every_third)));
        assert_eq!(got[0].as_ref().unwrap().num_columns(), b.num_columns() - 1);
        assert_eq!(got[1].as_ref().unwrap(), &filled(take(&batch(3000), &some)));
        assert!(got[2].is_err(), "no companion");
    }

    #[test]
    fn rows_come_back_in_the_columns_they_fill_and_pieces_join_on_the_union() {
        // One row of 3,000 fills `w`: the first two pieces of 1,024 rows
        // read without it, the third with it.
        let dir = tempfile::tempdir().unwrap();
        let store = RowStore::at(dir.path().to_path_buf(), "t");
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("w", DataType::Utf8, true),
        ]));
        let b = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(0..3000)),
                Arc::new(StringArray::from_iter((0..3000).map(|i| (i == 2500).then_some("w")))),
            ],
        )
        .unwrap();
        store.write("part-1.parquet", &b).unwrap();
        let all: Vec<u32> = (0..3000).collect();
        let got = store.read_many(&[("part-1.parquet", &all), ("part-1.parquet", &all[..2000])]);
        assert_eq!(got[0].as_ref().unwrap(), &b);
        let narrow = got[1].as_ref().unwrap();
        assert_eq!(narrow.schema().fields().len(), 1, "no row read fills `w`");
        assert_eq!(narrow.column(0).as_ref(), b.column(0).slice(0, 2000).as_ref());
    }

    #[test]
    fn companion_bytes_written_and_read_are_counted_for_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let store = RowStore::at(dir.path().to_path_buf(), "companion-bytes");
        let m = crate::telemetry::metrics();
        let count =
            |d: &str| m.row_companion_bytes.with_label_values(&["companion-bytes", d]).get();
        store.write("part-1.parquet", &batch(2000)).unwrap();
        let size = std::fs::metadata(dir.path().join("part-1.parquet.rows")).unwrap().len();
        assert_eq!((count("written"), count("read")), (size, 0));
        store.read("part-1.parquet", &[0, 1999], Columns::Filled).unwrap();
        let read = count("read");
        assert!(read > 0 && read < size / 4, "two rows of {size} bytes: {read}");
    }

    #[test]
    fn a_damaged_or_foreign_companion_is_an_error_not_wrong_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = RowStore::at(dir.path().to_path_buf(), "t");
        let b = batch(300);
        store.write("part-2.parquet", &b).unwrap();
        let path = dir.path().join("part-2.parquet.rows");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 5;
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            store.read("part-2.parquet", &[299], Columns::All),
            Err(RowStoreError::Damaged(_))
        ));
        assert_eq!(store.read("part-2.parquet", &[0, 1], Columns::All).unwrap(), take(&b, &[0, 1]));
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        assert!(store.read("part-2.parquet", &[299], Columns::All).is_err());
        std::fs::write(&path, b"PAR1 not a companion").unwrap();
        assert!(matches!(
            store.read("part-2.parquet", &[0], Columns::All),
            Err(RowStoreError::Format)
        ));
        assert!(store.read("part-3.parquet", &[0], Columns::All).is_err());
    }

    #[test]
    fn the_sweep_keeps_only_companions_of_live_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = RowStore::at(dir.path().to_path_buf(), "t");
        let b = batch(10);
        for f in ["a/part-1.parquet", "a/part-2.parquet", "a/part-3.parquet"] {
            store.write(f, &b).unwrap();
        }
        // A temporary file is kept while it may still be written.
        std::fs::write(dir.path().join(".writing.tmp"), b"x").unwrap();
        assert_eq!(store.sweep(["a/part-2.parquet"]), 2);
        assert!(dir.path().join(".writing.tmp").exists());
        assert!(store.holds("a/part-2.parquet"));
        assert!(!store.holds("a/part-1.parquet") && !store.holds("a/part-3.parquet"));
        store.remove("a/part-2.parquet");
        assert!(!store.holds("a/part-2.parquet"));
        assert_eq!(RowStore::none().sweep(["x"]), 0);
        assert!(!RowStore::none().holds("a/part-2.parquet"));
    }

    /// A companion in the first format (`CLROWS01`): checksums in the
    /// directory beside each end, records without one.
    fn encode_v1(batch: &RecordBatch) -> Vec<u8> {
        let schema = schema_bytes(&batch.schema()).unwrap();
        let mut data = vec![];
        let ends = rowcodec::encode(batch, &mut data, |_, _| ()).unwrap();
        let mut out = MAGIC_V1.to_vec();
        out.extend_from_slice(&(schema.len() as u32).to_le_bytes());
        out.extend_from_slice(&schema);
        out.extend_from_slice(&xxh3_64(&schema).to_le_bytes());
        out.extend_from_slice(&(ends.len() as u32).to_le_bytes());
        let mut start = 0;
        for &end in &ends {
            out.extend_from_slice(&end.to_le_bytes());
            out.extend_from_slice(&xxh3_64(&data[start..end as usize]).to_le_bytes());
            start = end as usize;
        }
        out.extend_from_slice(&data);
        out
    }

    #[test]
    fn companions_of_the_first_format_and_with_wide_directories_read_the_same_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = RowStore::at(dir.path().to_path_buf(), "t");
        let b = batch(2000);
        let rows: Vec<u32> = vec![0, 1, 2, 999, 1998, 1999];
        std::fs::write(dir.path().join("part-1.parquet.rows"), encode_v1(&b)).unwrap();
        store.put("part-2.parquet", &encode_within(&b, 0).unwrap()).unwrap();
        store.write("part-3.parquet", &b).unwrap();
        for f in ["part-1.parquet", "part-2.parquet", "part-3.parquet"] {
            assert_eq!(store.read(f, &rows, Columns::All).unwrap(), take(&b, &rows), "{f}");
        }
        // Directory entries of 16 bytes a row; of 8 or 4, with 8 after each
        // record and a byte for the width.
        let size = |f: &str| std::fs::metadata(dir.path().join(f)).unwrap().len();
        assert_eq!(size("part-2.parquet.rows"), size("part-1.parquet.rows") + 1);
        assert_eq!(size("part-2.parquet.rows") - size("part-3.parquet.rows"), 2000 * (8 - 4));
        // A damaged record of the first format is found by its directory's checksum.
        let mut v1 = encode_v1(&b);
        let last = v1.len() - 3;
        v1[last] ^= 1;
        std::fs::write(dir.path().join("part-1.parquet.rows"), v1).unwrap();
        assert!(matches!(
            store.read("part-1.parquet", &[1999], Columns::All),
            Err(RowStoreError::Damaged(_))
        ));
    }
}
