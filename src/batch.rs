//! From a raw batch to typed rows aligned with the table's columns (docs/schema.md).
//!
//! Existing columns keep their stored type and incoming cells are converted to
//! it; only genuinely new columns are typed by declaration or inference. A cell
//! that cannot be converted sends its row to the dead-letter table with the
//! reason, and the rest of the batch goes on.

use crate::config::SchemaPolicy;
use crate::source::{RawBatch, Unparsable};
use crate::value::{infer, parse_as, unify, DType, Value};

#[derive(Debug)]
pub struct TypedRow {
    pub data: Vec<Value>,
    pub pos: u64,
    pub partition: i32,
    pub raw: String,
    /// Raw cells of columns not stored in the table (still visible to predicates).
    pub extra: Vec<(String, Value)>,
    pub replayed: bool,
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
}

/// The table a batch is typed against: its columns, and those of them that
/// have no type yet.
#[derive(Debug, Clone, Copy)]
pub struct TableShape<'a> {
    pub columns: &'a [(String, DType)],
    pub untyped: &'a std::collections::BTreeSet<String>,
}

/// The columns whose kind of value must never change: the business key and
/// the `sequence_by` columns (as stored), which decide identity and order.
#[derive(Debug, Clone, Copy)]
pub struct Guarded<'a> {
    pub keys: &'a [String],
    pub sequence: &'a [String],
}

fn cell_type(v: &Value, text: bool) -> Option<DType> {
    match v {
        Value::Str(s) if text => infer(s),
        other => other.dtype(),
    }
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
    /// A business key typed float: the config's key does not fit the data.
    #[error("business key column `{column}` has type float; floating-point business keys have no stable identity")]
    FloatKey { column: String },
}

pub fn conform(
    raw: RawBatch,
    table: TableShape,
    declared: &[(String, DType)],
    policy: SchemaPolicy,
    guarded: Guarded,
) -> Result<Conformed, ConformError> {
    let keys = guarded.keys;
    for k in keys {
        // A CSV header without the key is a malformed extract; JSON rows
        // without it simply have a NULL key (dropped and counted downstream).
        if raw.text && !raw.columns.contains(k) {
            return Err(ConformError::MissingKey { column: k.clone(), input: raw.source });
        }
    }
    let plan = plan_columns(&raw, table, declared, policy, guarded);
    for (k, t) in &plan.columns {
        if keys.contains(k) && *t == DType::Float {
            return Err(ConformError::FloatKey { column: k.clone() });
        }
    }
    let (rows, dead) = type_rows(raw, &plan);
    let ColumnPlan { columns, new_columns, ignored_columns, untyped, .. } = plan;
    Ok(Conformed { columns, new_columns, rows, dead, ignored_columns, untyped })
}

/// Where each raw column of a batch goes, and the table's columns after it.
struct ColumnPlan {
    /// The table's columns, then the new ones.
    columns: Vec<(String, DType)>,
    new_columns: Vec<(String, DType)>,
    ignored_columns: Vec<String>,
    /// Per raw column: its index in `columns`, or None (dropped / unknown).
    target: Vec<Option<usize>>,
    /// Raw columns unknown to a `schema_policy: strict` table.
    unknown_strict: Vec<usize>,
    /// New columns without a non-NULL value yet.
    untyped: Vec<String>,
    /// Per column of `columns`: values must keep their kind (see [`Guarded`]).
    strict_kind: Vec<bool>,
}

