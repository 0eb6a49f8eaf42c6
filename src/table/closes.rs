//! scd2 closes at the Arrow level.
//!
//! A processing-time close (`Need::Close`) never becomes values: the stored
//! open version is copied into history as it is, with `_valid_to` and
//! `_is_deleted` replaced. Its physical row comes from the key index, and
//! `load_states` has read it already in the same pass as the rows the merge
//! needed ([`ClosingRows`]: from the file's row companion when it has one,
//! `rowstore.rs`); anything missing is read here with a parquet row
//! selection. Every other column (data, `_valid_from`,
//! `_execution_id`, surrogate key) is carried over untouched.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use deltalake::arrow::array::{BooleanArray, RecordBatch, TimestampMicrosecondArray};
use deltalake::arrow::compute::interleave_record_batch;

use super::commit::OutFile;
use super::files::SelectedRows;
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
        // Rows read before this run added columns lack them: NULL there.
        let current = self.arrow_schema();
        let mut sources = Vec::with_capacity(got.len());
        // (source, row) per closed version, in file and row order, with
        // its close and key.
        let (mut order, mut here, mut keys) = (vec![], vec![], vec![]);
        for (id, batch, pos) in got {
            let source = sources.len();
            sources.push(with_schema(batch, &current).map_err(|e| self.data_err(e))?);
            for (c, p) in closes[&id].iter().zip(pos) {
                order.push((source, p as usize));
                here.push((c.valid_to, c.deleted));
                keys.push(c.key.clone());
            }
        }
        if order.is_empty() {
            return Ok(vec![]);
        }
        // Each history file is gathered straight from the rows read (one
        // copy, on all cores), with `_valid_to` and `_is_deleted` replaced;
        // every other column is carried over untouched.
        let (valid_to, is_deleted) = (
            current.index_of(&r.valid_to).map_err(|e| self.data_err(e.to_string()))?,
            current.index_of(&r.is_deleted).map_err(|e| self.data_err(e.to_string()))?,
        );
        let sources: Vec<&RecordBatch> = sources.iter().collect();
        let chunk = plan::even_chunk(order.len(), self.meta.layout.file_rows);
        let files = par_map(plan::slices(order.len(), chunk).collect(), |r: Range<usize>| {
            let batch = interleave_record_batch(&sources, &order[r.clone()])
                .map_err(|e| self.data_err(e.to_string()))?;
            let mut cols = batch.columns().to_vec();
            let here = &here[r.clone()];
            cols[valid_to] = Arc::new(
                TimestampMicrosecondArray::from_iter_values(here.iter().map(|c| c.0))
                    .with_timezone("UTC"),
            );
            cols[is_deleted] = Arc::new(BooleanArray::from_iter(here.iter().map(|c| Some(c.1))));
            let batch = RecordBatch::try_new(batch.schema(), cols)
                .map_err(|e| self.data_err(e.to_string()))?;
            Ok(OutFile { current: false, keys: keys[r].to_vec(), batch, briefs: None })
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

/// A batch in `schema`: columns by name, NULL where the batch has none
/// (columns added after it was read).
fn with_schema(
    batch: RecordBatch,
    schema: &Arc<deltalake::arrow::datatypes::Schema>,
) -> std::result::Result<RecordBatch, String> {
    if batch.schema() == *schema {
        return Ok(batch);
    }
    let n = batch.num_rows();
    let cols = schema
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            Some(c) => c.clone(),
            None => deltalake::arrow::array::new_null_array(f.data_type(), n),
        })
        .collect();
    RecordBatch::try_new(schema.clone(), cols).map_err(|e| e.to_string())
}
