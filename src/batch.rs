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
    table: &[(String, DType)],
    declared: &[(String, DType)],
    policy: SchemaPolicy,
    keys: &[String],
) -> Result<Conformed, ConformError> {
    for k in keys {
        // A CSV header without the key is a malformed extract; JSON rows
        // without it simply have a NULL key (dropped and counted downstream).
        if raw.text && !raw.columns.contains(k) {
            return Err(ConformError::MissingKey { column: k.clone(), input: raw.source });
        }
    }
    let plan = plan_columns(&raw, table, declared, policy);
    for (k, t) in &plan.columns {
        if keys.contains(k) && *t == DType::Float {
            return Err(ConformError::FloatKey { column: k.clone() });
        }
    }
    let (rows, dead) = type_rows(raw, &plan);
    let ColumnPlan { columns, new_columns, ignored_columns, .. } = plan;
    Ok(Conformed { columns, new_columns, rows, dead, ignored_columns })
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
}

/// Existing columns keep their type; a new column takes its declared type,
/// or the type its cells infer to (string if none), unless the policy
/// ignores or refuses new columns of an existing table.
fn plan_columns(
    raw: &RawBatch,
    table: &[(String, DType)],
    declared: &[(String, DType)],
    policy: SchemaPolicy,
) -> ColumnPlan {
    let mut plan = ColumnPlan {
        columns: table.to_vec(),
        new_columns: vec![],
        ignored_columns: vec![],
        target: vec![],
        unknown_strict: vec![],
    };
    let table_exists = !table.is_empty();
    for (ci, name) in raw.columns.iter().enumerate() {
        if let Some(i) = plan.columns.iter().position(|(n, _)| n == name) {
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
        let t = declared.iter().find(|(n, _)| n == name).map(|(_, t)| *t).unwrap_or_else(|| {
            raw.rows
                .iter()
                .fold(None, |acc, r| unify(acc, cell_type(&r.cells[ci], raw.text)))
                .unwrap_or(DType::Str)
        });
        plan.target.push(Some(plan.columns.len()));
        plan.columns.push((name.clone(), t));
        plan.new_columns.push((name.clone(), t));
    }
    plan
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
            &table,
            &[],
            SchemaPolicy::Additive,
            &["id".into()],
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
            &table,
            &[],
            SchemaPolicy::Additive,
            &["id".into()],
        )
        .unwrap();
        assert_eq!(c.rows[0].data[1], Value::Str("01067".into()));
    }

    #[test]
    fn schema_unconvertible_value_is_dead_lettered_rest_continues() {
        let table = vec![("id".to_string(), DType::Int), ("seq".to_string(), DType::Int)];
        let c = conform(
            raw(&["id", "seq"], &[&["1", "x"], &["2", "3"]]),
            &table,
            &[],
            SchemaPolicy::Additive,
            &["id".into()],
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
            &table,
            &[],
            SchemaPolicy::Ignore,
            &["id".into()],
        )
        .unwrap();
        assert_eq!(c.columns.len(), 1);
        assert_eq!(c.ignored_columns, vec!["x"]);
        assert_eq!(c.rows.len(), 1);
        let s = conform(
            raw(&["id", "x"], &[&["1", "a"], &["2", ""]]),
            &table,
            &[],
            SchemaPolicy::Strict,
            &["id".into()],
        )
        .unwrap();
        assert_eq!(s.dead.len(), 1);
        assert_eq!(s.rows.len(), 1);
    }

    #[test]
    fn schema_missing_key_column_is_an_error() {
        assert!(conform(
            raw(&["city"], &[&["x"]]),
            &[],
            &[],
            SchemaPolicy::Additive,
            &["id".into()]
        )
        .is_err());
    }

    #[test]
    fn json_rows_without_the_key_column_are_null_keys_not_an_error() {
        let mut b = raw(&["city"], &[&["x"]]);
        b.text = false;
        let c = conform(
            b,
            &[("id".to_string(), DType::Int)],
            &[],
            SchemaPolicy::Additive,
            &["id".into()],
        )
        .unwrap();
        assert!(c.rows[0].data[0].is_null());
    }

    #[test]
    fn schema_float_business_key_is_rejected_once_known() {
        let e =
            conform(raw(&["id"], &[&["1.5"]]), &[], &[], SchemaPolicy::Additive, &["id".into()])
                .unwrap_err();
        assert!(matches!(e, ConformError::FloatKey { .. }));
        assert!(e.to_string().contains("float"));
    }
}
