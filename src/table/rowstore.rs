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
//! File layout (integers little-endian):
//!
//! | bytes | content |
//! | --- | --- |
//! | 8 | magic `CLROWS02` |
//! | 4 | length S of the schema |
//! | S | the Arrow schema, as an IPC stream without batches |
//! | 8 | xxh3 of the schema bytes |
//! | 4 | rows N |
//! | 1 | width W of a directory entry: 4, or 8 when the data reaches 4 GiB |
//! | W N | per row: where its record ends in the data |
//! | ... | the records, back to back, each followed by its xxh3 (8 bytes) |
//!
//! Why the checksum sits after its record and not in the directory (as in
//! the first format, `CLROWS01`, which is still read: 16 directory bytes a
//! row, end and checksum): a run's closes are spread over every current
//! file, so each file's directory is read whole, and at 10M keys the
//! directories were two thirds of the bytes a run read from companions.
//! A checksum is only ever needed with its record.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use deltalake::arrow::array::RecordBatch;
use deltalake::arrow::datatypes::{Field, Schema};
use deltalake::arrow::error::ArrowError;
use std::os::unix::fs::FileExt;
use xxhash_rust::xxh3::xxh3_64;

use super::rowcodec::{self, CodecError, Columns};

const MAGIC: &[u8; 8] = b"CLROWS02";
/// The first format: 16-byte directory entries (end, checksum).
const MAGIC_V1: &[u8; 8] = b"CLROWS01";
/// The checksum after each record.
const SEAL: u64 = 8;
/// Reads closer than this are merged into one (fewer system calls for
/// rows near each other; little read for nothing when they are not).
const DIRECTORY_GAP: u64 = 4096;
const RECORD_GAP: u64 = 1024;
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
        let (batch, read) = read_rows(&file, len, rows, columns)?;
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

/// A companion's bytes: its header and directory, then its records (kept
/// apart, so the records are never copied into one buffer with the rest).
pub(super) struct Encoded {
    head: Vec<u8>,
    data: Vec<u8>,
}

/// A batch as a companion file's bytes.
pub(super) fn encode(batch: &RecordBatch) -> Result<Encoded> {
    encode_within(batch, u32::MAX as u64)
}

/// [`encode`], with 8-byte directory entries once the data ends beyond
/// `narrow` (tests lower it to write them).
fn encode_within(batch: &RecordBatch, narrow: u64) -> Result<Encoded> {
    let schema = schema_bytes(&batch.schema())?;
    let n = batch.num_rows();
    let mut data = Vec::with_capacity(batch.get_array_memory_size() + SEAL as usize * n);
    let ends = rowcodec::encode(batch, &mut data, |out, start| {
        let sum = xxh3_64(&out[start..]);
        out.extend_from_slice(&sum.to_le_bytes());
    })?;
    let wide = ends.last().is_some_and(|&end| end > narrow);
    let width: u8 = if wide { 8 } else { 4 };
    let mut head = Vec::with_capacity(8 + 4 + schema.len() + 8 + 4 + 1 + width as usize * n);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&(schema.len() as u32).to_le_bytes());
    head.extend_from_slice(&schema);
    head.extend_from_slice(&xxh3_64(&schema).to_le_bytes());
    head.extend_from_slice(&(n as u32).to_le_bytes());
    head.push(width);
    for &end in &ends {
        if wide {
            head.extend_from_slice(&end.to_le_bytes());
        } else {
            head.extend_from_slice(&(end as u32).to_le_bytes());
        }
    }
    Ok(Encoded { head, data })
}

fn schema_bytes(schema: &Arc<Schema>) -> Result<Vec<u8>> {
    let mut buf = vec![];
    let mut w = deltalake::arrow::ipc::writer::StreamWriter::try_new(&mut buf, schema)?;
    w.finish()?;
    drop(w);
    Ok(buf)
}

