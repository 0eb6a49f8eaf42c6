//! Delta per-file statistics (`stats` of an `add`): `numRecords` and, for the
//! first 32 data columns, `minValues`, `maxValues` and `nullCount`, in the
//! form Spark and delta-rs write them, so that every reader (Spark, Trino,
//! DuckDB, polars, delta-rs) can skip files on a filter. docs/commit-protocol.md
//! ("File statistics") states the rules; in short:
//!
//! - which columns: `delta.dataSkippingStatsColumns` when set, otherwise the
//!   first `delta.dataSkippingNumIndexedCols` (default 32, `-1` all) in the
//!   file's column order (the scd2 partition column is not in files);
//! - strings: the minimum is cut to its first 32 characters (still a lower
//!   bound); a longer maximum is cut and gets U+10FFFF appended so it stays an
//!   upper bound of every value with that prefix;
//! - timestamps: floored to milliseconds (Delta's stats precision; readers
//!   widen the maximum by the lost microseconds);
//! - no bounds where they would mislead or cannot be written: binary
//!   columns, floats holding NaN or infinities, all-NULL columns (their
//!   `nullCount` says so);
//! - decimals as exact JSON numbers, dates as `YYYY-MM-DD`.
//!
//! Computed from the Arrow batch being written (every file this crate
//! writes is one batch), not from the parquet footer: parquet truncates
//! strings to its own length and would need a second pass.

use std::collections::HashMap;
use std::fmt::Write as _;

use deltalake::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, StringArray};
use deltalake::arrow::compute::kernels::aggregate::{
    max, max_boolean, max_string, min, min_boolean, min_string,
};
use deltalake::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, Schema, TimeUnit, TimestampMicrosecondType,
};

/// Characters of a string bound (Delta's `stringPrefixLength`).
const STRING_PREFIX: usize = 32;
/// Columns with statistics unless the table says otherwise.
const DEFAULT_INDEXED: usize = 32;

/// Which columns get statistics, from the table's properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StatsColumns {
    /// The first N data columns.
    First(usize),
    All,
    /// `delta.dataSkippingStatsColumns`.
    Named(Vec<String>),
}

impl Default for StatsColumns {
    fn default() -> Self {
        StatsColumns::First(DEFAULT_INDEXED)
    }
}

impl StatsColumns {
    /// From the table's `configuration`; unreadable values keep the default.
    pub(crate) fn from_properties(conf: &HashMap<String, String>) -> StatsColumns {
        if let Some(named) = conf.get("delta.dataSkippingStatsColumns") {
            return StatsColumns::Named(
                named
                    .split(',')
                    .map(|c| c.trim().trim_matches('`').to_string())
                    .filter(|c| !c.is_empty())
                    .collect(),
            );
        }
        match conf.get("delta.dataSkippingNumIndexedCols").map(|v| v.trim().parse::<i64>()) {
            Some(Ok(-1)) => StatsColumns::All,
            Some(Ok(n)) if n >= 0 => StatsColumns::First(n as usize),
            _ => StatsColumns::default(),
        }
    }

    fn includes(&self, position: usize, name: &str) -> bool {
        match self {
            StatsColumns::First(n) => position < *n,
            StatsColumns::All => true,
            StatsColumns::Named(names) => names.iter().any(|n| n == name),
        }
    }
}

/// The `stats` JSON of a file holding exactly `batch`, a file of a table
/// whose files have the columns of `table` (which columns get statistics
/// counts positions there). A file may leave out a column that is NULL in
/// all its rows: its `nullCount` is then every row, as if it were there.
pub(crate) fn file_stats(batch: &RecordBatch, columns: &StatsColumns, table: &Schema) -> String {
    let (mut mins, mut maxs, mut nulls) = (String::new(), String::new(), String::new());
    let schema = batch.schema();
    let whole = schema.fields() == table.fields();
    let at: HashMap<&str, usize> = match whole {
        true => HashMap::new(),
        false => super::convert::positions(&schema),
    };
    for (i, field) in table.fields().iter().enumerate() {
        if !columns.includes(i, field.name()) {
            continue;
        }
        let name = json_string(field.name());
        sep(&mut nulls);
        let col = match whole {
            true => Some(batch.column(i)),
            false => at.get(field.name().as_str()).map(|&j| batch.column(j)),
        };
        let Some(col) = col else {
            let _ = write!(nulls, "{name}:{}", batch.num_rows());
            continue;
        };
        let _ = write!(nulls, "{name}:{}", col.null_count());
        if let Some((lo, hi)) = bounds(col) {
            sep(&mut mins);
            let _ = write!(mins, "{name}:{lo}");
            sep(&mut maxs);
            let _ = write!(maxs, "{name}:{hi}");
        }
    }
    format!(
        "{{\"numRecords\":{},\"minValues\":{{{mins}}},\"maxValues\":{{{maxs}}},\"nullCount\":{{{nulls}}}}}",
        batch.num_rows()
    )
}

