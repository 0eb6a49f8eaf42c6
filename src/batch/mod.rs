//! From a raw batch to typed rows aligned with the table's columns
//! (docs/schema.md, docs/types.md).
//!
//! Existing columns keep their stored type and incoming cells are converted to
//! it; only genuinely new columns are typed by declaration or inference. A cell
//! that cannot be converted sends its row to the dead-letter table with the
//! reason, and the rest of the batch goes on. A declared type (`columns:`,
//! or the message's schema) wins over inference; a declaration that changes
//! a stored column's type dead-letters its row, except a decimal's growing
//! precision, which widens the column ([`declared`]).

mod columns;
pub mod declared;

use std::borrow::Cow;
use std::collections::HashMap;

use columns::{plan_columns, ColumnPlan, Declarations};

use crate::config::SchemaPolicy;
use crate::source::{RawBatch, RawRow, Unparsable};
use crate::value::{cell, infer, parse_as, set_cell, DType, Value};

#[derive(Debug)]
pub struct TypedRow {
    pub data: Vec<Value>,
    pub pos: u64,
    pub partition: i32,
    pub raw: crate::source::RawText,
    /// Raw cells of columns not stored in the table (still visible to predicates).
    pub extra: crate::decode::Env,
    pub replayed: bool,
    /// Columns whose value the source left out as unchanged (Debezium's
    /// unavailable-value placeholder, PostgreSQL TOAST): NULL in `data`
    /// until the merge fills in the stored value.
    pub unavailable: Vec<usize>,
}

#[derive(Debug, Default)]
pub struct Conformed {
    /// Final data columns: the table's, then the new ones.
    pub columns: Vec<(String, DType)>,
    pub new_columns: Vec<(String, DType)>,
    pub rows: Vec<TypedRow>,
    pub dead: Vec<Unparsable>,
    /// Columns dropped under `schema_policy: ignore`.
    pub ignored_columns: Vec<String>,
    /// Columns with only NULLs so far, after this batch: no type yet, kept
    /// in `columns` as provisional text, written to no file, typed by their
    /// first values (docs/schema.md, no type yet).
    pub untyped: Vec<String>,
    /// Stored decimal columns whose precision this batch's declarations
    /// grow (same scale): the table widens them before the merge.
    pub widened: Vec<(String, DType)>,
}

/// The table a batch is typed against: its columns, those of them that
/// have no type yet, whether its types are exact (written by a version
/// with exact types: a declared type change is refused, see
/// [`declared::compatible`]), and its source's marker of unchanged values.
#[derive(Debug, Clone, Copy)]
pub struct TableShape<'a> {
    pub columns: &'a [(String, DType)],
    /// The columns changelake writes itself (`TableMeta::written_columns`):
    /// a source column of one of their names is refused.
    pub written: &'a [String],
    pub untyped: &'a std::collections::BTreeSet<String>,
    pub exact: bool,
    pub unavailable: Option<&'a Unavailable>,
    /// The source sends Debezium events: text in a decimal column that is
    /// not a number is Kafka Connect's base64 decimal bytes (precise mode
    /// without the schema wrapper).
    pub debezium: bool,
}

/// Debezium's unavailable-value placeholder (`unavailable.value.placeholder`,
/// `__debezium_unavailable_value` by default): a value PostgreSQL did not
/// send because it did not change (TOAST). Text columns carry it as is,
/// bytes columns base64-encoded (docs/types.md, unchanged values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    text: String,
    base64: String,
}

impl Unavailable {
    pub const DEFAULT: &'static str = "__debezium_unavailable_value";

    pub fn new(text: &str) -> Unavailable {
        use base64::Engine;
        let base64 = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
        Unavailable { text: text.to_string(), base64 }
    }

    pub fn matches(&self, v: &Value) -> bool {
        match v {
            Value::Str(s) => *s == self.text || *s == self.base64,
            Value::Bytes(b) => **b == *self.text.as_bytes(),
            _ => false,
        }
    }
}

/// The columns whose kind of value must never change: the business key and
/// the `sequence_by` columns (as stored), which decide identity and order.
#[derive(Debug, Clone, Copy)]
pub struct Guarded<'a> {
    pub keys: &'a [String],
    pub sequence: &'a [String],
}

