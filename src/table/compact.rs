//! TODO

use deltalake::arrow::array::BooleanArray;

use super::commit::PendingCommit;
use super::parquet::{encode_all, key_columns};
use super::plan::COMPACT_BELOW_ROWS;
use super::Result;
use super::{TableError, TableStore};
use crate::merge::{Key, Spec};

impl TableStore {
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
}
