//! Unchanged values the source left out (Debezium's placeholder for
//! PostgreSQL TOAST columns, docs/types.md): the stored value is kept.

use super::*;

/// An upsert whose city the source left out as unchanged.
fn up_unchanged_city(id: i64, seq: i64, modified: i64) -> InRow {
    let mut r = up_mod(id, "", seq, modified);
    r.unavailable = vec![CITY];
    r
}

#[test]
fn types_toast_scd1_keeps_the_stored_value_and_updates_the_rest_in_place() {
    let mut t = table(Strategy::Scd1, |_| {});
    t.run(vec![up_mod(1, "Berlin", 1, 10)]);
    let out = t.run(vec![up_unchanged_city(1, 2, 11)]);
    assert_eq!(out.stats.updated, 1, "modified_on changed: {:?}", out.stats);
    let rows = t.rows();
    assert_eq!(city(&rows[0]), "Berlin");
    assert_eq!(rows[0].data[MOD], Value::Int(11));
}

#[test]
fn types_toast_a_change_confined_to_placeholder_columns_is_not_a_change() {
    for strategy in [Strategy::Scd1, Strategy::Scd2] {
        let mut t = table(strategy, |_| {});
        t.run(vec![up_mod(1, "Berlin", 1, 10)]);
        let before = t.rows();
        let out = t.run(vec![up_unchanged_city(1, 2, 10)]);
        assert_eq!(
            out.stats.updated + out.stats.versions_closed,
            0,
            "{strategy:?}: {:?}",
            out.stats
        );
        assert_eq!(t.rows().len(), before.len());
        assert_eq!(city(&t.rows()[0]), "Berlin");
    }
}

#[test]
fn types_toast_scd2_carries_the_stored_value_into_the_new_version() {
    let mut t = table(Strategy::Scd2, |_| {});
    t.run(vec![up_mod(1, "Berlin", 1, 10)]);
    t.run(vec![up_unchanged_city(1, 2, 11)]);
    let rows = t.rows();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|v| city(v) == "Berlin"), "{rows:?}");
    let open = rows.iter().find(|v| v.current).unwrap();
    assert_eq!(open.data[MOD], Value::Int(11));
}

#[test]
fn types_toast_a_key_without_a_stored_row_gets_null_and_is_counted() {
    let mut t = table(Strategy::Scd1, |_| {});
    let out = t.run(vec![up_unchanged_city(7, 1, 10)]);
    assert_eq!(out.stats.unavailable_nulls, 1);
    assert_eq!(t.rows()[0].data[CITY], Value::Null);
}

#[test]
fn types_toast_takes_the_previous_value_of_the_key_in_the_same_batch() {
    for strategy in [Strategy::Scd1, Strategy::Scd2] {
        let mut t = table(strategy, |_| {});
        t.run(vec![up_mod(1, "Berlin", 1, 10)]);
        // Bonn is set and then left unchanged by a later event of the same batch.
        t.run(vec![up_mod(1, "Bonn", 2, 11), up_unchanged_city(1, 3, 12)]);
        let open = t.rows().into_iter().find(|v| v.current).unwrap();
        assert_eq!(
            (city(&open), open.data[MOD].clone()),
            ("Bonn".into(), Value::Int(12)),
            "{strategy:?}"
        );
    }
}