fn convert(v: Value, t: DType, text: bool) -> Result<Value, String> {
    match v {
        Value::Str(s) if text => {
            parse_as(&s, t).ok_or_else(|| format!("{s:?} is not a valid {}", t.name()))
        }
        other => other.convert(t),
    }
}

/// Types `raw` against `table` (empty for a new table). `keys` must be present.
/// Why a batch cannot be aligned with the table at all (row-level problems
/// are dead letters, not errors).
#[derive(Debug, thiserror::Error)]
pub enum ConformError {
    /// A text extract (CSV) without a business-key column: bad input.
    #[error("business key column `{column}` is missing from the input {input} (key columns can never be added or dropped)")]
    MissingKey { column: String, input: String },
    /// A business key declared float by `columns:`: the config's key does
    /// not fit the data.
    #[error("business key column `{column}` has type float; floating-point business keys have no stable identity")]
    FloatKey { column: String },
}

/// `raw` is owned (its rows move) or kept by the caller (cells are copied).
pub fn conform<'a>(
    raw: impl Into<Cow<'a, RawBatch>>,
    table: TableShape,
    declared: &[(String, DType)],
    policy: SchemaPolicy,
    guarded: Guarded,
) -> Result<Conformed, ConformError> {
    let raw = raw.into();
    let keys = guarded.keys;
    for k in keys {
        // A CSV header without the key is a malformed extract; JSON rows
        // without it simply have a NULL key (dropped and counted downstream).
        // A file without columns (empty, or a header naming none it can
        // trust: its records are dead letters) has no row needing a key.
        if raw.text && !raw.columns.is_empty() && !raw.columns.contains(k) {
            return Err(ConformError::MissingKey { column: k.clone(), input: raw.source.clone() });
        }
    }
    let mut schema_types = declared::batch_types(raw.rows.iter().map(|r| &*r.declared), declared);
    // A message whose schema declares a float key is bad input, not the
    // table's type: the key is typed by the other messages (or its values),
    // and that message is a dead letter for declaring another type
    // (`declarations_refused`). Only `columns:` can make a float key, a
    // config error.
    schema_types.retain(|(n, t)| {
        *t != DType::Float || !keys.contains(n) || declared.iter().any(|(c, _)| c == n)
    });
    let plan = plan_columns(
        &raw,
        table,
        Declarations { configured: declared, schema: &schema_types },
        policy,
        guarded,
    );
    for (k, t) in &plan.columns {
        if keys.contains(k) && *t == DType::Float {
            return Err(ConformError::FloatKey { column: k.clone() });
        }
    }
    let (rows, dead) = type_rows(raw, &plan, table);
    let ColumnPlan { columns, new_columns, ignored_columns, untyped, widened, .. } = plan;
    Ok(Conformed { columns, new_columns, rows, dead, ignored_columns, untyped, widened })
}

/// Converts a cell of a key or sequence column: only to the same kind of
/// value (an integer column takes integers, a timestamp column timestamps),
/// never across kinds, which would change how values match and order. Text
/// columns take any value as text, and text cells (CSV) are read as values
/// first. Numbers: an integer may land in a float column, never the reverse.
fn convert_strict(v: Value, t: DType, text: bool) -> Result<Value, String> {
    let kind = match &v {
        Value::Str(s) if text => infer(s),
        // JSON text of a timestamp is a timestamp's kind (it typed the column).
        Value::Str(s) if t == DType::Ts && crate::value::looks_like_ts(s) => Some(DType::Ts),
        other => other.dtype(),
    };
    let same_kind = |k: DType| {
        std::mem::discriminant(&k) == std::mem::discriminant(&t)
            || (k == DType::Int && matches!(t, DType::Float | DType::Decimal { .. }))
            || (k == DType::Float && matches!(t, DType::Decimal { .. }) && exact_number(&v))
    };
    match (kind, t) {
        (None, _) | (_, DType::Str) => convert(v, t, text),
        (Some(k), t) if same_kind(k) => convert(v, t, text),
        (Some(k), t) => Err(format!(
            "a {} value in a {} column whose values keep their kind ({v})",
            k.name(),
            t.name()
        )),
    }
}

