//! TODO

use deltalake::arrow::array::{BooleanBuilder, RecordBatch};
use std::collections::{BTreeMap, HashMap};

use super::commit::PendingCommit;
use super::index::NO_FILE;
use super::parquet::{encode_all, key_columns};
use super::plan::{MIN_FILE_ROWS, WAVE_ROWS};
use super::Result;
use super::{FxMap, FxSet, TableError, TableStore};
use crate::merge::{Key, Output, Spec, Version};

impl TableStore {
    /// Turns a merge output into files and actions (nothing is committed yet).
    /// Takes the output's key-index entries (they move into the pending commit).
    pub async fn stage(
        &mut self,
        spec: &Spec,
        out: &mut Output,
        exec: i64,
    ) -> Result<PendingCommit> {
        let mut pc = PendingCommit { index: std::mem::take(&mut out.index), ..Default::default() };
        let out = &*out;
        let mut lap = std::time::Instant::now();
        let mut phases: Vec<(&str, f64)> = vec![];
        let mut mark = |name: &'static str, phases: &mut Vec<(&str, f64)>| {
            phases.push((name, lap.elapsed().as_secs_f64() * 1e3));
            lap = std::time::Instant::now();
        };
        // Current partition: group upserts/removes by the file holding the key.
        // One index lookup per key: where its stored row lives, if anywhere.
        let mut touched: BTreeMap<u32, ()> = BTreeMap::new();
        let mut located: Vec<(&Key, &Version, u32, u32)> = vec![];
        let mut new_rows: Vec<(&Key, &Version)> = vec![];
        let found = self.locate(&out.upserts, |(k, _)| k);
        for ((k, v), at) in out.upserts.iter().zip(found) {
            match at {
                Some((f, row)) if f != NO_FILE => {
                    touched.insert(f, ());
                    located.push((k, v, f, row));
                }
                _ => new_rows.push((k, v)),
            }
        }
        let mut removed_at: Vec<(u32, u32)> = vec![];
        for (f, row) in self.locate(&out.removes, |k| k).into_iter().flatten() {
            if f != NO_FILE {
                touched.insert(f, ());
                removed_at.push((f, row));
            }
        }
        // Top up the newest small current file with new keys.
        let layout = self.meta.layout.clone();
        if !new_rows.is_empty() && !layout.deletion_vectors {
            if let Some((id, _)) = self
                .files
                .iter()
                .enumerate()
                .rev()
                .find_map(|(i, f)| f.as_ref().filter(|f| f.current).map(|f| (i, f)))
                .filter(|(_, f)| f.rows < layout.file_rows / 4)
            {
                touched.insert(id as u32, ());
            }
        }
        // Merge-on-read: a touched file keeps its rows and gets them masked by
        // a deletion vector, the new versions go to new files; the run then
        // costs what the batch changes, not the files it touches. A file
        // whose DV would mask half of it or more is rewritten instead.
        let mut dv_rows: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        if layout.deletion_vectors {
            for (f, row) in
                located.iter().map(|(_, _, f, r)| (*f, *r)).chain(removed_at.iter().copied())
            {
                dv_rows.entry(f).or_default().push(row as u64);
            }
        }
        let mut dv_new: Vec<(u32, roaring::RoaringTreemap)> = vec![];
        for (id, rows) in dv_rows {
            let f = self.files[id as usize].as_ref().expect("live file");
            let mut dv = f.dv.as_ref().map(|d| (**d).clone()).unwrap_or_default();
            dv.extend(rows);
            if dv.len() * 2 < f.rows as u64 {
                touched.remove(&id);
                dv_new.push((id, dv));
            }
        }
        // Replaced rows in masked files are appended like new ones; those in
        // files being rewritten are replaced in place by the rewrite below.
        let mut replace: FxMap<&Key, &Version> = FxMap::default();
        for &(k, v, f, _) in &located {
            if touched.contains_key(&f) {
                replace.insert(k, v);
            } else {
                new_rows.push((k, v));
            }
        }
        let removes: FxSet<&Key> =
            if touched.is_empty() { FxSet::default() } else { out.removes.iter().collect() };
        new_rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
        mark("plan", &mut phases);
        let mut pending_new: std::collections::VecDeque<(&Key, &Version)> = new_rows.into();
        let mut queue: Vec<(bool, Vec<Key>, RecordBatch)> = vec![];
        // scd2 closes (Need::Close): where each closed open version lives.
        let mut close_at: BTreeMap<u32, Vec<(u32, i64, bool, &Key)>> = BTreeMap::new();
        let found = self.locate(&out.closes, |(k, _, _)| k);
        for ((k, to, deleted), at) in out.closes.iter().zip(found) {
            match at {
                Some((f, row)) if f != NO_FILE => {
                    close_at.entry(f).or_default().push((row, *to, *deleted, k))
                }
                _ => {
                    return Err(TableError::Data {
                        uri: self.uri.clone(),
                        msg: "closing a version the key index does not locate".into(),
                    })
                }
            }
        }
        // Rewrites go in waves of about WAVE_ROWS rows, each decoded, filtered,
        // encoded and written before the next is read: a batch touching every
        // file of a 10M-row table holds one wave in memory, not the table.
        let mut waves: Vec<Vec<u32>> = vec![];
        let mut wave_rows = usize::MAX;
        for &id in touched.keys() {
            let rows = self.files[id as usize].as_ref().map_or(0, |f| f.rows);
            if wave_rows.saturating_add(rows) > WAVE_ROWS {
                waves.push(vec![]);
                wave_rows = 0;
            }
            wave_rows += rows;
            waves.last_mut().expect("a wave").push(id);
        }
        let many_waves = waves.len() > 1;
        for wave in waves {
            self.prefetch(&wave).await?;
            for &id in &wave {
                // Copy-on-write at the Arrow level: untouched rows are filtered
                // through as columns (never converted to values); only replaced
                // and new rows are built from versions.
                let mut keys: Vec<Key> = vec![];
                let mut kept: Vec<RecordBatch> = vec![];
                let mut changed: Vec<Version> = vec![];
                let mut changed_keys: Vec<Key> = vec![];
                let fmeta = self.files[id as usize].clone().expect("live file");
                let mut row_no = 0u32;
                for batch in self.batches(id, false).await?.iter() {
                    let bk = self.batch_keys(spec, batch);
                    let mut mask = BooleanBuilder::with_capacity(bk.len());
                    for k in bk {
                        let row = row_no;
                        row_no += 1;
                        let keep = match k {
                            // Masked by the file's deletion vector: gone (a newer version lives elsewhere).
                            _ if fmeta.deleted(row) => false,
                            None => false,
                            Some(k) if removes.contains(&k) => false,
                            Some(k) => match replace.get(&k) {
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
                        .map_err(|e| TableError::Data {
                        uri: self.uri.clone(),
                        msg: e.to_string(),
                    })?;
                    if f.num_rows() > 0 {
                        kept.push(f);
                    }
                }
                let small =
                    self.files[id as usize].as_ref().is_some_and(|f| f.rows < layout.file_rows / 4);
                while small
                    && keys.len() + changed.len() < layout.file_rows
                    && !pending_new.is_empty()
                {
                    let (k, v) = pending_new.pop_front().unwrap();
                    changed_keys.push(k.clone());
                    changed.push(v.clone());
                }
                if !changed.is_empty() {
                    kept.push(self.to_batch(&changed)?);
                    keys.extend(changed_keys);
                }
                self.remove_file(id, &mut pc);
                let all = deltalake::arrow::compute::concat_batches(&self.arrow_schema(), &kept)
                    .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() })?;
                let mut start = 0;
                while start < all.num_rows() {
                    let len = layout.file_rows.min(all.num_rows() - start);
                    queue.push((true, keys[start..start + len].to_vec(), all.slice(start, len)));
                    start += len;
                }
            }
            if many_waves {
                let encoded =
                    encode_all(queue.iter().map(|(_, _, b)| b).collect(), &key_columns(spec))
                        .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e })?;
                for ((current, keys, batch), bytes) in
                    std::mem::take(&mut queue).into_iter().zip(encoded)
                {
                    self.put_file(current, keys, batch.num_rows(), bytes, exec, &mut pc).await?;
                }
                let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                for id in &wave {
                    c.remove(id);
                }
            }
        }
        mark("rewrite", &mut phases);
        if !pending_new.is_empty() {
            let n = pending_new.len();
            let chunk = if layout.deletion_vectors {
                // Even files (not one full and one remainder): they are encoded in parallel.
                n.div_ceil(n.div_ceil(layout.file_rows.max(1)))
            } else {
                n.div_ceil(layout.spread.max(1))
                    .clamp(MIN_FILE_ROWS.min(layout.file_rows), layout.file_rows)
            };
            let all: Vec<(&Key, &Version)> = pending_new.into_iter().collect();
            for c in all.chunks(chunk) {
                let keys: Vec<Key> = c.iter().map(|(k, _)| (*k).clone()).collect();
                let vs: Vec<&Version> = c.iter().map(|(_, v)| *v).collect();
                queue.push((true, keys, self.to_batch_refs(&vs)?));
            }
        }
        mark("build", &mut phases);
        if !dv_new.is_empty() {
            self.stage_deletion_vectors(dv_new, &mut pc).await?;
        }
        mark("deletion_vectors", &mut phases);
        // History partition: appends go to new files, replacements rewrite theirs.
        let mut hist_touched: BTreeMap<u32, HashMap<u32, &Version>> = BTreeMap::new();
        for (loc, v) in &out.history_replacements {
            hist_touched.entry(loc.file).or_default().insert(loc.row, v);
        }
        let mut appends: Vec<Version> = out.history_appends.clone();
        for (id, repl) in hist_touched {
            let rows = self.read_file(id, spec).await?;
            for v in rows.versions {
                // `Loc.row` is the physical row (rows masked by a DV are not in `rows`).
                let row = v.loc.map_or(u32::MAX, |l| l.row);
                appends.push(repl.get(&row).map(|v| (*v).clone()).unwrap_or(v));
            }
            self.remove_file(id, &mut pc);
        }
        for c in appends.chunks(layout.file_rows.max(1)) {
            let keys = c.iter().filter_map(|v| spec.key_of(&v.data)).collect();
            queue.push((false, keys, self.to_batch(c)?));
        }
        let (closed, closed_keys) = self.stage_closes(close_at).await?;
        if !closed.is_empty() {
            // One run's closes go to full history files, not one small file per source file.
            let all = deltalake::arrow::compute::concat_batches(&self.arrow_schema(), &closed)
                .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() })?;
            let n = all.num_rows();
            let chunk = n.div_ceil(n.div_ceil(layout.file_rows.max(1)));
            let mut start = 0;
            while start < n {
                let len = chunk.min(n - start);
                queue.push((
                    false,
                    closed_keys[start..start + len].to_vec(),
                    all.slice(start, len),
                ));
                start += len;
            }
        }
        mark("closes", &mut phases);
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // Parquet encoding is the CPU-heavy part: spread it over the cores.
        mark("history", &mut phases);
        let encoded = encode_all(queue.iter().map(|(_, _, b)| b).collect(), &key_columns(spec))
            .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e })?;
        mark("encode", &mut phases);
        for ((current, keys, batch), bytes) in queue.into_iter().zip(encoded) {
            self.put_file(current, keys, batch.num_rows(), bytes, exec, &mut pc).await?;
        }
        mark("put", &mut phases);
        tracing::debug!(phases_ms = ?phases, "stage phases");
        Ok(pc)
    }
}
