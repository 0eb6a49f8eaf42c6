//! Loading stored state: the key index at open, and per run the stored
//! versions the merge asked for.
//!
//! Opening a table reads its current rows once into the key index; for
//! scd2, keys whose latest version is a deleted, closed one are found by a
//! projected scan of history (see `history.rs`). A run then reads only the
//! rows the merge needs as values, located by the index, with parquet row
//! selections; what it read is returned, never left behind for a later call.

use deltalake::arrow::array::{ArrayRef, RecordBatch};
use std::collections::BTreeMap;

use super::convert::{cell, positions};
use super::files::{FileMeta, SelectedRows};
use super::history::HistoryHead;
use super::index::{Entry, NO_FILE};
use super::Result;
use super::{FxMap, TableError, TableStore};
use crate::config::Strategy;
use crate::merge::{Key, KeyMap, KeyState, Loc, Need, Spec, Version};
use crate::par::par_map;
use crate::value::Value;

/// What [`TableStore::load_states`] read: the stored versions the merge
/// needs, and the stored rows of the versions it will close.
pub struct LoadedStates {
    pub states: KeyMap<KeyState>,
    pub closing: ClosingRows,
    /// Per key of `closing` (in its order): the brief stored with the open
    /// version it closes, when there is one (`briefs.rs`).
    pub closing_briefs: Vec<Option<crate::merge::brief::Stored>>,
}

/// Stored rows of open scd2 versions the run closes, read by
/// [`TableStore::load_states`] in the same pass as the rows the merge needs
/// as values, and copied into history by [`TableStore::stage`] at the Arrow
/// level. Rows not found here are read when staging.
#[derive(Default)]
pub struct ClosingRows(pub(super) Vec<SelectedRows>);

/// The reads `load_states` plans: rows per file, which key each current row
/// belongs to, and whether late rows need closed history.
struct StateReads<'k> {
    rows: BTreeMap<u32, Vec<u32>>,
    keys_at: FxMap<(u32, u32), &'k Key>,
    late_rows: bool,
}

/// One file's decoded rows.
pub(super) struct FileRows {
    pub(super) keys: Vec<Option<Key>>,
    pub(super) versions: Vec<Version>,
}

impl TableStore {
    /// Reads the current rows (and, for scd2, the deleted latest versions)
    /// into the key index. A table that does not exist yet has nothing to load.
    pub async fn load_index(&mut self, spec: &Spec) -> Result<()> {
        let started = std::time::Instant::now();
        // Only a writer sweeps row companions (inspections open tables too).
        let live = self.files.iter().flatten().filter(|f| f.current).map(|f| f.path.as_str());
        let swept = self.rows.sweep(live);
        if swept > 0 {
            tracing::debug!(target: "changelake::table", table = %self.meta.name, swept, "row companions of files no longer live deleted");
        }
        match self.load_saved_index(spec).await {
            Ok(loaded) => {
                tracing::info!(target: "changelake::table", table = %self.meta.name, keys = self.index.len(), saved_version = loaded.saved_version, files_replayed = loaded.files_replayed, duration_ms = started.elapsed().as_millis() as u64, "key index loaded from its snapshot");
                return Ok(());
            }
            Err(reason) => {
                tracing::info!(target: "changelake::table", table = %self.meta.name, %reason, "key index snapshot not used; rebuilding the index from the data files");
            }
        }
        self.index = Default::default();
        // What was kept or loaded describes another index: unknown now.
        self.deleted_briefs = Default::default();
        let current = self.live_files(|f| f.current);
        self.index_current_rows(&current, spec).await?;
        if self.meta.strategy == Strategy::Scd2 {
            let history = self.live_files(|f| !f.current);
            self.index_deleted_keys(&history, spec).await?;
        }
        Ok(())
    }

    /// Ids of the live files `pick` accepts.
    pub(super) fn live_files(&self, pick: impl Fn(&FileMeta) -> bool) -> Vec<u32> {
        (0..self.files.len() as u32)
            .filter(|&id| self.files[id as usize].as_ref().is_some_and(&pick))
            .collect()
    }

