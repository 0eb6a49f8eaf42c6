//! How fresh a batch is: the newest source timestamp among its events
//! (docs/metrics.md, freshness). The table's `source.time_column` names
//! where it is, Debezium's `source.ts_ms` by default; once the batch is
//! committed, now minus the newest one committed is
//! `changelake_source_lag_seconds` — "how stale is the table?", which lag
//! in messages does not answer.

use std::collections::HashMap;

use crate::batch::TypedRow;
use crate::config::TableConfig;
use crate::value::{cell, DType, Value};

/// The newest source timestamp among `rows`, in Unix milliseconds: an
/// integer is milliseconds since the epoch (as `ts_ms` is), a timestamp
/// its own instant; NULL and other kinds do not count. None when the
/// table has no source time or no row holds one.
///
/// A column the table stores is read in every row. An envelope field
/// (`source.ts_ms`) is not decoded into every row (that was a twentieth of
/// a Debezium decode): the last event of each partition is read again from
/// its message (or the last that has it, among a few), since a
/// partition's events arrive in source order.
pub(super) fn newest_source_ms(
    t: &TableConfig,
    columns: &[(String, DType)],
    rows: &[TypedRow],
) -> Option<i64> {
    use rayon::prelude::*;
    let path = t.source_time.as_deref()?;
    let joined = path.join(".");
    let stored = crate::decode::stored_name(&joined);
    let column = columns.iter().position(|(n, _)| *n == joined || *n == stored);
    if let Some(i) = column {
        return rows.par_iter().with_min_len(4096).filter_map(|r| millis(cell(&r.data, i))).max();
    }
    // Per partition, the newest of its last few messages that carry it.
    let mut newest: HashMap<i32, (u64, i64)> = HashMap::new();
    let mut tried: HashMap<i32, usize> = HashMap::new();
    for r in rows.iter().rev() {
        let n = tried.entry(r.partition).or_default();
        if *n >= TRIES || newest.contains_key(&r.partition) {
            continue;
        }
        *n += 1;
        if let Some(ms) = message_field(r.raw.as_bytes(), path) {
            newest.insert(r.partition, (r.pos, ms));
        }
    }
    newest.values().map(|(_, ms)| *ms).max()
}

/// How many of a partition's last messages are read for their source time
/// (a tombstone, an event without the field may come last).
const TRIES: usize = 16;

fn millis(v: &Value) -> Option<i64> {
    match *v {
        Value::Int(ms) => Some(ms),
        Value::Ts(us) => Some(us.div_euclid(1000)),
        _ => None,
    }
}

/// A field of a JSON message by its dotted path, in its schema wrapper's
/// payload if it has one; None for anything else (an Avro message).
fn message_field(raw: &[u8], path: &[String]) -> Option<i64> {
    let v: serde_json::Value = serde_json::from_slice(raw).ok()?;
    let body = match v.get("payload") {
        Some(p) if v.get("schema").is_some() => p,
        _ => &v,
    };
    let found = path.iter().try_fold(body, |at, key| at.get(key))?;
    found
        .as_i64()
        .or_else(|| found.as_str().and_then(crate::value::parse_ts).map(|us| us.div_euclid(1000)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(partition: i32, pos: u64, data: Vec<Value>, raw: &str) -> TypedRow {
        TypedRow {
            data,
            pos,
            partition,
            raw: raw.to_string().into(),
            extra: vec![],
            replayed: false,
            unavailable: vec![],
        }
    }

    fn table(time: Option<&str>) -> TableConfig {
        let yaml = "systems: {s: {type: jsonl, path: 'x/*.jsonl'}}\nbronze:\n  tables:\n    t: {source: {system: s}, business_key: [id], strategy: scd1}\n";
        let cfg = crate::config::Config::parse(yaml, std::path::Path::new(".")).unwrap();
        let mut t = cfg.tables.into_iter().next().unwrap();
        t.source_time = time.map(|p| p.split('.').map(String::from).collect());
        t
    }

    #[test]
    fn freshness_is_the_newest_source_time_of_the_batch() {
        let cols = vec![("id".to_string(), DType::Int), ("modified".to_string(), DType::Ts)];
        let msg = |ms: i64| format!(r#"{{"op":"u","source":{{"ts_ms":{ms}}}}}"#);
        let wrapped = |ms: i64| format!(r#"{{"schema":{{}},"payload":{}}}"#, msg(ms));
        let rows = vec![
            row(0, 1, vec![Value::Int(1), Value::Ts(5_000_000)], &msg(9_000)),
            row(0, 2, vec![Value::Int(2), Value::Ts(7_000_999)], &msg(8_500)),
            row(1, 3, vec![Value::Int(4), Value::Null], &msg(9_900)),
            row(1, 7, vec![Value::Int(3), Value::Null], &wrapped(8_000)),
            row(0, 4, vec![Value::Int(5), Value::Null], r#"{"op":"u"}"#),
        ];
        // An envelope field, read from each partition's last message that
        // has it (partition 0's last has none).
        assert_eq!(newest_source_ms(&table(Some("source.ts_ms")), &cols, &rows), Some(8_500));
        // A timestamp column, in every row, to the millisecond.
        assert_eq!(newest_source_ms(&table(Some("modified")), &cols, &rows), Some(7_000));
        assert_eq!(newest_source_ms(&table(None), &cols, &rows), None);
        assert_eq!(newest_source_ms(&table(Some("nowhere")), &cols, &rows), None);
    }
}
