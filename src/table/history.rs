//! Closed scd2 history: what the table needs from it is found without
//! decoding it. At open, the newest version of keys without a current row
//! (is it a deleted one?) comes from a few projected columns; for late rows,
//! the versions of just the late keys come from files whose key bloom filters
//! may hold them. Both keep the cost of a run or a restart off the table's age.

use std::sync::Arc;

use deltalake::arrow::array::ArrayRef;
use deltalake::Path;
use object_store::ObjectStoreExt;

use super::convert::{cell, KeyCols};
use super::files::FileMeta;
use super::index::Entry;
use super::parquet::{key_columns, KeyFilter};
use super::Result;
use super::{FxSet, TableError, TableStore};
use crate::merge::{version_order, Key, KeyMap, KeyState, Need, Spec, Version};
use crate::par::par_map;
use crate::value::{DType, Value};

/// A key's newest version seen in history so far (see `history_heads`).
pub(super) struct HistoryHead {
    pub(super) seq: Vec<Value>,
    pub(super) exec: i64,
    pub(super) deleted: bool,
    pub(super) file: u32,
    pub(super) row: u32,
}

impl HistoryHead {
    /// Whether this version is newer (see [`version_order`]).
    pub(super) fn newer_than(&self, other: &HistoryHead) -> bool {
        let by_sequence = crate::value::cmp_slices(&self.seq, &other.seq);
        version_order(by_sequence, self.exec, other.exec) == std::cmp::Ordering::Greater
    }

    /// Keeps `h` as `key`'s head if it is the first seen or newer (a tie keeps the first).
    pub(super) fn offer(heads: &mut KeyMap<HistoryHead>, key: &[u8], h: HistoryHead) {
        match heads.get_mut(key) {
            Some(old) if !h.newer_than(old) => {}
            Some(old) => *old = h,
            None => {
                heads.insert(key.into(), h);
            }
        }
    }
}

