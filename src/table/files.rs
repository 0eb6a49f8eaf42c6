//! Reading data files: whole files, chosen rows, chosen columns, always in
//! the table's current schema.
//!
//! A uniform update touches every file and decoding dominates, so files are
//! decoded on all cores (a copy-on-write rewrite decodes each file in the
//! job that rewrites it, `rewrite.rs`), and reads that need a few rows use
//! parquet row selections instead of decoding the rest.

use std::collections::BTreeMap;
use std::sync::Arc;

use deltalake::arrow::array::{Array, ArrayRef, RecordBatch};
use deltalake::kernel::DeletionVectorDescriptor;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use deltalake::{DeltaTable, Path};
use object_store::ObjectStoreExt;

use super::convert::{build_array, cell, positions, KeyCols};
use super::{dv, Result};
use super::{TableError, TableStore};
use crate::merge::{Key, Spec};
use crate::par::par_map;
use crate::value::{DType, Value};

#[derive(Debug, Clone)]
pub(super) struct FileMeta {
    pub(super) path: String,
    /// Physical rows in the parquet file (deleted ones included).
    pub(super) rows: usize,
    pub(super) size: i64,
    pub(super) current: bool,
    /// Deletion vector: physical rows masked out (merge-on-read tables).
    pub(super) dv: Option<Arc<roaring::RoaringTreemap>>,
    pub(super) dv_desc: Option<DeletionVectorDescriptor>,
    /// The `stats` of its `add`, repeated by every later `add`/`remove` of it.
    pub(super) stats: Option<Arc<str>>,
}

/// Chosen physical rows of one file (sorted), read as one Arrow batch in
/// row order.
pub(super) struct SelectedRows {
    pub(super) file: u32,
    pub(super) rows: Vec<u32>,
    pub(super) batch: RecordBatch,
    /// The rows' briefs of closed versions, when read from a row companion
    /// that holds them (`companions.rs`).
    pub(super) briefs: Option<deltalake::arrow::array::BinaryArray>,
}

/// How wide a batch read from a data file comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    /// Every column of the table (those the file lacks are NULL).
    Table,
    /// The data columns the file holds, and the system columns.
    Held,
}

impl FileMeta {
    #[inline]
    pub(super) fn deleted(&self, row: u32) -> bool {
        self.dv.as_ref().is_some_and(|d| d.contains(row as u64))
    }
    pub(super) fn live_rows(&self) -> usize {
        self.rows.saturating_sub(self.dv.as_ref().map_or(0, |d| d.len() as usize))
    }
}

impl TableStore {
    /// The live files of the table's snapshot, with their deletion vectors.
    pub(super) async fn load_files(&mut self, table: &DeltaTable) -> Result<()> {
        let snap = table.snapshot().map_err(|e| self.delta(e))?;
        let part = self.meta.partition().map(str::to_string);
        let mut files = vec![];
        for fv in snap.log_data() {
            let current = match &part {
                None => true,
                Some(p) => {
                    fv.partition_values_map().get(p).cloned().flatten().as_deref() == Some("true")
                }
            };
            files.push(FileMeta {
                path: fv.path().to_string(),
                rows: fv.num_records().unwrap_or(0),
                size: fv.size(),
                current,
                dv: None,
                dv_desc: fv.deletion_vector_descriptor(),
                stats: fv.stats().map(Arc::from),
            });
        }
        for f in &mut files {
            if let Some(d) = &f.dv_desc {
                let dv =
                    read_deletion_vector(table, d).await.map_err(|msg| TableError::Refused {
                        uri: self.uri.clone(),
                        msg: format!("file {}: {msg}", f.path),
                    })?;
                f.dv = Some(Arc::new(dv));
            }
        }
        self.files = files.into_iter().map(Some).collect();
        Ok(())
    }

