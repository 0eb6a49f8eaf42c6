//! Message decoding: flat JSON rows and Debezium change envelopes (SPEC 2).
//!
//! A decoded row has two parts: `data`, the columns that become table
//! columns (Debezium `after`, or `before` for deletes), and `env`, the
//! envelope fields (`op`, `ts_ms`, `source.lsn`, ...) that predicates and
//! `sequence_by` may read by dotted path but that are not stored. Envelope
//! paths a table must *store* (its `sequence_by` / `valid_time` column) are
//! materialised as data columns named with dots replaced by underscores
//! (`source.lsn` → `source_lsn`), so cross-batch ordering survives restarts.

use base64::Engine;
use serde_json::{Map, Value as J};

use crate::config::Format;
use crate::value::{parse_ts, Value};

#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    Row {
        data: Vec<(String, Value)>,
        env: Vec<(String, Value)>,
    },
    /// Kafka tombstone (null value): skipped and counted.
    Tombstone,
    /// Debezium `t`: counted and logged; no data change.
    Truncate,
}

/// Column name under which an envelope path is stored.
pub fn stored_name(path: &str) -> String {
    path.replace('.', "_")
}

/// Is `name` an envelope path rather than a row column (Debezium only)?
pub fn is_envelope_path(name: &str) -> bool {
    name.contains('.') || matches!(name, "op" | "ts_ms" | "ts_us" | "ts_ns")
}

/// Envelope paths a table stores as columns (Debezium `sequence_by` / `valid_time`).
pub fn store_paths(t: &crate::config::TableConfig, format: Format) -> Vec<String> {
    if format != Format::Debezium {
        return vec![];
    }
    let mut p: Vec<String> =
        t.sequence_by.iter().filter(|s| is_envelope_path(s)).cloned().collect();
    if let crate::config::ValidTime::Column(c) = &t.valid_time {
        if is_envelope_path(c) {
            p.push(c.clone());
        }
    }
    p
}

pub fn decode(
    format: Format,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    store_paths: &[String],
) -> Result<Decoded, String> {
    decode_keeping(format, key, value, store_paths, None)
}

/// Envelope fields one table reads: its stored envelope columns, the columns
/// its `filter` and `delete_when` name, and `op`.
pub fn env_paths(t: &crate::config::TableConfig, format: Format) -> Vec<String> {
    let mut p = store_paths(t, format);
    let mut cols = vec![];
    for e in t.filter.iter().chain(t.delete_when.iter()) {
        e.columns(&mut cols);
    }
    p.extend(cols.into_iter().map(|c| c.join(".")));
    p.push("op".into());
    p
}

/// [`decode`] keeping only the envelope fields in `keep` (see [`env_paths`]):
/// a reader of one table skips building values nobody reads. The fallback
/// (general) path keeps every field, a superset.
pub fn decode_keeping(
    format: Format,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    store_paths: &[String],
    keep: Option<&[String]>,
) -> Result<Decoded, String> {
    let Some(value) = value else { return Ok(Decoded::Tombstone) };
    if let Some(d) = fast::decode(format, key, value, store_paths, keep) {
        return d;
    }
    let v: J = serde_json::from_slice(value).map_err(|e| format!("not JSON: {e}"))?;
    match format {
        Format::Json => match v {
            J::Object(m) => Ok(Decoded::Row {
                data: m.iter().map(|(k, v)| (k.clone(), json_cell(v))).collect(),
                env: vec![],
            }),
            _ => Err("not a JSON object".into()),
        },
        Format::Debezium => debezium(v, key, store_paths),
    }
}

/// Converts a JSON value to a cell; nested values are kept as JSON text.
pub fn json_cell(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::Str(s.clone()),
        other => Value::Str(other.to_string()),
    }
}

fn unwrap_schema(v: &J) -> (Option<&J>, &J) {
    match v {
        J::Object(m) if m.contains_key("payload") && m.contains_key("schema") => {
            (m.get("schema"), &m["payload"])
        }
        other => (None, other),
    }
}

