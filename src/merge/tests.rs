//! One test per rule of SPEC sections 3-6 and per worked example of the seeds,
//! named after the rule. They drive [`MemTable`], which runs the same
//! prepare → classify → apply steps as the engine.

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
    InRow { data, delete, order: ORDER.fetch_add(1, AO::Relaxed), replayed: false, hashes: None }
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

// ---------------------------------------------------------------- seeds

#[test]
fn scd1_seed_001_worked_example() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up(1, "Berlin", 1), up(2, "Bonn", 1)]);
    assert_eq!(state(&t), vec![s(1, "Berlin", true, false), s(2, "Bonn", true, false)]);
    t.run(vec![up(1, "Hamburg", 2), up(3, "Köln", 1)]);
    assert_eq!(
        state(&t),
        vec![s(1, "Hamburg", true, false), s(2, "Bonn", true, false), s(3, "Köln", true, false)]
    );
    let before = t.rows();
    let out = t.run(vec![up(1, "Paris", 1)]);
    assert!(!out.has_changes(), "run 3: seq 1 is lower than the stored seq 2");
    assert_eq!(t.rows(), before);
    t.run(vec![del(2, 2)]);
    let two = t.rows().into_iter().find(|v| v.data[ID] == Value::Int(2)).unwrap();
    assert_eq!(
        (city(&two), two.deleted, two.data[SEQ].clone()),
        ("Bonn".into(), true, Value::Int(2))
    );
    t.run(vec![up(2, "Bonn", 3)]);
    assert_eq!(
        state(&t),
        vec![s(1, "Hamburg", true, false), s(2, "Bonn", true, false), s(3, "Köln", true, false)]
    );
    assert_eq!(t.rows()[1].data[SEQ], Value::Int(3));
}

#[test]
fn scd2_seed_000_worked_example() {
    let mut t = table(Strategy::Scd2, |s| s.tracked[MOD] = false);
    t.run(vec![up_mod(1, "Berlin", 2, 100)]);
    assert_eq!(state(&t), vec![s(1, "Berlin", true, false)]);
    t.run(vec![up_mod(1, "Hamburg", 3, 200)]);
    assert_eq!(state(&t), vec![s(1, "Berlin", false, false), s(1, "Hamburg", true, false)]);
    t.run(vec![up_mod(1, "Paris", 1, 300)]);
    assert_eq!(
        state(&t),
        vec![
            s(1, "Paris", false, false),
            s(1, "Berlin", false, false),
            s(1, "Hamburg", true, false)
        ]
    );
    let paris = &t.rows()[0];
    assert_eq!(paris.valid_from, paris.valid_to, "a late version has an empty interval");
    t.run(vec![del(1, 3)]);
    assert_eq!(
        state(&t),
        vec![
            s(1, "Paris", false, false),
            s(1, "Berlin", false, false),
            s(1, "Hamburg", false, true)
        ]
    );
    t.run(vec![up_mod(1, "Rom", 4, 500)]);
    assert_eq!(
        state(&t),
        vec![
            s(1, "Paris", false, false),
            s(1, "Berlin", false, false),
            s(1, "Hamburg", false, true),
            s(1, "Rom", true, false)
        ]
    );
    // Non-late intervals are contiguous: Berlin ends where Hamburg starts.
    let rows = t.rows();
    assert_eq!(rows[1].valid_to, rows[2].valid_from);
    assert!(rows[2].valid_to <= rows[3].valid_from);
}

#[test]
fn scd2_seed_002_business_date_worked_example() {
    let d1 = 1_767_225_600_000_000; // 2026-01-01
    let d2 = 1_775_001_600_000_000; // 2026-04-01
    let open = 253_402_214_400_000_000; // 9999-12-31
    let mut t = table(Strategy::Scd2, |s| {
        s.seq = vec![];
        s.tracked = vec![false, true, false, false]; // region tracked, segment carried
        s.valid_time = ValidTime::Date(d1);
        s.open_valid_to = Some(open);
    });
    let row = |id: i64, region: &str, segment: &str| {
        mk(vec![Value::Int(id), cell_str(region), Value::Null, cell_str(segment)], false)
    };
    t.run(vec![row(1, "West", "SMB"), row(2, "East", "Enterprise")]);
    t.spec.valid_time = ValidTime::Date(d2);
    t.run(vec![row(1, "Central", "SMB"), row(2, "East", "Enterprise")]);
    let rows = t.rows();
    let got: Vec<_> = rows.iter().map(|v| (city(v), v.valid_from, v.valid_to, v.current)).collect();
    let mut want = vec![
        ("West".to_string(), Some(d1), Some(d2), false),
        ("Central".to_string(), Some(d2), Some(open), true),
        ("East".to_string(), Some(d1), Some(open), true),
    ];
    let mut got_sorted = got.clone();
    got_sorted.sort_by_key(|g| (g.0.clone(), g.1));
    want.sort_by_key(|g| (g.0.clone(), g.1));
    assert_eq!(got_sorted, want);
}

