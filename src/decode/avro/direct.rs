//! The direct path: a message's Avro body read once, front to back, by a
//! program compiled from its writer schema, straight into the row and
//! envelope cells (docs/avro.md, how messages are decoded).
//!
//! Why: the per-message path (`apache_avro`) builds a value tree per
//! message — a `Value` per field with its name copied, a boxed union per
//! nullable field, a `String` per text — and then converts the tree. Here
//! a field nobody reads is passed over (still checked, as the per-message
//! path checks it), and a kept one becomes its cell at once. An earlier
//! column path (`arrow-avro` into Arrow columns, then rows read off the
//! columns) cost more than this per message and read fewer types.
//!
//! Why it can always step back: the per-message path stays the reference.
//! This one reads only what it is sure that path accepts, and reads it the
//! same way: anything else (bytes left over or missing, an invalid
//! boolean, union branch or UTF-8, an op it does not handle, a value the
//! reference keeps in another shape) makes it give the message up, and
//! the per-message path decodes it and gives the reason. Simple cells are
//! made here; every other value is built as the `apache_avro` value the
//! reference builds and converted by the same `cells` functions, so both
//! paths make the same cells by construction. The tests compare the two.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

use apache_avro::schema::{Name as AvroName, Namespace, Schema};
use apache_avro::types::Value as A;

use super::cells;
use super::cursor::Cursor;
use super::plan::Conv;
use super::{key_fallback, RowPlan, RunCopy, Schemas, WriterSchema};
use crate::config::Format;
use crate::decode::{env_name, DeclaredTypes, Decoded, Env, Fields, Name, Op};
use crate::value::{decimal, parse_ts, Value};

/// Deepest nesting of types a program follows (a recursive type would
/// otherwise never end), and most types it holds (named types used many
/// times could otherwise multiply).
pub(super) const MAX_DEPTH: usize = 64;
pub(super) const MAX_NODES: usize = 100_000;
/// Most bytes of names and symbols a program copies: each use of a named
/// type copies its field names, so a few long names used many times
/// would otherwise fill memory within the type count.
const MAX_NAME_BYTES: usize = 64 << 20;

/// A writer schema's type, as its binary encoding is read.
#[derive(Debug, Clone)]
enum Node {
    Null,
    Boolean,
    /// An `int` and the value `apache_avro` makes of it (`Int`, `Date`,
    /// `TimeMillis`).
    Int(fn(i32) -> A),
    /// A `long`, and the value made of it when it has a logical type (the
    /// timestamps, `TimeMicros`).
    Long(Option<fn(i64) -> A>),
    Float,
    Double,
    Bytes,
    String,
    /// A `decimal` logical type over `bytes` (None) or a fixed size.
    Decimal(Option<usize>),
    Fixed(usize),
    Enum(Box<[String]>),
    Array(Box<Node>),
    Map(Box<Node>),
    Record(Box<[(String, Node)]>),
    Union(Box<[Node]>),
    /// A type this path does not make values of (uuid over bytes,
    /// big-decimal over bytes, duration over a fixed 12), encoded as its
    /// inner type: passed over for [`Program::refusal`], never read.
    Opaque(Box<Node>),
    /// A record type met again inside itself (a linked list, a tree):
    /// passed over for [`Program::refusal`], never read.
    Ref(Weak<Recursive>),
}

/// A record type that holds itself, compiled once: its node, and whether
/// every value of it takes a byte (worked out with its own references
/// counted as taking none, which errs on the side of not refusing).
#[derive(Debug, Default)]
struct Recursive(OnceLock<(Node, bool)>);

impl Node {
    /// Whether every value of this type takes at least one byte (a null,
    /// an empty fixed and records of those take none).
    fn takes_bytes(&self) -> bool {
        match self {
            Node::Null => false,
            Node::Fixed(n) | Node::Decimal(Some(n)) => *n > 0,
            Node::Record(fields) => fields.iter().any(|(_, f)| f.takes_bytes()),
            Node::Opaque(inner) => inner.takes_bytes(),
            Node::Ref(r) => r.upgrade().and_then(|r| r.0.get().map(|n| n.1)).unwrap_or(false),
            _ => true,
        }
    }
}

