//! Avro messages in the schema registry's wire format (Confluent's, which
//! Apicurio's compatible mode also writes): a zero magic byte, the writer
//! schema's id as four big-endian bytes, then the Avro binary body
//! (docs/avro.md).
//!
//! Pure: the writer schemas come in already fetched (`source::registry`
//! fetches and caches them, and makes the partition wait while the
//! registry is away). Runs of messages are read by a program compiled
//! from their writer schema (`direct`); `apache_avro` decodes whatever
//! that reader gives up and stays the reference. Both map a message to the
//! same rows, envelope fields and declared types the JSON path produces
//! for the same events, so a table fed Avro equals one fed JSON.

mod cells;
mod cursor;
mod direct;
mod plan;

use std::sync::Arc;

use apache_avro::types::Value as A;
use serde_json::Value as J;

use self::plan::{record_plan, FieldPlan, Names};
use super::{
    env_name, DeclaredTypes, Decoded, Env, Fields, Layout, Name, Op, Rejected, MAX_MESSAGE_BYTES,
};
use crate::config::Format;
use crate::value::Value;

/// The first byte of every framed message.
pub const MAGIC: u8 = 0;

/// A framed message's schema id and Avro body.
pub fn frame(bytes: &[u8]) -> Result<(u32, &[u8]), String> {
    match bytes {
        [MAGIC, a, b, c, d, body @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), body)),
        [] => Err("empty message".into()),
        [m, ..] if *m != MAGIC => Err(format!(
            "not Avro in the schema registry's wire format: first byte {m:#04x}, expected 0x00"
        )),
        _ => Err(format!("{} bytes, shorter than the 5-byte wire-format header", bytes.len())),
    }
}

/// The schema ids a message needs: its value's and, when the key is framed
/// too, its key's.
pub fn schema_ids(key: Option<&[u8]>, value: Option<&[u8]>) -> impl Iterator<Item = u32> {
    let id = |b: Option<&[u8]>| b.and_then(|b| frame(b).ok()).map(|(id, _)| id);
    id(value).into_iter().chain(id(key))
}

/// A writer schema from the registry, with what decoding needs worked out.
pub struct WriterSchema {
    pub id: u32,
    /// Decodes a whole frame (header checked) with the schema resolved
    /// once: `apache_avro::from_avro_datum` resolves the schema's names
    /// again for every message (a fifth of a decode).
    reader: apache_avro::GenericSingleObjectReader,
    /// The record as a flat row (`format: avro`; message keys).
    row: Option<RowPlan>,
    /// The record as a Debezium envelope (`format: debezium-avro`).
    envelope: Option<Envelope>,
    /// The schema compiled for reading messages in one pass, straight into
    /// cells (`direct`), or checks bodies before `apache_avro` reads them
    /// when it holds a type that path does not read.
    direct: direct::Program,
}

impl std::fmt::Debug for WriterSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterSchema").field("id", &self.id).finish_non_exhaustive()
    }
}

/// A plan's layout and declarations as the rows of one run share them
/// ([`RowPlan::for_run`]).
struct RunCopy {
    layout: Layout,
    declared: DeclaredTypes,
}

/// A record's fields: their plans, the layout rows share, and the
/// declarations every row of the schema carries.
struct RowPlan {
    fields: Vec<FieldPlan>,
    layout: Layout,
    declared: DeclaredTypes,
}

impl RowPlan {
    fn of(names: &Names<'_>, fields: &[J]) -> RowPlan {
        let fields = record_plan(names, fields);
        let layout: Layout = fields.iter().map(|f| Name::from(f.name.as_str())).collect();
        let declared = fields.iter().map(|f| (f.name.clone(), f.declared.clone())).collect();
        RowPlan { fields, layout, declared }
    }

    /// The layout and declarations for the rows of one run of messages
    /// (`direct`), copied from the plan's: the plan is shared by every
    /// core, and each of them bumping its lists' reference counts for every
    /// row made the cores fight over them (5% of a Debezium Avro decode).
    fn for_run(&self) -> RunCopy {
        RunCopy {
            layout: self.layout.iter().cloned().collect(),
            declared: self.declared.iter().cloned().collect(),
        }
    }

