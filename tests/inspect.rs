//! The operator's first look: `show` with `--limit`, `--key` and `--where`
//! on multi-file tables, `tables` checked against the Delta log read
//! independently, `run --once` progress only on a terminal, and the help
//! and version texts (docs/cli.md).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{cli, stdout_of, write, BIN};

fn rows(jsonl: &str) -> Vec<serde_json::Value> {
    jsonl.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Two tables over the same CSV files, split into files of at most 40 rows:
/// 300 keys loaded, then 12 of them updated (merge-on-read for scd1).
fn lake(tmp: &Path) -> PathBuf {
    let cfg = write(
        tmp,
        "c.yaml",
        "systems: {crm: {type: csv, path: 'data/*.csv'}}
bronze:
  tables:
    account:
      source: {system: crm, object: account}
      business_key: [id]
      strategy: scd1
      merge: {sequence_by: [seq]}
      layout: {file_rows: 40, deletion_vectors: true}
    account_history:
      source: {system: crm, object: account}
      business_key: [id]
      strategy: scd2
      merge: {sequence_by: [seq]}
      layout: {file_rows: 40}
",
    );
    let mut load = String::from("id,name,amount,seq\n");
    // Keys arrive out of order: the table's order is show's, not the input's.
    for id in (1..=300).rev() {
        load.push_str(&format!("{id},n{id},{},1\n", id * 3 % 500));
    }
    write(tmp, "data/1.csv", &load);
    let mut upd = String::from("id,name,amount,seq\n");
    for id in (5..=280).step_by(25) {
        upd.push_str(&format!("{id},renamed{id},{},2\n", id + 1000));
    }
    write(tmp, "data/2.csv", &upd);
    stdout_of(Command::new(BIN).args(["run", "--once", "--config"]).arg(&cfg).output().unwrap());
    cfg
}

/// The live files of a table and their row counts and masked rows, replayed
/// from its `_delta_log` commits: an independent reading of what `tables` reports.
fn live_files(table: &Path) -> BTreeMap<String, (u64, u64)> {
    let mut commits: Vec<PathBuf> = std::fs::read_dir(table.join("_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    commits.sort();
    let mut live = BTreeMap::new();
    for c in commits {
        for line in std::fs::read_to_string(c).unwrap().lines() {
            let a: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(r) = a.get("remove") {
                live.remove(r["path"].as_str().unwrap());
            }
            if let Some(add) = a.get("add") {
                let stats: serde_json::Value =
                    serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
                let masked = add["deletionVector"]["cardinality"].as_u64().unwrap_or(0);
                live.insert(
                    add["path"].as_str().unwrap().to_string(),
                    (stats["numRecords"].as_u64().unwrap(), masked),
                );
            }
        }
    }
    live
}

#[test]
fn show_limit_key_and_where_read_multi_file_tables_in_key_order() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = lake(tmp.path());
    let updated: Vec<i64> = (5..=280).step_by(25).collect();
    for table in ["account", "account_history"] {
        let all = rows(&stdout_of(cli(&["show", table, "--format", "jsonl"], &cfg)));
        let versions = if table == "account" { 300 } else { 300 + updated.len() };
        assert_eq!(all.len(), versions, "{table}");
        let ids: Vec<i64> = all.iter().map(|r| r["id"].as_i64().unwrap()).collect();
        assert!(ids.windows(2).all(|w| w[0] <= w[1]), "{table}: ordered by key");

        // --limit: the first rows in key order, all versions of a key together.
        let first =
            rows(&stdout_of(cli(&["show", table, "--format", "jsonl", "--limit", "7"], &cfg)));
        assert_eq!(first, all[..7].to_vec(), "{table}");

        // --key: every version of one key, none of another.
        let k = rows(&stdout_of(cli(&["show", table, "--format", "jsonl", "--key", "30"], &cfg)));
        let want: Vec<_> = all.iter().filter(|r| r["id"] == 30).cloned().collect();
        assert_eq!(k, want, "{table}");
        assert_eq!(k.len(), if table == "account" { 1 } else { 2 });
        let none =
            rows(&stdout_of(cli(&["show", table, "--format", "jsonl", "--key", "301"], &cfg)));
        assert!(none.is_empty(), "{table}: {none:?}");

        // --where: the predicate language of delete_when, over data and system columns.
        let pred = "amount >= 1000 OR (amount < 20 AND NOT _is_deleted)";
        let w = rows(&stdout_of(cli(&["show", table, "--format", "jsonl", "--where", pred], &cfg)));
        let want: Vec<_> = all
            .iter()
            .filter(|r| {
                let a = r["amount"].as_i64().unwrap();
                a >= 1000 || (a < 20 && r["_is_deleted"] == false)
            })
            .cloned()
            .collect();
        assert!(!want.is_empty());
        assert_eq!(w, want, "{table}");
    }

    // scd2: --where sees the partition column; --view and --limit combine.
    let closed = rows(&stdout_of(cli(
        &["show", "account_history", "--format", "jsonl", "--where", "_is_current = false"],
        &cfg,
    )));
    let ids: Vec<i64> = closed.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, updated);
    let active = rows(&stdout_of(cli(
        &["show", "account_history", "--format", "jsonl", "--view", "active", "--limit", "3"],
        &cfg,
    )));
    let names: Vec<&str> = active.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["n1", "n2", "n3"]);

    // Mistakes are usage errors that say what was wrong.
    for (args, says) in [
        (vec!["show", "account", "--key", "1,2"], "1 column"),
        (vec!["show", "account", "--key", "abc"], "not a int"),
        (vec!["show", "account", "--where", "nope = 1"], "no column `nope`"),
        (vec!["show", "account", "--where", "amount >"], "--where"),
    ] {
        let out = cli(&args, &cfg);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn tables_reports_what_the_delta_log_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = lake(tmp.path());
    let report: serde_json::Value =
        serde_json::from_str(&stdout_of(cli(&["tables", "--format", "json"], &cfg))).unwrap();
    let by_name: HashMap<&str, &serde_json::Value> =
        report.as_array().unwrap().iter().map(|t| (t["table"].as_str().unwrap(), t)).collect();
    for (table, rows_seen) in [("account", 300u64), ("account_history", 312)] {
        let t = by_name[table];
        let s = &t["stats"];
        let live = live_files(&tmp.path().join("lake/bronze").join(table));
        let files = live.len() as u64;
        let masked: u64 = live.values().map(|v| v.1).sum();
        let physical: u64 = live.values().map(|v| v.0).sum();
        assert!(files > 1, "{table}: the layout spreads 300 keys over files of 40 rows");
        assert_eq!(s["files"].as_u64(), Some(files), "{table}");
        assert_eq!(s["masked_rows"].as_u64(), Some(masked), "{table}");
        assert_eq!(s["live_rows"].as_u64(), Some(physical - masked), "{table}");
        assert_eq!(s["live_rows"].as_u64(), Some(rows_seen), "{table}: what show prints");
        assert_eq!(s["version"].as_i64(), Some(1), "{table}: two runs, versions 0 and 1");
        assert!(s["log_files"].as_u64().unwrap() >= 2, "{table}");
        let files: Vec<&str> = t["positions"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap())
            .collect();
        assert_eq!(files, ["data/1.csv", "data/2.csv"], "{table}");
    }
    // Merge-on-read masked the 12 replaced rows of the scd1 table.
    assert_eq!(by_name["account"]["stats"]["masked_rows"].as_u64(), Some(12));
    assert!(by_name["_dead_letters"]["stats"].is_null(), "no dead letters yet");

    let text = stdout_of(cli(&["tables"], &cfg));
    let line = text.lines().find(|l| l.starts_with("account ")).unwrap();
    assert!(
        line.contains("| scd1 ") && line.contains("| 300 ") && line.contains("2 files"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("_dead_letters") && l.contains("no data yet")));
}

#[test]
fn run_once_shows_progress_on_a_terminal_only() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems: {crm: {type: csv, path: 'data/*.csv'}}\nbronze:\n  tables:\n    account:\n      source: {system: crm, object: account}\n      business_key: [id]\n      strategy: scd1\n      merge: {sequence_by: [seq]}\n",
    );
    write(tmp.path(), "data/1.csv", "id,seq\n1,1\n2,1\n");
    write(tmp.path(), "data/2.csv", "id,seq\n3,1\n");
    // Not a terminal: no progress, whatever else is logged.
    let plain = Command::new(BIN).args(["run", "--once", "--config"]).arg(&cfg).output().unwrap();
    assert!(plain.status.success());
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(!err.contains("2/2 files") && !err.contains("events/s"), "{err}");

    // On a pseudo-terminal (util-linux `script`): one line per table, files done of total.
    std::fs::remove_dir_all(tmp.path().join("lake")).unwrap();
    let cmd = format!("'{BIN}' run --once --config '{}'", cfg.display());
    let tty = Command::new("script").args(["-qec", &cmd, "/dev/null"]).output().unwrap();
    let screen = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{screen}");
    assert!(screen.contains("account") && screen.contains("2/2 files"), "{screen}");
    assert!(screen.contains("3 events"), "{screen}");

    // JSON logs on a terminal: still no progress line, only JSON.
    std::fs::remove_dir_all(tmp.path().join("lake")).unwrap();
    let cmd = format!("'{BIN}' --log-format json run --once --config '{}'", cfg.display());
    let tty = Command::new("script").args(["-qec", &cmd, "/dev/null"]).output().unwrap();
    let screen = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{screen}");
    assert!(!screen.contains("files") || !screen.contains("2/2"), "{screen}");
}