/// A JSON number with a fraction is a decimal column's kind where it is
/// known exactly: kept as its text (`Value::Number`), or a double of at
/// most 15 significant digits, which is its text. A longer double may have
/// been rounded when it was read (docs/types.md, JSON numbers): as a key
/// or sequence it is refused, never matched as another value. Asked only
/// of a double meeting a decimal column (its shortest text is formatted).
fn exact_number(v: &Value) -> bool {
    match v {
        Value::Number(_) => true,
        Value::Float(f) => crate::value::decimal::from_f64(*f).is_some_and(|(mut u, _)| {
            while u != 0 && u % 10 == 0 {
                u /= 10;
            }
            crate::value::decimal::digits(u) <= 15
        }),
        _ => false,
    }
}

/// A Debezium decimal sent without its schema (base64 Kafka Connect bytes)
/// as the value of the decimal column it lands in; anything else as is.
fn connect_bytes(v: Value, t: DType, table: TableShape) -> Value {
    use crate::value::decimal;
    match (v, t) {
        (Value::Str(s), DType::Decimal { scale, .. })
            if table.debezium && decimal::parse(&s).is_none() =>
        {
            match decimal::from_base64(&s) {
                Some(u) => Value::decimal(u, scale as i32),
                None => Value::Str(s),
            }
        }
        (v, _) => v,
    }
}

/// Columns of a table from an older version that store as integers what
/// this row declares a time of day: they take microseconds since midnight
/// (docs/types.md, tables from older versions).
fn legacy_time_columns(
    row: &[(String, crate::decode::Declared)],
    plan: &ColumnPlan,
    index: &HashMap<&str, usize>,
    exact: bool,
) -> Vec<usize> {
    if exact || row.is_empty() {
        return vec![];
    }
    row.iter()
        .filter(|(_, d)| *d == crate::decode::Declared::Exact(DType::Time))
        .filter_map(|(n, _)| index.get(n.as_str()).copied())
        .filter(|&i| plan.columns[i].1 == DType::Int)
        .collect()
}

/// Why a row's schema declarations do not fit the table, if they do not:
/// a type no Delta column holds, or a change of a stored column's type
/// ([`declared::compatible`]). Columns `columns:` declares take any
/// declaration (their values convert to the configured type or not).
fn declarations_refused(
    row: &[(String, crate::decode::Declared)],
    plan: &ColumnPlan,
    index: &HashMap<&str, usize>,
    exact: bool,
) -> Option<String> {
    for (name, d) in row {
        let Some(&i) = index.get(name.as_str()) else { continue };
        if plan.configured[i] {
            continue;
        }
        let stored = plan.columns[i].1;
        let refused = match declared::resolve(d, None) {
            Err(e) => Some(e),
            Ok(t) if !declared::compatible(d, t, stored, exact) => {
                Some(format!("declared {t}, but the table stores it as {stored} (a type change)"))
            }
            Ok(_) => None,
        };
        if let Some(e) = refused {
            return Some(format!("column `{name}`: {e}"));
        }
    }
    None
}