/// A writer schema compiled for the direct path: its top-level record.
#[derive(Debug)]
pub(super) struct Program {
    fields: Box<[(String, Node)]>,
    /// It holds what the direct path does not read (a uuid, big-decimal or
    /// duration type, a recursive type, a top level that is not a record):
    /// its messages are all decoded by `apache_avro`, and the program only
    /// checks their bodies first ([`Program::refusal`]).
    pub(super) checks_only: bool,
    /// The recursive types its [`Node::Ref`]s point at.
    _recursive: Vec<Arc<Recursive>>,
}

impl Program {
    /// The program for a schema (None when it nests types more than
    /// [`MAX_DEPTH`] deep without recursion, or holds more than
    /// [`MAX_NODES`] types or [`MAX_NAME_BYTES`] of names once named types
    /// are expanded).
    pub(super) fn compile(schema: &Schema) -> Option<Program> {
        let resolved = apache_avro::schema::ResolvedSchema::try_from(schema).ok()?;
        let mut c = Compiler {
            names: resolved.get_names(),
            nodes: 0,
            name_bytes: 0,
            checks_only: false,
            open: vec![],
            recursive: vec![],
        };
        let (fields, checks_only) = match c.node(schema, &None, 0)? {
            Node::Record(fields) => (fields, c.checks_only),
            // Read as a record of one field, for the checks only.
            other => (Box::new([(String::new(), other)]) as Box<[_]>, true),
        };
        Some(Program { fields, checks_only, _recursive: c.recursive })
    }

    /// Why `body` cannot be decoded with this program, when it reads as
    /// impossible ([`Cursor::refusal`]: it runs out of bytes, claims more
    /// array or map items than it could hold, or nests deeper than
    /// [`super::cursor::MAX_NEST`], which `apache_avro` would follow down
    /// its stack). `apache_avro` reads a
    /// body that ends where a boolean, a string's bytes or a union branch
    /// should be as a null there (its end-of-stream rule), so a truncated
    /// message could pass for a row with NULLs; and it reserves room for a
    /// block's claimed count, then builds each item. The reference path
    /// asks this first.
    pub(super) fn refusal(&self, body: &[u8]) -> Option<String> {
        let mut c = Cursor::new(body, 0);
        // The top-level record is the first nesting level.
        let walk = |c: &mut Cursor<'_>| self.fields.iter().try_for_each(|(_, f)| skip(f, c));
        match c.enter().and_then(|()| walk(&mut c)) {
            Some(()) => None,
            None => c.refusal(),
        }
    }
}

struct Compiler<'s> {
    names: &'s HashMap<AvroName, &'s Schema>,
    nodes: usize,
    /// Bytes of field names and enum symbols copied so far.
    name_bytes: usize,
    /// The schema holds a type the direct path does not read.
    checks_only: bool,
    /// The records being compiled, outermost first, each with its
    /// [`Recursive`] once a reference inside it names it.
    open: Vec<(AvroName, Option<Arc<Recursive>>)>,
    recursive: Vec<Arc<Recursive>>,
}

