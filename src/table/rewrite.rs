//! Copy-on-write of the current files a run touches: every untouched row
//! stays at its position, a replaced row's new version takes its place, a
//! dropped row's place (removed key, masked row) is taken by the file's last
//! surviving row, and new keys topping up a small file go at its end.
//!
//! Why this shape: the key index already says which physical row of which
//! file each replaced or removed key lives in, so a rewrite needs no key
//! lookups per stored row and no value per cell. Rows that keep their
//! position keep their key index entries too: the new file takes the old
//! one's id, and only moved and appended rows are placed again, so a commit
//! updates the index for the rows it changed, not for every row of every
//! file it rewrote (that was a fifth of a narrow-table run). Each file is
//! one independent CPU job (decode, one `interleave` per column, encode
//! with its statistics) and the jobs of a wave run on all cores, so reading
//! one file overlaps encoding another. Rows stay in the file they were in,
//! so a file's key range stays tight for readers that skip files on
//! statistics. See docs/performance.md, "Copy-on-write".

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use std::sync::Arc;

use deltalake::arrow::array::{ArrayRef, RecordBatch};
use deltalake::arrow::datatypes::Schema;
use futures::{StreamExt, TryStreamExt};

use super::commit::{EncodedFile, FileKeys, PendingCommit};
use super::file_stats::file_stats;
use super::gather::Sources;
use super::index::Location;
use super::parquet::{encode_parquet, key_columns, Cuts};
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

/// Where each row of a rewritten file comes from, as `interleave` indices,
/// and which rows changed position.
#[derive(Debug, PartialEq)]
pub(super) struct RowPlan {
    /// Per output row: source 0 is the stored file (its physical row),
    /// source 1 the new versions (replacements in row order, then the
    /// appended new keys).
    pub(super) sources: Vec<(usize, usize)>,
    /// Output rows holding a stored row that was elsewhere in the file.
    pub(super) moved: Vec<u32>,
    /// Output rows from here on are appended new keys.
    pub(super) appended_from: usize,
}