    /// The file as Arrow batches in the columns it holds, in the table's
    /// order and current types (a changed type is converted as
    /// [`Value::convert`] does; columns it lacks read NULL by name).
    pub(super) async fn read_batches(&self, id: u32) -> Result<Vec<RecordBatch>> {
        let bytes = self.fetch(id).await?;
        self.decode_file_as_held(id, bytes)
    }

    /// A batch read from a row companion, conformed as
    /// [`Self::read_batches`] conforms a file's.
    pub(super) fn as_held(&self, batch: RecordBatch) -> Result<RecordBatch> {
        self.conformed(batch, Width::Held)
    }

    pub(super) async fn fetch(&self, id: u32) -> Result<bytes::Bytes> {
        let f = self.files[id as usize].clone().expect("live file");
        let store = self.store()?;
        let bytes = store
            .get(&Path::from(f.path.as_str()))
            .await
            .map_err(|e| self.io_err(format!("reading {}", f.path), e))?
            .bytes()
            .await
            .map_err(|e| self.io_err(format!("reading {}", f.path), e))?;
        Ok(bytes)
    }

    /// The bytes a projection of `names` reads, and only those: see
    /// [`TableStore::fetch_parts`].
    pub(super) async fn fetch_columns(&self, id: u32, names: &[&str]) -> Result<bytes::Bytes> {
        Ok(self.fetch_parts(id, Some(names), None).await?.0)
    }

    /// The bytes a read of some `columns` (None: all) of some row `groups`
    /// (None: all) needs, and only those: the footer and the chosen column
    /// chunks are fetched with ranged reads and laid out at their offsets
    /// in a zeroed buffer of the file's size, which a parquet reader
    /// projected to the same columns and groups never reads outside. On an
    /// object store this is the difference between a few column chunks and
    /// the whole file (docs/object-storage.md); a late row of a deleted key
    /// fetches the row groups that may hold it, not the history file. With
    /// the number of bytes fetched.
    pub(super) async fn fetch_parts(
        &self,
        id: u32,
        columns: Option<&[&str]>,
        groups: Option<&[usize]>,
    ) -> Result<(bytes::Bytes, u64)> {
        let f = self.files[id as usize].clone().expect("live file");
        let store = self.store()?;
        let path = Path::from(f.path.as_str());
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let size = f.size.max(0) as u64;
        let range = |r: std::ops::Range<u64>| {
            let (store, path) = (store.clone(), path.clone());
            async move { store.get_range(&path, r).await.map_err(|e| e.to_string()) }
        };
        let (meta, footer) = super::parquet::read_footer_sized(size, &range)
            .await
            .map_err(|e| data_err(format!("reading {}: {e}", f.path)))?;
        let every_column =
            columns.is_none_or(|c| meta.file_metadata().schema_descr().num_columns() <= c.len());
        let every_group = groups.is_none_or(|g| meta.num_row_groups() <= g.len());
        if every_column && every_group {
            return Ok((self.fetch(id).await?, size));
        }
        let mut ranges = vec![];
        for (g, rg) in meta.row_groups().iter().enumerate() {
            // With chosen groups, every chunk's offset index (a few bytes a
            // page), which `decode_groups` reads to skip pages without a
            // selected row.
            if groups.is_some() {
                for c in rg.columns() {
                    if let (Some(at), Some(len)) =
                        (c.offset_index_offset(), c.offset_index_length())
                    {
                        ranges.push(at as u64..at as u64 + len as u64);
                    }
                }
            }
            if groups.is_some_and(|chosen| !chosen.contains(&g)) {
                continue;
            }
            for c in rg.columns() {
                // Matched as `ProjectionMask::columns` matches (dotted path).
                if columns.is_none_or(|names| names.iter().any(|n| c.column_path().string() == *n))
                {
                    let (start, len) = c.byte_range();
                    ranges.push(start..start + len);
                }
            }
        }
        ranges.push(size - footer..size);
        let got = store
            .get_ranges(&path, &ranges)
            .await
            .map_err(|e| self.io_err(format!("reading {}", f.path), e))?;
        let mut buf = vec![0u8; size as usize];
        for (r, b) in ranges.iter().zip(got) {
            buf[r.start as usize..r.end as usize].copy_from_slice(&b);
        }
        let read = ranges.iter().map(|r| r.end - r.start).sum();
        Ok((bytes::Bytes::from(buf), read))
    }

