//! Sources produce raw batches: column names plus untyped (CSV) or
//! JSON-typed cells, each row with its input position and raw text so a bad
//! row can be dead-lettered verbatim.

pub mod file;

use crate::value::Value;

#[derive(Debug, Clone)]
pub struct RawRow {
    /// One cell per `RawBatch::columns` entry (missing fields are NULL).
    pub cells: Vec<Value>,
    /// Position: line number (files) or offset (Kafka). Later wins ties.
    pub pos: u64,
    pub raw: String,
}

#[derive(Debug, Clone, Default)]
pub struct RawBatch {
    /// Where the rows came from: a file path or a topic.
    pub source: String,
    pub partition: i32,
    pub columns: Vec<String>,
    pub rows: Vec<RawRow>,
    /// Cells are text whose type must be inferred (CSV), not JSON values.
    pub text: bool,
    /// Rows that could not be parsed at all: (position, raw, error).
    pub unparsable: Vec<(u64, String, String)>,
}
