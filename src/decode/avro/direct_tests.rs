//! The direct path against the per-message path (the reference): every
//! message it reads must give exactly the row, envelope fields and
//! declarations the reference gives, every message it gives up must be
//! one the reference rejects or decodes otherwise (a truncate, a key-only
//! shape), and a run must decode as its messages decode one by one.

use apache_avro::types::Value as A;
use proptest::prelude::*;

use super::cursor::{MAX_EMPTY_ITEMS, MAX_NEST};
use super::tests::{framed, long_bytes, Fixed, ENVELOPE, KEY};
use super::*;
use crate::value::parse_ts;

fn schemas(more: &[(u32, &str)]) -> Fixed {
    let mut all = vec![(7, ENVELOPE), (8, KEY)];
    all.extend_from_slice(more);
    Fixed(all.iter().map(|(id, s)| (*id, Arc::new(WriterSchema::parse(*id, s).unwrap()))).collect())
}

fn some(v: A) -> A {
    A::Union(1, Box::new(v))
}

fn none() -> A {
    A::Union(0, Box::new(A::Null))
}

fn row(id: i64, name: Option<&str>, balance: &[u8]) -> A {
    A::Record(vec![
        ("id".into(), A::Long(id)),
        ("name".into(), name.map_or(none(), |n| some(A::String(n.into())))),
        ("balance".into(), some(A::Decimal(balance.to_vec().into()))),
        ("modified".into(), if id % 3 == 0 { none() } else { some(A::Long(-1_000_001 * id)) }),
        ("opened".into(), some(A::Int(19_000 + id as i32))),
    ])
}

fn envelope(op: &str, before: Option<A>, after: Option<A>, lsn: Option<i64>) -> Vec<u8> {
    super::tests::envelope_at(op, before, after, lsn)
}

type Frames = Vec<(Option<Vec<u8>>, Vec<u8>)>;

fn messages(frames: &Frames) -> Vec<Message<'_>> {
    frames.iter().map(|(k, v)| Message { key: k.as_deref(), value: Some(v) }).collect()
}

