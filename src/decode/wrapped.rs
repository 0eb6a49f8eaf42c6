//! The JSON converter's schema wrapper (`{"schema": S, "payload": P}`,
//! `schemas.enable=true`) on the fast path.
//!
//! Why: the schema is most of such a message (the bench's narrow
//! envelope: 1.3 KB of schema, 0.4 KB of payload) and it is the same text in every
//! message of a table until the table changes. Parsing it per message, as
//! the general path does, held the wrapped decode to ~65,000 events/s per
//! core. Here a message whose schema bytes equal a recently seen schema's
//! is split by comparing bytes, the schema's typing rules are compiled
//! once, and only the payload is parsed, by the same fast visitors as an
//! unwrapped envelope. Each cell is then typed as `schema::typed` types it
//! (docs/types.md); wherever the cell alone cannot tell what the JSON
//! value was (a number in a text column: `7` or `7.0`?), the message
//! takes the general path, which stays the reference.
//!
//! The rows of one schema also share one list of declared types, so the
//! batch compares declarations by pointer.

use compact_str::ToCompactString;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use base64::Engine;
use rustc_hash::FxHashMap;
use serde_json::Value as J;

use super::schema::{declaration, declared, parameter, section_fields, Logical};
use super::{scan, Declared, DeclaredTypes, Fields, Layout};
use crate::value::{DType, Value};

/// JSON's whitespace before `v`'s first token (the converter writes none;
/// a message written by hand or by another tool may).
fn token(v: &[u8]) -> &[u8] {
    let at = v.iter().position(|b| !is_space(*b));
    &v[at.unwrap_or(v.len())..]
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// `v` after the tokens `{"schema":`, or None.
fn schema_start(v: &[u8]) -> Option<&[u8]> {
    let v = token(v).strip_prefix(b"{")?;
    let v = token(v).strip_prefix(b"\"schema\"")?;
    Some(token(token(v).strip_prefix(b":")?))
}

/// The payload's bytes in `v`, the message after its schema
/// (`,"payload":P}`), or None.
fn payload_of(v: &[u8]) -> Option<&[u8]> {
    let v = token(v).strip_prefix(b",")?;
    let v = token(v).strip_prefix(b"\"payload\"")?;
    let p = token(token(v).strip_prefix(b":")?);
    let end = p.iter().rposition(|b| !is_space(*b))?;
    let p = p[..=end].strip_suffix(b"}")?;
    // A payload that is itself wrapped is the general path's to judge.
    schema_start(p).is_none().then_some(p)
}
/// Distinct schemas remembered per thread (a topic's schema changes
/// rarely; a file or a fetch may hold a few versions side by side).
const CACHED: usize = 4;

/// What a field's declared type makes of a value its logical name did not
/// type. Other declared types (integer and boolean included) keep the value
/// as parsed: a value of another kind is kept as sent, for the batch to
/// dead-letter.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fallback {
    /// An integer becomes a float.
    Float,
    /// Base64 text becomes bytes.
    Binary,
    /// An integer or a boolean becomes its JSON text.
    Str,
    Keep,
}

/// One field's typing, compiled from its schema.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    /// No field schema (a payload field the schema does not list): kept as parsed.
    Untyped,
    /// A type no Delta column holds: its declaration dead-letters the row
    /// unless `columns:` declares the column. A decimal beyond 38 digits
    /// becomes its exact text (a `string` column stores it, a decimal one
    /// refuses it), any other value NULL.
    Unstorable { decimal_scale: Option<i32> },
    /// By the logical type, if any (with a decimal's scale), then by the
    /// declared type.
    Typed { logical: Option<Logical>, scale: i32, fallback: Fallback },
}

/// Marker: the cell cannot be typed from its parsed value alone.
struct General;

impl Rule {
    fn of(s: &J) -> Rule {
        let logical = Logical::of(s.get("name").and_then(J::as_str).unwrap_or(""));
        let scale = parameter(s, "scale").unwrap_or(0) as i32;
        if declared(s).is_err() {
            let decimal_scale = (logical == Some(Logical::Decimal)).then_some(scale);
            return Rule::Unstorable { decimal_scale };
        }
        let fallback = match declaration(s) {
            Declared::Exact(DType::Float) => Fallback::Float,
            Declared::Exact(DType::Binary) => Fallback::Binary,
            Declared::Exact(DType::Str) => Fallback::Str,
            _ => Fallback::Keep,
        };
        Rule::Typed { logical, scale, fallback }
    }