/// Existing columns keep their type; a new column takes its declared type,
/// or the type its cells infer to, unless the policy ignores or refuses new
/// columns of an existing table. A new column with only NULLs has no type
/// yet and is left out; a key or sequence column takes the kind of its first
/// value (docs/schema.md, how a column gets its type).
fn plan_columns(
    raw: &RawBatch,
    table: TableShape,
    declared: &[(String, DType)],
    policy: SchemaPolicy,
    guarded: Guarded,
) -> ColumnPlan {
    let mut plan = ColumnPlan {
        columns: table.columns.to_vec(),
        new_columns: vec![],
        ignored_columns: vec![],
        target: vec![],
        unknown_strict: vec![],
        untyped: vec![],
        strict_kind: vec![],
    };
    let table_exists = !table.columns.is_empty();
    // A column's type from this batch: declared, else inferred (None: only NULLs).
    let type_of = |ci: usize, name: &String| -> Option<DType> {
        let kinds = raw.rows.iter().filter_map(|r| cell_type(&r.cells[ci], raw.text));
        match declared.iter().find(|(n, _)| n == name) {
            Some((_, t)) => Some(*t),
            // The first value's kind; a float never types a key (a float key
            // value, or an integer beyond 64 bits, is then a dead letter).
            None if guarded.keys.contains(name) => {
                let mut kinds = kinds.peekable();
                let any = kinds.peek().is_some();
                kinds.find(|&t| t != DType::Float).or(any.then_some(DType::Int))
            }
            None if guarded.sequence.contains(name) => kinds.take(1).next(),
            None => kinds.fold(None, |acc, t| unify(acc, Some(t))),
        }
    };
    for (ci, name) in raw.columns.iter().enumerate() {
        if let Some(i) = plan.columns.iter().position(|(n, _)| n == name) {
            if table.untyped.contains(name) {
                // No type yet: its first values (if any here) decide it.
                match type_of(ci, name) {
                    Some(t) => plan.columns[i].1 = t,
                    None => plan.untyped.push(name.clone()),
                }
            }
            plan.target.push(Some(i));
            continue;
        }
        if table_exists && policy == SchemaPolicy::Ignore {
            plan.ignored_columns.push(name.clone());
            plan.target.push(None);
            continue;
        }
        if table_exists && policy == SchemaPolicy::Strict {
            plan.unknown_strict.push(ci);
            plan.target.push(None);
            continue;
        }
        let t = match type_of(ci, name) {
            Some(t) => t,
            // A key without values yet: the table cannot exist yet (no row has a key).
            None if guarded.keys.contains(name) => {
                plan.target.push(None);
                continue;
            }
            // Provisional text in the schema, in no file, until values arrive.
            None => {
                plan.untyped.push(name.clone());
                DType::Str
            }
        };
        plan.target.push(Some(plan.columns.len()));
        plan.columns.push((name.clone(), t));
        plan.new_columns.push((name.clone(), t));
    }
    // Untyped columns this batch does not mention stay untyped.
    for u in table.untyped {
        if !raw.columns.contains(u) {
            plan.untyped.push(u.clone());
        }
    }
    plan.strict_kind = plan
        .columns
        .iter()
        .map(|(n, _)| guarded.keys.contains(n) || guarded.sequence.contains(n))
        .collect();
    plan
}

/// Converts a cell of a key or sequence column: only to the same kind of
/// value (an integer column takes integers, a timestamp column timestamps),
/// never across kinds, which would change how values match and order. Text
/// columns take any value as text, and text cells (CSV) are read as values
/// first. Numbers: an integer may land in a float column, never the reverse.
fn convert_strict(v: Value, t: DType, text: bool) -> Result<Value, String> {
    let kind = match &v {
        Value::Str(s) if text => infer(s),
        other => other.dtype(),
    };
    match (kind, t) {
        (None, _) | (_, DType::Str) => convert(v, t, text),
        (Some(k), t) if k == t || (k == DType::Int && t == DType::Float) => convert(v, t, text),
        (Some(k), t) => Err(format!(
            "a {} value in a {} column whose values keep their kind ({v})",
            k.name(),
            t.name()
        )),
    }
}

