//! The typed configuration: what a loaded, validated config file says.
//!
//! Plain data, filled in by the YAML walk (`cx`, `document`, `systems`,
//! `tables`, ...) and read by the rest of changelake. The keys and their
//! meaning are documented in docs/config.md; the defaults live in `defaults`,
//! the reserved column names in `reserved`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::Reserved;
use crate::expr::Expr;
use crate::value::DType;

#[derive(Debug, Clone)]
pub struct Config {
    /// Directory of the config file; relative paths resolve against it.
    pub base_dir: PathBuf,
    /// Lake root: an absolute local path or an object-store URL.
    pub storage_root: String,
    /// `storage.options`: object-store settings (values never shown).
    pub storage_options: crate::storage::StorageOptions,
    pub systems: BTreeMap<String, System>,
    pub tables: Vec<TableConfig>,
    pub batching: Batching,
    pub metrics_listen: Option<String>,
    pub dead_letters: DeadLetters,
    pub shutdown_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct DeadLetters {
    pub table: String,
    pub topic: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Batching {
    pub max_rows: usize,
    pub max_bytes: usize,
    pub max_age: Duration,
    pub max_buffered_bytes: usize,
}

#[derive(Debug, Clone)]
pub struct System {
    pub name: String,
    pub kind: SystemKind,
    /// Declared column types (`columns: {id: integer}`); others are inferred.
    pub columns: Vec<(String, DType)>,
    /// Debezium's `unavailable.value.placeholder` (PostgreSQL TOAST): a
    /// value equal to it is unchanged, never data. Debezium formats only.
    pub unavailable_placeholder: Option<String>,
}

/// `on_offset_out_of_range` (docs/commit-protocol.md, offsets outside the
/// partition range): a stored next offset below the partition's low
/// watermark (events lost to retention) or beyond its high watermark (the
/// topic was recreated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutOfRange {
    /// Stop (exit 1) naming the table, partition, offset and range.
    #[default]
    Fail,
    /// Continue from the low watermark, logged and counted.
    Earliest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Debezium,
}

impl Format {
    /// The format a config's `format:` names (`json`, `debezium`).
    pub fn parse(name: &str) -> Option<Format> {
        match name {
            "json" => Some(Format::Json),
            "debezium" => Some(Format::Debezium),
            _ => None,
        }
    }

    /// The name a config gives it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Debezium => "debezium",
        }
    }
}

/// `schema_registry`: where an Avro system's writer schemas are fetched
/// (the Confluent REST API; Apicurio's compatible API at its `ccompat`
/// path), with basic auth and TLS (docs/avro.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaRegistry {
    /// Base URL; `/schemas/ids/{id}` is appended.
    pub url: String,
    pub username: Option<String>,
    pub password: Option<String>,
    /// PEM file of the certificate authority that signed the registry's
    /// certificate (otherwise the system's roots).
    pub ca_location: Option<String>,
    /// PEM files of a client certificate and its key (mutual TLS).
    pub certificate_location: Option<String>,
    pub key_location: Option<String>,
    /// Per request.
    pub timeout: std::time::Duration,
}

#[derive(Debug, Clone)]
pub enum SystemKind {
    Kafka {
        brokers: String,
        group_id: String,
        topic: String,
        format: Format,
        kafka: BTreeMap<String, String>,
        /// What to do with a stored offset outside its partition's range.
        on_out_of_range: OutOfRange,
        /// `format: debezium-avro | avro`: messages are Avro in the
        /// registry's wire format, their writer schemas fetched from it.
        avro: Option<Box<SchemaRegistry>>,
    },
    Csv {
        path: String,
        delimiter: u8,
    },
    /// One event per line: flat JSON rows, or Debezium envelopes (`format: debezium`).
    Jsonl {
        path: String,
        format: Format,
    },
}