    /// Decodes a file in the table's current schema; with `selection` (sorted
    /// physical rows) only those rows, in that order: the parquet reader
    /// skips the values of every other row instead of materialising them.
    pub(super) fn decode_file(
        &self,
        id: u32,
        bytes: bytes::Bytes,
        selection: Option<&[u32]>,
    ) -> Result<Vec<RecordBatch>> {
        self.decode_groups(id, bytes, None, selection)
    }

    /// A whole data file in the columns it holds (in the table's order and
    /// types), without the table's other columns added as NULL: what a
    /// rewrite of the file starts from (see [`Self::columns_kept`]).
    pub(super) fn decode_file_as_held(
        &self,
        id: u32,
        bytes: bytes::Bytes,
    ) -> Result<Vec<RecordBatch>> {
        self.decode_groups_as(id, bytes, None, None, Width::Held)
    }

    /// [`TableStore::decode_file`] reading only some row `groups` (sorted;
    /// None: all), as [`TableStore::fetch_parts`] fetches them: every
    /// selected row must lie in one of them.
    pub(super) fn decode_groups(
        &self,
        id: u32,
        bytes: bytes::Bytes,
        groups: Option<&[usize]>,
        selection: Option<&[u32]>,
    ) -> Result<Vec<RecordBatch>> {
        self.decode_groups_as(id, bytes, groups, selection, Width::Table)
    }

    fn decode_groups_as(
        &self,
        id: u32,
        bytes: bytes::Bytes,
        groups: Option<&[usize]>,
        selection: Option<&[u32]>,
        width: Width,
    ) -> Result<Vec<RecordBatch>> {
        use deltalake::parquet::arrow::arrow_reader::{
            ArrowReaderOptions, RowSelection, RowSelector,
        };
        use deltalake::parquet::file::metadata::PageIndexPolicy;
        let f = self.files[id as usize].as_ref().expect("live file");
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let parquet_err = |e: deltalake::parquet::errors::ParquetError| {
            data_err(format!("parquet {}: {e}", f.path))
        };
        // With a selection, the offset index (where a file has one) lets
        // the reader skip the pages without a selected row instead of
        // decompressing them (history files have pages of 4,096 rows:
        // `plan::HISTORY_PAGE_ROWS`).
        let options = ArrowReaderOptions::new()
            .with_column_index_policy(PageIndexPolicy::Skip)
            .with_offset_index_policy(match selection {
                Some(_) => PageIndexPolicy::Optional,
                None => PageIndexPolicy::Skip,
            });
        let mut b = ParquetRecordBatchReaderBuilder::try_new_with_options(bytes, options)
            .map_err(parquet_err)?
            .with_batch_size(64 * 1024);
        // (first physical row, rows, first row read) per chosen group: the
        // reader reads the chosen groups' rows, one group after another.
        let mut spans = None;
        if let Some(chosen) = groups {
            let sizes: Vec<usize> =
                b.metadata().row_groups().iter().map(|g| g.num_rows() as usize).collect();
            if chosen.windows(2).any(|w| w[0] >= w[1]) || chosen.iter().any(|&g| g >= sizes.len()) {
                return Err(data_err(format!("parquet {}: row groups {chosen:?}", f.path)));
            }
            let (mut first, mut read, mut found) = (0usize, 0usize, vec![]);
            for (g, &n) in sizes.iter().enumerate() {
                if chosen.contains(&g) {
                    found.push((first, n, read));
                    read += n;
                }
                first += n;
            }
            spans = Some(found);
            b = b.with_row_groups(chosen.to_vec());
        }
        // Where a physical row lands among the rows the reader reads.
        let read_at = |r: usize| match &spans {
            None => Some(r),
            Some(spans) => {
                let i = spans.partition_point(|&(first, _, _)| first <= r).checked_sub(1)?;
                let (first, n, read) = spans[i];
                (r < first + n).then_some(read + r - first)
            }
        };
        if let Some(rows) = selection {
            let mut sel = vec![];
            let mut at = 0usize;
            for &r in rows {
                let r = read_at(r as usize).ok_or_else(|| {
                    data_err(format!("parquet {}: row {r} outside the groups read", f.path))
                })?;
                if r > at {
                    sel.push(RowSelector::skip(r - at));
                }
                match sel.last_mut() {
                    Some(s) if !s.skip && r == at => s.row_count += 1,
                    _ => sel.push(RowSelector::select(1)),
                }
                at = r + 1;
            }
            b = b.with_row_selection(RowSelection::from(sel));
        }
        let reader = b.build().map_err(parquet_err)?;
        let mut out = vec![];
        for batch in reader {
            let batch = batch.map_err(|e| data_err(format!("parquet {}: {e}", f.path)))?;
            out.push(self.conformed(batch, width)?);
        }
        Ok(out)
    }