/// The statistics of a file once a deletion vector masks some of its rows:
/// the bounds still hold but are no longer tight (Delta's `tightBounds`).
pub(crate) fn widened(stats: &str) -> String {
    if stats.contains("\"tightBounds\":true") {
        return stats.replacen("\"tightBounds\":true", "\"tightBounds\":false", 1);
    }
    if stats.contains("\"tightBounds\"") {
        return stats.to_string();
    }
    match stats.trim_start().strip_prefix('{') {
        Some(rest) if rest.trim_start().starts_with('}') => "{\"tightBounds\":false}".into(),
        Some(rest) => format!("{{\"tightBounds\":false,{rest}"),
        None => stats.to_string(),
    }
}

fn sep(s: &mut String) {
    if !s.is_empty() {
        s.push(',');
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// (min, max) as JSON values, or None where the column gets no bounds.
fn bounds(col: &ArrayRef) -> Option<(String, String)> {
    if col.null_count() == col.len() {
        return None;
    }
    let ints = |lo: Option<i64>, hi: Option<i64>| Some((lo?.to_string(), hi?.to_string()));
    match col.data_type() {
        DataType::Int8 => {
            let a = col.as_primitive::<Int8Type>();
            ints(min(a).map(i64::from), max(a).map(i64::from))
        }
        DataType::Int16 => {
            let a = col.as_primitive::<Int16Type>();
            ints(min(a).map(i64::from), max(a).map(i64::from))
        }
        DataType::Int32 => {
            let a = col.as_primitive::<Int32Type>();
            ints(min(a).map(i64::from), max(a).map(i64::from))
        }
        DataType::Int64 => {
            let a = col.as_primitive::<Int64Type>();
            ints(min(a), max(a))
        }
        DataType::Float64 => {
            let a = col.as_primitive::<Float64Type>();
            floats(min(a), max(a))
        }
        DataType::Float32 => {
            let a = col.as_primitive::<Float32Type>();
            floats(min(a).map(f64::from), max(a).map(f64::from))
        }
        DataType::Boolean => {
            let a: &BooleanArray = col.as_boolean();
            Some((min_boolean(a)?.to_string(), max_boolean(a)?.to_string()))
        }
        DataType::Utf8 => {
            let a: &StringArray = col.as_string::<i32>();
            let lo = min_string(a)?;
            let hi = max_string(a)?;
            Some((json_string(&string_min(lo)), json_string(&string_max(hi)?)))
        }
        DataType::Date32 => {
            let a = col.as_primitive::<Date32Type>();
            Some((date(min(a)?)?, date(max(a)?)?))
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let a = col.as_primitive::<TimestampMicrosecondType>();
            Some((timestamp(min(a)?)?, timestamp(max(a)?)?))
        }
        DataType::Decimal128(_, scale) => {
            let a = col.as_primitive::<Decimal128Type>();
            let scale = i32::from(*scale);
            Some((
                crate::value::decimal::format(min(a)?, scale),
                crate::value::decimal::format(max(a)?, scale),
            ))
        }
        // Binary and anything else: a null count only, as Spark does.
        _ => None,
    }
}

/// Float bounds, none when NaN or an infinity is present (arrow orders NaN
/// above every number, so a NaN shows as the maximum).
fn floats(lo: Option<f64>, hi: Option<f64>) -> Option<(String, String)> {
    let (lo, hi) = (lo?, hi?);
    if !lo.is_finite() || !hi.is_finite() {
        return None;
    }
    let f = |x: f64| {
        let s = x.to_string();
        if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        }
    };
    Some((f(lo), f(hi)))
}

/// A lower bound of every string starting with `s`'s first characters.
fn string_min(s: &str) -> String {
    s.chars().take(STRING_PREFIX).collect()
}

/// An upper bound of `s` at most about 32 characters long: the prefix and
/// U+10FFFF, the largest character (UTF-8 order is character order). A
/// prefix followed by U+10FFFF itself is extended over those characters;
/// with no place to cut within twice the prefix there is no bound.
fn string_max(s: &str) -> Option<String> {
    if s.chars().count() <= STRING_PREFIX {
        return Some(s.to_string());
    }
    let mut out: String = s.chars().take(STRING_PREFIX).collect();
    for c in s.chars().skip(STRING_PREFIX) {
        if c != char::MAX {
            out.push(char::MAX);
            return Some(out);
        }
        if out.chars().count() >= 2 * STRING_PREFIX {
            return None;
        }
        out.push(c);
    }
    // Only U+10FFFF after the prefix: the whole string is its own bound.
    Some(s.to_string())
}

fn date(days: i32) -> Option<String> {
    let d = chrono::NaiveDate::from_num_days_from_ce_opt(days.checked_add(719_163)?)?;
    Some(format!("\"{}\"", d.format("%Y-%m-%d")))
}

/// Microseconds since the epoch, floored to milliseconds, as Spark writes them.
fn timestamp(micros: i64) -> Option<String> {
    let ms = micros.div_euclid(1000);
    let t = chrono::DateTime::from_timestamp_millis(ms)?;
    Some(format!("\"{}\"", t.format("%Y-%m-%dT%H:%M:%S%.3fZ")))
}

#[cfg(test)]
mod tests;
