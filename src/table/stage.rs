//! Staging: a merge output becomes data files and Delta actions, nothing is
//! committed yet.
//!
//! The steps follow the layout of [`super::plan`]: locate the stored rows the
//! output replaces or removes, decide which current files are rewritten and
//! which masked, rewrite the former in place at the Arrow level (see
//! `rewrite.rs`: untouched rows are never converted to values), write new keys
//! to new files, stage deletion vectors, append history and closes, then
//! encode every new file on all cores and store it.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::closes::CloseAt;
use super::commit::{EncodedFile, FileKeys, OutFile, PendingCommit};
use super::index::{Location, NO_FILE};
use super::parquet::{encode_all, key_columns};
use super::plan;
use super::rewrite::plan_edits;
use super::state::ClosingRows;
use super::Result;
use super::TableStore;
use crate::merge::{Key, Output, Spec, Version};
use crate::phases::Phases;

/// The output's upserts and removes, located by the key index.
struct Located<'a> {
    /// Upserts of keys with a stored current row, and where that row lives.
    replaced: Vec<(&'a Key, &'a Version, Location)>,
    /// Upserts of keys without one.
    new_rows: Vec<(&'a Key, &'a Version)>,
    /// Stored rows of removed keys.
    removed: Vec<Location>,
}

/// Sorts rows by their business keys' bytes. Keys live behind a pointer
/// each, and comparing them in place missed the cache at every step (a
/// sixth of a merge-on-read run's main thread on the narrow shape, where
/// every upsert goes to a new file). What is sorted instead is each key's
/// first 16 bytes, inline, with the row's position, on all cores; whole keys
/// are compared only where those tie.
fn sort_by_key<'a, V: Copy + Send + Sync>(rows: &mut [(&'a Key, V)]) {
    use rayon::slice::ParallelSliceMut;
    let head = |k: &[u8]| {
        let mut b = [0u8; 16];
        let n = k.len().min(16);
        b[..n].copy_from_slice(&k[..n]);
        u128::from_be_bytes(b)
    };
    let mut order: Vec<(u128, u32)> =
        rows.iter().enumerate().map(|(i, (k, _))| (head(k), i as u32)).collect();
    order.par_sort_unstable_by(|a, b| {
        a.0.cmp(&b.0).then_with(|| rows[a.1 as usize].0.cmp(rows[b.1 as usize].0))
    });
    let sorted: Vec<(&'a Key, V)> = order.iter().map(|&(_, i)| rows[i as usize]).collect();
    rows.copy_from_slice(&sorted);
}

impl TableStore {
    /// Turns a merge output into files and actions (nothing is committed yet).
    /// Takes the output's key-index entries (they move into the pending
    /// commit) and the stored rows `load_states` read for the versions the
    /// output closes.
    pub async fn stage(
        &mut self,
        spec: &Spec,
        out: &mut Output,
        exec: i64,
        closing: ClosingRows,
    ) -> Result<PendingCommit> {
        let mut pc = PendingCommit {
            index: std::mem::take(&mut out.index),
            deleted_briefs: std::mem::take(&mut out.deleted_briefs),
            ..Default::default()
        };
        let out = &*out;
        let mut phases = Phases::new();
        let located = self.locate_output(out);
        let gone: Vec<Location> = located
            .replaced
            .iter()
            .map(|(_, _, at)| *at)
            .chain(located.removed.iter().copied())
            .collect();
        let layout = &self.meta.layout;
        let current = plan::plan_current(&self.files, &gone, !located.new_rows.is_empty(), layout);
        // Replaced rows in files being rewritten are replaced in place (see
        // `rewrite.rs`); those in masked files are appended like new keys.
        let (mut edits, elsewhere) =
            plan_edits(&current.rewrite, located.replaced, &located.removed);
        let mut new_rows = located.new_rows;
        new_rows.extend(elsewhere);
        sort_by_key(&mut new_rows);
        let close_at = self.locate_closes(out)?;
        let mut pending_new: VecDeque<(&Key, &Version)> = new_rows.into();
        self.top_up(&mut edits, &mut pending_new);
        phases.mark("plan");
        self.rewrite_files(spec, &edits, exec, &mut pc).await?;
        phases.mark("rewrite");
        let mut queue = self.new_key_files(pending_new)?;
        phases.mark("build");
        if !current.masked.is_empty() {
            self.stage_deletion_vectors(current.masked, &mut pc).await?;
        }
        phases.mark("deletion_vectors");
        queue.extend(self.stage_history(spec, out, &mut pc).await?);
        phases.mark("history");
        queue.extend(self.stage_closes(close_at, closing).await?);
        phases.mark("closes");
        self.write_files(spec, queue, exec, &mut pc, &mut phases).await?;
        tracing::debug!(target: "changelake::table", phases_ms = ?phases.done(), "stage phases");
        Ok(pc)
    }

    /// Where the stored rows of the output's upserts and removes live: one
    /// index lookup per key.
    fn locate_output<'a>(&self, out: &'a Output) -> Located<'a> {
        let mut located = Located { replaced: vec![], new_rows: vec![], removed: vec![] };
        let found = self.index.locate(&out.upserts, |(k, _)| k);
        for ((k, v), at) in out.upserts.iter().zip(found) {
            match at.filter(|at| at.file != NO_FILE) {
                Some(at) => located.replaced.push((k, v, at)),
                None => located.new_rows.push((k, v)),
            }
        }
        let found = self.index.locate(&out.removes, |k| k);
        located.removed = found.into_iter().flatten().filter(|at| at.file != NO_FILE).collect();
        located
    }

    /// scd2 closes (`Need::Close`): where each closed open version lives.
    fn locate_closes<'a>(&self, out: &'a Output) -> Result<CloseAt<'a>> {
        let mut close_at = CloseAt::default();
        let found = self.index.locate(&out.closes, |(k, _, _)| k);
        for ((k, to, deleted), at) in out.closes.iter().zip(found) {
            match at.filter(|at| at.file != NO_FILE) {
                Some(at) => close_at.add(at, *to, *deleted, k),
                None => {
                    return Err(self.data_err("closing a version the key index does not locate"))
                }
            }
        }
        Ok(close_at)
    }

    /// New keys (and, with merge-on-read, new versions of masked rows) in
    /// key order, spread over new current files (see [`plan::new_key_file_rows`]).
    fn new_key_files(&self, pending_new: VecDeque<(&Key, &Version)>) -> Result<Vec<OutFile>> {
        if pending_new.is_empty() {
            return Ok(vec![]);
        }
        let chunk = plan::new_key_file_rows(pending_new.len(), &self.meta.layout);
        let all: Vec<(&Key, &Version)> = pending_new.into_iter().collect();
        // A chunk holding a row far wider than the rest is cut around it.
        let width = self.file_width();
        let files: Vec<&[(&Key, &Version)]> = (all.chunks(chunk))
            .flat_map(|c| {
                let widths: Vec<usize> = c.iter().map(|(_, v)| width(v)).collect();
                plan::cut_by_width(&widths, c.len(), plan::FILE_CELLS)
                    .into_iter()
                    .map(move |r| &c[r])
            })
            .collect();
        // Files on all cores: copying a file's keys (the commit keeps them
        // for the key index) is a cache miss per key, and on the narrow
        // shape, where every upsert goes to a new file, it was the longest
        // serial step of staging.
        crate::par::par_map(files, |c| {
            let keys: Vec<Key> = c.iter().map(|(k, _)| (*k).clone()).collect();
            let vs: Vec<&Version> = c.iter().map(|(_, v)| *v).collect();
            let briefs = self.briefs_of(&vs);
            Ok(OutFile { current: true, keys, batch: self.to_batch_refs(&vs)?, briefs })
        })
        .into_iter()
        .collect()
    }

    /// History partition: appends go to new files; a history file holding a
    /// replaced version (business-time backdating) is rewritten with it.
    async fn stage_history(
        &self,
        spec: &Spec,
        out: &Output,
        pc: &mut PendingCommit,
    ) -> Result<Vec<OutFile>> {
        let mut touched: BTreeMap<u32, HashMap<u32, &Version>> = BTreeMap::new();
        for (loc, v) in &out.history_replacements {
            touched.entry(loc.file).or_default().insert(loc.row, v);
        }
        let mut appends: Vec<Version> = out.history_appends.clone();
        for (id, repl) in touched {
            let rows = self.read_file(id, spec).await?;
            for v in rows.versions {
                // `Loc.row` is the physical row (rows masked by a DV are not in `rows`).
                let row = v.loc.map_or(u32::MAX, |l| l.row);
                appends.push(repl.get(&row).map(|v| (*v).clone()).unwrap_or(v));
            }
            self.remove_file(id, pc);
        }
        let widths: Vec<usize> = appends.iter().map(self.file_width()).collect();
        plan::cut_by_width(&widths, self.meta.layout.file_rows, plan::FILE_CELLS)
            .into_iter()
            .map(|r| &appends[r])
            .map(|c| {
                let keys = c.iter().filter_map(|v| spec.key_of(&v.data)).collect();
                Ok(OutFile { current: false, keys, batch: self.to_batch(c)?, briefs: None })
            })
            .collect()
    }

    /// Encodes files on all cores (parquet encoding is the CPU-heavy part of
    /// a run) and stores them, staging their `add` actions.
    pub(super) async fn write_files(
        &mut self,
        spec: &Spec,
        files: Vec<OutFile>,
        exec: i64,
        pc: &mut PendingCommit,
        phases: &mut Phases,
    ) -> Result<()> {
        let files = (files.into_iter())
            .map(|f| Ok(OutFile { batch: self.without_empty_columns(f.batch)?, ..f }))
            .collect::<Result<Vec<_>>>()?;
        let codecs: Vec<_> =
            files.iter().map(|f| plan::codec(f.current, &self.meta.layout)).collect();
        let batches = (files.iter().zip(&codecs))
            .map(|(f, c)| (&f.batch, *c, plan::cuts(f.current)))
            .collect();
        let table = self.stats_schema();
        let encoded = encode_all(batches, &key_columns(spec), &self.stats_columns, &table)
            .map_err(|e| self.data_err(e))?;
        phases.mark("encode");
        let companions = crate::par::par_map(files.iter().collect(), |f: &OutFile| {
            self.companion(f.current, &f.batch, f.briefs.as_ref())
        });
        phases.mark("companions");
        let files = (files.into_iter().zip(codecs).zip(encoded).zip(companions))
            .map(|(((f, codec), (bytes, stats)), companion)| EncodedFile {
                current: f.current,
                codec,
                rows: f.batch.num_rows(),
                keys: FileKeys::Rows(f.keys),
                bytes: bytes.into(),
                stats,
                companion,
            })
            .collect();
        self.put_files(files, exec, pc).await?;
        phases.mark("put");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_sort_by_the_whole_key_bytes_also_past_sixteen() {
        let keys: Vec<Key> = [
            &b"customer-0000000000000002"[..],
            b"b",
            b"customer-0000000000000001",
            b"",
            b"a\0",
            b"a",
            b"customer-00000000000000010",
        ]
        .iter()
        .map(|k| Box::from(*k))
        .collect();
        let mut rows: Vec<(&Key, usize)> = keys.iter().zip(0..).collect();
        sort_by_key(&mut rows);
        let mut expected = rows.clone();
        expected.sort_by(|a, b| a.0.cmp(b.0));
        assert_eq!(rows, expected);
        assert_eq!(rows.iter().map(|r| r.1).collect::<Vec<_>>(), [3, 5, 4, 1, 2, 6, 0]);
    }
}