impl Compiler<'_> {
    /// A type, with named references followed as `apache_avro` follows them
    /// (in the enclosing record's namespace).
    fn node(&mut self, s: &Schema, ns: &Namespace, depth: usize) -> Option<Node> {
        self.nodes += 1;
        if depth > MAX_DEPTH || self.nodes > MAX_NODES {
            return None;
        }
        Some(match s {
            Schema::Null => Node::Null,
            Schema::Boolean => Node::Boolean,
            Schema::Int => Node::Int(A::Int),
            Schema::Date => Node::Int(A::Date),
            Schema::TimeMillis => Node::Int(A::TimeMillis),
            Schema::Long => Node::Long(None),
            Schema::TimeMicros => Node::Long(Some(A::TimeMicros)),
            Schema::TimestampMillis => Node::Long(Some(A::TimestampMillis)),
            Schema::TimestampMicros => Node::Long(Some(A::TimestampMicros)),
            Schema::TimestampNanos => Node::Long(Some(A::TimestampNanos)),
            Schema::LocalTimestampMillis => Node::Long(Some(A::LocalTimestampMillis)),
            Schema::LocalTimestampMicros => Node::Long(Some(A::LocalTimestampMicros)),
            Schema::LocalTimestampNanos => Node::Long(Some(A::LocalTimestampNanos)),
            Schema::Float => Node::Float,
            Schema::Double => Node::Double,
            Schema::Bytes => Node::Bytes,
            Schema::String => Node::String,
            Schema::Decimal(d) => match &*d.inner {
                Schema::Bytes => Node::Decimal(None),
                Schema::Fixed(f) => Node::Decimal(Some(f.size)),
                _ => return None,
            },
            Schema::Fixed(f) => Node::Fixed(f.size),
            Schema::Enum(e) => {
                self.copies(e.symbols.iter().map(String::len).sum())?;
                Node::Enum(e.symbols.clone().into())
            }
            Schema::Array(a) => Node::Array(Box::new(self.node(&a.items, ns, depth + 1)?)),
            Schema::Map(m) => Node::Map(Box::new(self.node(&m.types, ns, depth + 1)?)),
            Schema::Union(u) => Node::Union(
                u.variants().iter().map(|v| self.node(v, ns, depth + 1)).collect::<Option<_>>()?,
            ),
            Schema::Record(r) => {
                let full = r.name.fully_qualified_name(ns);
                let ns = full.namespace.clone();
                self.open.push((full, None));
                let fields = r
                    .fields
                    .iter()
                    .map(|f| {
                        self.copies(f.name.len())?;
                        Some((f.name.clone(), self.node(&f.schema, &ns, depth + 1)?))
                    })
                    .collect::<Option<_>>();
                let (_, recursive) = self.open.pop()?;
                let node = Node::Record(fields?);
                if let Some(r) = recursive {
                    let sized = node.takes_bytes();
                    r.0.set((node.clone(), sized)).ok()?;
                }
                node
            }
            Schema::Ref { name } => {
                let full = name.fully_qualified_name(ns);
                if let Some(at) = self.open.iter().position(|(open, _)| *open == full) {
                    return Some(self.recursion(at));
                }
                let named = *self.names.get(&full)?;
                self.node(named, &full.namespace, depth + 1)?
            }
            Schema::Uuid | Schema::BigDecimal | Schema::Duration => {
                self.checks_only = true;
                Node::Opaque(Box::new(match s {
                    // Any 16 bytes are a binary uuid to `apache_avro`, so
                    // not checked as UTF-8 here.
                    Schema::Uuid => Node::Bytes,
                    Schema::BigDecimal => Node::Bytes,
                    _ => Node::Fixed(12),
                }))
            }
        })
    }

    /// Counts `n` more bytes of names copied: None past [`MAX_NAME_BYTES`].
    fn copies(&mut self, n: usize) -> Option<()> {
        self.name_bytes += n;
        (self.name_bytes <= MAX_NAME_BYTES).then_some(())
    }

    /// A reference to the record `open[at]`, inside that record.
    fn recursion(&mut self, at: usize) -> Node {
        self.checks_only = true;
        let r = match &self.open[at].1 {
            Some(r) => r.clone(),
            None => {
                let r = Arc::new(Recursive::default());
                self.recursive.push(r.clone());
                self.open[at].1 = Some(r.clone());
                r
            }
        };
        Node::Ref(Arc::downgrade(&r))
    }
}

/// Passes over a value, checking it as the reference decodes it. Records,
/// arrays and maps count as nesting levels ([`Cursor::enter`]).
fn skip(node: &Node, c: &mut Cursor<'_>) -> Option<()> {
    let nests = matches!(node, Node::Record(_) | Node::Array(_) | Node::Map(_));
    if nests {
        c.enter()?;
    }
    match node {
        Node::Null => {}
        Node::Boolean => {
            c.boolean()?;
        }
        Node::Int(_) => {
            c.int()?;
        }
        Node::Long(_) => {
            c.long()?;
        }
        Node::Float => {
            c.take(4)?;
        }
        Node::Double => {
            c.take(8)?;
        }
        Node::Bytes | Node::Decimal(None) => {
            c.bytes()?;
        }
        Node::String => {
            c.str()?;
        }
        Node::Decimal(Some(n)) | Node::Fixed(n) => {
            c.take(*n)?;
        }
        Node::Enum(symbols) => {
            let i = usize::try_from(c.int()?).ok()?;
            (i < symbols.len()).then_some(())?;
        }
        Node::Array(item) => loop {
            let n = c.block(item.takes_bytes())?;
            if n == 0 {
                break;
            }
            for _ in 0..n {
                skip(item, c)?;
            }
        },
        Node::Map(value) => loop {
            // Each entry has a key, whose length is a byte at least.
            let n = c.block(true)?;
            if n == 0 {
                break;
            }
            for _ in 0..n {
                c.str()?;
                skip(value, c)?;
            }
        },
        Node::Record(fields) => {
            for (_, f) in fields.iter() {
                skip(f, c)?;
            }
        }
        Node::Union(branches) => skip(branches.get(c.index()?)?, c)?,
        Node::Opaque(inner) => skip(inner, c)?,
        Node::Ref(r) => skip(&r.upgrade()?.0.get()?.0, c)?,
    }
    if nests {
        c.leave();
    }
    Some(())
}