// ---------------------------------------------------------------- SPEC 3: the batch

#[test]
fn batch_null_key_rows_are_dropped_and_counted() {
    let mut t = table(Strategy::Scd1, |_| {});
    let out = t.run(vec![
        mk(vec![Value::Null, cell_str("x"), Value::Int(1), Value::Null], false),
        up(1, "a", 1),
    ]);
    assert_eq!(out.stats.null_keys, 1);
    assert_eq!(state(&t), vec![s(1, "a", true, false)]);
}

#[test]
fn batch_composite_key_null_only_when_every_part_is_null() {
    let mut t = table(Strategy::Scd1, |s| s.key = vec![ID, MOD]);
    let out = t.run(vec![
        mk(vec![Value::Null, cell_str("all-null"), Value::Int(1), Value::Null], false),
        mk(vec![Value::Int(1), cell_str("partial"), Value::Int(1), Value::Null], false),
    ]);
    assert_eq!(out.stats.null_keys, 1);
    assert_eq!(t.current.len(), 1);
}

#[test]
fn batch_duplicates_highest_sequence_wins_and_losers_are_counted() {
    let mut t = table(Strategy::Scd1, |_| {});
    let out = t.run(vec![up(1, "b", 2), up(1, "c", 3), up(1, "a", 1)]);
    assert_eq!(out.stats.duplicates, 2);
    assert_eq!(state(&t), vec![s(1, "c", true, false)]);
}

#[test]
fn batch_duplicates_null_sequence_sorts_lowest() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![
        up(1, "seq1", 1),
        mk(vec![Value::Int(1), cell_str("nullseq"), Value::Null, Value::Null], false),
    ]);
    assert_eq!(state(&t), vec![s(1, "seq1", true, false)]);
}

#[test]
fn batch_duplicates_composite_sequences_compare_column_by_column() {
    let mut t = table(Strategy::Scd1, |s| {
        s.seq = vec![SEQ, MOD];
        s.tracked = vec![false, true, false, false];
    });
    t.run(vec![up_mod(1, "2-1", 2, 1), up_mod(1, "1-9", 1, 9), up_mod(1, "2-0", 2, 0)]);
    assert_eq!(state(&t), vec![s(1, "2-1", true, false)]);
}

#[test]
fn batch_duplicates_equal_sequence_later_row_wins() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up(1, "first", 5), up(1, "second", 5)]);
    assert_eq!(state(&t), vec![s(1, "second", true, false)]);
}

#[test]
fn batch_without_sequence_later_row_wins() {
    let mut t = table(Strategy::Scd1, |s| s.seq = vec![]);
    t.run(vec![up(1, "first", 9), up(1, "second", 1)]);
    assert_eq!(state(&t), vec![s(1, "second", true, false)]);
}

#[test]
fn cross_batch_older_row_is_ignored() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up(1, "new", 5)]);
    let out = t.run(vec![up(1, "old", 4)]);
    assert_eq!(out.stats.older_ignored, 1);
    assert_eq!(state(&t), vec![s(1, "new", true, false)]);
}

#[test]
fn cross_batch_equal_sequence_later_batch_wins() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up(1, "first", 5)]);
    t.run(vec![up(1, "second", 5)]);
    assert_eq!(state(&t), vec![s(1, "second", true, false)]);
}

#[test]
fn cross_batch_null_stored_sequence_loses_to_any_value() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![mk(vec![Value::Int(1), cell_str("nullseq"), Value::Null, Value::Null], false)]);
    t.run(vec![up(1, "zero", 0)]);
    assert_eq!(state(&t), vec![s(1, "zero", true, false)]);
    let out =
        t.run(vec![mk(vec![Value::Int(1), cell_str("nullseq"), Value::Null, Value::Null], false)]);
    assert_eq!(out.stats.older_ignored, 1);
}

