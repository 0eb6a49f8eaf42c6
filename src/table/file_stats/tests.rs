//! Delta statistics rules (docs/commit-protocol.md, "File statistics"), one test per rule.

use std::sync::Arc;

use deltalake::arrow::array::{
    BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int64Array, RecordBatch,
    StringArray, TimestampMicrosecondArray,
};
use deltalake::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

use super::*;

fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> =
        cols.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols.into_iter().map(|(_, a)| a).collect())
        .unwrap()
}

fn parsed(stats: &str) -> serde_json::Value {
    serde_json::from_str(stats).unwrap_or_else(|e| panic!("{e}: {stats}"))
}

#[test]
fn statistics_hold_bounds_and_null_counts_of_every_indexed_column() {
    let b = batch(vec![
        ("id", Arc::new(Int64Array::from(vec![Some(7), Some(-3), None, Some(12)]))),
        ("name", Arc::new(StringArray::from(vec![Some("b"), Some("a"), Some("c"), None]))),
        ("flag", Arc::new(BooleanArray::from(vec![Some(true), None, Some(true), Some(true)]))),
        ("score", Arc::new(Float64Array::from(vec![Some(1.5), Some(2.0), None, None]))),
        ("gone", Arc::new(StringArray::from(vec![None::<&str>, None, None, None]))),
    ]);
    let s = parsed(&file_stats(&b, &StatsColumns::default(), &b.schema()));
    assert_eq!(s["numRecords"], 4);
    assert_eq!(s["minValues"]["id"], -3);
    assert_eq!(s["maxValues"]["id"], 12);
    assert_eq!(s["minValues"]["name"], "a");
    assert_eq!(s["maxValues"]["name"], "c");
    assert_eq!(s["minValues"]["flag"], true);
    assert_eq!(s["minValues"]["score"], 1.5);
    assert_eq!(s["maxValues"]["score"], 2.0);
    assert_eq!(s["nullCount"]["id"], 1);
    assert_eq!(s["nullCount"]["name"], 1);
    assert_eq!(s["nullCount"]["gone"], 4);
    // An all-NULL column has a null count and no bounds.
    assert!(s["minValues"].get("gone").is_none() && s["maxValues"].get("gone").is_none());
}

#[test]
fn statistics_cover_the_first_32_columns_unless_the_table_says_otherwise() {
    let cols: Vec<(String, ArrayRef)> = (0..40)
        .map(|i| (format!("c{i:02}"), Arc::new(Int64Array::from(vec![i as i64])) as ArrayRef))
        .collect();
    let b = batch(cols.iter().map(|(n, a)| (n.as_str(), a.clone())).collect());
    let s = parsed(&file_stats(&b, &StatsColumns::default(), &b.schema()));
    assert_eq!(s["nullCount"].as_object().unwrap().len(), 32);
    assert!(s["minValues"].get("c31").is_some() && s["minValues"].get("c32").is_none());

    let props = |k: &str, v: &str| HashMap::from([(k.to_string(), v.to_string())]);
    assert_eq!(
        StatsColumns::from_properties(&props("delta.dataSkippingNumIndexedCols", "-1")),
        StatsColumns::All
    );
    let five = StatsColumns::from_properties(&props("delta.dataSkippingNumIndexedCols", "5"));
    assert_eq!(
        parsed(&file_stats(&b, &five, &b.schema()))["nullCount"].as_object().unwrap().len(),
        5
    );
    let named =
        StatsColumns::from_properties(&props("delta.dataSkippingStatsColumns", "c39, `c02`"));
    let s = parsed(&file_stats(&b, &named, &b.schema()));
    let keys: Vec<&String> = s["minValues"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["c02", "c39"]);
    assert_eq!(
        StatsColumns::from_properties(&props("delta.dataSkippingNumIndexedCols", "x")),
        StatsColumns::default()
    );
}

#[test]
fn string_bounds_are_cut_to_32_characters_and_stay_bounds() {
    let long_a = "a".repeat(40);
    let long_z = format!("{}é{}", "z".repeat(31), "q".repeat(10));
    let b = batch(vec![("s", Arc::new(StringArray::from(vec![long_a.as_str(), long_z.as_str()])))]);
    let s = parsed(&file_stats(&b, &StatsColumns::default(), &b.schema()));
    let lo = s["minValues"]["s"].as_str().unwrap();
    let hi = s["maxValues"]["s"].as_str().unwrap();
    assert_eq!(lo, "a".repeat(32));
    assert_eq!(hi, format!("{}é{}", "z".repeat(31), char::MAX));
    assert!(lo <= long_a.as_str() && hi >= long_z.as_str());
    // A maximum continuing with U+10FFFF is extended over it; short strings are exact.
    let tricky = format!("{}{}x", "m".repeat(32), char::MAX);
    assert_eq!(
        string_max(&tricky).unwrap(),
        format!("{}{}{}", "m".repeat(32), char::MAX, char::MAX)
    );
    assert!(string_max(&tricky).unwrap().as_str() >= tricky.as_str());
    assert_eq!(string_max("short").unwrap(), "short");
    let hopeless = format!("{}{}", "m".repeat(32), char::MAX.to_string().repeat(40));
    assert_eq!(string_max(&format!("{hopeless}x")), None);
}

