//! scd1: current state, updated in place (docs/scd1.md) — the five-run
//! worked example, then the rules and deletes.

use super::*;

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