#[test]
fn cross_batch_without_sequence_later_batch_wins() {
    let mut t = table(Strategy::Scd1, |s| s.seq = vec![]);
    t.run(vec![up(1, "first", 9)]);
    t.run(vec![up(1, "second", 1)]);
    assert_eq!(state(&t), vec![s(1, "second", true, false)]);
}

#[test]
fn keys_composite_with_some_null_parts_match_themselves() {
    let mut t = table(Strategy::Scd1, |s| {
        s.key = vec![ID, MOD];
        s.tracked = vec![false, true, false, false];
    });
    t.run(vec![mk(vec![Value::Null, cell_str("a"), Value::Int(1), Value::Int(7)], false)]);
    t.run(vec![mk(vec![Value::Null, cell_str("b"), Value::Int(2), Value::Int(7)], false)]);
    assert_eq!(t.current.len(), 1);
    assert_eq!(city(t.current.values().next().unwrap()), "b");
}

#[test]
fn sequence_only_change_updates_in_place_without_execution_bump_scd1() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up(1, "a", 1)]);
    let out = t.run(vec![up(1, "a", 2)]);
    assert_eq!(out.stats.updated_in_place, 1);
    assert_eq!(t.rows()[0].data[SEQ], Value::Int(2));
    assert_eq!(exec_of(&t, 1), vec![1]);
}

#[test]
fn sequence_only_change_updates_current_version_in_place_scd2() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "a", 1)]);
    t.run(vec![up(1, "a", 2)]);
    assert_eq!(state(&t), vec![s(1, "a", true, false)]);
    assert_eq!(t.rows()[0].data[SEQ], Value::Int(2));
    assert_eq!(exec_of(&t, 1), vec![1]);
}

#[test]
fn change_detection_is_null_safe() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up(1, "", 1)]);
    let out = t.run(vec![up(1, "x", 2)]);
    assert_eq!(out.stats.updated, 1, "NULL -> value is a change");
    let out = t.run(vec![up(1, "", 3)]);
    assert_eq!(out.stats.updated, 1, "value -> NULL is a change");
    let out = t.run(vec![up(1, "", 4)]);
    assert_eq!(out.stats.updated, 0, "NULL -> NULL is not");
    assert_eq!(exec_of(&t, 1), vec![3]);
}

#[test]
fn replay_same_batch_twice_changes_nothing() {
    for strategy in [Strategy::Scd1, Strategy::Scd2] {
        let mut t = table(strategy, |_| {});
        let batch = || vec![up(1, "a", 1), up(2, "b", 1), del(3, 1), up(1, "c", 2)];
        t.run(batch());
        let rows = t.rows();
        let commits = t.commits;
        let out = t.run(batch());
        assert!(!out.has_changes(), "{strategy:?}");
        assert_eq!(t.rows(), rows);
        assert_eq!(t.commits, commits);
    }
}

// ---------------------------------------------------------------- SPEC 4: scd1

#[test]
fn scd1_new_key_inserted_changed_updated_unchanged_untouched() {
    let mut t = table(Strategy::Scd1, |_| {});
    assert_eq!(t.run(vec![up(1, "a", 1)]).stats.inserted, 1);
    assert_eq!(t.run(vec![up(1, "b", 2)]).stats.updated, 1);
    let out = t.run(vec![up(1, "b", 2)]);
    assert!(!out.has_changes());
    assert_eq!(exec_of(&t, 1), vec![2]);
}

#[test]
fn scd1_ignore_columns_change_in_place_keeps_execution_id() {
    let mut t = table(Strategy::Scd1, |s| s.tracked[MOD] = false);
    t.run(vec![up_mod(1, "a", 1, 100)]);
    let out = t.run(vec![up_mod(1, "a", 2, 200)]);
    assert_eq!(out.stats.updated_in_place, 1);
    assert_eq!(t.rows()[0].data[MOD], Value::Int(200));
    assert_eq!(exec_of(&t, 1), vec![1]);
}

