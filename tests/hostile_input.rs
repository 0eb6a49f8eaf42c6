//! Odd and hostile input through the file sources (docs/bad-input.md,
//! docs/schema.md): nothing stops a run or corrupts a table; each bad row is
//! one dead letter with its reason, every good row lands.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{cli, stdout_of, write};

fn rows(cfg: &Path, table: &str, view: &str) -> Vec<serde_json::Value> {
    let out = stdout_of(cli(&["show", table, "--format", "jsonl", "--view", view], cfg));
    out.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The error text of every dead letter.
fn dead_letters(cfg: &Path) -> Vec<String> {
    let out = cli(&["show", "_dead_letters", "--format", "jsonl"], cfg);
    if !out.status.success() {
        return vec![]; // no dead-letter table yet
    }
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["error"].as_str().unwrap().to_string()
        })
        .collect()
}

/// The Delta type of a column, read by an independent reader.
fn delta_type(table: &Path, column: &str) -> String {
    let py = "import sys, os; from deltalake import DeltaTable; f = [f for f in DeltaTable(sys.argv[1]).schema().fields if f.name == sys.argv[2]]; print(f[0].type.type if f else 'absent'); sys.stdout.flush(); os._exit(0)";
    let out = Command::new("python3").args(["-c", py]).arg(table).arg(column).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// docs/schema.md, no type yet: a run whose `seq` is empty everywhere must
/// not make `seq` text, or `4` would later beat `11`.
#[test]
fn schema_a_column_null_in_the_first_run_takes_the_type_of_its_first_values() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems: {crm: {type: csv, path: 'data/*.csv'}}\nbronze:\n  tables:\n    account:\n      source: {system: crm, object: account}\n      business_key: [id]\n      strategy: scd2\n      merge: {sequence_by: [seq]}\n",
    );
    write(tmp.path(), "data/1.csv", "id,name,seq,note\n1,a,,\n2,b,,\n");
    stdout_of(cli(&["run", "--once"], &cfg));
    let table = tmp.path().join("lake/bronze/account");
    // Readers see the column, NULL, typed `string` for now; no file holds it.
    assert_eq!(delta_type(&table, "seq"), "string");
    assert!(rows(&cfg, "account", "all").iter().all(|r| r["seq"].is_null()));
    write(tmp.path(), "data/2.csv", "id,name,seq,note\n1,x,11,\n");
    write(tmp.path(), "data/3.csv", "id,name,seq,note\n1,y,4,\n");
    stdout_of(cli(&["run", "--once"], &cfg));
    assert_eq!(delta_type(&table, "seq"), "long");
    assert_eq!(delta_type(&table, "note"), "string");
    // An independent reader reads every file under the new schema.
    let py = "import sys, os; from deltalake import DeltaTable; t = DeltaTable(sys.argv[1]).to_pyarrow_table(); print(sorted(zip(t['id'].to_pylist(), [s if s is not None else -1 for s in t['seq'].to_pylist()]))); sys.stdout.flush(); os._exit(0)";
    let out = Command::new("python3").args(["-c", py]).arg(&table).output().unwrap();
    let read = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        read.trim(),
        "[(1, -1), (1, 4), (1, 11), (2, -1)]",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let active = rows(&cfg, "account", "active");
    let one: Vec<_> = active.iter().filter(|r| r["id"] == 1).collect();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["name"], "x", "seq 11 is newer than seq 4: {active:?}");
    // The first version (seq NULL) was closed by seq 11; seq 4 is a late, closed version.
    let all = rows(&cfg, "account", "all");
    let names: Vec<&str> =
        all.iter().filter(|r| r["id"] == 1).map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 3, "{all:?}");
    assert!(names.contains(&"a") && names.contains(&"y"), "{names:?}");
}