fn one_by_one(
    format: Format,
    msgs: &[Message<'_>],
    s: &dyn Schemas,
    keep: Option<&[String]>,
) -> Vec<Result<Decoded, Rejected>> {
    msgs.iter().map(|m| decode_keeping(format, m.key, m.value, s, keep)).collect()
}

/// Each message as the direct path alone reads it (None: given up).
fn direct_only(
    format: Format,
    id: u32,
    msgs: &[Message<'_>],
    s: &Fixed,
    keep: Option<&[String]>,
) -> Vec<Option<Decoded>> {
    let writer = s.schema(id).unwrap();
    let run = direct::Run::new(&writer, format, keep).expect("a schema the direct path reads");
    msgs.iter().map(|m| run.decode(&m.value.unwrap()[5..], m.key, s)).collect()
}

/// Every message the direct path reads equals the reference's decode; the
/// whole run through `decode_run` equals decoding one by one. Returns how
/// many messages the direct path read.
fn agrees(format: Format, id: u32, frames: &Frames, s: &Fixed, keep: Option<&[String]>) -> usize {
    let msgs = messages(frames);
    let alone = one_by_one(format, &msgs, s, keep);
    let direct = direct_only(format, id, &msgs, s, keep);
    for (i, (d, a)) in direct.iter().zip(&alone).enumerate() {
        if let Some(d) = d {
            assert_eq!(Ok(d), a.as_ref(), "message {i}, keep {keep:?}");
        }
    }
    assert_eq!(decode_run(format, &msgs, s, keep), alone, "keep {keep:?}");
    direct.iter().flatten().count()
}

#[test]
fn direct_envelopes_decode_as_each_message_decodes_alone() {
    let s = schemas(&[]);
    let key = |id: i64| Some(framed(8, KEY, A::Record(vec![("id".into(), A::Long(id))])));
    let mut frames = vec![];
    for i in 0..40 {
        let bal: &[u8] = if i % 2 == 0 { &[0x30, 0x39] } else { &[0xff, 0x85] };
        let name = (i % 4 != 0).then_some("Ann");
        frames.push((
            None,
            envelope(["c", "u", "r"][i % 3], None, Some(row(i as i64, name, bal)), Some(i as i64)),
        ));
    }
    frames.push((key(3), envelope("d", Some(row(3, None, &[1])), None, None)));
    frames.push((key(4), envelope("d", None, None, Some(9))));
    frames.push((None, envelope("d", None, None, Some(9))));
    // A delete whose `after` is not null: `after` is read, `before` kept.
    frames.push((None, envelope("d", Some(row(6, None, &[1])), Some(row(7, None, &[1])), None)));
    frames.push((None, envelope("t", None, None, None)));
    frames.push((None, envelope("m", None, None, None)));
    frames.push((None, envelope("x", None, Some(row(1, None, &[1])), None)));
    frames.push((None, envelope("u", Some(row(1, None, &[1])), None, None)));
    let keeps: [Option<Vec<String>>; 3] =
        [None, Some(vec!["source.lsn".into(), "ts_ms".into()]), Some(vec![])];
    for keep in &keeps {
        let read = agrees(Format::Debezium, 7, &frames, &s, keep.as_deref());
        assert_eq!(read, 44, "every c/u/r and d message is read directly");
    }
    let msgs = messages(&frames);
    let direct = direct_only(Format::Debezium, 7, &msgs, &s, None);
    let Some(Decoded::Row { data, .. }) = &direct[41] else { panic!("a key-only delete") };
    assert_eq!(data.get("id"), Some(&Value::Int(4)), "the message key supplies the row");
    let Some(Decoded::Row { data, .. }) = &direct[43] else { panic!("a delete") };
    assert_eq!(data.get("id"), Some(&Value::Int(6)), "a delete's row is its before image");
    assert!(direct[44..].iter().all(Option::is_none), "truncate, message, unknown op, no after");
    let run = decode_run(Format::Debezium, &msgs, &s, None);
    assert_eq!(run[44], Ok(Decoded::Truncate));
    assert!(run[46].as_ref().unwrap_err().error.contains("unknown Debezium op `x`"));
    assert!(run[47].as_ref().unwrap_err().error.contains("without `after`"));
}

/// A flat record with every type the plans convert.
const TYPES: &str = r#"{"type": "record", "name": "Types", "fields": [
  {"name": "id", "type": "long"},
  {"name": "b", "type": ["null", "boolean"]},
  {"name": "i", "type": "int"},
  {"name": "f", "type": "float"},
  {"name": "d", "type": ["null", "double"]},
  {"name": "s", "type": ["null", "string"]},
  {"name": "by", "type": "bytes"},
  {"name": "day", "type": {"type": "int", "logicalType": "date"}},
  {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
  {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
  {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "tsu", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
  {"name": "tsn", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
  {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
  {"name": "dec", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}]},
  {"name": "cdec", "type": {"type": "bytes", "connect.name": "org.apache.kafka.connect.data.Decimal",
     "connect.parameters": {"scale": "3"}}},
  {"name": "vsd", "type": ["null", {"type": "record", "name": "VariableScaleDecimal",
     "namespace": "io.debezium.data", "fields": [{"name": "scale", "type": "int"},
     {"name": "value", "type": "bytes"}], "connect.name": "io.debezium.data.VariableScaleDecimal"}]},
  {"name": "zoned", "type": {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}},
  {"name": "micro", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}},
  {"name": "milli", "type": {"type": "long", "connect.name": "io.debezium.time.Timestamp"}},
  {"name": "nano", "type": {"type": "long", "connect.name": "io.debezium.time.NanoTimestamp"}},
  {"name": "dday", "type": {"type": "int", "connect.name": "io.debezium.time.Date"}},
  {"name": "dtime", "type": {"type": "int", "connect.name": "io.debezium.time.Time"}},
  {"name": "dmicro", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTime"}},
  {"name": "wide", "type": {"type": "bytes", "logicalType": "decimal", "precision": 50, "scale": 2}}
]}"#;

fn typed(i: i64) -> A {
    let n = i as i32;
    let opt = |on: bool, v: A| if on { some(v) } else { none() };
    A::Record(vec![
        ("id".into(), A::Long(i)),
        ("b".into(), opt(i % 3 != 0, A::Boolean(i % 2 == 0))),
        ("i".into(), A::Int(-n)),
        ("f".into(), A::Float(1.1 * n as f32)),
        ("d".into(), opt(i % 4 != 0, A::Double(-2.5 * i as f64))),
        ("s".into(), opt(i % 5 != 0, A::String(format!("text {i} é")))),
        ("by".into(), A::Bytes(vec![i as u8, 0, 255])),
        ("day".into(), A::Date(-n)),
        ("tm".into(), A::TimeMillis(n * 1_001)),
        ("tu".into(), A::TimeMicros(i * 1_000_001)),
        ("tsm".into(), A::TimestampMillis(-i * 1_001)),
        ("tsu".into(), opt(i % 2 == 0, A::TimestampMicros(i * 7 - 3))),
        ("tsn".into(), A::TimestampNanos(-i * 1_500)),
        ("lts".into(), A::LocalTimestampMicros(i * 11)),
        ("dec".into(), opt(i % 3 != 1, A::Decimal(vec![0xff, 0x85 - n as u8].into()))),
        ("cdec".into(), A::Bytes(vec![0x01, n as u8])),
        (
            "vsd".into(),
            opt(
                i % 2 == 1,
                A::Record(vec![
                    ("scale".into(), A::Int(n % 4)),
                    ("value".into(), A::Bytes(vec![0x04, n as u8])),
                ]),
            ),
        ),
        (
            "zoned".into(),
            A::String(if i % 6 == 0 {
                "not a time".into()
            } else {
                format!("2024-01-02T03:04:{:02}.5+01:00", i % 60)
            }),
        ),
        ("micro".into(), A::Long(-i)),
        ("milli".into(), A::Long(i * 1_000)),
        ("nano".into(), A::Long(-i * 999)),
        ("dday".into(), A::Int(n)),
        ("dtime".into(), A::Int(n * 60_000)),
        ("dmicro".into(), A::Long(i * 3_600_000_001)),
        ("wide".into(), A::Decimal(vec![0x01, 0x00].into())),
    ])
}

#[test]
fn every_converted_type_reads_directly_as_the_reference_reads_it() {
    let s = schemas(&[(20, TYPES)]);
    let frames: Frames = (0..30).map(|i| (None, framed(20, TYPES, typed(i)))).collect();
    assert_eq!(agrees(Format::Json, 20, &frames, &s, None), 30);
    let direct = direct_only(Format::Json, 20, &messages(&frames), &s, None);
    let Some(Decoded::Row { data, .. }) = &direct[7] else { panic!("a row") };
    assert_eq!(data.get("vsd"), Some(&Value::decimal(0x0407, 3)));
    // A decimal no Delta decimal holds: its exact text, for a column
    // `columns:` declares (docs/types.md); 256 at scale 2.
    assert_eq!(data.get("wide"), Some(&Value::Str("2.56".into())));
    assert_eq!(data.get("dtime"), Some(&Value::Str("00:07:00".into())));
    assert_eq!(data.get("zoned"), Some(&Value::Ts(parse_ts("2024-01-02T02:04:07.5Z").unwrap())));
}

/// Types kept as the reference keeps them (enums as text, nested values as
/// JSON text), and named types referred to across namespaces.
const NESTED: &str = r#"{"type": "record", "name": "Nested", "namespace": "crm", "fields": [
  {"name": "id", "type": "long"},
  {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["GOLD", "SILVER"]}},
  {"name": "again", "type": ["null", "Tier"]},
  {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 3}},
  {"name": "price", "type": {"type": "fixed", "name": "Price", "size": 4, "logicalType": "decimal",
     "precision": 9, "scale": 2}},
  {"name": "tags", "type": {"type": "array", "items": "string"}},
  {"name": "attrs", "type": ["null", {"type": "map", "values": ["null", "long"]}]},
  {"name": "addr", "type": {"type": "record", "name": "Addr", "namespace": "geo", "fields": [
     {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}},
  {"name": "home", "type": ["null", "geo.Addr"]},
  {"name": "any", "type": ["null", "long", "string", "boolean"]},
  {"name": "ratio", "type": "float"}
]}"#;

fn nested(i: i64) -> A {
    let addr = |city: &str| {
        A::Record(vec![
            ("city".into(), A::String(city.into())),
            ("zip".into(), if i % 2 == 0 { none() } else { some(A::Int(75_000 + i as i32)) }),
        ])
    };
    let mut attrs = std::collections::HashMap::new();
    for k in 0..(i % 4) {
        attrs.insert(format!("k{k}"), if k % 2 == 0 { some(A::Long(k * i)) } else { none() });
    }
    let tier = |j: i64| A::Enum((j % 2) as u32, ["GOLD", "SILVER"][(j % 2) as usize].into());
    A::Record(vec![
        ("id".into(), A::Long(i)),
        ("tier".into(), tier(i)),
        ("again".into(), if i % 3 == 0 { none() } else { some(tier(i + 1)) }),
        ("hash".into(), A::Fixed(3, vec![i as u8, 1, 2])),
        ("price".into(), A::Decimal(vec![0, 0, 0x30, i as u8].into())),
        ("tags".into(), A::Array((0..i % 3).map(|t| A::String(format!("t{t}"))).collect())),
        ("attrs".into(), if i % 5 == 0 { none() } else { some(A::Map(attrs)) }),
        ("addr".into(), addr("Paris")),
        ("home".into(), if i % 2 == 0 { none() } else { some(addr("Lyon")) }),
        (
            "any".into(),
            match i % 4 {
                0 => A::Union(0, Box::new(A::Null)),
                1 => A::Union(1, Box::new(A::Long(-i))),
                2 => A::Union(2, Box::new(A::String(format!("s{i}")))),
                _ => A::Union(3, Box::new(A::Boolean(true))),
            },
        ),
        ("ratio".into(), A::Float(0.1 * i as f32)),
    ])
}

#[test]
fn enums_fixed_arrays_maps_records_and_unions_read_directly_as_the_reference_reads_them() {
    let s = schemas(&[(21, NESTED)]);
    let frames: Frames = (0..24).map(|i| (None, framed(21, NESTED, nested(i)))).collect();
    assert_eq!(agrees(Format::Json, 21, &frames, &s, None), 24);
    let direct = direct_only(Format::Json, 21, &messages(&frames), &s, None);
    let Some(Decoded::Row { data, .. }) = &direct[3] else { panic!("a row") };
    assert_eq!(data.get("tier"), Some(&Value::Str("SILVER".into())));
    assert_eq!(data.get("price"), Some(&Value::decimal(0x3003, 2)));
    assert_eq!(data.get("any"), Some(&Value::Bool(true)));
    assert_eq!(data.get("home"), Some(&Value::Str(r#"{"city":"Lyon","zip":75003}"#.into())));
}

/// A small flat record whose bodies the hostile tests write byte by byte.
const SMALL: &str = r#"{"type": "record", "name": "Small", "fields": [
  {"name": "id", "type": "long"},
  {"name": "ok", "type": "boolean"},
  {"name": "name", "type": ["null", "string"]},
  {"name": "n", "type": "int"}
]}"#;

fn body(bytes: &[u8]) -> Vec<u8> {
    [&[MAGIC, 0, 0, 0, 22][..], bytes].concat()
}

#[test]
fn hostile_bodies_are_given_up_and_rejected_by_the_reference() {
    let s = schemas(&[(22, SMALL)]);
    // id 1, ok true, name "ab", n -1.
    let good = body(&[0x02, 0x01, 0x02, 0x04, b'a', b'b', 0x01]);
    let hostile: Vec<(&str, Vec<u8>)> = vec![
        ("a boolean of 2", body(&[0x02, 0x02, 0x00, 0x01])),
        ("union branch 5", body(&[0x02, 0x01, 0x0a, 0x01])),
        ("union branch -1", body(&[0x02, 0x01, 0x01, 0x01])),
        ("text that is not UTF-8", body(&[0x02, 0x01, 0x02, 0x04, 0xc3, 0x28, 0x01])),
        ("an int beyond 32 bits", body(&[0x02, 0x01, 0x00, 0x80, 0x80, 0x80, 0x80, 0x20])),
        (
            "a varint of 11 bytes",
            body(&[
                0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x01, 0x00, 0x01,
            ]),
        ),
        ("a negative length", body(&[0x02, 0x01, 0x02, 0x03, b'a', 0x01])),
        ("a length past the end", body(&[0x02, 0x01, 0x02, 0x40, b'a'])),
        ("a truncated body", good[..good.len() - 1].to_vec()),
        ("a byte left over", [good.clone(), vec![0]].concat()),
        ("an empty body", body(&[])),
    ];
    let mut frames: Frames = vec![(None, good.clone())];
    frames.extend(hostile.iter().map(|(_, b)| (None, b.clone())));
    let msgs = messages(&frames);
    let direct = direct_only(Format::Json, 22, &msgs, &s, None);
    assert!(direct[0].is_some(), "the well-formed body is read");
    let alone = one_by_one(Format::Json, &msgs, &s, None);
    for (i, (what, _)) in hostile.iter().enumerate() {
        assert!(direct[i + 1].is_none(), "{what}: given up");
        assert!(alone[i + 1].is_err(), "{what}: the reference rejects it");
    }
    assert_eq!(agrees(Format::Json, 22, &frames, &s, None), 1);
}

/// A record ending in fields `apache_avro` reads as null at the end of
/// its input (a union branch, a string's bytes, a boolean).
const TAIL: &str = r#"{"type": "record", "name": "Tail", "fields": [
  {"name": "id", "type": "long"},
  {"name": "name", "type": ["null", "string"]},
  {"name": "ok", "type": "boolean"}
]}"#;

