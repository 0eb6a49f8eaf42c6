use std::collections::HashMap;

use apache_avro::types::Value as A;

use super::*;
use crate::decode::Declared;
use crate::value::DType;

/// The envelope Debezium's Avro converter registers for a table (a
/// subset of `source`), with a decimal, a timestamp and a date column.
pub(crate) const ENVELOPE: &str = r#"{
  "type": "record", "name": "Envelope", "namespace": "crm.dbo.account",
  "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
      {"name": "id", "type": "long"},
      {"name": "name", "type": ["null", "string"], "default": null},
      {"name": "balance", "type": ["null", {"type": "bytes", "scale": 2, "precision": 10,
        "connect.version": 1, "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}], "default": null},
      {"name": "modified", "type": ["null", {"type": "long", "connect.version": 1,
        "connect.name": "io.debezium.time.MicroTimestamp"}], "default": null},
      {"name": "opened", "type": ["null", {"type": "int", "connect.version": 1,
        "connect.name": "io.debezium.time.Date"}], "default": null}
    ], "connect.name": "crm.dbo.account.Value"}], "default": null},
    {"name": "after", "type": ["null", "Value"], "default": null},
    {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
      "fields": [{"name": "connector", "type": "string"}, {"name": "lsn", "type": ["null", "long"], "default": null}]}},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": null}
  ], "connect.name": "crm.dbo.account.Envelope"}"#;

pub(crate) const KEY: &str = r#"{"type": "record", "name": "Key", "namespace": "crm.dbo.account", "fields": [{"name": "id", "type": "long"}]}"#;

pub(super) struct Fixed(pub(super) HashMap<u32, Arc<WriterSchema>>);

impl Schemas for Fixed {
    fn schema(&self, id: u32) -> Result<Arc<WriterSchema>, String> {
        self.0.get(&id).cloned().ok_or_else(|| format!("schema id {id} is unknown"))
    }
}

fn schemas() -> Fixed {
    Fixed(HashMap::from([
        (7, Arc::new(WriterSchema::parse(7, ENVELOPE).unwrap())),
        (8, Arc::new(WriterSchema::parse(8, KEY).unwrap())),
    ]))
}

/// A `long` as Avro encodes it (zigzag, then a varint), for bodies
/// written byte by byte.
pub(super) fn long_bytes(n: i64) -> Vec<u8> {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    let mut out = vec![];
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
    out
}

pub(super) fn framed(id: u32, schema: &str, v: A) -> Vec<u8> {
    let s = apache_avro::Schema::parse_str(schema).unwrap();
    let mut out = vec![MAGIC];
    out.extend(id.to_be_bytes());
    out.extend(apache_avro::to_avro_datum(&s, v).unwrap());
    out
}

fn row(id: i64, name: Option<&str>) -> A {
    let opt = |i: u32, v: A| A::Union(i, Box::new(v));
    A::Record(vec![
        ("id".into(), A::Long(id)),
        ("name".into(), name.map_or(opt(0, A::Null), |n| opt(1, A::String(n.into())))),
        ("balance".into(), opt(1, A::Decimal(vec![0x30, 0x39].into()))),
        ("modified".into(), opt(1, A::Long(-1_000_001))),
        ("opened".into(), opt(1, A::Int(19_000))),
    ])
}

fn envelope(op: &str, before: Option<A>, after: Option<A>) -> Vec<u8> {
    envelope_at(op, before, after, Some(42))
}

/// An envelope of schema id 7 whose `source.lsn` is `lsn`.
pub(super) fn envelope_at(
    op: &str,
    before: Option<A>,
    after: Option<A>,
    lsn: Option<i64>,
) -> Vec<u8> {
    let section = |r: Option<A>| match r {
        Some(r) => A::Union(1, Box::new(r)),
        None => A::Union(0, Box::new(A::Null)),
    };
    let v = A::Record(vec![
        ("before".into(), section(before)),
        ("after".into(), section(after)),
        (
            "source".into(),
            A::Record(vec![
                ("connector".into(), A::String("postgresql".into())),
                (
                    "lsn".into(),
                    match lsn {
                        Some(l) => A::Union(1, Box::new(A::Long(l))),
                        None => A::Union(0, Box::new(A::Null)),
                    },
                ),
            ]),
        ),
        ("op".into(), A::String(op.into())),
        ("ts_ms".into(), A::Union(1, Box::new(A::Long(1_700_000_000_000)))),
    ]);
    framed(7, ENVELOPE, v)
}

