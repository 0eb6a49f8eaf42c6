//! The decoder's tests: documented connector shapes, the fast path against
//! the general path, and flat rows; the schema wrapper's in `schema_wrapper`.

use super::*;

/// A field's value: of a row (`Fields`) or of the envelope (name-value pairs).
fn get<'a>(fields: impl Into<Pairs<'a>>, k: &str) -> &'a Value {
    let pairs = fields.into().0;
    pairs.iter().find(|(n, _)| *n == k).unwrap_or_else(|| panic!("no {k} in {pairs:?}")).1
}

struct Pairs<'a>(Vec<(&'a str, &'a Value)>);

impl<'a> From<&'a Fields> for Pairs<'a> {
    fn from(f: &'a Fields) -> Self {
        Pairs(f.iter().map(|(n, v)| (&**n, v)).collect())
    }
}

impl<'a> From<&'a Env> for Pairs<'a> {
    fn from(p: &'a Env) -> Self {
        Pairs(p.iter().map(|(n, v)| (&**n, v)).collect())
    }
}

// Shapes from the Debezium PostgreSQL connector documentation (customers table).
const PG_UPDATE_NO_SCHEMA: &str = r#"{"before":null,"after":{"id":1,"first_name":"Anne Marie","last_name":"Kretchmar","email":"annek@noanswer.org"},"source":{"version":"2.7.0.Final","connector":"postgresql","name":"PostgreSQL_server","ts_ms":1559033904863,"snapshot":"false","db":"postgres","schema":"public","table":"customers","txId":556,"lsn":24023128,"xmin":null},"op":"u","ts_ms":1465584025523}"#;
const PG_DELETE_KEY_ONLY: &str = r#"{"before":{"id":1,"first_name":null,"last_name":null,"email":null},"after":null,"source":{"connector":"postgresql","db":"postgres","schema":"public","table":"customers","txId":556,"lsn":46523128},"op":"d","ts_ms":1465581902461}"#;

// Shape from the Debezium SQL Server connector documentation, with the schema wrapper.
const SQLSERVER_CREATE_WITH_SCHEMA: &str = r#"{"schema":{"type":"struct","fields":[
  {"type":"struct","optional":true,"field":"before","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":false,"field":"first_name"},{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","field":"created"},{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"},"field":"balance"},{"type":"int32","optional":true,"name":"io.debezium.time.Date","field":"birthday"}]},
  {"type":"struct","optional":true,"field":"after","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":false,"field":"first_name"},{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","field":"created"},{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"},"field":"balance"},{"type":"int32","optional":true,"name":"io.debezium.time.Date","field":"birthday"}]},
  {"type":"struct","fields":[{"type":"string","field":"change_lsn"},{"type":"string","field":"commit_lsn"}],"optional":false,"name":"io.debezium.connector.sqlserver.Source","field":"source"},
  {"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"server1.testDB.dbo.customers.Envelope"},
"payload":{"before":null,"after":{"id":1005,"first_name":"john","created":1559729468470,"balance":"AwfQ","birthday":18000},"source":{"version":"2.7.0.Final","connector":"sqlserver","name":"server1","ts_ms":1559729468470,"snapshot":"false","db":"testDB","schema":"dbo","table":"customers","change_lsn":"00000027:00000758:0003","commit_lsn":"00000027:00000758:0005","event_serial_no":"1"},"op":"c","ts_ms":1559729471739}}"#;

#[test]
fn debezium_update_without_schema_wrapper() {
    let d = decode(
        Format::Debezium,
        None,
        Some(PG_UPDATE_NO_SCHEMA.as_bytes()),
        &["source.lsn".into()],
    )
    .unwrap();
    let Decoded::Row { data, env, .. } = d else { panic!() };
    assert_eq!(get(&data, "first_name"), &Value::Str("Anne Marie".into()));
    assert_eq!(get(&data, "source_lsn"), &Value::Int(24023128), "sequence path stored as a column");
    assert_eq!(get(&env, "op"), &Value::Str("u".into()));
    assert_eq!(get(&env, "source.table"), &Value::Str("customers".into()));
}

