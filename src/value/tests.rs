//! Values: key encoding, inference, exact conversions, decimals and dates.
use super::*;

#[test]
fn key_encoding_decodes_back() {
    let vals = vec![
        Value::Str("acc-é".into()),
        Value::Int(-7),
        Value::Null,
        Value::Bool(true),
        Value::Float(2.5),
        Value::Ts(1_700_000_000_000_000),
        Value::Str(Text::new("")),
        Value::decimal(-1234567890123456789012345678901234567, 2),
        Value::Date(-165),
        Value::bytes(vec![0, 255]),
    ];
    let mut bytes = vec![];
    vals.iter().for_each(|v| v.encode(&mut bytes));
    let back = Value::decode_all(&bytes).unwrap();
    assert_eq!(back.len(), vals.len());
    assert!(back.iter().zip(&vals).all(|(a, b)| a.same(b)), "{back:?}");
    assert!(Value::decode_all(&bytes[..bytes.len() - 1]).is_none(), "a truncated key is not a key");
    assert!(Value::decode_all(&[9]).is_none());
}

#[test]
fn null_sorts_lowest() {
    assert_eq!(Value::Null.total_cmp(&Value::Int(i64::MIN)), Ordering::Less);
    assert_eq!(Value::Str("".into()).total_cmp(&Value::Null), Ordering::Greater);
}

#[test]
fn composite_sequences_compare_column_by_column() {
    let a = [Value::Int(1), Value::Int(9)];
    let b = [Value::Int(2), Value::Int(0)];
    assert_eq!(cmp_slices(&a, &b), Ordering::Less);
    let c = [Value::Int(1), Value::Null];
    assert_eq!(cmp_slices(&c, &a), Ordering::Less);
}

#[test]
fn inference_picks_the_narrowest_type() {
    assert_eq!(infer("42"), Some(DType::Int));
    assert_eq!(infer("-4.5"), Some(DType::Float));
    assert_eq!(infer("TRUE"), Some(DType::Bool));
    assert_eq!(infer("2024-01-02"), Some(DType::Ts), "CSV dates stay timestamps unless declared");
    assert_eq!(infer("2024-01-02T03:04:05Z"), Some(DType::Ts));
    assert_eq!(infer("Köln"), Some(DType::Str));
    assert_eq!(infer("nan"), Some(DType::Str));
    assert_eq!(infer(""), None);
    assert_eq!(unify(Some(DType::Int), Some(DType::Float)), Some(DType::Float));
    assert_eq!(unify(Some(DType::Int), Some(DType::Bool)), Some(DType::Str));
}

#[test]
fn conversion_refuses_lossy_values() {
    assert!(Value::Str("abc".into()).convert(DType::Int).is_err());
    assert!(Value::Float(1.5).convert(DType::Int).is_err());
    assert!(Value::Float(2.0).convert(DType::Int).is_ok());
    assert!(matches!(Value::Int(3).convert(DType::Float), Ok(Value::Float(f)) if f == 3.0));
}

#[test]
fn encoding_distinguishes_types_and_null() {
    let enc = |v: &Value| {
        let mut o = vec![];
        v.encode(&mut o);
        o
    };
    assert_ne!(enc(&Value::Int(1)), enc(&Value::Str("1".into())));
    assert_ne!(enc(&Value::Null), enc(&Value::Str(Text::new(""))));
}

#[test]
fn declared_types_parse_as_columns_writes_them() {
    assert_eq!(DType::parse("decimal(38,6)"), Ok(DType::Decimal { precision: 38, scale: 6 }));
    assert_eq!(DType::parse("NUMERIC(10)"), Ok(DType::Decimal { precision: 10, scale: 0 }));
    assert_eq!(DType::parse("date"), Ok(DType::Date));
    assert_eq!(DType::parse("time"), Ok(DType::Time));
    assert!(DType::parse("decimal(39,2)").unwrap_err().contains("at most 38 digits"));
    assert!(DType::parse("decimal(5,6)").unwrap_err().contains("scale 6"));
    assert!(DType::parse("decimal").is_err());
    assert!(DType::parse("money").is_err());
    assert_eq!(DType::Decimal { precision: 20, scale: 2 }.to_string(), "decimal(20,2)");
}

#[test]
fn declared_decimals_and_dates_convert_exactly_or_not_at_all() {
    let d = DType::Decimal { precision: 20, scale: 2 };
    let ok = |v: Value, t: DType| v.convert(t).unwrap().to_string();
    assert_eq!(ok(Value::Str("12345678901234567.89".into()), d), "12345678901234567.89");
    assert_eq!(ok(Value::Str("-0.1".into()), d), "-0.10");
    assert_eq!(ok(Value::Int(7), d), "7.00");
    assert_eq!(ok(Value::Float(12.34), d), "12.34");
    assert_eq!(
        ok(Value::decimal(314159, 5), DType::Decimal { precision: 38, scale: 18 }),
        "3.141590000000000000"
    );
    assert!(Value::Str("1.234".into()).convert(d).is_err());
    assert!(Value::decimal(314159, 5).convert(DType::Decimal { precision: 38, scale: 4 }).is_err());
    assert!(Value::Str("abc".into()).convert(d).is_err());
    assert_eq!(ok(Value::Str("1969-07-20".into()), DType::Date), "1969-07-20");
    assert_eq!(ok(Value::Int(-165), DType::Date), "1969-07-20");
    assert_eq!(ok(Value::Int(36_930_123_456), DType::Time), "10:15:30.123456");
    assert_eq!(ok(Value::Str("10:15:30".into()), DType::Time), "10:15:30");
    // Tables from older versions: float and timestamp columns.
    assert!(matches!(Value::decimal(1, 2).convert(DType::Float), Ok(Value::Float(f)) if f == 0.01));
    assert!(matches!(Value::Date(1).convert(DType::Ts), Ok(Value::Ts(86_400_000_000))));
    assert!(Value::Ts(1).convert(DType::Date).is_err(), "a time of day is never dropped");
}