#[test]
fn truncated_messages_are_rejected_not_read_as_nulls() {
    let s = schemas(&[(23, TAIL)]);
    // id 1, name "ab", ok true.
    let whole = [&[MAGIC, 0, 0, 0, 23][..], &[0x02, 0x02, 0x04, b'a', b'b', 0x01]].concat();
    let ok = decode_keeping(Format::Json, None, Some(&whole), &s, None);
    let Ok(Decoded::Row { data, .. }) = ok else { panic!("the whole message is a row: {ok:?}") };
    assert_eq!(data.get("ok"), Some(&Value::Bool(true)));
    // Cut before the boolean, inside the string, before the union branch.
    for len in [whole.len() - 1, whole.len() - 2, 6] {
        let cut = &whole[..len];
        let frames: Frames = vec![(None, cut.to_vec())];
        let msgs = messages(&frames);
        let got = decode_run(Format::Json, &msgs, &s, None);
        let err = got[0].as_ref().expect_err("a truncated message is a dead letter");
        assert!(err.error.contains("ends inside its record"), "{len}: {}", err.error);
        assert_eq!(got, one_by_one(Format::Json, &msgs, &s, None));
    }
}

/// A record with an array of longs and an array of nulls.
const LISTS: &str = r#"{"type": "record", "name": "Lists", "fields": [
  {"name": "id", "type": "long"},
  {"name": "xs", "type": {"type": "array", "items": "long"}},
  {"name": "nulls", "type": {"type": "array", "items": "null"}}
]}"#;

