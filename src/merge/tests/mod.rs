//! The merge rules, one test per rule and per worked example of the rule
//! pages, named after the rule: docs/batch.md (`batch`), docs/scd1.md
//! (`scd1`), docs/scd2.md (`scd2`), docs/snapshot.md (`snapshot`), and
//! properties over random batches (`properties`). They drive [`MemTable`],
//! which runs the same prepare → classify → apply steps as the engine; the
//! shared table spec and row builders are here.

use std::sync::atomic::{AtomicU64, Ordering as AO};

use super::memtable::MemTable;
use super::*;
use crate::config::{DeleteMode, Strategy};

static ORDER: AtomicU64 = AtomicU64::new(1);

const ID: usize = 0;
const CITY: usize = 1;
const SEQ: usize = 2;
const MOD: usize = 3;

fn spec(strategy: Strategy) -> Spec {
    Spec {
        strategy,
        names: ["id", "city", "seq", "modified_on"].map(String::from).to_vec(),
        key: vec![ID],
        seq: vec![SEQ],
        tracked: vec![false, true, false, true],
        delete_mode: DeleteMode::Soft,
        snapshot: false,
        intra_batch_all: false,
        valid_time: ValidTime::Processing,
        open_valid_to: None,
        surrogate_key: false,
        reject_duplicates: false,
        reject_late: false,
    }
}

fn table(strategy: Strategy, f: impl FnOnce(&mut Spec)) -> MemTable {
    let mut s = spec(strategy);
    f(&mut s);
    MemTable::new(s)
}

fn cell_str(c: &str) -> Value {
    if c.is_empty() {
        Value::Null
    } else {
        Value::Str(c.into())
    }
}

fn mk(data: Vec<Value>, delete: bool) -> InRow {
    InRow {
        data,
        delete,
        order: ORDER.fetch_add(1, AO::Relaxed),
        replayed: false,
        hashes: None,
        unavailable: vec![],
    }
}

/// An upsert row: id, city, seq, modified_on.
fn up(id: i64, city: &str, seq: i64) -> InRow {
    mk(vec![Value::Int(id), cell_str(city), Value::Int(seq), Value::Null], false)
}

fn up_mod(id: i64, city: &str, seq: i64, modified: i64) -> InRow {
    mk(vec![Value::Int(id), cell_str(city), Value::Int(seq), Value::Int(modified)], false)
}

fn del(id: i64, seq: i64) -> InRow {
    mk(vec![Value::Int(id), Value::Null, Value::Int(seq), Value::Null], true)
}

fn city(v: &Version) -> String {
    v.data[CITY].to_string()
}

/// (id, city, current, deleted) of every row in show order.
fn state(t: &MemTable) -> Vec<(i64, String, bool, bool)> {
    t.rows()
        .iter()
        .map(|v| match v.data[ID] {
            Value::Int(i) => (i, city(v), v.current, v.deleted),
            _ => (-1, city(v), v.current, v.deleted),
        })
        .collect()
}

fn s(id: i64, c: &str, cur: bool, d: bool) -> (i64, String, bool, bool) {
    (id, c.to_string(), cur, d)
}

fn exec_of(t: &MemTable, id: i64) -> Vec<i64> {
    t.rows().iter().filter(|v| v.data[ID] == Value::Int(id)).map(|v| v.exec).collect()
}

/// Change detection's hashes ([`Spec::hashes`]): a NULL column counts as
/// absent (a column added later leaves stored rows' hashes alone), every
/// other column changes the row hash, only tracked ones the tracked hash,
/// and a value cannot pass for its neighbour's.
#[test]
fn change_hashes_skip_nulls_and_track_only_tracked_columns() {
    let sp = spec(Strategy::Scd1);
    let row = |id: i64, city: &str, seq: i64, m: &str| {
        vec![Value::Int(id), cell_str(city), Value::Int(seq), cell_str(m)]
    };
    let base = sp.hashes(&row(1, "Paris", 1, "x"));
    assert_eq!(sp.hashes(&row(1, "Paris", 1, "x")), base);
    // An untracked column: the row hash moves, the tracked one stays.
    let seq = sp.hashes(&row(1, "Paris", 2, "x"));
    assert_ne!(seq.0, base.0);
    assert_eq!(seq.1, base.1);
    // A tracked column moves both.
    let city = sp.hashes(&row(1, "Lyon", 1, "x"));
    assert_ne!(city.0, base.0);
    assert_ne!(city.1, base.1);
    // A trailing NULL column is the same as a shorter row.
    let mut wider = sp.clone();
    wider.names.push("added".into());
    wider.tracked.push(true);
    let mut with_null = row(1, "Paris", 1, "x");
    with_null.push(Value::Null);
    assert_eq!(wider.hashes(&with_null), base);
    // A NULL is not an empty text, and text does not slide between columns.
    assert_ne!(
        sp.hashes(&row(1, "", 1, "x")),
        sp.hashes(&[Value::Int(1), Value::Str("".into()), Value::Int(1), cell_str("x")])
    );
    assert_ne!(sp.hashes(&row(1, "ab", 1, "c")).1, sp.hashes(&row(1, "a", 1, "bc")).1);
    // With every column tracked the two hashes are one.
    let mut all = sp.clone();
    all.tracked = vec![true; 4];
    let h = all.hashes(&row(1, "Paris", 1, "x"));
    assert_eq!(h.0, h.1);
    assert_eq!(h.0, base.0);
}

mod batch;
mod properties;
mod scd1;
mod scd2;
mod snapshot;
mod unavailable;
