//! TODO

use std::sync::Arc;

use deltalake::arrow::array::ArrayRef;
use deltalake::Path;
use object_store::ObjectStoreExt;

use super::convert::{cell, KeyCols};
use super::files::FileMeta;
use super::parquet::KeyFilter;
use super::Result;
use super::{FxSet, TableError, TableStore};
use crate::merge::{Key, KeyMap, Spec, Version};
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
    /// Versions order by sequence, then by run (SPEC 5).
    pub(super) fn newer_than(&self, other: &HistoryHead) -> bool {
        crate::value::cmp_slices(&self.seq, &other.seq).then(self.exec.cmp(&other.exec))
            == std::cmp::Ordering::Greater
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
        let names: Vec<&str> = spec
            .key
            .iter()
            .chain(&spec.seq)
            .map(|&i| self.columns[i].0.as_str())
            .chain([r.is_deleted.as_str(), r.execution_id.as_str()])
            .collect();
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
                if f.deleted(row) || !keys.encode(i, &mut buf) || self.index.contains_key(&buf[..])
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
                tracing::warn!(file = %f.path, error = %e, "key bloom filters unreadable; the file is scanned");
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
    /// the key columns alone finds their rows, then only those rows are decoded.
    pub(super) fn history_rows(
        &self,
        id: u32,
        spec: &Spec,
        bytes: bytes::Bytes,
        wanted: &FxSet<&[u8]>,
    ) -> Result<Vec<(Key, Version)>> {
        let f = self.files[id as usize].as_ref().expect("live file");
        let data_err = |msg: String| TableError::Data {
            uri: self.uri.clone(),
            msg: format!("parquet {}: {msg}", f.path),
        };
        let key_names: Vec<&str> = spec.key.iter().map(|&i| self.columns[i].0.as_str()).collect();
        let reader = self.columns_of(f, bytes.clone(), &key_names)?;
        let mut hits: Vec<(u32, Key)> = vec![];
        let mut row_no = 0u32;
        let mut buf = Vec::with_capacity(32);
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
                let row = row_no;
                row_no += 1;
                if !f.deleted(row) && keys.encode(i, &mut buf) && wanted.contains(&buf[..]) {
                    hits.push((row, buf.as_slice().into()));
                }
            }
        }
        if hits.is_empty() {
            return Ok(vec![]);
        }
        let rows: Vec<u32> = hits.iter().map(|(r, _)| *r).collect();
        let batches = self.decode_file(id, bytes, Some(&rows))?;
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
}