/// docs/batch.md, NULL keys: a composite key with some NULL parts is a
/// key. A new table whose first batch has no value in one key column (NULL
/// or not sent) is created from the other parts, with that column untyped
/// until its first values; later files lacking it read it as NULL, also
/// when the key index is rebuilt from them. Only rows whose every key part
/// is NULL are dropped.
#[test]
fn null_keys_a_composite_key_with_a_part_null_in_a_new_table_is_a_key() {
    let tmp = tempfile::tempdir().unwrap();
    let table = |name: &str, strategy: &str, layout: &str| {
        format!("    {name}:\n      source: {{system: src, object: t}}\n      business_key: [a, b]\n      strategy: {strategy}\n      merge: {{sequence_by: [seq]}}\n      layout: {{{layout}}}\n")
    };
    let cfg = write(
        tmp.path(),
        "c.yaml",
        &format!(
            "systems: {{src: {{type: jsonl, path: 'data/*.jsonl'}}}}\nbronze:\n  tables:\n{}{}{}",
            table("cow", "scd1", ""),
            table("dv", "scd1", "deletion_vectors: true"),
            table("hist", "scd2", "deletion_vectors: true"),
        ),
    );
    write(
        tmp.path(),
        "data/1.jsonl",
        "{\"a\":1,\"seq\":1,\"v\":\"p\"}\n{\"a\":2,\"b\":null,\"seq\":1,\"v\":\"q\"}\n{\"seq\":1,\"v\":\"no key\"}\n",
    );
    let out = stdout_of(cli(&["run", "--once"], &cfg));
    let lake = tmp.path().join("lake/bronze");
    assert_eq!(delta_type(&lake.join("cow"), "b"), "string", "untyped for now: {out}");
    write(
        tmp.path(),
        "data/2.jsonl",
        "{\"a\":1,\"seq\":2,\"v\":\"p2\"}\n{\"a\":3,\"b\":7,\"seq\":1,\"v\":\"x\"}\n",
    );
    stdout_of(cli(&["run", "--once"], &cfg));
    // Rebuilt from the data files: those written before `b` had a type lack it.
    for t in ["cow", "dv", "hist"] {
        std::fs::remove_dir_all(lake.join(t).join("_changelake")).unwrap();
    }
    write(
        tmp.path(),
        "data/3.jsonl",
        "{\"a\":2,\"seq\":2,\"v\":\"q2\"}\n{\"a\":3,\"b\":7,\"seq\":2,\"v\":\"x2\"}\n{\"a\":1,\"seq\":1,\"v\":\"late\"}\n",
    );
    stdout_of(cli(&["run", "--once"], &cfg));
    let read = |t: &str| {
        let drop = ["_execution_id", "_is_deleted", "_valid_from", "_valid_to", "_sk"];
        common::stores::read_rows(lake.join(t).to_str().unwrap(), "{}", None, &drop)
    };
    let current = [
        r#"{"a": 1, "b": null, "seq": 2, "v": "p2"}"#,
        r#"{"a": 2, "b": null, "seq": 2, "v": "q2"}"#,
        r#"{"a": 3, "b": 7, "seq": 2, "v": "x2"}"#,
    ];
    assert_eq!(delta_type(&lake.join("cow"), "b"), "long");
    assert_eq!(read("cow"), current);
    assert_eq!(read("dv"), current);
    let active: Vec<String> = rows(&cfg, "hist", "active")
        .iter()
        .map(|r| format!("{} {} {}", r["a"], r["b"], r["v"]))
        .collect();
    assert_eq!(active, ["1 null \"p2\"", "2 null \"q2\"", "3 7 \"x2\""]);
    // Every version, the late row's a closed one beside key 1's first.
    let history: Vec<String> = read("hist")
        .iter()
        .filter(|r| r.contains(r#""_is_current": false"#))
        .map(|r| r.replace(r#""_is_current": false, "#, ""))
        .collect();
    let closed = [
        r#"{"a": 1, "b": null, "seq": 1, "v": "late"}"#,
        r#"{"a": 1, "b": null, "seq": 1, "v": "p"}"#,
        r#"{"a": 2, "b": null, "seq": 1, "v": "q"}"#,
        r#"{"a": 3, "b": 7, "seq": 1, "v": "x"}"#,
    ];
    assert_eq!(history, closed);
}

/// docs/bad-input.md: a message cannot stop the daemon by its field names
/// or its schema. A field named as a column is but for case (Delta column
/// names ignore case), one named as a column changelake writes, and a
/// schema declaring the key float (as the first message of a new table)
/// each make their message a dead letter; every other row lands. These
/// panicked (a Delta schema with two `name` columns) or stopped every run
/// with a config error.
#[test]
fn bad_input_clashing_field_names_and_a_declared_float_key_are_dead_letters() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems:\n  flat: {type: jsonl, path: 'flat/*.jsonl'}\n  csv: {type: csv, path: 'csv/*.csv'}\n  dbz: {type: jsonl, format: debezium, path: 'dbz/*.jsonl'}\nbronze:\n  tables:\n    account:\n      source: {system: flat, object: account}\n      business_key: [id]\n      strategy: scd2\n      merge: {sequence_by: [lsn]}\n    contact:\n      source: {system: csv, object: contact}\n      business_key: [id]\n      strategy: scd1\n    lead:\n      source: {system: dbz, object: lead}\n      business_key: [id]\n      strategy: scd1\n",
    );
    write(
        tmp.path(),
        "flat/1.jsonl",
        r#"{"id":1,"name":"a","lsn":1}
{"id":2,"name":"x","NAME":"y","lsn":2}
{"id":3,"name":"z","_is_current":true,"lsn":3}
{"id":4,"name":"w","_valid_to":null,"lsn":4}
{"id":5,"_Is_Deleted":false,"lsn":5}
"#,
    );
    write(tmp.path(), "csv/1.csv", "id,name,Name\n1,a,\n2,b,B\n");
    let wrapped = |id_type: &str, id: &str, v: &str| {
        format!(
            r#"{{"schema":{{"type":"struct","fields":[{{"type":"struct","field":"after","optional":true,"fields":[{{"type":"{id_type}","field":"id"}},{{"type":"string","field":"v","optional":true}}]}},{{"type":"string","field":"op"}}]}},"payload":{{"after":{{"id":{id},"v":"{v}"}},"op":"c"}}}}"#
        )
    };
    let dbz = [wrapped("double", "2.0", "float key"), wrapped("int32", "1", "good")];
    write(tmp.path(), "dbz/1.jsonl", &(dbz.join("\n") + "\n"));
    let out = cli(&["run", "--once"], &cfg);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let names = |table: &str, column: &str| -> Vec<String> {
        rows(&cfg, table, "all").iter().map(|r| format!("{}={}", r["id"], r[column])).collect()
    };
    // `_valid_to` sent NULL is no value: nothing clashes, the row lands.
    assert_eq!(names("account", "name"), ["1=\"a\"", "4=\"w\""]);
    assert_eq!(names("contact", "name"), ["1=\"a\""]);
    assert_eq!(names("lead", "v"), ["1=\"good\""]);
    let dead = dead_letters(&cfg);
    let expect = [
        "column `NAME` differs from column `name` only in case",
        "column `_is_current` is a column changelake writes itself",
        "column `_Is_Deleted` differs from column `_is_deleted` only in case",
        "column `Name` differs from column `name` only in case",
        "declared float",
    ];
    for e in expect {
        assert!(dead.iter().any(|d| d.contains(e)), "no dead letter says {e}: {dead:?}");
    }
    assert_eq!(dead.len(), 5, "{dead:?}");
}

/// The raw bytes of every dead letter (`raw_base64`), with its error.
fn dead_letter_bytes(cfg: &Path) -> Vec<(Vec<u8>, String)> {
    use base64::Engine;
    let out = stdout_of(cli(&["show", "_dead_letters", "--format", "jsonl"], cfg));
    out.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let raw = base64::engine::general_purpose::STANDARD
                .decode(v["raw_base64"].as_str().unwrap())
                .unwrap();
            (raw, v["error"].as_str().unwrap().to_string())
        })
        .collect()
}

