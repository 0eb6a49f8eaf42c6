//! The value of every setting a config file leaves out, in one place
//! (docs/config.md lists them per key; reserved column names are in
//! `reserved`).

use std::time::Duration;

use super::{Batching, Format, Layout};

/// `storage.root`, resolved against the config's directory.
pub(super) const STORAGE_ROOT: &str = "./lake";

/// `dead_letters.table`, under the storage root.
pub(super) const DEAD_LETTER_TABLE: &str = "_dead_letters";

/// `shutdown_timeout`: how long open batches may take to commit on shutdown.
pub(super) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// A Kafka system's `topic` template: the table's object name.
pub(super) const KAFKA_TOPIC: &str = "{object}";

/// A Kafka system's `format`.
pub(super) const KAFKA_FORMAT: Format = Format::Debezium;

/// A JSONL system's `format`.
pub(super) const JSONL_FORMAT: Format = Format::Json;
/// Debezium's default `unavailable.value.placeholder`.
pub(super) const UNAVAILABLE_PLACEHOLDER: &str = "__debezium_unavailable_value";

/// A CSV system's `delimiter`.
pub(super) const CSV_DELIMITER: u8 = b',';

/// `merge.delete_when` of a table reading Debezium envelopes.
pub(super) const DEBEZIUM_DELETE_WHEN: &str = "op = 'd'";

/// A Kafka system's `group_id`.
pub(super) fn kafka_group_id(system: &str) -> String {
    format!("changelake-{system}")
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            max_rows: 100_000,
            max_bytes: 64 << 20,
            max_age: Duration::from_secs(5),
            max_buffered_bytes: 512 << 20,
        }
    }
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            file_rows: 65_536,
            spread: 32,
            checkpoint_interval: 20,
            compact_min_files: 16,
            vacuum_retention: Some(std::time::Duration::from_secs(7 * 24 * 3600)),
            log_retention: std::time::Duration::from_secs(30 * 24 * 3600),
            deletion_vectors: false,
            row_companions: Default::default(),
        }
    }
}
