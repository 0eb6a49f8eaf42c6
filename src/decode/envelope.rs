//! Debezium change envelopes on the general path: the message parsed into a
//! `serde_json::Value` first, so every shape is handled (the schema wrapper
//! included) and every error is reported. `fast` covers the common shapes
//! without the tree and falls back to this.

use std::collections::HashSet;

use serde_json::{Map, Value as J};

use super::json::json_cell;
use super::schema::{declaration, section_fields, typed, unwrap_schema, FieldSchemas};
use super::{env_name, store_envelope, Declared, Decoded, Env, Fields, Name, Op};

/// An envelope: `after` (or `before` for deletes) as the row, the other
/// fields flattened one level (`source.lsn`) as `env`, and the `store_paths`
/// copied into the row under their stored names.
pub(super) fn debezium(
    v: J,
    key: Option<&[u8]>,
    store_paths: &[String],
) -> Result<Decoded, String> {
    let (schema, payload) = unwrap_schema(&v);
    let p = match payload {
        J::Null => return Ok(Decoded::Tombstone),
        J::Object(p) => p,
        _ => return Err("not a Debezium envelope: payload is not an object".into()),
    };
    let op = p.get("op").and_then(J::as_str).ok_or("not a Debezium envelope: no `op` field")?;
    let (section, is_delete) = match Op::parse(op) {
        Some(Op::Upsert) => ("after", false),
        Some(Op::Delete) => ("before", true),
        Some(Op::Truncate) => return Ok(Decoded::Truncate),
        Some(Op::Message) => return Ok(Decoded::Tombstone),
        None => return Err(format!("unknown Debezium op `{op}`")),
    };
    let field_schemas = schema.and_then(|s| section_fields(s, section));
    let mut declared = vec![];
    if let Some(fields) = field_schemas {
        // Every declared field types its column, present in the row or not.
        for f in fields {
            if let Some(name) = f.get("field").and_then(J::as_str) {
                declared.push((name.to_string(), declaration(f)));
            }
        }
    }
    let by_name = FieldSchemas::of(field_schemas);
    let mut data = match p.get(section) {
        Some(J::Object(row)) => Fields::from_pairs(
            row.iter().map(|(k, v)| (Name::from(k.as_str()), typed(v, by_name.get(k)))),
        ),
        Some(J::Null) | None if is_delete => Fields::default(),
        _ => return Err(format!("Debezium `{op}` event without `{section}`")),
    };
    if is_delete {
        key_fallback(&mut data, &mut declared, key);
    }
    let mut env = vec![];
    flatten(p, None, &mut env);
    store_envelope(&mut data, &env, store_paths);
    Ok(Decoded::Row { data, env, declared: declared.into() })
}

/// Deletes may carry only the key (REPLICA IDENTITY DEFAULT): the message
/// key supplies it (and, with a key schema, its declared types).
pub(super) fn key_fallback(
    data: &mut Fields,
    declared: &mut Vec<(String, Declared)>,
    key: Option<&[u8]>,
) {
    if let Some(k) = key.and_then(|k| serde_json::from_slice::<J>(k).ok()) {
        let (kschema, kp) = unwrap_schema(&k);
        if let J::Object(km) = kp {
            // A key wider than a row may be is not used (the row then has
            // no key: a counted NULL key); merging it field by field into
            // the row would be quadratic.
            if km.len() > super::MAX_FIELDS {
                return;
            }
            let kf = FieldSchemas::of(kschema.and_then(|s| s.get("fields")).and_then(J::as_array));
            // Sets, not a search per key field: a key is a message's bytes too.
            let (mut held, mut null) = (HashSet::new(), HashSet::new());
            for (n, v) in data.iter() {
                if v.is_null() { &mut null } else { &mut held }.insert(n.to_string());
            }
            let mut declared_names: HashSet<String> =
                declared.iter().map(|(n, _)| n.clone()).collect();
            for (name, kv) in km {
                if !held.contains(name) {
                    if null.contains(name) {
                        data.remove(name);
                    }
                    let schema = kf.get(name);
                    data.push(name, typed(kv, schema));
                    if let Some(s) = schema.filter(|_| declared_names.insert(name.clone())) {
                        declared.push((name.clone(), declaration(s)));
                    }
                }
            }
        }
    }
}

/// The envelope's fields (`record` None) or those of its record `record`
/// (one level deep), by dotted name.
fn flatten(m: &Map<String, J>, record: Option<&str>, out: &mut Env) {
    for (k, v) in m {
        if record.is_none() && (k == "before" || k == "after") {
            continue;
        }
        match v {
            J::Object(inner) if record.is_none() => flatten(inner, Some(k), out),
            other => out.push((env_name(record, k), json_cell(other))),
        }
    }
}