impl SystemKind {
    /// The event format of a Kafka or JSONL system (CSV has none).
    pub fn format(&self) -> Option<Format> {
        match self {
            SystemKind::Kafka { format, .. } | SystemKind::Jsonl { format, .. } => Some(*format),
            SystemKind::Csv { .. } => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Scd1,
    Scd2,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Scd1 => "scd1",
            Strategy::Scd2 => "scd2",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteMode {
    Soft,
    Hard,
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaPolicy {
    Additive,
    Ignore,
    Strict,
}

/// How scd2 stamps `_valid_from/_valid_to` (docs/scd2.md, business time).
/// The config names the column (`C = String`); the merge, which works on
/// column positions, uses the same enum resolved to an index
/// (`merge::ValidTime`).
#[derive(Debug, Clone, PartialEq)]
pub enum ValidTime<C = String> {
    /// `_valid_from/_valid_to` are commit (processing) times.
    Processing,
    /// Business time read from a column of the row.
    Column(C),
    /// One literal business date for the whole run (microseconds, UTC midnight).
    Date(i64),
}

#[derive(Debug, Clone, Default)]
pub struct Guardrails {
    pub reject_duplicates: bool,
    pub reject_late: bool,
}

/// Physical layout knobs (changelake extension, see `table` module docs).
#[derive(Debug, Clone)]
pub struct Layout {
    /// Upper bound of rows per data file.
    pub file_rows: usize,
    /// Target number of files a large load of new keys is spread over.
    pub spread: usize,
    /// A Delta checkpoint every this many commits (readers and restarts
    /// replay at most this many JSON commits); vacuum runs at the same time.
    pub checkpoint_interval: usize,
    /// Compact a partition once it has this many small files (under a
    /// quarter of `file_rows` and under 1024 rows); 0 disables compaction.
    pub compact_min_files: usize,
    /// Data files removed from the table longer ago than this are deleted
    /// from storage (readers time-travelling further back lose them); None
    /// disables vacuum.
    pub vacuum_retention: Option<std::time::Duration>,
    /// Commit files older than this and covered by a checkpoint are deleted
    /// after each checkpoint (Delta's `delta.logRetentionDuration`); time
    /// travel reaches back this far.
    pub log_retention: std::time::Duration,
    /// Merge-on-read: updates and deletes mask stored rows with Delta
    /// deletion vectors instead of rewriting their files (new tables only;
    /// readers need the `deletionVectors` feature).
    pub deletion_vectors: bool,
    /// Where a merge-on-read scd2 table keeps the row companions that let a
    /// close read only the rows it closes (docs/scd2.md).
    pub row_companions: RowCompanions,
}

/// `layout.row_companions`: `auto` (in the table directory when the table
/// is on a local disk, none otherwise), `off`, or a local directory (for
/// tables on object stores).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RowCompanions {
    #[default]
    Auto,
    Off,
    Dir(std::path::PathBuf),
}

#[derive(Debug, Clone)]
pub struct TableConfig {
    pub name: String,
    pub system: String,
    pub object: String,
    pub filter: Option<Expr>,
    /// Where each event's source timestamp is (`source.time_column`, a
    /// column or a dotted envelope path; Debezium's `source.ts_ms` by
    /// default): the newest one committed gives
    /// `changelake_source_lag_seconds` (docs/metrics.md, freshness).
    pub source_time: Option<Vec<String>>,
    pub business_key: Vec<String>,
    pub strategy: Strategy,
    pub sequence_by: Vec<String>,
    pub delete_when: Option<Expr>,
    pub delete_mode: DeleteMode,
    pub ignore_columns: Vec<String>,
    pub track_columns: Option<Vec<String>>,
    pub snapshot: bool,
    pub valid_time: ValidTime,
    pub open_valid_to: Option<i64>,
    pub surrogate_key: bool,
    pub intra_batch_all: bool,
    pub guardrails: Guardrails,
    pub schema_policy: SchemaPolicy,
    pub reserved: Reserved,
    pub apply_truncates: bool,
    pub layout: Layout,
}