/// Converts every row's cells to their column's type. Typing is per row: on
/// all cores, rows and dead letters kept in input order. A row with a cell
/// that does not convert, a declared type the column cannot take, or a
/// value in a column a strict table does not know, is a dead letter. A
/// cell holding the source's unavailable-value placeholder is left NULL
/// and marked unavailable (the merge keeps the stored value).
fn type_rows(
    raw: Cow<'_, RawBatch>,
    plan: &ColumnPlan,
    table: TableShape,
) -> (Vec<TypedRow>, Vec<Unparsable>) {
    let index: HashMap<&str, usize> =
        plan.columns.iter().enumerate().map(|(i, (n, _))| (n.as_str(), i)).collect();
    let text = raw.text;
    // Kept rows (a batch its caller may retry) are copied piece by piece on
    // the pool; owned rows move.
    let (names, pieces): (Cow<'_, [String]>, Vec<Cow<'_, [RawRow]>>) = match raw {
        Cow::Owned(b) => (
            Cow::Owned(b.columns),
            crate::par::split(b.rows, 8).into_iter().map(Cow::Owned).collect(),
        ),
        Cow::Borrowed(b) => {
            let size = b.rows.len().div_ceil(8).max(1);
            (Cow::Borrowed(&b.columns[..]), b.rows.chunks(size).map(Cow::Borrowed).collect())
        }
    };
    let typer = Typer { plan, table, index: &index, names: &names, text };
    let parts = crate::par::par_map(pieces, |rows| {
        let (mut typed, mut dead_rows) = (Vec::with_capacity(rows.len()), vec![]);
        // The declarations last found to fit: messages of one schema are checked once.
        let mut accepted = crate::decode::DeclaredTypes::default();
        let mut one = |r: &RawRow, taken: Taken| match typer.row(r, taken, &mut accepted) {
            Ok(t) => typed.push(t),
            Err(d) => dead_rows.push(d),
        };
        match rows {
            Cow::Owned(rows) => {
                for mut r in rows {
                    // Moved, not copied. The raw text too: rows of a file share one
                    // buffer, whose reference count two cores would bump and drop
                    // for every row.
                    let taken = Taken {
                        cells: std::mem::take(&mut r.cells),
                        extra: std::mem::take(&mut r.extra),
                        raw: std::mem::take(&mut r.raw),
                    };
                    one(&r, taken);
                }
            }
            Cow::Borrowed(rows) => {
                for r in rows {
                    let taken = Taken {
                        cells: r.cells.clone(),
                        extra: r.extra.clone(),
                        raw: r.raw.clone(),
                    };
                    one(r, taken);
                }
            }
        }
        (typed, dead_rows)
    });
    let (mut rows, mut dead) = (vec![], vec![]);
    for (typed, d) in parts {
        rows.extend(typed);
        dead.extend(d);
    }
    (rows, dead)
}

/// What typing a row consumes: its cells, envelope fields and raw text,
/// moved out of an owned row or copied from a kept one.
struct Taken {
    cells: Vec<Value>,
    extra: crate::decode::Env,
    raw: crate::source::RawText,
}

/// Whether a cell already holds its column's type, so that typing would
/// return it unchanged: JSON and Avro cells mostly do. Text cells (CSV) are
/// always parsed, and text is not settled while the source has a
/// placeholder for unchanged values ([`Unavailable`]).
#[inline]
fn settled(v: &Value, t: DType, text: bool, placeholders: bool) -> bool {
    match (v, t) {
        (Value::Null, _) => true,
        (Value::Str(_), DType::Str) => !text && !placeholders,
        (Value::Bool(_), DType::Bool)
        | (Value::Int(_), DType::Int)
        | (Value::Float(_), DType::Float) => !text,
        // Within what Delta holds, else `convert` refuses it.
        (Value::Ts(us), DType::Ts) => !text && crate::value::temporal::TS_RANGE.contains(us),
        (Value::Date(d), DType::Date) => !text && crate::value::temporal::DATE_RANGE.contains(d),
        _ => false,
    }
}

/// Where a raw cell goes once typed.
enum Cell {
    /// Into its column.
    Typed(Value),
    /// Nowhere: the source left the value out ([`Unavailable`]); its
    /// column stays NULL until the merge fills in the stored value.
    Unavailable,
    /// Among the envelope fields: no column stores it.
    Extra(Value),
}

/// Types one row at a time against a batch's column plan.
struct Typer<'a> {
    plan: &'a ColumnPlan,
    table: TableShape<'a>,
    index: &'a HashMap<&'a str, usize>,
    /// The batch's raw column names.
    names: &'a [String],
    text: bool,
}

