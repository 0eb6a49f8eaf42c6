//! `--encoding csv` and `--encoding json-schema`: the bench's batches in
//! the two other text forms changelake decodes, so every decode path has
//! its rate in the report (docs/performance.md, decode paths).
//!
//! - `csv` (flat rows only): a header of the fields in first-seen order,
//!   NULL as an empty cell, as an extract from a CRM export looks. Decoded
//!   by the file source's CSV reader; the table's stored types type the text.
//! - `json-schema` (Debezium only): each envelope wrapped as Kafka Connect's
//!   JSON converter writes it with `schemas.enable=true`:
//!   `{"schema": ..., "payload": <the envelope>}`, the schema derived from
//!   the events as the Avro writer schema is (integers int64, other numbers
//!   float64, ISO instants ZonedTimestamp, text string), so the run merges
//!   exactly what its plain twin merges.
//!
//! Re-encoding happens before the timer starts; only decoding is timed.

use changelake::error::{Error, Result};
use serde_json::{json, Value as J};

use super::avro::{lines, Record};

/// One batch file's events in the other text form.
pub enum TextBatches {
    Csv { row: Record },
    JsonSchema { schema: String },
}

/// A Kafka Connect type for the Avro-like kind [`Record`] observed.
fn connect_type(kind: &str) -> &'static str {
    match kind {
        "long" => "int64",
        "double" => "float64",
        "boolean" => "boolean",
        _ => "string",
    }
}

fn connect_struct(r: &Record, name: &str, field: &str) -> J {
    let fields: Vec<J> = r
        .fields()
        .iter()
        .map(|(n, t)| match *t {
            "timestamp" => {
                json!({"type": "string", "optional": true, "field": n, "name": super::avro::ZONED})
            }
            t => json!({"type": connect_type(t), "optional": true, "field": n}),
        })
        .collect();
    json!({"type": "struct", "fields": fields, "optional": true, "name": name, "field": field})
}

impl TextBatches {
    /// `--encoding csv` of flat rows: the header from every file's fields.
    pub fn csv(files: &[&[u8]]) -> TextBatches {
        let mut row = Record::default();
        for e in files.iter().flat_map(|b| lines(b)) {
            e.as_object().into_iter().for_each(|m| row.observe(m));
        }
        TextBatches::Csv { row }
    }

    /// `--encoding json-schema` of Debezium envelopes.
    pub fn json_schema(files: &[&[u8]]) -> TextBatches {
        let (mut row, mut source) = (Record::default(), Record::default());
        for e in files.iter().flat_map(|b| lines(b)) {
            for s in ["before", "after"] {
                e.get(s).and_then(J::as_object).into_iter().for_each(|m| row.observe(m));
            }
            e.get("source").and_then(J::as_object).into_iter().for_each(|m| source.observe(m));
        }
        let mut src = connect_struct(&source, "io.debezium.connector.postgresql.Source", "source");
        src["optional"] = J::Bool(false);
        let schema = json!({
            "type": "struct",
            "fields": [
                connect_struct(&row, "crm.public.account.Value", "before"),
                connect_struct(&row, "crm.public.account.Value", "after"),
                src,
                {"type": "string", "optional": false, "field": "op"},
                {"type": "int64", "optional": true, "field": "ts_ms"}
            ],
            "optional": false,
            "name": "crm.public.account.Envelope",
            "version": 1
        });
        TextBatches::JsonSchema { schema: schema.to_string() }
    }

    /// A batch file's JSON lines re-encoded.
    pub fn encode(&self, bytes: &[u8]) -> Result<bytes::Bytes> {
        match self {
            TextBatches::JsonSchema { schema } => {
                let mut out = Vec::with_capacity(bytes.len() * 3);
                for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    out.extend_from_slice(b"{\"schema\":");
                    out.extend_from_slice(schema.as_bytes());
                    out.extend_from_slice(b",\"payload\":");
                    out.extend_from_slice(line);
                    out.extend_from_slice(b"}\n");
                }
                Ok(out.into())
            }
            TextBatches::Csv { row } => {
                let fields = row.fields();
                let mut w = csv::Writer::from_writer(Vec::with_capacity(bytes.len()));
                let bad = |e: csv::Error| Error::Input(format!("bench CSV encoding: {e}"));
                w.write_record(fields.iter().map(|(n, _)| *n)).map_err(bad)?;
                for e in lines(bytes) {
                    let cells = fields.iter().map(|(n, _)| match e.get(*n) {
                        None | Some(J::Null) => String::new(),
                        Some(J::String(s)) => s.clone(),
                        Some(v) => v.to_string(),
                    });
                    w.write_record(cells).map_err(bad)?;
                }
                w.into_inner().map(Into::into).map_err(|e| Error::Input(e.to_string()))
            }
        }
    }
}
