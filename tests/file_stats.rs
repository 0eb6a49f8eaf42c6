//! Delta statistics on every `add` (docs/commit-protocol.md, "File statistics"): each
//! file's `minValues`, `maxValues`, `nullCount` and `numRecords` agree with
//! its contents as Python `deltalake` reads them, and delta-rs' DataFusion
//! reader opens one file of many for a business-key equality — in the
//! default copy-on-write layout, after rewrites, with deletion vectors
//! (bounds marked wide) and with the log read from a checkpoint.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use common::{cli, ok, write};

/// `n` rows from `from`, with a long name on every tenth (string truncation),
/// a decimal, a timestamp with microseconds, a float and an all-NULL column.
fn csv(from: u64, n: u64, seq: u64, city: &str) -> String {
    let mut s = String::from("id,name,city,amount,seen,score,note,seq\n");
    for id in from..from + n {
        let name = if id % 10 == 0 {
            format!("Account {id} with a name well beyond thirty-two characters")
        } else {
            format!("Account {id}")
        };
        let _ = writeln!(
            s,
            "{id},{name},{city},{}.{:02},2026-03-{:02}T10:00:00.{:06}Z,{}.5,,{seq}",
            id * 3,
            id % 100,
            1 + id % 28,
            id % 1_000_000,
            id % 97
        );
    }
    s
}

/// The header and every `n`-th row of a CSV text, from the first.
fn every_nth(csv: &str, n: usize) -> String {
    let mut lines = csv.lines();
    let mut out = format!("{}\n", lines.next().unwrap_or_default());
    for l in lines.step_by(n) {
        let _ = writeln!(out, "{l}");
    }
    out
}

fn config(strategy: &str, layout: &str) -> String {
    format!(
        "systems: {{crm: {{type: csv, path: 'data/*.csv', columns: {{amount: \"decimal(14,2)\", seen: timestamp, note: string}}}}}}\n\
         bronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: {strategy}\n      merge: {{sequence_by: [seq]}}\n      layout: {{{layout}}}\n"
    )
}

/// The checker's verdict on the table (tests/support/check_stats.py).
fn check(table: &Path, key: u64) -> serde_json::Value {
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/check_stats.py"))
        .arg(table)
        .args(["id", &key.to_string()])
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_else(|| {
        panic!("check_stats.py printed nothing: {}", String::from_utf8_lossy(&out.stderr))
    });
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn assert_stats_hold(v: &serde_json::Value, files_at_least: u64, wide: bool) {
    assert_eq!(v["mismatches"], serde_json::json!([]), "{v}");
    assert!(v["files"].as_u64().unwrap() >= files_at_least, "{v}");
    for c in ["id", "name", "city", "amount", "seen", "score"] {
        assert!(
            v["with_bounds"].as_array().unwrap().iter().any(|x| x == c),
            "{c} has no bounds: {v}"
        );
    }
    assert!(!v["with_bounds"].as_array().unwrap().iter().any(|x| x == "note"), "{v}");
    assert_eq!(v["held_empty"], serde_json::json!([]), "{v}");
    assert_eq!(v["wide"].as_u64().unwrap() > 0, wide, "{v}");
    assert_eq!(v["opened"], 1, "a key equality opens one file: {v}");
    assert_eq!(v["rows"], 1, "{v}");
}

#[test]
fn file_statistics_match_contents_and_let_readers_skip_files_copy_on_write() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg =
        write(tmp.path(), "c.yaml", &config("scd1", "file_rows: 5000, checkpoint_interval: 2"));
    write(tmp.path(), "data/1.csv", &csv(0, 50_000, 1, "Berlin"));
    ok(cli(&["run", "--once"], &cfg));
    let table = tmp.path().join("lake/bronze/account");
    assert_stats_hold(&check(&table, 31_337), 10, false);

    // Updates spread over the key range: files are rewritten with fresh stats;
    // the third commit leaves the log to be read from a checkpoint.
    write(tmp.path(), "data/2.csv", &every_nth(&csv(0, 50_000, 2, "Hamburg"), 997));
    write(tmp.path(), "data/3.csv", &csv(50_000, 5_000, 1, "Bonn"));
    ok(cli(&["run", "--once"], &cfg));
    assert!(table.join("_delta_log/_last_checkpoint").exists());
    assert_stats_hold(&check(&table, 997 * 7), 11, false);
    assert_stats_hold(&check(&table, 52_000), 11, false);
}

