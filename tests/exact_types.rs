//! Exact types end to end (docs/types.md): Debezium change events in the
//! shapes of the connector documentation (PostgreSQL, SQL Server, MySQL;
//! with and without the schema wrapper; precise, string and double decimal
//! modes; TOAST placeholders) are run through the file source and through a
//! real Kafka-protocol broker, and the tables are read back with Python
//! `deltalake` and polars, comparing every value and every Arrow type with
//! the fixture's expectation (tests/fixtures/debezium, made by
//! make_fixtures.py; tests/support/check_types.py compares).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{cli, ok, stdout_of, write, Broker};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/debezium")
}

/// The expectation of a fixture (and its `columns:` declarations).
fn expected(name: &str) -> (PathBuf, serde_json::Value) {
    let path = fixtures().join(format!("{name}.expected.json"));
    let v = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    (path, v)
}

/// `columns:` for the system, from the expectation's `config_columns`.
fn columns_yaml(exp: &serde_json::Value) -> String {
    match exp["config_columns"].as_object() {
        None => String::new(),
        Some(m) => {
            let cols: Vec<String> =
                m.iter().map(|(k, v)| format!("{k}: \"{}\"", v.as_str().unwrap())).collect();
            format!("    columns: {{{}}}\n", cols.join(", "))
        }
    }
}

fn table_yaml(object: &str) -> String {
    format!(
        r#"bronze:
  tables:
    t:
      source: {{system: src, object: {object}}}
      business_key: [id]
      strategy: scd1
batching: {{max_rows: 100000, max_age: 1s}}
shutdown_timeout: 10s
"#
    )
}

/// Reads the table back with both readers and compares it with `exp`.
fn check_table(table: &Path, exp: &Path) {
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/check_types.py"))
        .arg(table)
        .arg(exp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}{}",
        exp.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The dead letters of a lake: (reason, error) per row.
fn dead_letters(cfg: &Path) -> Vec<(String, String)> {
    let out = cli(&["show", "_dead_letters", "--format", "jsonl"], cfg);
    if !out.status.success() {
        return vec![];
    }
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["reason"].as_str().unwrap_or("").into(), v["error"].as_str().unwrap().into())
        })
        .collect()
}

/// Runs one fixture through the JSONL file source and checks the table.
fn file_source(fixture: &str, expectation: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (exp_path, exp) = expected(expectation);
    std::fs::copy(
        fixtures().join(format!("{fixture}.jsonl")),
        write(tmp.path(), &format!("data/{fixture}.jsonl"), ""),
    )
    .unwrap();
    let cfg = write(
        tmp.path(),
        "changelake.yaml",
        &format!(
            "storage: {{root: ./lake}}\nsystems:\n  src:\n    type: jsonl\n    format: debezium\n    path: data/{{object}}.jsonl\n{}{}",
            columns_yaml(&exp),
            table_yaml(fixture)
        ),
    );
    ok(cli(&["run", "--once"], &cfg));
    check_table(&tmp.path().join("lake/bronze/t"), &exp_path);
    let dead = dead_letters(&cfg);
    assert_eq!(dead.len() as u64, exp["dead_letters"].as_u64().unwrap(), "{dead:?}");
    assert!(dead.iter().all(|(reason, _)| reason == "type"), "{dead:?}");
}

#[test]
fn types_postgres_with_the_schema_wrapper_land_exactly() {
    file_source("postgres_wrapped_precise", "postgres_wrapped_precise");
}

#[test]
fn types_decimal_handling_modes_string_and_double_land_as_sent_or_as_declared() {
    file_source("postgres_wrapped_string", "postgres_wrapped_string");
    file_source("postgres_wrapped_string", "postgres_wrapped_string.declared");
    file_source("postgres_wrapped_double", "postgres_wrapped_double");
}

#[test]
fn types_sqlserver_and_mysql_with_the_schema_wrapper_land_exactly() {
    file_source("sqlserver_wrapped", "sqlserver_wrapped");
    file_source("mysql_wrapped", "mysql_wrapped");
}

#[test]
fn types_without_the_wrapper_columns_declare_decimals_dates_and_times() {
    file_source("mysql_unwrapped_precise", "mysql_unwrapped_precise");
    file_source("postgres_unwrapped_vsd", "postgres_unwrapped_vsd");
}

#[test]
fn types_toast_placeholders_keep_the_stored_value() {
    file_source("postgres_toast", "postgres_toast");
}

/// The same events through the broker, one batch per message, so every
/// event merges against the stored table (TOAST values come from the
/// table, the declared type of a column NULL so far wins in a later batch).
#[test]
fn types_through_the_broker_land_as_through_files() {
    let broker = Broker::start();
    let tmp = tempfile::tempdir().unwrap();
    for fixture in ["postgres_wrapped_precise", "postgres_toast", "sqlserver_wrapped"] {
        let topic = format!("types.{fixture}");
        broker.create_topic(&topic, 1);
        let lines = std::fs::read_to_string(fixtures().join(format!("{fixture}.jsonl"))).unwrap();
        let records: Vec<(i32, String, Option<String>)> =
            lines.lines().map(|l| (0, String::new(), Some(l.to_string()))).collect();
        broker.produce(&topic, &records);
        let dir = tmp.path().join(fixture);
        let cfg = write(
            &dir,
            "changelake.yaml",
            &format!(
                "storage: {{root: ./lake}}\nsystems:\n  src:\n    type: kafka\n    brokers: \"{}\"\n    group_id: types-{fixture}\n    topic: \"types.{{object}}\"\n    format: debezium\n    kafka: {{max.poll.interval.ms: \"10000\"}}\n{}",
                broker.brokers(),
                table_yaml(fixture).replace("max_rows: 100000", "max_rows: 1")
            ),
        );
        let out = stdout_of(cli(&["run", "--once"], &cfg));
        assert!(!out.contains("error"), "{out}");
        check_table(&dir.join("lake/bronze/t"), &expected(fixture).0);
    }
}