/// docs/bad-input.md: a file line or record is refused as a Kafka message
/// would be (not UTF-8, NUL raw or escaped, a field given twice, a field
/// count other than the header's), as a dead letter holding its bytes
/// exactly. A CSV file whose header cannot name its columns makes each of
/// its records a dead letter, and the files after it still load; an empty
/// file is nothing to apply. Before, such JSON lines landed (the bytes made
/// UTF-8 with replacement characters, the NUL kept, the last field of a
/// name winning), CSV dead letters held the fields re-joined or nothing,
/// and a bad header stopped every run.
#[test]
fn bad_input_file_lines_and_records_are_refused_as_messages_are_and_keep_their_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems:\n  flat: {type: jsonl, path: 'flat/*.jsonl'}\n  csv: {type: csv, path: 'csv/{object}_*.csv'}\nbronze:\n  tables:\n    account:\n      source: {system: flat, object: account}\n      business_key: [id]\n      strategy: scd1\n    contact:\n      source: {system: csv, object: contact}\n      business_key: [id]\n      strategy: scd1\n",
    );
    let flat: &[&[u8]] = &[
        b"{\"id\":1,\"name\":\"\xff\xfe\"}",
        br#"{"id":2,"name":"a\u0000b"}"#,
        br#"{"id":3,"name":"x","id":4}"#,
        br#"{"id":5,"name":"ok"}"#,
    ];
    std::fs::create_dir_all(tmp.path().join("flat")).unwrap();
    std::fs::write(tmp.path().join("flat/1.jsonl"), flat.join(&b'\n')).unwrap();
    std::fs::create_dir_all(tmp.path().join("csv")).unwrap();
    let csv = |name: &str, bytes: &[u8]| std::fs::write(tmp.path().join("csv").join(name), bytes);
    csv("contact_0.csv", b"").unwrap();
    csv("contact_1.csv", b"id,name,seq\n1,\"q\"\n3,a\xff,1\n4,\"a\x00b\",1\n5,ok,1\r\n").unwrap();
    csv("contact_2.csv", b"id,id,name\n6,6,x\n").unwrap();
    csv("contact_3.csv", b"id,name,seq\n7,\"later, quoted\",1\n").unwrap();
    let out = cli(&["run", "--once"], &cfg);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ids = |table: &str| -> Vec<i64> {
        rows(&cfg, table, "all").iter().map(|r| r["id"].as_i64().unwrap()).collect()
    };
    assert_eq!(ids("account"), [5]);
    assert_eq!(ids("contact"), [5, 7]);
    let dead = dead_letter_bytes(&cfg);
    let expect: [(&[u8], &str); 7] = [
        (flat[0], "not JSON"),
        (flat[1], "NUL"),
        (flat[2], "a field appears twice"),
        (b"1,\"q\"", "has 2 fields, the header has 3"),
        (b"3,a\xff,1", "not UTF-8"),
        (b"4,\"a\x00b\",1", "contains a NUL character"),
        (b"6,6,x", "header names column `id` twice"),
    ];
    for (raw, error) in expect {
        assert!(
            dead.iter().any(|(r, e)| r == raw && e.contains(error)),
            "no dead letter of {:?} saying {error}: {dead:?}",
            String::from_utf8_lossy(raw)
        );
    }
    assert_eq!(dead.len(), expect.len(), "{dead:?}");
}

