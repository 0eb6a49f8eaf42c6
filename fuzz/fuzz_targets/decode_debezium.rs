//! Debezium envelopes (with and without the schema wrapper), then typing:
//! any bytes decode to a row or a dead letter, never a panic, and a decoder
//! panic would show as reason `internal`.
#![no_main]

use changelake::batch::{conform, Guarded, TableShape};

static NONE: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
use changelake::config::SchemaPolicy;
use changelake::decode::{decode, Decoded};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (key, value) = data.split_at(data.len() / 8);
    let paths = ["source.lsn".to_string()];
    if let Err(e) = decode(changelake::config::Format::Debezium, Some(key), Some(value), &paths) {
        assert_ne!(e.reason, "internal", "{}", e.error);
    }
    // The same bytes as a file line, typed for a table keyed by `id`.
    let raw = changelake::source::file::read_debezium_jsonl("f", value, &paths, None);
    let rows = raw.rows.len();
    let keys = ["id".to_string()];
    let seq = ["source_lsn".to_string()];
    if let Ok(c) = conform(
        raw,
        TableShape { columns: &[], untyped: &NONE },
        &[],
        SchemaPolicy::Additive,
        Guarded { keys: &keys, sequence: &seq },
    ) {
        assert_eq!(c.rows.len() + c.dead.len(), rows);
    }
    let _ = matches!(
        decode(changelake::config::Format::Debezium, None, Some(value), &[]),
        Ok(Decoded::Row { .. })
    );
});
