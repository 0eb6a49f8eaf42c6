//! Message decoding: flat JSON rows and Debezium change envelopes (docs/events.md).
//!
//! A decoded row has two parts: `data`, the columns that become table
//! columns (Debezium `after`, or `before` for deletes), and `env`, the
//! envelope fields (`op`, `ts_ms`, `source.lsn`, ...) that predicates and
//! `sequence_by` may read by dotted path but that are not stored. Envelope
//! paths a table must *store* (its `sequence_by` / `valid_time` column) are
//! materialised as data columns named with dots replaced by underscores
//! (`source.lsn` → `source_lsn`), so cross-batch ordering survives restarts.
//!
//! The pieces: `json` maps JSON values to cells (and flat rows), `envelope`
//! decodes Debezium envelopes, `schema` types their values by the Kafka
//! Connect schema when one is attached, and `fast` is the hot path that
//! deserialises the common shapes straight into cells: by `direct`, a
//! one-pass reader of the bytes, and where it gives up by simd-json's
//! tape; the general path (`serde_json::Value` first) decides and reports
//! everything else.
//! `fields` is what every path produces: a row's values with its field
//! names as one layout shared by the rows of a schema.

pub mod avro;
mod direct;
mod envelope;
mod fast;
mod fields;
mod json;
mod scan;
mod schema;
#[cfg(test)]
mod tests;
mod wrapped;

use serde_json::Value as J;

use self::envelope::debezium;
use self::fast::Reader;
pub use self::fields::{env_name, layout_id, Fields, Layout};
pub use self::json::json_cell;
use self::scan::{check_depth, check_depth_within};
pub use self::schema::variable_scale_decimal;
use crate::config::Format;
use crate::value::{DType, Value};

/// A column name in a decoded row. Shared: rows of one schema reuse the
/// names of the row before them instead of allocating each (`fast`), and
/// comparing two of them compares pointers first.
pub type Name = std::sync::Arc<str>;

/// A decoded message's envelope fields (`op`, `source.lsn`, ...) by
/// dotted name, in message order. Names come from [`env_name`].
pub type Env = Vec<(Name, Value)>;

#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    Row {
        data: Fields,
        env: Env,
        /// Column types the message's schema declares (empty without one).
        declared: DeclaredTypes,
    },
    /// Kafka tombstone (null value): skipped and counted.
    Tombstone,
    /// Debezium `t`: counted and logged; no data change.
    Truncate,
}

/// The column types a message's schema declares, shared by the rows of one
/// schema (an Avro writer schema's rows share one list: comparing two rows'
/// declarations is then a pointer comparison).
///
/// Rows without a schema hold no list at all, not a shared empty one: the
/// standard library's empty `Arc<[T]>` is one process-wide value, and two
/// cores cloning it for every decoded row fought over its reference count
/// (a fourteenth of the Debezium decode's samples).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeclaredTypes(Option<std::sync::Arc<[(String, Declared)]>>);

impl DeclaredTypes {
    /// The same list (or none on both sides): equal without comparing.
    pub fn ptr_eq(&self, other: &DeclaredTypes) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl std::ops::Deref for DeclaredTypes {
    type Target = [(String, Declared)];
    fn deref(&self) -> &Self::Target {
        self.0.as_deref().unwrap_or(&[])
    }
}

impl From<Vec<(String, Declared)>> for DeclaredTypes {
    fn from(list: Vec<(String, Declared)>) -> DeclaredTypes {
        DeclaredTypes((!list.is_empty()).then(|| list.into()))
    }
}

impl FromIterator<(String, Declared)> for DeclaredTypes {
    fn from_iter<I: IntoIterator<Item = (String, Declared)>>(list: I) -> DeclaredTypes {
        list.into_iter().collect::<Vec<_>>().into()
    }
}

/// A column type a message's schema declares (docs/types.md, declared types win).
#[derive(Debug, Clone, PartialEq)]
pub enum Declared {
    Exact(DType),
    /// `io.debezium.data.VariableScaleDecimal`: the scale is the table's
    /// (`columns:` or the default), each value carries its own.
    VariableScaleDecimal,
    /// A type no Delta column holds exactly (a decimal wider than 38
    /// digits): rows declaring it are dead letters with this reason.
    Unstorable(String),
}

/// Column name under which an envelope path is stored.
pub fn stored_name(path: &str) -> String {
    path.replace('.', "_")
}

/// Adds a table's stored envelope fields to a decoded row as columns
/// (`source.lsn` -> `source_lsn`, see [`store_paths`]), unless the row
/// already has such a column.
pub fn store_envelope(data: &mut Fields, env: &[(Name, Value)], paths: &[String]) {
    for path in paths {
        // Compared without building the stored name: this runs per message.
        let stored_as = |n: &str| {
            n.len() == path.len()
                && n.bytes().zip(path.bytes()).all(|(a, b)| a == if b == b'.' { b'_' } else { b })
        };
        if data.names().iter().any(|n| stored_as(n)) {
            continue;
        }
        if let Some((_, v)) = env.iter().find(|(n, _)| **n == **path) {
            data.push_named(stored_as, || stored_name(path).into(), v.clone());
        }
    }
}

/// What a Debezium `op` code means (docs/events.md, Debezium envelopes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Create, update or snapshot read: the row is the `after` image.
    Upsert,
    /// Delete: the row is the `before` image (or only the message key).
    Delete,
    /// Truncate of the source table.
    Truncate,
    /// A transactional message (`m`): carries no row.
    Message,
}