/// The row plan of a rewrite: a replaced row's new version takes its
/// place; a dropped row's place is taken by the file's last surviving row
/// (as `swap_remove` does), so only as many stored rows move as are
/// dropped, and every other row keeps its position and with it its key
/// index entry; appended new keys go at the end. `dropped` lists the stored
/// rows that drop (removed keys, masked rows), sorted.
pub(super) fn plan_rows(rows: usize, replace: &[u32], dropped: &[u32], appended: usize) -> RowPlan {
    let mut sources: Vec<(usize, usize)> = (0..rows).map(|r| (0, r)).collect();
    for (j, &r) in replace.iter().enumerate() {
        sources[r as usize] = (1, j);
    }
    let is_dropped = |r: usize| dropped.binary_search(&(r as u32)).is_ok();
    let mut len = rows;
    let mut moved = vec![];
    for &g in dropped {
        let g = g as usize;
        if g >= len {
            break; // cut off with the tail already
        }
        // Take the last surviving row into g's place; dropped rows at the
        // tail are cut off on the way.
        loop {
            len -= 1;
            if len == g {
                break;
            }
            if !is_dropped(len) {
                sources[g] = sources[len];
                moved.push(g as u32);
                break;
            }
        }
    }
    sources.truncate(len);
    let appended_from = sources.len();
    sources.extend((0..appended).map(|i| (1, replace.len() + i)));
    RowPlan { sources, moved, appended_from }
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
        let width = self.file_width();
        for (&id, e) in edits.iter_mut() {
            let f = self.files[id as usize].as_ref().expect("live file");
            if !plan::is_small_for_top_up(f.rows, layout) {
                continue;
            }
            let masked = f.dv.as_ref().map_or(0, |d| d.len() as usize);
            let live = f.rows.saturating_sub(masked + e.remove.len());
            // Not beyond `plan::FILE_CELLS` at the widest row appended: a
            // far wider row goes to a new file of its own size instead.
            let mut widest = e.append.iter().map(|v| width(v)).max().unwrap_or(0);
            while live + e.append.len() < layout.file_rows {
                let Some(&(_, v)) = pending.front() else { return };
                let wider = widest.max(width(v));
                if (live + e.append.len() + 1).saturating_mul(wider) > plan::FILE_CELLS {
                    break;
                }
                pending.pop_front();
                widest = wider;
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
            edits.keys().map(|&id| (id, self.files[id as usize].as_ref().expect("live file").rows));
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
            let mut wave_files = vec![];
            for (&id, files) in wave.iter().zip(done) {
                let files = files?;
                // An empty result frees the id; otherwise the first file takes it.
                if files.is_empty() {
                    self.remove_file(id, pc);
                } else {
                    self.remove_replaced_file(id, pc);
                }
                wave_files.extend(files);
            }
            // The wave's files go up together (ids follow the files' order).
            self.put_files(wave_files, exec, pc).await?;
        }
        Ok(())
    }

    /// One file's job: its rows with the edits applied (see [`plan_rows`]),
    /// encoded with their statistics. The first file's worth of rows
    /// (`file_rows`, fewer where `plan::FILE_CELLS` cuts) replaces the file
    /// under its id; rows beyond go to new files.
    fn rewrite_one(
        &self,
        spec: &Spec,
        id: u32,
        edit: &FileEdit<'_>,
        stored: bytes::Bytes,
        key_cols: &[String],
    ) -> Result<Vec<EncodedFile>> {
        // The stored file in the columns it holds: a column NULL in all its
        // rows is not built as NULL buffers (see `columns_kept`).
        let batches = self.decode_file_as_held(id, stored)?;
        let data_err = |e: deltalake::arrow::error::ArrowError| self.data_err(e.to_string());
        let old = match &batches[..] {
            [] => RecordBatch::new_empty(self.file_schema(&vec![false; self.columns.len()])),
            [one] => one.clone(),
            [first, ..] => deltalake::arrow::compute::concat_batches(&first.schema(), &batches)
                .map_err(data_err)?,
        };
        let f = self.files[id as usize].as_ref().expect("live file");
        let new: Vec<&Version> =
            edit.replace.iter().map(|(_, v)| *v).chain(edit.append.iter().copied()).collect();
        let replaced: Vec<u32> = edit.replace.iter().map(|(r, _)| *r).collect();
        let mut dropped = edit.remove.clone();
        if let Some(dv) = &f.dv {
            dropped.extend(dv.iter().map(|r| r as u32));
        }
        dropped.sort_unstable();
        dropped.dedup();
        // The key index names each stored row once: a row past the end, a row
        // replaced twice or both replaced and dropped means it is wrong, and a
        // rewrite would lose a version.
        let past_end = replaced.iter().chain(&dropped).any(|&r| r as usize >= old.num_rows());
        let twice = replaced.windows(2).any(|w| w[0] >= w[1])
            || replaced.iter().any(|r| dropped.binary_search(r).is_ok());
        if past_end || twice {
            let msg = format!("{}: the key index names rows of this file inconsistently", f.path);
            return Err(self.data_err(msg));
        }
        let plan = plan_rows(old.num_rows(), &replaced, &dropped, edit.append.len());
        let briefs = self.rewritten_briefs(id, old.num_rows(), &new, &plan.sources);
        // The new file holds the columns the stored file holds and those
        // the new versions have values in. Each side is built in its own
        // columns only and is NULL in the other's (see `gather.rs`).
        let filled = self.columns_kept(Some(&new));
        let new_rows = self.to_batch_keeping(&new, &filled)?;
        let batches = [&old, &new_rows];
        let sources = Sources::new(&batches);
        let kept: Vec<bool> = (self.columns.iter().zip(&filled))
            .map(|((n, _), &f)| f || (self.stored(n) && sources.holds(0, n)))
            .collect();
        let schema = self.file_schema(&kept);
        let table = self.stats_schema();
        let codec = plan::codec(true, &self.meta.layout);
        // Files of at most `file_rows` rows and `plan::FILE_CELLS` cells, a
        // stored row counted at the stored file's width: new keys topping
        // up a file one wide row made wide go to a file of their own width.
        let width = self.file_width();
        let at: std::collections::HashMap<&str, usize> =
            (self.columns.iter().enumerate()).map(|(i, (n, _))| (n.as_str(), i)).collect();
        let widths: Vec<usize> = (plan.sources.iter())
            .map(|&(s, i)| if s == 0 { old.num_columns() } else { width(new[i]) })
            .collect();
        (plan::cut_by_width(&widths, self.meta.layout.file_rows, plan::FILE_CELLS).into_iter())
            .map(|r| {
                // Each file in the columns its rows' sides hold, then without
                // those NULL in all its rows.
                let order = &plan.sources[r.clone()];
                let stored = order.iter().any(|o| o.0 == 0);
                // The data columns this range's own new versions fill: a
                // narrow range is not gathered in a wide version's columns.
                let added: Vec<&Version> =
                    order.iter().filter(|o| o.0 == 1).map(|o| new[o.1]).collect();
                let added = (!added.is_empty()).then(|| self.columns_kept(Some(&added)));
                let from_new = |name: &str| match (&added, at.get(name)) {
                    (Some(a), Some(&i)) => a[i],
                    (Some(_), None) => sources.holds(1, name), // system columns
                    (None, _) => false,
                };
                let fields: Vec<_> = (schema.fields().iter())
                    .filter(|f| (stored && sources.holds(0, f.name())) || from_new(f.name()))
                    .cloned()
                    .collect();
                let cols = (fields.iter().map(|f| sources.column(f, order)))
                    .collect::<std::result::Result<Vec<ArrayRef>, _>>()
                    .map_err(data_err)?;
                let batch =
                    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(data_err)?;
                let batch = self.without_empty_columns(batch)?;
                let keys = if r.start == 0 {
                    // Moved and appended rows are the only ones whose entries change.
                    let rows: Vec<usize> = (plan.moved.iter().map(|&m| m as usize))
                        .chain(plan.appended_from..r.end)
                        .filter(|&row| row < r.end)
                        .collect();
                    FileKeys::InPlace { slot: id, moved: self.keys_at(spec, &batch, &rows) }
                } else {
                    let rows: Vec<usize> = (0..batch.num_rows()).collect();
                    FileKeys::Sparse(self.keys_at(spec, &batch, &rows))
                };
                let bytes = encode_parquet(&batch, key_cols, codec, Cuts::default())
                    .map_err(|e| self.data_err(e))?;
                Ok(EncodedFile {
                    current: true,
                    codec,
                    keys,
                    rows: batch.num_rows(),
                    stats: file_stats(&batch, &self.stats_columns, &table),
                    bytes: bytes.into(),
                    companion: self.companion(
                        true,
                        &batch,
                        briefs.as_ref().map(|b| b.slice(r.start, r.len())).as_ref(),
                    ),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_on_write_keeps_untouched_rows_in_place_and_replaces_changed_rows_where_they_were() {
        // Rows 0..8: 1 and 4 replaced; 2 and 6 dropped; two new keys appended.
        // Row 7 (the last survivor) fills 2; 6 is cut off with the tail.
        let p = plan_rows(8, &[1, 4], &[2, 6], 2);
        assert_eq!(p.sources, vec![(0, 0), (1, 0), (0, 7), (0, 3), (1, 1), (0, 5), (1, 2), (1, 3)]);
        assert_eq!(p.moved, vec![2]);
        assert_eq!(p.appended_from, 6);
        // Nothing changed: the stored rows, in order, none moved.
        let p = plan_rows(3, &[], &[], 0);
        assert_eq!((p.sources, p.moved), (vec![(0, 0), (0, 1), (0, 2)], vec![]));
    }

    #[test]
    fn dropped_rows_at_the_tail_are_cut_off_and_a_replaced_last_row_moves_with_its_new_version() {
        // The last rows are dropped: nothing moves.
        assert_eq!(plan_rows(5, &[], &[3, 4], 0).sources, vec![(0, 0), (0, 1), (0, 2)]);
        // Every row dropped: an empty file.
        assert!(plan_rows(3, &[], &[0, 1, 2], 0).sources.is_empty());
        // Row 0 dropped, the last row (replaced) takes its place with its new version.
        let p = plan_rows(3, &[2], &[0], 0);
        assert_eq!(p.sources, vec![(1, 0), (0, 1)]);
        assert_eq!(p.moved, vec![0]);
        // Every surviving row appears once, at its own place or listed as moved.
        let replaced = [0u32, 9];
        let p = plan_rows(10, &replaced, &[1, 3, 8], 1);
        let mut seen: Vec<(usize, usize)> = p.sources.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 10 - 3 + 1);
        for (at, s) in p.sources.iter().enumerate().take(p.appended_from) {
            let in_place = *s == (0, at) || (s.0 == 1 && replaced[s.1] as usize == at);
            assert!(in_place || p.moved.contains(&(at as u32)), "row {at}: {s:?}");
        }
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
            brief: None,
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
