//! Copy-on-write of the current files a run touches: every untouched row
//! stays at its position, a replaced row's new version takes its place, and
//! removed (or masked) rows drop out; new keys topping up a small file go at
//! its end.
//!
//! Why this shape: the key index already says which physical row of which
//! file each replaced or removed key lives in, so a rewrite needs no key
//! lookups per stored row and no value per cell. Each file is then one
//! independent CPU job (decode, one `interleave` per column, encode with its
//! statistics) and the jobs of a wave run on all cores, so reading one file
//! overlaps encoding another instead of the two being separate phases with
//! the whole wave held decoded in between. Keeping rows in place also keeps
//! the key clustering of the file, so its key range stays tight for readers
//! that skip files on statistics. See docs/performance.md, "Copy-on-write".

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use deltalake::arrow::array::{Array, ArrayRef, RecordBatch};
use futures::{StreamExt, TryStreamExt};

use super::commit::{EncodedFile, PendingCommit};
use super::file_stats::file_stats;
use super::index::Location;
use super::parquet::{encode_parquet, key_columns};
use super::plan;
use super::Result;
use super::TableStore;
use crate::merge::{Key, Spec, Version};
use crate::par::par_map;

/// Files of a wave read at once (object stores answer reads in parallel;
/// a local disk does not mind).
const FETCHES_IN_FLIGHT: usize = 8;

/// What a run changes in one rewritten current file.
#[derive(Default)]
pub(super) struct FileEdit<'a> {
    /// Physical rows replaced by a new version of their key.
    pub(super) replace: Vec<(u32, &'a Version)>,
    /// Physical rows of removed keys.
    pub(super) remove: Vec<u32>,
    /// New keys appended at the end (topping up a small file), in key order.
    pub(super) append: Vec<&'a Version>,
}

/// Edits of every rewritten file, by file id.
pub(super) type Edits<'a> = BTreeMap<u32, FileEdit<'a>>;

/// Sorts upserts of stored rows and removes into per-file edits: those in a
/// file being rewritten become its edits, the others are returned (their new
/// versions go to new files; their old rows are masked).
pub(super) fn plan_edits<'a>(
    rewrite: &BTreeSet<u32>,
    replaced: Vec<(&'a Key, &'a Version, Location)>,
    removed: &[Location],
) -> (Edits<'a>, Vec<(&'a Key, &'a Version)>) {
    let mut edits: Edits<'a> = rewrite.iter().map(|&id| (id, FileEdit::default())).collect();
    let mut elsewhere = vec![];
    for (k, v, at) in replaced {
        match edits.get_mut(&at.file) {
            Some(e) => e.replace.push((at.row, v)),
            None => elsewhere.push((k, v)),
        }
    }
    for at in removed {
        if let Some(e) = edits.get_mut(&at.file) {
            e.remove.push(at.row);
        }
    }
    for e in edits.values_mut() {
        e.replace.sort_unstable_by_key(|(r, _)| *r);
        e.remove.sort_unstable();
    }
    (edits, elsewhere)
}

/// Where each row of a rewritten file comes from, as `interleave` indices:
/// source 0 is the stored file (`rows` physical rows), source 1 the new
/// versions (replacements in row order, then `appended` new keys). Rows
/// `gone` says are dropped.
pub(super) fn row_sources(
    rows: usize,
    replace: &[u32],
    gone: impl Fn(u32) -> bool,
    appended: usize,
) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(rows + appended);
    let mut next = replace.iter().peekable();
    let mut new_at = 0usize;
    for r in 0..rows as u32 {
        if next.peek() == Some(&&r) {
            next.next();
            out.push((1, new_at));
            new_at += 1;
        } else if !gone(r) {
            out.push((0, r as usize));
        }
    }
    out.extend((0..appended).map(|i| (1, new_at + i)));
    out
}