#[test]
fn every_command_has_help_with_an_example_and_version_names_the_storage_backends() {
    let version = Command::new(BIN).arg("--version").output().unwrap();
    let v = String::from_utf8_lossy(&version.stdout);
    assert!(v.starts_with("changelake ") && v.contains("storage backends:"), "{v}");
    for cmd in ["run", "check", "tables", "show", "offsets", "replay", "demo", "bench", "probe"] {
        let out = Command::new(BIN).args([cmd, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{cmd}: {help}");
        assert!(help.contains("Example"), "{cmd} --help has no example:\n{help}");
        assert!(help.contains(&format!("changelake {cmd}")), "{cmd}: the example runs {cmd}");
        assert!(!help.contains("SPEC") && !help.contains("../"), "{cmd}: outside references");
    }
}

/// docs/replay.md: replay re-reads a Kafka topic; a table that reads files
/// has no offsets, and the command says so (exit 2) instead of reading
/// nothing and reporting "0 commit(s)" as if it had replayed.
#[test]
fn replay_of_a_table_that_reads_files_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "data/t.csv", "id,name\n1,a\n");
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems:\n  crm: {type: csv, path: 'data/{object}.csv'}\nbronze:\n  tables:\n    t:\n      source: {system: crm, object: t}\n      business_key: [id]\n      strategy: scd1\n",
    );
    let out = cli(&["replay", "--table", "t", "--from-beginning"], &cfg);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("table `t` reads files") && err.contains("run --once"), "{err}");
}

/// docs/cli.md, run: a table whose path matches no file (an extract that
/// has not arrived) does not hold up the others: they load, and `--once`
/// exits 1 naming the path. It stopped the whole run before any other
/// table had loaded.
#[test]
fn run_a_table_without_input_files_does_not_hold_up_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "data/b.csv", "id,name\n1,a\n");
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems:\n  crm: {type: csv, path: 'data/{object}.csv'}\nbronze:\n  tables:\n    a:\n      source: {system: crm, object: a}\n      business_key: [id]\n      strategy: scd1\n    b:\n      source: {system: crm, object: b}\n      business_key: [id]\n      strategy: scd1\n",
    );
    let out = cli(&["run", "--once"], &cfg);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no input file matches") && err.contains("a.csv"), "{err}");
    let rows = stdout_of(cli(&["show", "b", "--format", "jsonl"], &cfg));
    assert_eq!(rows.lines().count(), 1, "b loaded: {rows}");
    // Once the extract arrives, both load and the run succeeds.
    write(tmp.path(), "data/a.csv", "id,name\n7,z\n");
    let out = cli(&["run", "--once"], &cfg);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout_of(cli(&["show", "a", "--format", "jsonl"], &cfg)).contains("\"z\""));
}