fn debezium(v: J, key: Option<&[u8]>, store_paths: &[String]) -> Result<Decoded, String> {
    let (schema, payload) = unwrap_schema(&v);
    let p = match payload {
        J::Null => return Ok(Decoded::Tombstone),
        J::Object(p) => p,
        _ => return Err("not a Debezium envelope: payload is not an object".into()),
    };
    let op = p.get("op").and_then(J::as_str).ok_or("not a Debezium envelope: no `op` field")?;
    let (section, is_delete) = match op {
        "c" | "u" | "r" => ("after", false),
        "d" => ("before", true),
        "t" => return Ok(Decoded::Truncate),
        "m" => return Ok(Decoded::Tombstone),
        other => return Err(format!("unknown Debezium op `{other}`")),
    };
    let field_schemas = schema.and_then(|s| section_fields(s, section));
    let mut data: Vec<(String, Value)> = match p.get(section) {
        Some(J::Object(row)) => row
            .iter()
            .map(|(k, v)| (k.clone(), typed(v, field_schemas.and_then(|f| field_schema(f, k)))))
            .collect(),
        Some(J::Null) | None if is_delete => vec![],
        _ => return Err(format!("Debezium `{op}` event without `{section}`")),
    };
    if is_delete {
        key_fallback(&mut data, key);
    }
    let mut env = vec![];
    flatten(p, "", &mut env);
    for path in store_paths {
        if let Some((_, v)) = env.iter().find(|(n, _)| n == path) {
            data.push((stored_name(path), v.clone()));
        }
    }
    Ok(Decoded::Row { data, env })
}

/// Deletes may carry only the key (REPLICA IDENTITY DEFAULT): the message key supplies it.
fn key_fallback(data: &mut Vec<(String, Value)>, key: Option<&[u8]>) {
    if let Some(k) = key.and_then(|k| serde_json::from_slice::<J>(k).ok()) {
        let (kschema, kp) = unwrap_schema(&k);
        if let J::Object(km) = kp {
            let kf = kschema.and_then(|s| s.get("fields")).and_then(J::as_array);
            for (name, kv) in km {
                let have = data.iter().any(|(n, v)| n == name && !v.is_null());
                if !have {
                    data.retain(|(n, _)| n != name);
                    data.push((name.clone(), typed(kv, kf.and_then(|f| field_schema(f, name)))));
                }
            }
        }
    }
}

/// The hot path: envelopes without the schema wrapper (the common JSON
/// converter setting) and flat rows, deserialised straight into cells — no
/// intermediate `serde_json::Value` tree per message. Anything unusual
/// (schema wrapper, invalid JSON) returns None and takes the general path,
/// which also produces the error messages.
mod fast {
    use std::fmt;

    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde::Deserialize;

    use super::{key_fallback, stored_name, Decoded};
    use crate::config::Format;
    use crate::value::Value;

    /// One JSON value as a cell, as `json_cell` maps it (nested values become JSON text).
    struct Cell(Value);

