//! The Kafka Connect schema that the JSON converter may attach to a message
//! (`{"schema": ..., "payload": ...}`): unwrapping it, and typing values by
//! their schema — primitive types and the Kafka Connect and Debezium
//! logical types — as docs/types.md maps them. Separate from the envelope
//! logic because it is the converter's format, not Debezium's.
//!
//! Every field also yields its declared column type, NULL or not: the
//! declaration, not the values, types a column (docs/types.md, declared
//! types win).

use base64::Engine;
use compact_str::ToCompactString;
use serde_json::Value as J;

use super::json::json_cell;
use super::Declared;
use crate::value::temporal::format_time;
use crate::value::{decimal, decimal_type, parse_ts, DType, Text, Value};

/// (schema, payload) of a wrapped message; (None, the message) otherwise.
pub(super) fn unwrap_schema(v: &J) -> (Option<&J>, &J) {
    match v {
        J::Object(m) if m.contains_key("payload") && m.contains_key("schema") => {
            (m.get("schema"), &m["payload"])
        }
        other => (None, other),
    }
}

/// The field schemas of an envelope section (`before` / `after`).
pub(super) fn section_fields<'a>(schema: &'a J, section: &str) -> Option<&'a Vec<J>> {
    schema
        .get("fields")?
        .as_array()?
        .iter()
        .find(|f| f.get("field").and_then(J::as_str) == Some(section))?
        .get("fields")?
        .as_array()
}

/// A struct's field schemas by name (the first field of a name, as a
/// search would find it), built once per message: a search per value was
/// quadratic, and a 2 MB message of 40,000 fields took 28 s.
pub(super) struct FieldSchemas<'a>(std::collections::HashMap<&'a str, &'a J>);

impl<'a> FieldSchemas<'a> {
    pub(super) fn of(fields: Option<&'a Vec<J>>) -> FieldSchemas<'a> {
        let fields = fields.map_or(&[][..], Vec::as_slice);
        let mut by_name = std::collections::HashMap::with_capacity(fields.len());
        for f in fields {
            if let Some(name) = f.get("field").and_then(J::as_str) {
                by_name.entry(name).or_insert(f);
            }
        }
        FieldSchemas(by_name)
    }

    /// The schema of the field `name`.
    pub(super) fn get(&self, name: &str) -> Option<&'a J> {
        self.0.get(name).copied()
    }
}

/// A schema parameter as an integer (Kafka Connect writes them as strings).
pub(super) fn parameter(s: &J, name: &str) -> Option<i64> {
    let p = s.get("parameters")?.get(name)?;
    p.as_str().and_then(|x| x.trim().parse().ok()).or_else(|| p.as_i64())
}

/// The Kafka Connect and Debezium logical types, by schema name
/// (docs/types.md): what a value of each means. One table for every path
/// that reads them (the general path here, the schema wrapper's fast path,
/// Avro's column plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Logical {
    /// Milliseconds, microseconds or nanoseconds since the epoch.
    TsMillis,
    TsMicros,
    TsNanos,
    /// ISO-8601 text with an offset.
    ZonedTs,
    /// Days since the epoch.
    Date,
    /// Time of day in milli-, micro- or nanoseconds.
    TimeMillis,
    TimeMicros,
    TimeNanos,
    /// Unscaled bytes at the schema's `scale` parameter.
    Decimal,
    /// A record of scale and unscaled bytes.
    VariableScaleDecimal,
}

impl Logical {
    pub(super) fn of(name: &str) -> Option<Logical> {
        Some(match name {
            "io.debezium.time.Timestamp" | "org.apache.kafka.connect.data.Timestamp" => {
                Logical::TsMillis
            }
            "io.debezium.time.MicroTimestamp" => Logical::TsMicros,
            "io.debezium.time.NanoTimestamp" => Logical::TsNanos,
            "io.debezium.time.ZonedTimestamp" => Logical::ZonedTs,
            "io.debezium.time.Date" | "org.apache.kafka.connect.data.Date" => Logical::Date,
            "io.debezium.time.Time" | "org.apache.kafka.connect.data.Time" => Logical::TimeMillis,
            "io.debezium.time.MicroTime" => Logical::TimeMicros,
            "io.debezium.time.NanoTime" => Logical::TimeNanos,
            "org.apache.kafka.connect.data.Decimal" => Logical::Decimal,
            "io.debezium.data.VariableScaleDecimal" => Logical::VariableScaleDecimal,
            _ => return None,
        })
    }

    /// A value of this type from the JSON integer or text it was sent as
    /// (None when the value does not have that shape). A decimal's unscaled
    /// bytes are at `scale`. A VariableScaleDecimal is an object, read by
    /// [`variable_scale_decimal`], not here.
    pub(super) fn cell(self, scale: i32, int: Option<i64>, text: Option<&str>) -> Option<Value> {
        match self {
            // Beyond i64 microseconds is beyond what Delta holds: saturated,
            // the typing refuses it (never the milliseconds taken for micros).
            Logical::TsMillis => int.map(|ms| Value::Ts(ms.saturating_mul(1000))),
            Logical::TsMicros => int.map(Value::Ts),
            Logical::TsNanos => int.map(|ns| Value::Ts(ns.div_euclid(1000))),
            Logical::ZonedTs => text.and_then(parse_ts).map(Value::Ts),
            Logical::Date => int.and_then(|d| i32::try_from(d).ok()).map(Value::Date),
            Logical::TimeMillis => {
                int.and_then(|ms| ms.checked_mul(1000)).map(|us| Value::Str(format_time(us).into()))
            }
            Logical::TimeMicros => int.map(|us| Value::Str(format_time(us).into())),
            Logical::TimeNanos => int.map(|ns| Value::Str(format_time(ns.div_euclid(1000)).into())),
            Logical::Decimal => text.and_then(|t| exact_decimal(t, scale)),
            Logical::VariableScaleDecimal => None,
        }
    }
}