#[test]
fn a_count_beyond_what_the_body_can_hold_is_refused_before_the_reference_reads_it() {
    let s = schemas(&[(24, LISTS)]);
    let frame = |body: &[u8]| [&[MAGIC, 0, 0, 0, 24][..], body].concat();
    let decoded = |f: &[u8]| decode_keeping(Format::Json, None, Some(f), &s, None);
    // id 1, xs [5], nulls: a block of three nulls (no bytes each).
    let good = frame(&[0x02, 0x02, 0x0a, 0x00, 0x06, 0x00]);
    assert!(matches!(decoded(&good), Ok(Decoded::Row { .. })), "{:?}", decoded(&good));
    // A thousand nulls in no bytes is well formed, however few bytes follow.
    let many_nulls = frame(&[0x02, 0x00, 0xd0, 0x0f, 0x00]);
    assert!(matches!(decoded(&many_nulls), Ok(Decoded::Row { .. })), "{:?}", decoded(&many_nulls));
    // xs claims 2^26 longs and holds one: refused as truncated, before
    // `apache_avro` would reserve room for them all.
    let claims = frame(&[0x02, 0x80, 0x80, 0x80, 0x40, 0x0a]);
    let err = decoded(&claims).expect_err("a count the body cannot hold is a dead letter");
    assert!(err.error.contains("ends inside its record"), "{}", err.error);
    // Nulls take no bytes, so no byte bounds their count: a message may
    // claim MAX_EMPTY_ITEMS of them, not one more (2^26 would have
    // `apache_avro` build 2^26 values, gigabytes, from six bytes).
    let nulls = |n: usize| frame(&[&[0x02, 0x00][..], &long_bytes(n as i64), &[0x00]].concat());
    let most = nulls(MAX_EMPTY_ITEMS);
    assert!(matches!(decoded(&most), Ok(Decoded::Row { .. })), "{:?}", decoded(&most));
    let bomb = nulls(MAX_EMPTY_ITEMS + 1);
    let err = decoded(&bomb).expect_err("more empty items than allowed is a dead letter");
    assert!(err.error.contains("items of no bytes"), "{}", err.error);
    // Decoded in a run, each message as decoded alone.
    let frames: Frames =
        vec![(None, good), (None, many_nulls), (None, claims), (None, most), (None, bomb)];
    let msgs = messages(&frames);
    assert_eq!(
        decode_run(Format::Json, &msgs, &s, None),
        one_by_one(Format::Json, &msgs, &s, None)
    );
}