    /// A record value's fields as a row (values in the schema's order).
    fn row(&self, record: Vec<(String, A)>) -> Fields {
        let values = record.into_iter().zip(&self.fields).map(|((_, v), f)| cells::cell(v, f.conv));
        Fields::new(self.layout.clone(), values.collect())
    }
}

/// Debezium's envelope record: the row plans of `before` and `after`.
struct Envelope {
    before: Option<RowPlan>,
    after: Option<RowPlan>,
}

/// The wire format's header of one schema id, as `apache_avro`'s
/// single-object reader checks it before the body.
struct Header(u32);

impl apache_avro::headers::HeaderBuilder for Header {
    fn build_header(&self) -> Vec<u8> {
        let mut h = vec![MAGIC];
        h.extend(self.0.to_be_bytes());
        h
    }
}

impl WriterSchema {
    /// Parses the schema text the registry returned for `id`.
    pub fn parse(id: u32, text: &str) -> Result<WriterSchema, String> {
        // No length a message claims may allocate more than a message may
        // hold (apache_avro's default is 512 MiB per value, which a few
        // hostile messages on several partitions would turn into an out of
        // memory). Set before any decode: the first setting wins.
        apache_avro::util::max_allocation_bytes(MAX_MESSAGE_BYTES);
        let schema = apache_avro::Schema::parse_str(text)
            .map_err(|e| format!("schema id {id} is not a usable Avro schema: {e}"))?;
        let json: J = serde_json::from_str(text)
            .map_err(|e| format!("schema id {id} is not a usable Avro schema: {e}"))?;
        let names = Names::of(&json);
        let top = names.record_fields(&json);
        let row = top.map(|f| RowPlan::of(&names, f));
        let section = |name: &str| {
            let f = top?.iter().find(|f| f.get("name").and_then(J::as_str) == Some(name))?;
            names.record_fields(f.get("type")?).map(|fields| RowPlan::of(&names, fields))
        };
        let has_op = top.is_some_and(|f| f.iter().any(|f| f.get("name") == Some(&J::from("op"))));
        let envelope = has_op
            .then(|| Envelope { before: section("before"), after: section("after") })
            .filter(|e| e.before.is_some() || e.after.is_some());
        // A schema too deep or too large to compile is refused: without a
        // program no body of it could be checked before `apache_avro`,
        // which recurses and allocates as a body claims (docs/avro.md).
        let reader = apache_avro::GenericSingleObjectReader::new_with_header_builder(
            schema.clone(),
            Header(id),
        )
        .map_err(|e| format!("schema id {id} is not a usable Avro schema: {e}"))?;
        let direct = direct::Program::compile(&schema).ok_or_else(|| {
            format!(
                "schema id {id} is not a usable Avro schema: it nests types more than {} deep or \
                 holds more than {} types (or 64 MiB of names) once its named types are expanded",
                direct::MAX_DEPTH,
                direct::MAX_NODES
            )
        })?;
        Ok(WriterSchema { id, reader, row, envelope, direct })
    }

    /// A whole frame (header and body) decoded; bytes left over are an error.
    fn value(&self, frame: &[u8]) -> Result<A, String> {
        // Before `apache_avro` reads it: a body claiming more array items
        // than it holds would make it reserve room for all of them.
        let body = self::frame(frame).map_or(&[][..], |(_, body)| body);
        if let Some(why) = self.direct.refusal(body) {
            return Err(format!("not Avro of schema id {}: {why}", self.id));
        }
        let mut rest = frame;
        let v = self
            .reader
            .read_value(&mut rest)
            .map_err(|e| format!("not Avro of schema id {}: {e}", self.id))?;
        if !rest.is_empty() {
            return Err(format!(
                "not Avro of schema id {}: {} bytes left after the record",
                self.id,
                rest.len()
            ));
        }
        Ok(v)
    }
}

/// Where a decoder finds writer schemas by id: the registry's cache, whose
/// entries are a schema or why the id cannot be used (unknown to the
/// registry, not Avro).
pub trait Schemas {
    fn schema(&self, id: u32) -> Result<Arc<WriterSchema>, String>;
}

/// Decodes a framed Avro message (`format` names the envelope: Debezium
/// or flat) as the JSON decoder decodes its JSON twin. A decoder panic
/// costs the message (reason `internal`), never the process.
pub fn decode(
    format: Format,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    schemas: &dyn Schemas,
) -> Result<Decoded, Rejected> {
    decode_keeping(format, key, value, schemas, None)
}