/// What a field's schema declares: its column type (None when the schema
/// names no type this table can hold, e.g. a nested struct kept as text).
pub(super) fn declared(s: &J) -> Result<Declared, String> {
    let name = s.get("name").and_then(J::as_str).unwrap_or("");
    let ty = s.get("type").and_then(J::as_str).unwrap_or("");
    Ok(Declared::Exact(match Logical::of(name) {
        Some(Logical::TsMillis | Logical::TsMicros | Logical::TsNanos | Logical::ZonedTs) => {
            DType::Ts
        }
        Some(Logical::Date) => DType::Date,
        Some(Logical::TimeMillis | Logical::TimeMicros | Logical::TimeNanos) => DType::Time,
        Some(Logical::Decimal) => {
            let scale = parameter(s, "scale").unwrap_or(0);
            let precision =
                parameter(s, "connect.decimal.precision").unwrap_or(decimal::MAX_PRECISION as i64);
            decimal_type(precision.clamp(0, u32::MAX as i64) as u32, scale as i32).map_err(|e| {
                format!("declared decimal({precision},{scale}) cannot be stored exactly: {e}")
            })?
        }
        Some(Logical::VariableScaleDecimal) => return Ok(Declared::VariableScaleDecimal),
        None => match ty {
            "int8" | "int16" | "int32" | "int64" => DType::Int,
            "float" | "float32" | "float64" | "double" => DType::Float,
            "boolean" => DType::Bool,
            "bytes" => DType::Binary,
            // Strings (Uuid, Json, Enum, EnumSet, Xml, ZonedTime, Interval
            // included) and nested values, which are kept as JSON text.
            _ => DType::Str,
        },
    }))
}

/// [`declared`], a type no Delta column holds included (as `Unstorable`).
pub(super) fn declaration(s: &J) -> Declared {
    declared(s).unwrap_or_else(Declared::Unstorable)
}

/// Maps a JSON value with its Kafka Connect schema to a cell (its column
/// type is [`declaration`]). A value that does not have the shape
/// its schema declares is kept as sent: typing the batch then finds it
/// does not convert and dead-letters its row (reason `type`).
pub(super) fn typed(v: &J, schema: Option<&J>) -> Value {
    let Some(s) = schema else { return json_cell(v) };
    let name = s.get("name").and_then(J::as_str).unwrap_or("");
    // A type no Delta column holds exactly: its declaration dead-letters the
    // row, unless `columns:` declares the column, which then takes the
    // value exactly (a decimal beyond 38 digits as its text) or refuses it.
    let Ok(decl) = declared(s) else {
        let scale = parameter(s, "scale").unwrap_or(0) as i32;
        return match Logical::of(name) {
            // Sent as a JSON number (`decimal.format=NUMERIC`): its text.
            Some(Logical::Decimal) if v.is_number() => Value::Str(v.to_string().into()),
            Some(l @ Logical::Decimal) => l.cell(scale, None, v.as_str()).unwrap_or(Value::Null),
            _ => Value::Null,
        };
    };
    if v.is_null() {
        return Value::Null;
    }
    let int = v.as_i64();
    let cell = match Logical::of(name) {
        Some(Logical::VariableScaleDecimal) => variable_scale_decimal(v),
        Some(l) => {
            let scale = parameter(s, "scale").unwrap_or(0) as i32;
            l.cell(scale, int, v.as_str())
        }
        None => None,
    };
    let cell = cell.or_else(|| match &decl {
        Declared::Exact(DType::Float) => v.as_f64().map(Value::Float),
        Declared::Exact(DType::Int) => int.map(Value::Int),
        Declared::Exact(DType::Bool) => v.as_bool().map(Value::Bool),
        Declared::Exact(DType::Binary) => v
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .map(Value::bytes),
        Declared::Exact(DType::Str) => {
            Some(Value::Str(v.as_str().map_or_else(|| v.to_compact_string(), Text::from)))
        }
        _ => None,
    });
    cell.unwrap_or_else(|| json_cell(v))
}

/// `io.debezium.data.VariableScaleDecimal`: `{"scale": 5, "value": "BMsv"}`
/// (base64 unscaled bytes) is 3.14159.
pub fn variable_scale_decimal(v: &J) -> Option<Value> {
    let m = v.as_object()?;
    if m.len() != 2 {
        return None;
    }
    let scale = i32::try_from(m.get("scale")?.as_i64()?).ok()?;
    exact_decimal(m.get("value")?.as_str()?, scale)
}

/// Base64 unscaled bytes at `scale` as a decimal cell, or beyond 38 digits
/// as their exact text ([`decimal::big_text`]); None when not base64.
fn exact_decimal(b64: &str, scale: i32) -> Option<Value> {
    match decimal::from_base64(b64) {
        Some(unscaled) => Some(Value::decimal(unscaled, scale)),
        None => decimal::big_text(b64, scale).map(|t| Value::Str(t.into())),
    }
}