/// A linked list, `depth` records below the top one, as the reference
/// encodes it.
fn list(depth: i64) -> A {
    (0..=depth).rev().fold(none(), |next, id| {
        let node = A::Record(vec![("id".into(), A::Long(id)), ("next".into(), next)]);
        if id == 0 {
            node
        } else {
            some(node)
        }
    })
}

const RECURSIVE: &str = r#"{"type": "record", "name": "Node", "fields": [
  {"name": "id", "type": "long"}, {"name": "next", "type": ["null", "Node"]}]}"#;

#[test]
fn schemas_the_direct_path_does_not_read_have_a_program_that_only_checks() {
    let with_uuid = r#"{"type": "record", "name": "R", "fields": [
      {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
      {"name": "n", "type": "long"}]}"#;
    let not_a_record = r#"{"type": "array", "items": "long"}"#;
    for schema in [RECURSIVE, not_a_record, with_uuid] {
        let w = WriterSchema::parse(30, schema).unwrap();
        assert!(w.direct.checks_only, "{schema}");
        assert!(direct::Run::new(&w, Format::Json, None).is_none(), "{schema}");
    }
    // A uuid: `apache_avro` decodes every message, after the program
    // checked the body (a truncated one is refused, not read as nulls).
    let s = schemas(&[(32, with_uuid)]);
    let id = "5f0c8a36-3a4e-4c59-9d1e-0b6f4a1c2d3e";
    let whole = [&[MAGIC, 0, 0, 0, 32][..], &[id.len() as u8 * 2], id.as_bytes(), &[0x04]].concat();
    let ok = decode_keeping(Format::Json, None, Some(&whole), &s, None);
    let Ok(Decoded::Row { data, .. }) = ok else { panic!("a uuid row: {ok:?}") };
    assert_eq!(data.get("id"), Some(&Value::Str(id.into())));
    assert_eq!(data.get("n"), Some(&Value::Int(2)));
    // 16 bytes that are not UTF-8 are a binary uuid to the reference: the
    // check passes over them and still refuses what follows.
    let with_list = r#"{"type": "record", "name": "U", "fields": [
      {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
      {"name": "xs", "type": {"type": "array", "items": "long"}}]}"#;
    let s2 = schemas(&[(36, with_list)]);
    let mut claims = [&[MAGIC, 0, 0, 0, 36, 32][..], &[0xff; 16]].concat();
    claims.extend(long_bytes(1 << 26));
    let err = decode_keeping(Format::Json, None, Some(&claims), &s2, None).expect_err("claims");
    assert!(err.error.contains("ends inside its record"), "{}", err.error);
    let binary = [&[MAGIC, 0, 0, 0, 36, 32][..], &[0xff; 16], &[0]].concat();
    let ok = decode_keeping(Format::Json, None, Some(&binary), &s2, None);
    assert!(ok.is_ok(), "{ok:?}");
    let cut = &whole[..whole.len() - 1];
    let err = decode_keeping(Format::Json, None, Some(cut), &s, None).expect_err("truncated");
    assert!(err.error.contains("ends inside its record"), "{}", err.error);
    for schema in [ENVELOPE, KEY, TYPES, NESTED, SMALL] {
        assert!(!WriterSchema::parse(30, schema).unwrap().direct.checks_only, "{schema}");
    }
    // Still decoded, one message at a time; a top level that is not a
    // record is checked too (and then refused: a row is a record).
    let s = schemas(&[(31, RECURSIVE), (33, not_a_record)]);
    let array = framed(33, not_a_record, A::Array(vec![A::Long(1), A::Long(2)]));
    let frames: Frames = vec![(None, framed(31, RECURSIVE, list(1))), (None, array.clone())];
    let msgs = messages(&frames);
    let run = decode_run(Format::Json, &msgs, &s, None);
    assert_eq!(run, one_by_one(Format::Json, &msgs, &s, None));
    assert!(run[0].is_ok());
    let mut claims = array[..5].to_vec();
    claims.extend(long_bytes(1 << 26));
    let err = decode_keeping(Format::Json, None, Some(&claims), &s, None).expect_err("claims");
    assert!(err.error.contains("ends inside its record"), "{}", err.error);
}