impl Op {
    pub fn parse(code: &str) -> Option<Op> {
        Some(match code {
            "c" | "u" | "r" => Op::Upsert,
            "d" => Op::Delete,
            "t" => Op::Truncate,
            "m" => Op::Message,
            _ => return None,
        })
    }
}

/// Is `name` an envelope path rather than a row column (Debezium only)?
pub fn is_envelope_path(name: &str) -> bool {
    name.contains('.') || matches!(name, "op" | "ts_ms" | "ts_us" | "ts_ns")
}

/// Envelope paths a table stores as columns (Debezium `sequence_by` / `valid_time`).
pub fn store_paths(t: &crate::config::TableConfig, format: Format) -> Vec<String> {
    if format != Format::Debezium {
        return vec![];
    }
    let mut p: Vec<String> =
        t.sequence_by.iter().filter(|s| is_envelope_path(s)).cloned().collect();
    if let crate::config::ValidTime::Column(c) = &t.valid_time {
        if is_envelope_path(c) {
            p.push(c.clone());
        }
    }
    p
}

/// Deepest nesting of arrays and objects a message may have. serde_json
/// stops at the same depth; simd-json has no limit of its own and would
/// overflow the stack (docs/bad-input.md, hostile messages).
pub const MAX_DEPTH: usize = 128;

/// Largest message decoded; a bigger one is a dead letter before any
/// parsing allocates for it (Kafka's own default limit is 1 MiB).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Most fields one row may have: MySQL's column limit, the highest of the
/// common databases' regular tables (SQL Server's wide tables of sparse
/// columns, up to 30,000, are refused). Under `schema_policy: additive`
/// a table takes a message's new fields as columns, and every row it types
/// is as wide as the table: one message of 200,000 fields (2 MB) would have
/// made each of its batch's 100,000 rows 200,000 cells wide.
pub const MAX_FIELDS: usize = 4096;

/// Why a row with more than [`MAX_FIELDS`] fields is a dead letter
/// (docs/bad-input.md); `stored`: the envelope columns the table stores
/// in it beside them, not counted.
pub fn width_error(data: &Fields, stored: usize) -> Option<String> {
    let fields = data.len().saturating_sub(stored);
    (fields > MAX_FIELDS).then(|| format!("a row of {fields} fields: more than {MAX_FIELDS}"))
}

/// A decoded row too wide for a batch ([`width_error`]) as a dead letter;
/// anything else as it is.
pub fn within_width(
    decoded: Result<Decoded, Rejected>,
    stored: usize,
) -> Result<Decoded, Rejected> {
    if let Ok(Decoded::Row { data, .. }) = &decoded {
        if let Some(e) = width_error(data, stored) {
            return Err(Rejected::malformed(e));
        }
    }
    decoded
}

/// Why a message was not decoded: the dead-letter reason and the error.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    /// `malformed` (not the configured format, too deep, not UTF-8, ...) or
    /// `internal` (the decoder panicked: a bug, kept from becoming a crash loop).
    pub reason: &'static str,
    pub error: String,
}

impl Rejected {
    pub fn malformed(error: impl Into<String>) -> Rejected {
        Rejected { reason: "malformed", error: error.into() }
    }

    /// A message larger than [`MAX_MESSAGE_BYTES`], refused before parsing.
    pub fn too_large(len: usize) -> Rejected {
        Rejected::malformed(format!("not decoded: {len} bytes, more than {MAX_MESSAGE_BYTES}"))
    }

    /// A decoder bug, caught: it costs the message, never the process.
    pub fn panicked(panic: &Box<dyn std::any::Any + Send>) -> Rejected {
        Rejected { reason: "internal", error: format!("decoder panicked: {}", panic_text(panic)) }
    }
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error)
    }
}

pub fn decode(
    format: Format,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    store_paths: &[String],
) -> Result<Decoded, Rejected> {
    decode_keeping(format, key, value, store_paths, None)
}

/// Envelope fields one table reads: its stored envelope columns, the columns
/// its `filter` and `delete_when` name, and `op`.
pub fn env_paths(t: &crate::config::TableConfig, format: Format) -> Vec<String> {
    tables_env_paths(std::slice::from_ref(t), format)
}