    /// Makes `v` the cell `schema::typed` makes of the JSON value it was
    /// parsed from. A cell holds a JSON value's kind (NULL, boolean,
    /// integer, float, text; nested values as their JSON text, which no
    /// logical type reads) except where noted. Typed in place: most cells
    /// stay as parsed, and moving each 32-byte cell out and back in cost
    /// a tenth of the wrapped decode (partial stores the next load waited on).
    fn apply(self, v: &mut Value) -> Result<(), General> {
        let (logical, scale, fallback) = match self {
            Rule::Untyped => return Ok(()),
            Rule::Unstorable { decimal_scale } => {
                let text = match &*v {
                    Value::Str(s) => Some(s.as_str()),
                    // A decimal sent as a JSON number (`decimal.format=
                    // NUMERIC`) is its own exact text; a double's text as
                    // sent is gone: the general path writes it.
                    Value::Number(_) | Value::Int(_) if decimal_scale.is_some() => {
                        *v = Value::Str(v.to_compact_string());
                        return Ok(());
                    }
                    Value::Float(_) if decimal_scale.is_some() => return Err(General),
                    _ => None,
                };
                let exact = decimal_scale.and_then(|s| Logical::Decimal.cell(s, None, text));
                *v = exact.unwrap_or(Value::Null);
                return Ok(());
            }
            Rule::Typed { logical, scale, fallback } => (logical, scale, fallback),
        };
        if v.is_null() {
            return Ok(());
        }
        let int = match v {
            Value::Int(i) => Some(*i),
            _ => None,
        };
        let text = match &*v {
            Value::Str(s) => Some(s.as_str()),
            _ => None,
        };
        // A VariableScaleDecimal object was made a decimal cell as it was
        // parsed (`json_cell`); anything else in its column stays as parsed.
        if let Some(c) = logical.and_then(|l| l.cell(scale, int, text)) {
            *v = c;
            return Ok(());
        }
        *v = match (fallback, &*v) {
            (Fallback::Float, Value::Int(i)) => Value::Float(*i as f64),
            (Fallback::Binary, Value::Str(s)) => {
                match base64::engine::general_purpose::STANDARD.decode(s) {
                    Ok(b) => Value::bytes(b),
                    Err(_) => return Ok(()),
                }
            }
            (Fallback::Str, Value::Int(i)) => Value::Str(i.to_compact_string()),
            (Fallback::Str, Value::Number(n)) => Value::Str(n.as_ref().into()),
            (Fallback::Str, Value::Bool(b)) => Value::Str(b.to_compact_string()),
            // A float's text as JSON wrote it is gone (`1e3`, an integer
            // beyond 64 bits); a Decimal cell was a nested object.
            (Fallback::Str, Value::Float(_) | Value::Decimal(..)) => return Err(General),
            // Everything else is the value as parsed (`json_cell`).
            _ => return Ok(()),
        };
        Ok(())
    }
}

/// The typing of one record of the schema: a flat row, or an envelope's
/// `before` / `after`.
#[derive(Default)]
struct Section {
    declared: DeclaredTypes,
    rules: FxHashMap<String, Rule>,
    /// The rules in the order of the last row layout typed (rows of a
    /// schema share a layout: one lookup per layout, not per field).
    by_layout: RefCell<Option<(Layout, Vec<Rule>)>>,
}

impl Section {
    fn of(fields: Option<&Vec<J>>) -> Section {
        let mut declared = vec![];
        let mut rules = FxHashMap::default();
        for f in fields.into_iter().flatten() {
            if let Some(name) = f.get("field").and_then(J::as_str) {
                declared.push((name.to_string(), declaration(f)));
                // The first field of a name types it, as `FieldSchemas` keeps it.
                rules.entry(name.to_string()).or_insert_with(|| Rule::of(f));
            }
        }
        Section { declared: declared.into(), rules, by_layout: RefCell::default() }
    }

    /// Types a row's cells; Err: the row needs the general path.
    fn type_row(&self, data: &mut Fields) -> Result<(), General> {
        let Some(layout) = data.layout() else { return Ok(()) };
        let mut cached = self.by_layout.borrow_mut();
        if !cached.as_ref().is_some_and(|(l, _)| Arc::ptr_eq(l, layout)) {
            let rules =
                layout.iter().map(|n| self.rules.get(&**n).copied().unwrap_or(Rule::Untyped));
            *cached = Some((layout.clone(), rules.collect()));
        }
        let rules = cached.as_ref().map_or(&[][..], |(_, r)| r.as_slice());
        // Typed in place: the row keeps its vector (and the room it leaves
        // for stored envelope columns) and its layout.
        for (v, r) in data.values_mut().iter_mut().zip(rules) {
            r.apply(v)?;
        }
        Ok(())
    }
}

/// A schema's text and its typing rules, compiled once.
pub(super) struct Compiled {
    text: Box<[u8]>,
    /// Flat rows (`format: json`): the schema's own fields.
    row: Section,
    before: Section,
    after: Section,
}

/// Which record of the schema a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Record {
    Row,
    Before,
    After,
}

impl Compiled {
    fn compile(text: &[u8]) -> Option<Compiled> {
        let schema: J = serde_json::from_slice(text).ok()?;
        schema.is_object().then_some(())?;
        Some(Compiled {
            text: text.into(),
            row: Section::of(schema.get("fields").and_then(J::as_array)),
            before: Section::of(section_fields(&schema, "before")),
            after: Section::of(section_fields(&schema, "after")),
        })
    }

