//! What a writer schema says about each field, worked out once per schema
//! id: the column type it declares and how its Avro values become cells.
//!
//! Why from the schema's JSON and not from the parsed `apache_avro::Schema`:
//! Kafka Connect's Avro converter carries Debezium's semantic types as
//! attributes of the field's type (`{"type": "long", "connect.name":
//! "io.debezium.time.MicroTimestamp"}`), which the parsed schema drops for
//! primitive types. Each field is described as the Kafka Connect schema the
//! JSON converter would have sent, so both encodings type a column through
//! the same mapping (`schema::declaration`, docs/types.md).

use std::collections::HashMap;

use serde_json::{json, Value as J};

use crate::decode::schema::{declaration, Logical};
use crate::decode::Declared;

/// How a field's Avro value becomes a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Conv {
    /// By the Avro value's own type (integers, floats, booleans, text,
    /// bytes; enums and uuids as text; nested values as JSON text).
    Plain,
    /// Milliseconds, microseconds or nanoseconds since the epoch.
    TsMillis,
    TsMicros,
    TsNanos,
    /// ISO-8601 text with an offset (`io.debezium.time.ZonedTimestamp`).
    ZonedTs,
    /// Days since the epoch.
    Date,
    /// Time of day in milli-, micro- or nanoseconds: `HH:MM:SS[.ffffff]` text.
    TimeMillis,
    TimeMicros,
    TimeNanos,
    /// Big-endian two's-complement unscaled bytes at this scale.
    Decimal(i32),
    /// `io.debezium.data.VariableScaleDecimal`: a record of scale and value.
    VariableScaleDecimal,
    /// A decimal declared beyond 38 digits: no Delta decimal holds it, so
    /// its declaration dead-letters the row unless `columns:` declares the
    /// column; the value is its exact text at this scale (docs/types.md).
    WideDecimal(i32),
    /// A type no Delta column holds (its declaration dead-letters the row).
    Unstorable,
}

/// One field of a record: its name, declared column type and conversion.
#[derive(Debug, Clone)]
pub(super) struct FieldPlan {
    pub(super) name: String,
    pub(super) declared: Declared,
    pub(super) conv: Conv,
}

/// Named types of a schema (records, enums, fixed), by full and short name:
/// a later field may refer to an earlier one by name (Debezium's `after`
/// names the `Value` record `before` defined; a second variable-scale
/// decimal names the first one's record).
pub(super) struct Names<'a>(HashMap<String, &'a J>);