#[test]
fn scd1_track_columns_only_listed_columns_count_as_change() {
    // track_columns: [modified_on] → city is untracked.
    let mut t = table(Strategy::Scd1, |s| s.tracked = vec![false, false, false, true]);
    t.run(vec![up_mod(1, "a", 1, 1)]);
    t.run(vec![up_mod(1, "b", 2, 1)]);
    assert_eq!(exec_of(&t, 1), vec![1], "untracked change: in place");
    assert_eq!(city(&t.rows()[0]), "b");
    t.run(vec![up_mod(1, "b", 3, 2)]);
    assert!(exec_of(&t, 1)[0] > 1, "tracked change bumps _execution_id");
}

#[test]
fn scd1_soft_delete_keeps_values_and_stores_delete_sequence() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up(1, "a", 1)]);
    t.run(vec![del(1, 5)]);
    let r = &t.rows()[0];
    assert!(r.deleted);
    assert_eq!(city(r), "a");
    assert_eq!(r.data[SEQ], Value::Int(5));
}

#[test]
fn scd1_soft_deleted_key_ignores_lower_sequence_and_revives_on_equal_or_higher() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up(1, "a", 1)]);
    t.run(vec![del(1, 5)]);
    t.run(vec![up(1, "late", 4)]);
    assert_eq!(state(&t), vec![s(1, "a", true, true)]);
    t.run(vec![up(1, "back", 5)]);
    assert_eq!(state(&t), vec![s(1, "back", true, false)]);
}

#[test]
fn scd1_soft_deleted_key_comes_back_active_even_with_identical_values() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up(1, "a", 1)]);
    t.run(vec![del(1, 1)]);
    let out = t.run(vec![up(1, "a", 1)]);
    assert_eq!(out.stats.revived, 1);
    assert_eq!(state(&t), vec![s(1, "a", true, false)]);
}

#[test]
fn scd1_hard_delete_removes_row_and_a_late_older_row_inserts() {
    let mut t = table(Strategy::Scd1, |s| s.delete_mode = DeleteMode::Hard);
    t.run(vec![up(1, "a", 5)]);
    t.run(vec![del(1, 6)]);
    assert!(t.rows().is_empty());
    t.run(vec![up(1, "older", 2)]);
    assert_eq!(state(&t), vec![s(1, "older", true, false)]);
}

#[test]
fn scd1_delete_mode_ignore_drops_delete_rows() {
    let mut t = table(Strategy::Scd1, |s| s.delete_mode = DeleteMode::Ignore);
    t.run(vec![up(1, "a", 1)]);
    let out = t.run(vec![del(1, 2)]);
    assert_eq!(out.stats.deletes_ignored, 1);
    assert_eq!(state(&t), vec![s(1, "a", true, false)]);
}

#[test]
fn scd1_delete_of_unknown_key_does_nothing() {
    let mut t = table(Strategy::Scd1, |_| {});
    let out = t.run(vec![del(9, 1)]);
    assert!(!out.has_changes());
    assert!(t.rows().is_empty());
}

#[test]
fn scd1_older_delete_row_is_ignored() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up(1, "a", 5)]);
    t.run(vec![del(1, 4)]);
    assert_eq!(state(&t), vec![s(1, "a", true, false)]);
}

// ---------------------------------------------------------------- SPEC 5: scd2

#[test]
fn scd2_change_closes_current_and_opens_new_version() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "a", 1)]);
    t.run(vec![up(1, "b", 2)]);
    let rows = t.rows();
    assert_eq!(state(&t), vec![s(1, "a", false, false), s(1, "b", true, false)]);
    assert_eq!(rows[0].valid_to, rows[1].valid_from);
    assert!(rows[0].valid_from < rows[0].valid_to);
    assert_eq!(rows[1].valid_to, None);
}

#[test]
fn scd2_unchanged_row_adds_no_version() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "a", 1)]);
    assert!(!t.run(vec![up(1, "a", 1)]).has_changes());
    assert_eq!(t.rows().len(), 1);
}

#[test]
fn scd2_ignore_columns_change_updates_current_version_in_place() {
    let mut t = table(Strategy::Scd2, |s| s.tracked[MOD] = false);
    t.run(vec![up_mod(1, "a", 1, 100)]);
    t.run(vec![up_mod(1, "a", 2, 200)]);
    assert_eq!(t.rows().len(), 1);
    assert_eq!(t.rows()[0].data[MOD], Value::Int(200));
    assert_eq!(exec_of(&t, 1), vec![1]);
}