/// docs/schema.md: sequence and key columns keep their kind; the odd value
/// is the dead letter, the rest of the batch commits.
#[test]
fn schema_odd_kinds_in_key_and_sequence_columns_are_dead_letters() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems:\n  flat: {type: jsonl, path: 'flat/*.jsonl'}\n  dbz: {type: jsonl, format: debezium, path: 'dbz/*.jsonl'}\nbronze:\n  tables:\n    account:\n      source: {system: flat, object: account}\n      business_key: [id]\n      strategy: scd1\n      merge: {sequence_by: [lsn]}\n    contact:\n      source: {system: dbz, object: contact}\n      business_key: [id]\n      strategy: scd1\n      merge: {sequence_by: [source.lsn]}\n",
    );
    write(
        tmp.path(),
        "flat/1.jsonl",
        r#"{"id":1,"lsn":9,"v":"old"}
{"id":1,"lsn":10,"v":"new"}
{"id":2,"lsn":"not-a-number","v":"odd"}
{"id":3.5,"lsn":11,"v":"float key"}
{"id":4,"lsn":12,"v":"fine"}
"#,
    );
    write(
        tmp.path(),
        "dbz/1.jsonl",
        r#"{"op":"c","after":{"id":99999999999999999999999,"name":"huge"},"source":{"lsn":1}}
{"op":"c","after":{"id":7,"name":"seven"},"source":{"lsn":2}}
{"op":"u","after":{"id":7,"name":"SEVEN"},"source":{"lsn":"x3"}}
{"op":"u","after":{"id":8,"name":"eight"},"source":{"lsn":10}}
"#,
    );
    stdout_of(cli(&["run", "--once"], &cfg));
    let account = rows(&cfg, "account", "all");
    let v: Vec<(i64, &str)> =
        account.iter().map(|r| (r["id"].as_i64().unwrap(), r["v"].as_str().unwrap())).collect();
    assert_eq!(v, vec![(1, "new"), (4, "fine")]);
    let contact = rows(&cfg, "contact", "all");
    let v: Vec<(i64, &str)> =
        contact.iter().map(|r| (r["id"].as_i64().unwrap(), r["name"].as_str().unwrap())).collect();
    assert_eq!(v, vec![(7, "seven"), (8, "eight")]);
    let dead = dead_letters(&cfg);
    assert_eq!(dead.len(), 4, "{dead:?}");
    // Reason `type`: a value that does not fit its column, named in the error.
    for col in ["`lsn`", "`id`", "`source_lsn`"] {
        assert!(dead.iter().any(|e| e.starts_with(&format!("column {col}"))), "{col}: {dead:?}");
    }
    // Once more: nothing is applied or dead-lettered twice.
    stdout_of(cli(&["run", "--once"], &cfg));
    assert_eq!(dead_letters(&cfg).len(), 4);
}

