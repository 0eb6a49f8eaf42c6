//! One error type for the binary, with the exit-code and retry policy in one place.

use crate::config::ConfigErrors;
use crate::source::file::FileError;
use crate::source::kafka::KafkaError;
use crate::table::TableError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(#[from] ConfigErrors),
    /// A config that is valid on its own but does not fit the data (exit 2).
    #[error("{0}")]
    ConfigData(String),
    #[error(transparent)]
    Table(Box<TableError>),
    #[error(transparent)]
    File(#[from] FileError),
    /// A Kafka client call failed; retryable when librdkafka says it may pass.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error("{0}")]
    Input(String),
    /// A table's stored next offset lies outside its partition's range
    /// (`on_offset_out_of_range: fail`).
    #[error("table {table}: stored next offset {stored} of {topic} partition {partition} is outside the partition's range [{low}, {high}] ({why}); nothing was read. Set progress with `changelake replay --table {table} --from-offsets {topic}:{partition}=<offset>` (or `--from-beginning`), or set `on_offset_out_of_range: earliest` to continue from offset {low}")]
    OffsetOutOfRange {
        table: String,
        topic: String,
        partition: i32,
        stored: i64,
        low: i64,
        high: i64,
        why: &'static str,
    },
    #[error("{0}")]
    Usage(String),
    /// Writing the output of a command failed.
    #[error("output: {0}")]
    Io(#[from] std::io::Error),
}

impl From<TableError> for Error {
    fn from(e: TableError) -> Error {
        Error::Table(Box::new(e))
    }
}

impl Error {
    /// 2 for bad config or usage, 1 for runtime failures (docs/cli.md, exit codes).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(_) | Error::ConfigData(_) | Error::Usage(_) => 2,
            _ => 1,
        }
    }

    /// A commit lost to another writer's (see [`TableError::lost_race`]).
    pub fn lost_race(&self) -> bool {
        matches!(self, Error::Table(t) if t.lost_race())
    }

    pub fn retryable(&self) -> bool {
        match self {
            Error::Table(t) => t.retryable(),
            Error::Kafka(k) => k.retryable(),
            _ => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
