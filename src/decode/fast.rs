//! The hot path: envelopes without the schema wrapper (the common JSON
//! converter setting) and flat rows, read straight into cells from
//! simd-json's tape — no intermediate `serde_json::Value` tree per
//! message. Anything unusual (invalid JSON, a row that is not an object)
//! returns None and takes the general path, which also produces the error
//! messages. `decode_split` runs either reader: the direct one
//! (`direct`) first, then this tape for what it gives up on.
//!
//! Why the tape and not serde visitors over it: the tape is a flat list of
//! nodes (an object's node says how many follow), so a message is read by
//! one loop over it, and a skipped value is one index step. The visitors
//! went through a call per key and per value; reading the tape decoded a
//! 100,000-line Debezium file at 1.24M-1.28M lines per CPU second against
//! 1.16M-1.19M, and a `before` image that `op` (after it) says to keep
//! needs no second parse.
//!
//! Its own module because it is most of the decoder's code; the tests
//! check it against the general path.

use simd_json::{Node, StaticNode};

use super::envelope::key_fallback;
use super::fields::{is_dotted, RowNames};
use super::wrapped::Record;
use super::{env_name, store_envelope, DeclaredTypes, Decoded, Env, Fields, Message, Op};
use crate::config::Format;
use crate::value::Value;