#[test]
fn scd2_versions_are_ordered_by_sequence_not_by_clock() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "b", 2)]);
    t.now -= 100_000_000; // the clock goes backwards
    t.run(vec![up(1, "c", 3)]);
    let rows = t.rows();
    assert_eq!(state(&t), vec![s(1, "b", false, false), s(1, "c", true, false)]);
    assert!(rows[0].valid_from <= rows[0].valid_to, "a skewed clock never inverts an interval");
}

#[test]
fn scd2_late_row_is_a_closed_version_with_an_empty_interval() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "b", 2)]);
    t.run(vec![up(1, "c", 4)]);
    let out = t.run(vec![up(1, "late", 3)]);
    assert_eq!(out.stats.late_inserted, 1);
    assert_eq!(
        state(&t),
        vec![s(1, "b", false, false), s(1, "late", false, false), s(1, "c", true, false)]
    );
    let late = &t.rows()[1];
    assert_eq!(late.valid_from, late.valid_to);
    assert_eq!(out.upserts.len(), 0, "no other version changes");
}

#[test]
fn replay_reapply_never_adds_late_versions_for_already_applied_rows() {
    let mut t = table(Strategy::Scd2, |_| {});
    // The first pass saw seq 1 and 2 in one batch: only seq 2 became a version.
    t.run(vec![up(1, "a", 1), up(1, "b", 2)]);
    let mut again = up(1, "a", 1);
    again.replayed = true;
    let out = t.run(vec![again]);
    assert!(!out.has_changes());
    assert_eq!(state(&t), vec![s(1, "b", true, false)]);
    // Nor keys the first pass never kept (created and deleted in one batch).
    let mut gone = up(2, "x", 1);
    gone.replayed = true;
    assert!(!t.run(vec![gone]).has_changes());
    // The same event again may repair an ignored column in place.
    let mut same = up_mod(1, "b", 2, 99);
    same.replayed = true;
    assert_eq!(t.run(vec![same]).stats.updated_in_place, 1);
}

#[test]
fn scd2_late_row_before_every_version_goes_first() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "b", 2)]);
    t.run(vec![up(1, "a", 1)]);
    assert_eq!(state(&t), vec![s(1, "a", false, false), s(1, "b", true, false)]);
}

#[test]
fn scd2_late_row_equal_to_the_version_valid_at_its_sequence_is_a_noop() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "b", 2)]);
    t.run(vec![up(1, "c", 4)]);
    let out = t.run(vec![up(1, "b", 3)]);
    assert_eq!(out.stats.late_noop, 1);
    assert!(!out.has_changes());
    assert_eq!(t.rows().len(), 2);
}

#[test]
fn scd2_late_delete_row_is_ignored() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "b", 5)]);
    let out = t.run(vec![del(1, 4)]);
    assert_eq!(out.stats.late_deletes_ignored, 1);
    assert_eq!(state(&t), vec![s(1, "b", true, false)]);
}

#[test]
fn scd2_soft_delete_closes_current_and_marks_it_deleted() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "a", 1)]);
    t.run(vec![del(1, 2)]);
    let r = &t.rows()[0];
    assert_eq!(state(&t), vec![s(1, "a", false, true)]);
    assert!(r.valid_from < r.valid_to);
}

#[test]
fn scd2_returning_key_opens_a_new_version_and_deleted_stays_closed() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "a", 1)]);
    t.run(vec![del(1, 2)]);
    t.run(vec![up(1, "a", 3)]);
    assert_eq!(state(&t), vec![s(1, "a", false, true), s(1, "a", true, false)]);
}

#[test]
fn scd2_delete_sequence_is_not_stored_reopen_at_or_above_deleted_version() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "a", 3)]);
    t.run(vec![del(1, 9)]);
    // Lower than the delete (9) but equal to the deleted version (3): reopens.
    t.run(vec![up(1, "b", 3)]);
    assert_eq!(state(&t), vec![s(1, "a", false, true), s(1, "b", true, false)]);
}

#[test]
fn scd2_row_below_deleted_version_is_late() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "a", 3)]);
    t.run(vec![del(1, 3)]);
    let out = t.run(vec![up(1, "old", 2)]);
    assert_eq!(out.stats.late_inserted, 1);
    assert_eq!(state(&t), vec![s(1, "old", false, false), s(1, "a", false, true)]);
}

#[test]
fn scd2_delete_mode_ignore_drops_delete_rows() {
    let mut t = table(Strategy::Scd2, |s| s.delete_mode = DeleteMode::Ignore);
    t.run(vec![up(1, "a", 1)]);
    t.run(vec![del(1, 2)]);
    assert_eq!(state(&t), vec![s(1, "a", true, false)]);
}

