//! The Kafka Connect schema that the JSON converter may attach to a message
//! (`{"schema": ..., "payload": ...}`): unwrapping it, and typing values by
//! their schema's logical types (timestamps, dates, decimals, floats).
//! Separate from the envelope logic because it is the converter's format,
//! not Debezium's.

use base64::Engine;
use serde_json::Value as J;

use super::json::json_cell;
use crate::value::{parse_ts, Value};

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

/// The schema of the field `name`.
pub(super) fn field_schema<'a>(fields: &'a [J], name: &str) -> Option<&'a J> {
    fields.iter().find(|f| f.get("field").and_then(J::as_str) == Some(name))
}

/// Maps a JSON value with its Kafka Connect schema to a cell (docs/events.md).
pub(super) fn typed(v: &J, schema: Option<&J>) -> Value {
    let Some(s) = schema else { return json_cell(v) };
    if v.is_null() {
        return Value::Null;
    }
    let name = s.get("name").and_then(J::as_str).unwrap_or("");
    let ty = s.get("type").and_then(J::as_str).unwrap_or("");
    let int = v.as_i64();
    match name {
        "io.debezium.time.Timestamp" | "org.apache.kafka.connect.data.Timestamp" => {
            int.map(|ms| Value::Ts(ms * 1000)).unwrap_or_else(|| json_cell(v))
        }
        "io.debezium.time.MicroTimestamp" => int.map(Value::Ts).unwrap_or_else(|| json_cell(v)),
        "io.debezium.time.NanoTimestamp" => {
            int.map(|ns| Value::Ts(ns / 1000)).unwrap_or_else(|| json_cell(v))
        }
        "io.debezium.time.Date" | "org.apache.kafka.connect.data.Date" => {
            int.map(|d| Value::Ts(d * 86_400_000_000)).unwrap_or_else(|| json_cell(v))
        }
        "io.debezium.time.ZonedTimestamp" => {
            v.as_str().and_then(parse_ts).map(Value::Ts).unwrap_or_else(|| json_cell(v))
        }
        "org.apache.kafka.connect.data.Decimal" => {
            let scale = s
                .get("parameters")
                .and_then(|p| p.get("scale"))
                .and_then(|x| {
                    x.as_str().and_then(|x| x.parse().ok()).or(x.as_i64().map(|i| i as i32))
                })
                .unwrap_or(0);
            v.as_str()
                .and_then(|b| decode_decimal(b, scale))
                .map(Value::Float)
                .unwrap_or_else(|| json_cell(v))
        }
        _ => match ty {
            "float" | "float32" | "float64" | "double" => {
                v.as_f64().map(Value::Float).unwrap_or_else(|| json_cell(v))
            }
            "boolean" => v.as_bool().map(Value::Bool).unwrap_or_else(|| json_cell(v)),
            "string" => v
                .as_str()
                .map(|x| Value::Str(x.to_string()))
                .unwrap_or_else(|| Value::Str(v.to_string())),
            _ => json_cell(v),
        },
    }
}

/// Kafka Connect decimals: base64 of a big-endian two's-complement unscaled integer.
fn decode_decimal(b64: &str, scale: i32) -> Option<f64> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    if bytes.is_empty() || bytes.len() > 16 {
        return None;
    }
    let mut n: i128 = if bytes[0] & 0x80 != 0 { -1 } else { 0 };
    for b in bytes {
        n = (n << 8) | b as i128;
    }
    Some(n as f64 / 10f64.powi(scale))
}
