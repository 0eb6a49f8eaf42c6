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

/// The dead letters of a lake: (topic, error) per row.
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
            (v["topic"].as_str().unwrap_or("").into(), v["error"].as_str().unwrap().into())
        })
        .collect()
}

/// Runs one fixture through the JSONL file source, one event per file (one
/// run each, as the broker test batches them: every event merges against
/// the stored table), and checks the table.
fn file_source(fixture: &str, expectation: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (exp_path, exp) = expected(expectation);
    let events = std::fs::read_to_string(fixtures().join(format!("{fixture}.jsonl"))).unwrap();
    for (i, line) in events.lines().enumerate() {
        write(tmp.path(), &format!("data/{fixture}/{i:03}.jsonl"), &format!("{line}\n"));
    }
    let cfg = write(
        tmp.path(),
        "changelake.yaml",
        &format!(
            "storage: {{root: ./lake}}\nsystems:\n  src:\n    type: jsonl\n    format: debezium\n    path: \"data/{{object}}/*.jsonl\"\n{}{}",
            columns_yaml(&exp),
            table_yaml(fixture)
        ),
    );
    ok(cli(&["run", "--once"], &cfg));
    check_table(&tmp.path().join("lake/bronze/t"), &exp_path);
    let dead = dead_letters(&cfg);
    assert_eq!(dead.len() as u64, exp["dead_letters"].as_u64().unwrap(), "{dead:?}");
    assert!(dead.iter().all(|(_, error)| error.starts_with("column `")), "{dead:?}");
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
/// An scd2 table on the same topic carries TOASTed values into each new
/// version.
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
                "storage: {{root: ./lake}}\nsystems:\n  src:\n    type: kafka\n    brokers: \"{}\"\n    group_id: types-{fixture}\n    topic: \"types.{{object}}\"\n    format: debezium\n{}",
                broker.brokers(),
                table_yaml(fixture).replace("max_rows: 100000", "max_rows: 1").replace(
                    "batching:",
                    &format!("    h:\n      source: {{system: src, object: {fixture}}}\n      business_key: [id]\n      strategy: scd2\nbatching:")
                )
            ),
        );
        let out = stdout_of(cli(&["run", "--once"], &cfg));
        assert!(!out.contains("error"), "{out}");
        let (exp_path, exp) = expected(fixture);
        check_table(&dir.join("lake/bronze/t"), &exp_path);
        if fixture == "postgres_toast" {
            toast_versions(&cfg, &exp);
        }
    }
}

/// scd2 under TOAST: every version of key 1 keeps the photo its first
/// event sent (later events carry the placeholder), no version holds the
/// placeholder, and key 2 (no stored row) has a NULL bio.
fn toast_versions(cfg: &Path, exp: &serde_json::Value) {
    let shown = stdout_of(cli(&["show", "h", "--view", "all", "--format", "jsonl"], cfg));
    assert!(!shown.contains("__debezium_unavailable_value"), "{shown}");
    assert!(!shown.contains("X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ"), "{shown}");
    let rows: Vec<serde_json::Value> =
        shown.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let photo = exp["rows"][0]["photo"].clone();
    let key1: Vec<_> = rows.iter().filter(|r| r["id"] == 1).collect();
    assert!(key1.len() >= 2, "{shown}");
    assert!(key1.iter().all(|r| r["photo"] == photo), "{shown}");
    let open = key1.iter().find(|r| r["_is_current"] == true).unwrap();
    assert_eq!(open["bio"], exp["rows"][0]["bio"], "{shown}");
    let key2: Vec<_> = rows.iter().filter(|r| r["id"] == 2).collect();
    assert!(key2.len() == 1 && key2[0]["bio"].is_null(), "{shown}");
}