#[test]
fn a_recursive_type_nesting_too_deep_is_refused_before_the_reference_recurses() {
    // The reference reads a recursive value by recursion without a limit:
    // this message (two bytes a level) would overflow the thread's stack
    // and abort the process.
    let s = schemas(&[(31, RECURSIVE)]);
    let mut deep = vec![MAGIC, 0, 0, 0, 31];
    for _ in 0..100_000 {
        deep.extend([0x02, 0x02]); // id 1, then `next`'s record branch
    }
    deep.extend([0x02, 0x00]); // the last id, then null
    let err = decode_keeping(Format::Json, None, Some(&deep), &s, None).expect_err("too deep");
    assert_eq!(err.reason, "malformed");
    let deepest = format!("nests records, arrays or maps more than {MAX_NEST} levels deep");
    assert!(err.error.contains(&deepest), "{}", err.error);
    // At the limit (the top record and the records below it) it decodes
    // as the reference decodes it; one more level is refused.
    let at_limit = framed(31, RECURSIVE, list(MAX_NEST as i64 - 1));
    let ok = decode_keeping(Format::Json, None, Some(&at_limit), &s, None);
    assert!(matches!(ok, Ok(Decoded::Row { .. })), "{ok:?}");
    let beyond = framed(31, RECURSIVE, list(MAX_NEST as i64));
    let err = decode_keeping(Format::Json, None, Some(&beyond), &s, None).expect_err("beyond");
    assert!(err.error.contains(&deepest), "{}", err.error);
    // A type that holds itself with nothing to end it can never be read:
    // every message nests too deep.
    let endless = r#"{"type": "record", "name": "E", "fields": [{"name": "e", "type": "E"}]}"#;
    let s = schemas(&[(34, endless)]);
    let err = decode_keeping(Format::Json, None, Some(&[MAGIC, 0, 0, 0, 34]), &s, None)
        .expect_err("endless");
    assert!(err.error.contains(&deepest), "{}", err.error);
    // Levels are records, arrays and maps alike: a list whose every level
    // hides behind 20 arrays reaches the limit within 7 levels (each level
    // a stack frame or more of the reference's).
    let arrays = (0..20).fold(r#"["null", "A"]"#.to_string(), |t, _| {
        format!(r#"{{"type": "array", "items": {t}}}"#)
    });
    let wrapped = format!(
        r#"{{"type": "record", "name": "A", "fields": [{{"name": "a", "type": {arrays}}}]}}"#
    );
    let s = schemas(&[(35, &wrapped)]);
    let mut body = vec![MAGIC, 0, 0, 0, 35];
    for _ in 0..7 {
        body.extend([0x02; 20]); // a block of one item in each array
        body.push(0x02); // the record branch
    }
    let err = decode_keeping(Format::Json, None, Some(&body), &s, None).expect_err("arrays");
    assert!(err.error.contains(&deepest), "{}", err.error);
}