#[test]
fn decimals_compare_and_unify_exactly() {
    assert!(Value::decimal(150, 2).same(&Value::decimal(15, 1)));
    assert_eq!(Value::decimal(1, 2).total_cmp(&Value::Int(0)), Ordering::Greater);
    assert_eq!(Value::Date(0).total_cmp(&Value::Ts(1)), Ordering::Less);
    let dec = |p, s| Some(DType::Decimal { precision: p, scale: s });
    assert_eq!(unify(dec(10, 2), dec(12, 2)), dec(12, 2));
    assert_eq!(unify(dec(10, 2), dec(10, 4)), dec(12, 4));
    assert_eq!(unify(dec(38, 0), dec(38, 2)), Some(DType::Str));
}

proptest::proptest! {
    /// Decimals survive text, Kafka Connect bytes and the key encoding
    /// exactly, and equal values at a column's scale are one key.
    #[test]
    fn decimals_round_trip_through_text_bytes_and_keys(
        digits in 1u32..=38,
        raw in proptest::num::i128::ANY,
        scale in 0u8..=38,
        extra in 0u8..=5,
    ) {
        let limit = decimal::pow10(digits).unwrap();
        let v = raw % limit;
        let scale = scale.min(digits as u8);
        let text = decimal::format(v, scale as i32);
        proptest::prop_assert_eq!(decimal::parse(&text), Some((v, scale as i32)));
        proptest::prop_assert_eq!(decimal::from_be_bytes(&decimal::to_be_bytes(v)), Some(v));
        let mut key = vec![];
        Value::decimal(v, scale as i32).encode(&mut key);
        let back = Value::decode_all(&key).unwrap();
        proptest::prop_assert!(back[0].same(&Value::decimal(v, scale as i32)));
        // The same number written with more zeros converts to the same key.
        let t = DType::Decimal { precision: 38, scale };
        if let Some(wider) = decimal::rescale(v, scale as i32, (scale + extra) as i32) {
            if decimal::digits(wider) <= 38 {
                let a = Value::decimal(wider, (scale + extra) as i32).convert(t).unwrap();
                let mut ka = vec![];
                a.encode(&mut ka);
                proptest::prop_assert_eq!(ka, key);
            }
        }
    }

    #[test]
    fn dates_and_times_round_trip_through_text(days in -719_162i32..2_932_896, us in 0i64..86_400_000_000) {
        let d = temporal::format_date(days);
        proptest::prop_assert_eq!(temporal::parse_date(&d), Some(days));
        proptest::prop_assert_eq!(temporal::parse_time(&temporal::format_time(us)), Some(us));
    }
}

#[test]
fn a_cell_stays_24_bytes_and_short_text_needs_no_allocation() {
    assert_eq!(std::mem::size_of::<Value>(), 24, "cells are copied per row on the hot path");
    for v in [i128::MIN, -1, 0, 1, 10i128.pow(38) - 1, i128::MAX] {
        assert_eq!(Unscaled::from(v).get(), v, "a decimal's unscaled value round-trips");
    }
    let Value::Str(code) = Value::Str("AC-00092291".into()) else { unreachable!() };
    assert!(!code.is_heap_allocated(), "a short text lives in the cell");
    let ts = Text::from("2026-03-01T21:14:00.123456+00:00".to_string());
    assert!(ts.is_heap_allocated() && ts == "2026-03-01T21:14:00.123456+00:00");
}

/// docs/types.md, "JSON numbers": a number kept as its text converts
/// exactly into decimals, integers and text, and compares as the number.
#[test]
fn types_json_numbers_convert_exactly_and_compare_as_numbers() {
    let n = |t: &str| Value::Number(t.into());
    let dec = DType::Decimal { precision: 20, scale: 2 };
    assert_eq!(n("12345678901234567.89").convert(dec).unwrap().to_string(), "12345678901234567.89");
    assert!(n("1.005").convert(dec).is_err(), "a third decimal place is refused, not rounded");
    assert_eq!(
        n("1.2345678901234567e2").convert(DType::Str).unwrap().to_string(),
        "1.2345678901234567e2"
    );
    let Value::Int(i) = n("1234567890123456789.0").convert(DType::Int).unwrap() else { panic!() };
    assert_eq!(i, 1_234_567_890_123_456_789);
    assert!(n("99999999999999999999").convert(DType::Int).is_err());
    let Value::Float(f) = n("0.30000000000000004").convert(DType::Float).unwrap() else { panic!() };
    assert_eq!(f, 0.1 + 0.2);
    assert_eq!(n("0.30000000000000004").dtype(), Some(DType::Float), "infers as a double");
    // Ordering: exact against decimals and integers, by value against floats.
    let a = n("12345678901234567.89");
    assert!(a.total_cmp(&n("12345678901234567.8")) == std::cmp::Ordering::Greater);
    assert!(a.total_cmp(&Value::decimal(1234567890123456789, 2)) == std::cmp::Ordering::Equal);
    assert!(n("9223372036854775808").total_cmp(&Value::Int(i64::MAX)).is_gt());
    assert!(n("0.30000000000000004").same(&Value::Float(0.1 + 0.2)));
    assert!(n("-1e30").total_cmp(&Value::Null).is_gt(), "NULL sorts lowest");
}