impl Typer<'_> {
    /// `r`'s cells (and envelope fields), typed: a row of the table, or the
    /// dead letter saying why not. `accepted`: the declarations last found
    /// to fit.
    fn row(
        &self,
        r: &RawRow,
        Taken { cells, mut extra, raw }: Taken,
        accepted: &mut crate::decode::DeclaredTypes,
    ) -> Result<TypedRow, Unparsable> {
        let (plan, table, names, text) = (self.plan, self.table, self.names, self.text);
        let columns = &plan.columns;
        let (target, refused) = (&plan.target, &plan.refused);
        let dead = |reason: &'static str, error: String| Unparsable {
            partition: r.partition,
            pos: r.pos,
            raw: raw.as_bytes().to_vec(),
            error,
            reason,
        };
        for refused in refused {
            if cells.get(refused.column).is_some_and(|c| !c.is_null()) {
                return Err(dead("schema", refused.why.clone()));
            }
        }
        // Rows of one schema share their declarations: a pointer compare.
        if !r.declared.is_empty() && !r.declared.ptr_eq(accepted) && r.declared != *accepted {
            if let Some(e) = declarations_refused(&r.declared, plan, self.index, table.exact) {
                return Err(dead("type", e));
            }
            *accepted = r.declared.clone();
        }
        let legacy_times = legacy_time_columns(&r.declared, plan, self.index, table.exact);
        let typed = |ci: usize, mut v: Value| -> Result<Cell, Unparsable> {
            let Some(i) = target[ci] else { return Ok(Cell::Extra(v)) };
            if let Value::Str(s) = &v {
                if legacy_times.contains(&i) {
                    if let Some(us) = crate::value::temporal::parse_time(s) {
                        v = Value::Int(us);
                    }
                }
            }
            if table.unavailable.is_some_and(|u| u.matches(&v)) && !plan.strict_kind[i] {
                return Ok(Cell::Unavailable);
            }
            let t = columns[i].1;
            let v = if plan.strict_kind[i] {
                convert_strict(v, t, text)
            } else {
                convert(connect_bytes(v, t, table), t, text)
            };
            v.map(Cell::Typed).map_err(|e| dead("type", format!("column `{}`: {e}", columns[i].0)))
        };
        let mut unavailable = vec![];
        let data = if plan.in_place && cells.len() <= target.len() {
            // Cell ci is column ci: typed where it stands, the row's
            // vector becomes its data (a second vector per row, written
            // cell by cell, was half of conforming a narrow batch); the
            // columns past its last cell are NULL.
            let mut data = cells;
            let placeholders = table.unavailable.is_some();
            for (i, slot) in data.iter_mut().enumerate() {
                if settled(slot, columns[i].1, text, placeholders) {
                    continue;
                }
                match typed(i, std::mem::replace(slot, Value::Null))? {
                    Cell::Typed(v) => *slot = v,
                    Cell::Unavailable => unavailable.push(i),
                    Cell::Extra(_) => unreachable!("every cell has its column"),
                }
            }
            data
        } else {
            // As wide as the row (its cells mostly land in as many
            // columns), grown for a cell whose column lies further on.
            let mut data = vec![Value::Null; cells.len().min(columns.len())];
            // A NULL cell changes nothing: its column is NULL already, and
            // an envelope field no column stores reads as NULL when absent
            // (under `ignore`, a message's unknown fields were one NULL
            // field per row of its batch).
            for (ci, v) in cells.into_iter().enumerate().filter(|(_, v)| !v.is_null()) {
                match typed(ci, v)? {
                    Cell::Typed(v) => {
                        set_cell(&mut data, target[ci].expect("typed cells have a column"), v)
                    }
                    Cell::Unavailable => {
                        // Present in the row, NULL until the merge fills it.
                        let i = target[ci].expect("a column");
                        set_cell(&mut data, i, Value::Null);
                        unavailable.push(i);
                    }
                    Cell::Extra(v) => extra.push((names[ci].as_str().into(), v)),
                }
            }
            data
        };
        Ok(TypedRow {
            data,
            pos: r.pos,
            partition: r.partition,
            raw,
            extra,
            replayed: r.replayed,
            unavailable,
        })
    }
}

/// Looks up a column or dotted path for predicates: typed value if stored,
/// else the raw cell (text cells typed by inference).
pub fn lookup(columns: &[(String, DType)], row: &TypedRow, text: bool, path: &[String]) -> Value {
    // Runs per row and predicate column: the path is matched, not joined.
    if let Some(i) = columns.iter().position(|(n, _)| is_path(n, path)) {
        return cell(&row.data, i).clone();
    }
    match row.extra.iter().find(|(n, _)| is_path(n, path)) {
        Some((_, Value::Str(s))) if text => {
            infer(s).and_then(|t| parse_as(s, t)).unwrap_or(Value::Null)
        }
        Some((_, v)) => v.clone(),
        None => Value::Null,
    }
}

/// Whether `name` is `path` joined with dots (`a.b` for `["a", "b"]`).
fn is_path(name: &str, path: &[String]) -> bool {
    let mut rest = name;
    for (i, segment) in path.iter().enumerate() {
        let after_dot = if i == 0 { Some(rest) } else { rest.strip_prefix('.') };
        match after_dot.and_then(|r| r.strip_prefix(segment.as_str())) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests;