#[test]
fn scd2_delete_of_unknown_key_does_nothing() {
    let mut t = table(Strategy::Scd2, |_| {});
    assert!(!t.run(vec![del(1, 1)]).has_changes());
}

#[test]
fn scd2_intra_batch_all_makes_every_distinct_sequence_a_version() {
    let mut t = table(Strategy::Scd2, |s| s.intra_batch_all = true);
    t.run(vec![up(1, "c", 3), up(1, "a", 1), up(1, "b", 2), up(1, "b2", 2)]);
    assert_eq!(
        state(&t),
        vec![s(1, "a", false, false), s(1, "b2", false, false), s(1, "c", true, false)]
    );
}

#[test]
fn scd2_intra_batch_latest_keeps_one_version_per_batch() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "a", 1), up(1, "b", 2)]);
    assert_eq!(state(&t), vec![s(1, "b", true, false)]);
}

#[test]
fn scd2_open_valid_to_sentinel_on_open_versions() {
    let open = 253_402_214_400_000_000;
    let mut t = table(Strategy::Scd2, |s| s.open_valid_to = Some(open));
    t.run(vec![up(1, "a", 1)]);
    t.run(vec![up(1, "b", 2)]);
    let rows = t.rows();
    assert_eq!(rows[1].valid_to, Some(open));
    assert_ne!(rows[0].valid_to, Some(open));
}

#[test]
fn scd2_surrogate_key_is_deterministic_and_unique() {
    let run = || {
        let mut t = table(Strategy::Scd2, |s| {
            s.surrogate_key = true;
            s.valid_time = ValidTime::Date(86_400_000_000);
        });
        t.run(vec![up(1, "a", 1), up(2, "b", 1)]);
        t.spec.valid_time = ValidTime::Date(2 * 86_400_000_000);
        t.run(vec![up(1, "c", 2)]);
        t.rows().iter().map(|v| v.sk.unwrap()).collect::<Vec<_>>()
    };
    let a = run();
    assert_eq!(a, run());
    let mut u = a.clone();
    u.sort();
    u.dedup();
    assert_eq!(u.len(), a.len());
}

#[test]
fn scd2_business_time_same_date_is_a_restatement_in_place() {
    let d = 86_400_000_000;
    let mut t = table(Strategy::Scd2, |s| s.valid_time = ValidTime::Date(d));
    t.run(vec![up(1, "a", 1)]);
    t.run(vec![up(1, "b", 2)]);
    assert_eq!(state(&t), vec![s(1, "b", true, false)]);
    assert_eq!(t.rows()[0].valid_from, Some(d));
}

#[test]
fn scd2_business_time_backdated_row_is_inserted_between_neighbours() {
    let day = 86_400_000_000;
    let mut t = table(Strategy::Scd2, |s| {
        s.seq = vec![];
        s.valid_time = ValidTime::Date(day);
    });
    t.run(vec![up(1, "jan", 0)]);
    t.spec.valid_time = ValidTime::Date(10 * day);
    t.run(vec![up(1, "oct", 0)]);
    t.spec.valid_time = ValidTime::Date(5 * day);
    t.run(vec![up(1, "may", 0)]);
    let mut rows: Vec<_> = t
        .rows()
        .iter()
        .map(|v| (v.valid_from.unwrap() / day, v.valid_to.map(|x| x / day), city(v), v.current))
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        vec![
            (1, Some(5), "jan".into(), false),
            (5, Some(10), "may".into(), false),
            (10, None, "oct".into(), true)
        ]
    );
}

#[test]
fn guardrail_reject_duplicates_fails_the_batch() {
    let mut t = table(Strategy::Scd2, |s| s.reject_duplicates = true);
    let out = t.run(vec![up(1, "a", 1), up(1, "b", 2)]);
    assert!(out.rejected.is_some());
    assert!(t.rows().is_empty());
}

#[test]
fn guardrail_reject_late_fails_the_batch() {
    let mut t = table(Strategy::Scd2, |s| s.reject_late = true);
    t.run(vec![up(1, "a", 5)]);
    let out = t.run(vec![up(2, "x", 1), up(1, "late", 4)]);
    assert!(out.rejected.is_some());
    assert_eq!(state(&t), vec![s(1, "a", true, false)]);
}

