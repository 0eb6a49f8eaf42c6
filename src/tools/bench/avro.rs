//! `--encoding avro`: the bench's batches as Avro messages in the schema
//! registry's wire format, decoded as the Kafka source decodes them
//! (docs/avro.md), so the decode rate of Avro can be set beside JSON's.
//!
//! The writer schema is derived from the generated events (every field
//! nullable, typed as its JSON values are: integers long, other numbers
//! double, text string), so an Avro run merges exactly the values its JSON
//! twin merges. Encoding happens before the timer starts; only decoding
//! (on every core, as the JSON decode) is timed.

use std::collections::BTreeMap;
use std::sync::Arc;

use apache_avro::types::Value as A;
use changelake::config::Format;
use changelake::decode::avro::{decode_run, Message, Schemas, WriterSchema, MAGIC};
use changelake::decode::{store_envelope, Decoded};
use changelake::error::{Error, Result};
use changelake::source::{DecodedRows, RawBatch, RawRow, RawText, Unparsable};
use serde_json::{json, Value as J};

/// The id the bench's one writer schema has.
const SCHEMA_ID: u32 = 1;

/// An Avro type for a JSON value's kind (None for null: no evidence).
fn kind(v: &J) -> Option<&'static str> {
    match v {
        J::Null => None,
        J::Bool(_) => Some("boolean"),
        J::Number(n) if n.is_i64() => Some("long"),
        J::Number(_) => Some("double"),
        // ISO text of an instant, as Debezium sends a timestamptz
        // (`io.debezium.time.ZonedTimestamp`): declared so, it types the
        // column as the same text without a schema infers it (timestamp).
        J::String(s) if changelake::value::looks_like_ts(s) => Some("timestamp"),
        _ => Some("string"),
    }
}

/// The Avro type of a [`kind`]: a ZonedTimestamp is text with Kafka
/// Connect's name for it.
fn avro_type(kind: &str) -> J {
    match kind {
        "timestamp" => json!({"type": "string", "connect.name": ZONED}),
        other => json!(other),
    }
}

/// Kafka Connect's name of ISO timestamp text with an offset.
pub(super) const ZONED: &str = "io.debezium.time.ZonedTimestamp";

