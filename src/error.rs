//! One error type for the binary, with the exit-code and retry policy in one place.

use crate::config::ConfigErrors;
use crate::source::file::FileError;
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
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Usage(String),
}

impl From<TableError> for Error {
    fn from(e: TableError) -> Error {
        Error::Table(Box::new(e))
    }
}

impl Error {
    /// SPEC 10: 2 for bad config or usage, 1 for runtime failures.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(_) | Error::ConfigData(_) | Error::Usage(_) => 2,
            _ => 1,
        }
    }

    pub fn retryable(&self) -> bool {
        matches!(self, Error::Table(t) if t.retryable())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