/// A Debezium JSONL system feeding `contact` (scd2) and a flat one feeding
/// `account` (scd1).
const DEBEZIUM_AND_FLAT: &str = "systems:\n  dbz: {type: jsonl, format: debezium, path: 'dbz/*.jsonl'}\n  flat: {type: jsonl, path: 'flat/*.jsonl'}\nbronze:\n  tables:\n    contact:\n      source: {system: dbz, object: contact}\n      business_key: [id]\n      strategy: scd2\n    account:\n      source: {system: flat, object: account}\n      business_key: [id]\n      strategy: scd1\n";

/// docs/bad-input.md: a message nested 200,000 levels deep is one dead
/// letter; the run goes on.
#[test]
fn bad_input_deeply_nested_lines_are_dead_letters_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", DEBEZIUM_AND_FLAT);
    let deep = format!("{}1{}", "[".repeat(200_000), "]".repeat(200_000));
    write(
        tmp.path(),
        "dbz/1.jsonl",
        &format!(
            "{{\"op\":\"c\",\"after\":{{\"id\":1,\"name\":\"ok\"}}}}\n{{\"op\":\"c\",\"after\":{{\"id\":2,\"name\":{deep}}}}}\n{{\"op\":\"c\",\"after\":{{\"id\":3,\"name\":\"ok\"}}}}\n"
        ),
    );
    write(tmp.path(), "flat/1.jsonl", &format!("{{\"id\":1}}\n{{\"id\":2,\"x\":{deep}}}\n"));
    stdout_of(cli(&["run", "--once"], &cfg));
    assert_eq!(rows(&cfg, "contact", "all").len(), 2);
    assert_eq!(rows(&cfg, "account", "all").len(), 1);
    let dead = dead_letters(&cfg);
    assert_eq!(dead.len(), 2, "{dead:?}");
    // Nesting is refused before parsing (Debezium) or by the parser's own limit (flat JSON).
    assert!(
        dead.iter().all(|e| e.contains("nested deeper than 128") || e.contains("recursion limit")),
        "{dead:?}"
    );
}