// ---------------------------------------------------------------- SPEC 6: snapshot

#[test]
fn snapshot_scd1_soft_marks_absent_keys_deleted() {
    let mut t = table(Strategy::Scd1, |s| s.snapshot = true);
    t.run(vec![up(1, "a", 1), up(2, "b", 1)]);
    t.run(vec![up(1, "a", 1)]);
    assert_eq!(state(&t), vec![s(1, "a", true, false), s(2, "b", true, true)]);
}

#[test]
fn snapshot_scd1_hard_removes_absent_keys() {
    let mut t = table(Strategy::Scd1, |s| {
        s.snapshot = true;
        s.delete_mode = DeleteMode::Hard;
    });
    t.run(vec![up(1, "a", 1), up(2, "b", 1)]);
    t.run(vec![up(2, "b", 1)]);
    assert_eq!(state(&t), vec![s(2, "b", true, false)]);
}

#[test]
fn snapshot_scd2_closes_and_marks_absent_keys() {
    let mut t = table(Strategy::Scd2, |s| s.snapshot = true);
    t.run(vec![up(1, "a", 1), up(2, "b", 1)]);
    t.run(vec![up(1, "a", 1)]);
    assert_eq!(state(&t), vec![s(1, "a", true, false), s(2, "b", false, true)]);
}

#[test]
fn snapshot_off_keeps_absent_keys() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up(1, "a", 1), up(2, "b", 1)]);
    t.run(vec![up(1, "a", 1)]);
    assert_eq!(state(&t), vec![s(1, "a", true, false), s(2, "b", true, false)]);
}

// ---------------------------------------------------------------- properties

mod properties {
    use super::*;
    use crate::config::Strategy;
    use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest, Strategy as PStrategy};

    fn arb_row() -> impl PStrategy<Value = (i64, u8, i64, bool)> {
        (0i64..6, 0u8..3, 0i64..5, any::<bool>())
    }

    fn to_row((id, c, seq, d): (i64, u8, i64, bool)) -> InRow {
        if d {
            del(id, seq)
        } else {
            up(id, ["x", "y", ""][c as usize], seq)
        }
    }

    proptest! {
        #[test]
        fn replaying_any_batch_twice_leaves_the_table_unchanged(
            batches in proptest::collection::vec(proptest::collection::vec(arb_row(), 0..8), 1..5),
            scd2 in any::<bool>(), hard in any::<bool>()
        ) {
            let strategy = if scd2 { Strategy::Scd2 } else { Strategy::Scd1 };
            let mut t = table(strategy, |s| if hard && !scd2 { s.delete_mode = DeleteMode::Hard });
            for b in &batches {
                t.run(b.iter().cloned().map(to_row).collect());
                let before = t.rows();
                let out = t.run(b.iter().cloned().map(to_row).collect());
                prop_assert!(!out.has_changes(), "replay changed the table: {:?}", out.stats);
                prop_assert_eq!(t.rows(), before);
            }
        }

        #[test]
        fn scd1_without_deletes_does_not_depend_on_batch_cuts(
            stream in proptest::collection::vec((0i64..6, 0u8..3, 0i64..5), 1..30),
            cuts in proptest::collection::vec(1usize..30, 0..6)
        ) {
            // Distinct sequences per key make the stream's outcome well defined.
            let mut seen = std::collections::HashSet::new();
            let stream: Vec<_> = stream.into_iter().filter(|(id, _, seq)| seen.insert((*id, *seq))).collect();
            let rows = |s: &[(i64, u8, i64)]| s.iter().map(|&(id, c, seq)| up(id, ["x", "y", ""][c as usize], seq)).collect::<Vec<_>>();
            let mut whole = table(Strategy::Scd1, |_| {});
            whole.run(rows(&stream));
            let mut cut = table(Strategy::Scd1, |_| {});
            let mut bounds: Vec<usize> = cuts.into_iter().filter(|c| *c < stream.len()).collect();
            bounds.sort();
            bounds.dedup();
            let mut start = 0;
            for b in bounds.into_iter().chain([stream.len()]) {
                cut.run(rows(&stream[start..b]));
                start = b;
            }
            let strip = |t: &MemTable| t.rows().into_iter().map(|v| (v.data, v.deleted)).collect::<Vec<_>>();
            prop_assert_eq!(strip(&whole), strip(&cut));
        }
    }
}
