//! TODO

use super::commit::PendingCommit;
use super::TableStore;
use deltalake::kernel::{Action, Remove};
use std::collections::HashMap;

impl TableStore {
    pub(super) fn remove_file(&self, id: u32, pc: &mut PendingCommit) {
        let f = self.files[id as usize].as_ref().expect("live file");
        let mut pv = HashMap::new();
        if let Some(p) = self.meta.partition() {
            pv.insert(p.to_string(), Some(f.current.to_string()));
        }
        pc.actions.push(Action::Remove(Remove {
            path: f.path.clone(),
            data_change: !pc.rearrange,
            deletion_timestamp: Some(chrono::Utc::now().timestamp_millis()),
            extended_file_metadata: Some(true),
            partition_values: Some(pv),
            size: Some(f.size),
            tags: None,
            deletion_vector: f.dv_desc.clone(),
            base_row_id: None,
            default_row_commit_version: None,
        }));
        pc.removed.push(id);
        pc.files_removed += 1;
    }
}
