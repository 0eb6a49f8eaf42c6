//! TODO

use deltalake::arrow::array::{ArrayRef, RecordBatch};
use std::collections::BTreeMap;

use super::convert::cell;
use super::history::HistoryHead;
use super::index::{IndexKey, NO_FILE};
use super::parquet::key_columns;
use super::Result;
use super::{FxMap, FxSet, TableError, TableStore};
use crate::config::Strategy;
use crate::merge::{Key, KeyMap, KeyState, Loc, Need, Spec, Version};
use crate::par::par_map;
use crate::value::Value;

/// One file's decoded rows.
pub(super) struct FileRows {
    pub(super) keys: Vec<Option<Key>>,
    pub(super) versions: Vec<Version>,
}

impl TableStore {
    /// Reads the current rows (and, for scd2, the deleted latest versions)
    /// into the key index. A table that does not exist yet has nothing to load.
    pub async fn load_index(&mut self, spec: &Spec) -> Result<()> {
        let current: Vec<u32> = (0..self.files.len() as u32)
            .filter(|&i| self.files[i as usize].as_ref().is_some_and(|f| f.current))
            .collect();
        for id in current {
            let rows = self.read_file(id, spec).await?;
            for (k, v) in rows.keys.into_iter().zip(rows.versions) {
                if let Some(k) = k {
                    let row = v.loc.map_or(0, |l| l.row);
                    self.index.insert(IndexKey::new(&k), (id, row, spec.summary(&v)));
                }
            }
        }
        if self.meta.strategy != Strategy::Scd2 {
            return Ok(());
        }
        // scd2 keys without a current row: the newest version in history
        // decides (a deleted one is indexed so a later row reopens the key).
        // Found from a few columns of each history file; only the rows that
        // are indexed are read in full.
        let history: Vec<u32> = (0..self.files.len() as u32)
            .filter(|&i| self.files[i as usize].as_ref().is_some_and(|f| !f.current))
            .collect();
        let mut heads: KeyMap<HistoryHead> = KeyMap::default();
        for wave in history.chunks(16) {
            let mut todo = vec![];
            for &id in wave {
                todo.push((id, self.fetch(id).await?));
            }
            for found in par_map(todo, |(id, bytes)| self.history_heads(id, spec, bytes)) {
                for (k, h) in found? {
                    HistoryHead::offer(&mut heads, &k, h);
                }
            }
        }
        let mut want: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for h in heads.values().filter(|h| h.deleted) {
            want.entry(h.file).or_default().push(h.row);
        }
        for rows in want.values_mut() {
            rows.sort_unstable();
            rows.dedup();
        }
        for (id, rows, batch) in self.read_selected(want).await? {
            for v in self.versions_of(id, &batch, rows.into_iter().enumerate()) {
                if let Some(k) = spec.key_of(&v.data) {
                    self.index.insert(IndexKey::new(&k), (NO_FILE, 0, spec.summary(&v)));
                }
            }
        }
        Ok(())
    }

    /// Versions of chosen rows of a batch: `(row in the batch, physical row in the file)`.
    pub(super) fn versions_of(
        &self,
        id: u32,
        batch: &RecordBatch,
        rows: impl Iterator<Item = (usize, u32)>,
    ) -> Vec<Version> {
        let current = self.files[id as usize].as_ref().is_some_and(|f| f.current);
        let r = &self.meta.reserved;
        let col = |name: &str| batch.schema().index_of(name).ok().map(|i| batch.column(i).clone());
        let data_cols: Vec<Option<ArrayRef>> = self.columns.iter().map(|(n, _)| col(n)).collect();
        let (vf, vt, del, ex, sk) = (
            col(&r.valid_from),
            col(&r.valid_to),
            col(&r.is_deleted),
            col(&r.execution_id),
            col(&r.sk),
        );
        rows.map(|(i, row)| {
            let data: Vec<Value> = data_cols
                .iter()
                .zip(&self.columns)
                .map(|(c, (_, t))| {
                    c.as_ref()
                        .map(|c| cell(c, i))
                        .unwrap_or(Value::Null)
                        .convert(*t)
                        .unwrap_or(Value::Null)
                })
                .collect();
            let ts = |c: &Option<ArrayRef>| match c.as_ref().map(|c| cell(c, i)) {
                Some(Value::Ts(t)) => Some(t),
                _ => None,
            };
            Version {
                valid_from: ts(&vf),
                valid_to: ts(&vt),
                current,
                deleted: matches!(del.as_ref().map(|c| cell(c, i)), Some(Value::Bool(true))),
                exec: match ex.as_ref().map(|c| cell(c, i)) {
                    Some(Value::Int(e)) => e,
                    _ => 0,
                },
                sk: match sk.as_ref().map(|c| cell(c, i)) {
                    Some(Value::Int(e)) => Some(e),
                    _ => None,
                },
                loc: Some(Loc { file: id, row }),
                data,
            }
        })
        .collect()
    }

    /// Reads a file's live rows as versions.
    pub(super) async fn read_file(&self, id: u32, spec: &Spec) -> Result<FileRows> {
        let f = self.files[id as usize].clone().expect("live file");
        let batches = self.batches(id, false).await?;
        let mut out = FileRows { keys: vec![], versions: vec![] };
        let mut row_no = 0u32;
        for batch in batches.iter() {
            let n = batch.num_rows() as u32;
            let chosen =
                (row_no..row_no + n).filter(|&r| !f.deleted(r)).map(|r| ((r - row_no) as usize, r));
            for v in self.versions_of(id, batch, chosen) {
                out.keys.push(spec.key_of(&v.data));
                out.versions.push(v);
            }
            row_no += n;
        }
        Ok(out)
    }