/// Field types of the records found at `path` in the events (`after` and
/// `before` of envelopes, `source`, or the flat row itself).
#[derive(Default)]
pub(super) struct Record(BTreeMap<String, (usize, &'static str)>);

impl Record {
    pub(super) fn observe(&mut self, m: &serde_json::Map<String, J>) {
        for (k, v) in m {
            let next = self.0.len();
            let e = self.0.entry(k.clone()).or_insert((next, "string"));
            match (e.1, kind(v)) {
                (_, None) => {}
                ("long", Some("double")) => e.1 = "double",
                (_, Some(t)) if e.0 == next || e.1 == "string" => e.1 = t,
                _ => {}
            }
        }
    }

    pub(super) fn fields(&self) -> Vec<(&str, &'static str)> {
        let mut f: Vec<_> = self.0.iter().map(|(n, (i, t))| (n.as_str(), *i, *t)).collect();
        f.sort_by_key(|(_, i, _)| *i);
        f.into_iter().map(|(n, _, t)| (n, t)).collect()
    }

    fn schema(&self, name: &str) -> J {
        let fields: Vec<J> = self
            .fields()
            .iter()
            .map(|(n, t)| json!({"name": n, "type": ["null", avro_type(t)], "default": null}))
            .collect();
        json!({"type": "record", "name": name, "fields": fields})
    }

    /// A JSON object as this record's Avro value.
    fn value(&self, m: &serde_json::Map<String, J>) -> A {
        A::Record(
            self.fields()
                .iter()
                .map(|(n, t)| {
                    let v = match (m.get(*n), *t) {
                        (None | Some(J::Null), _) => A::Union(0, Box::new(A::Null)),
                        (Some(v), "long") => {
                            A::Union(1, Box::new(A::Long(v.as_i64().unwrap_or(0))))
                        }
                        (Some(v), "double") => {
                            A::Union(1, Box::new(A::Double(v.as_f64().unwrap_or(0.0))))
                        }
                        (Some(v), "boolean") => {
                            A::Union(1, Box::new(A::Boolean(v.as_bool().unwrap_or(false))))
                        }
                        (Some(J::String(s)), _) => A::Union(1, Box::new(A::String(s.clone()))),
                        (Some(v), _) => A::Union(1, Box::new(A::String(v.to_string()))),
                    };
                    (n.to_string(), v)
                })
                .collect(),
        )
    }
}

/// A batch's frames: one buffer, and where each frame ends in it.
pub struct Frames {
    buf: bytes::Bytes,
    ends: Vec<usize>,
}

/// The batch files' events as Avro frames, and the schema they use.
pub struct AvroBatches {
    schema: apache_avro::Schema,
    writer: Arc<WriterSchema>,
    format: Format,
    row: Record,
    source: Record,
}

impl Schemas for AvroBatches {
    fn schema(&self, id: u32) -> std::result::Result<Arc<WriterSchema>, String> {
        (id == SCHEMA_ID).then(|| self.writer.clone()).ok_or_else(|| format!("schema id {id}"))
    }
}

pub(super) fn lines(bytes: &[u8]) -> impl Iterator<Item = J> + '_ {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
}

impl AvroBatches {
    /// The writer schema of every event in `files` (JSONL, as generated).
    pub fn derive(files: &[&[u8]], format: Format) -> Result<AvroBatches> {
        let (mut row, mut source) = (Record::default(), Record::default());
        for bytes in files {
            for e in lines(bytes) {
                if format == Format::Json {
                    e.as_object().into_iter().for_each(|m| row.observe(m));
                    continue;
                }
                for s in ["before", "after"] {
                    e.get(s).and_then(J::as_object).into_iter().for_each(|m| row.observe(m));
                }
                e.get("source").and_then(J::as_object).into_iter().for_each(|m| source.observe(m));
            }
        }
        let text = match format {
            Format::Json => row.schema("Row"),
            Format::Debezium => json!({
                "type": "record", "name": "Envelope", "fields": [
                    {"name": "before", "type": ["null", row.schema("Value")], "default": null},
                    {"name": "after", "type": ["null", "Value"], "default": null},
                    {"name": "source", "type": source.schema("Source")},
                    {"name": "op", "type": "string"},
                    {"name": "ts_ms", "type": ["null", "long"], "default": null}
                ]
            }),
        }
        .to_string();
        let bad = |e: String| Error::Input(format!("bench Avro schema: {e}"));
        let schema = apache_avro::Schema::parse_str(&text).map_err(|e| bad(e.to_string()))?;
        let writer = Arc::new(WriterSchema::parse(SCHEMA_ID, &text).map_err(bad)?);
        Ok(AvroBatches { schema, writer, format, row, source })
    }

    /// One batch file's events as framed messages, one after another in
    /// one buffer (as a consumer's fetch holds them).
    pub fn encode(&self, bytes: &[u8]) -> Result<Frames> {
        let frames = self.encode_each(bytes)?;
        let mut buf = Vec::with_capacity(frames.iter().map(Vec::len).sum());
        let mut ends = Vec::with_capacity(frames.len());
        for f in frames {
            buf.extend(f);
            ends.push(buf.len());
        }
        Ok(Frames { buf: buf.into(), ends })
    }

    fn encode_each(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        let empty = serde_json::Map::new();
        let obj = |v: Option<&J>| v.and_then(J::as_object).cloned();
        lines(bytes)
            .map(|e| {
                let v = match self.format {
                    Format::Json => self.row.value(e.as_object().unwrap_or(&empty)),
                    Format::Debezium => {
                        let section = |name: &str| match obj(e.get(name)) {
                            Some(m) => A::Union(1, Box::new(self.row.value(&m))),
                            None => A::Union(0, Box::new(A::Null)),
                        };
                        A::Record(vec![
                            ("before".into(), section("before")),
                            ("after".into(), section("after")),
                            (
                                "source".into(),
                                self.source.value(&obj(e.get("source")).unwrap_or_default()),
                            ),
                            ("op".into(), A::String(e["op"].as_str().unwrap_or("u").to_string())),
                            (
                                "ts_ms".into(),
                                match e.get("ts_ms").and_then(J::as_i64) {
                                    Some(t) => A::Union(1, Box::new(A::Long(t))),
                                    None => A::Union(0, Box::new(A::Null)),
                                },
                            ),
                        ])
                    }
                };
                let mut frame = vec![MAGIC];
                frame.extend(SCHEMA_ID.to_be_bytes());
                frame.extend(
                    apache_avro::to_avro_datum(&self.schema, v)
                        .map_err(|e| Error::Input(format!("bench Avro encoding: {e}")))?,
                );
                Ok(frame)
            })
            .collect()
    }

    /// Decodes a batch's frames on every core, as the Kafka source's
    /// partition tasks do, into the batch a run merges.
    pub fn decode(
        &self,
        source: &str,
        frames: &Frames,
        store_paths: &[String],
        keep: &[String],
    ) -> RawBatch {
        const CHUNK: usize = 8192;
        let all: Vec<&[u8]> = (0..frames.ends.len())
            .map(|i| &frames.buf[if i == 0 { 0 } else { frames.ends[i - 1] }..frames.ends[i]])
            .collect();
        let chunks: Vec<(usize, &[&[u8]])> =
            all.chunks(CHUNK).enumerate().map(|(i, c)| (i * CHUNK, c)).collect();
        let parts = changelake::par::par_map(chunks, |(first, chunk)| {
            let buf = &RawText::job_buffer(&frames.buf);
            let mut rows = DecodedRows::with_capacity(chunk.len());
            let mut unparsable = vec![];
            let messages: Vec<Message<'_>> =
                chunk.iter().map(|f| Message { key: None, value: Some(f) }).collect();
            let decoded = decode_run(self.format, &messages, self, Some(keep));
            for (i, (frame, decoded)) in chunk.iter().zip(decoded).enumerate() {
                let pos = (first + i) as u64 + 1;
                match decoded {
                    Ok(Decoded::Row { mut data, env, declared }) => {
                        store_envelope(&mut data, &env, store_paths);
                        let raw = RawText::within(buf, frame);
                        rows.push(data, RawRow::decoded(0, pos, raw, env, declared));
                    }
                    Ok(_) => {}
                    Err(r) => unparsable.push(Unparsable {
                        partition: 0,
                        pos,
                        raw: frame.to_vec(),
                        error: r.error,
                        reason: r.reason,
                    }),
                }
            }
            let mut b = rows.into_batch(source.to_string());
            b.unparsable = unparsable;
            b
        });
        // Positions are already the batch's.
        RawBatch::joined(source.to_string(), parts.into_iter().map(|p| (0, p)).collect())
    }
}
