//! Staging: a merge output becomes data files and Delta actions, nothing is
//! committed yet.
//!
//! The steps follow the layout of [`super::plan`]: locate the stored rows the
//! output replaces or removes, decide which current files are rewritten and
//! which masked, rewrite the former at the Arrow level (untouched rows are
//! filtered through as columns, never converted to values), write new keys
//! to new files, stage deletion vectors, append history and closes, then
//! encode every new file on all cores and store it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use deltalake::arrow::array::{BooleanBuilder, RecordBatch};

use super::closes::CloseAt;
use super::commit::{EncodedFile, OutFile, PendingCommit};
use super::index::{Location, NO_FILE};
use super::parquet::{encode_all, key_columns};
use super::plan;
use super::state::ClosingRows;
use super::Result;
use super::{FxMap, FxSet, TableStore};
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

/// What the rewrite of touched current files needs to know.
struct Rewrite<'a> {
    /// Replacements of rows in rewritten files, by key.
    replace: FxMap<&'a Key, &'a Version>,
    /// Removed keys (only looked up when some file is rewritten).
    removes: FxSet<&'a Key>,
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
        let mut pc = PendingCommit { index: std::mem::take(&mut out.index), ..Default::default() };
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
        // Replaced rows in masked files are appended like new ones; those in
        // files being rewritten are replaced in place by the rewrite.
        let mut rewrite = Rewrite { replace: FxMap::default(), removes: FxSet::default() };
        let mut new_rows = located.new_rows;
        for (k, v, at) in located.replaced {
            if current.rewrite.contains(&at.file) {
                rewrite.replace.insert(k, v);
            } else {
                new_rows.push((k, v));
            }
        }
        if !current.rewrite.is_empty() {
            rewrite.removes = out.removes.iter().collect();
        }
        new_rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let close_at = self.locate_closes(out)?;
        phases.mark("plan");
        let mut pending_new: VecDeque<(&Key, &Version)> = new_rows.into();
        let mut queue = self
            .rewrite_current(spec, &current.rewrite, &rewrite, &mut pending_new, exec, &mut pc)
            .await?;
        phases.mark("rewrite");
        queue.extend(self.new_key_files(pending_new)?);
        phases.mark("build");
        if !current.masked.is_empty() {
            self.stage_deletion_vectors(current.masked, &mut pc).await?;
        }
        phases.mark("deletion_vectors");
        queue.extend(self.stage_history(spec, out, &mut pc).await?);
        phases.mark("history");
        queue.extend(self.stage_closes(close_at, closing).await?);
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
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

    /// Copy-on-write of the touched current files, in waves (see
    /// [`plan::waves`]): each wave is decoded, filtered, encoded and written
    /// before the next is read, so a batch touching every file of a large
    /// table holds one wave in memory, not the table. With a single wave the
    /// files are returned for encoding with the rest of the run.
    async fn rewrite_current(
        &mut self,
        spec: &Spec,
        files: &BTreeSet<u32>,
        rewrite: &Rewrite<'_>,
        pending_new: &mut VecDeque<(&Key, &Version)>,
        exec: i64,
        pc: &mut PendingCommit,
    ) -> Result<Vec<OutFile>> {
        let sized =
            files.iter().map(|&id| (id, self.files[id as usize].as_ref().map_or(0, |f| f.rows)));
        let waves = plan::waves(sized);
        let many_waves = waves.len() > 1;
        let mut queue = vec![];
        for wave in waves {
            self.prefetch(&wave).await?;
            for &id in &wave {
                queue.extend(self.rewrite_file(spec, id, rewrite, pending_new).await?);
                self.remove_file(id, pc);
            }
            if many_waves {
                self.write_files(spec, std::mem::take(&mut queue), exec, pc, &mut Phases::new())
                    .await?;
                let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                for id in &wave {
                    c.remove(id);
                }
            }
        }
        Ok(queue)
    }

    /// One rewritten current file: its rows minus masked, removed and
    /// replaced ones, plus the replacements, plus new keys while the file is
    /// small (the top-up), cut into files of at most `file_rows`.
    async fn rewrite_file(
        &self,
        spec: &Spec,
        id: u32,
        rewrite: &Rewrite<'_>,
        pending_new: &mut VecDeque<(&Key, &Version)>,
    ) -> Result<Vec<OutFile>> {
        let file_rows = self.meta.layout.file_rows;
        let mut keys: Vec<Key> = vec![];
        let mut kept: Vec<RecordBatch> = vec![];
        let mut changed: Vec<Version> = vec![];
        let mut changed_keys: Vec<Key> = vec![];
        let fmeta = self.files[id as usize].clone().expect("live file");
        let mut row_no = 0u32;
        for batch in self.batches(id).await?.iter() {
            let bk = self.batch_keys(spec, batch);
            let mut mask = BooleanBuilder::with_capacity(bk.len());
            for k in bk {
                let row = row_no;
                row_no += 1;
                let keep = match k {
                    // Masked by the file's deletion vector: gone (a newer version lives elsewhere).
                    _ if fmeta.deleted(row) => false,
                    None => false,
                    Some(k) if rewrite.removes.contains(&k) => false,
                    Some(k) => match rewrite.replace.get(&k) {
                        Some(v) => {
                            changed.push((*v).clone());
                            changed_keys.push(k);
                            false
                        }
                        None => {
                            keys.push(k);
                            true
                        }
                    },
                };
                mask.append_value(keep);
            }
            let f = deltalake::arrow::compute::filter_record_batch(batch, &mask.finish())
                .map_err(|e| self.data_err(e.to_string()))?;
            if f.num_rows() > 0 {
                kept.push(f);
            }
        }
        if plan::is_small_for_top_up(fmeta.rows, &self.meta.layout) {
            while keys.len() + changed.len() < file_rows {
                let Some((k, v)) = pending_new.pop_front() else { break };
                changed_keys.push(k.clone());
                changed.push(v.clone());
            }
        }
        if !changed.is_empty() {
            kept.push(self.to_batch(&changed)?);
            keys.extend(changed_keys);
        }
        let all = deltalake::arrow::compute::concat_batches(&self.arrow_schema(), &kept)
            .map_err(|e| self.data_err(e.to_string()))?;
        Ok(plan::slices(all.num_rows(), file_rows)
            .map(|r| OutFile {
                current: true,
                keys: keys[r.clone()].to_vec(),
                batch: all.slice(r.start, r.len()),
            })
            .collect())
    }

    /// New keys (and, with merge-on-read, new versions of masked rows) in
    /// key order, spread over new current files (see [`plan::new_key_file_rows`]).
    fn new_key_files(&self, pending_new: VecDeque<(&Key, &Version)>) -> Result<Vec<OutFile>> {
        if pending_new.is_empty() {
            return Ok(vec![]);
        }
        let chunk = plan::new_key_file_rows(pending_new.len(), &self.meta.layout);
        let all: Vec<(&Key, &Version)> = pending_new.into_iter().collect();
        all.chunks(chunk)
            .map(|c| {
                let keys: Vec<Key> = c.iter().map(|(k, _)| (*k).clone()).collect();
                let vs: Vec<&Version> = c.iter().map(|(_, v)| *v).collect();
                Ok(OutFile { current: true, keys, batch: self.to_batch_refs(&vs)? })
            })
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
        appends
            .chunks(self.meta.layout.file_rows.max(1))
            .map(|c| {
                let keys = c.iter().filter_map(|v| spec.key_of(&v.data)).collect();
                Ok(OutFile { current: false, keys, batch: self.to_batch(c)? })
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
        let batches = files.iter().map(|f| &f.batch).collect();
        let encoded = encode_all(batches, &key_columns(spec), &self.stats_columns)
            .map_err(|e| self.data_err(e))?;
        phases.mark("encode");
        for (f, (bytes, stats)) in files.into_iter().zip(encoded) {
            let rows = f.batch.num_rows();
            let file = EncodedFile { current: f.current, keys: f.keys, rows, bytes, stats };
            self.put_file(file, exec, pc).await?;
        }
        phases.mark("put");
        Ok(())
    }
}