#[test]
fn runs_split_where_the_schema_changes_and_mixed_batches_keep_their_order() {
    let s = schemas(&[(20, TYPES)]);
    let mut frames = vec![];
    for i in 0..25 {
        let f = match i % 9 {
            0..=5 => envelope("u", None, Some(row(i, None, &[2])), Some(i)),
            6 => framed(20, TYPES, typed(i)),
            7 => b"{\"op\": \"c\"}".to_vec(),
            _ => framed(8, KEY, A::Record(vec![("id".into(), A::Long(i))])),
        };
        frames.push((None, f));
    }
    let mut msgs = messages(&frames);
    msgs.insert(2, Message { key: None, value: None });
    assert_eq!(
        decode_run(Format::Debezium, &msgs, &s, None),
        one_by_one(Format::Debezium, &msgs, &s, None)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Whatever bytes a message holds, the direct path reads it only when
    /// the reference decodes it, and then to the same result.
    #[test]
    fn mutated_messages_read_directly_only_as_the_reference_reads_them(
        which in 0usize..3,
        i in 0i64..40,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let s = schemas(&[(20, TYPES), (21, NESTED)]);
        let (format, id, mut frame) = match which {
            0 => (Format::Debezium, 7, envelope("u", Some(row(i, Some("Bo"), &[1, 2])),
                Some(row(i, None, &[0xff])), Some(i))),
            1 => (Format::Json, 20, framed(20, TYPES, typed(i))),
            _ => (Format::Json, 21, framed(21, NESTED, nested(i))),
        };
        for (at, byte) in &edits {
            let at = 5 + at.index(frame.len() - 5);
            frame[at] = *byte;
        }
        if let Some(cut) = cut {
            frame.truncate(5 + cut.index(frame.len() - 5));
        }
        let frames: Frames = vec![(None, frame)];
        let msgs = messages(&frames);
        let direct = direct_only(format, id, &msgs, &s, None).remove(0);
        let alone = decode_keeping(format, None, Some(&frames[0].1), &s, None);
        if let Some(d) = direct {
            prop_assert_eq!(Ok(d), alone.clone());
        }
        prop_assert_eq!(decode_run(format, &msgs, &s, None), vec![alone]);
    }
}
