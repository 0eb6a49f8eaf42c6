//! Avro values as cells: each field by its plan's conversion (docs/types.md
//! maps the types), with the JSON path's fallbacks — a value without the
//! shape its schema announces is kept as it is and the batch's typing
//! dead-letters its row (reason `type`).

use apache_avro::types::Value as A;
use base64::Engine;
use compact_str::ToCompactString;
use serde_json::Value as J;

use super::plan::Conv;
use crate::value::temporal::format_time;
use crate::value::{decimal, parse_ts, Value};

/// A field's value as a cell.
pub(super) fn cell(v: A, conv: Conv) -> Value {
    let v = unwrap(v);
    if matches!(v, A::Null) || conv == Conv::Unstorable {
        return Value::Null;
    }
    let converted = match (conv, &v) {
        (Conv::Plain, _) => None,
        (Conv::TsMillis, A::Long(x) | A::TimestampMillis(x) | A::LocalTimestampMillis(x)) => {
            // Saturated beyond i64 microseconds: refused where typed.
            Some(Value::Ts(x.saturating_mul(1000)))
        }
        (Conv::TsMicros, A::Long(x) | A::TimestampMicros(x) | A::LocalTimestampMicros(x)) => {
            Some(Value::Ts(*x))
        }
        (Conv::TsNanos, A::Long(x) | A::TimestampNanos(x) | A::LocalTimestampNanos(x)) => {
            Some(Value::Ts(x.div_euclid(1000)))
        }
        (Conv::ZonedTs, A::String(s)) => parse_ts(s).map(Value::Ts),
        (Conv::Date, A::Int(d) | A::Date(d)) => Some(Value::Date(*d)),
        (Conv::TimeMillis, A::Int(ms) | A::TimeMillis(ms)) => {
            Some(Value::Str(format_time(*ms as i64 * 1000).into()))
        }
        (Conv::TimeMillis, A::Long(ms)) => {
            ms.checked_mul(1000).map(|us| Value::Str(format_time(us).into()))
        }
        (Conv::TimeMicros, A::Long(us) | A::TimeMicros(us)) => {
            Some(Value::Str(format_time(*us).into()))
        }
        (Conv::TimeNanos, A::Long(ns)) => Some(Value::Str(format_time(ns.div_euclid(1000)).into())),
        (Conv::Decimal(scale), A::Bytes(b) | A::Fixed(_, b)) => {
            decimal::from_be_bytes(b).map(|u| Value::decimal(u, scale))
        }
        (Conv::Decimal(scale), A::Decimal(d)) => {
            decimal::from_be_bytes(&decimal_bytes(d)).map(|u| Value::decimal(u, scale))
        }
        (Conv::VariableScaleDecimal, A::Record(fields)) => variable_scale_decimal(fields),
        (Conv::WideDecimal(scale), A::Bytes(b) | A::Fixed(_, b)) => Some(wide(b, scale)),
        (Conv::WideDecimal(scale), A::Decimal(d)) => Some(wide(&decimal_bytes(d), scale)),
        (Conv::WideDecimal(_), _) => Some(Value::Null),
        _ => None,
    };
    converted.unwrap_or_else(|| plain(v))
}

/// A decimal's bytes as the message held them. `apache_avro` keeps the
/// value and the length it was read with, and gives the bytes back only
/// when the value fits that length: a decimal of zero bytes (0, as
/// `from_be_bytes` and the bytes path read it) has none to give.
fn decimal_bytes(d: &apache_avro::Decimal) -> Vec<u8> {
    Vec::<u8>::try_from(d).unwrap_or_default()
}

/// A decimal beyond 38 digits as its exact text (a column `columns:`
/// declares `string` stores it, a decimal one refuses it); NULL beyond
/// what [`decimal::big_text_of`] writes out.
pub(super) fn wide(bytes: &[u8], scale: i32) -> Value {
    decimal::big_text_of(bytes, scale).map_or(Value::Null, |t| Value::Str(t.into()))
}