#[test]
fn timestamps_are_floored_to_milliseconds_and_dates_written_as_dates() {
    let ts = TimestampMicrosecondArray::from(vec![1_700_000_000_123_999, -1]).with_timezone("UTC");
    let b =
        batch(vec![("at", Arc::new(ts)), ("day", Arc::new(Date32Array::from(vec![0, 19_723])))]);
    let s = parsed(&file_stats(&b, &StatsColumns::default(), &b.schema()));
    assert_eq!(s["minValues"]["at"], "1969-12-31T23:59:59.999Z");
    assert_eq!(s["maxValues"]["at"], "2023-11-14T22:13:20.123Z");
    assert_eq!(s["minValues"]["day"], "1970-01-01");
    assert_eq!(s["maxValues"]["day"], "2024-01-01");
    assert_eq!(
        b.schema().field(0).data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );
}

#[test]
fn decimal_bounds_are_exact_numbers() {
    let d = Decimal128Array::from(vec![
        Some(12_345_678_901_234_567_890_123_456_789i128),
        Some(-5),
        None,
    ])
    .with_precision_and_scale(38, 9)
    .unwrap();
    let b = batch(vec![("amount", Arc::new(d))]);
    let text = file_stats(&b, &StatsColumns::default(), &b.schema());
    assert!(text.contains("\"minValues\":{\"amount\":-0.000000005}"), "{text}");
    assert!(text.contains("\"maxValues\":{\"amount\":12345678901234567890.123456789}"), "{text}");
    assert_eq!(parsed(&text)["nullCount"]["amount"], 1);
}

#[test]
fn binary_and_nan_columns_get_no_bounds() {
    let b = batch(vec![
        ("blob", Arc::new(BinaryArray::from(vec![b"x".as_ref(), b"y".as_ref()]))),
        ("f", Arc::new(Float64Array::from(vec![1.0, f64::NAN]))),
        ("g", Arc::new(Float64Array::from(vec![1.0, f64::INFINITY]))),
        ("h", Arc::new(Float64Array::from(vec![3.0, 1e300]))),
    ]);
    let s = parsed(&file_stats(&b, &StatsColumns::default(), &b.schema()));
    for c in ["blob", "f", "g"] {
        assert!(s["minValues"].get(c).is_none(), "{c}: {s}");
        assert_eq!(s["nullCount"][c], 0);
    }
    assert_eq!(s["minValues"]["h"], 3.0);
    assert_eq!(s["maxValues"]["h"], 1e300);
}

#[test]
fn a_deletion_vector_makes_the_bounds_wide() {
    assert_eq!(widened("{\"numRecords\":3}"), "{\"tightBounds\":false,\"numRecords\":3}");
    assert_eq!(
        widened("{\"numRecords\":3,\"tightBounds\":true}"),
        "{\"numRecords\":3,\"tightBounds\":false}"
    );
    assert_eq!(widened("{\"tightBounds\":false}"), "{\"tightBounds\":false}");
    assert_eq!(widened("{}"), "{\"tightBounds\":false}");
}

/// docs/schema.md, "What a data file holds": a file may leave out a column
/// that is NULL in all its rows; its statistics are those the column would
/// have had (every row NULL, no bounds), and which columns get statistics
/// counts the table's columns, not the file's.
#[test]
fn statistics_count_a_column_the_file_leaves_out_as_null_in_every_row() {
    let a = |v: i64| Arc::new(Int64Array::from(vec![v, v + 1])) as ArrayRef;
    let table = batch(vec![("a", a(1)), ("b", a(2)), ("c", a(3)), ("d", a(4))]).schema();
    let held = batch(vec![("a", a(1)), ("c", a(3)), ("d", a(4))]);
    let first_three = StatsColumns::First(3);
    let s = parsed(&file_stats(&held, &first_three, &table));
    assert_eq!(s["numRecords"], 2);
    assert_eq!(s["nullCount"], serde_json::json!({"a": 0, "b": 2, "c": 0}));
    assert_eq!(s["minValues"], serde_json::json!({"a": 1, "c": 3}));
    assert_eq!(s["maxValues"], serde_json::json!({"a": 2, "c": 4}));
    // The whole width gives the same statistics for the columns it shares.
    let whole = batch(vec![
        ("a", a(1)),
        ("b", Arc::new(Int64Array::from(vec![None, None]))),
        ("c", a(3)),
        ("d", a(4)),
    ]);
    assert_eq!(parsed(&file_stats(&whole, &first_three, &table)), s);
}