    /// A batch read from a data file (or its row companion) in the table's
    /// order and current types (a changed type is converted as
    /// [`Value::convert`] does), in the table's whole width (columns added
    /// since it was written are NULL) or in the data columns it holds.
    fn conformed(&self, batch: RecordBatch, width: Width) -> Result<RecordBatch> {
        let mut schema = self.arrow_schema();
        if batch.schema() == schema {
            return Ok(batch);
        }
        if width == Width::Held {
            schema = self.held_schema([&batch]);
        }
        let n = batch.num_rows();
        let at = positions(batch.schema_ref());
        let mut cols = Vec::with_capacity(schema.fields().len());
        for field in schema.fields().iter() {
            let col = match at.get(field.name().as_str()).map(|&i| batch.column(i).clone()) {
                Some(c) if c.data_type() == field.data_type() => c,
                Some(c) => {
                    let t = (self.columns.iter().find(|(n, _)| n == field.name()))
                        .map(|(_, t)| *t)
                        .or_else(|| {
                            self.meta
                                .system_fields()
                                .into_iter()
                                .find(|(name, _)| name == field.name())
                                .map(|(_, t)| t)
                        });
                    let t = t.expect("schema field is a data or system column");
                    let converted: Vec<Value> =
                        (0..n).map(|i| cell(&c, i).convert(t).unwrap_or(Value::Null)).collect();
                    build_array(t, converted.iter())
                }
                None => deltalake::arrow::array::new_null_array(field.data_type(), n),
            };
            cols.push(col);
        }
        RecordBatch::try_new(schema, cols).map_err(|e| self.data_err(e.to_string()))
    }

    /// A batch's business-key columns (absent ones as `None`) with their
    /// types, for [`KeyCols`].
    fn key_arrays(&self, spec: &Spec, batch: &RecordBatch) -> Vec<(Option<ArrayRef>, DType)> {
        (spec.key.iter())
            .map(|&i| {
                let (name, t) = &self.columns[i];
                (batch.column_by_name(name).cloned(), *t)
            })
            .collect()
    }

    /// Business keys of a batch's rows (only the key columns are read, as
    /// key bytes straight from Arrow: see [`KeyCols`]).
    pub(super) fn batch_keys(&self, spec: &Spec, batch: &RecordBatch) -> Vec<Option<Key>> {
        let cols = self.key_arrays(spec, batch);
        let cols = KeyCols::new(&cols);
        let mut buf = Vec::with_capacity(32);
        (0..batch.num_rows())
            .map(|r| cols.encode(r, &mut buf).then(|| buf.as_slice().into()))
            .collect()
    }

