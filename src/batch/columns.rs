//! Which table columns a batch writes to, and their types: existing
//! columns keep theirs, new ones take a declaration or what their cells
//! infer to (docs/schema.md, "How a column gets its type"). Planned once
//! per batch, before any row is typed ([`super::type_rows`]).

use std::collections::HashMap;

use super::{declared, Guarded, TableShape};
use crate::config::SchemaPolicy;
use crate::source::RawBatch;
use crate::value::{infer, unify, DType, Value};

/// The type a cell infers to: text cells of CSV by their content, JSON
/// text that is a timestamp as one (docs/schema.md: flat JSON infers
/// timestamps as CSV does; its numbers and booleans are typed already).
fn cell_type(v: &Value, text: bool) -> Option<DType> {
    match v {
        Value::Str(s) if text => infer(s),
        Value::Str(s) if crate::value::looks_like_ts(s) => Some(DType::Ts),
        // Only a VariableScaleDecimal without its schema brings a decimal
        // without a declaration: its column takes that rule's type.
        Value::Decimal(..) => {
            declared::resolve(&crate::decode::Declared::VariableScaleDecimal, None).ok()
        }
        other => other.dtype(),
    }
}

/// The declared types a batch is planned with: the config's `columns:`
/// (they win) and the batch's schema declarations ([`declared::batch_types`]).
#[derive(Clone, Copy)]
pub(super) struct Declarations<'a> {
    pub(super) configured: &'a [(String, DType)],
    pub(super) schema: &'a [(String, DType)],
}

impl Declarations<'_> {
    pub(super) fn configured(&self, name: &str) -> Option<DType> {
        self.configured.iter().find(|(n, _)| n == name).map(|(_, t)| *t)
    }

    pub(super) fn of(&self, name: &str) -> Option<DType> {
        self.configured(name)
            .or_else(|| self.schema.iter().find(|(n, _)| n == name).map(|(_, t)| *t))
    }
}

/// Where each raw column of a batch goes, and the table's columns after it.
pub(super) struct ColumnPlan {
    /// The table's columns, then the new ones.
    pub(super) columns: Vec<(String, DType)>,
    pub(super) new_columns: Vec<(String, DType)>,
    pub(super) ignored_columns: Vec<String>,
    /// Per raw column: its index in `columns`, or None (dropped / unknown).
    pub(super) target: Vec<Option<usize>>,
    /// Raw columns the table does not take: unknown to a `schema_policy:
    /// strict` table, or named as another column is (see [`Taken`]). A row
    /// with a value in one is a dead letter.
    pub(super) refused: Vec<Refused>,
    /// New columns without a non-NULL value yet.
    pub(super) untyped: Vec<String>,
    /// Per column of `columns`: values must keep their kind (see [`Guarded`]).
    pub(super) strict_kind: Vec<bool>,
    /// Per column of `columns`: `columns:` declares it (its values convert
    /// to it whatever their schema says).
    pub(super) configured: Vec<bool>,
    pub(super) widened: Vec<(String, DType)>,
    /// Raw column ci is column ci for every raw column: rows are typed in
    /// their own vectors.
    pub(super) in_place: bool,
}