#[test]
fn avro_debezium_envelopes_decode_like_their_json_twins() {
    let msg = envelope("u", None, Some(row(5, Some("Ann"))));
    let Decoded::Row { data, env, declared } =
        decode(Format::Debezium, None, Some(&msg), &schemas()).unwrap()
    else {
        panic!("a row")
    };
    let json = r#"{"schema": {"type": "struct", "fields": [
        {"field": "after", "type": "struct", "fields": [
          {"field": "id", "type": "int64"}, {"field": "name", "type": "string"},
          {"field": "balance", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
           "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
          {"field": "modified", "type": "int64", "name": "io.debezium.time.MicroTimestamp"},
          {"field": "opened", "type": "int32", "name": "io.debezium.time.Date"}]}]},
      "payload": {"before": null, "after": {"id": 5, "name": "Ann", "balance": "MDk=",
        "modified": -1000001, "opened": 19000},
        "source": {"connector": "postgresql", "lsn": 42}, "op": "u", "ts_ms": 1700000000000}}"#;
    let Decoded::Row { data: jdata, env: jenv, declared: jdeclared } =
        crate::decode::decode(Format::Debezium, None, Some(json.as_bytes()), &[]).unwrap()
    else {
        panic!("a row")
    };
    assert_eq!(data, jdata);
    assert_eq!(data.get("balance"), Some(&Value::decimal(12_345, 2)));
    assert_eq!(data.get("modified"), Some(&Value::Ts(-1_000_001)));
    let sorted = |mut e: crate::decode::Env| {
        e.sort_by(|a, b| a.0.cmp(&b.0));
        e
    };
    assert_eq!(sorted(env), sorted(jenv));
    assert_eq!(declared, jdeclared);
    assert_eq!(declared[2].1, Declared::Exact(DType::Decimal { precision: 10, scale: 2 }));
}

#[test]
fn avro_rows_of_one_schema_share_a_layout() {
    let s = schemas();
    let a = decode(Format::Debezium, None, Some(&envelope("c", None, Some(row(1, None)))), &s);
    let b = decode(Format::Debezium, None, Some(&envelope("r", None, Some(row(2, None)))), &s);
    let (Ok(Decoded::Row { data: a, .. }), Ok(Decoded::Row { data: b, .. })) = (a, b) else {
        panic!("rows")
    };
    assert_eq!(a.layout_id(), b.layout_id());
    assert_eq!(a.get("name"), Some(&Value::Null));
}

#[test]
fn avro_deletes_take_before_or_else_the_avro_message_key() {
    let s = schemas();
    let d = decode(Format::Debezium, None, Some(&envelope("d", Some(row(9, None)), None)), &s);
    let Ok(Decoded::Row { data, .. }) = d else { panic!("a row") };
    assert_eq!(data.get("id"), Some(&Value::Int(9)));
    let key = framed(8, KEY, A::Record(vec![("id".into(), A::Long(11))]));
    let d = decode(Format::Debezium, Some(&key), Some(&envelope("d", None, None)), &s);
    let Ok(Decoded::Row { data, declared, .. }) = d else { panic!("a row") };
    assert_eq!(data.get("id"), Some(&Value::Int(11)));
    assert_eq!(&*declared, &[("id".to_string(), Declared::Exact(DType::Int))]);
    let t = decode(Format::Debezium, None, Some(&envelope("t", None, None)), &s);
    assert_eq!(t, Ok(Decoded::Truncate));
    assert_eq!(decode(Format::Debezium, None, None, &s), Ok(Decoded::Tombstone));
}