/// `io.debezium.data.VariableScaleDecimal`: `{scale: int, value: bytes}`;
/// beyond 38 digits its exact text, as on the JSON path.
fn variable_scale_decimal(fields: &[(String, A)]) -> Option<Value> {
    let (mut scale, mut value) = (None, None);
    for (name, v) in fields {
        match (name.as_str(), v) {
            ("scale", A::Int(s)) => scale = Some(*s),
            ("value", A::Bytes(b)) => value = Some(b),
            _ => return None,
        }
    }
    let (scale, value) = (scale?, value?);
    Some(match decimal::from_be_bytes(value) {
        Some(u) => Value::decimal(u, scale),
        None => decimal::big_text_of(value, scale).map(|t| Value::Str(t.into()))?,
    })
}

fn unwrap(v: A) -> A {
    match v {
        A::Union(_, inner) => unwrap(*inner),
        v => v,
    }
}

/// A value by its own Avro type: what a field without a semantic type,
/// an envelope field or a key field becomes.
pub(super) fn plain(v: A) -> Value {
    match unwrap(v) {
        A::Null => Value::Null,
        A::Boolean(b) => Value::Bool(b),
        A::Int(i) => Value::Int(i as i64),
        A::Long(i) => Value::Int(i),
        // The float's shortest text, as the JSON converter writes it: a
        // float32 1.1 is 1.1, not 1.100000023841858.
        A::Float(f) => Value::Float(f.to_string().parse().unwrap_or(f as f64)),
        A::Double(f) => Value::Float(f),
        A::String(s) | A::Enum(_, s) => Value::Str(s.into()),
        A::Bytes(b) | A::Fixed(_, b) => Value::bytes(b),
        A::Uuid(u) => Value::Str(u.to_compact_string()),
        A::Date(d) => Value::Date(d),
        A::TimeMillis(ms) => Value::Str(format_time(ms as i64 * 1000).into()),
        A::TimeMicros(us) => Value::Str(format_time(us).into()),
        A::TimestampMillis(ms) | A::LocalTimestampMillis(ms) => Value::Ts(ms.saturating_mul(1000)),
        A::TimestampMicros(us) | A::LocalTimestampMicros(us) => Value::Ts(us),
        A::TimestampNanos(ns) | A::LocalTimestampNanos(ns) => Value::Ts(ns.div_euclid(1000)),
        other => Value::Str(json(other).to_compact_string()),
    }
}