    fn section(&self, record: Record) -> &Section {
        match record {
            Record::Row => &self.row,
            Record::Before => &self.before,
            Record::After => &self.after,
        }
    }

    /// The declared types of every field of `record` (shared by its rows).
    pub(super) fn declared(&self, record: Record) -> DeclaredTypes {
        self.section(record).declared.clone()
    }

    /// A row of `record` typed by its field schemas; None: the general
    /// path must decode the message.
    pub(super) fn type_row(&self, record: Record, mut data: Fields) -> Option<Fields> {
        self.section(record).type_row(&mut data).ok()?;
        Some(data)
    }
}

thread_local! {
    /// The schemas this thread saw last, newest first.
    static SCHEMAS: RefCell<Vec<Rc<Compiled>>> = const { RefCell::new(Vec::new()) };
}

/// A wrapped message apart: its schema, compiled, and its payload's bytes.
pub(super) struct Split<'a> {
    pub schema: Rc<Compiled>,
    pub payload: &'a [u8],
}

/// A wrapped message's compiled schema and its payload's bytes; None when
/// `value` is not exactly `{"schema":S,"payload":P}` with S a JSON object
/// that passes the bad-input checks (the general path decides what it is).
///
/// A schema is cached only once its bytes pass the checks every message
/// gets (nesting depth, NUL): a message with a cached schema then needs
/// only its payload checked (`decode_keeping`).
pub(super) fn split(value: &[u8]) -> Option<Split<'_>> {
    let rest = schema_start(value)?;
    let payload = |len: usize| payload_of(rest.get(len..)?);
    let hit = SCHEMAS.with_borrow(|cache| {
        let c = cache.iter().find(|c| rest.starts_with(&c.text))?;
        Some(Split { schema: c.clone(), payload: payload(c.text.len())? })
    });
    if hit.is_some() {
        return hit;
    }
    let len = object_len(rest)?;
    let p = payload(len)?;
    let text = &rest[..len];
    // Inside the wrapper, one level deeper than the message.
    scan::check_depth_within(text, super::MAX_DEPTH - 1).ok()?;
    if scan::has_nul(text) {
        return None;
    }
    let compiled = Rc::new(Compiled::compile(text)?);
    SCHEMAS.with_borrow_mut(|cache| {
        cache.insert(0, compiled.clone());
        cache.truncate(CACHED);
    });
    Some(Split { schema: compiled, payload: p })
}

/// The length of the JSON object `v` starts with (brackets matched outside
/// strings); None when `v` does not start with `{` or the object does not end.
fn object_len(v: &[u8]) -> Option<usize> {
    if v.first() != Some(&b'{') {
        return None;
    }
    scan::brackets(v).find(|&(_, depth)| depth == 0).map(|(at, _)| at + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_len_skips_brackets_inside_strings() {
        assert_eq!(object_len(br#"{"a":"}{\"]","b":[1,{}]},"x""#), Some(24));
        assert_eq!(object_len(br#"{"a":1"#), None);
        assert_eq!(object_len(br#"[1]"#), None);
    }

    #[test]
    fn split_reuses_the_compiled_schema_and_refuses_other_shapes() {
        let msg = br#"{"schema":{"type":"struct","fields":[{"type":"int64","field":"id"}]},"payload":{"id":1}}"#;
        let a = split(msg).unwrap();
        assert_eq!(a.payload, br#"{"id":1}"#);
        let b = split(msg).unwrap();
        assert!(Rc::ptr_eq(&a.schema, &b.schema), "the second message reuses the compiled schema");
        assert!(split(br#"{"payload":{"id":1},"schema":{}}"#).is_none());
        // JSON's whitespace between the wrapper's tokens (a message another
        // tool wrote, e.g. Python's json.dumps): split all the same.
        let spaced = b"{ \"schema\" :\t{\"type\": \"struct\", \"fields\": []} ,\r\n\"payload\": {\"id\": 2} }\n";
        assert_eq!(split(spaced).unwrap().payload, b"{\"id\": 2} ");
        assert!(
            split(b"{\"schema\":{},\"payload\":{}}\x0c").is_none(),
            "a form feed is no JSON space"
        );
        // Whatever follows the payload stays in it, for its parser to refuse.
        let extra = split(br#"{"schema":{"fields":[]},"payload":{"id":1},"x":2}"#).unwrap();
        assert_eq!(extra.payload, br#"{"id":1},"x":2"#);
        // A schema that fails the bad-input checks is never cached.
        assert!(split(br#"{"schema":{"doc":"a\u0000b"},"payload":{"id":1}}"#).is_none());
        let deep = format!(
            r#"{{"schema":{{"a":{}1{}}},"payload":{{}}}}"#,
            "[".repeat(127),
            "]".repeat(127)
        );
        assert!(split(deep.as_bytes()).is_none());
        assert!(split(br#"{"schema":{"fields":[]}}"#).is_none());
    }
}