#[test]
fn avro_flat_records_are_rows_with_every_field_declared() {
    let s = schemas();
    let key = framed(8, KEY, A::Record(vec![("id".into(), A::Long(3))]));
    let Ok(Decoded::Row { data, env, declared }) = decode(Format::Json, None, Some(&key), &s)
    else {
        panic!("a row")
    };
    assert_eq!(data.get("id"), Some(&Value::Int(3)));
    assert!(env.is_empty());
    assert_eq!(declared.len(), 1);
}

#[test]
fn malformed_avro_frames_are_rejected_with_the_reason() {
    let s = schemas();
    let reject = |bytes: &[u8]| decode(Format::Debezium, None, Some(bytes), &s).unwrap_err();
    assert!(reject(b"{\"op\":\"c\"}").error.contains("first byte 0x7b"), "JSON is not a frame");
    assert!(reject(&[0, 0, 0]).error.contains("shorter than the 5-byte"));
    assert!(reject(&[0, 0, 0, 0, 99, 1]).error.contains("schema id 99 is unknown"));
    let good = envelope("c", None, Some(row(1, None)));
    let truncated = reject(&good[..good.len() - 3]);
    assert_eq!(truncated.reason, "malformed");
    assert!(truncated.error.contains("not Avro of schema id 7"), "{}", truncated.error);
    let mut longer = good.clone();
    longer.push(0);
    assert!(reject(&longer).error.contains("1 bytes left"));
    // A key schema is not an envelope.
    let key = framed(8, KEY, A::Record(vec![("id".into(), A::Long(3))]));
    assert!(reject(&key).error.contains("not a Debezium envelope"));
    // Hostile lengths do not allocate their claim.
    let mut huge = vec![0, 0, 0, 0, 7, 2];
    huge.extend([0xfe, 0xff, 0xff, 0xff, 0x0f]);
    assert_eq!(reject(&huge).reason, "malformed");
}

#[test]
fn frames_name_their_schema_ids() {
    let key = framed(8, KEY, A::Record(vec![("id".into(), A::Long(3))]));
    let value = envelope("c", None, Some(row(1, None)));
    assert_eq!(schema_ids(Some(&key), Some(&value)).collect::<Vec<_>>(), vec![7, 8]);
    assert_eq!(schema_ids(Some(b"plain-key"), Some(&value)).collect::<Vec<_>>(), vec![7]);
    assert_eq!(schema_ids(None, None).count(), 0);
}

#[test]
fn a_claimed_length_beyond_the_largest_message_is_refused_before_allocating() {
    // A text field claiming 100 MiB: more than a message may hold.
    let claim = |prefix: &[u8], id: u32| {
        let mut msg = vec![MAGIC];
        msg.extend(id.to_be_bytes());
        msg.extend_from_slice(prefix);
        msg.extend(long_bytes(100 << 20));
        msg
    };
    // An update whose `name` claims it (before: null, after: the record,
    // id 1, name: the string branch). The schema's program reads the
    // claim first and refuses the message as truncated: `apache_avro`
    // never sees it.
    let s = schemas();
    let e = decode(Format::Debezium, None, Some(&claim(&[0, 2, 2, 2], 7)), &s).unwrap_err();
    assert_eq!(e.reason, "malformed");
    assert!(e.error.contains("schema id 7: the message ends inside its record"), "{}", e.error);
    // A schema too large to compile (400 fields of a 400-field record) is
    // refused, so its messages are dead letters: without a program no body
    // of it could be checked before `apache_avro` reads it.
    let fields = |ty: &str| {
        let f: Vec<_> = (0..400).map(|i| format!(r#"{{"name": "f{i}", "type": {ty}}}"#)).collect();
        f.join(", ")
    };
    let large = format!(
        r#"{{"type": "record", "name": "Big", "fields": [{{"name": "id", "type": "string"}},
          {{"name": "a", "type": {{"type": "record", "name": "A", "fields": [{}]}}}}, {}]}}"#,
        fields(r#""long""#),
        fields(r#""A""#)
    );
    let e = WriterSchema::parse(9, &large).map(drop).expect_err("too large");
    assert!(e.contains("schema id 9 is not a usable Avro schema"), "{e}");
    assert!(e.contains("more than 100000"), "{e}");
}