    /// Indexes every live row of these current files at its place. Files are
    /// fetched a wave at a time and decoded on all cores.
    pub(super) async fn index_current_rows(&mut self, ids: &[u32], spec: &Spec) -> Result<()> {
        for wave in ids.chunks(8) {
            let mut todo = vec![];
            for &id in wave {
                todo.push((id, self.fetch(id).await?));
            }
            let decoded = par_map(todo, |(id, bytes)| {
                let batches = self.decode_file(id, bytes, None)?;
                Ok::<_, TableError>((id, self.rows_of(id, &batches, spec)))
            });
            for found in decoded {
                let (id, rows) = found?;
                for (k, v) in rows.keys.into_iter().zip(rows.versions) {
                    if let Some(k) = k {
                        let row = v.loc.map_or(0, |l| l.row);
                        self.index.insert(&k, Entry::new(id, row, spec.summary(&v)));
                    }
                }
            }
        }
        Ok(())
    }

    /// scd2 keys without a current row: the newest version in these history
    /// files decides (a deleted one is indexed, without a row, so a later
    /// version reopens the key; a newer one the index already holds stays).
    /// Found from a few columns of each history file; only the rows that
    /// are indexed are read in full.
    pub(super) async fn index_deleted_keys(&mut self, history: &[u32], spec: &Spec) -> Result<()> {
        let mut heads: KeyMap<HistoryHead> = KeyMap::default();
        for wave in history.chunks(16) {
            let mut todo = vec![];
            let names = self.history_columns(spec);
            for &id in wave {
                todo.push((id, self.fetch_columns(id, &names).await?));
            }
            for found in par_map(todo, |(id, bytes)| self.history_heads(id, spec, bytes)) {
                for (k, h) in found? {
                    // A brief kept from before these files may lack their
                    // versions (`deleted_briefs.rs`).
                    self.deleted_briefs.remove(&k);
                    HistoryHead::offer(&mut heads, &k, h);
                }
            }
        }
        let mut want: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (k, h) in &heads {
            // A deleted key the index holds with a newer sequence keeps it
            // (history files rewritten by compaction hold older versions).
            let newer_held = self.index.get(k).is_some_and(|e| {
                e.file == NO_FILE
                    && e.summary.seq_with(|s| crate::value::cmp_slices(s, &h.seq)).is_gt()
            });
            if newer_held {
                continue;
            }
            if h.deleted {
                want.entry(h.file).or_default().push(h.row);
            } else {
                self.index.remove(k);
            }
        }
        for rows in want.values_mut() {
            rows.sort_unstable();
            rows.dedup();
        }
        for sel in self.read_selected(want).await? {
            for v in self.versions_of(sel.file, &sel.batch, sel.rows.into_iter().enumerate()) {
                if let Some(k) = spec.key_of(&v.data) {
                    self.index.insert(&k, Entry::new(NO_FILE, 0, spec.summary(&v)));
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
        let at = positions(batch.schema_ref());
        let col = |name: &str| at.get(name).map(|&i| batch.column(i).clone());
        let data_cols: Vec<Option<ArrayRef>> = self.columns.iter().map(|(n, _)| col(n)).collect();
        let (vf, vt, del, ex, sk) = (
            col(&r.valid_from),
            col(&r.valid_to),
            col(&r.is_deleted),
            col(&r.execution_id),
            col(&r.sk),
        );
        rows.map(|(i, row)| {
            // A row ends at its last value, as typed rows do (NULL past
            // it): a table one message widened to thousands of columns
            // would otherwise give every row read a value per column.
            let width = (data_cols.iter().rposition(|c| c.as_ref().is_some_and(|c| c.is_valid(i))))
                .map_or(0, |p| p + 1);
            let data: Vec<Value> = data_cols[..width]
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
                brief: None,
            }
        })
        .collect()
    }

    /// Reads a file's live rows as versions.
    pub(super) async fn read_file(&self, id: u32, spec: &Spec) -> Result<FileRows> {
        let batches = self.read_batches(id).await?;
        Ok(self.rows_of(id, &batches, spec))
    }

    /// A decoded file's live rows as versions.
    fn rows_of(&self, id: u32, batches: &[RecordBatch], spec: &Spec) -> FileRows {
        let f = self.files[id as usize].as_ref().expect("live file");
        let mut out = FileRows { keys: vec![], versions: vec![] };
        let mut row_no = 0u32;
        for batch in batches {
            let n = batch.num_rows() as u32;
            let chosen =
                (row_no..row_no + n).filter(|&r| !f.deleted(r)).map(|r| ((r - row_no) as usize, r));
            for v in self.versions_of(id, batch, chosen) {
                out.keys.push(spec.key_of(&v.data));
                out.versions.push(v);
            }
            row_no += n;
        }
        out
    }

    /// Loads the stored versions the merge asked for (see `merge::classify`).
    /// `closing`: keys whose stored rows `stage` will copy into history; they
    /// are read in the same pass and returned as Arrow rows for
    /// [`TableStore::stage`], never converted to values.
    pub async fn load_states(
        &self,
        spec: &Spec,
        needs: &KeyMap<Need>,
        closing: &[&Key],
    ) -> Result<LoadedStates> {
        let mut phases = crate::phases::Phases::new();
        let mut states: KeyMap<KeyState> = KeyMap::default();
        let closing_at: FxMap<(u32, u32), usize> = (self.index.locate(closing, |k| k).into_iter())
            .enumerate()
            .filter_map(|(i, at)| {
                at.filter(|at| at.file != NO_FILE).map(|at| ((at.file, at.row), i))
            })
            .collect();
        if self.rows.enabled() {
            let mut files: Vec<u32> = closing_at.keys().map(|at| at.0).collect();
            files.sort_unstable();
            files.dedup();
            self.build_missing_companions(files).await;
        }
        let reads = self.plan_state_reads(needs, &closing_at, &mut states);
        phases.mark("plan");
        let read = self.read_current_rows(reads.rows).await?;
        phases.mark("read");
        self.take_current_versions(&read, &reads.keys_at, &mut states);
        let mut closing_briefs = vec![None; closing.len()];
        let (keys_at, briefs) = (&reads.keys_at, &mut closing_briefs);
        self.take_briefs(spec, &read, keys_at, &closing_at, &mut states, briefs);
        self.take_deleted_briefs(spec, needs, &mut states);
        phases.mark("versions");
        if reads.late_rows {
            self.load_late_history(spec, needs, &mut states).await?;
        }
        phases.mark("history");
        tracing::debug!(target: "changelake::table", phases_ms = ?phases.done(), "load_states phases");
        let closing = if closing.is_empty() { ClosingRows::default() } else { ClosingRows(read) };
        Ok(LoadedStates { states, closing, closing_briefs })
    }

    /// Which physical rows to read: the current rows of keys whose stored
    /// version the merge needs (located by the key index) and of the
    /// versions it closes. Keys replaced without reading get their state here.
    fn plan_state_reads<'k>(
        &self,
        needs: &'k KeyMap<Need>,
        closing_at: &FxMap<(u32, u32), usize>,
        states: &mut KeyMap<KeyState>,
    ) -> StateReads<'k> {
        let mut late_rows = false;
        let mut look: Vec<&Key> = vec![];
        for (k, need) in needs {
            match need {
                Need::Nothing | Need::Reopen => {}
                Need::Replace => {
                    states.insert(k.clone(), KeyState { replace: true, ..Default::default() });
                }
                _ => {
                    late_rows |= need.history();
                    look.push(k);
                }
            }
        }
        let mut keys_at: FxMap<(u32, u32), &Key> = FxMap::default();
        let mut rows: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (k, at) in look.iter().zip(self.index.locate(&look, |k| k)) {
            if let Some(at) = at.filter(|at| at.file != NO_FILE) {
                rows.entry(at.file).or_default().push(at.row);
                keys_at.insert((at.file, at.row), *k);
            }
        }
        for &(file, row) in closing_at.keys() {
            rows.entry(file).or_default().push(row);
        }
        for r in rows.values_mut() {
            r.sort_unstable();
            r.dedup();
        }
        StateReads { rows, keys_at, late_rows }
    }

    /// The current versions of the keys in `keys_at`, out of the rows read.
    fn take_current_versions(
        &self,
        read: &[SelectedRows],
        keys_at: &FxMap<(u32, u32), &Key>,
        states: &mut KeyMap<KeyState>,
    ) {
        for sel in read {
            let id = sel.file;
            // (row in the batch read, physical row) of the rows wanted as
            // values, read straight from the batch (no copy of its columns).
            let mine: Vec<(usize, u32)> = (sel.rows.iter().copied().enumerate())
                .filter(|&(_, row)| keys_at.contains_key(&(id, row)))
                .collect();
            if mine.is_empty() {
                continue;
            }
            for v in self.versions_of(id, &sel.batch, mine.into_iter()) {
                let k = keys_at[&(id, v.loc.map_or(0, |l| l.row))];
                states.entry(k.clone()).or_default().current = Some(v);
            }
        }
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