/// [`env_paths`] of several tables reading the same messages (a Kafka
/// system's), each path once: every field of every message is looked up in
/// this list.
pub fn tables_env_paths(tables: &[crate::config::TableConfig], format: Format) -> Vec<String> {
    let mut paths: Vec<String> = vec![];
    for t in tables {
        let mut cols = vec![];
        for e in t.filter.iter().chain(t.delete_when.iter()) {
            e.columns(&mut cols);
        }
        let read = store_paths(t, format).into_iter().chain(cols.into_iter().map(|c| c.join(".")));
        for path in read.chain(["op".to_string()]) {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    paths
}

/// A flat JSON object's fields as cells (file sources' `type: jsonl`): by
/// the direct reader, else by the SIMD parser once the scans allow it;
/// None when it is anything else or anything the SIMD parser reads
/// differently (see [`scan::Scan`]), for the caller's general parser to
/// decide and report.
pub fn flat_object(value: &[u8]) -> Option<Fields> {
    if let Some(row) = direct::object_fields(value, MAX_DEPTH) {
        return Some(row);
    }
    check_depth(value).ok()?;
    if scan::scan(value).simd_differs {
        return None;
    }
    fast::object_fields(value)
}

/// [`decode`] keeping only the envelope fields in `keep` (see [`env_paths`]):
/// a reader of one table skips building values nobody reads. The fallback
/// (general) path keeps every field, a superset.
pub fn decode_keeping(
    format: Format,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    store_paths: &[String],
    keep: Option<&[String]>,
) -> Result<Decoded, Rejected> {
    let Some(value) = value else { return Ok(Decoded::Tombstone) };
    if value.len() > MAX_MESSAGE_BYTES {
        return Err(Rejected::too_large(value.len()));
    }
    // A wrapped message whose schema is known needs only its payload
    // checked: the schema, most of its bytes, was checked when it was
    // first seen (`wrapped::split` caches no schema that fails the checks).
    let split = std::panic::catch_unwind(|| wrapped::split(value)).ok().flatten();
    let (checked, max_depth) = match &split {
        Some(s) => (s.payload, MAX_DEPTH - 1),
        None => (value, MAX_DEPTH),
    };
    // The key is parsed only as a fallback for deletes; a hostile key must not reach it.
    let key = key.filter(|k| check_depth(k).is_ok());
    let mut message = Message { value, split, simd_differs: false };
    // The direct reader meets what the scans look for as it reads: only a
    // message it gives up on is scanned.
    let direct = Reader::Direct { max_depth };
    if let Some(decoded) =
        guarded(|| fast::decode_split(direct, format, key, &message, store_paths, keep))?
    {
        return refused_or_row(decoded);
    }
    check_depth_within(checked, max_depth)
        .map_err(|e| Rejected::malformed(format!("not decoded: {e}")))?;
    let scanned = scan::scan(checked);
    if scanned.nul {
        // Text with NUL breaks readers that hand strings to C (and it is
        // never CRM data): refused whole, raw or escaped.
        return Err(Rejected::malformed("not decoded: contains a NUL character"));
    }
    message.simd_differs = scanned.simd_differs;
    decode_guarded(format, key, message, store_paths, keep)
}

/// A message's value, and its payload apart from its schema when the
/// schema wrapper was split off (see `wrapped`).
struct Message<'a> {
    value: &'a [u8],
    split: Option<wrapped::Split<'a>>,
    /// The part parsed holds what simd-json reads differently from
    /// serde_json (see [`scan::Scan`]): the general path decodes it.
    simd_differs: bool,
}

/// Decodes on the tape, else by the general path, with a panic guard (see
/// [`guarded`]).
fn decode_guarded(
    format: Format,
    key: Option<&[u8]>,
    message: Message<'_>,
    store_paths: &[String],
    keep: Option<&[String]>,
) -> Result<Decoded, Rejected> {
    let decoded = guarded(|| {
        if let Some(d) = fast::decode_split(Reader::Tape, format, key, &message, store_paths, keep)
        {
            return d;
        }
        let v: J = serde_json::from_slice(message.value).map_err(|e| format!("not JSON: {e}"))?;
        match format {
            Format::Json => json::flat_row(v),
            Format::Debezium => debezium(v, key, store_paths),
        }
    })?;
    refused_or_row(decoded)
}

/// Runs a decoder with a panic guard: a decoder bug costs one message
/// (dead letter, reason `internal`), never the process.
fn guarded<T>(decode: impl FnOnce() -> T) -> Result<T, Rejected> {
    // Unwind-safe in fact: a compiled schema's only mutable part is its
    // per-layout rule cache, replaced whole, so a panic leaves it valid.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode))
        .map_err(|panic| Rejected::panicked(&panic))
}

/// A decoder's answer as a dead-letter reason where it refused the
/// message; a row naming a field twice is refused here, whichever
/// decoder read it.
fn refused_or_row(decoded: Result<Decoded, String>) -> Result<Decoded, Rejected> {
    match decoded {
        Ok(Decoded::Row { data, .. }) if data.has_duplicate() => {
            Err(Rejected::malformed("a field appears twice in the row"))
        }
        d => d.map_err(Rejected::malformed),
    }
}

/// The message of a caught panic.
pub fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
