//! Snapshot merge: each batch is the complete set of keys, absent keys are
//! deleted (docs/snapshot.md).

use super::*;

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
