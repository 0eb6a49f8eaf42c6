//! TODO

use std::collections::BTreeMap;
use std::sync::Arc;

use deltalake::arrow::array::{BooleanArray, RecordBatch, TimestampMicrosecondArray};

use super::Result;
use super::{TableError, TableStore};
use crate::merge::Key;

impl TableStore {
    /// scd2 closes at the Arrow level: the stored rows are read as they are
    /// (only those rows, see [`TableStore::read_selected`]), `_valid_to` and
    /// `_is_deleted` set, and returned for history files with their keys.
    /// Nothing becomes a value; every other column (data, `_valid_from`,
    /// `_execution_id`, surrogate key) is carried over.
    pub(super) async fn stage_closes(
        &self,
        close_at: BTreeMap<u32, Vec<(u32, i64, bool, &Key)>>,
    ) -> Result<(Vec<RecordBatch>, Vec<Key>)> {
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let r = &self.meta.reserved;
        let mut want = BTreeMap::new();
        let mut meta = BTreeMap::new();
        for (id, mut rows) in close_at {
            rows.sort_unstable_by_key(|x| x.0);
            want.insert(id, rows.iter().map(|x| x.0).collect::<Vec<u32>>());
            meta.insert(id, rows);
        }
        // Rows `load_states` already read for these closes; anything else is read now.
        let stash = std::mem::take(&mut *self.selected.lock().unwrap_or_else(|e| e.into_inner()));
        let mut got = vec![];
        for (id, rows, batch) in stash {
            let Some(need) = want.get(&id) else { continue };
            let pos: Option<Vec<u32>> =
                need.iter().map(|r| rows.binary_search(r).ok().map(|p| p as u32)).collect();
            if let Some(pos) = pos {
                let idx = deltalake::arrow::array::UInt32Array::from(pos);
                got.push((
                    id,
                    deltalake::arrow::compute::take_record_batch(&batch, &idx)
                        .map_err(|e| data_err(e.to_string()))?,
                ));
                want.remove(&id);
            }
        }
        for (id, _, batch) in self.read_selected(want).await? {
            got.push((id, batch));
        }
        let (mut closed, mut keys) = (vec![], vec![]);
        for (id, batch) in got {
            let here = &meta[&id];
            let schema = batch.schema();
            let mut cols = batch.columns().to_vec();
            let at = |name: &str| schema.index_of(name).map_err(|e| data_err(e.to_string()));
            cols[at(&r.valid_to)?] = Arc::new(
                TimestampMicrosecondArray::from_iter_values(here.iter().map(|x| x.1))
                    .with_timezone("UTC"),
            );
            cols[at(&r.is_deleted)?] =
                Arc::new(BooleanArray::from_iter(here.iter().map(|x| Some(x.2))));
            closed.push(RecordBatch::try_new(schema, cols).map_err(|e| data_err(e.to_string()))?);
            keys.extend(here.iter().map(|x| x.3.clone()));
        }
        Ok((closed, keys))
    }
}
