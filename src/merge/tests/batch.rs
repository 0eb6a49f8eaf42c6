//! The rules every run follows, whatever the strategy (docs/batch.md): NULL
//! keys, deduplication and ordering within a batch, ordering across runs,
//! key comparison, what counts as a change, and replays that change nothing.

use super::*;

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

/// docs/bad-input.md, width: a row holds its columns up to its last field
/// and reads NULL past it, so a row ending early (its trailing columns
/// NULL, or its sequence and even its key left out) merges exactly as the
/// same row written out to the table's width.
#[test]
fn a_row_shorter_than_the_table_merges_as_if_its_missing_columns_were_null() {
    let trimmed = |rows: Vec<InRow>| -> Vec<InRow> {
        rows.into_iter()
            .map(|mut r| {
                while r.data.last().is_some_and(Value::is_null) {
                    r.data.pop();
                }
                r
            })
            .collect()
    };
    let padded = |mut v: Vec<Version>| {
        v.iter_mut().for_each(|v| v.data.resize(4, Value::Null));
        v
    };
    let no_seq = || mk(vec![Value::Int(4), cell_str("x")], false);
    let no_key = || mk(vec![], false);
    let batches = || {
        vec![
            vec![up(1, "Berlin", 1), up(2, "", 1), up_mod(3, "a", 1, 7)],
            vec![up(1, "Hamburg", 2), del(2, 2), up(3, "a", 2), no_seq(), no_key()],
            vec![up(1, "Paris", 1), up(2, "Bonn", 3), del(3, 3)],
        ]
    };
    for strategy in [Strategy::Scd1, Strategy::Scd2] {
        let (mut full, mut short) = (table(strategy, |_| {}), table(strategy, |_| {}));
        for (b, s) in batches().into_iter().zip(batches()) {
            let (a, z) = (full.run(b), short.run(trimmed(s)));
            assert_eq!(format!("{:?}", a.stats), format!("{:?}", z.stats), "{strategy:?}");
        }
        assert_eq!(padded(short.rows()), padded(full.rows()), "{strategy:?}");
        // The row without a sequence landed; the one without a key did not.
        let ids: Vec<Value> = short.rows().iter().map(|v| v.data[ID].clone()).collect();
        assert!(ids.contains(&Value::Int(4)) && !ids.contains(&Value::Null), "{ids:?}");
    }
}