/// docs/bad-input.md: a decimal claiming a scale of ±2^31 (Kafka Connect's
/// `{"scale", "value"}`, which any JSON row may carry) is one dead letter
/// with a short error; it once overflowed the text's zero padding and
/// panicked the batch outside any message's guard (or, at +2^31, made 2 GiB
/// of error text).
#[test]
fn bad_input_a_decimal_claiming_an_extreme_scale_is_a_dead_letter_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems:\n  flat: {type: jsonl, path: 'flat/*.jsonl'}\nbronze:\n  tables:\n    account:\n      source: {system: flat, object: account}\n      business_key: [id]\n      strategy: scd1\n",
    );
    let row =
        |id: i64, scale: i64| format!(r#"{{"id":{id},"x":{{"scale":{scale},"value":"AQ=="}}}}"#);
    let lines = [row(1, 2), row(2, i32::MIN.into()), row(3, i32::MAX.into()), row(4, 3)];
    write(tmp.path(), "flat/1.jsonl", &(lines.join("\n") + "\n"));
    stdout_of(cli(&["run", "--once"], &cfg));
    let landed = rows(&cfg, "account", "all");
    let x: Vec<(i64, &str)> =
        landed.iter().map(|r| (r["id"].as_i64().unwrap(), r["x"].as_str().unwrap())).collect();
    assert_eq!(x, vec![(1, "0.010000000000000000"), (4, "0.001000000000000000")], "{landed:?}");
    let dead = dead_letters(&cfg);
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead.iter().all(|e| e.len() < 300), "{dead:?}");
    assert!(dead.iter().any(|e| e.contains("1E+2147483648 does not fit decimal")), "{dead:?}");
    assert!(dead.iter().any(|e| e.contains("1E-2147483647 has more than")), "{dead:?}");
}

/// docs/bad-input.md: a row of more than 4,096 fields (MySQL's column
/// limit) is one dead letter: every row of its batch would have
/// taken its width, and the table its columns.
#[test]
fn bad_input_a_row_of_more_than_4096_fields_is_a_dead_letter_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", DEBEZIUM_AND_FLAT);
    let wide = |n: usize| (0..n).map(|i| format!(",\"f{i}\":{i}")).collect::<String>();
    let (over, at) = (wide(5_000), wide(4_095));
    write(
        tmp.path(),
        "dbz/1.jsonl",
        &format!("{{\"op\":\"c\",\"after\":{{\"id\":1}}}}\n{{\"op\":\"c\",\"after\":{{\"id\":2{over}}}}}\n{{\"op\":\"c\",\"after\":{{\"id\":3}}}}\n"),
    );
    write(
        tmp.path(),
        "flat/1.jsonl",
        &format!("{{\"id\":1}}\n{{\"id\":2{over}}}\n{{\"id\":3{at}}}\n"),
    );
    stdout_of(cli(&["run", "--once"], &cfg));
    assert_eq!(rows(&cfg, "contact", "all").len(), 2);
    // 4,096 fields (the key and 4,095 more) is still a row.
    let account = rows(&cfg, "account", "all");
    assert_eq!(account.iter().map(|r| r["id"].as_i64().unwrap()).collect::<Vec<_>>(), [1, 3]);
    let dead = dead_letters(&cfg);
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead.iter().all(|e| e.contains("a row of 5001 fields: more than 4096")), "{dead:?}");
}

