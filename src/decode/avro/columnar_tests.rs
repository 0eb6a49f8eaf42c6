//! The column path against the per-message path: for every run it accepts
//! it must give exactly the rows, envelope fields and rejections decoding
//! each message alone gives, and it must hand back every run holding a
//! frame that is not exactly one record.

use apache_avro::types::Value as A;

use super::tests::{framed, Fixed, ENVELOPE, KEY};
use super::*;

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

fn messages<'a>(frames: &'a [(Option<Vec<u8>>, Vec<u8>)]) -> Vec<Message<'a>> {
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

#[test]
fn a_run_of_envelopes_decodes_into_columns_as_each_message_decodes_alone() {
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
    frames.push((None, envelope("t", None, None, None)));
    frames.push((None, envelope("m", None, None, None)));
    frames.push((None, envelope("x", None, Some(row(1, None, &[1])), None)));
    frames.push((None, envelope("u", Some(row(1, None, &[1])), None, None)));
    let msgs = messages(&frames);
    let keeps: [Option<Vec<String>>; 3] =
        [None, Some(vec!["source.lsn".into(), "ts_ms".into()]), Some(vec![])];
    for keep in &keeps {
        let keep = keep.as_deref();
        let fast = columns(Format::Debezium, 7, &msgs, &s, keep).expect("decoded as columns");
        let alone = one_by_one(Format::Debezium, &msgs, &s, keep);
        assert_eq!(fast, alone, "keep {keep:?}");
        assert_eq!(decode_run(Format::Debezium, &msgs, &s, keep), alone);
    }
    let fast = columns(Format::Debezium, 7, &msgs, &s, None).unwrap();
    let Ok(Decoded::Row { data, .. }) = &fast[41] else { panic!("a key-only delete") };
    assert_eq!(data.get("id"), Some(&Value::Int(4)), "the message key supplies the row");
    assert!(fast[45].as_ref().unwrap_err().error.contains("unknown Debezium op `x`"));
    assert!(fast[46].as_ref().unwrap_err().error.contains("without `after`"));
}

/// A flat record with every type the column path reads.
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
fn every_column_type_reads_as_the_per_message_path_reads_its_field() {
    let s = schemas(&[(20, TYPES)]);
    let frames: Vec<(Option<Vec<u8>>, Vec<u8>)> =
        (0..30).map(|i| (None, framed(20, TYPES, typed(i)))).collect();
    let msgs = messages(&frames);
    let fast = columns(Format::Json, 20, &msgs, &s, None).expect("decoded as columns");
    assert_eq!(fast, one_by_one(Format::Json, &msgs, &s, None));
    let Ok(Decoded::Row { data, .. }) = &fast[7] else { panic!("a row") };
    assert_eq!(data.get("vsd"), Some(&Value::decimal(0x0407, 3)));
    assert_eq!(data.get("wide"), Some(&Value::Null), "a decimal no column holds");
    assert_eq!(data.get("dtime"), Some(&Value::Str("00:07:00".into())));
}

#[test]
fn a_run_holding_a_frame_that_is_not_one_whole_record_goes_message_by_message() {
    let s = schemas(&[]);
    let good = |i: i64| envelope("c", None, Some(row(i, Some("Bo"), &[7])), Some(i));
    let header = good(0)[..5].to_vec();
    let truncated = good(1)[..good(1).len() - 2].to_vec();
    let one_more_byte = [good(2), vec![0]].concat();
    // Followed by a whole header: a decoder that took it would read the
    // next message's bytes as the rest of a record.
    let header_after = [good(3), header.clone()].concat();
    let garbage = [header.clone(), vec![0xff; 12]].concat();
    for bad in [truncated, one_more_byte, header_after, garbage] {
        let mut frames: Vec<(Option<Vec<u8>>, Vec<u8>)> =
            (10..16).map(|i| (None, good(i))).collect();
        frames.insert(3, (None, bad));
        let msgs = messages(&frames);
        assert_eq!(columns(Format::Debezium, 7, &msgs, &s, None), None);
        let alone = one_by_one(Format::Debezium, &msgs, &s, None);
        assert_eq!(alone.iter().filter(|r| r.is_err()).count(), 1);
        assert_eq!(decode_run(Format::Debezium, &msgs, &s, None), alone);
        // The decoders kept for later runs are sound.
        let clean = messages(&frames[4..]);
        assert!(columns(Format::Debezium, 7, &clean, &s, None).is_some());
    }
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

#[test]
fn schemas_the_column_path_does_not_read_have_none() {
    let with_enum = r#"{"type": "record", "name": "R", "fields": [
      {"name": "id", "type": "long"}, {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}}]}"#;
    assert!(WriterSchema::parse(30, with_enum).unwrap().fast.is_none());
    assert!(WriterSchema::parse(7, ENVELOPE).unwrap().fast.as_ref().is_some_and(|f| f.envelope));
    assert!(WriterSchema::parse(20, TYPES).unwrap().fast.as_ref().is_some_and(|f| f.flat));
}
