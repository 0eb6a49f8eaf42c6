//! JSON values as cells, and `format: json` messages: a flat JSON object
//! whose fields are the row's columns. The mapping every other part of the
//! decoder (and the file sources) shares, hence its own module.

use compact_str::ToCompactString;
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
        serde_json::Value::String(s) => Value::Str(s.as_str().into()),
        // A VariableScaleDecimal without its schema still has its shape.
        other => super::variable_scale_decimal(other)
            .unwrap_or_else(|| Value::Str(other.to_compact_string())),
    }
}

/// A flat JSON object as a row: every field a column, no envelope. With
/// the Kafka Connect schema wrapper (the JSON converter with schemas, e.g.
/// after Debezium's ExtractNewRecordState), the payload is the row and the
/// schema types it (docs/types.md).
pub(super) fn flat_row(v: J) -> Result<Decoded, String> {
    if let (Some(schema), payload) = super::schema::unwrap_schema(&v) {
        let fields = schema.get("fields").and_then(J::as_array);
        return match payload {
            J::Null => Ok(Decoded::Tombstone),
            J::Object(m) => {
                let mut declared = vec![];
                for f in fields.into_iter().flatten() {
                    if let Some(name) = f.get("field").and_then(J::as_str) {
                        declared.push((name.to_string(), super::schema::declaration(f)));
                    }
                }
                let by_name = super::schema::FieldSchemas::of(fields);
                let data =
                    super::Fields::from_pairs(m.iter().map(|(k, v)| {
                        (k.as_str().into(), super::schema::typed(v, by_name.get(k)))
                    }));
                Ok(Decoded::Row { data, env: vec![], declared: declared.into() })
            }
            _ => Err("not a JSON object: the payload is not an object".into()),
        };
    }
    match v {
        J::Object(m) => Ok(Decoded::Row {
            data: super::Fields::from_pairs(
                m.iter().map(|(k, v)| (k.as_str().into(), json_cell(v))),
            ),
            env: vec![],
            declared: Default::default(),
        }),
        _ => Err("not a JSON object".into()),
    }
}