/// [`decode`] keeping only the envelope fields in `keep` (and `op`), as
/// `decode::decode_keeping` does for JSON: a reader of one table skips
/// building values nobody reads.
pub fn decode_keeping(
    format: Format,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    schemas: &dyn Schemas,
    keep: Option<&[String]>,
) -> Result<Decoded, Rejected> {
    let Some(value) = value else { return Ok(Decoded::Tombstone) };
    if value.len() > MAX_MESSAGE_BYTES {
        return Err(Rejected::too_large(value.len()));
    }
    let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (id, _) = frame(value)?;
        let writer = schemas.schema(id)?;
        let v = writer.value(value)?;
        match format {
            Format::Json => flat(&writer, v),
            Format::Debezium => envelope(&writer, v, key, schemas, keep),
        }
    }));
    match attempt {
        Ok(d) => d.map_err(Rejected::malformed),
        Err(panic) => Err(Rejected::panicked(&panic)),
    }
}

/// A message's key and value, as they came.
#[derive(Debug, Clone, Copy, Default)]
pub struct Message<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// Most messages one run holds: a partition's task hands over at most this
/// many of the messages waiting in its queue at once.
pub const MAX_RUN: usize = 256;

/// Decodes messages in order, as [`decode_keeping`] decodes each: runs of
/// consecutive messages of one writer schema are read the direct way
/// (`direct`: several times cheaper per message), with what the run's
/// table keeps worked out once per run; messages that path gives up, and
/// schemas it does not read, are decoded one at a time.
pub fn decode_run(
    format: Format,
    messages: &[Message<'_>],
    schemas: &dyn Schemas,
    keep: Option<&[String]>,
) -> Vec<Result<Decoded, Rejected>> {
    let schema_of = |m: &Message<'_>| {
        let v = m.value.filter(|v| v.len() <= MAX_MESSAGE_BYTES)?;
        frame(v).ok().map(|(id, _)| id)
    };
    let mut out = Vec::with_capacity(messages.len());
    let mut rest = messages;
    while let Some(first) = rest.first() {
        let id = schema_of(first);
        let len = match id {
            Some(id) => rest.iter().take(MAX_RUN).take_while(|m| schema_of(m) == Some(id)).count(),
            None => 1,
        };
        let (run, after) = rest.split_at(len);
        rest = after;
        match id.and_then(|id| direct_run(format, id, run, schemas, keep)) {
            Some(decoded) => out.extend(decoded),
            None => out
                .extend(run.iter().map(|m| decode_keeping(format, m.key, m.value, schemas, keep))),
        }
    }
    out
}

/// A run of one schema's messages read the direct way, each message it
/// gives up the per-message way (None: the schema is not for that path).
fn direct_run(
    format: Format,
    id: u32,
    run: &[Message<'_>],
    schemas: &dyn Schemas,
    keep: Option<&[String]>,
) -> Option<Vec<Result<Decoded, Rejected>>> {
    let writer = schemas.schema(id).ok()?;
    let reader = direct::Run::new(&writer, format, keep)?;
    let one = |m: &Message<'_>| {
        let body = m.value.and_then(|v| frame(v).ok()).map(|(_, body)| body);
        let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            reader.decode(body?, m.key, schemas)
        }));
        match attempt {
            Ok(Some(decoded)) => Ok(decoded),
            _ => decode_keeping(format, m.key, m.value, schemas, keep),
        }
    };
    Some(run.iter().map(one).collect())
}

fn record(v: A) -> Option<Vec<(String, A)>> {
    match v {
        A::Record(fields) => Some(fields),
        A::Union(_, inner) => record(*inner),
        _ => None,
    }
}

/// `format: avro`: the record is the row; every field declares its column.
fn flat(writer: &WriterSchema, v: A) -> Result<Decoded, String> {
    let (Some(plan), Some(fields)) = (&writer.row, record(v)) else {
        return Err(format!("schema id {} is not a record", writer.id));
    };
    Ok(Decoded::Row { data: plan.row(fields), env: vec![], declared: plan.declared.clone() })
}