impl<'a> Names<'a> {
    pub(super) fn of(schema: &'a J) -> Names<'a> {
        let mut names = Names(HashMap::new());
        names.collect(schema, "");
        names
    }

    fn collect(&mut self, t: &'a J, namespace: &str) {
        match t {
            J::Array(branches) => branches.iter().for_each(|b| self.collect(b, namespace)),
            J::Object(o) => {
                let ns = o.get("namespace").and_then(J::as_str).unwrap_or(namespace);
                if let Some(name) = o.get("name").and_then(J::as_str) {
                    if matches!(
                        o.get("type").and_then(J::as_str),
                        Some("record" | "enum" | "fixed")
                    ) {
                        let short = name.rsplit('.').next().unwrap_or(name);
                        let full = if name.contains('.') || ns.is_empty() {
                            name.to_string()
                        } else {
                            format!("{ns}.{name}")
                        };
                        self.0.entry(short.to_string()).or_insert(t);
                        self.0.insert(full, t);
                    }
                }
                let ns = match o.get("name").and_then(J::as_str) {
                    Some(n) if n.contains('.') => n.rsplit_once('.').map_or(ns, |(p, _)| p),
                    _ => ns,
                };
                for f in o.get("fields").and_then(J::as_array).into_iter().flatten() {
                    if let Some(ft) = f.get("type") {
                        self.collect(ft, ns);
                    }
                }
                for key in ["items", "values"] {
                    if let Some(inner) = o.get(key) {
                        self.collect(inner, ns);
                    }
                }
                if let Some(inner @ (J::Object(_) | J::Array(_))) = o.get("type") {
                    self.collect(inner, ns);
                }
            }
            _ => {}
        }
    }

    /// A type with references and `{"type": X}` wrappers resolved.
    pub(super) fn resolve(&self, t: &'a J) -> &'a J {
        let mut t = t;
        for _ in 0..16 {
            match t {
                J::String(s) if !is_primitive(s) => match self.0.get(s.as_str()) {
                    Some(named) => t = named,
                    None => return t,
                },
                J::Object(o) if o.len() == 1 => match o.get("type") {
                    Some(inner) => t = inner,
                    None => return t,
                },
                _ => return t,
            }
        }
        t
    }

    /// The branch of a `["null", X]` union that is not null (the type
    /// itself when it is not such a union; None for wider unions).
    pub(super) fn nullable(&self, t: &'a J) -> Option<&'a J> {
        match self.resolve(t) {
            J::Array(branches) => {
                let mut others = branches.iter().filter(|b| b.as_str() != Some("null"));
                let one = others.next()?;
                others.next().is_none().then(|| self.resolve(one))
            }
            other => Some(other),
        }
    }

    /// The fields of a record type (None when it is not a record).
    pub(super) fn record_fields(&self, t: &'a J) -> Option<&'a Vec<J>> {
        let t = self.nullable(t)?;
        (t.get("type").and_then(J::as_str) == Some("record"))
            .then(|| t.get("fields").and_then(J::as_array))
            .flatten()
    }
}

fn is_primitive(s: &str) -> bool {
    matches!(s, "null" | "boolean" | "int" | "long" | "float" | "double" | "bytes" | "string")
}

/// Plans for the fields of a record, in the schema's (and the values') order.
pub(super) fn record_plan(names: &Names<'_>, fields: &[J]) -> Vec<FieldPlan> {
    fields
        .iter()
        .map(|f| {
            let name = f.get("name").and_then(J::as_str).unwrap_or("").to_string();
            let (declared, conv) = match f.get("type").and_then(|t| names.nullable(t)) {
                Some(t) => field_type(t),
                // A union of several types: kept as JSON text.
                None => (Declared::Exact(crate::value::DType::Str), Conv::Plain),
            };
            FieldPlan { name, declared, conv }
        })
        .collect()
}

/// A field's (non-null) Avro type as its declared column type and conversion.
fn field_type(t: &J) -> (Declared, Conv) {
    let connect = connect_schema(t);
    let declared = declaration(&connect);
    let logical = Logical::of(connect.get("name").and_then(J::as_str).unwrap_or(""));
    let scale = || connect["parameters"]["scale"].as_str().and_then(|s| s.parse().ok());
    if let Declared::Unstorable(_) = declared {
        let conv = match logical {
            Some(Logical::Decimal) => Conv::WideDecimal(scale().unwrap_or(0)),
            _ => Conv::Unstorable,
        };
        return (declared, conv);
    }
    let conv = match logical {
        None => Conv::Plain,
        Some(Logical::TsMillis) => Conv::TsMillis,
        Some(Logical::TsMicros) => Conv::TsMicros,
        Some(Logical::TsNanos) => Conv::TsNanos,
        Some(Logical::ZonedTs) => Conv::ZonedTs,
        Some(Logical::Date) => Conv::Date,
        Some(Logical::TimeMillis) => Conv::TimeMillis,
        Some(Logical::TimeMicros) => Conv::TimeMicros,
        Some(Logical::TimeNanos) => Conv::TimeNanos,
        Some(Logical::Decimal) => Conv::Decimal(scale().unwrap_or(0)),
        Some(Logical::VariableScaleDecimal) => Conv::VariableScaleDecimal,
    };
    (declared, conv)
}

/// The Kafka Connect schema (`{"name", "type", "parameters"}`) the JSON
/// converter would send for an Avro type: Debezium's and Kafka Connect's
/// names from `connect.name`, Avro's logical types under the Kafka Connect
/// or Debezium name of the same meaning.
fn connect_schema(t: &J) -> J {
    let avro_type = match t {
        J::String(s) => s.as_str(),
        J::Object(o) => o.get("type").and_then(J::as_str).unwrap_or(""),
        _ => "",
    };
    let connect_type = match avro_type {
        "int" => "int32",
        "long" => "int64",
        "float" => "float32",
        "double" => "float64",
        "boolean" => "boolean",
        "bytes" | "fixed" => "bytes",
        "string" | "enum" => "string",
        "record" => "struct",
        "array" => "array",
        "map" => "map",
        _ => "string",
    };
    let attr = |k: &str| t.get(k);
    let connect_name = attr("connect.name").and_then(J::as_str);
    let logical = attr("logicalType").and_then(J::as_str);
    let name = connect_name.or_else(|| {
        Some(match (logical?, avro_type) {
            ("timestamp-millis" | "local-timestamp-millis", _) => {
                "org.apache.kafka.connect.data.Timestamp"
            }
            ("timestamp-micros" | "local-timestamp-micros", _) => "io.debezium.time.MicroTimestamp",
            ("timestamp-nanos" | "local-timestamp-nanos", _) => "io.debezium.time.NanoTimestamp",
            ("date", _) => "org.apache.kafka.connect.data.Date",
            ("time-millis", _) => "org.apache.kafka.connect.data.Time",
            ("time-micros", _) => "io.debezium.time.MicroTime",
            ("decimal", "bytes" | "fixed") => "org.apache.kafka.connect.data.Decimal",
            _ => return None,
        })
    });
    // Only the parameters the typing reads: a named type is met once per
    // field that uses it, and copying all its parameters each time was
    // quadratic in a hostile schema (megabytes of parameters, thousands of
    // fields).
    let mut parameters = serde_json::Map::new();
    if let Some(J::Object(p)) = attr("connect.parameters") {
        for k in ["scale", "connect.decimal.precision"] {
            if let Some(v) = p.get(k) {
                parameters.insert(k.into(), v.clone());
            }
        }
    }
    if name == Some("org.apache.kafka.connect.data.Decimal") {
        // Avro's own precision and scale where the converter left no parameters.
        if !parameters.contains_key("scale") {
            let scale = attr("scale").and_then(J::as_i64).unwrap_or(0);
            parameters.insert("scale".into(), J::String(scale.to_string()));
        }
        if !parameters.contains_key("connect.decimal.precision") && connect_name.is_none() {
            if let Some(p) = attr("precision").and_then(J::as_i64) {
                parameters.insert("connect.decimal.precision".into(), J::String(p.to_string()));
            }
        }
    }
    json!({"name": name, "type": connect_type, "parameters": parameters})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::DType;

    fn plan(schema: &str) -> Vec<FieldPlan> {
        let s: J = serde_json::from_str(schema).unwrap();
        let names = Names::of(&s);
        record_plan(&names, s["fields"].as_array().unwrap())
    }

    #[test]
    fn avro_logical_types_and_debezium_semantic_types_declare_exact_columns() {
        let p = plan(
            r#"{"type":"record","name":"Value","fields":[
              {"name":"id","type":"long"},
              {"name":"n","type":["null","int"],"default":null},
              {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
              {"name":"price","type":["null",{"type":"bytes","scale":3,"precision":12,"connect.version":1,
                 "connect.parameters":{"scale":"3","connect.decimal.precision":"12"},
                 "connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}]},
              {"name":"born","type":{"type":"int","logicalType":"date"}},
              {"name":"seen","type":{"type":"long","connect.name":"io.debezium.time.MicroTimestamp"}},
              {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
              {"name":"zoned","type":{"type":"string","connect.name":"io.debezium.time.ZonedTimestamp"}},
              {"name":"t","type":{"type":"long","logicalType":"time-micros"}},
              {"name":"u","type":{"type":"string","logicalType":"uuid"}},
              {"name":"v","type":{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data",
                 "fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],
                 "connect.name":"io.debezium.data.VariableScaleDecimal"}},
              {"name":"v2","type":["null","io.debezium.data.VariableScaleDecimal"]},
              {"name":"wide","type":{"type":"bytes","logicalType":"decimal","precision":50,"scale":2}},
              {"name":"f","type":"float"},
              {"name":"b","type":"bytes"},
              {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}}
            ]}"#,
        );
        let by = |n: &str| p.iter().find(|f| f.name == n).unwrap().clone();
        assert_eq!(by("id").declared, Declared::Exact(DType::Int));
        assert_eq!(by("n").declared, Declared::Exact(DType::Int));
        assert_eq!(
            by("amount").declared,
            Declared::Exact(DType::Decimal { precision: 10, scale: 2 })
        );
        assert_eq!(by("amount").conv, Conv::Decimal(2));
        assert_eq!(
            by("price").declared,
            Declared::Exact(DType::Decimal { precision: 12, scale: 3 })
        );
        assert_eq!(
            (by("born").declared, by("born").conv),
            (Declared::Exact(DType::Date), Conv::Date)
        );
        assert_eq!(
            (by("seen").declared, by("seen").conv),
            (Declared::Exact(DType::Ts), Conv::TsMicros)
        );
        assert_eq!(by("at").conv, Conv::TsMillis);
        assert_eq!(by("zoned").conv, Conv::ZonedTs);
        assert_eq!(
            (by("t").declared, by("t").conv),
            (Declared::Exact(DType::Time), Conv::TimeMicros)
        );
        assert_eq!(by("u").declared, Declared::Exact(DType::Str));
        assert_eq!(by("v").declared, Declared::VariableScaleDecimal);
        assert_eq!(by("v2").conv, Conv::VariableScaleDecimal, "a named reference resolves");
        assert!(matches!(by("wide").declared, Declared::Unstorable(_)));
        assert_eq!(by("wide").conv, Conv::WideDecimal(2));
        assert_eq!(by("f").declared, Declared::Exact(DType::Float));
        assert_eq!(by("b").declared, Declared::Exact(DType::Binary));
        assert_eq!(by("e").declared, Declared::Exact(DType::Str));
    }
}