fn read_exact(file: &std::fs::File, at: u64, len: u64, file_len: u64) -> Result<Vec<u8>> {
    if at.checked_add(len).is_none_or(|end| end > file_len) {
        return Err(RowStoreError::Damaged(format!("range {at}+{len} past the end ({file_len})")));
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, at)?;
    Ok(buf)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Byte ranges, sorted, merged where the gap between them is below `gap`:
/// each merged range with the ranges it covers.
fn coalesce(ranges: &[(u64, u64)], gap: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = vec![];
    for &(start, end) in ranges {
        match out.last_mut() {
            Some(last) if start <= last.1.saturating_add(gap) => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

/// Ranges of a file (sorted by start) read with one read per merged group
/// (see [`coalesce`]): the groups' bytes and where each range lies in them.
struct Ranges {
    groups: Vec<Vec<u8>>,
    spans: Vec<(usize, std::ops::Range<usize>)>,
}

impl Ranges {
    fn read(
        file: &std::fs::File,
        file_len: u64,
        ranges: &[(u64, u64)],
        gap: u64,
    ) -> Result<Ranges> {
        let mut out = Ranges { groups: vec![], spans: Vec::with_capacity(ranges.len()) };
        let mut next = 0;
        for (start, end) in coalesce(ranges, gap) {
            out.groups.push(read_exact(file, start, end - start, file_len)?);
            while next < ranges.len() && ranges[next].1 <= end {
                let (s, e) = ranges[next];
                out.spans.push((out.groups.len() - 1, (s - start) as usize..(e - start) as usize));
                next += 1;
            }
        }
        Ok(out)
    }

    /// Bytes read.
    fn len(&self) -> u64 {
        self.groups.iter().map(|g| g.len() as u64).sum()
    }

    /// The bytes of the `i`th range.
    fn get(&self, i: usize) -> &[u8] {
        let (group, span) = &self.spans[i];
        &self.groups[*group][span.clone()]
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

/// How a companion's directory and checksums are laid out, by format.
#[derive(Debug, Clone, Copy)]
struct Directory {
    /// Where the directory starts.
    at: u64,
    /// Bytes per entry.
    width: u64,
    /// Entries hold the record's checksum after its end (`CLROWS01`);
    /// otherwise the checksum ends the record.
    sums_inside: bool,
}

impl Directory {
    /// A row's end, and its checksum when the entry holds it.
    fn entry(&self, e: &[u8]) -> (u64, Option<u64>) {
        let end = if self.width == 4 { u32_at(e, 0) as u64 } else { u64_at(e, 0) };
        (end, self.sums_inside.then(|| u64_at(e, 8)))
    }
}

fn read_rows(
    file: &std::fs::File,
    file_len: u64,
    rows: &[u32],
    columns: Columns<'_>,
) -> Result<(RecordBatch, u64)> {
    let head = read_exact(file, 0, 12, file_len)?;
    let v1 = match &head[..8] {
        m if m == MAGIC => false,
        m if m == MAGIC_V1 => true,
        _ => return Err(RowStoreError::Format),
    };
    let schema_len = u32_at(&head, 8) as u64;
    let meta = read_exact(file, 12, schema_len + 12 + u64::from(!v1), file_len)?;
    let (schema_buf, rest) = meta.split_at(schema_len as usize);
    if u64_at(rest, 0) != xxh3_64(schema_buf) {
        return Err(RowStoreError::Damaged("schema checksum".into()));
    }
    let n = u32_at(rest, 8) as u64;
    let at = 12 + meta.len() as u64;
    let dir = if v1 {
        Directory { at, width: 16, sums_inside: true }
    } else {
        match rest[12] {
            w @ (4 | 8) => Directory { at, width: w as u64, sums_inside: false },
            w => return Err(RowStoreError::Damaged(format!("directory entries of {w} bytes"))),
        }
    };
    let reader = deltalake::arrow::ipc::reader::StreamReader::try_new(
        std::io::Cursor::new(schema_buf),
        None,
    )?;
    let schema = reader.schema();
    let data = dir.at + dir.width * n;
    // Row r spans from the end of row r-1 (0 for the first) to its own end.
    let mut entries = Vec::with_capacity(rows.len());
    for &r in rows {
        let r = r as u64;
        if r >= n {
            return Err(RowStoreError::Damaged(format!("row {r} of {n}")));
        }
        let first = if r == 0 { 0 } else { r - 1 };
        entries.push((dir.at + dir.width * first, dir.at + dir.width * (r + 1)));
    }
    let dir_bytes = Ranges::read(file, file_len, &entries, DIRECTORY_GAP)?;
    let mut spans = Vec::with_capacity(rows.len());
    let mut sums = Vec::with_capacity(rows.len());
    for (i, &r) in rows.iter().enumerate() {
        let d = dir_bytes.get(i);
        let (start, own) = if r == 0 { (0, 0) } else { (dir.entry(d).0, dir.width as usize) };
        let (end, sum) = dir.entry(&d[own..]);
        let least = if sum.is_some() { start } else { start + SEAL };
        if end < least {
            return Err(RowStoreError::Damaged(format!("row {r}: directory out of order")));
        }
        spans.push((data + start, data + end));
        sums.push(sum);
    }
    let bytes = Ranges::read(file, file_len, &spans, RECORD_GAP)?;
    let mut records = Vec::with_capacity(rows.len());
    for (i, (sum, r)) in sums.into_iter().zip(rows).enumerate() {
        let b = bytes.get(i);
        let (record, sum) = match sum {
            Some(sum) => (b, sum),
            None => {
                let (record, seal) = b.split_at(b.len() - SEAL as usize);
                (record, u64_at(seal, 0))
            }
        };
        if xxh3_64(record) != sum {
            return Err(RowStoreError::Damaged(format!("row {r}: checksum")));
        }
        records.push(record);
    }
    let read = 12 + meta.len() as u64 + dir_bytes.len() + bytes.len();
    Ok((rowcodec::decode(schema, &records, columns)?, read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake::arrow::array::{
        BooleanArray, Decimal128Array, Float64Array, Int64Array, StringArray,
        TimestampMicrosecondArray,
    };
    use deltalake::arrow::datatypes::{DataType, Field, TimeUnit};

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

    #[test]
    fn nearby_ranges_merge_and_far_ones_do_not() {
        assert_eq!(coalesce(&[(0, 10), (12, 20), (100, 110)], 5), vec![(0, 20), (100, 110)]);
        assert_eq!(coalesce(&[(0, 10), (5, 8)], 0), vec![(0, 10)]);
        assert_eq!(coalesce(&[], 5), vec![]);
    }
}