#[test]
fn bad_input_a_table_name_that_is_a_path_is_refused_by_check_and_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems: {crm: {type: csv, path: 'data/*.csv'}}\nbronze:\n  tables:\n    ../../escaped:\n      source: {system: crm, object: account}\n      business_key: [id]\n      strategy: scd1\n",
    );
    write(tmp.path(), "data/1.csv", "id\n1\n");
    for cmd in [vec!["check"], vec!["run", "--once"]] {
        let out = cli(&cmd, &cfg);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("bronze.tables.../../escaped") && err.contains("not a valid table name")
        );
    }
    assert!(!tmp.path().join("escaped").exists() && !tmp.path().join("lake").exists());
}

/// docs/schema.md, "What a data file holds": a row of 4,000 fields among
/// 20,000 narrow new keys (`additive`, merge-on-read) is written in a file
/// of at most 32M cells at its widest row (about 8,000 rows), not in one
/// file of 20,001 rows x 4,003 columns; the narrow rows' files hold only
/// their own columns, and every row reads back.
/// Rows and columns of the table's live data files whose path contains
/// `part` (as Python `deltalake` lists them; pyarrow reads their footers).
fn parquet_shapes(table: &Path, part: &str) -> Vec<(u64, u64)> {
    let py = "import sys, os\nimport pyarrow.parquet as pq\nfrom deltalake import DeltaTable\nfor f in sorted(DeltaTable(sys.argv[1]).file_uris()):\n    if sys.argv[2] in f:\n        m = pq.ParquetFile(f.removeprefix('file://')).metadata\n        print(m.num_rows, m.num_columns)\nsys.stdout.flush(); os._exit(0)\n";
    let out = Command::new("python3").args(["-c", py]).arg(table).arg(part).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (r, c) = l.split_once(' ').unwrap();
            (r.parse().unwrap(), c.parse().unwrap())
        })
        .collect()
}

/// An scd2 merge-on-read table of keys 0..=20,000 where key 10,000 has
/// 4,000 more fields than the rest: its config, loaded.
fn table_with_one_wide_row(dir: &Path) -> PathBuf {
    let cfg = write(
        dir,
        "c.yaml",
        "systems:\n  flat: {type: jsonl, path: 'flat/*.jsonl'}\nbronze:\n  tables:\n    account:\n      source: {system: flat, object: account}\n      business_key: [id]\n      strategy: scd2\n      layout: {deletion_vectors: true}\n",
    );
    let wide: String = (0..4_000).map(|i| format!(",\"f{i}\":{i}")).collect();
    let lines: String = (0..20_001)
        .map(|id| match id {
            10_000 => format!("{{\"id\":{id},\"name\":\"n{id}\"{wide}}}\n"),
            _ => format!("{{\"id\":{id},\"name\":\"n{id}\"}}\n"),
        })
        .collect();
    write(dir, "flat/1.jsonl", &lines);
    stdout_of(cli(&["run", "--once"], &cfg));
    cfg
}

#[test]
fn bad_input_one_wide_row_gets_a_file_of_its_own_size() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = table_with_one_wide_row(tmp.path());
    let files = parquet_shapes(&tmp.path().join("lake/bronze/account"), "");
    assert_eq!(files.iter().map(|f| f.0).sum::<u64>(), 20_001, "{files:?}");
    let wide_files: Vec<&(u64, u64)> = files.iter().filter(|f| f.1 > 10).collect();
    assert_eq!(wide_files.len(), 1, "{files:?}");
    assert!(wide_files[0].0 * wide_files[0].1 <= 32 << 20, "{files:?}");
    assert!(files.iter().filter(|f| f.1 <= 10).count() >= 2, "{files:?}");
    for (id, f3999) in [(10_000, Some(3999)), (10_001, None)] {
        let out = stdout_of(cli(
            &["show", "account", "--format", "jsonl", "--key", &id.to_string()],
            &cfg,
        ));
        let row: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(
            (row["name"].as_str(), row["f3999"].as_i64()),
            (Some(&*format!("n{id}")), f3999)
        );
    }
}