    impl<'de> Deserialize<'de> for Cell {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(CellVisitor)
        }
    }

    struct CellVisitor;

    impl<'de> Visitor<'de> for CellVisitor {
        type Value = Cell;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E>(self, v: bool) -> Result<Cell, E> {
            Ok(Cell(Value::Bool(v)))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Cell, E> {
            Ok(Cell(Value::Int(v)))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Cell, E> {
            Ok(Cell(i64::try_from(v).map(Value::Int).unwrap_or(Value::Float(v as f64))))
        }
        fn visit_f64<E>(self, v: f64) -> Result<Cell, E> {
            Ok(Cell(Value::Float(v)))
        }
        fn visit_str<E>(self, v: &str) -> Result<Cell, E> {
            Ok(Cell(Value::Str(v.to_string())))
        }
        fn visit_string<E>(self, v: String) -> Result<Cell, E> {
            Ok(Cell(Value::Str(v)))
        }
        fn visit_unit<E>(self) -> Result<Cell, E> {
            Ok(Cell(Value::Null))
        }
        fn visit_none<E>(self) -> Result<Cell, E> {
            Ok(Cell(Value::Null))
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Cell, D::Error> {
            Cell::deserialize(d)
        }
        fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Cell, A::Error> {
            let v =
                serde_json::Value::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
            Ok(Cell(Value::Str(v.to_string())))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<Cell, A::Error> {
            let v =
                serde_json::Value::deserialize(serde::de::value::SeqAccessDeserializer::new(s))?;
            Ok(Cell(Value::Str(v.to_string())))
        }
    }

    /// A JSON object's fields as cells, in document order (`prefix.` prepended).
    /// With `Some(paths)`, only fields whose dotted name is in `paths` are kept.
    struct Fields<'p>(&'p str, Option<&'p [String]>);

    /// Is `prefix.k` (or `k` when there is no prefix) one of `paths`?
    fn listed(paths: &[String], prefix: &str, k: &str) -> bool {
        paths.iter().any(|p| {
            if prefix.is_empty() {
                p == k
            } else {
                p.len() == prefix.len() + 1 + k.len()
                    && p.starts_with(prefix)
                    && p.as_bytes()[prefix.len()] == b'.'
                    && p.ends_with(k)
            }
        })
    }

    impl<'de> DeserializeSeed<'de> for Fields<'_> {
        type Value = Option<Vec<(String, Value)>>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Fields<'_> {
        type Value = Option<Vec<(String, Value)>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object or null")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(m.size_hint().unwrap_or(24));
            while let Some(k) = m.next_key::<String>()? {
                if self.1.is_some_and(|p| !listed(p, self.0, &k)) {
                    m.next_value::<IgnoredAny>()?;
                    continue;
                }
                let v: Cell = m.next_value()?;
                let name = if self.0.is_empty() { k } else { format!("{}.{k}", self.0) };
                out.push((name, v.0));
            }
            Ok(Some(out))
        }
        // Any other JSON type: not an object (the general path reports it).
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Err(E::custom("not an object"))
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Err(E::custom("not an object"))
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Err(E::custom("not an object"))
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(E::custom("not an object"))
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Err(E::custom("not an object"))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(serde::de::Error::custom("not an object"))
        }
    }

    /// A top-level envelope field: an object is flattened one level (`source.lsn`).
    struct EnvField<'k>(String, Option<&'k [String]>);

    impl<'de> DeserializeSeed<'de> for EnvField<'_> {
        type Value = Vec<(String, Value)>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for EnvField<'_> {
        type Value = Vec<(String, Value)>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Self::Value, A::Error> {
            Ok(Fields(&self.0, self.1).visit_map(m)?.unwrap_or_default())
        }
        fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
            Ok(vec![(self.0, Value::Bool(v))])
        }
        fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
            Ok(vec![(self.0, Value::Int(v))])
        }
        fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
            Ok(vec![(self.0, i64::try_from(v).map(Value::Int).unwrap_or(Value::Float(v as f64)))])
        }
        fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
            Ok(vec![(self.0, Value::Float(v))])
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(vec![(self.0, Value::Str(v.to_string()))])
        }
        fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
            Ok(vec![(self.0, Value::Str(v))])
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(vec![(self.0, Value::Null)])
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(vec![(self.0, Value::Null)])
        }
        fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<Self::Value, A::Error> {
            let name = self.0;
            Ok(vec![(name, CellVisitor.visit_seq(s)?.0)])
        }
    }

    #[derive(Default)]
    struct Envelope {
        before: Option<Vec<(String, Value)>>,
        after: Option<Vec<(String, Value)>>,
        env: Vec<(String, Value)>,
        /// `schema`/`payload` wrapper present: the general path handles it.
        wrapped: bool,
    }

    /// An envelope; with `Some(paths)` only those envelope fields (and `op`)
    /// are kept, the others are skipped without building values.
    struct EnvelopeSeed<'k>(Option<&'k [String]>);

    impl<'de> DeserializeSeed<'de> for EnvelopeSeed<'_> {
        type Value = Envelope;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Envelope, D::Error> {
            d.deserialize_map(EnvelopeVisitor(self.0))
        }
    }

    struct EnvelopeVisitor<'k>(Option<&'k [String]>);

    impl<'de> Visitor<'de> for EnvelopeVisitor<'_> {
        type Value = Envelope;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a Debezium envelope")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Envelope, A::Error> {
            let mut e = Envelope::default();
            while let Some(k) = m.next_key::<String>()? {
                match k.as_str() {
                    "before" => e.before = m.next_value_seed(Fields("", None))?,
                    "after" => e.after = m.next_value_seed(Fields("", None))?,
                    "schema" | "payload" => {
                        e.wrapped = true;
                        m.next_value::<IgnoredAny>()?;
                    }
                    _ if k != "op"
                        && self.0.is_some_and(|p| {
                            !p.iter().any(|p| {
                                p == &k
                                    || (p.starts_with(k.as_str())
                                        && p.as_bytes().get(k.len()) == Some(&b'.'))
                            })
                        }) =>
                    {
                        m.next_value::<IgnoredAny>()?;
                    }
                    _ => {
                        let keep = self.0.filter(|_| k != "op");
                        let f = m.next_value_seed(EnvField(k, keep))?;
                        e.env.extend(f);
                    }
                }
            }
            Ok(e)
        }
    }

    /// Parses an envelope with simd-json (SIMD structural scan, then the same
    /// visitors): about a third faster than serde_json on CRM envelopes. The
    /// input is copied into a per-thread buffer (simd-json parses in place)
    /// and the parser's buffers are reused across messages. Anything it
    /// refuses takes the general path, which decides and reports.
    fn simd_envelope(value: &[u8], keep: Option<&[String]>) -> Option<Envelope> {
        thread_local!(static BUF: std::cell::RefCell<(Vec<u8>, simd_json::Buffers)> = std::cell::RefCell::new((Vec::new(), simd_json::Buffers::new(1024))));
        BUF.with_borrow_mut(|(input, buffers)| {
            input.clear();
            input.extend_from_slice(value);
            let mut de = simd_json::Deserializer::from_slice_with_buffers(input, buffers).ok()?;
            EnvelopeSeed(keep).deserialize(&mut de).ok()
        })
    }

    pub fn decode(
        format: Format,
        key: Option<&[u8]>,
        value: &[u8],
        store_paths: &[String],
        keep: Option<&[String]>,
    ) -> Option<Result<Decoded, String>> {
        match format {
            Format::Json => {
                let mut de = serde_json::Deserializer::from_slice(value);
                let data = Fields("", None).deserialize(&mut de).ok()??;
                de.end().ok()?;
                Some(Ok(Decoded::Row { data, env: vec![] }))
            }
            Format::Debezium => {
                let e = simd_envelope(value, keep)?;
                if e.wrapped {
                    return None;
                }
                let op = match e.env.iter().find(|(n, _)| n == "op") {
                    Some((_, Value::Str(op))) => op.clone(),
                    _ => return None,
                };
                let (section, is_delete) = match op.as_str() {
                    "c" | "u" | "r" => (e.after, false),
                    "d" => (e.before, true),
                    "t" => return Some(Ok(Decoded::Truncate)),
                    "m" => return Some(Ok(Decoded::Tombstone)),
                    _ => return None,
                };
                let mut data = match section {
                    Some(d) => d,
                    None if is_delete => vec![],
                    None => return None,
                };
                if is_delete {
                    key_fallback(&mut data, key);
                }
                for path in store_paths {
                    if let Some((_, v)) = e.env.iter().find(|(n, _)| n == path) {
                        data.push((stored_name(path), v.clone()));
                    }
                }
                Some(Ok(Decoded::Row { data, env: e.env }))
            }
        }
    }
}