#[test]
fn file_statistics_with_deletion_vectors_are_marked_wide_and_still_prune() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg =
        write(tmp.path(), "c.yaml", &config("scd2", "file_rows: 5000, deletion_vectors: true"));
    write(tmp.path(), "data/1.csv", &csv(0, 40_000, 1, "Berlin"));
    ok(cli(&["run", "--once"], &cfg));
    // Updates of keys from 20,000 on: their current files get deletion
    // vectors, their closed versions go to history files whose key range
    // starts at 20,000.
    write(tmp.path(), "data/2.csv", &every_nth(&csv(20_000, 20_000, 2, "Hamburg"), 101));
    ok(cli(&["run", "--once"], &cfg));
    let table = tmp.path().join("lake/bronze/account");
    let v = check(&table, 1);
    assert_stats_hold(&v, 8, true);
}

/// One column of the table as an independent reader sees it, for a key.
fn read_column(table: &Path, column: &str, filter: &str) -> String {
    let py = "import sys, os\nimport pyarrow as pa\nfrom deltalake import DeltaTable, QueryBuilder\nt = QueryBuilder().register('t', DeltaTable(sys.argv[1])).execute(f'select {sys.argv[2]} as v from t where {sys.argv[3]}').read_all()\nprint(pa.table(t).column('v').to_pylist())\nsys.stdout.flush(); os._exit(0)\n";
    let out = Command::new("python3")
        .args(["-c", py])
        .arg(table)
        .arg(column)
        .arg(filter)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// docs/schema.md, "What a data file holds": one row with 60 more fields
/// gives an `additive` table 60 columns, but only the file holding that
/// row holds them; every other file, and every file written later, leaves
/// out the columns NULL in all its rows, and readers still read them as
/// NULL, with statistics counted in the table's column order. Copy-on-write
/// (rewrites keep and add columns) and scd2 with deletion vectors (closes,
/// history, row companions).
#[test]
fn schema_one_wide_row_widens_only_the_file_that_holds_it() {
    for (strategy, layout) in
        [("scd1", "file_rows: 5000"), ("scd2", "file_rows: 5000, deletion_vectors: true")]
    {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = write(tmp.path(), "c.yaml", &config(strategy, layout));
        write(tmp.path(), "data/1.csv", &csv(0, 20_000, 1, "Berlin"));
        ok(cli(&["run", "--once"], &cfg));
        // Narrow updates and new keys, then key 12,345 with 60 more fields
        // (a CSV file's rows share its header: the wide row is a file).
        let mut two = every_nth(&csv(0, 20_000, 2, "Hamburg"), 13);
        two.extend(csv(30_000, 3_000, 1, "Bonn").lines().skip(1).map(|l| format!("{l}\n")));
        write(tmp.path(), "data/2.csv", &two);
        let one = csv(12_345, 1, 2, "Wide");
        let (header, row) = one.split_once('\n').unwrap();
        let wide_cols: String = (0..60).map(|i| format!(",x{i}")).collect();
        let wide_vals: String = (0..60).map(|i| format!(",{}", 1000 + i)).collect();
        write(
            tmp.path(),
            "data/2w.csv",
            &format!("{header}{wide_cols}\n{}{wide_vals}\n", row.trim_end()),
        );
        ok(cli(&["run", "--once"], &cfg));
        write(tmp.path(), "data/3.csv", &every_nth(&csv(0, 20_000, 3, "Köln"), 7));
        ok(cli(&["run", "--once"], &cfg));
        let table = tmp.path().join("lake/bronze/account");
        let v = check(&table, 12_345);
        assert_eq!(v["mismatches"], serde_json::json!([]), "{strategy}: {v}");
        assert_eq!(v["held_empty"], serde_json::json!([]), "{strategy}: {v}");
        assert!(v["rows"].as_u64().unwrap() >= 1, "{strategy}: {v}");
        // 12,345 is not a multiple of 7: its wide version is still current.
        let current = if strategy == "scd2" { " and _is_current" } else { "" };
        let of = |id: u64| format!("id = {id}{current}");
        assert_eq!(read_column(&table, "x7", &of(12_345)), "[1007]", "{strategy}");
        assert_eq!(read_column(&table, "x7", &of(30_001)), "[None]", "{strategy}");
        assert_eq!(read_column(&table, "city", &of(30_001)), "['Bonn']", "{strategy}");
        assert_eq!(read_column(&table, "city", &of(14)), "['Köln']", "{strategy}");
        assert_eq!(read_column(&table, "count(x7)", "true"), "[1]", "{strategy}");
    }
}
