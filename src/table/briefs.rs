//! Each key's closed scd2 versions in brief, kept with its current row
//! (`merge::brief`; docs/scd2.md, "Late rows without reading history").
//!
//! The brief is one more column of a current file's row companion, never of
//! the data file: Delta readers never see it, and a companion that lacks it
//! (written before briefs, rebuilt from its data file, or of a file that
//! compaction or a rewrite produced) only means the brief is unknown and a
//! late row for those keys reads history as before.
//!
//! A deleted key has no current row, so no companion record to carry its
//! brief: those are kept apart (`deleted_briefs.rs`).

use std::sync::Arc;

use deltalake::arrow::array::{Array, BinaryArray, Int64Array, RecordBatch};
use deltalake::arrow::datatypes::{DataType, Field, Schema};

use super::files::SelectedRows;
use super::rowcodec::Columns;
use super::FxMap;
use super::TableStore;
use crate::merge::{brief, Key, KeyMap, KeyState, Spec, Version};
use crate::value::DType;

/// The companion column holding each current row's brief.
const BRIEF_COLUMN: &str = "_changelake_brief";

impl TableStore {
    /// The fingerprint of the rules under which this table keeps each key's
    /// closed versions in brief with its current row (`merge::brief`): scd2
    /// tables with row companions and processing time. None: it keeps none.
    pub fn briefs(&self, spec: &Spec) -> Option<u64> {
        let processing = spec.valid_time == crate::merge::ValidTime::Processing;
        (self.rows.enabled() && processing).then(|| brief::fingerprint(spec))
    }

    /// What decoding a stored brief takes: the rules' fingerprint and the
    /// stored sequence columns' types; None when the table keeps no briefs
    /// or has no stored columns yet (its first run).
    pub(super) fn brief_decoding(&self, spec: &Spec) -> Option<(u64, Vec<DType>)> {
        let fingerprint = self.briefs(spec)?;
        let types: Option<Vec<DType>> =
            spec.seq.iter().map(|&i| self.columns.get(i).map(|c| c.1)).collect();
        Some((fingerprint, types?))
    }

    /// The briefs of new current rows, for their companion; None when the
    /// table keeps none (no version carries one).
    pub(super) fn briefs_of(&self, versions: &[&Version]) -> Option<BinaryArray> {
        if !self.rows.enabled() || versions.iter().all(|v| v.brief.is_none()) {
            return None;
        }
        Some(versions.iter().map(|v| v.brief.as_deref()).collect())
    }

    /// The briefs of all `rows` physical rows of a current file, from its
    /// companion, for a rewrite that carries them to its new file; None
    /// when the table keeps none or the companion has none (the rewrite's
    /// rows then have no brief).
    pub(super) fn file_briefs(&self, id: u32, rows: usize) -> Option<BinaryArray> {
        if !self.rows.enabled() || !self.has_companion(id) {
            return None;
        }
        let path = &self.files[id as usize].as_ref()?.path;
        let all: Vec<u32> = (0..rows as u32).collect();
        let read = self.rows.read(path, &all, Columns::Named(BRIEF_COLUMN)).ok()?;
        split_brief_column(read).1.filter(|b| b.len() == rows)
    }

    /// A rewritten file's briefs, in its new row order (`sources` as the
    /// rewrite interleaves stored rows, 0, and new versions, 1): stored rows
    /// keep theirs, new versions bring theirs.
    pub(super) fn rewritten_briefs(
        &self,
        id: u32,
        stored_rows: usize,
        new: &[&Version],
        sources: &[(usize, usize)],
    ) -> Option<BinaryArray> {
        if !self.rows.enabled() {
            return None;
        }
        let (stored, new_rows) = (self.file_briefs(id, stored_rows), new.len());
        let new = self.briefs_of(new);
        if stored.is_none() && new.is_none() {
            return None;
        }
        let nulls = |n| BinaryArray::new_null(n);
        let stored = stored.unwrap_or_else(|| nulls(stored_rows));
        let new = new.unwrap_or_else(|| nulls(new_rows));
        let all =
            deltalake::arrow::compute::interleave(&[&stored as &dyn Array, &new], sources).ok()?;
        all.as_any().downcast_ref::<BinaryArray>().cloned()
    }