/// A nested value as the JSON the JSON converter would have sent (bytes
/// as base64), kept as text like the JSON path keeps nested values.
fn json(v: A) -> J {
    match unwrap(v) {
        A::Null => J::Null,
        A::Boolean(b) => J::Bool(b),
        A::Int(i) | A::Date(i) | A::TimeMillis(i) => J::from(i),
        A::Long(i)
        | A::TimeMicros(i)
        | A::TimestampMillis(i)
        | A::TimestampMicros(i)
        | A::TimestampNanos(i)
        | A::LocalTimestampMillis(i)
        | A::LocalTimestampMicros(i)
        | A::LocalTimestampNanos(i) => J::from(i),
        A::Float(f) => f.to_string().parse::<f64>().map_or(J::Null, J::from),
        A::Double(f) => J::from(f),
        A::String(s) | A::Enum(_, s) => J::String(s),
        A::Bytes(b) | A::Fixed(_, b) => {
            J::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        A::Uuid(u) => J::String(u.to_string()),
        A::Array(items) => J::Array(items.into_iter().map(json).collect()),
        A::Map(m) => {
            let mut entries: Vec<(String, A)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            J::Object(entries.into_iter().map(|(k, v)| (k, json(v))).collect())
        }
        A::Record(fields) => J::Object(fields.into_iter().map(|(k, v)| (k, json(v))).collect()),
        A::Decimal(d) => {
            J::String(base64::engine::general_purpose::STANDARD.encode(decimal_bytes(&d)))
        }
        other => J::String(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avro_values_become_the_cells_their_json_twins_become() {
        assert_eq!(cell(A::Union(1, Box::new(A::Long(5))), Conv::Plain), Value::Int(5));
        assert_eq!(cell(A::Union(0, Box::new(A::Null)), Conv::TsMicros), Value::Null);
        assert_eq!(cell(A::Long(1_500), Conv::TsMillis), Value::Ts(1_500_000));
        assert_eq!(cell(A::TimestampMicros(-1), Conv::TsMicros), Value::Ts(-1), "pre-1970 exact");
        assert_eq!(cell(A::Long(-1_500), Conv::TsNanos), Value::Ts(-2));
        assert_eq!(
            cell(A::String("2024-01-02T03:04:05.123456+01:00".into()), Conv::ZonedTs),
            Value::Ts(parse_ts("2024-01-02T02:04:05.123456Z").unwrap())
        );
        assert_eq!(cell(A::Date(-3), Conv::Date), Value::Date(-3));
        assert_eq!(
            cell(A::Long(3_723_000_001), Conv::TimeMicros),
            Value::Str("01:02:03.000001".into())
        );
        assert_eq!(cell(A::Int(1_000), Conv::TimeMillis), Value::Str("00:00:01".into()));
        assert_eq!(cell(A::Bytes(vec![0xff, 0x85]), Conv::Decimal(2)), Value::decimal(-123, 2));
        assert_eq!(cell(A::Fixed(2, vec![0x01, 0x00]), Conv::Decimal(1)), Value::decimal(256, 1));
        // A decimal of zero bytes is 0 however it was annotated (it was
        // the text "null" when read as a decimal value).
        let empty = A::Decimal(apache_avro::Decimal::from(Vec::<u8>::new()));
        assert_eq!(cell(A::Bytes(vec![]), Conv::Decimal(2)), Value::decimal(0, 2));
        assert_eq!(cell(empty, Conv::Decimal(2)), Value::decimal(0, 2));
        let vsd = A::Record(vec![
            ("scale".into(), A::Int(5)),
            ("value".into(), A::Bytes(vec![0x04, 0xcb, 0x2f])),
        ]);
        assert_eq!(cell(vsd, Conv::VariableScaleDecimal), Value::decimal(314_159, 5));
        assert_eq!(cell(A::Float(1.1), Conv::Plain), Value::Float(1.1));
        assert_eq!(cell(A::Enum(1, "B".into()), Conv::Plain), Value::Str("B".into()));
        assert_eq!(cell(A::Bytes(vec![1, 2]), Conv::Plain), Value::bytes(vec![1, 2]));
        assert_eq!(cell(A::Long(7), Conv::Unstorable), Value::Null);
        // docs/types.md: a decimal beyond 38 digits is its exact text, as
        // on the JSON path (-10^48 - 0.01 at scale 2), declared so or as
        // a VariableScaleDecimal; a small one too, and nothing else.
        let big = base64::engine::general_purpose::STANDARD
            .decode("u5PE6gZtmXgtO/rLAkqb////////")
            .unwrap();
        let text = "-1000000000000000000000000000000000000000000000000.01";
        assert_eq!(cell(A::Bytes(big.clone()), Conv::WideDecimal(2)), Value::Str(text.into()));
        assert_eq!(cell(A::Bytes(vec![0x05]), Conv::WideDecimal(2)), Value::Str("0.05".into()));
        assert_eq!(cell(A::String("x".into()), Conv::WideDecimal(2)), Value::Null);
        let vsd = A::Record(vec![("scale".into(), A::Int(2)), ("value".into(), A::Bytes(big))]);
        assert_eq!(cell(vsd, Conv::VariableScaleDecimal), Value::Str(text.into()));
        // Not the announced shape: kept as sent, for typing to refuse.
        assert_eq!(cell(A::String("x".into()), Conv::Date), Value::Str("x".into()));
        let nested = A::Record(vec![
            ("a".into(), A::Int(1)),
            ("b".into(), A::Array(vec![A::String("x".into())])),
        ]);
        assert_eq!(cell(nested, Conv::Plain), Value::Str(r#"{"a":1,"b":["x"]}"#.into()));
    }
}
