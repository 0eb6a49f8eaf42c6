//! Sources produce raw batches: column names plus untyped (CSV) or
//! JSON-typed cells, each row with its input position and raw text so a bad
//! row can be dead-lettered verbatim.

pub mod file;
pub mod kafka;

use crate::value::Value;

#[derive(Debug, Clone)]
pub struct RawRow {
    /// One cell per `RawBatch::columns` entry (missing fields are NULL).
    pub cells: Vec<Value>,
    /// Position: line number (files) or offset (Kafka). Later wins ties.
    pub pos: u64,
    pub partition: i32,
    pub raw: String,
    /// Envelope fields readable by predicates but not stored (`source.lsn`).
    pub extra: Vec<(String, Value)>,
    /// Re-read at or below the table's stored offset (`replay --reapply`).
    pub replayed: bool,
}

#[derive(Debug, Clone, Default)]
pub struct RawBatch {
    /// Where the rows came from: a file path or a topic.
    pub source: String,
    pub columns: Vec<String>,
    pub rows: Vec<RawRow>,
    /// Cells are text whose type must be inferred (CSV), not JSON values.
    pub text: bool,
    /// Rows that could not be parsed at all.
    pub unparsable: Vec<Unparsable>,
}

#[derive(Debug, Clone)]
pub struct Unparsable {
    pub partition: i32,
    pub pos: u64,
    pub raw: Vec<u8>,
    pub error: String,
    /// Bounded reason for metrics: malformed, schema, type, guardrail.
    pub reason: &'static str,
}

impl RawBatch {
    /// Builds a batch from rows whose columns vary (JSON, Debezium): the
    /// batch's columns are the union, in order of first appearance.
    pub fn from_maps(source: String, rows: Vec<(Vec<(String, Value)>, RawRow)>) -> RawBatch {
        let mut columns: Vec<String> = vec![];
        let mut at: std::collections::HashMap<String, usize, rustc_hash::FxBuildHasher> = Default::default();
        for (data, _) in &rows {
            for (k, _) in data {
                if !at.contains_key(k) {
                    at.insert(k.clone(), columns.len());
                    columns.push(k.clone());
                }
            }
        }
        let rows = rows
            .into_iter()
            .map(|(data, mut r)| {
                let mut cells = vec![Value::Null; columns.len()];
                for (k, v) in data {
                    cells[at[&k]] = v;
                }
                r.cells = cells;
                r
            })
            .collect();
        RawBatch { source, columns, rows, text: false, unparsable: vec![] }
    }
}