/// Existing columns keep their type (a decimal may widen); a new column
/// takes its declared type, or the type its cells infer to, unless the
/// policy ignores or refuses new columns of an existing table. A new column
/// with only NULLs and no declaration has no type yet and is left out; a
/// key or sequence column takes the kind of its first value (docs/schema.md,
/// how a column gets its type).
pub(super) fn plan_columns(
    raw: &RawBatch,
    table: TableShape,
    declared: Declarations,
    policy: SchemaPolicy,
    guarded: Guarded,
) -> ColumnPlan {
    let mut plan = ColumnPlan {
        columns: table.columns.to_vec(),
        new_columns: vec![],
        ignored_columns: vec![],
        target: vec![],
        refused: vec![],
        untyped: vec![],
        strict_kind: vec![],
        configured: vec![],
        widened: vec![],
        in_place: false,
    };
    let table_exists = !table.columns.is_empty();
    let stored: HashMap<&str, usize> =
        table.columns.iter().enumerate().map(|(i, (n, _))| (n.as_str(), i)).collect();
    // A column needs its cells' kinds when it has no type yet (new, or
    // stored untyped) and none is declared; a batch's columns are then
    // inferred in one pass over its rows (a pass per column was columns x
    // rows: a wide row made a batch of narrow rows scan thousands of times).
    let wants = |name: &String| match stored.get(name.as_str()) {
        Some(_) => table.untyped.contains(name),
        None => !table_exists || policy == SchemaPolicy::Additive,
    };
    let mut inferred: Vec<Option<Inference>> = (raw.columns.iter())
        .map(|name| {
            (declared.of(name).is_none() && wants(name)).then(|| Inference::new(name, guarded))
        })
        .collect();
    if inferred.iter().any(Option::is_some) {
        // The unavailable-value placeholder (TOAST) is no value: a column
        // it alone fills stays untyped (docs/types.md), never text. Key
        // and sequence columns take it as data, as typing does.
        let placeholder = |inf: &Inference, c: &Value| {
            matches!(inf, Inference::Values(_)) && table.unavailable.is_some_and(|u| u.matches(c))
        };
        for r in &raw.rows {
            for (slot, c) in inferred.iter_mut().zip(&r.cells) {
                if let Some(inf) = slot.as_mut().filter(|inf| !inf.settled()) {
                    if !placeholder(inf, c) {
                        inf.add(cell_type(c, raw.text));
                    }
                }
            }
        }
    }
    // A column's type from this batch: declared, else inferred (None: only NULLs).
    let type_of = |ci: usize, name: &String| -> Option<DType> {
        declared.of(name).or_else(|| inferred[ci].as_ref().and_then(Inference::result))
    };
    // Built at the first new column: most batches of a table bring none.
    let mut taken: Option<Taken> = None;
    for (ci, name) in raw.columns.iter().enumerate() {
        if let Some(&i) = stored.get(name.as_str()) {
            let stored = plan.columns[i].1;
            if table.untyped.contains(name) {
                // No type yet: its first values (if any here) decide it.
                match type_of(ci, name) {
                    Some(t) => plan.columns[i].1 = t,
                    None => plan.untyped.push(name.clone()),
                }
            } else if let Some(t) = declared.of(name) {
                if let Some(w) = declared::widened(stored, t) {
                    plan.columns[i].1 = w;
                    plan.widened.push((name.clone(), w));
                } else if t != stored && t.storage() == stored {
                    // A declared time of day in its text column: values are
                    // checked and written as times.
                    plan.columns[i].1 = t;
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
            let why = format!("unknown column `{name}` (schema_policy: strict)");
            plan.refused.push(Refused { column: ci, why });
            plan.target.push(None);
            continue;
        }
        let taken = taken.get_or_insert_with(|| Taken::of(&plan.columns, table.written, guarded));
        if let Some(why) = taken.clash(name) {
            plan.refused.push(Refused { column: ci, why });
            plan.target.push(None);
            continue;
        }
        let t = match type_of(ci, name) {
            Some(t) => t,
            // Provisional text in the schema, in no file, until values
            // arrive. A key column too: a composite key with some NULL
            // parts is a key (docs/batch.md), so the other parts' values
            // create the table (the engine drops the batch as NULL keys
            // only when every key column is without values).
            None => {
                plan.untyped.push(name.clone());
                DType::Str
            }
        };
        plan.target.push(Some(plan.columns.len()));
        plan.columns.push((name.clone(), t));
        plan.new_columns.push((name.clone(), t));
        taken.insert(name);
    }
    // A key column no row of a new table's first batch mentions is NULL
    // in every row, as if each row sent it NULL.
    if !table_exists {
        for k in guarded.keys {
            if !plan.columns.iter().any(|(n, _)| n == k) {
                plan.untyped.push(k.clone());
                plan.columns.push((k.clone(), DType::Str));
                plan.new_columns.push((k.clone(), DType::Str));
            }
        }
    }
    // Untyped columns this batch does not mention stay untyped.
    for u in table.untyped {
        if !raw.columns.contains(u) {
            plan.untyped.push(u.clone());
        }
    }
    plan.in_place = plan.target.iter().enumerate().all(|(ci, t)| *t == Some(ci));
    plan.configured = plan.columns.iter().map(|(n, _)| declared.configured(n).is_some()).collect();
    // A configured type is the user's word: values convert to it.
    plan.strict_kind = (plan.columns.iter().zip(&plan.configured))
        .map(|((n, _), &conf)| !conf && (guarded.keys.contains(n) || guarded.sequence.contains(n)))
        .collect();
    plan
}

/// A raw column the table does not take, and why (the dead letter's error).
pub(super) struct Refused {
    pub(super) column: usize,
    pub(super) why: String,
}

/// The names a new column must not take: Delta column names ignore case
/// (a table with `name` and `NAME` is not a Delta table), and the columns
/// changelake writes are its own. Keyed by lower case, each with the name
/// that holds it; the business key's columns count as taken even before
/// the table has them.
struct Taken<'a> {
    names: HashMap<String, String>,
    written: &'a [String],
}

impl<'a> Taken<'a> {
    fn of(columns: &[(String, DType)], written: &'a [String], guarded: Guarded) -> Taken<'a> {
        let names = columns.iter().map(|(n, _)| n).chain(written).chain(guarded.keys);
        Taken { names: names.map(|n| (n.to_lowercase(), n.clone())).collect(), written }
    }

    fn insert(&mut self, name: &str) {
        self.names.insert(name.to_lowercase(), name.to_string());
    }

    /// Why `name` cannot be a new column, if it cannot.
    fn clash(&self, name: &str) -> Option<String> {
        if self.written.iter().any(|w| w == name) {
            return Some(format!(
                "column `{name}` is a column changelake writes itself (rename it at the source, or rename the table's with `columns:`)"
            ));
        }
        let other = self.names.get(&name.to_lowercase()).filter(|other| *other != name)?;
        Some(format!(
            "column `{name}` differs from column `{other}` only in case, and Delta column names ignore case"
        ))
    }
}

/// What a batch's cells say a column's type is (see [`plan_columns`]).
enum Inference {
    /// A key column: its first non-float kind; only floats type it as an
    /// integer (a float key value is then a dead letter).
    Key { first: Option<DType>, any: bool },
    /// A sequence column: its first value's kind.
    Sequence(Option<DType>),
    /// Any other column: every value's kind, unified.
    Values(Option<DType>),
}

impl Inference {
    fn new(name: &String, guarded: Guarded) -> Self {
        if guarded.keys.contains(name) {
            Inference::Key { first: None, any: false }
        } else if guarded.sequence.contains(name) {
            Inference::Sequence(None)
        } else {
            Inference::Values(None)
        }
    }

    /// Nothing later can change the result.
    fn settled(&self) -> bool {
        match self {
            Inference::Key { first, .. } => first.is_some(),
            Inference::Sequence(t) => t.is_some(),
            Inference::Values(_) => false,
        }
    }

    fn add(&mut self, kind: Option<DType>) {
        let Some(t) = kind else { return };
        match self {
            Inference::Key { first, any } => {
                *any = true;
                if t != DType::Float {
                    *first = Some(t);
                }
            }
            Inference::Sequence(first) => *first = Some(t),
            Inference::Values(acc) => *acc = unify(*acc, Some(t)),
        }
    }

    fn result(&self) -> Option<DType> {
        match self {
            Inference::Key { first, any } => first.or(any.then_some(DType::Int)),
            Inference::Sequence(t) | Inference::Values(t) => *t,
        }
    }
}
