//! The hot path: envelopes without the schema wrapper (the common JSON
//! converter setting) and flat rows, deserialised straight into cells — no
//! intermediate `serde_json::Value` tree per message. Anything unusual
//! (schema wrapper, invalid JSON) returns None and takes the general path,
//! which also produces the error messages.
//!
//! Its own module because it is most of the decoder's code and all of its
//! serde visitor machinery; the tests check it against the general path.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::envelope::key_fallback;
use super::wrapped::Record;
use super::{
    env_name, store_envelope, DeclaredTypes, Decoded, Env, Fields, Layout, Message, Name, Op,
};
use crate::config::Format;
use crate::value::Value;

/// One JSON value as a cell, as `json_cell` maps it (nested values become JSON text).
struct Cell(Value);

impl<'de> Deserialize<'de> for Cell {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CellVisitor)
    }
}

struct CellVisitor;

impl<'de> Visitor<'de> for CellVisitor {
    type Value = Cell;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Cell, E> {
        Ok(Cell(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Cell, E> {
        Ok(Cell(Value::Int(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Cell, E> {
        Ok(Cell(i64::try_from(v).map(Value::Int).unwrap_or(Value::Float(v as f64))))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Cell, E> {
        Ok(Cell(Value::Float(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Cell, E> {
        Ok(Cell(Value::Str(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Cell, E> {
        Ok(Cell(Value::Str(v)))
    }
    fn visit_unit<E>(self) -> Result<Cell, E> {
        Ok(Cell(Value::Null))
    }
    fn visit_none<E>(self) -> Result<Cell, E> {
        Ok(Cell(Value::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Cell, D::Error> {
        Cell::deserialize(d)
    }
    fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Cell, A::Error> {
        let v = serde_json::Value::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
        Ok(Cell(super::json_cell(&v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<Cell, A::Error> {
        let v = serde_json::Value::deserialize(serde::de::value::SeqAccessDeserializer::new(s))?;
        Ok(Cell(Value::Str(v.to_string())))
    }
}

/// An object key, borrowed from the input when the parser can (simd-json
/// always can): keys of skipped fields and of the envelope cost no allocation.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = std::borrow::Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = std::borrow::Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v))
    }
}

/// A row: a JSON object's fields as cells, in document order; None for
/// JSON null (a missing `before` image).
#[derive(Clone, Copy)]
struct RowObject {
    /// Room for this many more cells: the envelope columns a table stores
    /// beside the fields (`store_envelope` adds them), with no reallocation.
    spare: usize,
}

impl<'de> DeserializeSeed<'de> for RowObject {
    type Value = Option<Fields>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

thread_local! {
    /// The layout of the last row this thread decoded: the next row of the
    /// same schema shares it (see `decode::Fields`).
    static ROW_LAYOUT: std::cell::RefCell<Option<Layout>> = const { std::cell::RefCell::new(None) };
}

impl<'de> Visitor<'de> for RowObject {
    type Value = Option<Fields>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object or null")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut values: Vec<Value> = Vec::with_capacity(m.size_hint().unwrap_or(24) + self.spare);
        // Taken out while the fields are read, so nothing can hold it twice.
        let cached = ROW_LAYOUT.take();
        let known: &[Name] = cached.as_deref().unwrap_or(&[]);
        // The names, once they differ from the cached layout's.
        let mut names: Option<Vec<Name>> = None;
        while let Some(k) = m.next_key_seed(KeySeed)? {
            let v: Cell = m.next_value()?;
            match &mut names {
                None if known.get(values.len()).is_some_and(|n| **n == *k) => {}
                None => {
                    let mut n = known[..values.len()].to_vec();
                    n.push(Name::from(k.as_ref()));
                    names = Some(n);
                }
                Some(n) => n.push(Name::from(k.as_ref())),
            }
            values.push(v.0);
        }
        let layout: Layout = match names {
            Some(n) => n.into(),
            None if known.len() == values.len() => match cached {
                Some(c) => c,
                None => Layout::from([]),
            },
            None => known[..values.len()].into(),
        };
        ROW_LAYOUT.set(Some(layout.clone()));
        Ok(Some(Fields::new(layout, values)))
    }
    // Any other JSON type: not an object (the general path reports it).
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(serde::de::Error::custom("not an object"))
    }
}

/// Is `prefix.k` one of `paths`?
fn listed(paths: &[String], prefix: &str, k: &str) -> bool {
    paths.iter().any(|p| {
        p.len() == prefix.len() + 1 + k.len()
            && p.starts_with(prefix)
            && p.as_bytes()[prefix.len()] == b'.'
            && p.ends_with(k)
    })
}

/// A top-level envelope field: an object is flattened one level
/// (`source.lsn`). Its values go straight into the envelope's list (no
/// list per field).
struct EnvField<'n, 'k, 'o> {
    name: &'n str,
    keep: Option<&'k [String]>,
    out: &'o mut Env,
}

impl<'de> DeserializeSeed<'de> for EnvField<'_, '_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl EnvField<'_, '_, '_> {
    fn one(self, v: Value) {
        self.out.push((env_name("", self.name), v));
    }
}

impl<'de> Visitor<'de> for EnvField<'_, '_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        // An object is flattened one level (`source.lsn`); with `Some(paths)`
        // only the fields listed there are kept.
        while let Some(k) = m.next_key_seed(KeySeed)? {
            if self.keep.is_some_and(|p| !listed(p, self.name, &k)) {
                m.next_value::<IgnoredAny>()?;
                continue;
            }
            let v: Cell = m.next_value()?;
            self.out.push((env_name(self.name, &k), v.0));
        }
        Ok(())
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.one(Value::Bool(v));
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.one(Value::Int(v));
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.one(i64::try_from(v).map(Value::Int).unwrap_or(Value::Float(v as f64)));
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.one(Value::Float(v));
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.one(Value::Str(v.to_string()));
        Ok(())
    }
    fn visit_string<E>(self, v: String) -> Result<(), E> {
        self.one(Value::Str(v));
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.one(Value::Null);
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        self.one(Value::Null);
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<(), A::Error> {
        let cell = CellVisitor.visit_seq(s)?.0;
        self.one(cell);
        Ok(())
    }
}

#[derive(Default)]
struct Envelope {
    before: Option<Fields>,
    after: Option<Fields>,
    env: Env,
    /// `schema`/`payload` wrapper present: the general path handles it.
    wrapped: bool,
    /// A `before` image was skipped unread because `op` had not been seen
    /// yet ([`Before::IfDelete`]).
    before_skipped: bool,
}

impl Envelope {
    fn op(&self) -> Option<&str> {
        self.env.iter().find_map(|(n, v)| match v {
            Value::Str(op) if **n == *"op" => Some(op.as_str()),
            _ => None,
        })
    }
}

/// Whether to build the `before` image's cells. Only a delete stores it; an
/// update from a table with full replica identity carries a `before` as
/// large as its `after`, and building cells nobody reads doubled its decode.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Before {
    /// Build it when `op` (seen earlier in the message) says delete; skip
    /// it when `op` comes after it (Debezium's order: before, after,
    /// source, op), so a delete is parsed a second time with [`Before::Keep`].
    IfDelete,
    Keep,
}

/// An envelope; with `Some(paths)` in `keep` only those envelope fields
/// (and `op`) are kept, the others are skipped without building values.
#[derive(Clone, Copy)]
struct EnvelopeSeed<'k> {
    keep: Option<&'k [String]>,
    before: Before,
    /// The row image's room for stored envelope columns.
    row: RowObject,
}

impl<'de> DeserializeSeed<'de> for EnvelopeSeed<'_> {
    type Value = Envelope;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Envelope, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EnvelopeSeed<'_> {
    type Value = Envelope;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Debezium envelope")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Envelope, A::Error> {
        // Room for the fields kept (`op` and the table's paths): one allocation.
        let env = Vec::with_capacity(self.keep.map_or(8, <[String]>::len) + 1);
        let mut e = Envelope { env, ..Envelope::default() };
        while let Some(k) = m.next_key_seed(KeySeed)? {
            match k.as_ref() {
                "before" if self.before == Before::Keep || e.op() == Some("d") => {
                    e.before = m.next_value_seed(self.row)?
                }
                "before" => {
                    // Parsed (so invalid JSON is still refused), not built.
                    e.before_skipped = m.next_value::<Option<IgnoredAny>>()?.is_some();
                }
                "after" => e.after = m.next_value_seed(self.row)?,
                "schema" | "payload" => {
                    e.wrapped = true;
                    m.next_value::<IgnoredAny>()?;
                }
                _ if k.as_ref() != "op"
                    && self.keep.is_some_and(|p| {
                        !p.iter().any(|p| {
                            p.as_str() == k.as_ref()
                                || (p.starts_with(k.as_ref())
                                    && p.as_bytes().get(k.len()) == Some(&b'.'))
                        })
                    }) =>
                {
                    m.next_value::<IgnoredAny>()?;
                }
                _ => {
                    let keep = self.keep.filter(|_| k.as_ref() != "op");
                    m.next_value_seed(EnvField { name: &k, keep, out: &mut e.env })?;
                }
            }
        }
        Ok(e)
    }
}

/// Parses an envelope with simd-json (SIMD structural scan, then the same
/// visitors): about a third faster than serde_json on CRM envelopes. The
/// input is copied into a per-thread buffer (simd-json parses in place)
/// and the parser's buffers are reused across messages. Anything it
/// refuses takes the general path, which decides and reports.
fn simd_envelope(value: &[u8], seed: EnvelopeSeed<'_>) -> Option<Envelope> {
    with_simd(value, |de| seed.deserialize(de).ok())
}

/// Runs `parse` on a simd-json deserializer over a per-thread copy of
/// `value`, which [`scan`](super::scan::scan) found free of what simd-json
/// reads differently from serde_json.
fn with_simd<R>(
    value: &[u8],
    parse: impl FnOnce(&mut simd_json::Deserializer<'_>) -> Option<R>,
) -> Option<R> {
    thread_local!(static BUF: std::cell::RefCell<(Vec<u8>, simd_json::Buffers)> = std::cell::RefCell::new((Vec::new(), simd_json::Buffers::new(1024))));
    BUF.with_borrow_mut(|(input, buffers)| {
        input.clear();
        input.extend_from_slice(value);
        let mut de = simd_json::Deserializer::from_slice_with_buffers(input, buffers).ok()?;
        parse(&mut de)
    })
}

/// A flat JSON object's fields as cells, in document order, parsed with
/// simd-json; None for anything else (not an object, invalid JSON), which
/// the caller's general path reports. `value` passed [`scan`](super::scan::scan).
pub(super) fn object_fields(value: &[u8]) -> Option<Fields> {
    with_simd(value, |de| RowObject { spare: 0 }.deserialize(de).ok().flatten())
}

/// Decodes a message on the fast path; None: the general path decides.
/// A message with the JSON converter's schema wrapper is split from its
/// schema and typed by it ([`wrapped`](super::wrapped)).
#[cfg(test)]
pub fn decode(
    format: Format,
    key: Option<&[u8]>,
    value: &[u8],
    store_paths: &[String],
    keep: Option<&[String]>,
) -> Option<Result<Decoded, String>> {
    let split = super::wrapped::split(value);
    let parsed = split.as_ref().map_or(value, |s| s.payload);
    let simd_differs = super::scan::scan(parsed).simd_differs;
    decode_split(format, key, Message { value, split, simd_differs }, store_paths, keep)
}

/// [`decode`] of a message whose schema wrapper, if any, is already split
/// off; without one, the value is parsed whole.
pub fn decode_split(
    format: Format,
    key: Option<&[u8]>,
    Message { value, split, simd_differs }: Message<'_>,
    store_paths: &[String],
    keep: Option<&[String]>,
) -> Option<Result<Decoded, String>> {
    if simd_differs {
        return None;
    }
    let (schema, value) = match split {
        Some(s) => (Some(s.schema), s.payload),
        None => (None, value),
    };
    let typed = |record: Record, data: Fields| match &schema {
        Some(s) => Some((s.type_row(record, data)?, s.declared(record))),
        None => Some((data, DeclaredTypes::default())),
    };
    match format {
        Format::Json => {
            let data = object_fields(value)?;
            if data.len() == 2 && data.names().iter().all(|n| &**n == "schema" || &**n == "payload")
            {
                return None; // the schema wrapper in another shape: the general path types it
            }
            let (data, declared) = typed(Record::Row, data)?;
            Some(Ok(Decoded::Row { data, env: vec![], declared }))
        }
        Format::Debezium => {
            let row = RowObject { spare: store_paths.len() };
            let seed = EnvelopeSeed { keep, before: Before::IfDelete, row };
            let mut e = simd_envelope(value, seed)?;
            if e.wrapped {
                return None;
            }
            if e.before_skipped && e.op() == Some("d") {
                e = simd_envelope(value, EnvelopeSeed { before: Before::Keep, ..seed })?;
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