fn flatten(m: &Map<String, J>, prefix: &str, out: &mut Vec<(String, Value)>) {
    for (k, v) in m {
        if prefix.is_empty() && (k == "before" || k == "after") {
            continue;
        }
        let name = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            J::Object(inner) if prefix.is_empty() => flatten(inner, &name, out),
            other => out.push((name, json_cell(other))),
        }
    }
}

fn section_fields<'a>(schema: &'a J, section: &str) -> Option<&'a Vec<J>> {
    schema
        .get("fields")?
        .as_array()?
        .iter()
        .find(|f| f.get("field").and_then(J::as_str) == Some(section))?
        .get("fields")?
        .as_array()
}

fn field_schema<'a>(fields: &'a [J], name: &str) -> Option<&'a J> {
    fields.iter().find(|f| f.get("field").and_then(J::as_str) == Some(name))
}

/// Maps a JSON value with its Kafka Connect schema to a cell (SPEC 2).
fn typed(v: &J, schema: Option<&J>) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(pairs: &'a [(String, Value)], k: &str) -> &'a Value {
        &pairs.iter().find(|(n, _)| n == k).unwrap_or_else(|| panic!("no {k} in {pairs:?}")).1
    }

    // Shapes from the Debezium PostgreSQL connector documentation (customers table).
    const PG_UPDATE_NO_SCHEMA: &str = r#"{"before":null,"after":{"id":1,"first_name":"Anne Marie","last_name":"Kretchmar","email":"annek@noanswer.org"},"source":{"version":"2.7.0.Final","connector":"postgresql","name":"PostgreSQL_server","ts_ms":1559033904863,"snapshot":"false","db":"postgres","schema":"public","table":"customers","txId":556,"lsn":24023128,"xmin":null},"op":"u","ts_ms":1465584025523}"#;
    const PG_DELETE_KEY_ONLY: &str = r#"{"before":{"id":1,"first_name":null,"last_name":null,"email":null},"after":null,"source":{"connector":"postgresql","db":"postgres","schema":"public","table":"customers","txId":556,"lsn":46523128},"op":"d","ts_ms":1465581902461}"#;

    // Shape from the Debezium SQL Server connector documentation, with the schema wrapper.
    const SQLSERVER_CREATE_WITH_SCHEMA: &str = r#"{"schema":{"type":"struct","fields":[
      {"type":"struct","optional":true,"field":"before","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":false,"field":"first_name"},{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","field":"created"},{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"},"field":"balance"},{"type":"int32","optional":true,"name":"io.debezium.time.Date","field":"birthday"}]},
      {"type":"struct","optional":true,"field":"after","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":false,"field":"first_name"},{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","field":"created"},{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"},"field":"balance"},{"type":"int32","optional":true,"name":"io.debezium.time.Date","field":"birthday"}]},
      {"type":"struct","fields":[{"type":"string","field":"change_lsn"},{"type":"string","field":"commit_lsn"}],"optional":false,"name":"io.debezium.connector.sqlserver.Source","field":"source"},
      {"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"server1.testDB.dbo.customers.Envelope"},
    "payload":{"before":null,"after":{"id":1005,"first_name":"john","created":1559729468470,"balance":"AwfQ","birthday":18000},"source":{"version":"2.7.0.Final","connector":"sqlserver","name":"server1","ts_ms":1559729468470,"snapshot":"false","db":"testDB","schema":"dbo","table":"customers","change_lsn":"00000027:00000758:0003","commit_lsn":"00000027:00000758:0005","event_serial_no":"1"},"op":"c","ts_ms":1559729471739}}"#;

    #[test]
    fn debezium_update_without_schema_wrapper() {
        let d = decode(
            Format::Debezium,
            None,
            Some(PG_UPDATE_NO_SCHEMA.as_bytes()),
            &["source.lsn".into()],
        )
        .unwrap();
        let Decoded::Row { data, env } = d else { panic!() };
        assert_eq!(get(&data, "first_name"), &Value::Str("Anne Marie".into()));
        assert_eq!(
            get(&data, "source_lsn"),
            &Value::Int(24023128),
            "sequence path stored as a column"
        );
        assert_eq!(get(&env, "op"), &Value::Str("u".into()));
        assert_eq!(get(&env, "source.table"), &Value::Str("customers".into()));
    }

    #[test]
    fn debezium_delete_uses_before_and_message_key_fallback() {
        let d = decode(
            Format::Debezium,
            Some(br#"{"id":1}"#),
            Some(PG_DELETE_KEY_ONLY.as_bytes()),
            &[],
        )
        .unwrap();
        let Decoded::Row { data, env } = d else { panic!() };
        assert_eq!(get(&data, "id"), &Value::Int(1));
        assert_eq!(get(&env, "op"), &Value::Str("d".into()));
        let no_before = r#"{"before":null,"after":null,"source":{"lsn":5},"op":"d"}"#;
        let key = r#"{"schema":{"type":"struct","fields":[{"type":"int32","field":"id"}]},"payload":{"id":7}}"#;
        let Decoded::Row { data, .. } =
            decode(Format::Debezium, Some(key.as_bytes()), Some(no_before.as_bytes()), &[])
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(get(&data, "id"), &Value::Int(7));
    }

    #[test]
    fn debezium_schema_wrapper_maps_logical_types() {
        let Decoded::Row { data, env } =
            decode(Format::Debezium, None, Some(SQLSERVER_CREATE_WITH_SCHEMA.as_bytes()), &[])
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(get(&data, "created"), &Value::Ts(1_559_729_468_470_000));
        assert_eq!(
            get(&data, "balance"),
            &Value::Float(1986.08),
            "AwfQ = 0x0307d0 = 198608, scale 2"
        );
        assert_eq!(get(&data, "birthday"), &Value::Ts(18000 * 86_400_000_000));
        assert_eq!(get(&env, "source.change_lsn"), &Value::Str("00000027:00000758:0003".into()));
    }

    #[test]
    fn debezium_tombstone_truncate_and_garbage() {
        assert_eq!(decode(Format::Debezium, None, None, &[]).unwrap(), Decoded::Tombstone);
        assert_eq!(
            decode(Format::Debezium, None, Some(br#"{"op":"t","source":{}}"#), &[]).unwrap(),
            Decoded::Truncate
        );
        assert!(decode(Format::Debezium, None, Some(b"\x00garbage"), &[]).is_err());
        assert!(decode(Format::Debezium, None, Some(br#"{"id":1}"#), &[]).is_err());
    }

    /// Column mixes of the generated envelopes: text-heavy, numeric, wide.
    #[derive(Clone, Copy)]
    enum Shape {
        Crm,
        Narrow,
        Wide,
    }

    /// `n` seeded Debezium envelopes (one JSON line each) of one column mix:
    /// every op (deletes carry `before`), text with escapes and non-ASCII,
    /// integers, floats, flags, timestamps, NULLs and nested values. The
    /// decoder's own generator: the bench's workload lives in the binary.
    fn envelopes(seed: u64, shape: Shape, n: u64) -> String {
        let mut state = seed;
        let mut next = move || {
            // SplitMix64.
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let cities = ["Berlin", "Köln", "München", "Zoë \"Q\" \\ Bremen"];
        let mut out = String::new();
        for i in 0..n {
            let h = next();
            let key = h % 500;
            let ts =
                format!("2026-{:02}-{:02}T{:02}:00:00Z", 1 + h % 12, 1 + (h >> 8) % 28, h % 24);
            let phone = if h % 5 == 0 { J::Null } else { format!("+49 {}", h % 10_000).into() };
            let revenue = -(((h >> 24) % 5_000_000) as f64) / 100.0;
            let mut row = match shape {
                Shape::Narrow => serde_json::json!({
                    "accountid": key, "statecode": (h >> 40) % 2,
                    "balance": ((h >> 24) % 50_000_000) as f64 / 100.0,
                    "creditlimit": ((h >> 28) % 1_000) as f64 * 1000.0,
                    "modifiedon": ts, "versionnumber": i,
                }),
                Shape::Crm | Shape::Wide => serde_json::json!({
                    "accountid": key, "name": format!("Account {key}"),
                    "accountnumber": format!("AC-{key:08}"),
                    "address1_city": cities[(h % 4) as usize], "address1_country": "DE",
                    "telephone1": phone,
                    "industrycode": (h >> 20) % 40, "revenue": revenue,
                    "numberofemployees": (h >> 32) % 5_000, "donotemail": (h >> 61) % 2 == 1,
                    "ownerid": format!("{:016x}", h.rotate_left(17)), "modifiedon": ts,
                    "description": "segment\n\t\u{1F600}", "versionnumber": i,
                }),
            };
            if let (Shape::Wide, J::Object(m)) = (shape, &mut row) {
                for c in 0..24u64 {
                    let g = h ^ c.wrapping_mul(0x2545_F491_4F6C_DD1D);
                    let v = match c % 4 {
                        0 => serde_json::json!(["tag", g % 7, {"nested": g % 3 == 0}]),
                        1 => serde_json::json!(g % 1_000_000),
                        2 => serde_json::json!(g % 3 == 0),
                        _ => serde_json::json!({"at": format!("2025-{:02}-01", 1 + g % 12)}),
                    };
                    m.insert(format!("custom_{c:02}"), v);
                }
            }
            let op = ["c", "u", "u", "d", "r"][((h >> 56) % 5) as usize];
            let (before, after) = if op == "d" { (row, J::Null) } else { (J::Null, row) };
            let lsn = 1_000 + i;
            let envelope = serde_json::json!({
                "before": before, "after": after,
                "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "crm",
                           "ts_ms": 1_764_000_000_000u64 + lsn, "db": "crm", "schema": "public",
                           "table": "account", "lsn": lsn, "txId": lsn / 8},
                "op": op, "ts_ms": 1_764_000_000_040u64 + lsn,
            });
            out.push_str(&envelope.to_string());
            out.push('\n');
        }
        out
    }

    /// The fast path and the general path agree on every shape they share.
    #[test]
    fn fast_decode_equals_the_general_path_on_generated_workloads() {
        let paths = vec!["source.lsn".to_string()];
        for shape in [Shape::Crm, Shape::Narrow, Shape::Wide] {
            let text = envelopes(11, shape, 300);
            for line in text.lines() {
                let fast = fast::decode(Format::Debezium, None, line.as_bytes(), &paths, None)
                    .expect("fast path taken")
                    .unwrap();
                assert_eq!(
                    fast,
                    debezium(serde_json::from_str(line).unwrap(), None, &paths).unwrap(),
                    "{line}"
                );
            }
        }
    }

    #[test]
    fn decode_keeping_drops_only_unread_envelope_fields() {
        let paths = vec!["source.lsn".to_string()];
        let keep = vec!["source.lsn".to_string(), "ts_ms".to_string()];
        let all =
            decode(Format::Debezium, None, Some(PG_UPDATE_NO_SCHEMA.as_bytes()), &paths).unwrap();
        let some = decode_keeping(
            Format::Debezium,
            None,
            Some(PG_UPDATE_NO_SCHEMA.as_bytes()),
            &paths,
            Some(&keep),
        )
        .unwrap();
        let (Decoded::Row { data: d1, env: e1 }, Decoded::Row { data: d2, env: e2 }) = (all, some)
        else {
            panic!("rows")
        };
        assert_eq!(d1, d2);
        let names: Vec<&str> = e2.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["source.lsn", "op", "ts_ms"]);
        for (n, v) in &e2 {
            assert_eq!(Some(v), e1.iter().find(|(m, _)| m == n).map(|(_, v)| v), "{n}");
        }
    }

    #[test]
    fn fast_decode_equals_the_general_path() {
        let general = |format, key: Option<&[u8]>, v: &str, paths: &[String]| {
            let j: J = serde_json::from_str(v).unwrap();
            match format {
                Format::Debezium => debezium(j, key, paths).unwrap(),
                Format::Json => match j {
                    J::Object(m) => Decoded::Row {
                        data: m.iter().map(|(k, v)| (k.clone(), json_cell(v))).collect(),
                        env: vec![],
                    },
                    _ => unreachable!(),
                },
            }
        };
        let paths = vec!["source.lsn".to_string(), "ts_ms".to_string()];
        let nested = r#"{"before":null,"after":{"id":18446744073709551615,"tags":["a",{"b":1}],"meta":{"x":null},"amount":-1.5e3,"ok":true,"name":"Zo\u00eb \"Q\""},"source":{"lsn":7,"table":"t","extra":{"deep":[1]}},"op":"c","ts_ms":1,"transaction":null}"#;
        for (format, key, v) in [
            (Format::Debezium, None, PG_UPDATE_NO_SCHEMA),
            (Format::Debezium, Some(&br#"{"id":1}"#[..]), PG_DELETE_KEY_ONLY),
            (Format::Debezium, None, nested),
            (Format::Json, None, r#"{"id":1,"op":"U","amount":2.5,"n":null,"nested":{"a":[1,2]}}"#),
            (
                Format::Debezium,
                None,
                r#"{"after":{"id":-9223372036854775808,"a":0.1,"b":1e308,"c":5e-324,"d":123456789.123456789,"e":-0.0,"f":2.2250738585072014e-308,"g":9007199254740993,"h":"\ud83d\ude00 \\ \/"},"op":"r","source":{"lsn":1}}"#,
            ),
        ] {
            let fast = fast::decode(format, key, v.as_bytes(), &paths, None)
                .unwrap_or_else(|| panic!("fast path not taken: {v}"))
                .unwrap();
            assert_eq!(fast, general(format, key, v, &paths), "{v}");
        }
        // The schema wrapper and bad input take the general path.
        assert!(fast::decode(
            Format::Debezium,
            None,
            SQLSERVER_CREATE_WITH_SCHEMA.as_bytes(),
            &paths,
            None
        )
        .is_none());
        assert!(fast::decode(Format::Debezium, None, b"{not json", &paths, None).is_none());
        assert!(fast::decode(Format::Debezium, None, br#"{"op":"x"}"#, &paths, None).is_none());
    }

    #[test]
    fn flat_json_rows_keep_their_types() {
        let Decoded::Row { data, env } =
            decode(Format::Json, None, Some(br#"{"id":1,"op":"U","amount":2.5}"#), &[]).unwrap()
        else {
            panic!()
        };
        assert_eq!(get(&data, "op"), &Value::Str("U".into()));
        assert_eq!(get(&data, "amount"), &Value::Float(2.5));
        assert!(env.is_empty());
    }
}
