//! JSON values as cells, and `format: json` messages: a flat JSON object
//! whose fields are the row's columns. The mapping every other part of the
//! decoder (and the file sources) shares, hence its own module.

use serde_json::Value as J;

use super::Decoded;
use crate::value::Value;

/// Converts a JSON value to a cell; nested values are kept as JSON text
/// (except the shape of a Debezium VariableScaleDecimal, an exact decimal).
pub fn json_cell(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::Str(s.clone()),
        // A VariableScaleDecimal without its schema still has its shape.
        other => {
            super::variable_scale_decimal(other).unwrap_or_else(|| Value::Str(other.to_string()))
        }
    }
}

/// A flat JSON object as a row: every field a column, no envelope.
pub(super) fn flat_row(v: J) -> Result<Decoded, String> {
    match v {
        J::Object(m) => Ok(Decoded::Row {
            data: m.iter().map(|(k, v)| (k.clone(), json_cell(v))).collect(),
            env: vec![],
            declared: vec![],
        }),
        _ => Err("not a JSON object".into()),
    }
}