    /// The briefs found in the rows `load_states` read: decoded for the
    /// current rows the merge needs (`keys_at`); as stored, with the run
    /// that wrote each, for the open versions the run closes (`closing_at`:
    /// each one's place in `closing`), which a close only extends.
    pub(super) fn take_briefs(
        &self,
        spec: &Spec,
        read: &[SelectedRows],
        keys_at: &FxMap<(u32, u32), &Key>,
        closing_at: &FxMap<(u32, u32), usize>,
        states: &mut KeyMap<KeyState>,
        closing: &mut [Option<brief::Stored>],
    ) {
        let Some((fingerprint, types)) = self.brief_decoding(spec) else { return };
        for sel in read {
            let Some(briefs) = &sel.briefs else { continue };
            let exec = sel.batch.column_by_name(&self.meta.reserved.execution_id);
            let exec = exec.and_then(|c| c.as_any().downcast_ref::<Int64Array>());
            for (i, &row) in sel.rows.iter().enumerate() {
                if briefs.is_null(i) {
                    continue;
                }
                let at = (sel.file, row);
                if let Some(k) = keys_at.get(&at) {
                    if let Some(list) = brief::decode(briefs.value(i), fingerprint, &types) {
                        states.entry((*k).clone()).or_default().brief = Some(list);
                    }
                } else if let Some(&c) = closing_at.get(&at) {
                    if let Some(e) = exec.filter(|e| e.is_valid(i)) {
                        let bytes = briefs.value(i).into();
                        closing[c] = Some(brief::Stored { bytes, exec: e.value(i) });
                    }
                }
            }
        }
    }
}

/// The briefs of the rows compaction keeps, file after file.
#[derive(Default)]
pub(super) struct CarriedBriefs {
    parts: Vec<BinaryArray>,
    any: bool,
}

impl CarriedBriefs {
    /// One file's briefs (None: it has none) and which of its rows are kept.
    pub(super) fn add(&mut self, briefs: Option<BinaryArray>, kept: &[bool]) {
        let kept_rows = kept.iter().filter(|k| **k).count();
        let part = briefs.filter(|b| b.len() == kept.len()).and_then(|b| {
            let mask = deltalake::arrow::array::BooleanArray::from(kept.to_vec());
            let f = deltalake::arrow::compute::filter(&b, &mask).ok()?;
            f.as_any().downcast_ref::<BinaryArray>().cloned()
        });
        self.any |= part.is_some();
        self.parts.push(part.unwrap_or_else(|| BinaryArray::new_null(kept_rows)));
    }

    /// Every kept row's brief, in order; None when no file had any.
    pub(super) fn joined(self) -> Option<BinaryArray> {
        if !self.any {
            return None;
        }
        let parts: Vec<&dyn Array> = self.parts.iter().map(|p| p as &dyn Array).collect();
        let all = deltalake::arrow::compute::concat(&parts).ok()?;
        all.as_any().downcast_ref::<BinaryArray>().cloned()
    }
}

/// A current file's rows with their briefs as one more column, for its companion.
pub(super) fn with_brief_column(batch: &RecordBatch, briefs: &BinaryArray) -> RecordBatch {
    let mut fields: Vec<Arc<Field>> = batch.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(BRIEF_COLUMN, DataType::Binary, true)));
    let mut cols = batch.columns().to_vec();
    cols.push(Arc::new(briefs.clone()));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .expect("one brief per row, binary column")
}

/// A companion's rows without the brief column, and that column if it has one.
pub(super) fn split_brief_column(batch: RecordBatch) -> (RecordBatch, Option<BinaryArray>) {
    let Ok(i) = batch.schema().index_of(BRIEF_COLUMN) else { return (batch, None) };
    let briefs = batch.column(i).as_any().downcast_ref::<BinaryArray>().cloned();
    let mut batch = batch;
    batch.remove_column(i);
    (batch, briefs)
}