impl TableStore {
    /// Gives small rewritten files new keys from the front of `pending`
    /// (copy-on-write top-up): each fills up to `file_rows` rows.
    pub(super) fn top_up<'a>(
        &self,
        edits: &mut Edits<'a>,
        pending: &mut VecDeque<(&'a Key, &'a Version)>,
    ) {
        let layout = &self.meta.layout;
        for (&id, e) in edits.iter_mut() {
            let f = self.files[id as usize].as_ref().expect("live file");
            if !plan::is_small_for_top_up(f.rows, layout) {
                continue;
            }
            let masked = f.dv.as_ref().map_or(0, |d| d.len() as usize);
            let live = f.rows.saturating_sub(masked + e.remove.len());
            while live + e.append.len() < layout.file_rows {
                let Some((_, v)) = pending.pop_front() else { return };
                e.append.push(v);
            }
        }
    }

    /// Rewrites the edited files in waves (see [`plan::waves`]): a wave's
    /// files are fetched, then rewritten and encoded on all cores, one job
    /// per file, then stored, before the next wave is fetched.
    pub(super) async fn rewrite_files(
        &mut self,
        spec: &Spec,
        edits: &Edits<'_>,
        exec: i64,
        pc: &mut PendingCommit,
    ) -> Result<()> {
        let sized =
            edits.keys().map(|&id| (id, self.files[id as usize].as_ref().map_or(0, |f| f.rows)));
        for wave in plan::waves(sized) {
            // Several reads in flight: on an object store each is a round trip.
            let this = &*self;
            let jobs: Vec<(u32, bytes::Bytes)> = futures::stream::iter(wave.iter().copied())
                .map(|id| async move { Ok::<_, super::TableError>((id, this.fetch(id).await?)) })
                .buffered(FETCHES_IN_FLIGHT)
                .try_collect()
                .await?;
            let keys = key_columns(spec);
            let done = par_map(jobs, |(id, stored)| {
                self.rewrite_one(spec, id, &edits[&id], stored, &keys)
            });
            for (id, files) in wave.iter().zip(done) {
                for f in files? {
                    self.put_file(f, exec, pc).await?;
                }
                self.remove_file(*id, pc);
            }
        }
        Ok(())
    }

    /// One file's job: its rows with the edits applied, cut into files of at
    /// most `file_rows` rows, encoded with their statistics and keys.
    fn rewrite_one(
        &self,
        spec: &Spec,
        id: u32,
        edit: &FileEdit<'_>,
        stored: bytes::Bytes,
        key_cols: &[String],
    ) -> Result<Vec<EncodedFile>> {
        let batches = self.decode_file(id, stored, None)?;
        let schema = self.arrow_schema();
        let data_err = |e: deltalake::arrow::error::ArrowError| self.data_err(e.to_string());
        let old = match batches.len() {
            1 => batches.into_iter().next().expect("one batch"),
            _ => deltalake::arrow::compute::concat_batches(&schema, batches.iter())
                .map_err(data_err)?,
        };
        let f = self.files[id as usize].as_ref().expect("live file");
        let new: Vec<&Version> =
            edit.replace.iter().map(|(_, v)| *v).chain(edit.append.iter().copied()).collect();
        let replaced: Vec<u32> = edit.replace.iter().map(|(r, _)| *r).collect();
        let sources = row_sources(
            old.num_rows(),
            &replaced,
            |r| f.deleted(r) || edit.remove.binary_search(&r).is_ok(),
            edit.append.len(),
        );
        let all = if new.is_empty() && sources.len() == old.num_rows() {
            old
        } else {
            let new = self.to_batch_refs(&new)?;
            let cols = (old.columns().iter().zip(new.columns()))
                .map(|(o, n)| {
                    deltalake::arrow::compute::interleave(
                        &[o.as_ref() as &dyn Array, n.as_ref()],
                        &sources,
                    )
                })
                .collect::<std::result::Result<Vec<ArrayRef>, _>>()
                .map_err(data_err)?;
            RecordBatch::try_new(schema, cols).map_err(data_err)?
        };
        let (all, keys) = self.keyed_rows(spec, all)?;
        let codec = plan::codec(true, &self.meta.layout);
        plan::slices(all.num_rows(), self.meta.layout.file_rows)
            .map(|r| {
                let batch = all.slice(r.start, r.len());
                let bytes =
                    encode_parquet(&batch, key_cols, codec).map_err(|e| self.data_err(e))?;
                Ok(EncodedFile {
                    current: true,
                    codec,
                    keys: keys[r].to_vec(),
                    rows: batch.num_rows(),
                    stats: file_stats(&batch, &self.stats_columns),
                    bytes,
                })
            })
            .collect()
    }

    /// A rewritten file's rows with their keys; a stored row without a key
    /// (all key columns NULL, which the merge never writes) is dropped, as
    /// the key index cannot place it.
    fn keyed_rows(&self, spec: &Spec, all: RecordBatch) -> Result<(RecordBatch, Vec<Key>)> {
        let keys = self.batch_keys(spec, &all);
        if keys.iter().all(Option::is_some) {
            return Ok((all, keys.into_iter().flatten().collect()));
        }
        let keep: deltalake::arrow::array::BooleanArray =
            keys.iter().map(|k| Some(k.is_some())).collect();
        let all = deltalake::arrow::compute::filter_record_batch(&all, &keep)
            .map_err(|e| self.data_err(e.to_string()))?;
        Ok((all, keys.into_iter().flatten().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_on_write_keeps_untouched_rows_in_place_and_replaces_changed_rows_where_they_were() {
        // Rows 0..6: 1 and 4 replaced, 2 removed, 5 masked; two new keys appended.
        let s = row_sources(6, &[1, 4], |r| r == 2 || r == 5, 2);
        assert_eq!(s, vec![(0, 0), (1, 0), (0, 3), (1, 1), (1, 2), (1, 3)]);
        // Nothing changed: the stored rows, in order.
        assert_eq!(row_sources(3, &[], |_| false, 0), vec![(0, 0), (0, 1), (0, 2)]);
    }

    #[test]
    fn edits_go_to_the_file_holding_the_stored_row_and_the_rest_to_new_files() {
        let (k1, k2, k3): (Key, Key, Key) = (b"a"[..].into(), b"b"[..].into(), b"c"[..].into());
        let v = Version {
            data: vec![],
            valid_from: None,
            valid_to: None,
            current: true,
            deleted: false,
            exec: 0,
            sk: None,
            loc: None,
        };
        let at = |file, row| Location { file, row };
        let rewrite: BTreeSet<u32> = [1, 2].into();
        let (edits, elsewhere) = plan_edits(
            &rewrite,
            vec![(&k1, &v, at(1, 9)), (&k2, &v, at(3, 0)), (&k3, &v, at(1, 4))],
            &[at(2, 7), at(3, 1), at(1, 2)],
        );
        assert_eq!(edits[&1].replace.iter().map(|(r, _)| *r).collect::<Vec<_>>(), vec![4, 9]);
        assert_eq!(edits[&1].remove, vec![2]);
        assert_eq!(edits[&2].remove, vec![7]);
        assert!(edits[&2].replace.is_empty());
        assert_eq!(elsewhere.len(), 1);
        assert_eq!(elsewhere[0].0, &k2);
    }
}
