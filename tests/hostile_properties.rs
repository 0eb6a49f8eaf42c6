//! Properties over generated hostile input (docs/bad-input.md): every
//! decoder, the CSV reader, typing, the config loader and the predicate
//! parser answer with a value or an error — never a panic, never an abort —
//! and a decoded batch accounts for every row (typed or dead-lettered).
//! The coverage-guided fuzz targets in `fuzz/` search the same inputs
//! longer; these run in CI.

use std::path::Path;

use proptest::prelude::*;

use changelake::batch::{conform, Guarded, TableShape};

static PLACEHOLDER: std::sync::LazyLock<changelake::batch::Unavailable> =
    std::sync::LazyLock::new(|| {
        changelake::batch::Unavailable::new(changelake::batch::Unavailable::DEFAULT)
    });
static NONE: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
use changelake::config::{Config, Format, SchemaPolicy};
use changelake::decode::{decode, Decoded};
use changelake::source::file::{read_csv, read_debezium_jsonl, read_jsonl};

/// JSON-ish text: nesting (often deep), huge and odd numbers, escapes, NUL,
/// invalid UTF-8, duplicate keys, truncation.
fn hostile_json() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("99999999999999999999999".to_string()),
        Just("-0.0e-999".to_string()),
        Just("1e400".to_string()),
        Just("\"\\u0000\"".to_string()),
        Just("\"\\ud800\"".to_string()),
        Just("\"ü\\\"[{\"".to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
        "[a-z0-9]{0,8}".prop_map(|s| format!("\"{s}\"")),
    ];
    let value = leaf.prop_recursive(6, 64, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(","))),
            proptest::collection::vec(("[a-z]{1,3}", inner), 0..4).prop_map(|kv| {
                let fields: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    });
    (
        value,
        0usize..3000,
        prop_oneof![Just("c"), Just("u"), Just("d"), Just("t"), Just("x")],
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..4),
        0usize..3,
    )
        .prop_map(|(v, depth, op, dup, junk, cut)| {
            let nested = format!("{}{v}{}", "[".repeat(depth), "]".repeat(depth));
            let dup = if dup { r#","id":"again""# } else { "" };
            let mut s = format!(
                r#"{{"op":"{op}","after":{{"id":{v},"name":{nested}{dup}}},"before":{v},"source":{{"lsn":{v}}}}}"#
            )
            .into_bytes();
            s.extend(junk);
            let keep = s.len().saturating_sub(cut * s.len() / 4);
            s.truncate(keep);
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn decoders_never_panic_and_only_bugs_are_internal(msg in hostile_json(), key in hostile_json()) {
        for format in [Format::Debezium, Format::Json] {
            match decode(format, Some(&key), Some(&msg), &["source.lsn".to_string()]) {
                Ok(Decoded::Row { data, .. }) => prop_assert!(data.len() < 10_000),
                Ok(_) => {}
                Err(e) => prop_assert_ne!(e.reason, "internal", "{}", e.error),
            }
        }
    }

    #[test]
    fn decoders_take_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for format in [Format::Debezium, Format::Json] {
            if let Err(e) = decode(format, Some(&bytes), Some(&bytes), &[]) {
                prop_assert_ne!(e.reason, "internal");
            }
        }
    }

    /// Every line of a file is a row or a dead letter, and typing then
    /// accounts for every row: typed, or dead with a reason.
    #[test]
    fn files_account_for_every_line(lines in proptest::collection::vec(hostile_json(), 1..12)) {
        let mut text = vec![];
        for l in &lines {
            text.extend(l.iter().filter(|&&b| b != b'\n'));
            text.push(b'\n');
        }
        let text = bytes::Bytes::from(text);
        let raw = read_debezium_jsonl("f.jsonl", &text, &["source.lsn".into()], None);
        let (rows, unparsable) = (raw.rows.len(), raw.unparsable.len());
        prop_assert!(rows + unparsable <= lines.len());
        let keys = ["id".to_string()];
        let seq = ["source_lsn".to_string()];
        let guarded = Guarded { keys: &keys, sequence: &seq };
        if let Ok(c) = conform(raw, TableShape { columns: &[], written: &[], untyped: &NONE, exact: true, unavailable: Some(&PLACEHOLDER), debezium: true }, &[], SchemaPolicy::Additive, guarded) {
            prop_assert_eq!(c.rows.len() + c.dead.len(), rows);
        }
        let _ = read_jsonl(Path::new("f.jsonl"), &text);
    }

    #[test]
    fn csv_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512), delim in prop_oneof![Just(b','), Just(b';'), Just(b'\t')]) {
        if let Ok(raw) = read_csv(Path::new("f.csv"), &bytes, delim) {
            let keys = vec![];
            let _ = conform(raw, TableShape { columns: &[], written: &[], untyped: &NONE, exact: true, unavailable: Some(&PLACEHOLDER), debezium: true }, &[], SchemaPolicy::Additive, Guarded { keys: &keys, sequence: &[] });
        }
    }

    #[test]
    fn predicates_parse_or_explain(s in "[ -~]{0,64}", depth in 0usize..400) {
        let _ = changelake::expr::parse(&s);
        let deep = format!("{}a = 1{}", "(".repeat(depth), ")".repeat(depth));
        let _ = changelake::expr::parse(&deep);
        let not = format!("{}a = 1", "NOT ".repeat(depth));
        let _ = changelake::expr::parse(&not);
    }

    #[test]
    fn configs_load_or_explain(s in "[ -~\n]{0,200}", depth in 0usize..2000) {
        let _ = Config::parse(&s, Path::new("/cfg"));
        let deep = format!("systems: {}x{}\n", "[".repeat(depth), "]".repeat(depth));
        let _ = Config::parse(&deep, Path::new("/cfg"));
        let deep_map = format!("bronze: {}x{}\n", "{a: ".repeat(depth), "}".repeat(depth));
        let _ = Config::parse(&deep_map, Path::new("/cfg"));
    }
}