    /// Loads the stored versions the merge asked for (see `merge::classify`).
    /// `closing`: keys whose stored rows `stage` will copy into history
    /// (read now, in the same pass, and kept as Arrow rows).
    pub async fn load_states(
        &self,
        spec: &Spec,
        needs: &KeyMap<Need>,
        closing: &[&Key],
    ) -> Result<KeyMap<KeyState>> {
        self.selected.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let mut states: KeyMap<KeyState> = KeyMap::default();
        // Current rows are located by the key index: only those rows are read.
        let mut by_file: BTreeMap<u32, Vec<(u32, &Key)>> = BTreeMap::new();
        let mut want_history = false;
        let mut look: Vec<&Key> = vec![];
        for (k, need) in needs {
            if *need == Need::Nothing {
                continue;
            }
            if *need == Need::Replace {
                states.insert(k.clone(), KeyState { replace: true, ..Default::default() });
                continue;
            }
            want_history |= *need == Need::History;
            look.push(k);
        }
        let found = self.locate(&look, |k| k);
        for (k, at) in look.into_iter().zip(found) {
            if let Some((f, row)) = at.filter(|(f, _)| *f != NO_FILE) {
                by_file.entry(f).or_default().push((row, k));
            }
        }
        let mut keys_at: FxMap<(u32, u32), &Key> = FxMap::default();
        let mut want: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (id, rows) in &by_file {
            want.entry(*id).or_default().extend(rows.iter().map(|(r, _)| *r));
            keys_at.extend(rows.iter().map(|(r, k)| ((*id, *r), *k)));
        }
        for (f, row) in self.locate(closing, |k| k).into_iter().flatten() {
            if f != NO_FILE {
                want.entry(f).or_default().push(row);
            }
        }
        for rows in want.values_mut() {
            rows.sort_unstable();
            rows.dedup();
        }
        let mut stash = vec![];
        let t0 = std::time::Instant::now();
        let read = self.read_selected(want).await?;
        let t1 = std::time::Instant::now();
        for (id, rows, batch) in read {
            let pos: Vec<u32> = (0..rows.len() as u32)
                .filter(|&i| keys_at.contains_key(&(id, rows[i as usize])))
                .collect();
            if !pos.is_empty() {
                let idx = deltalake::arrow::array::UInt32Array::from(pos.clone());
                let mine = deltalake::arrow::compute::take_record_batch(&batch, &idx)
                    .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() })?;
                let phys: Vec<u32> = pos.iter().map(|&i| rows[i as usize]).collect();
                for v in self.versions_of(id, &mine, phys.into_iter().enumerate()) {
                    let k = keys_at[&(id, v.loc.map_or(0, |l| l.row))];
                    states.entry(k.clone()).or_default().current = Some(v);
                }
            }
            stash.push((id, rows, batch));
        }
        tracing::debug!(
            read_ms = (t1 - t0).as_secs_f64() * 1e3,
            versions_ms = t1.elapsed().as_secs_f64() * 1e3,
            "load_states phases"
        );
        if !closing.is_empty() {
            *self.selected.lock().unwrap_or_else(|e| e.into_inner()) = stash;
        }
        if want_history {
            // Late rows are rare: scan closed history for just those keys.
            // Only the key columns of history files are decoded to find the
            // keys' rows, then only those rows are read in full, on all cores.
            // Files whose key bloom filters rule out every late key are skipped.
            let hist_keys: Vec<(&[u8], Option<Vec<Value>>)> = needs
                .iter()
                .filter(|(_, n)| **n == Need::History)
                .map(|(k, _)| (&k[..], Value::decode_all(k)))
                .collect();
            let (mut todo, mut history_files) = (vec![], 0usize);
            let key_columns = key_columns(spec);
            for (id, f) in self.files.iter().enumerate() {
                let Some(f) = f.as_ref().filter(|f| !f.current) else { continue };
                history_files += 1;
                let filter = self.key_filter(f, &key_columns).await;
                let wanted: FxSet<&[u8]> = hist_keys
                    .iter()
                    .filter(|(_, v)| match (&filter, v) {
                        (Some(filter), Some(v)) => filter.may_contain(v),
                        _ => true,
                    })
                    .map(|(k, _)| *k)
                    .collect();
                if !wanted.is_empty() {
                    todo.push((id as u32, self.fetch(id as u32).await?, wanted));
                }
            }
            tracing::debug!(
                late_keys = hist_keys.len(),
                history_files,
                scanned = todo.len(),
                "late rows: history files scanned"
            );
            for found in
                par_map(todo, |(id, bytes, wanted)| self.history_rows(id, spec, bytes, &wanted))
            {
                for (k, v) in found? {
                    states.entry(k).or_default().history.push(v);
                }
            }
            for (k, st) in states.iter_mut() {
                if st.current.is_none() && self.index.get(&k[..]).is_some_and(|(_, _, s)| s.deleted)
                {
                    st.latest_closed = st
                        .history
                        .iter()
                        .max_by(|a, b| spec.cmp_seq(&a.data, &b.data).then(a.exec.cmp(&b.exec)))
                        .cloned();
                }
            }
        }
        Ok(states)
    }

    /// Reads every row of the table (for `show` and tests).
    pub async fn read_all(&self, spec: &Spec) -> Result<Vec<Version>> {
        let mut out = vec![];
        for id in 0..self.files.len() as u32 {
            if self.files[id as usize].is_some() {
                out.extend(self.read_file(id, spec).await?.versions);
            }
        }
        Ok(out)
    }
}
