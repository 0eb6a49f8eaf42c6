//! Small-file compaction: streaming runs leave small files behind; once a
//! partition holds `compact_min_files` of them ([`plan::is_small_for_compaction`])
//! they are rewritten into full ones. Widening a decimal column rewrites
//! every file the same way, with the wider type (docs/types.md, type
//! changes): every reader then finds one type per column in every file.
//!
//! Rows are moved as Arrow columns, never changed, and the commit marks its
//! actions `dataChange: false`, so readers see the same rows before and after
//! and streaming readers skip it. Rows masked by a deletion vector are
//! dropped here for good.

use deltalake::arrow::array::{BooleanArray, RecordBatch};

use super::briefs::CarriedBriefs;
use super::commit::OutFile;
use super::commit::PendingCommit;
use super::plan;
use super::Result;
use super::TableStore;
use crate::merge::{Key, Spec};
use crate::phases::Phases;
use crate::value::DType;

impl TableStore {
    /// Stages the compaction of both partitions; None when nothing needs it.
    pub async fn stage_compaction(&mut self, spec: &Spec) -> Result<Option<PendingCommit>> {
        let layout = self.meta.layout.clone();
        if layout.compact_min_files == 0 || self.table.is_none() {
            return Ok(None);
        }
        let mut pc = PendingCommit::rearrange();
        for current in [true, false] {
            let small: Vec<u32> = self
                .files
                .iter()
                .enumerate()
                .filter_map(|(i, f)| {
                    f.as_ref()
                        .filter(|f| f.current == current)
                        .filter(|f| plan::is_small_for_compaction(f.live_rows(), &layout))
                        .map(|_| i as u32)
                })
                .collect();
            if small.len() < layout.compact_min_files {
                continue;
            }
            let files = self.compact_files(spec, &small, current, &mut pc).await?;
            self.write_files(spec, files, 0, &mut pc, &mut Phases::new()).await?;
        }
        Ok((pc.files_removed > 0).then_some(pc))
    }

    /// Stages the widening of decimal columns: the schema takes the wider
    /// types (written with the commit) and every live file is rewritten,
    /// one at a time, with them. Rows move unchanged (`dataChange: false`).
    pub async fn stage_widening(
        &mut self,
        spec: &Spec,
        widened: &[(String, DType)],
    ) -> Result<PendingCommit> {
        for (name, t) in widened {
            if let Some((_, stored)) = self.columns.iter_mut().find(|(c, _)| c == name) {
                *stored = *t;
                self.schema_changed = true;
            }
        }
        let mut pc = PendingCommit::rearrange();
        let live: Vec<(u32, bool)> = (self.files.iter().enumerate())
            .filter_map(|(i, f)| f.as_ref().map(|f| (i as u32, f.current)))
            .collect();
        for (id, current) in live {
            let files = self.compact_files(spec, &[id], current, &mut pc).await?;
            self.write_files(spec, files, 0, &mut pc, &mut Phases::new()).await?;
        }
        Ok(pc)
    }

    /// The live rows of `small` (one partition) as full files, staging the
    /// removal of the small ones.
    async fn compact_files(
        &self,
        spec: &Spec,
        small: &[u32],
        current: bool,
        pc: &mut PendingCommit,
    ) -> Result<Vec<OutFile>> {
        let mut batches: Vec<RecordBatch> = vec![];
        let mut keys: Vec<Key> = vec![];
        // Current rows keep their briefs of closed versions (`briefs.rs`).
        let mut briefs = CarriedBriefs::default();
        for &id in small {
            let f = self.files[id as usize].clone().expect("live file");
            let mut row_no = 0u32;
            let mut kept: Vec<bool> = vec![];
            for b in self.read_batches(id).await?.iter() {
                // In the current partition, rows without a key are dropped too:
                // the key list must stay aligned with the rows written.
                let bk = if current { self.batch_keys(spec, b) } else { vec![] };
                let live: BooleanArray = (0..b.num_rows())
                    .map(|r| Some(!f.deleted(row_no + r as u32) && (!current || bk[r].is_some())))
                    .collect();
                row_no += b.num_rows() as u32;
                kept.extend(live.iter().map(|l| l == Some(true)));
                let b = deltalake::arrow::compute::filter_record_batch(b, &live)
                    .map_err(|e| self.data_err(e.to_string()))?;
                keys.extend(
                    bk.into_iter()
                        .enumerate()
                        .filter(|(r, _)| live.value(*r))
                        .filter_map(|(_, k)| k),
                );
                batches.push(b);
            }
            if current {
                briefs.add(self.file_briefs(id, kept.len()), &kept);
            }
            self.remove_file(id, pc);
        }
        // Each file's rows come in the columns it holds: joined in the
        // columns any of them holds (see `columns_kept`).
        let schema = self.held_schema(&batches);
        let batches = (batches.into_iter())
            .map(|b| super::convert::padded_to(b, &schema))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| self.data_err(e.to_string()))?;
        let all = deltalake::arrow::compute::concat_batches(&schema, &batches)
            .map_err(|e| self.data_err(e.to_string()))?;
        let briefs = briefs.joined();
        let rows = plan::rows_within_cells(schema.fields().len(), self.meta.layout.file_rows);
        Ok(plan::slices(all.num_rows(), rows)
            .map(|r| OutFile {
                current,
                keys: if current { keys[r.clone()].to_vec() } else { vec![] },
                batch: all.slice(r.start, r.len()),
                briefs: briefs.as_ref().map(|b| b.slice(r.start, r.len())),
            })
            .collect())
    }
}