    /// The keys of chosen rows of a batch, with their rows; a row without a
    /// key (every key column NULL, which the merge never writes) is left out.
    pub(super) fn keys_at(
        &self,
        spec: &Spec,
        batch: &RecordBatch,
        rows: &[usize],
    ) -> Vec<(Key, u32)> {
        let cols = self.key_arrays(spec, batch);
        let cols = KeyCols::new(&cols);
        let mut buf = Vec::with_capacity(32);
        let mut out = Vec::with_capacity(rows.len());
        for &r in rows {
            if cols.encode(r, &mut buf) {
                out.push((buf.as_slice().into(), r as u32));
            }
        }
        out
    }

    /// Reads chosen physical rows of several files (each list sorted), one
    /// batch per file in row order, read with a row selection, on all cores.
    pub(super) async fn read_selected(
        &self,
        want: BTreeMap<u32, Vec<u32>>,
    ) -> Result<Vec<SelectedRows>> {
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let mut todo = vec![];
        for (id, rows) in want {
            todo.push((id, rows, self.fetch(id).await?));
        }
        // In the columns each file holds (readers look columns up by name).
        par_map(todo, |(id, rows, bytes)| {
            let batches = self.decode_groups_as(id, bytes, None, Some(&rows), Width::Held)?;
            let schema = match batches.first() {
                Some(b) => b.schema(),
                None => self.arrow_schema(),
            };
            let all = deltalake::arrow::compute::concat_batches(&schema, &batches)
                .map_err(|e| data_err(e.to_string()))?;
            if all.num_rows() != rows.len() {
                let msg =
                    format!("file {id}: {} of {} selected rows read", all.num_rows(), rows.len());
                return Err(data_err(msg));
            }
            Ok(SelectedRows { file: id, rows, batch: all, briefs: None })
        })
        .into_iter()
        .collect()
    }

    /// Reads only the named columns of a file (those it has; a column added
    /// since it was written is absent from its batches).
    pub(super) fn columns_of(
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

    /// [`TableStore::columns_of`] for some row groups only (None: all),
    /// with each chosen group's first physical row and row count, in order.
    #[allow(clippy::type_complexity)]
    pub(super) fn group_columns_of(
        &self,
        f: &FileMeta,
        bytes: bytes::Bytes,
        names: &[&str],
        groups: Option<&[usize]>,
    ) -> Result<(deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReader, Vec<(u32, u64)>)>
    {
        use deltalake::parquet::arrow::ProjectionMask;
        let data_err = |e: deltalake::parquet::errors::ParquetError| TableError::Data {
            uri: self.uri.clone(),
            msg: format!("parquet {}: {e}", f.path),
        };
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(data_err)?;
        let sizes: Vec<u64> =
            builder.metadata().row_groups().iter().map(|g| g.num_rows() as u64).collect();
        let chosen: Vec<usize> = match groups {
            Some(g) => g.iter().copied().filter(|&g| g < sizes.len()).collect(),
            None => (0..sizes.len()).collect(),
        };
        let mut first = vec![0u64; sizes.len()];
        for g in 1..sizes.len() {
            first[g] = first[g - 1] + sizes[g - 1];
        }
        let starts = chosen.iter().map(|&g| (first[g] as u32, sizes[g])).collect();
        let mask = ProjectionMask::columns(builder.parquet_schema(), names.iter().copied());
        let reader = (builder.with_projection(mask).with_row_groups(chosen))
            .with_batch_size(64 * 1024)
            .build()
            .map_err(data_err)?;
        Ok((reader, starts))
    }
}

/// Reads a deletion vector written as changelake writes them (a file
/// relative to the table); other storage types are refused.
async fn read_deletion_vector(
    table: &DeltaTable,
    d: &DeletionVectorDescriptor,
) -> std::result::Result<roaring::RoaringTreemap, String> {
    let path = dv::descriptor_file(d)?;
    let bytes = table
        .object_store()
        .get(&Path::from(path.as_str()))
        .await
        .map_err(|e| format!("reading {path}: {e}"))?
        .bytes()
        .await
        .map_err(|e| format!("reading {path}: {e}"))?;
    dv::decode(&bytes, d).map_err(|e| format!("{path}: {e}"))
}