/// A PostgreSQL-shaped event with the schema wrapper: key `id`, a Kafka
/// Connect decimal `amount` of the given precision and scale.
fn decimal_event(id: i64, amount_b64: &str, precision: u32, scale: u32) -> String {
    let row = format!(
        r#"{{"type":"struct","optional":true,"name":"pg.public.t.Value","field":"after","fields":[{{"type":"int32","optional":false,"field":"id"}},{{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{{"scale":"{scale}","connect.decimal.precision":"{precision}"}},"field":"amount"}}]}}"#
    );
    format!(
        r#"{{"schema":{{"type":"struct","optional":false,"name":"pg.public.t.Envelope","fields":[{row},{{"type":"string","optional":false,"field":"op"}}]}},"payload":{{"before":null,"after":{{"id":{id},"amount":"{amount_b64}"}},"op":"u"}}}}"#
    )
}

#[test]
fn types_a_decimal_whose_precision_grows_widens_the_column_for_every_reader() {
    let tmp = tempfile::tempdir().unwrap();
    // 123.45 as decimal(10,2); then 1234567890123456.78 as decimal(20,2);
    // then 1.234 as decimal(10,3): a scale change, a dead letter.
    write(tmp.path(), "data/t/1.jsonl", &(decimal_event(1, "MDk=", 10, 2) + "\n"));
    write(tmp.path(), "data/t/2.jsonl", &(decimal_event(2, "AbabS6Yw804=", 20, 2) + "\n"));
    write(tmp.path(), "data/t/3.jsonl", &(decimal_event(3, "BNI=", 10, 3) + "\n"));
    let cfg = write(
        tmp.path(),
        "changelake.yaml",
        &format!(
            "storage: {{root: ./lake}}\nsystems:\n  src:\n    type: jsonl\n    format: debezium\n    path: \"data/{{object}}/*.jsonl\"\n{}",
            table_yaml("t")
        ),
    );
    ok(cli(&["run", "--once"], &cfg));
    let exp = serde_json::json!({
        "key": "id",
        "types": {"id": "int64", "amount": "decimal128(20, 2)"},
        "rows": [{"id": 1, "amount": "123.45"}, {"id": 2, "amount": "1234567890123456.78"}],
    });
    let exp_path = write(tmp.path(), "expected.json", &exp.to_string());
    check_table(&tmp.path().join("lake/bronze/t"), &exp_path);
    let dead = dead_letters(&cfg);
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        dead[0].1.contains("declared decimal(10,3), but the table stores it as decimal(20,2)"),
        "{dead:?}"
    );
    // Every data file holds the wider type (no reader meets two types).
    let shown = stdout_of(cli(&["show", "t", "--format", "jsonl"], &cfg));
    assert!(shown.contains(r#""amount":"1234567890123456.78""#), "{shown}");
    assert!(shown.contains(r#""amount":"123.45""#), "{shown}");
}

/// Decimal and date business keys from a CSV extract with declared types:
/// `1.5` and `1.50` are one key, and a re-run changes nothing.
#[test]
fn types_decimal_and_date_business_keys_match_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "data/t/1.csv", "code,day,name\n1.5,1969-07-20,a\n2,2024-02-29,b\n");
    write(tmp.path(), "data/t/2.csv", "code,day,name\n1.50,1969-07-20,a2\n");
    let cfg = write(
        tmp.path(),
        "changelake.yaml",
        "storage: {root: ./lake}\nsystems:\n  src:\n    type: csv\n    path: \"data/{object}/*.csv\"\n    columns: {code: \"decimal(10,2)\", day: date}\nbronze:\n  tables:\n    t:\n      source: {system: src, object: t}\n      business_key: [code, day]\n      strategy: scd2\n      merge: {surrogate_key: true}\n",
    );
    ok(cli(&["run", "--once"], &cfg));
    let rows = stdout_of(cli(&["show", "t", "--format", "jsonl", "--view", "all"], &cfg));
    let rows: Vec<serde_json::Value> =
        rows.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    let versions: Vec<_> = rows.iter().filter(|r| r["code"] == "1.50").collect();
    assert_eq!(versions.len(), 2, "one key, two versions: {rows:?}");
    assert!(rows.iter().all(|r| r["day"] == "1969-07-20" || r["day"] == "2024-02-29"), "{rows:?}");
    let py = "import sys; from deltalake import DeltaTable; import polars as pl, os\nt = DeltaTable(sys.argv[1]).to_pyarrow_table()\nprint(t.schema.field('code').type, t.schema.field('day').type, pl.read_delta(sys.argv[1]).schema['code'])\nsys.stdout.flush(); os._exit(0)";
    let out = Command::new("python3")
        .args(["-c", py])
        .arg(tmp.path().join("lake/bronze/t"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("decimal128(10, 2) date32[day] Decimal(precision=10, scale=2)"),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Delta type of each column, read by an independent reader.
fn delta_types(table: &Path) -> String {
    let py = "import sys, os; from deltalake import DeltaTable; print(sorted((f.name, str(f.type.type)) for f in DeltaTable(sys.argv[1]).schema().fields)); sys.stdout.flush(); os._exit(0)";
    let out = Command::new("python3").args(["-c", py]).arg(table).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A wrapped Debezium create of `id` with one more field `v` of `schema`.
fn wrapped(id: i64, schema: &str, v: &str) -> String {
    format!(
        r#"{{"schema":{{"type":"struct","fields":[{{"type":"struct","field":"after","optional":true,"fields":[{{"type":"int64","field":"id"}},{schema}]}},{{"type":"string","field":"op"}}]}},"payload":{{"after":{{"id":{id},"v":{v}}},"op":"c"}}}}"#
    )
}

/// docs/types.md and docs/schema.md, found by a black-box hunt: flat JSON
/// infers timestamps from their text as CSV does (so a `sequence_by` of
/// ISO times orders by instant, offsets included); a timestamp or date
/// beyond the years 1-9999 a Delta column holds is a dead letter (it was
/// stored as the milliseconds taken for microseconds, or written where
/// readers fail on it); and a decimal wider than 38 digits, which no Delta
/// decimal holds, lands as its exact text where `columns:` declares the
/// column `string` (it was NULL, or JSON text).
#[test]
fn types_flat_json_times_times_beyond_delta_and_wide_decimals_declared_text() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "storage: {root: ./lake}\nsystems:\n  flat: {type: jsonl, path: 'flat/*.jsonl'}\n  dbz: {type: jsonl, format: debezium, path: 'dbz/{object}/*.jsonl'}\n  text: {type: jsonl, format: debezium, path: 'dbz/{object}/*.jsonl', columns: {v: string}}\nbronze:\n  tables:\n    flat:\n      source: {system: flat, object: flat}\n      business_key: [id]\n      strategy: scd1\n      merge: {sequence_by: [upd]}\n    times:\n      source: {system: dbz, object: times}\n      business_key: [id]\n      strategy: scd1\n    dates:\n      source: {system: dbz, object: dates}\n      business_key: [id]\n      strategy: scd1\n    wide:\n      source: {system: text, object: wide}\n      business_key: [id]\n      strategy: scd1\n",
    );
    write(
        tmp.path(),
        "flat/1.jsonl",
        "{\"id\":1,\"upd\":\"2024-01-01T06:00:00Z\",\"v\":\"newer\"}\n",
    );
    // 10:00+05:00 is 05:00Z: older than the stored 06:00Z, as text it sorts after.
    write(
        tmp.path(),
        "flat/2.jsonl",
        "{\"id\":1,\"upd\":\"2024-01-01T10:00:00+05:00\",\"v\":\"older\"}\n",
    );
    let ts =
        |name: &str| format!(r#"{{"type":"int64","field":"v","optional":true,"name":"{name}"}}"#);
    let date = r#"{"type":"int32","field":"v","optional":true,"name":"io.debezium.time.Date"}"#;
    let times = [
        wrapped(1, &ts("io.debezium.time.Timestamp"), "9223372036854776"),
        wrapped(2, &ts("io.debezium.time.Timestamp"), "9223372036854775807"),
        wrapped(3, &ts("io.debezium.time.MicroTimestamp"), "-9223372036854775808"),
        wrapped(5, &ts("io.debezium.time.Timestamp"), "1700000000123"),
    ];
    write(tmp.path(), "dbz/times/1.jsonl", &(times.join("\n") + "\n"));
    let dates = [wrapped(1, date, "-2147483648"), wrapped(2, date, "19000")];
    write(tmp.path(), "dbz/dates/1.jsonl", &(dates.join("\n") + "\n"));
    let decimal = r#"{"type":"bytes","field":"v","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2","connect.decimal.precision":"40"}}"#;
    let vsd = r#"{"type":"struct","field":"v","optional":true,"name":"io.debezium.data.VariableScaleDecimal","fields":[{"type":"int32","field":"scale"},{"type":"bytes","field":"value"}]}"#;
    let wide = [
        wrapped(1, decimal, r#""BQ==""#),
        wrapped(2, vsd, r#"{"scale":2,"value":"u5PE6gZtmXgtO/rLAkqb////////"}"#),
    ];
    write(tmp.path(), "dbz/wide/1.jsonl", &(wide.join("\n") + "\n"));
    ok(cli(&["run", "--once"], &cfg));
    let lake = tmp.path().join("lake/bronze");
    let show = |t: &str| stdout_of(cli(&["show", t, "--format", "jsonl"], &cfg));
    assert!(
        delta_types(&lake.join("flat")).contains("('upd', 'timestamp')"),
        "{}",
        delta_types(&lake.join("flat"))
    );
    assert!(show("flat").contains("\"v\":\"newer\""), "{}", show("flat"));
    let times = show("times");
    assert_eq!(times.lines().count(), 1, "{times}");
    assert!(times.contains("2023-11-14T22:13:20.123Z"), "{times}");
    assert!(show("dates").contains("2022-01-08"), "{}", show("dates"));
    let dead = dead_letters(&cfg);
    let beyond = dead.iter().filter(|(_, e)| e.contains("outside the years 1-9999")).count();
    assert_eq!(beyond, 4, "{dead:?}");
    let wide = show("wide");
    assert!(wide.contains("\"v\":\"0.05\""), "{wide}");
    assert!(
        wide.contains("\"v\":\"-1000000000000000000000000000000000000000000000000.01\""),
        "{wide}"
    );
    assert_eq!(dead.len(), 4, "{dead:?}");
}

/// The rows of a table as an independent reader sees them, sorted, one
/// JSON object per line with decimals as their exact text.
fn read_rows(table: &Path, sort: &str) -> String {
    let py = "import sys, os, json; from deltalake import DeltaTable\nrows = DeltaTable(sys.argv[1]).to_pyarrow_table().to_pylist()\nfor r in sorted(rows, key=lambda r: r[sys.argv[2]]): print(json.dumps({k: v if isinstance(v, (int, float, type(None))) else str(v) for k, v in r.items() if not k.startswith('_')}, sort_keys=True))\nsys.stdout.flush(); os._exit(0)";
    let out = Command::new("python3").args(["-c", py]).arg(table).arg(sort).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// docs/types.md, "JSON numbers": a JSON number keeps every digit it was
/// sent with where a decimal or text column takes it (flat JSON with
/// `columns:`, and Kafka Connect decimals written as numbers,
/// `decimal.format=NUMERIC`). Read through a double, 12345678901234567.89
/// was stored as 12345678901234568.00, and two such keys were one.
#[test]
fn types_json_numbers_land_exactly_in_decimal_and_text_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "storage: {root: ./lake}\nsystems:\n  flat: {type: jsonl, path: 'flat/{object}/*.jsonl', columns: {amount: 'decimal(20,2)', big: 'decimal(38,0)', note: string, code: 'decimal(20,2)'}}\n  dbz: {type: jsonl, format: debezium, path: 'dbz/*.jsonl'}\nbronze:\n  tables:\n    money:\n      source: {system: flat, object: money}\n      business_key: [id]\n      strategy: scd1\n    codes:\n      source: {system: flat, object: codes}\n      business_key: [code]\n      strategy: scd1\n    numeric:\n      source: {system: dbz, object: numeric}\n      business_key: [id]\n      strategy: scd1\n",
    );
    write(
        tmp.path(),
        "flat/money/1.jsonl",
        "{\"id\":1,\"amount\":12345678901234567.89,\"big\":99999999999999999999999,\"note\":0.30000000000000004,\"ratio\":0.30000000000000004}\n{\"id\":2,\"amount\":1.5,\"big\":-7,\"note\":12345678901234567890,\"ratio\":2}\n{\"id\":3,\"amount\":1.005,\"big\":1}\n",
    );
    write(
        tmp.path(),
        "flat/codes/1.jsonl",
        "{\"code\":12345678901234567.89,\"v\":\"a\"}\n{\"code\":12345678901234567.8,\"v\":\"b\"}\n{\"code\":1.5,\"v\":\"c\"}\n",
    );
    // Tabs and a CRLF line end are JSON whitespace: the same key.
    write(tmp.path(), "flat/codes/2.jsonl", "{\"code\":\t12345678901234567.89,\t\"v\":\"a2\"}\r\n");
    let numeric = r#"{"type":"bytes","field":"v","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2","connect.decimal.precision":"20"}}"#;
    // The third as another tool writes it: spaces between the wrapper's tokens.
    let spaced = wrapped(3, numeric, "98765432109876543.21")
        .replace("{\"schema\":", "{\"schema\": ")
        .replace(",\"payload\":", ", \"payload\": ");
    let events = [wrapped(1, numeric, "12345678901234567.89"), wrapped(2, numeric, "-0.5"), spaced];
    write(tmp.path(), "dbz/1.jsonl", &(events.join("\n") + "\n"));
    ok(cli(&["run", "--once"], &cfg));
    let lake = tmp.path().join("lake/bronze");
    let money = read_rows(&lake.join("money"), "id");
    let expected = [
        r#"{"amount": "12345678901234567.89", "big": "99999999999999999999999", "id": 1, "note": "0.30000000000000004", "ratio": 0.30000000000000004}"#,
        r#"{"amount": "1.50", "big": "-7", "id": 2, "note": "12345678901234567890", "ratio": 2.0}"#,
    ];
    assert_eq!(money.lines().take(2).collect::<Vec<_>>(), expected, "{money}");
    // 1.005 does not fit two decimal places: a dead letter, not a rounding.
    assert_eq!(money.lines().count(), 2, "{money}");
    let dead = dead_letters(&cfg);
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].1.contains("amount"), "{dead:?}");
    assert!(delta_types(&lake.join("money")).contains("('ratio', 'double')"));
    let codes = read_rows(&lake.join("codes"), "v");
    let codes: Vec<&str> = codes.lines().collect();
    assert_eq!(
        codes,
        [
            r#"{"code": "12345678901234567.89", "v": "a2"}"#,
            r#"{"code": "12345678901234567.80", "v": "b"}"#,
            r#"{"code": "1.50", "v": "c"}"#
        ],
        "three keys"
    );
    let numeric = read_rows(&lake.join("numeric"), "id");
    assert_eq!(
        numeric.lines().collect::<Vec<_>>(),
        [
            r#"{"id": 1, "v": "12345678901234567.89"}"#,
            r#"{"id": 2, "v": "-0.50"}"#,
            r#"{"id": 3, "v": "98765432109876543.21"}"#
        ],
        "{numeric}"
    );
    assert!(delta_types(&lake.join("numeric")).contains("('v', 'decimal(20,2)')"));
}

/// docs/types.md, doubles: Kafka Connect's JSON converter (Jackson) writes
/// a double that is not a number (PostgreSQL `NaN`, `Infinity`) as the
/// strings `"NaN"`, `"Infinity"`, `"-Infinity"`; a double column stores
/// them as those doubles (they were dead letters), and its files carry no
/// bounds a reader could skip them by. In a column with no type yet such
/// text stays text.
#[test]
fn types_doubles_that_are_not_numbers_land_as_doubles() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "storage: {root: ./lake}\nsystems:\n  dbz: {type: jsonl, format: debezium, path: 'dbz/*.jsonl'}\n  csv: {type: csv, path: 'csv/*.csv', columns: {f: float}}\nbronze:\n  tables:\n    wrapped:\n      source: {system: dbz, object: wrapped}\n      business_key: [id]\n      strategy: scd1\n    extract:\n      source: {system: csv, object: extract}\n      business_key: [id]\n      strategy: scd1\n",
    );
    let double = r#"{"type":"float64","field":"v","optional":true}"#;
    let events: Vec<String> = ["\"NaN\"", "\"Infinity\"", "\"-Infinity\"", "2.5"]
        .iter()
        .enumerate()
        .map(|(i, v)| wrapped(i as i64 + 1, double, v))
        .collect();
    write(tmp.path(), "dbz/1.jsonl", &(events.join("\n") + "\n"));
    write(tmp.path(), "csv/1.csv", "id,f,note\n1,NaN,NaN\n2,-inf,x\n3,1.5,y\n");
    ok(cli(&["run", "--once"], &cfg));
    assert!(dead_letters(&cfg).is_empty(), "{:?}", dead_letters(&cfg));
    let lake = tmp.path().join("lake/bronze");
    let wrapped = read_rows(&lake.join("wrapped"), "id");
    assert_eq!(
        wrapped.lines().collect::<Vec<_>>(),
        [
            r#"{"id": 1, "v": NaN}"#,
            r#"{"id": 2, "v": Infinity}"#,
            r#"{"id": 3, "v": -Infinity}"#,
            r#"{"id": 4, "v": 2.5}"#
        ]
    );
    let extract = read_rows(&lake.join("extract"), "id");
    assert_eq!(
        extract.lines().collect::<Vec<_>>(),
        [
            r#"{"f": NaN, "id": 1, "note": "NaN"}"#,
            r#"{"f": -Infinity, "id": 2, "note": "x"}"#,
            r#"{"f": 1.5, "id": 3, "note": "y"}"#
        ]
    );
    assert!(delta_types(&lake.join("extract")).contains("('note', 'string')"));
}

/// A bare Debezium event (no schema wrapper) of `id` with `after` fields.
fn bare(op: &str, lsn: i64, after: &str) -> String {
    format!(r#"{{"before":null,"after":{after},"op":"{op}","source":{{"lsn":{lsn}}}}}"#)
}

/// docs/types.md (unchanged values): the TOAST placeholder is no value, so
/// a column it alone has filled so far has no type yet and takes the type
/// of its first real values. It made the column text for good: 9 and 10
/// were stored as '9' and '10', and compared as text.
#[test]
fn types_a_toast_placeholder_does_not_type_a_column() {
    let tmp = tempfile::tempdir().unwrap();
    let p = "\"__debezium_unavailable_value\"";
    for (i, events) in [
        vec![bare("c", 1, &format!(r#"{{"id":1,"n":{p}}}"#)), bare("c", 1, r#"{"id":2,"n":null}"#)],
        vec![bare("u", 2, r#"{"id":1,"n":9}"#), bare("u", 2, r#"{"id":2,"n":10}"#)],
    ]
    .iter()
    .enumerate()
    {
        write(tmp.path(), &format!("data/{i}.jsonl"), &(events.join("\n") + "\n"));
    }
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "storage: {root: ./lake}\nsystems:\n  dbz: {type: jsonl, format: debezium, path: 'data/*.jsonl'}\nbronze:\n  tables:\n    t:\n      source: {system: dbz, object: t}\n      business_key: [id]\n      strategy: scd1\n      merge: {sequence_by: [source.lsn]}\n",
    );
    ok(cli(&["run", "--once"], &cfg));
    let lake = tmp.path().join("lake/bronze/t");
    assert!(delta_types(&lake).contains("('n', 'long')"), "{}", delta_types(&lake));
    let rows = read_rows(&lake, "id");
    assert!(rows.contains(r#""id": 1, "n": 9"#) && rows.contains(r#""id": 2, "n": 10"#), "{rows}");
}

/// docs/types.md (unchanged values), scd2: a row that leaves a value
/// unchanged takes it from the version valid at its sequence. A late row
/// took the open version's value (a state that never existed, and a
/// spurious version where the late row was a no-op), and a key coming back
/// after a soft delete got NULL; both layouts.
#[test]
fn types_toast_placeholders_in_scd2_late_rows_and_returning_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let p = "\"__debezium_unavailable_value\"";
    let runs = [
        vec![
            bare("c", 10, r#"{"id":1,"name":"a","bio":"B1","status":"on"}"#),
            bare("c", 10, r#"{"id":2,"name":"a","bio":"B1","status":"on"}"#),
            bare("c", 10, r#"{"id":3,"name":"a","bio":"L","status":"on"}"#),
        ],
        vec![
            bare("u", 20, r#"{"id":1,"name":"b","bio":"B2","status":"on"}"#),
            bare("u", 20, r#"{"id":2,"name":"b","bio":"B2","status":"on"}"#),
            bare("u", 20, &format!(r#"{{"id":3,"name":"a","bio":{p},"status":"off"}}"#)),
        ],
        vec![
            bare("u", 15, &format!(r#"{{"id":1,"name":"late","bio":{p},"status":"on"}}"#)),
            bare("u", 15, &format!(r#"{{"id":2,"name":"a","bio":{p},"status":"on"}}"#)),
            bare("u", 30, &format!(r#"{{"id":3,"name":"a","bio":{p},"status":"on"}}"#)),
        ],
    ];
    for (i, events) in runs.iter().enumerate() {
        write(tmp.path(), &format!("data/{i}.jsonl"), &(events.join("\n") + "\n"));
    }
    let table = |name: &str, dv: bool| {
        format!("    {name}:\n      source: {{system: dbz, object: t}}\n      business_key: [id]\n      strategy: scd2\n      merge: {{sequence_by: [source.lsn], delete_when: \"status = 'off'\"}}\n      layout: {{deletion_vectors: {dv}}}\n")
    };
    let cfg = write(
        tmp.path(),
        "c.yaml",
        &format!(
            "storage: {{root: ./lake}}\nsystems:\n  dbz: {{type: jsonl, format: debezium, path: 'data/*.jsonl'}}\nbronze:\n  tables:\n{}{}",
            table("cow", false),
            table("dv", true)
        ),
    );
    ok(cli(&["run", "--once"], &cfg));
    for name in ["cow", "dv"] {
        let py = "import sys, os, polars as pl\nt = pl.read_delta(sys.argv[1]).sort(['id', 'source_lsn'])\nfor r in t.select(['id', 'name', 'bio', 'source_lsn', '_is_current', '_is_deleted']).iter_rows(): print(r)\nsys.stdout.flush(); os._exit(0)";
        let out = Command::new("python3")
            .args(["-c", py])
            .arg(tmp.path().join("lake/bronze").join(name))
            .output()
            .unwrap();
        let rows = String::from_utf8_lossy(&out.stdout);
        let expected = [
            "(1, 'a', 'B1', 10, False, False)",
            "(1, 'late', 'B1', 15, False, False)",
            "(1, 'b', 'B2', 20, True, False)",
            // Key 2's late row equals the version valid at its sequence: no-op.
            "(2, 'a', 'B1', 10, False, False)",
            "(2, 'b', 'B2', 20, True, False)",
            // Key 3 deleted at 20, back at 30 with the deleted version's bio.
            "(3, 'a', 'L', 10, False, True)",
            "(3, 'a', 'L', 30, True, False)",
        ];
        assert_eq!(
            rows.lines().collect::<Vec<_>>(),
            expected,
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