#[test]
fn debezium_delete_uses_before_and_message_key_fallback() {
    let d =
        decode(Format::Debezium, Some(br#"{"id":1}"#), Some(PG_DELETE_KEY_ONLY.as_bytes()), &[])
            .unwrap();
    let Decoded::Row { data, env, .. } = d else { panic!() };
    assert_eq!(get(&data, "id"), &Value::Int(1));
    assert_eq!(get(&env, "op"), &Value::Str("d".into()));
    let no_before = r#"{"before":null,"after":null,"source":{"lsn":5},"op":"d"}"#;
    let key = r#"{"schema":{"type":"struct","fields":[{"type":"int32","field":"id"}]},"payload":{"id":7}}"#;
    let Decoded::Row { data, .. } =
        decode(Format::Debezium, Some(key.as_bytes()), Some(no_before.as_bytes()), &[]).unwrap()
    else {
        panic!()
    };
    assert_eq!(get(&data, "id"), &Value::Int(7));
}

#[test]
fn debezium_schema_wrapper_maps_logical_types() {
    let Decoded::Row { data, env, .. } =
        decode(Format::Debezium, None, Some(SQLSERVER_CREATE_WITH_SCHEMA.as_bytes()), &[]).unwrap()
    else {
        panic!()
    };
    assert_eq!(get(&data, "created"), &Value::Ts(1_559_729_468_470_000));
    assert_eq!(
        get(&data, "balance"),
        &Value::decimal(198608, 2),
        "AwfQ = 0x0307d0 = 198608, scale 2"
    );
    assert_eq!(get(&data, "balance").to_string(), "1986.08");
    assert_eq!(get(&data, "birthday"), &Value::Date(18000));
    assert_eq!(get(&env, "source.change_lsn"), &Value::Str("00000027:00000758:0003".into()));
}

#[test]
fn debezium_tombstone_truncate_and_garbage() {
    assert_eq!(decode(Format::Debezium, None, None, &[]).unwrap(), Decoded::Tombstone);
    assert_eq!(
        decode(Format::Debezium, None, Some(br#"{"op":"t","source":{}}"#), &[]).unwrap(),
        Decoded::Truncate
    );
    assert!(decode(Format::Debezium, None, Some(b"\x00garbage"), &[]).is_err());
    assert!(decode(Format::Debezium, None, Some(br#"{"id":1}"#), &[]).is_err());
}

/// Column mixes of the generated envelopes: text-heavy, numeric, wide.
#[derive(Clone, Copy)]
enum Shape {
    Crm,
    Narrow,
    Wide,
}

/// `n` seeded Debezium envelopes (one JSON line each) of one column mix:
/// every op (deletes carry `before`), text with escapes and non-ASCII,
/// integers, floats, flags, timestamps, NULLs and nested values. The
/// decoder's own generator: the bench's workload lives in the binary.
fn envelopes(seed: u64, shape: Shape, n: u64) -> String {
    let mut state = seed;
    let mut next = move || {
        // SplitMix64.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let cities = ["Berlin", "Köln", "München", "Zoë \"Q\" \\ Bremen"];
    let mut out = String::new();
    for i in 0..n {
        let h = next();
        let key = h % 500;
        let ts = format!("2026-{:02}-{:02}T{:02}:00:00Z", 1 + h % 12, 1 + (h >> 8) % 28, h % 24);
        let phone = if h % 5 == 0 { J::Null } else { format!("+49 {}", h % 10_000).into() };
        let revenue = -(((h >> 24) % 5_000_000) as f64) / 100.0;
        let mut row = match shape {
            Shape::Narrow => serde_json::json!({
                "accountid": key, "statecode": (h >> 40) % 2,
                "balance": ((h >> 24) % 50_000_000) as f64 / 100.0,
                "creditlimit": ((h >> 28) % 1_000) as f64 * 1000.0,
                "modifiedon": ts, "versionnumber": i,
            }),
            Shape::Crm | Shape::Wide => serde_json::json!({
                "accountid": key, "name": format!("Account {key}"),
                "accountnumber": format!("AC-{key:08}"),
                "address1_city": cities[(h % 4) as usize], "address1_country": "DE",
                "telephone1": phone,
                "industrycode": (h >> 20) % 40, "revenue": revenue,
                "numberofemployees": (h >> 32) % 5_000, "donotemail": (h >> 61) % 2 == 1,
                "ownerid": format!("{:016x}", h.rotate_left(17)), "modifiedon": ts,
                "description": "segment\n\t\u{1F600}", "versionnumber": i,
            }),
        };
        if let (Shape::Wide, J::Object(m)) = (shape, &mut row) {
            for c in 0..24u64 {
                let g = h ^ c.wrapping_mul(0x2545_F491_4F6C_DD1D);
                let v = match c % 4 {
                    0 => serde_json::json!(["tag", g % 7, {"nested": g % 3 == 0}]),
                    1 => serde_json::json!(g % 1_000_000),
                    2 => serde_json::json!(g % 3 == 0),
                    _ => serde_json::json!({"at": format!("2025-{:02}-01", 1 + g % 12)}),
                };
                m.insert(format!("custom_{c:02}"), v);
            }
        }
        let op = ["c", "u", "u", "d", "r"][((h >> 56) % 5) as usize];
        // Updates from a table with full replica identity carry a `before`.
        let (before, after) = match op {
            "d" => (row, J::Null),
            "u" if h & 1 == 1 => (row.clone(), row),
            _ => (J::Null, row),
        };
        let lsn = 1_000 + i;
        let envelope = serde_json::json!({
            "before": before, "after": after,
            "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "crm",
                       "ts_ms": 1_764_000_000_000u64 + lsn, "db": "crm", "schema": "public",
                       "table": "account", "lsn": lsn, "txId": lsn / 8},
            "op": op, "ts_ms": 1_764_000_000_040u64 + lsn,
        });
        out.push_str(&envelope.to_string());
        out.push('\n');
    }
    out
}

/// Both fast readers take every generated message, and decode it as the
/// general path does.
#[test]
fn fast_decode_equals_the_general_path_on_generated_workloads() {
    let paths = vec!["source.lsn".to_string()];
    for shape in [Shape::Crm, Shape::Narrow, Shape::Wide] {
        let text = envelopes(11, shape, 300);
        for line in text.lines() {
            let general = debezium(serde_json::from_str(line).unwrap(), None, &paths).unwrap();
            for reader in [Reader::Direct { max_depth: MAX_DEPTH }, Reader::Tape] {
                let fast = fast::decode_with(
                    reader,
                    Format::Debezium,
                    None,
                    line.as_bytes(),
                    &paths,
                    None,
                )
                .unwrap_or_else(|| panic!("{reader:?} gave up: {line}"))
                .unwrap();
                assert_eq!(fast, general, "{reader:?}: {line}");
            }
        }
    }
}

#[test]
fn decode_keeping_drops_only_unread_envelope_fields() {
    let paths = vec!["source.lsn".to_string()];
    let keep = vec!["source.lsn".to_string(), "ts_ms".to_string()];
    let all = decode(Format::Debezium, None, Some(PG_UPDATE_NO_SCHEMA.as_bytes()), &paths).unwrap();
    let some = decode_keeping(
        Format::Debezium,
        None,
        Some(PG_UPDATE_NO_SCHEMA.as_bytes()),
        &paths,
        Some(&keep),
    )
    .unwrap();
    let (Decoded::Row { data: d1, env: e1, .. }, Decoded::Row { data: d2, env: e2, .. }) =
        (all, some)
    else {
        panic!("rows")
    };
    assert_eq!(d1, d2);
    let names: Vec<&str> = e2.iter().map(|(n, _)| &**n).collect();
    assert_eq!(names, vec!["source.lsn", "op", "ts_ms"]);
    for (n, v) in &e2 {
        assert_eq!(Some(v), e1.iter().find(|(m, _)| m == n).map(|(_, v)| v), "{n}");
    }
}

#[test]
fn fast_decode_equals_the_general_path() {
    let general = |format, key: Option<&[u8]>, v: &str, paths: &[String]| {
        let j: J = serde_json::from_str(v).unwrap();
        match format {
            Format::Debezium => debezium(j, key, paths).unwrap(),
            Format::Json => match j {
                J::Object(m) => Decoded::Row {
                    data: Fields::from_pairs(
                        m.iter().map(|(k, v)| (k.as_str().into(), json_cell(v))),
                    ),
                    env: vec![],
                    declared: Default::default(),
                },
                _ => unreachable!(),
            },
        }
    };
    let paths = vec!["source.lsn".to_string(), "ts_ms".to_string()];
    let nested = r#"{"before":null,"after":{"id":18446744073709551615,"tags":["a",{"b":1}],"meta":{"x":null},"amount":-1.5e3,"ok":true,"name":"Zo\u00eb \"Q\""},"source":{"lsn":7,"table":"t","extra":{"deep":[1]}},"op":"c","ts_ms":1,"transaction":null}"#;
    for (format, key, v) in [
        (Format::Debezium, None, PG_UPDATE_NO_SCHEMA),
        (Format::Debezium, Some(&br#"{"id":1}"#[..]), PG_DELETE_KEY_ONLY),
        (Format::Debezium, None, nested),
        // `op` before the image a delete stores, and an update that
        // carries its `before` image (full replica identity).
        (
            Format::Debezium,
            None,
            r#"{"op":"d","before":{"id":2,"x":"a"},"after":null,"source":{"lsn":3}}"#,
        ),
        (
            Format::Debezium,
            None,
            r#"{"before":{"id":2,"x":"a"},"after":{"id":2,"x":"b"},"source":{"lsn":4},"op":"u"}"#,
        ),
        // A record named "" names its fields `.op`, never a second `op`.
        (
            Format::Debezium,
            None,
            r#"{"":{"op":"d"},"before":{"id":1},"after":{"id":1,"x":2},"op":"u","source":{"lsn":5}}"#,
        ),
        (Format::Json, None, r#"{"id":1,"op":"U","amount":2.5,"n":null,"nested":{"a":[1,2]}}"#),
        (
            Format::Debezium,
            None,
            r#"{"after":{"id":-9223372036854775808,"a":0.1,"b":1e308,"c":5e-324,"d":123456789.123456789,"e":-0.0,"f":2.2250738585072014e-308,"g":9007199254740993,"h":"\ud83d\ude00 \\ \/"},"op":"r","source":{"lsn":1}}"#,
        ),
    ] {
        let fast = fast::decode(format, key, v.as_bytes(), &paths, None)
            .unwrap_or_else(|| panic!("fast path not taken: {v}"))
            .unwrap();
        assert_eq!(fast, general(format, key, v, &paths), "{v}");
        // Each reader on its own: what it takes, it decodes the same way.
        for reader in [Reader::Direct { max_depth: MAX_DEPTH }, Reader::Tape] {
            if let Some(d) = fast::decode_with(reader, format, key, v.as_bytes(), &paths, None) {
                assert_eq!(d.unwrap(), general(format, key, v, &paths), "{reader:?}: {v}");
            }
        }
    }
    // The schema wrapper, line breaks between its tokens included, is split
    // and its payload typed on the fast path as the general path types it;
    // bad input takes the general path.
    let wrapped = SQLSERVER_CREATE_WITH_SCHEMA;
    let fast = fast::decode(Format::Debezium, None, wrapped.as_bytes(), &paths, None);
    assert_eq!(fast.expect("split").unwrap(), general(Format::Debezium, None, wrapped, &paths));
    assert!(fast::decode(Format::Debezium, None, b"{not json", &paths, None).is_none());
    assert!(fast::decode(Format::Debezium, None, br#"{"op":"x"}"#, &paths, None).is_none());
    let shadow = br#"{"":{"op":"d"},"after":{"id":1,"x":2},"op":"u","source":{"lsn":5}}"#;
    match fast::decode(Format::Debezium, None, shadow, &paths, None) {
        Some(Ok(Decoded::Row { data, env, .. })) => {
            assert_eq!(data.get("x"), Some(&Value::Int(2)), "an update, not a delete");
            assert_eq!(get(&env, ".op"), &Value::Str("d".into()));
        }
        other => panic!("{other:?}"),
    }
    // A flat line holding a NUL is still checked for what simd-json reads
    // differently (the file reader does not refuse NUL).
    assert!(flat_object(br#"{"a":"\u0000","b":"\ud800"}"#).is_none());
    // An image that is not an object is the general path's to report.
    let not_a_row = br#"{"op":"c","after":5,"source":{"lsn":1}}"#;
    assert!(fast::decode(Format::Debezium, None, not_a_row, &paths, None).is_none());
    let not_a_row = br#"{"before":[1],"after":null,"source":{"lsn":1},"op":"d"}"#;
    assert!(fast::decode(Format::Debezium, None, not_a_row, &paths, None).is_none());
}

#[test]
fn flat_json_rows_keep_their_types() {
    let Decoded::Row { data, env, .. } =
        decode(Format::Json, None, Some(br#"{"id":1,"op":"U","amount":2.5}"#), &[]).unwrap()
    else {
        panic!()
    };
    assert_eq!(get(&data, "op"), &Value::Str("U".into()));
    assert_eq!(get(&data, "amount"), &Value::Float(2.5));
    assert!(env.is_empty());
}

/// docs/types.md, float64 exactly: every path reads a float as Rust's own
/// parser rounds its text, the general path (serde_json) too, which takes
/// the messages the fast readers leave to it (here: the schema wrapper
/// written with spaces, and a flat row holding a bare `-0`). A
/// black-box hunt found one double in four a bit off there.
#[test]
fn floats_are_exact_on_every_path() {
    let doubles = ["0.0019514593530413698", "3.4028234663852886e38", "2.2250738585072014e-308"];
    for text in doubles {
        let want = Value::Float(text.parse().unwrap());
        let wrapped = format!(
            r#"{{"schema": {{"type":"struct","fields":[{{"type":"struct","field":"after","fields":[{{"type":"double","field":"f"}}]}}]}}, "payload": {{"op":"c","after":{{"f":{text}}}}}}}"#
        );
        let flat = format!("{{\"f\":{text},\"z\":-0}}");
        let cases = [(Format::Debezium, wrapped), (Format::Json, flat)];
        for (format, message) in cases {
            let Decoded::Row { data, .. } =
                decode(format, None, Some(message.as_bytes()), &[]).unwrap()
            else {
                panic!("{message}")
            };
            assert!(get(&data, "f").same(&want), "{message}: {:?}", get(&data, "f"));
        }
    }
}

/// docs/bad-input.md, hostile messages: nesting beyond the limit is a dead
/// letter for both formats, never a stack overflow; brackets inside strings
/// are text, and nesting up to the limit still decodes.
#[test]
fn bad_input_deep_nesting_is_a_dead_letter_not_a_crash() {
    let deep = |n: usize| {
        format!(r#"{{"op":"c","after":{{"id":1,"name":{}1{}}}}}"#, "[".repeat(n), "]".repeat(n))
    };
    for format in [Format::Debezium, Format::Json] {
        let e = decode(format, None, Some(deep(200_000).as_bytes()), &[]).unwrap_err();
        assert_eq!(e.reason, "malformed", "{format:?}");
        assert!(e.error.contains("nested deeper than 128"), "{format:?}: {}", e.error);
    }
    // The envelope and `after` are two levels: 126 arrays reach the limit exactly.
    assert!(decode(Format::Debezium, None, Some(deep(126).as_bytes()), &[]).is_ok());
    assert!(decode(Format::Debezium, None, Some(deep(127).as_bytes()), &[]).is_err());
    let in_text = format!(
        r#"{{"op":"c","after":{{"id":1,"name":"{}\"{}"}}}}"#,
        "[".repeat(500),
        "{".repeat(500)
    );
    let d = decode(Format::Debezium, None, Some(in_text.as_bytes()), &[]).unwrap();
    assert!(matches!(d, Decoded::Row { .. }));
    // A hostile message key cannot hurt a delete either.
    let key = "[".repeat(100_000);
    let del = r#"{"op":"d","before":{"id":7}}"#;
    assert!(decode(Format::Debezium, Some(key.as_bytes()), Some(del.as_bytes()), &[]).is_ok());
}

/// docs/bad-input.md, hostile messages: a field given twice, or a message
/// beyond the size bound, is malformed.
#[test]
fn bad_input_duplicate_fields_and_oversized_messages_are_dead_letters() {
    let dup = br#"{"op":"c","after":{"id":1,"id":2},"source":{"lsn":1}}"#;
    let e = decode(Format::Debezium, None, Some(dup), &[]).unwrap_err();
    assert_eq!(e.reason, "malformed");
    assert!(e.error.contains("twice"), "{}", e.error);
    let e = decode(Format::Json, None, Some(br#"{"id":1,"id":1}"#), &[]).unwrap_err();
    assert!(e.error.contains("twice"), "{}", e.error);
    // A wide row (past the pairwise check) with its last field named twice, and one without.
    let wide = |last: &str| {
        let fields: Vec<String> = (0..40).map(|i| format!("\"c{i}\":{i}")).collect();
        format!("{{{},\"{last}\":1}}", fields.join(","))
    };
    let e = decode(Format::Json, None, Some(wide("c17").as_bytes()), &[]).unwrap_err();
    assert!(e.error.contains("twice"), "{}", e.error);
    assert!(decode(Format::Json, None, Some(wide("c40").as_bytes()), &[]).is_ok());
    for nul in [&br#"{"id":1,"v":"a\u0000b"}"#[..], b"{\"id\":1,\"v\":\"a\0b\"}"] {
        let e = decode(Format::Json, None, Some(nul), &[]).unwrap_err();
        assert!(e.error.contains("NUL"), "{}", e.error);
    }
    let big = format!(r#"{{"id":1,"v":"{}"}}"#, "x".repeat(MAX_MESSAGE_BYTES));
    let e = decode(Format::Json, None, Some(big.as_bytes()), &[]).unwrap_err();
    assert!(e.error.contains("more than"), "{}", e.error);
}

/// A bare `-0` (serde_json: the float -0.0, simd-json: the integer 0) is
/// found on the parsed values, not by a byte scan: any value the fast path
/// would keep sends the message to the general path; a value it skips
/// does not matter, and neither do `-0.0`, negative numbers or dates.
#[test]
fn bare_negative_zero_takes_the_general_path_wherever_it_is_kept() {
    let paths = vec!["source.lsn".to_string()];
    let fast = |v: &str| {
        fast::decode_with(Reader::Tape, Format::Debezium, None, v.as_bytes(), &paths, Some(&paths))
    };
    for kept in [
        r#"{"op":"c","after":{"id":1,"z":-0},"source":{"lsn":1}}"#,
        r#"{"op":"c","after":{"id":1,"t":[1,{"x":-0}]},"source":{"lsn":1}}"#,
        r#"{"op":"c","after":{"id":1},"source":{"lsn":-0}}"#,
        r#"{"op":"d","before":{"id":-0},"after":null,"source":{"lsn":1}}"#,
    ] {
        assert!(fast(kept).is_none(), "{kept}");
    }
    let skipped = r#"{"op":"c","after":{"id":1},"source":{"lsn":1,"txId":-0},"ts_ms":-0}"#;
    match fast(skipped) {
        Some(Ok(Decoded::Row { env, .. })) => assert_eq!(get(&env, "source.lsn"), &Value::Int(1)),
        other => panic!("{other:?}"),
    }
    let fine = r#"{"op":"c","after":{"id":0,"a":-0.0,"b":-0e1,"c":-10,"d":"2026-03-01","e":-1},"source":{"lsn":1}}"#;
    match fast(fine) {
        Some(Ok(Decoded::Row { data, .. })) => {
            assert_eq!(data.get("id"), Some(&Value::Int(0)));
            assert!(
                matches!(data.get("a"), Some(Value::Float(z)) if *z == 0.0 && z.is_sign_negative())
            );
            assert_eq!(data.get("c"), Some(&Value::Int(-10)));
        }
        other => panic!("{other:?}"),
    }
    assert!(fast::object_fields(br#"{"id":1,"z":-0}"#).is_none());
    assert_eq!(flat_object(br#"{"id":1,"z":0}"#).unwrap().get("z"), Some(&Value::Int(0)));
    // The direct reader reads `-0` as serde_json does.
    let negative_zero =
        |v: &Value| matches!(v, Value::Float(z) if *z == 0.0 && z.is_sign_negative());
    assert!(negative_zero(flat_object(br#"{"id":1,"z":-0}"#).unwrap().get("z").unwrap()));
    let direct = Reader::Direct { max_depth: MAX_DEPTH };
    let msg = br#"{"op":"c","after":{"id":1,"z":-0},"source":{"lsn":-0}}"#;
    match fast::decode_with(direct, Format::Debezium, None, msg, &paths, None) {
        Some(Ok(Decoded::Row { data, env, .. })) => {
            assert!(negative_zero(data.get("z").unwrap()));
            assert!(negative_zero(get(&env, "source.lsn")));
        }
        other => panic!("{other:?}"),
    }
}

/// Input the SIMD parser reads differently from serde_json takes the
/// general path, so both decode it the same way: a lone surrogate escape is
/// refused (simd-json made it a NUL), a surrogate pair is its character, a
/// bare `-0` is the float serde_json reads; nesting up to the limit of 128
/// levels decodes in both formats.
#[test]
fn bad_input_the_simd_path_decodes_as_the_general_parser_does() {
    for format in [Format::Json, Format::Debezium] {
        let wrap = |row: &str| match format {
            Format::Json => row.to_string(),
            Format::Debezium => format!(r#"{{"op":"c","after":{row},"source":{{"lsn":1}}}}"#),
        };
        let lone = wrap(r#"{"id":1,"v":"a\ud800b"}"#);
        assert!(decode(format, None, Some(lone.as_bytes()), &[]).is_err(), "{lone}");
        // A low surrogate alone, and a high one followed by something else.
        for bad in [r#"{"id":1,"v":"\udc00"}"#, r#"{"id":1,"v":"\ud800\u0041"}"#] {
            assert!(decode(format, None, Some(wrap(bad).as_bytes()), &[]).is_err(), "{bad}");
        }
        let cell = |msg: String, col: &str| match decode(format, None, Some(msg.as_bytes()), &[]) {
            Ok(Decoded::Row { data, .. }) => data.get(col).unwrap().clone(),
            other => panic!("{msg}: {other:?}"),
        };
        let pair = cell(wrap(r#"{"id":1,"v":"\ud83d\ude00"}"#), "v");
        assert!(pair.same(&Value::Str("\u{1F600}".into())), "{pair:?}");
        match cell(wrap(r#"{"id":1,"z":-0}"#), "z") {
            Value::Float(z) => assert!(z == 0.0 && z.is_sign_negative()),
            other => panic!("-0 as {other:?}"),
        }
        let date = cell(wrap(r#"{"id":1,"d":"2026-03-01"}"#), "d");
        assert!(date.same(&Value::Str("2026-03-01".into())));
        let nested = |levels: usize| {
            // The row object plus `levels - 1` arrays (plus the envelope for Debezium).
            let inner = format!("{}{}", "[".repeat(levels - 1), "]".repeat(levels - 1));
            wrap(&format!(r#"{{"id":1,"n":{inner}}}"#))
        };
        let extra = usize::from(format == Format::Debezium);
        assert!(decode(format, None, Some(nested(128 - extra).as_bytes()), &[]).is_ok());
        assert!(decode(format, None, Some(nested(129 - extra).as_bytes()), &[]).is_err());
    }
}

#[test]
fn envelope_paths_of_tables_sharing_messages_are_each_read_field_once() {
    let yaml = r#"
systems:
  crm: {type: kafka, brokers: "localhost:9092", topic: "crm.{object}", format: debezium}
bronze:
  tables:
    account:
      source: {system: crm, object: shared, filter: "source.table = 'account'"}
      business_key: [id]
      strategy: scd1
      merge: {sequence_by: [source.lsn], delete_when: "op = 'd' OR source.snapshot = 'gone'"}
    contact:
      source: {system: crm, object: shared, filter: "source.table = 'contact'"}
      business_key: [id]
      strategy: scd2
      merge: {sequence_by: [source.lsn]}
"#;
    let cfg = crate::config::Config::parse(yaml, std::path::Path::new("/cfg")).unwrap();
    let tables = &cfg.tables;
    assert_eq!(
        env_paths(&tables[0], Format::Debezium),
        ["source.lsn", "source.table", "op", "source.snapshot"]
    );
    assert_eq!(
        tables_env_paths(tables, Format::Debezium),
        ["source.lsn", "source.table", "op", "source.snapshot"]
    );
    assert_eq!(env_paths(&tables[1], Format::Debezium), ["source.lsn", "source.table", "op"]);
}

mod schema_wrapper;
