//! How fresh a batch is: the newest source timestamp among its events
//! (docs/metrics.md, freshness). The table's `source.time_column` names
//! where it is, Debezium's `source.ts_ms` by default; once the batch is
//! committed, now minus the newest one committed is
//! `changelake_source_lag_seconds` — "how stale is the table?", which lag
//! in messages does not answer.

use crate::batch::{lookup, TypedRow};
use crate::config::TableConfig;
use crate::value::{cell, DType, Value};

/// The newest source timestamp among `rows`, in Unix milliseconds: an
/// integer is milliseconds since the epoch (as `ts_ms` is), a timestamp
/// its own instant; NULL and other kinds do not count. None when the
/// table has no source time or no row holds one.
pub(super) fn newest_source_ms(
    t: &TableConfig,
    columns: &[(String, DType)],
    rows: &[TypedRow],
    text: bool,
) -> Option<i64> {
    use rayon::prelude::*;
    let path = t.source_time.as_deref()?;
    let joined = path.join(".");
    let stored = crate::decode::stored_name(&joined);
    // A data column (or a stored envelope column) is found once, not per row.
    let column = columns.iter().position(|(n, _)| *n == joined || *n == stored);
    let millis = |v: &Value| match *v {
        Value::Int(ms) => Some(ms),
        Value::Ts(us) => Some(us.div_euclid(1000)),
        _ => None,
    };
    rows.par_iter()
        .with_min_len(4096)
        .filter_map(|r| match column {
            Some(i) => millis(cell(&r.data, i)),
            None => millis(&lookup(columns, r, text, path)),
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(data: Vec<Value>, extra: Vec<(&str, Value)>) -> TypedRow {
        TypedRow {
            data,
            pos: 0,
            partition: 0,
            raw: "".into(),
            extra: extra.into_iter().map(|(n, v)| (n.into(), v)).collect(),
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
        let rows = vec![
            row(
                vec![Value::Int(1), Value::Ts(5_000_000)],
                vec![("source.ts_ms", Value::Int(9_000))],
            ),
            row(vec![Value::Int(2), Value::Ts(7_000_999)], vec![("source.ts_ms", Value::Null)]),
            row(vec![Value::Int(3), Value::Null], vec![("source.ts_ms", Value::Int(8_000))]),
        ];
        // An envelope field, in milliseconds.
        assert_eq!(
            newest_source_ms(&table(Some("source.ts_ms")), &cols, &rows, false),
            Some(9_000)
        );
        // A timestamp column, to the millisecond.
        assert_eq!(newest_source_ms(&table(Some("modified")), &cols, &rows, false), Some(7_000));
        assert_eq!(newest_source_ms(&table(None), &cols, &rows, false), None);
        assert_eq!(newest_source_ms(&table(Some("nowhere")), &cols, &rows, false), None);
    }
}