#[test]
fn bad_input_a_rewritten_wide_file_is_not_topped_up_beyond_its_own_size() {
    // The wide row's file holds keys 10,000..=18,375 (8,376 rows at 4,006
    // columns, the widest that stays within 32M cells). Its odd keys
    // updated mask half of it, so it is rewritten, and being small it would
    // take the 30,000 new keys: built in its 4,006 columns, 160M cells.
    let tmp = tempfile::tempdir().unwrap();
    let cfg = table_with_one_wide_row(tmp.path());
    let lines: String = (10_001..19_000)
        .step_by(2)
        .chain(20_001..50_001)
        .map(|id| format!("{{\"id\":{id},\"name\":\"v{id}\"}}\n"))
        .collect();
    write(tmp.path(), "flat/2.jsonl", &lines);
    stdout_of(cli(&["run", "--once"], &cfg));
    let files = parquet_shapes(&tmp.path().join("lake/bronze/account"), "_is_current=true");
    let wide: Vec<&(u64, u64)> = files.iter().filter(|f| f.1 > 10).collect();
    assert_eq!(wide.len(), 1, "{files:?}");
    assert!(wide[0].0 * wide[0].1 <= 32 << 20, "{files:?}");
    for (id, name, f3999) in
        [(10_000, "n10000", Some(3999)), (10_001, "v10001", None), (45_000, "v45000", None)]
    {
        let out = stdout_of(cli(
            &["show", "account", "--format", "jsonl", "--key", &id.to_string()],
            &cfg,
        ));
        // Versions oldest first: the last is the current one.
        let row: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!((row["name"].as_str(), row["f3999"].as_i64()), (Some(name), f3999), "{id}");
    }
}

/// docs/bad-input.md: a file record longer than the largest message (a
/// line of 65 MiB, a CSV quoted field never closed) is one dead letter
/// keeping its first megabyte, and the run goes on after it; the file is
/// then done. Before, it stopped the file's run at every retry, and the
/// lines after it never loaded.
#[test]
fn bad_input_a_record_longer_than_the_largest_message_is_a_dead_letter_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems:\n  flat: {type: jsonl, path: 'flat/*.jsonl'}\n  csv: {type: csv, path: 'csv/*.csv'}\nbronze:\n  tables:\n    account:\n      source: {system: flat, object: account}\n      business_key: [id]\n      strategy: scd1\n    contact:\n      source: {system: csv, object: contact}\n      business_key: [id]\n      strategy: scd1\nbatching: {max_rows: 2}\n",
    );
    let long = format!("{{\"id\":2,\"name\":\"{}\"}}", "x".repeat(65 << 20));
    write(
        tmp.path(),
        "flat/1.jsonl",
        &format!("{{\"id\":1}}\n{long}\n{{\"id\":3}}\n{{\"id\":4}}\n"),
    );
    let unclosed = format!("id,name\n1,a\n2,\"{}\n", "y\n".repeat(33 << 20));
    write(tmp.path(), "csv/1.csv", &unclosed);
    for _ in 0..2 {
        let out = cli(&["run", "--once"], &cfg);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let ids = |table: &str| -> Vec<i64> {
        rows(&cfg, table, "all").iter().map(|r| r["id"].as_i64().unwrap()).collect()
    };
    assert_eq!(ids("account"), [1, 3, 4]);
    assert_eq!(ids("contact"), [1]);
    let dead = dead_letter_bytes(&cfg);
    assert_eq!(dead.len(), 2, "one dead letter each, also after a second run");
    let json = dead.iter().find(|(_, e)| e.contains("line 2")).expect("the long line's");
    assert_eq!(json.0, long.as_bytes()[..1 << 20], "its first megabyte");
    assert!(
        json.1.contains(&format!("is {} bytes, longer than 64 MiB", long.len() + 1)),
        "{}",
        json.1
    );
    let csv = dead.iter().find(|(_, e)| e.contains("line 3")).expect("the CSV record's");
    assert!(csv.0.starts_with(b"2,\"y\ny\n"), "{:?}", String::from_utf8_lossy(&csv.0[..10]));
}