/// Converts every row's cells to their column's type. Typing is per row: on
/// all cores, rows and dead letters kept in input order. A row with a cell
/// that does not convert, or a value in a column a strict table does not
/// know, is a dead letter.
fn type_rows(raw: RawBatch, plan: &ColumnPlan) -> (Vec<TypedRow>, Vec<Unparsable>) {
    let columns = &plan.columns;
    let (target, unknown_strict) = (&plan.target, &plan.unknown_strict);
    let (names, text) = (&raw.columns, raw.text);
    let parts = crate::par::par_map(crate::par::split(raw.rows, 8), |rows| {
        let (mut typed, mut dead_rows) = (Vec::with_capacity(rows.len()), vec![]);
        'rows: for r in rows {
            let mut data = vec![Value::Null; columns.len()];
            let mut extra = r.extra;
            let dead = |reason: &'static str, error: String| Unparsable {
                partition: r.partition,
                pos: r.pos,
                raw: r.raw.clone().into_bytes(),
                error,
                reason,
            };
            for &ci in unknown_strict {
                if !r.cells[ci].is_null() {
                    dead_rows.push(dead(
                        "schema",
                        format!("unknown column `{}` (schema_policy: strict)", names[ci]),
                    ));
                    continue 'rows;
                }
            }
            for (ci, v) in r.cells.into_iter().enumerate() {
                match target[ci] {
                    Some(i) if plan.strict_kind[i] => match convert_strict(v, columns[i].1, text) {
                        Ok(v) => data[i] = v,
                        Err(e) => {
                            dead_rows.push(dead("type", format!("column `{}`: {e}", columns[i].0)));
                            continue 'rows;
                        }
                    },
                    Some(i) => match convert(v, columns[i].1, text) {
                        Ok(v) => data[i] = v,
                        Err(e) => {
                            dead_rows.push(dead("type", format!("column `{}`: {e}", columns[i].0)));
                            continue 'rows;
                        }
                    },
                    None => extra.push((names[ci].clone(), v)),
                }
            }
            typed.push(TypedRow {
                data,
                pos: r.pos,
                partition: r.partition,
                raw: r.raw,
                extra,
                replayed: r.replayed,
            });
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

/// Looks up a column or dotted path for predicates: typed value if stored,
/// else the raw cell (text cells typed by inference).
pub fn lookup(columns: &[(String, DType)], row: &TypedRow, text: bool, path: &[String]) -> Value {
    let name = path.join(".");
    if let Some(i) = columns.iter().position(|(n, _)| *n == name) {
        return row.data[i].clone();
    }
    match row.extra.iter().find(|(n, _)| *n == name) {
        Some((_, Value::Str(s))) if text => {
            infer(s).and_then(|t| parse_as(s, t)).unwrap_or(Value::Null)
        }
        Some((_, v)) => v.clone(),
        None => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::RawRow;

    fn raw(cols: &[&str], rows: &[&[&str]]) -> RawBatch {
        RawBatch {
            source: "t.csv".into(),
            columns: cols.iter().map(|c| c.to_string()).collect(),
            rows: rows
                .iter()
                .enumerate()
                .map(|(i, r)| RawRow {
                    cells: r
                        .iter()
                        .map(|c| if c.is_empty() { Value::Null } else { Value::Str(c.to_string()) })
                        .collect(),
                    pos: i as u64,
                    partition: 0,
                    raw: r.join(","),
                    extra: vec![],
                    replayed: false,
                })
                .collect(),
            text: true,
            ..Default::default()
        }
    }

    #[test]
    fn schema_additive_adds_new_columns_and_types_them() {
        let table = vec![("id".to_string(), DType::Int)];
        let c = conform(
            raw(&["id", "city", "amount"], &[&["1", "Bonn", "2"], &["2", "", "2.5"]]),
            shape(&table),
            &[],
            SchemaPolicy::Additive,
            guard(&["id".into()]),
        )
        .unwrap();
        assert_eq!(
            c.new_columns,
            vec![("city".to_string(), DType::Str), ("amount".to_string(), DType::Float)]
        );
        assert!(c.rows[1].data[1].is_null());
    }

    #[test]
    fn schema_existing_column_type_wins_over_inference() {
        let table = vec![("id".to_string(), DType::Int), ("zip".to_string(), DType::Str)];
        let c = conform(
            raw(&["id", "zip"], &[&["1", "01067"]]),
            shape(&table),
            &[],
            SchemaPolicy::Additive,
            guard(&["id".into()]),
        )
        .unwrap();
        assert_eq!(c.rows[0].data[1], Value::Str("01067".into()));
    }

    #[test]
    fn schema_unconvertible_value_is_dead_lettered_rest_continues() {
        let table = vec![("id".to_string(), DType::Int), ("seq".to_string(), DType::Int)];
        let c = conform(
            raw(&["id", "seq"], &[&["1", "x"], &["2", "3"]]),
            shape(&table),
            &[],
            SchemaPolicy::Additive,
            guard(&["id".into()]),
        )
        .unwrap();
        assert_eq!(c.rows.len(), 1);
        assert_eq!(c.dead.len(), 1);
        assert!(c.dead[0].error.contains("seq"));
    }

    #[test]
    fn schema_ignore_drops_new_columns_strict_dead_letters_them() {
        let table = vec![("id".to_string(), DType::Int)];
        let c = conform(
            raw(&["id", "x"], &[&["1", "a"]]),
            shape(&table),
            &[],
            SchemaPolicy::Ignore,
            guard(&["id".into()]),
        )
        .unwrap();
        assert_eq!(c.columns.len(), 1);
        assert_eq!(c.ignored_columns, vec!["x"]);
        assert_eq!(c.rows.len(), 1);
        let s = conform(
            raw(&["id", "x"], &[&["1", "a"], &["2", ""]]),
            shape(&table),
            &[],
            SchemaPolicy::Strict,
            guard(&["id".into()]),
        )
        .unwrap();
        assert_eq!(s.dead.len(), 1);
        assert_eq!(s.rows.len(), 1);
    }

    #[test]
    fn schema_missing_key_column_is_an_error() {
        assert!(conform(
            raw(&["city"], &[&["x"]]),
            shape(&[]),
            &[],
            SchemaPolicy::Additive,
            guard(&["id".into()])
        )
        .is_err());
    }

    #[test]
    fn json_rows_without_the_key_column_are_null_keys_not_an_error() {
        let mut b = raw(&["city"], &[&["x"]]);
        b.text = false;
        let c = conform(
            b,
            shape(&[("id".to_string(), DType::Int)]),
            &[],
            SchemaPolicy::Additive,
            guard(&["id".into()]),
        )
        .unwrap();
        assert!(c.rows[0].data[0].is_null());
    }

    static NO_UNTYPED: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();

    fn shape(columns: &[(String, DType)]) -> TableShape<'_> {
        TableShape { columns, untyped: &NO_UNTYPED }
    }

    fn guard(keys: &[String]) -> Guarded<'_> {
        Guarded { keys, sequence: &[] }
    }

    #[test]
    fn schema_a_float_business_key_is_refused_only_when_declared() {
        let keys = ["id".to_string()];
        let declared = [("id".to_string(), DType::Float)];
        let e = conform(
            raw(&["id"], &[&["1.5"]]),
            shape(&[]),
            &declared,
            SchemaPolicy::Additive,
            guard(&keys),
        )
        .unwrap_err();
        assert!(matches!(e, ConformError::FloatKey { .. }));
        assert!(e.to_string().contains("float"));
        // Inferred: a float value never types a key; its row is a dead letter.
        let c = conform(
            raw(&["id"], &[&["1.5"], &["2"]]),
            shape(&[]),
            &[],
            SchemaPolicy::Additive,
            guard(&keys),
        )
        .unwrap();
        assert_eq!(c.columns, vec![("id".to_string(), DType::Int)]);
        assert_eq!((c.rows.len(), c.dead.len(), c.dead[0].reason), (1, 1, "type"));
    }

    /// docs/schema.md: key and sequence columns keep the kind they started with.
    #[test]
    fn schema_key_and_sequence_columns_keep_their_kind() {
        let keys = ["id".to_string()];
        let seq = ["lsn".to_string()];
        let g = Guarded { keys: &keys, sequence: &seq };
        let mut b =
            raw(&["id", "lsn", "note"], &[&["1", "9", "a"], &["2", "10", "3"], &["3", "x", "b"]]);
        b.text = true;
        let c = conform(b, shape(&[]), &[], SchemaPolicy::Additive, g).unwrap();
        let types: Vec<DType> = c.columns.iter().map(|(_, t)| *t).collect();
        // `note` mixes kinds and is no key or sequence: it widens to text.
        assert_eq!(types, vec![DType::Int, DType::Int, DType::Str]);
        assert_eq!(c.rows.len(), 2);
        assert_eq!(c.dead.len(), 1);
        assert!(c.dead[0].error.contains("lsn"), "{}", c.dead[0].error);
        // JSON values: a huge integer arrives as a float, a string among integers stays odd.
        let json = |cells: Vec<Vec<Value>>| RawBatch {
            source: "t".into(),
            columns: vec!["id".into(), "lsn".into()],
            rows: cells
                .into_iter()
                .enumerate()
                .map(|(i, cells)| crate::source::RawRow {
                    cells,
                    pos: i as u64,
                    partition: 0,
                    raw: String::new(),
                    extra: vec![],
                    replayed: false,
                })
                .collect(),
            text: false,
            ..Default::default()
        };
        let c = conform(
            json(vec![
                vec![Value::Float(1e23), Value::Int(1)],
                vec![Value::Int(7), Value::Int(2)],
                vec![Value::Int(8), Value::Str("not-a-number".into())],
                vec![Value::Int(9), Value::Float(3.5)],
            ]),
            shape(&[]),
            &[],
            SchemaPolicy::Additive,
            g,
        )
        .unwrap();
        assert_eq!(
            c.columns,
            vec![("id".to_string(), DType::Int), ("lsn".to_string(), DType::Int)]
        );
        let kept: Vec<&Value> = c.rows.iter().map(|r| &r.data[0]).collect();
        assert_eq!(kept, vec![&Value::Int(7)]);
        assert_eq!(c.dead.len(), 3);
        assert!(c.dead.iter().all(|d| d.reason == "type"));
    }

    /// docs/schema.md, no type yet: an all-NULL new column is provisional
    /// text, listed as untyped, until its first values type it.
    #[test]
    fn schema_a_column_with_only_nulls_has_no_type_yet() {
        let keys = ["id".to_string()];
        let c = conform(
            raw(&["id", "seq"], &[&["1", ""], &["2", ""]]),
            shape(&[]),
            &[],
            SchemaPolicy::Additive,
            guard(&keys),
        )
        .unwrap();
        assert_eq!(
            c.columns,
            vec![("id".to_string(), DType::Int), ("seq".to_string(), DType::Str)]
        );
        assert_eq!(c.untyped, vec!["seq".to_string()]);
        assert_eq!(c.rows.len(), 2);
        // Its first values type it, in the same table; one it does not mention stays untyped.
        let table = c.columns.clone();
        let untyped: std::collections::BTreeSet<String> =
            ["seq".to_string(), "note".to_string()].into();
        let mut table2 = table.clone();
        table2.push(("note".to_string(), DType::Str));
        let c = conform(
            raw(&["id", "seq"], &[&["1", "4"], &["2", "11"]]),
            TableShape { columns: &table2, untyped: &untyped },
            &[],
            SchemaPolicy::Additive,
            guard(&keys),
        )
        .unwrap();
        assert_eq!(c.columns[1], ("seq".to_string(), DType::Int));
        assert_eq!(c.rows[1].data[1], Value::Int(11));
        assert_eq!(c.untyped, vec!["note".to_string()]);
        // A declared column is typed even when NULL; a key without values is left out.
        let declared = [("seq".to_string(), DType::Int)];
        let c = conform(
            raw(&["id", "seq"], &[&["", ""]]),
            shape(&[]),
            &declared,
            SchemaPolicy::Additive,
            guard(&keys),
        )
        .unwrap();
        assert_eq!(c.columns, vec![("seq".to_string(), DType::Int)]);
        assert!(c.untyped.is_empty());
    }
}