/// How many nodes the value starting at `nodes[0]` takes.
fn size(nodes: &[Node<'_>]) -> usize {
    match nodes.first() {
        Some(Node::Object { count, .. } | Node::Array { count, .. }) => count + 1,
        _ => 1,
    }
}

/// One JSON value as a cell, as `json_cell` maps it (nested values become
/// JSON text); None for what simd-json reads differently from serde_json
/// (see [`static_cell`]): the general path decodes the message.
fn cell(nodes: &[Node<'_>]) -> Option<Value> {
    Some(match nodes.first() {
        Some(Node::String(s)) => Value::Str((*s).into()),
        Some(Node::Static(s)) => static_cell(*s)?,
        Some(Node::Object { .. } | Node::Array { .. }) => super::json_cell(&json(nodes)?),
        None => Value::Null,
    })
}

/// [`cell`] pushed onto a row's values. Text and scalars (with
/// [`static_cell`] inlined) are written straight into the vector: a cell
/// returned through the stack was written in parts and read back whole,
/// and that read waited on the writes (a twentieth of the Debezium decode).
#[inline(always)]
fn push_cell(nodes: &[Node<'_>], out: &mut Vec<Value>) -> Option<()> {
    match nodes.first() {
        Some(Node::String(s)) => out.push(Value::Str((*s).into())),
        Some(Node::Static(s)) => out.push(static_cell(*s)?),
        _ => out.push(cell(nodes)?),
    }
    Some(())
}

/// A scalar as a cell; None for `-0`. simd-json reads every integer
/// without a minus as `U64` and `-0` as the integer `I64(0)`, where
/// serde_json (the general path, the reference) reads the float -0.0: an
/// `I64(0)` on the tape is that text and nothing else. Checked here, on
/// the values a row keeps, rather than by a byte scan for minus signs
/// before parsing, which stopped at every date (`2026-03-01`).
#[inline(always)]
fn static_cell(s: StaticNode) -> Option<Value> {
    Some(match s {
        StaticNode::I64(0) => return None,
        StaticNode::I64(v) => Value::Int(v),
        StaticNode::U64(v) => i64::try_from(v).map(Value::Int).unwrap_or(Value::Float(v as f64)),
        StaticNode::F64(v) => Value::Float(v),
        StaticNode::Bool(v) => Value::Bool(v),
        StaticNode::Null => Value::Null,
    })
}

/// The value starting at `nodes[0]` as a `serde_json` value (nested cells
/// only, which `json_cell` maps as the general path does); None where
/// [`static_cell`] says so.
fn json(nodes: &[Node<'_>]) -> Option<serde_json::Value> {
    use serde_json::Value as J;
    Some(match nodes.first() {
        Some(Node::String(s)) => J::String((*s).to_string()),
        // `-0`, as `static_cell` refuses it.
        Some(Node::Static(StaticNode::I64(0))) => return None,
        Some(Node::Static(StaticNode::I64(v))) => J::from(*v),
        Some(Node::Static(StaticNode::U64(v))) => J::from(*v),
        Some(Node::Static(StaticNode::F64(v))) => J::from(*v),
        Some(Node::Static(StaticNode::Bool(v))) => J::Bool(*v),
        Some(Node::Static(StaticNode::Null)) | None => J::Null,
        Some(Node::Array { len, .. }) => {
            let mut at = 1;
            let mut items = Vec::with_capacity(*len);
            for _ in 0..*len {
                items.push(json(&nodes[at..])?);
                at += size(&nodes[at..]);
            }
            J::Array(items)
        }
        Some(Node::Object { len, .. }) => {
            let mut at = 1;
            let mut map = serde_json::Map::new();
            for _ in 0..*len {
                let Some(Node::String(k)) = nodes.get(at) else { break };
                map.insert((*k).to_string(), json(&nodes[at + 1..])?);
                at += 1 + size(&nodes[at + 1..]);
            }
            J::Object(map)
        }
    })
}

/// The fields of an object, as (key, value's nodes), in document order.
fn fields<'t, 'i>(nodes: &'t [Node<'i>]) -> impl Iterator<Item = (&'i str, &'t [Node<'i>])> + 't {
    let len = match nodes.first() {
        Some(Node::Object { len, .. }) => *len,
        _ => 0,
    };
    let mut at = 1;
    (0..len).map_while(move |_| {
        let Some(Node::String(k)) = nodes.get(at) else { return None };
        let value = &nodes[at + 1..];
        at += 1 + size(value);
        Some((*k, value))
    })
}

/// A row: a JSON object's fields as cells, in document order, with room
/// for `spare` more (the envelope columns a table stores beside the
/// fields, which `store_envelope` adds); Some(None) for JSON null (a
/// missing `before` image), None for anything else (the general path
/// reports it).
fn row(nodes: &[Node<'_>], spare: usize) -> Option<Option<Fields>> {
    let len = match nodes.first()? {
        Node::Object { len, .. } => *len,
        Node::Static(StaticNode::Null) => return Some(None),
        _ => return None,
    };
    let mut values: Vec<Value> = Vec::with_capacity(len + spare);
    let mut names = RowNames::start();
    for (k, v) in fields(nodes) {
        names.push(k);
        push_cell(v, &mut values)?;
    }
    Some(Some(Fields::new(names.finish(), values)))
}

/// Is `prefix.k` one of `paths`?
pub(super) fn listed(paths: &[String], prefix: &str, k: &str) -> bool {
    paths.iter().any(|p| is_dotted(p, prefix, k))
}

/// Envelope field `name` into `out`: an object is flattened one level
/// (`source.lsn`), with `Some(paths)` in `keep` only its fields listed
/// there. None where [`cell`] says so.
fn env_field(name: &str, value: &[Node<'_>], keep: Option<&[String]>, out: &mut Env) -> Option<()> {
    match value.first() {
        Some(Node::Object { .. }) => {
            for (k, v) in fields(value) {
                if keep.is_none_or(|p| listed(p, name, k)) {
                    out.push((env_name(Some(name), k), cell(v)?));
                }
            }
        }
        _ => out.push((env_name(None, name), cell(value)?)),
    }
    Some(())
}

/// What a reader takes from an envelope before `op` says which image is
/// the row.
#[derive(Default)]
pub(super) struct Envelope {
    pub before: Option<Fields>,
    pub after: Option<Fields>,
    pub env: Env,
    /// `schema`/`payload` wrapper present: the general path handles it.
    pub wrapped: bool,
}

/// Is envelope field `key` skipped? Only with `Some(paths)` in `keep`, and
/// never `op`: a field no path names, itself or as the record of a dotted
/// path (`source` for `source.lsn`).
pub(super) fn skipped(keep: Option<&[String]>, key: &str) -> bool {
    key != "op"
        && keep.is_some_and(|p| {
            !p.iter().any(|p| {
                p.as_str() == key
                    || (p.starts_with(key) && p.as_bytes().get(key.len()) == Some(&b'.'))
            })
        })
}

impl Envelope {
    pub(super) fn op(&self) -> Option<&str> {
        self.env.iter().find_map(|(n, v)| match v {
            Value::Str(op) if **n == *"op" => Some(op.as_str()),
            _ => None,
        })
    }
}

/// An envelope; with `Some(paths)` in `keep` only those envelope fields
/// (and `op`) are kept, the others are skipped without building values.
/// Only a delete stores its `before` image: an update from a table with
/// full replica identity carries one as large as its `after`, and
/// building cells nobody reads doubled its decode. `spare`: the row
/// image's room for stored envelope columns.
fn envelope(nodes: &[Node<'_>], keep: Option<&[String]>, spare: usize) -> Option<Envelope> {
    let Some(Node::Object { .. }) = nodes.first() else { return None };
    // Room for the fields kept (the table's paths, `op` among them): one
    // allocation, of the size they take (a row's list is freed only after
    // its batch commits, so room left over is memory held per row).
    let env = Vec::with_capacity(keep.map_or(8, <[String]>::len));
    let mut e = Envelope { env, ..Envelope::default() };
    // The last `before` image, read once `op` is known (it comes first).
    let mut before = None;
    for (k, v) in fields(nodes) {
        match k {
            "before" => before = Some(v),
            "after" => e.after = row(v, spare)?,
            "schema" | "payload" => e.wrapped = true,
            _ if skipped(keep, k) => {}
            _ => env_field(k, v, keep.filter(|_| k != "op"), &mut e.env)?,
        }
    }
    if let (Some(b), Some("d")) = (before, e.op()) {
        e.before = row(b, spare)?;
    }
    Some(e)
}

/// A thread's simd-json state, reused from message to message: the copy
/// of the input (simd-json parses in place), the parser's buffers and the
/// tape's vector, kept empty between messages (`Tape::reset`).
struct Parser {
    input: Vec<u8>,
    buffers: simd_json::Buffers,
    tape: simd_json::Tape<'static>,
}

/// Parses `value` with simd-json (SIMD structural scan into a tape of
/// nodes) and runs `read` on the tape: about a third faster than
/// serde_json on CRM envelopes. The input is copied into a per-thread
/// buffer and the parser's buffers and tape are reused across messages
/// (a tape per message was an allocation and a free each; the wrapped
/// decode loop ran a few percent faster without them). `value` passed
/// [`scan`](super::scan::scan), and [`cell`] refuses `-0`: nothing
/// `read` keeps reads differently from serde_json. Anything it refuses
/// takes the general path, which decides and reports.
fn with_tape<R>(value: &[u8], read: impl FnOnce(&[Node<'_>]) -> Option<R>) -> Option<R> {
    thread_local!(static PARSER: std::cell::RefCell<Parser> = std::cell::RefCell::new(Parser {
        input: Vec::new(),
        buffers: simd_json::Buffers::new(1024),
        tape: simd_json::Tape(Vec::new()),
    }));
    PARSER.with_borrow_mut(|Parser { input, buffers, tape }| {
        input.clear();
        input.extend_from_slice(value);
        let mut filled = std::mem::replace(tape, simd_json::Tape(Vec::new())).reset();
        let read = match simd_json::fill_tape(input, buffers, &mut filled) {
            Ok(()) => read(&filled.0),
            Err(_) => None,
        };
        *tape = filled.reset();
        read
    })
}

/// A flat JSON object's fields as cells, in document order, parsed with
/// simd-json; None for anything else (not an object, invalid JSON), which
/// the caller's general path reports. `value` passed [`scan`](super::scan::scan).
pub(super) fn object_fields(value: &[u8]) -> Option<Fields> {
    with_tape(value, |nodes| row(nodes, 0)?)
}

/// Which reader parses a message on the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reader {
    /// [`direct`](super::direct), tried first: it checks what the scans
    /// look for as it reads (nesting beyond `max_depth` levels, NUL, lone
    /// surrogates) and gives up on those and on anything unusual.
    Direct { max_depth: usize },
    /// simd-json's tape, for a message that passed the scans.
    Tape,
}

/// Decodes a message on the fast path, as production does (the direct
/// reader, then the tape); None: the general path decides. A message with
/// the JSON converter's schema wrapper is split from its schema and typed
/// by it ([`wrapped`](super::wrapped)).
#[cfg(test)]
pub fn decode(
    format: Format,
    key: Option<&[u8]>,
    value: &[u8],
    store_paths: &[String],
    keep: Option<&[String]>,
) -> Option<Result<Decoded, String>> {
    let direct = Reader::Direct { max_depth: super::MAX_DEPTH };
    decode_with(direct, format, key, value, store_paths, keep)
        .or_else(|| decode_with(Reader::Tape, format, key, value, store_paths, keep))
}

/// [`decode`] by one reader only.
#[cfg(test)]
pub fn decode_with(
    reader: Reader,
    format: Format,
    key: Option<&[u8]>,
    value: &[u8],
    store_paths: &[String],
    keep: Option<&[String]>,
) -> Option<Result<Decoded, String>> {
    let split = super::wrapped::split(value);
    let parsed = split.as_ref().map_or(value, |s| s.payload);
    let simd_differs = super::scan::scan(parsed).simd_differs;
    let message = Message { value, split, simd_differs };
    decode_split(reader, format, key, &message, store_paths, keep)
}

/// [`decode`] of a message whose schema wrapper, if any, is already split
/// off; without one, the value is parsed whole. The tape reader takes a
/// message only once it passed the scans.
pub(super) fn decode_split(
    reader: Reader,
    format: Format,
    key: Option<&[u8]>,
    Message { value, split, simd_differs }: &Message<'_>,
    store_paths: &[String],
    keep: Option<&[String]>,
) -> Option<Result<Decoded, String>> {
    if reader == Reader::Tape && *simd_differs {
        return None;
    }
    let spare = store_paths.len();
    let (schema, value) = match split {
        Some(s) => (Some(&s.schema), s.payload),
        None => (None, *value),
    };
    let row = || match reader {
        Reader::Direct { max_depth } => super::direct::object_fields(value, max_depth),
        Reader::Tape => object_fields(value),
    };
    let envelope = || match reader {
        Reader::Direct { max_depth } => super::direct::envelope(value, max_depth, keep, spare),
        Reader::Tape => with_tape(value, |nodes| envelope(nodes, keep, spare)),
    };
    let typed = |record: Record, data: Fields| match &schema {
        Some(s) => Some((s.type_row(record, data)?, s.declared(record))),
        None => Some((data, DeclaredTypes::default())),
    };
    match format {
        Format::Json => {
            let data = row()?;
            if data.len() == 2 && data.names().iter().all(|n| &**n == "schema" || &**n == "payload")
            {
                return None; // the schema wrapper in another shape: the general path types it
            }
            let (data, declared) = typed(Record::Row, data)?;
            Some(Ok(Decoded::Row { data, env: vec![], declared }))
        }
        Format::Debezium => {
            let e = envelope()?;
            if e.wrapped {
                return None;
            }
            let (section, record) = match Op::parse(e.op()?)? {
                Op::Upsert => (e.after, Record::After),
                Op::Delete => (e.before, Record::Before),
                Op::Truncate => return Some(Ok(Decoded::Truncate)),
                Op::Message => return Some(Ok(Decoded::Tombstone)),
            };
            let is_delete = record == Record::Before;
            let data = match section {
                Some(d) => d,
                None if is_delete => Fields::default(),
                None => return None,
            };
            let (mut data, mut declared) = typed(record, data)?;
            if is_delete {
                // The message key's schema declares its columns too, those
                // the row's schema does not; the shared list is copied
                // only then.
                let mut from_key = vec![];
                key_fallback(&mut data, &mut from_key, key);
                from_key.retain(|(n, _)| !declared.iter().any(|(m, _)| m == n));
                if !from_key.is_empty() {
                    declared = declared.iter().cloned().chain(from_key).collect();
                }
            }
            store_envelope(&mut data, &e.env, store_paths);
            Some(Ok(Decoded::Row { data, env: e.env, declared }))
        }
    }
}
