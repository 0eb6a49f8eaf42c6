//! scd2: full history, one row per version (docs/scd2.md) — the worked
//! examples (processing time; business dates), then version order, changes,
//! late rows, deletes, several versions per batch, business time, surrogate
//! keys and guardrails.

use super::*;

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
    let mut t = dated(false);
    on_day(&mut t, 1, up(1, "jan", 0));
    on_day(&mut t, 10, up(1, "oct", 0));
    on_day(&mut t, 5, up(1, "may", 0));
    let mut rows: Vec<_> = t
        .rows()
        .iter()
        .map(|v| (v.valid_from.unwrap() / DAY, v.valid_to.map(|x| x / DAY), city(v), v.current))
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

const DAY: i64 = 86_400_000_000;

/// An scd2 table stamped with one business date per run (`date:`), with or
/// without a sequence.
fn dated(sequenced: bool) -> MemTable {
    table(Strategy::Scd2, |s| {
        if !sequenced {
            s.seq = vec![];
        }
        s.valid_time = ValidTime::Date(DAY);
    })
}

/// Runs `row` as of `day`.
fn on_day(t: &mut MemTable, day: i64, row: InRow) {
    t.spec.valid_time = ValidTime::Date(day * DAY);
    t.run(vec![row]);
}

/// Each version of key 1 as (from day, to day, city, current, deleted).
fn days(t: &MemTable) -> Vec<(i64, Option<i64>, String, bool, bool)> {
    let mut rows: Vec<_> = t
        .rows()
        .iter()
        .map(|v| {
            (
                v.valid_from.unwrap() / DAY,
                v.valid_to.map(|x| x / DAY),
                city(v),
                v.current,
                v.deleted,
            )
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn scd2_business_time_backdated_row_before_a_delete_takes_the_delete_on() {
    // The key is deleted on day 10; a row dated day 5 arrives afterwards.
    // It was in effect when the key was deleted, so the delete closes it
    // (as it does when the same rows come in one run, in date order).
    let mut t = dated(false);
    on_day(&mut t, 1, up(1, "jan", 0));
    on_day(&mut t, 10, del(1, 0));
    on_day(&mut t, 5, up(1, "may", 0));
    let want =
        vec![(1, Some(5), "jan".into(), false, false), (5, Some(10), "may".into(), false, true)];
    assert_eq!(days(&t), want);
    // A second backdated row before the delete moves it on again.
    on_day(&mut t, 7, up(1, "jul", 0));
    assert_eq!(
        days(&t),
        vec![
            (1, Some(5), "jan".into(), false, false),
            (5, Some(7), "may".into(), false, false),
            (7, Some(10), "jul".into(), false, true)
        ]
    );
    // The key stays deleted: a row dated before the delete does not reopen it.
    assert!(t.rows().iter().all(|v| !v.current));
}

#[test]
fn scd2_business_time_a_deleted_key_comes_back_only_after_its_delete_date() {
    // The delete passes to a backdated row whose sequence is lower than the
    // version it splits; the key's end is still the delete's date (day 10),
    // so a row of day 7 is backdated and one of day 12 brings the key back.
    let mut t = dated(true);
    on_day(&mut t, 1, up(1, "jan", 1));
    on_day(&mut t, 10, del(1, 10));
    on_day(&mut t, 5, up(1, "may", 0));
    on_day(&mut t, 7, up(1, "jul", 2));
    assert_eq!(
        days(&t),
        vec![
            (1, Some(5), "jan".into(), false, false),
            (5, Some(7), "may".into(), false, false),
            (7, Some(10), "jul".into(), false, true)
        ]
    );
    on_day(&mut t, 12, up(1, "dec", 3));
    assert_eq!(days(&t).last(), Some(&(12, None, "dec".into(), true, false)));
}

#[test]
fn scd2_business_time_two_backdated_rows_in_one_run_split_a_stored_version_in_turn() {
    // Business time from the row (`MOD`), every version of a batch kept:
    // days 7 and then 4 split the stored version of day 1 in one run,
    // the later date first (its sequence is lower).
    let mut t = table(Strategy::Scd2, |s| {
        s.valid_time = ValidTime::Column(crate::merge::TimeColumn::named(MOD, "modified"));
        s.intra_batch_all = true;
    });
    t.run(vec![up_mod(1, "jan", 5, DAY), up_mod(1, "oct", 9, 10 * DAY)]);
    t.run(vec![up_mod(1, "jul", 6, 7 * DAY), up_mod(1, "apr", 7, 4 * DAY)]);
    assert_eq!(
        days(&t),
        vec![
            (1, Some(4), "jan".into(), false, false),
            (4, Some(7), "apr".into(), false, false),
            (7, Some(10), "jul".into(), false, false),
            (10, None, "oct".into(), true, false)
        ]
    );
}

#[test]
fn scd2_business_time_backdated_row_in_a_gap_after_a_delete_leaves_the_deleted_version_alone() {
    // Deleted on day 4, back on day 10; a row dated day 6 fills the gap
    // up to day 10 and the deleted version keeps its end and its mark.
    let mut t = dated(false);
    on_day(&mut t, 1, up(1, "jan", 0));
    on_day(&mut t, 4, del(1, 0));
    on_day(&mut t, 10, up(1, "oct", 0));
    on_day(&mut t, 6, up(1, "jan", 0));
    assert_eq!(
        days(&t),
        vec![
            (1, Some(4), "jan".into(), false, true),
            (6, Some(10), "jan".into(), false, false),
            (10, None, "oct".into(), true, false)
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

/// A deleted key has no current row to carry its closed versions in brief;
/// the table keeps the brief the merge hands back for it
/// (`Output::deleted_briefs`, table/deleted_briefs.rs). Late rows for the key are
/// then compared with the brief as with its read history (docs/scd2.md,
/// "Late rows without reading history"), and every change to it is handed
/// back: a late version, a revival (the new open version carries it), a
/// delete of an open version whose stored brief was known.
#[test]
fn scd2_deleted_key_late_rows_compare_with_its_kept_brief_and_changes_are_handed_back() {
    use crate::merge::brief::{self, Closed, Stored};
    use crate::merge::scd2::apply_key;
    let sp = spec(Strategy::Scd2);
    let fp = brief::fingerprint(&sp);
    let ctx = RunCtx { exec: 5, now: 1_000, briefs: Some(fp) };
    let mut key = vec![];
    Value::Int(1).encode(&mut key);
    let key: Key = key.into();
    let closed = |city: &str, seq: i64, exec: i64| Closed {
        seq: vec![Value::Int(seq)],
        exec,
        tracked: sp.tracked_hash(&up(1, city, seq).data),
    };
    // Key 1 was "a" at 10, then "b" at 20, deleted at its close.
    let kept = vec![closed("a", 10, 1), closed("b", 20, 2)];
    let deleted = || KeyState { brief: Some(kept.clone()), ..Default::default() };
    let apply = |row: InRow, state: KeyState| {
        let mut out = Output::default();
        apply_key(&sp, &ctx, key.clone(), vec![row], state, &mut out);
        out
    };

    // The version valid at 15 is "a": nothing changes, nothing handed back.
    let out = apply(up(1, "a", 15), deleted());
    assert_eq!(out.stats.late_noop, 1);
    assert!(!out.has_changes() && out.deleted_briefs.is_empty());

    // A changed late row: a closed version, and the longer brief handed back.
    let out = apply(up(1, "x", 15), deleted());
    assert_eq!((out.stats.late_inserted, out.history_appends.len()), (1, 1));
    assert!(out.upserts.is_empty() && out.index.is_empty(), "the key stays deleted");
    let longer = [kept.clone(), vec![closed("x", 15, 5)]].concat();
    let want: std::sync::Arc<[u8]> = brief::encode(&longer, fp).unwrap().into();
    assert_eq!(out.deleted_briefs, vec![(key.clone(), Some(want))]);

    // Without the brief the same row is not known to be late: it would
    // reopen the key (the table reads history for such keys instead).
    let out = apply(up(1, "x", 15), KeyState::default());
    assert_eq!(out.stats.late_inserted, 0);

    // A newer row revives the key: its open version carries the brief, and
    // the kept one is dropped.
    let out = apply(up(1, "c", 25), deleted());
    assert_eq!(out.stats.revived, 1);
    let want: std::sync::Arc<[u8]> = brief::encode(&kept, fp).unwrap().into();
    assert_eq!(out.upserts[0].1.brief.as_ref(), Some(&want));
    assert_eq!(out.deleted_briefs, vec![(key.clone(), None)]);

    // An open version closed by a delete without being read: its stored
    // brief with the closed version appended is handed back.
    let open = Version {
        data: up(1, "c", 30).data,
        valid_from: Some(500),
        valid_to: None,
        current: true,
        deleted: false,
        exec: 3,
        sk: None,
        loc: None,
        brief: None,
    };
    let stored = Stored { bytes: brief::encode(&kept, fp).unwrap().into(), exec: 3 };
    let state = KeyState {
        stored: Some(sp.summary(&open)),
        stored_brief: Some(stored),
        ..Default::default()
    };
    let out = apply(del(1, 31), state);
    assert_eq!(out.stats.deleted, 1);
    let all = [kept.clone(), vec![closed("c", 30, 3)]].concat();
    let want: std::sync::Arc<[u8]> = brief::encode(&all, fp).unwrap().into();
    assert_eq!(out.deleted_briefs, vec![(key, Some(want))]);
}

/// docs/scd2.md, business time: an integer time column's unit is the one
/// its name says (`source.ts_ms` is Debezium's epoch milliseconds; it was
/// read as microseconds, dating 2026 events to January 1970).
#[test]
fn scd2_business_time_integers_take_the_unit_their_column_names() {
    use crate::merge::{IntUnit, TimeColumn};
    let unit = |name: &str| TimeColumn::named(0, name).int_unit;
    assert_eq!(unit("source.ts_ms"), IntUnit::Millis);
    assert_eq!(unit("ts_ms"), IntUnit::Millis);
    assert_eq!(unit("source.ts_ns"), IntUnit::Nanos);
    assert_eq!(unit("source.ts_us"), IntUnit::Micros);
    assert_eq!(unit("effective_date"), IntUnit::Micros);
    let mut t = table(Strategy::Scd2, |s| {
        s.valid_time = ValidTime::Column(TimeColumn::named(MOD, "modified_ms"));
    });
    t.run(vec![up_mod(1, "a", 1, 20_000 * 86_400_000)]);
    assert_eq!(days(&t), vec![(20_000, None, "a".into(), true, false)], "day 20,000: 2024-10-04");
}