/// A value as the `apache_avro` value the reference decodes it into.
fn build(node: &Node, c: &mut Cursor<'_>) -> Option<A> {
    Some(match node {
        Node::Null => A::Null,
        Node::Boolean => A::Boolean(c.boolean()?),
        Node::Int(make) => make(c.int()?),
        Node::Long(make) => {
            let x = c.long()?;
            make.map_or(A::Long(x), |make| make(x))
        }
        Node::Float => A::Float(f32::from_le_bytes(c.take(4)?.try_into().ok()?)),
        Node::Double => A::Double(f64::from_le_bytes(c.take(8)?.try_into().ok()?)),
        Node::Bytes => A::Bytes(c.bytes()?.to_vec()),
        Node::String => A::String(c.str()?.to_string()),
        Node::Decimal(None) => A::Decimal(c.bytes()?.into()),
        Node::Decimal(Some(n)) => A::Decimal(c.take(*n)?.into()),
        Node::Fixed(n) => A::Fixed(*n, c.take(*n)?.to_vec()),
        Node::Enum(symbols) => {
            let i = c.int()?;
            A::Enum(i as u32, symbols.get(usize::try_from(i).ok()?)?.clone())
        }
        Node::Array(item) => {
            let mut items = vec![];
            loop {
                let n = c.block(item.takes_bytes())?;
                if n == 0 {
                    break A::Array(items);
                }
                for _ in 0..n {
                    items.push(build(item, c)?);
                }
            }
        }
        Node::Map(value) => {
            let mut entries = HashMap::new();
            loop {
                let n = c.block(true)?;
                if n == 0 {
                    break A::Map(entries);
                }
                for _ in 0..n {
                    let k = c.str()?.to_string();
                    entries.insert(k, build(value, c)?);
                }
            }
        }
        Node::Record(fields) => A::Record(
            fields.iter().map(|(n, f)| Some((n.clone(), build(f, c)?))).collect::<Option<_>>()?,
        ),
        Node::Union(branches) => {
            let i = c.index()?;
            A::Union(i as u32, Box::new(build(branches.get(i)?, c)?))
        }
        Node::Opaque(_) | Node::Ref(_) => return None,
    })
}

/// A value as the cell the reference makes of it (`cells::cell`): text,
/// bytes and decimals here, the rest through the value it builds.
fn cell(node: &Node, c: &mut Cursor<'_>, conv: Conv) -> Option<Value> {
    Some(match (node, conv) {
        (Node::Union(branches), _) => return cell(branches.get(c.index()?)?, c, conv),
        (Node::Null, _) => Value::Null,
        (Node::String, _) => {
            let s = c.str()?;
            match conv {
                Conv::Unstorable | Conv::WideDecimal(_) => Value::Null,
                Conv::ZonedTs => parse_ts(s).map_or_else(|| Value::Str(s.into()), Value::Ts),
                _ => Value::Str(s.into()),
            }
        }
        (Node::Bytes, _) => {
            let b = c.bytes()?;
            match conv {
                Conv::Unstorable => Value::Null,
                Conv::WideDecimal(scale) => cells::wide(b, scale),
                Conv::Decimal(scale) => match decimal::from_be_bytes(b) {
                    Some(u) => Value::decimal(u, scale),
                    None => Value::bytes(b.to_vec()),
                },
                _ => Value::bytes(b.to_vec()),
            }
        }
        // The reference re-encodes the unscaled bytes at their own length,
        // which gives them back unchanged (none at all: 0, `cells.rs`).
        (Node::Decimal(None), Conv::Decimal(scale)) => {
            Value::decimal(decimal::from_be_bytes(c.bytes()?)?, scale)
        }
        (Node::Long(None), Conv::Plain) => Value::Int(c.long()?),
        _ => cells::cell(build(node, c)?, conv),
    })
}

