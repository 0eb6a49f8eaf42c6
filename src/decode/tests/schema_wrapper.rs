//! The schema wrapper (the JSON converter with schemas enabled): types
//! from the schema, and its fast path against the general path.

use super::*;

/// A PostgreSQL change event with the schema wrapper, in the shape of the
/// connector documentation: NUMERIC without scale (VariableScaleDecimal),
/// TIME (MicroTime), DATE, and an int32 column NULL in this event.
const PG_TYPES_WITH_SCHEMA: &str = r#"{"schema":{"type":"struct","fields":[
 {"type":"struct","optional":true,"field":"after","fields":[
  {"type":"int32","optional":false,"field":"id"},
  {"type":"struct","optional":true,"name":"io.debezium.data.VariableScaleDecimal","version":1,"fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}],"field":"price"},
  {"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1,"field":"wake"},
  {"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"born"},
  {"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"20"},"field":"amount"},
  {"type":"int32","optional":true,"field":"later_int"}]},
 {"type":"string","optional":false,"field":"op"}],"optional":false,"name":"pg.public.t.Envelope"},
 "payload":{"before":null,"after":{"id":1,"price":{"scale":5,"value":"BMsv"},"wake":36930123456,"born":-165,"amount":"ESIQ9H3pgRU=","later_int":null},"op":"c"}}"#;

#[test]
fn types_the_schema_wrapper_decodes_exact_values_and_declares_every_column() {
    let Decoded::Row { data, declared, .. } =
        decode(Format::Debezium, None, Some(PG_TYPES_WITH_SCHEMA.as_bytes()), &[]).unwrap()
    else {
        panic!()
    };
    assert_eq!(get(&data, "price").to_string(), "3.14159");
    assert_eq!(get(&data, "wake"), &Value::Str("10:15:30.123456".into()));
    assert_eq!(get(&data, "born").to_string(), "1969-07-20");
    assert_eq!(get(&data, "amount").to_string(), "12345678901234567.89");
    let decl = |n: &str| declared.iter().find(|(c, _)| c == n).map(|(_, d)| d.clone());
    use crate::decode::Declared;
    use crate::value::DType;
    assert_eq!(decl("later_int"), Some(Declared::Exact(DType::Int)), "declared though NULL");
    assert_eq!(decl("price"), Some(Declared::VariableScaleDecimal));
    assert_eq!(decl("amount"), Some(Declared::Exact(DType::Decimal { precision: 20, scale: 2 })));
    assert_eq!(decl("wake"), Some(Declared::Exact(DType::Time)));
    assert_eq!(decl("born"), Some(Declared::Exact(DType::Date)));
    // A precision Delta cannot hold is declared unstorable, never a float.
    let wide = PG_TYPES_WITH_SCHEMA.replace("\"20\"", "\"40\"");
    let Decoded::Row { declared, .. } =
        decode(Format::Debezium, None, Some(wide.as_bytes()), &[]).unwrap()
    else {
        panic!()
    };
    assert!(declared.iter().any(|(n, d)| n == "amount"
        && matches!(d, Declared::Unstorable(e) if e.contains("decimal(40,2)"))));
}

#[test]
fn types_flat_json_with_the_schema_wrapper_is_typed_by_its_schema() {
    let msg = r#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"int32","optional":true,"name":"io.debezium.time.Date","field":"d"},{"type":"string","optional":true,"field":"__op"}]},"payload":{"id":7,"d":0,"__op":"u"}}"#;
    let Decoded::Row { data, declared, .. } =
        decode(Format::Json, None, Some(msg.as_bytes()), &[]).unwrap()
    else {
        panic!()
    };
    assert_eq!(get(&data, "id"), &Value::Int(7));
    assert_eq!(get(&data, "d"), &Value::Date(0));
    assert_eq!(declared.len(), 3);
    let tomb = r#"{"schema":{"type":"struct","fields":[]},"payload":null}"#;
    assert_eq!(decode(Format::Json, None, Some(tomb.as_bytes()), &[]).unwrap(), Decoded::Tombstone);
}

#[test]
fn types_a_variable_scale_decimal_without_its_schema_is_still_exact() {
    let msg = br#"{"after":{"id":1,"price":{"scale":5,"value":"BMsv"}},"op":"c"}"#;
    let Decoded::Row { data, .. } = decode(Format::Debezium, None, Some(msg), &[]).unwrap() else {
        panic!()
    };
    assert_eq!(get(&data, "price"), &Value::decimal(314159, 5));
}

/// A message as the JSON converter writes it with schemas enabled: the
/// schema first, no whitespace (the wrapped fast path's shape).
fn wrapped(schema: &serde_json::Value, payload: &serde_json::Value) -> String {
    format!(r#"{{"schema":{schema},"payload":{payload}}}"#)
}

/// The wrapped fast path types every logical and primitive type as the
/// general path does, values that do not fit their schema included; where
/// the parsed cell cannot tell (a float in a text column) it hands the
/// message to the general path.
#[test]
fn types_the_schema_wrapper_on_the_fast_path_as_the_general_path_does() {
    use serde_json::json;
    let field = |ty: &str, name: Option<&str>, field: &str| {
        let mut f = json!({"type": ty, "optional": true, "field": field});
        if let Some(n) = name {
            f["name"] = json!(n);
        }
        f
    };
    let mut dec = field("bytes", Some("org.apache.kafka.connect.data.Decimal"), "dec");
    dec["parameters"] = json!({"scale": "2", "connect.decimal.precision": "10"});
    let mut huge = field("bytes", Some("org.apache.kafka.connect.data.Decimal"), "huge");
    huge["parameters"] = json!({"scale": "0", "connect.decimal.precision": "50"});
    let fields = json!([
        field("int64", None, "id"),
        field("int32", None, "i"),
        field("float64", None, "f"),
        field("boolean", None, "b"),
        field("string", None, "s"),
        field("bytes", None, "bin"),
        field("int64", Some("io.debezium.time.Timestamp"), "ts"),
        field("int64", Some("io.debezium.time.MicroTimestamp"), "mts"),
        field("int64", Some("io.debezium.time.NanoTimestamp"), "nts"),
        field("string", Some("io.debezium.time.ZonedTimestamp"), "z"),
        field("int32", Some("io.debezium.time.Date"), "d"),
        field("int32", Some("io.debezium.time.Time"), "t"),
        field("int64", Some("io.debezium.time.MicroTime"), "mt"),
        field("int64", Some("io.debezium.time.NanoTime"), "nt"),
        dec,
        huge,
        field("struct", Some("io.debezium.data.VariableScaleDecimal"), "vsd"),
        field("string", Some("io.debezium.data.Json"), "j"),
    ]);
    let rows = [
        json!({"id": 1, "i": 7, "f": 1.5, "b": true, "s": "text", "bin": "AQI=",
               "ts": 1_700_000_000_000i64, "mts": 1_700_000_000_000_000i64, "nts": -1500,
               "z": "2026-03-01T10:00:00.5+01:00", "d": -165, "t": 3_600_000, "mt": 36_930_123_456i64,
               "nt": 1_000_000_001i64, "dec": "ESIQ9H3pgRU=", "huge": "AQ==",
               "vsd": {"scale": 5, "value": "BMsv"}, "j": "{\"a\":1}", "extra": 3}),
        // Values that do not have their schema's shape are kept as sent.
        json!({"id": 2, "i": 1.5, "f": 3, "b": "x", "s": 12, "bin": "not base64!",
               "ts": i64::MAX, "mts": "soon", "nts": 2.5, "z": "garbage", "d": 99_999_999_999i64,
               "t": "noon", "mt": true, "nt": null, "dec": "@@", "huge": null,
               "vsd": "text", "j": [1, 2], "extra": {"k": [1]}}),
        json!({"id": 3, "s": true, "i": u64::MAX, "f": u64::MAX, "vsd": {"scale": 1}}),
        json!({"id": 4, "s": {"nested": [1, {"b": 2}]}, "dec": {"a": 1}, "bin": [1]}),
        // A float or a decimal's object in a text column: the general path.
        json!({"id": 5, "s": 1.0}),
        json!({"id": 6, "s": 18_446_744_073_709_551_615u64}),
        json!({"id": 7, "s": {"scale": 1, "value": "AQ=="}}),
    ];
    let paths = vec!["source.lsn".to_string()];
    let envelope = json!({"type": "struct", "name": "crm.Envelope", "fields": [
        {"type": "struct", "optional": true, "field": "before", "fields": fields},
        {"type": "struct", "optional": true, "field": "after", "fields": fields},
        {"type": "struct", "field": "source", "fields": [field("int64", None, "lsn")]},
        {"type": "string", "field": "op"}]});
    let flat = json!({"type": "struct", "name": "crm.Value", "fields": fields});
    let key = wrapped(
        &json!({"type": "struct", "fields": [field("int64", None, "id")]}),
        &json!({"id": 9}),
    );
    let mut fast_taken = 0;
    for (n, row) in rows.iter().enumerate() {
        let messages = [
            (
                Format::Debezium,
                wrapped(
                    &envelope,
                    &json!({"before": null, "after": row, "source": {"lsn": n}, "op": "u"}),
                ),
            ),
            (
                Format::Debezium,
                wrapped(
                    &envelope,
                    &json!({"before": row, "after": null, "source": {"lsn": n}, "op": "d"}),
                ),
            ),
            (
                Format::Debezium,
                wrapped(
                    &envelope,
                    &json!({"before": {"id": null}, "after": null, "source": {"lsn": n}, "op": "d"}),
                ),
            ),
            (Format::Json, wrapped(&flat, row)),
        ];
        for (format, msg) in messages {
            let v: serde_json::Value = serde_json::from_str(&msg).unwrap();
            let general = match format {
                Format::Debezium => debezium(v, Some(key.as_bytes()), &paths),
                Format::Json => json::flat_row(v),
            };
            let fast = fast::decode(format, Some(key.as_bytes()), msg.as_bytes(), &paths, None);
            match fast {
                Some(fast) => {
                    fast_taken += 1;
                    assert_eq!(fast, general, "{msg}");
                }
                None => assert!(
                    n >= 4,
                    "only a number or object in a text column needs the general path: {msg}"
                ),
            }
            let decoded = decode(format, Some(key.as_bytes()), Some(msg.as_bytes()), &paths);
            assert_eq!(decoded.map_err(|r| r.error), general, "{msg}");
        }
    }
    // Rows 1-4 and 6 (an integer beyond 64 bits keeps its text) in all four
    // messages, rows 5 and 7 only in their key-only deletes.
    assert_eq!(fast_taken, 5 * 4 + 2, "messages the fast path decoded");
}

/// A wrapped message whose schema is known is checked in its payload only
/// (the schema was checked when first seen): it is refused or kept exactly
/// as when the whole message is checked, at the depth limit too, and a
/// schema that fails the checks refuses its message every time.
#[test]
fn bad_input_wrapped_messages_are_refused_as_whole_messages_are() {
    let schema = r#"{"type":"struct","fields":[{"type":"int64","field":"id"},{"type":"string","field":"v"}]}"#;
    let message = |payload: &str| format!(r#"{{"schema":{schema},"payload":{payload}}}"#);
    let ok = message(r#"{"id":1,"v":"a"}"#);
    // Twice: the second finds the schema cached.
    for _ in 0..2 {
        assert!(decode(Format::Json, None, Some(ok.as_bytes()), &[]).is_ok());
        for nul in [r#"{"id":1,"v":"a\u0000b"}"#, "{\"id\":1,\"v\":\"a\0b\"}"] {
            let e = decode(Format::Json, None, Some(message(nul).as_bytes()), &[]).unwrap_err();
            assert!(e.error.contains("NUL"), "{}", e.error);
        }
        // The wrapper is a level: a payload 127 deep makes a message 128 deep (the limit).
        let deep = |d: usize| {
            message(&format!(r#"{{"id":1,"v":{}1{}}}"#, "[".repeat(d - 1), "]".repeat(d - 1)))
        };
        assert!(decode(Format::Json, None, Some(deep(MAX_DEPTH - 1).as_bytes()), &[]).is_ok());
        let e = decode(Format::Json, None, Some(deep(MAX_DEPTH).as_bytes()), &[]).unwrap_err();
        assert!(e.error.contains("nested deeper than 128"), "{}", e.error);
    }
    let bad_schema = r#"{"schema":{"doc":"a\u0000b","fields":[]},"payload":{"id":1}}"#;
    for _ in 0..2 {
        let e = decode(Format::Json, None, Some(bad_schema.as_bytes()), &[]).unwrap_err();
        assert!(e.error.contains("NUL"), "{}", e.error);
    }
}
