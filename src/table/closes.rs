//! scd2 closes at the Arrow level.
//!
//! A processing-time close (`Need::Close`) never becomes values: the stored
//! open version is copied into history as it is, with `_valid_to` and
//! `_is_deleted` replaced. Its physical row comes from the key index, and
//! `load_states` has read it already in the same pass as the rows the merge
//! needed ([`ClosingRows`]: from the file's row companion when it has one,
//! `rowstore/`); anything missing is read here with a parquet row
//! selection. Every other column (data, `_valid_from`,
//! `_execution_id`, surrogate key) is carried over untouched.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use deltalake::arrow::array::{ArrayRef, BooleanArray, RecordBatch, TimestampMicrosecondArray};

use super::commit::OutFile;
use super::files::SelectedRows;
use super::gather::Sources;
use super::index::Location;
use super::plan;
use super::state::ClosingRows;
use super::Result;
use super::TableStore;
use crate::merge::Key;
use crate::par::par_map;

/// One close: the stored row, the new `_valid_to` and whether the closed
/// version is marked deleted.
struct Close<'a> {
    row: u32,
    valid_to: i64,
    deleted: bool,
    key: &'a Key,
}

/// The closes of a run, per file holding the open versions.
#[derive(Default)]
pub(super) struct CloseAt<'a>(BTreeMap<u32, Vec<Close<'a>>>);

impl<'a> CloseAt<'a> {
    pub(super) fn add(&mut self, at: Location, valid_to: i64, deleted: bool, key: &'a Key) {
        self.0.entry(at.file).or_default().push(Close { row: at.row, valid_to, deleted, key });
    }
}

impl TableStore {
    /// The closed versions as history files (full files, not one small file
    /// per source file), with their keys.
    pub(super) async fn stage_closes(
        &self,
        close_at: CloseAt<'_>,
        closing: ClosingRows,
    ) -> Result<Vec<OutFile>> {
        let r = &self.meta.reserved;
        let mut want = BTreeMap::new();
        let mut closes = BTreeMap::new();
        for (id, mut rows) in close_at.0 {
            rows.sort_unstable_by_key(|c| c.row);
            want.insert(id, rows.iter().map(|c| c.row).collect::<Vec<u32>>());
            closes.insert(id, rows);
        }
        let mut got = self.take_closing_rows(closing, &mut want);
        for sel in self.read_selected(want).await? {
            let all = (0..sel.batch.num_rows() as u32).collect();
            got.push((sel.file, sel.batch, all));
        }
        // (source, row) per closed version, in file and row order, with
        // its close and key.
        let mut sources = Vec::with_capacity(got.len());
        let (mut order, mut here, mut keys) = (vec![], vec![], vec![]);
        for (id, batch, pos) in got {
            let source = sources.len();
            sources.push(batch);
            for (c, p) in closes[&id].iter().zip(pos) {
                order.push((source, p as usize));
                here.push((c.valid_to, c.deleted));
                keys.push(c.key.clone());
            }
        }
        if order.is_empty() {
            return Ok(vec![]);
        }
        // The rows come in the columns their files hold (see
        // `columns_kept`): a history file takes the columns its rows' files
        // hold, NULL where one lacks a column, and a row from a far wider
        // file than the others is cut into a file of its own size.
        let batches: Vec<&RecordBatch> = sources.iter().collect();
        let gather = Sources::new(&batches);
        let widths: Vec<usize> = order.iter().map(|(s, _)| sources[*s].num_columns()).collect();
        let chunk = plan::even_chunk(order.len(), self.meta.layout.file_rows);
        let ranges: Vec<Range<usize>> = (plan::slices(order.len(), chunk))
            .flat_map(|c| {
                plan::cut_by_width(&widths[c.clone()], c.len(), plan::FILE_CELLS)
                    .into_iter()
                    .map(move |p| c.start + p.start..c.start + p.end)
            })
            .collect();
        // Each history file is gathered straight from the rows read (one
        // copy, on all cores), with `_valid_to` and `_is_deleted` replaced;
        // every other column is carried over untouched.
        let files = par_map(ranges, |rg: Range<usize>| {
            let order = &order[rg.clone()];
            let here = &here[rg.clone()];
            let mut used: Vec<usize> = order.iter().map(|(s, _)| *s).collect();
            used.dedup();
            let schema = self.held_schema(used.iter().map(|&s| &sources[s]));
            let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
            for f in schema.fields().iter() {
                let name = f.name().as_str();
                if name == r.valid_to {
                    cols.push(Arc::new(
                        TimestampMicrosecondArray::from_iter_values(here.iter().map(|c| c.0))
                            .with_timezone("UTC"),
                    ));
                    continue;
                }
                if name == r.is_deleted {
                    cols.push(Arc::new(BooleanArray::from_iter(here.iter().map(|c| Some(c.1)))));
                    continue;
                }
                // NULL in rows from files without the column.
                let col = gather.column(f, order).map_err(|e| self.data_err(e.to_string()))?;
                cols.push(col);
            }
            let batch =
                RecordBatch::try_new(schema, cols).map_err(|e| self.data_err(e.to_string()))?;
            Ok(OutFile { current: false, keys: keys[rg].to_vec(), batch, briefs: None })
        });
        files.into_iter().collect()
    }

    /// The wanted rows `load_states` already read, per file (a file is taken
    /// from them only when all its wanted rows are there): the batch read
    /// and where each wanted row is in it. What is taken leaves `want`.
    fn take_closing_rows(
        &self,
        closing: ClosingRows,
        want: &mut BTreeMap<u32, Vec<u32>>,
    ) -> Vec<(u32, RecordBatch, Vec<u32>)> {
        let mut got = vec![];
        for SelectedRows { file, rows, batch, .. } in closing.0 {
            let Some(need) = want.get(&file) else { continue };
            let pos: Option<Vec<u32>> =
                need.iter().map(|r| rows.binary_search(r).ok().map(|p| p as u32)).collect();
            if let Some(pos) = pos {
                got.push((file, batch, pos));
                want.remove(&file);
            }
        }
        got
    }
}