impl TableStore {
    /// The columns [`TableStore::history_heads`] reads: key, sequence,
    /// `_is_deleted` and `_execution_id`.
    pub(super) fn history_columns<'a>(&'a self, spec: &Spec) -> Vec<&'a str> {
        let r = &self.meta.reserved;
        (spec.key.iter().chain(&spec.seq))
            .map(|&i| self.columns[i].0.as_str())
            .chain([r.is_deleted.as_str(), r.execution_id.as_str()])
            .collect()
    }

    /// Per key without a current row, its newest version in one history
    /// file, from the key, sequence, `_is_deleted` and `_execution_id`
    /// columns alone: decoding every column of the whole history made a
    /// restart cost what the table's age is.
    pub(super) fn history_heads(
        &self,
        id: u32,
        spec: &Spec,
        bytes: bytes::Bytes,
    ) -> Result<Vec<(Key, HistoryHead)>> {
        let f = self.files[id as usize].as_ref().expect("live file");
        let data_err = |msg: String| TableError::Data {
            uri: self.uri.clone(),
            msg: format!("parquet {}: {msg}", f.path),
        };
        let r = &self.meta.reserved;
        let names = self.history_columns(spec);
        let reader = self.columns_of(f, bytes, &names)?;
        let mut heads: KeyMap<HistoryHead> = KeyMap::default();
        let mut row_no = 0u32;
        let mut buf = Vec::with_capacity(32);
        for batch in reader {
            let batch = batch.map_err(|e| data_err(e.to_string()))?;
            let col =
                |name: &str| batch.schema().index_of(name).ok().map(|i| batch.column(i).clone());
            let typed = |idx: &[usize]| -> Vec<(Option<ArrayRef>, DType)> {
                idx.iter().map(|&i| (col(&self.columns[i].0), self.columns[i].1)).collect()
            };
            let (key_cols, seq_cols) = (typed(&spec.key), typed(&spec.seq));
            let keys = KeyCols::new(&key_cols);
            let (del, exec) = (col(&r.is_deleted), col(&r.execution_id));
            for i in 0..batch.num_rows() {
                let row = row_no;
                row_no += 1;
                if f.deleted(row)
                    || !keys.encode(i, &mut buf)
                    || self.index.get(&buf[..]).is_some_and(Entry::has_row)
                {
                    continue;
                }
                let h = HistoryHead {
                    seq: seq_cols
                        .iter()
                        .map(|(c, t)| {
                            c.as_ref()
                                .map(|c| cell(c, i))
                                .unwrap_or(Value::Null)
                                .convert(*t)
                                .unwrap_or(Value::Null)
                        })
                        .collect(),
                    exec: match exec.as_ref().map(|c| cell(c, i)) {
                        Some(Value::Int(e)) => e,
                        _ => 0,
                    },
                    deleted: matches!(del.as_ref().map(|c| cell(c, i)), Some(Value::Bool(true))),
                    file: id,
                    row,
                };
                HistoryHead::offer(&mut heads, &buf, h);
            }
        }
        Ok(heads.into_iter().collect())
    }

    /// The key filter of a file (cached; read from its footer on first use).
    /// None when the file has no key bloom filters or they cannot be read:
    /// the file is then scanned, never skipped.
    pub(super) async fn key_filter(
        &self,
        f: &FileMeta,
        key_columns: &[String],
    ) -> Option<Arc<KeyFilter>> {
        if let Some(hit) = self.filters.lock().unwrap_or_else(|e| e.into_inner()).get(&f.path) {
            return hit.clone();
        }
        let store = self.store().ok()?;
        let path = Path::from(f.path.as_str());
        let loaded = KeyFilter::load(f.size as u64, key_columns, |r| {
            let (store, path) = (store.clone(), path.clone());
            async move { store.get_range(&path, r).await.map_err(|e| e.to_string()) }
        })
        .await;
        let filter = match loaded {
            Ok(f) => f.map(Arc::new),
            Err(e) => {
                tracing::warn!(target: "changelake::table", file = %f.path, error = %e, "key bloom filters unreadable; the file is scanned");
                None
            }
        };
        self.filters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(f.path.clone(), filter.clone());
        filter
    }

    /// The versions of one history file whose keys are in `wanted`: a pass over
    /// the key columns alone (of the row `groups` that may hold them, or
    /// all) finds their rows, then only those rows are decoded.
    pub(super) fn history_rows(
        &self,
        id: u32,
        spec: &Spec,
        bytes: bytes::Bytes,
        wanted: &FxSet<&[u8]>,
        groups: Option<&[usize]>,
    ) -> Result<Vec<(Key, Version)>> {
        let f = self.files[id as usize].as_ref().expect("live file");
        let data_err = |msg: String| TableError::Data {
            uri: self.uri.clone(),
            msg: format!("parquet {}: {msg}", f.path),
        };
        let key_names: Vec<&str> = spec.key.iter().map(|&i| self.columns[i].0.as_str()).collect();
        let (reader, starts) = self.group_columns_of(f, bytes.clone(), &key_names, groups)?;
        let mut hits: Vec<(u32, Key)> = vec![];
        let mut buf = Vec::with_capacity(32);
        // Physical row numbers: each chosen group's first row, then on.
        let (mut starts, mut row_no, mut left) = (starts.into_iter(), 0u32, 0u64);
        for batch in reader {
            let batch = batch.map_err(|e| data_err(e.to_string()))?;
            let cols: Vec<(Option<ArrayRef>, DType)> = key_names
                .iter()
                .zip(&spec.key)
                .map(|(n, &k)| {
                    (
                        batch.schema().index_of(n).ok().map(|i| batch.column(i).clone()),
                        self.columns[k].1,
                    )
                })
                .collect();
            let keys = KeyCols::new(&cols);
            for i in 0..batch.num_rows() {
                while left == 0 {
                    let (start, rows) =
                        starts.next().ok_or_else(|| data_err("row groups".into()))?;
                    (row_no, left) = (start, rows);
                }
                let row = row_no;
                row_no += 1;
                left -= 1;
                if !f.deleted(row) && keys.encode(i, &mut buf) && wanted.contains(&buf[..]) {
                    hits.push((row, buf.as_slice().into()));
                }
            }
        }
        if hits.is_empty() {
            return Ok(vec![]);
        }
        let rows: Vec<u32> = hits.iter().map(|(r, _)| *r).collect();
        let batches = self.decode_groups(id, bytes, groups, Some(&rows))?;
        let all = deltalake::arrow::compute::concat_batches(&self.arrow_schema(), &batches)
            .map_err(|e| data_err(e.to_string()))?;
        if all.num_rows() != rows.len() {
            return Err(data_err(format!(
                "{} of {} selected rows read",
                all.num_rows(),
                rows.len()
            )));
        }
        Ok(hits
            .into_iter()
            .map(|(_, k)| k)
            .zip(self.versions_of(id, &all, rows.into_iter().enumerate()))
            .collect())
    }

    /// Late rows need a key's closed versions: closed history is scanned for
    /// just those keys. Only the key columns of history files are decoded to
    /// find the keys' rows, then only those rows are read in full, on all
    /// cores. Files whose key bloom filters rule out every late key are
    /// skipped. A key whose latest version is a deleted, closed one gets it
    /// as `latest_closed`.
    pub(super) async fn load_late_history(
        &self,
        spec: &Spec,
        needs: &KeyMap<Need>,
        states: &mut KeyMap<KeyState>,
    ) -> Result<()> {
        // Keys whose closed versions came in brief with their current row
        // (`briefs.rs`) need nothing from history.
        let late: Vec<(&[u8], Option<Vec<Value>>)> = needs
            .iter()
            .filter(|(k, n)| {
                **n == Need::HistoryRows
                    || **n == Need::History && states.get(*k).is_none_or(|s| s.brief.is_none())
            })
            .map(|(k, _)| (&k[..], Value::decode_all(k)))
            .collect();
        let in_brief = needs.values().filter(|n| n.history()).count() - late.len();
        if late.is_empty() {
            tracing::debug!(target: "changelake::table", in_brief, "late rows: every key's history in brief");
            return Ok(());
        }
        let started = std::time::Instant::now();
        let (mut todo, mut history_files) = (vec![], 0usize);
        let (mut bytes_read, mut file_bytes) = (0u64, 0u64);
        let key_columns = key_columns(spec);
        for (id, f) in self.files.iter().enumerate() {
            let Some(f) = f.as_ref().filter(|f| !f.current) else { continue };
            history_files += 1;
            let filter = self.key_filter(f, &key_columns).await;
            let candidates: Vec<&(&[u8], Option<Vec<Value>>)> = late
                .iter()
                .filter(|(_, v)| match (&filter, v) {
                    (Some(filter), Some(v)) => filter.may_contain(v),
                    _ => true,
                })
                .collect();
            if candidates.is_empty() {
                continue;
            }
            // Only the row groups whose filters may hold one of them.
            let values: Option<Vec<&[Value]>> =
                candidates.iter().map(|(_, v)| v.as_deref()).collect();
            let groups = filter.zip(values).map(|(f, v)| f.groups_holding(v.iter().copied()));
            if groups.as_ref().is_some_and(Vec::is_empty) {
                continue;
            }
            let wanted: FxSet<&[u8]> = candidates.iter().map(|(k, _)| *k).collect();
            // Fetched as far as they are read: those groups, or the file.
            let (bytes, read) = self.fetch_parts(id as u32, None, groups.as_deref()).await?;
            (bytes_read, file_bytes) = (bytes_read + read, file_bytes + f.size.max(0) as u64);
            todo.push((id as u32, bytes, wanted, groups));
        }
        tracing::debug!(
            target: "changelake::table",
            late_keys = late.len(),
            in_brief,
            history_files,
            scanned = todo.len(),
            row_groups = todo.iter().filter_map(|t| t.3.as_ref()).map(Vec::len).sum::<usize>(),
            whole = todo.iter().filter(|t| t.3.is_none()).count(),
            bytes_read,
            file_bytes,
            fetch_ms = started.elapsed().as_secs_f64() * 1e3,
            "late rows: history files scanned"
        );
        for (k, _) in &late {
            let st = states.entry(Key::from(*k)).or_default();
            st.history_read = true;
            // Read whole, its brief is made again from what was read: one
            // account of the key's closed versions, not two.
            st.brief = None;
        }
        for found in par_map(todo, |(id, bytes, wanted, groups)| {
            self.history_rows(id, spec, bytes, &wanted, groups.as_deref())
        }) {
            for (k, v) in found? {
                states.entry(k).or_default().history.push(v);
            }
        }
        for (k, st) in states.iter_mut() {
            if st.current.is_none() && self.index.get(&k[..]).is_some_and(|e| e.summary.deleted()) {
                st.latest_closed = spec.latest_closed(&st.history).cloned();
            }
        }
        Ok(())
    }
}