/// What a run does with each top-level field of an envelope.
enum Top {
    Before,
    After,
    Env(EnvField),
}

/// An envelope field outside `before` and `after`, flattened as the
/// reference flattens it: a record's fields one level deep (`source.lsn`),
/// only what a table reads (`op` always).
struct EnvField {
    /// Its own name, when its value is kept (a value that is not a record).
    whole: Option<Name>,
    /// For each field of its record branch, the name it is kept under.
    children: Vec<Option<Name>>,
}

/// A section (`before`, `after`, a flat record): its fields and the plan
/// that makes them a row.
struct Section<'w> {
    /// The union branch that is null, when the field is `null` or a record.
    null_branch: Option<usize>,
    fields: &'w [(String, Node)],
    plan: &'w RowPlan,
    copy: RunCopy,
}

impl<'w> Section<'w> {
    /// The record a field holds, as read by `plan` (None when the field's
    /// type is not a record, or `null` and one record, of the plan's fields).
    fn of(node: &'w Node, plan: &'w RowPlan) -> Option<Section<'w>> {
        let (null_branch, fields) = match node {
            Node::Record(f) => (None, f),
            Node::Union(b) => match &b[..] {
                [Node::Null, Node::Record(f)] => (Some(0), f),
                [Node::Record(f), Node::Null] => (Some(1), f),
                _ => return None,
            },
            _ => return None,
        };
        Section::new(null_branch, fields, plan)
    }

    fn new(
        null_branch: Option<usize>,
        fields: &'w [(String, Node)],
        plan: &'w RowPlan,
    ) -> Option<Section<'w>> {
        let same = fields.len() == plan.fields.len()
            && fields.iter().zip(&plan.fields).all(|((n, _), p)| *n == p.name);
        same.then(|| Section { null_branch, fields, plan, copy: plan.for_run() })
    }

    /// Whether the section's value is null (the cursor at it), reading
    /// its union branch.
    fn is_null(&self, c: &mut Cursor<'_>) -> Option<bool> {
        match self.null_branch {
            None => Some(false),
            Some(null) => match c.index()? {
                i if i == null => Some(true),
                i if i < 2 => Some(false),
                _ => None,
            },
        }
    }

    /// The section's value: None when it is null (the cursor at its union
    /// branch, if any).
    fn read(&self, c: &mut Cursor<'_>) -> Option<Option<Fields>> {
        match self.is_null(c)? {
            true => Some(None),
            false => self.row(c).map(Some),
        }
    }

    /// The record's fields as a row (the cursor at its first field).
    fn row(&self, c: &mut Cursor<'_>) -> Option<Fields> {
        // Room for the envelope columns a table stores (`store_envelope`).
        let mut values = Vec::with_capacity(self.fields.len() + 2);
        for ((_, node), f) in self.fields.iter().zip(&self.plan.fields) {
            values.push(cell(node, c, f.conv)?);
        }
        Some(Fields::new(self.copy.layout.clone(), values))
    }
}

/// A run of one schema's messages read the direct way: the program and
/// what the run's table keeps, worked out once for the run.
pub(super) struct Run<'w> {
    program: &'w Program,
    shape: Shape<'w>,
}

enum Shape<'w> {
    Flat(Section<'w>),
    Envelope { top: Vec<Top>, before: Section<'w>, after: Section<'w> },
}

