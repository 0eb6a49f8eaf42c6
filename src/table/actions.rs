//! Delta `add` and `remove` actions, built in one place.
//!
//! Every file this crate writes or drops goes through these constructors, so
//! the fields readers rely on (partition values, sizes, `numRecords`
//! statistics, deletion-vector descriptors, `dataChange`) are filled the
//! same way for data files, rewrites, deletion-vector updates, compaction and
//! the dead-letter table.

use std::collections::HashMap;

use deltalake::kernel::{Action, Add, DeletionVectorDescriptor, Remove};

/// Partition values of a file: the scd2 current/history partition, if any.
pub(crate) fn partition_values(
    partition: Option<&str>,
    current: bool,
) -> HashMap<String, Option<String>> {
    partition.map(|p| (p.to_string(), Some(current.to_string()))).into_iter().collect()
}

/// Whether an action changes the table's rows. Compaction only rearranges
/// them (`dataChange: false`), so streaming readers skip its commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum DataChange {
    #[default]
    Rows,
    Rearrange,
}

/// A data file as an `add` action sees it.
pub(crate) struct FileAction<'a> {
    pub(crate) path: &'a str,
    pub(crate) partition_values: HashMap<String, Option<String>>,
    pub(crate) size: i64,
    /// Physical rows (deletion-vector masked rows included).
    pub(crate) rows: usize,
    pub(crate) deletion_vector: Option<DeletionVectorDescriptor>,
    /// The file's statistics (`table/file_stats.rs`); `None` for files
    /// written before they were collected: `numRecords` only.
    pub(crate) stats: Option<&'a str>,
}

pub(crate) fn add(f: FileAction, change: DataChange) -> Action {
    Action::Add(Add {
        path: f.path.to_string(),
        partition_values: f.partition_values,
        size: f.size,
        modification_time: chrono::Utc::now().timestamp_millis(),
        data_change: change == DataChange::Rows,
        stats: Some(match f.stats {
            Some(s) => s.to_string(),
            None => format!("{{\"numRecords\":{}}}", f.rows),
        }),
        tags: None,
        deletion_vector: f.deletion_vector,
        base_row_id: None,
        default_row_commit_version: None,
        clustering_provider: None,
    })
}

pub(crate) fn remove(f: FileAction, change: DataChange) -> Action {
    Action::Remove(Remove {
        path: f.path.to_string(),
        data_change: change == DataChange::Rows,
        deletion_timestamp: Some(chrono::Utc::now().timestamp_millis()),
        extended_file_metadata: Some(true),
        partition_values: Some(f.partition_values),
        size: Some(f.size),
        tags: None,
        deletion_vector: f.deletion_vector,
        base_row_id: None,
        default_row_commit_version: None,
    })
}