/// `format: debezium-avro`: `after` (or `before` for deletes) is the row,
/// the other fields flattened one level (`source.lsn`) are the envelope.
fn envelope(
    writer: &WriterSchema,
    v: A,
    key: Option<&[u8]>,
    schemas: &dyn Schemas,
    keep: Option<&[String]>,
) -> Result<Decoded, String> {
    let (Some(plans), Some(top)) = (&writer.envelope, record(v)) else {
        return Err(format!(
            "schema id {} is not a Debezium envelope (a record with op, before and after)",
            writer.id
        ));
    };
    let (mut before, mut after, mut env) = (None, None, Vec::with_capacity(24));
    for (name, v) in top {
        match name.as_str() {
            "before" => before = Some(v),
            "after" => after = Some(v),
            _ => flatten(name, v, &mut env, keep),
        }
    }
    let op = match env.iter().find(|(n, _)| **n == *"op") {
        Some((_, Value::Str(op))) => op.clone(),
        _ => return Err("not a Debezium envelope: no `op` field".into()),
    };
    let (section, plan, is_delete) = match Op::parse(&op) {
        Some(Op::Upsert) => (after, &plans.after, false),
        Some(Op::Delete) => (before, &plans.before, true),
        Some(Op::Truncate) => return Ok(Decoded::Truncate),
        Some(Op::Message) => return Ok(Decoded::Tombstone),
        None => return Err(format!("unknown Debezium op `{op}`")),
    };
    let name = if is_delete { "before" } else { "after" };
    let (mut data, mut declared) = match (section.and_then(record), plan) {
        (Some(fields), Some(plan)) => (plan.row(fields), plan.declared.clone()),
        (None, _) if is_delete => (Fields::default(), DeclaredTypes::default()),
        _ => return Err(format!("Debezium `{op}` event without `{name}`")),
    };
    if is_delete {
        key_fallback(&mut data, &mut declared, key, schemas);
    }
    Ok(Decoded::Row { data, env, declared })
}

/// An envelope field: records (`source`, `transaction`) one level deep;
/// only the paths in `keep` (all without it; `op` always).
fn flatten(name: String, v: A, env: &mut Env, keep: Option<&[String]>) {
    let v = match v {
        A::Union(_, inner) => *inner,
        v => v,
    };
    match v {
        A::Record(fields) => {
            for (k, fv) in fields {
                // Compared without building the path: this runs per field per message.
                let wanted = keep.is_none_or(|keep| {
                    keep.iter().any(|p| {
                        p.len() == name.len() + 1 + k.len()
                            && p.starts_with(name.as_str())
                            && p.as_bytes()[name.len()] == b'.'
                            && p.ends_with(k.as_str())
                    })
                });
                if wanted {
                    env.push((env_name(Some(&name), &k), cells::plain(fv)));
                }
            }
        }
        v if name == "op" || keep.is_none_or(|keep| keep.contains(&name)) => {
            env.push((env_name(None, &name), cells::plain(v)))
        }
        _ => {}
    }
}

/// Deletes may carry only the key: an Avro message key supplies the
/// business key (and its declared types), as the JSON key does.
fn key_fallback(
    data: &mut Fields,
    declared: &mut DeclaredTypes,
    key: Option<&[u8]>,
    schemas: &dyn Schemas,
) {
    let Some((key, (id, _))) = key.and_then(|k| Some((k, frame(k).ok()?))) else { return };
    let Ok(writer) = schemas.schema(id) else { return };
    let (Some(plan), Ok(Some(fields))) = (&writer.row, writer.value(key).map(record)) else {
        return;
    };
    // A key wider than a row may be is not used (as for JSON keys).
    if fields.len() > crate::decode::MAX_FIELDS {
        return;
    }
    for ((name, v), f) in fields.into_iter().zip(&plan.fields) {
        let have = data.iter().any(|(n, v)| **n == *name && !v.is_null());
        if !have {
            data.remove(&name);
            data.push(&name, cells::cell(v, f.conv));
            if !declared.iter().any(|(n, _)| *n == name) {
                let mut more = declared.to_vec();
                more.push((name, f.declared.clone()));
                *declared = more.into();
            }
        }
    }
}

#[cfg(test)]
mod direct_tests;
#[cfg(test)]
mod tests;