impl<'w> Run<'w> {
    /// None when this schema, read as `format`, is not for this path.
    pub(super) fn new(
        writer: &'w WriterSchema,
        format: Format,
        keep: Option<&[String]>,
    ) -> Option<Run<'w>> {
        let program = Some(&writer.direct).filter(|p| !p.checks_only)?;
        let shape = match format {
            Format::Json => Shape::Flat(Section::new(None, &program.fields, writer.row.as_ref()?)?),
            Format::Debezium => {
                let plans = writer.envelope.as_ref()?;
                let node =
                    |name: &str| program.fields.iter().find(|(n, _)| n == name).map(|f| &f.1);
                let before = Section::of(node("before")?, plans.before.as_ref()?)?;
                let after = Section::of(node("after")?, plans.after.as_ref()?)?;
                let wanted =
                    |path: &str| path == "op" || keep.is_none_or(|k| k.iter().any(|p| p == path));
                let top = program
                    .fields
                    .iter()
                    .map(|(name, node)| match name.as_str() {
                        "before" => Some(Top::Before),
                        "after" => Some(Top::After),
                        _ => {
                            let children = match record_branch(node)? {
                                Some(fields) => fields
                                    .iter()
                                    .map(|(k, _)| {
                                        let path = env_name(Some(name), k);
                                        wanted(&path).then_some(path)
                                    })
                                    .collect(),
                                None => vec![],
                            };
                            let whole = wanted(name).then(|| env_name(None, name));
                            Some(Top::Env(EnvField { whole, children }))
                        }
                    })
                    .collect::<Option<_>>()?;
                Shape::Envelope { top, before, after }
            }
        };
        Some(Run { program, shape })
    }

    /// A message body decoded (None: give it up to the per-message path).
    pub(super) fn decode(
        &self,
        body: &[u8],
        key: Option<&[u8]>,
        schemas: &dyn Schemas,
    ) -> Option<Decoded> {
        let mut c = Cursor::new(body, 0);
        let decoded = match &self.shape {
            Shape::Flat(row) => {
                let data = row.row(&mut c)?;
                Decoded::Row { data, env: vec![], declared: row.copy.declared.clone() }
            }
            Shape::Envelope { top, before, after } => {
                self.envelope(&mut c, top, before, after, key, schemas)?
            }
        };
        c.done().then_some(decoded)
    }

    fn envelope(
        &self,
        c: &mut Cursor<'_>,
        top: &[Top],
        before: &Section<'_>,
        after: &Section<'_>,
        key: Option<&[u8]>,
        schemas: &dyn Schemas,
    ) -> Option<Decoded> {
        // `op` comes after both images. `after` is read as it is met (an
        // upsert, most events, reads it once); `before` is passed over and
        // read again only for a delete.
        let (mut before_at, mut after_row) = (None, None);
        let mut env: Env = Vec::with_capacity(top.len() + 4);
        for (t, (_, node)) in top.iter().zip(self.program.fields.iter()) {
            match t {
                Top::Before => {
                    before_at = Some(c.at);
                    skip(node, c)?;
                }
                Top::After => after_row = Some(after.read(c)?),
                Top::Env(f) => env_field(node, f, c, &mut env)?,
            }
        }
        let op = match env.iter().find(|(n, _)| **n == *"op") {
            Some((_, Value::Str(op))) => Op::parse(op)?,
            _ => return None,
        };
        let (row, declared, is_delete) = match op {
            Op::Upsert => (after_row?, &after.copy.declared, false),
            Op::Delete => {
                let mut at = Cursor::new(c.bytes, before_at?);
                (before.read(&mut at)?, &before.copy.declared, true)
            }
            Op::Truncate | Op::Message => return None,
        };
        let (mut data, mut declared) = match row {
            Some(data) => (data, declared.clone()),
            None if is_delete => (Fields::default(), DeclaredTypes::default()),
            None => return None,
        };
        if is_delete {
            key_fallback(&mut data, &mut declared, key, schemas);
        }
        Some(Decoded::Row { data, env, declared })
    }
}

/// The fields of the one record a type is or holds: Some(None) when it
/// holds none, None when it holds several (not for this path).
fn record_branch(node: &Node) -> Option<Option<&[(String, Node)]>> {
    match node {
        Node::Record(f) => Some(Some(f)),
        Node::Union(b) => {
            let mut records = b.iter().filter_map(|n| match n {
                Node::Record(f) => Some(&f[..]),
                _ => None,
            });
            let one = records.next();
            records.next().is_none().then_some(one)
        }
        _ => Some(None),
    }
}

/// An envelope field's value into `env`, as the reference's `flatten`.
fn env_field(node: &Node, f: &EnvField, c: &mut Cursor<'_>, env: &mut Env) -> Option<()> {
    let node = match node {
        Node::Union(b) => b.get(c.index()?)?,
        n => n,
    };
    match node {
        Node::Record(fields) => {
            for ((_, child), name) in fields.iter().zip(&f.children) {
                match name {
                    Some(name) => env.push((name.clone(), cell(child, c, Conv::Plain)?)),
                    None => skip(child, c)?,
                }
            }
        }
        other => match &f.whole {
            Some(name) => env.push((name.clone(), cell(other, c, Conv::Plain)?)),
            None => skip(other, c)?,
        },
    }
    Some(())
}
