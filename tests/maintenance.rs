//! Table maintenance: small-file compaction, checkpoints and vacuum keep a
//! long-running table healthy without changing what readers see. Read back
//! with an independent reader (Python `deltalake`), also *while* compactions
//! commit. Merge-on-read read back against copy-on-write is in
//! `maintenance/deletion_vectors.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_changelake");

#[path = "maintenance/deletion_vectors.rs"]
mod deletion_vectors;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

/// 30 extracts; each inserts 10 new accounts and updates 5 older ones.
fn extracts(dir: &Path) {
    extracts_n(dir, 30);
}

/// `n` extracts of the kind [`extracts`] writes.
fn extracts_n(dir: &Path, n: u32) {
    for run in 0..n {
        let mut csv = String::from("id,city,seq\n");
        for i in 0..10 {
            let id = run * 10 + i;
            csv.push_str(&format!("{id},c{run},{}\n", run * 100 + i));
        }
        for j in 0..5 {
            let id = (run * 7 + j * 13) % (run * 10 + 1);
            csv.push_str(&format!("{id},u{run},{}\n", run * 100 + 50 + j));
        }
        write(dir, &format!("data/account/{run:03}.csv"), &csv);
    }
}

fn config(dir: &Path, layout: &str) -> PathBuf {
    write(
        dir,
        "c.yaml",
        &format!(
            "systems: {{crm: {{type: csv, path: 'data/{{object}}/*.csv'}}}}\nbronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd1\n      merge: {{sequence_by: [seq]}}\n      layout: {{{layout}}}\n    account_history:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd2\n      merge: {{sequence_by: [seq]}}\n      layout: {{{layout}}}\n"
        ),
    )
}

/// What Python `deltalake` reads from `table`: `select`, a Python
/// expression over `t` (every row as a dict), as JSON.
fn read_json(table: &Path, select: &str) -> serde_json::Value {
    let py = format!(
        "import sys, json, os\nfrom deltalake import DeltaTable\nt = DeltaTable(sys.argv[1]).to_pyarrow_table().to_pylist()\nprint(json.dumps({select}), flush=True)\nos._exit(0)\n"
    );
    let out = Command::new("python3").args(["-c", &py]).arg(table).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

const READ: &str = r#"
import sys, json
from deltalake import DeltaTable
dt = DeltaTable(sys.argv[1])
t = dt.to_pyarrow_table(columns=[c for c in ["id", "city", "seq", "_is_current"] if c in dt.schema().to_arrow().names])
rows = sorted(json.dumps(r, sort_keys=True) for r in t.to_pylist())
tombstones = dt.metadata().configuration.get("delta.deletedFileRetentionDuration")
print(json.dumps({"files": len(dt.file_uris()), "version": dt.version(), "rows": rows, "tombstone_retention": tombstones}), flush=True)
import os; os._exit(0)  # see the poller below
"#;

fn read(table: &Path) -> serde_json::Value {
    let out = Command::new("python3").args(["-c", READ]).arg(table).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A `run --once` with the table's debug log: its line about the history
/// files a late row made it read.
fn history_scan(cfg: &Path) -> String {
    let out = Command::new(BIN)
        .args(["run", "--once", "--config"])
        .arg(cfg)
        .env("RUST_LOG", "changelake::table=debug")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{log}");
    let line = log.lines().find(|l| l.contains("late rows: history files scanned"));
    line.unwrap_or_else(|| panic!("no history scan: {log}")).to_string()
}

/// A number a log line names as `name=N`.
fn log_field(line: &str, name: &str) -> u64 {
    let at = line.find(&format!("{name}=")).unwrap_or_else(|| panic!("{name} in {line}"))
        + name.len()
        + 1;
    line[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
}

fn run_once(cfg: &Path) -> String {
    let out = Command::new(BIN).args(["run", "--once", "--config"]).arg(cfg).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{log}");
    log
}

#[test]
fn compaction_checkpoints_and_vacuum_keep_what_readers_see() {
    // Reference: the same extracts without any maintenance.
    let plain = tempfile::tempdir().unwrap();
    extracts(plain.path());
    run_once(&config(plain.path(), "file_rows: 64, compact_min_files: 0, vacuum_retention: off"));

    let tmp = tempfile::tempdir().unwrap();
    extracts(tmp.path());
    let cfg = config(
        tmp.path(),
        "file_rows: 64, compact_min_files: 4, checkpoint_interval: 5, vacuum_retention: off",
    );
    // A reader polling the scd1 table the whole time: every snapshot it reads
    // must be a consistent one — unique keys, and never fewer rows than before
    // (this workload only inserts and updates).
    let poll = r#"
import sys, os, json, time
from deltalake import DeltaTable
path, stop = sys.argv[1], sys.argv[2]
last, reads = 0, 0
while not os.path.exists(stop):
    if not os.path.exists(os.path.join(path, "_delta_log", "00000000000000000000.json")):
        time.sleep(0.01); continue
    ids = DeltaTable(path).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)), f"duplicate keys in one snapshot: {len(ids)} rows"
    assert len(ids) >= last, f"rows went from {last} to {len(ids)}"
    last, reads = len(ids), reads + 1
print(reads, flush=True)
os._exit(0)  # python deltalake 1.6 may abort in interpreter teardown after threaded reads
"#;
    let table = tmp.path().join("lake/bronze/account");
    let stop = tmp.path().join("stop");
    let reader = Command::new("python3")
        .args(["-c", poll])
        .arg(&table)
        .arg(&stop)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = run_once(&cfg);
    std::fs::write(&stop, "").unwrap();
    let r = reader.wait_with_output().unwrap();
    assert!(
        r.status.success(),
        "the concurrent reader saw an inconsistent snapshot: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    let reads: u64 = String::from_utf8_lossy(&r.stdout).trim().parse().unwrap();
    assert!(reads >= 2, "the reader overlapped the run ({reads} reads)");
    assert!(log.contains("small files compacted"), "{log}");
    assert!(log.contains("checkpoint written"), "{log}");

    for t in ["account", "account_history"] {
        let (a, b) = (
            read(&plain.path().join("lake/bronze").join(t)),
            read(&tmp.path().join("lake/bronze").join(t)),
        );
        assert_eq!(a["rows"], b["rows"], "{t}: compaction changed what readers see");
        // scd2 history gets one small file per run: compaction must cut a third at least.
        let (num, den) = if t == "account_history" { (3, 2) } else { (1, 1) };
        assert!(
            b["files"].as_u64().unwrap() * num <= a["files"].as_u64().unwrap() * den,
            "{t}: compacted {} files vs {} without compaction",
            b["files"],
            a["files"]
        );
    }
    let log_dir = table.join("_delta_log");
    let checkpoints = std::fs::read_dir(&log_dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".checkpoint."))
        .count();
    assert!(checkpoints >= 2, "a checkpoint every 5 commits");
    assert!(log_dir.join("_last_checkpoint").exists());

    // Vacuum with a zero retention: only the files of the current snapshot stay on disk.
    let cfg = config(
        tmp.path(),
        "file_rows: 64, compact_min_files: 4, checkpoint_interval: 1, vacuum_retention: 0s",
    );
    write(tmp.path(), "data/account/998.csv", "id,city,seq\n1,almost,99998\n");
    write(tmp.path(), "data/account/999.csv", "id,city,seq\n1,final,99999\n");
    let log = run_once(&cfg);
    assert!(log.contains("files_vacuumed"), "{log}");
    // Vacuum writes no commits of its own, so the commit after it does not
    // find the table moved under it (which cost a full re-read per vacuum).
    assert!(!log.contains("re-reading the table"), "{log}");
    let vacuum_commits = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| std::fs::read_to_string(p).unwrap().contains("\"VACUUM"))
        .count();
    assert_eq!(vacuum_commits, 0);
    let after = read(&table);
    let on_disk = std::fs::read_dir(&table)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".parquet"))
        .count();
    assert_eq!(on_disk as u64, after["files"].as_u64().unwrap(), "removed files were vacuumed");
    assert!(after["rows"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r.as_str().unwrap().contains("\"final\"")));
}

/// Late scd2 rows need their keys' closed versions. Every file carries
/// parquet bloom filters on the business key, so a run reads only the
/// history files that may hold the late keys: the cost follows the batch,
/// not the table's age. The outcome is the rule's (docs/scd2.md, late rows).
#[test]
fn late_rows_read_only_the_history_files_that_may_hold_their_keys() {
    let tmp = tempfile::tempdir().unwrap();
    // Run 0 inserts 200 keys; runs 1..=8 each change 20 keys of their own,
    // so each run closes versions into a history file of its own.
    for run in 0..9u32 {
        let mut csv = String::from("id,city,seq\n");
        let ids = if run == 0 { 0..200 } else { (run - 1) * 20..run * 20 };
        for id in ids {
            csv.push_str(&format!("{id},c{run},{}\n", run * 10_000 + 1000 + id));
        }
        write(tmp.path(), &format!("data/account/{run:03}.csv"), &csv);
    }
    let cfg = config(tmp.path(), "compact_min_files: 0");
    run_once(&cfg);
    // Key 25: c0 (seq 1025, closed) then c2 (seq 21025, current). A late row
    // between them is inserted as a closed, empty-interval version.
    write(tmp.path(), "data/account/100.csv", "id,city,seq\n25,late,5000\n");
    let line = history_scan(&cfg);
    assert!(log_field(&line, "history_files") >= 8, "{line}");
    assert!(
        (1..=2).contains(&log_field(&line, "scanned")),
        "only the file holding key 25 (plus at most a false positive): {line}"
    );

    let rows = read_json(
        &tmp.path().join("lake/bronze/account_history"),
        r#"[[r["city"], r["seq"], r["_is_current"], r["_valid_from"] == r["_valid_to"]] for r in sorted((r for r in t if r["id"] == 25), key=lambda r: r["seq"])]"#,
    );
    assert_eq!(
        rows,
        serde_json::json!([
            ["c0", 1025, false, false],
            ["late", 5000, false, true],
            ["c2", 21025, true, false]
        ])
    );
}

/// History files are cut into row groups of 8,192 rows, each with its own
/// key bloom filter: a late row decodes the key column only of the groups
/// that may hold its key, and finds its key's versions at the right
/// physical rows in any group (a wrong row would pair a key with another
/// key's version).
#[test]
fn late_rows_decode_only_the_history_row_groups_that_may_hold_their_keys() {
    let tmp = tempfile::tempdir().unwrap();
    // Run 0 loads 20,000 keys as c0-<id> (seq 1000); run 1 changes every one
    // (seq 2000), closing 20,000 versions into one history file of three
    // row groups, in key order.
    for run in 0..2u32 {
        let mut csv = String::from("id,city,seq\n");
        for id in 0..20_000 {
            csv.push_str(&format!("{id},c{run}-{id},{}\n", 1000 * (run + 1)));
        }
        write(tmp.path(), &format!("data/account/{run:03}.csv"), &csv);
    }
    let cfg = config(tmp.path(), "compact_min_files: 0");
    run_once(&cfg);
    let run_logged = |name: &str, csv: &str| {
        write(tmp.path(), &format!("data/account/{name}.csv"), csv);
        history_scan(&cfg)
    };
    // Late rows (seq 1500, below the current 2000): equal to the version
    // valid then (c0-<id>) is a no-op; different is inserted.
    let line = run_logged("100", "id,city,seq\n5,c0-5,1500\n6,late,1500\n");
    assert!(line.contains("scanned=1"), "{line}");
    assert!(line.contains("whole=0"), "{line}");
    let groups = log_field(&line, "row_groups");
    assert!((1..=2).contains(&groups), "the first group (plus at most a false positive): {line}");
    // Fetched as far as read: the chosen groups' column chunks and the
    // footer, not the file (each group holds 41% of its rows or less).
    let (read, size) = (log_field(&line, "bytes_read"), log_field(&line, "file_bytes"));
    assert!(read > 0 && read * 100 < size * (41 * groups + 10), "{line}");
    // Keys in the last group, 16,384 rows into the file.
    run_logged("101", "id,city,seq\n19990,c0-19990,1500\n19991,late,1500\n");
    let rows = read_json(
        &tmp.path().join("lake/bronze/account_history"),
        r#"sorted([r["id"], r["city"], r["seq"]] for r in t if r["id"] in (5, 6, 19990, 19991))"#,
    );
    assert_eq!(
        rows,
        serde_json::json!([
            [5, "c0-5", 1000],
            [5, "c1-5", 2000],
            [6, "c0-6", 1000],
            [6, "c1-6", 2000],
            [6, "late", 1500],
            [19990, "c0-19990", 1000],
            [19990, "c1-19990", 2000],
            [19991, "c0-19991", 1000],
            [19991, "c1-19991", 2000],
            [19991, "late", 1500]
        ])
    );
}

/// A restarted process learns scd2 keys that have no current row (deleted)
/// from a few columns of the history files, reading only the newest deleted
/// versions in full: an older row for such a key stays a late, closed
/// version instead of opening the key, and a row at or above the deleted
/// version's sequence reopens it (docs/scd2.md, deletes).
#[test]
fn restarted_scd2_knows_deleted_keys_from_history() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems: {crm: {type: csv, path: 'data/{object}/*.csv'}}\nbronze:\n  tables:\n    account_history:\n      source: {system: crm, object: account}\n      business_key: [id]\n      strategy: scd2\n      merge: {sequence_by: [seq], delete_when: \"op = 'D'\"}\n      layout: {compact_min_files: 0}\n",
    );
    // Each run its own process: the key index is rebuilt from the table every time.
    let runs = [
        "id,op,city,seq\n1,U,c0,10\n2,U,c0,10\n3,U,c0,10\n",
        "id,op,city,seq\n1,U,c1,20\n",
        "id,op,city,seq\n1,D,c1,30\n2,D,c0,30\n",
        "id,op,city,seq\n1,U,old,15\n2,U,back,20\n",
    ];
    for (i, csv) in runs.iter().enumerate() {
        write(tmp.path(), &format!("data/account/{i:03}.csv"), csv);
        run_once(&cfg);
    }
    let py = r#"
import sys, json
from deltalake import DeltaTable
t = DeltaTable(sys.argv[1]).to_pyarrow_table().to_pylist()
print(json.dumps(sorted([r["id"], r["seq"], r["city"], r["_is_current"], r["_is_deleted"], r["_valid_from"] == r["_valid_to"]] for r in t)), flush=True)
import os; os._exit(0)
"#;
    let out = Command::new("python3")
        .args(["-c", py])
        .arg(tmp.path().join("lake/bronze/account_history"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        rows,
        serde_json::json!([
            [1, 10, "c0", false, false, false],
            [1, 15, "old", false, false, true],
            [1, 20, "c1", false, true, false],
            [2, 10, "c0", false, true, false],
            [2, 20, "back", true, false, false],
            [3, 10, "c0", true, false, false],
        ])
    );
}

/// The JSON commit files of a table's log.
fn commit_files(table: &Path) -> usize {
    std::fs::read_dir(table.join("_delta_log"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".json"))
        .count()
}

#[test]
fn log_cleanup_keeps_the_log_bounded_and_progress_intact() {
    let plain = tempfile::tempdir().unwrap();
    extracts_n(plain.path(), 46);
    run_once(&config(plain.path(), "file_rows: 64, compact_min_files: 0, vacuum_retention: off"));

    let tmp = tempfile::tempdir().unwrap();
    extracts_n(tmp.path(), 46);
    let layout = "file_rows: 64, compact_min_files: 4, checkpoint_interval: 3, vacuum_retention: 0s, log_retention: 0s";
    let cfg = config(tmp.path(), layout);
    let log = run_once(&cfg);
    assert!(log.contains("log_files_removed"), "{log}");
    for t in ["account", "account_history"] {
        let table = tmp.path().join("lake/bronze").join(t);
        let b = read(&table);
        // 46 extracts, one commit each at least: versions 0 to 45.
        assert!(b["version"].as_i64().unwrap() >= 45, "{t}: one commit per extract at least");
        let commits = commit_files(&table);
        assert!(commits <= 10, "{t}: {commits} commit files left; the checkpoint covers the rest");
        let a = read(&plain.path().join("lake/bronze").join(t));
        assert_eq!(a["rows"], b["rows"], "{t}: log cleanup changed what readers see");
        // Checkpoints drop tombstones once vacuum is done with them (the
        // 10-minute floor over `vacuum_retention: 0s`); without vacuum, Delta's default.
        assert_eq!(b["tombstone_retention"], "interval 600 seconds", "{t}");
        assert!(a["tombstone_retention"].is_null(), "{t}");
    }
    // Progress lives on in the checkpoints: a second pass applies nothing,
    // a new extract applies exactly itself.
    let table = tmp.path().join("lake/bronze/account");
    let before = read(&table);
    run_once(&cfg);
    assert_eq!(read(&table)["version"], before["version"], "a re-run found every file applied");
    write(tmp.path(), "data/account/999.csv", "id,city,seq\n1,final,99999\n");
    write(plain.path(), "data/account/999.csv", "id,city,seq\n1,final,99999\n");
    run_once(&cfg);
    run_once(&config(plain.path(), "file_rows: 64, compact_min_files: 0, vacuum_retention: off"));
    for t in ["account", "account_history"] {
        let a = read(&plain.path().join("lake/bronze").join(t));
        let b = read(&tmp.path().join("lake/bronze").join(t));
        assert_eq!(a["rows"], b["rows"], "{t}: after the new extract");
    }
}

#[test]
fn a_table_that_would_expire_progress_markers_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    extracts_n(tmp.path(), 1);
    let cfg = config(tmp.path(), "file_rows: 64");
    run_once(&cfg);
    // Another engine sets the property (delta-rs here, as Spark's ALTER TABLE would).
    let py = "import sys, os\nfrom deltalake import DeltaTable\nDeltaTable(sys.argv[1]).alter.set_table_properties({'delta.setTransactionRetentionDuration': 'interval 1 days'}, raise_if_not_exists=False)\nos._exit(0)";
    let out = Command::new("python3")
        .args(["-c", py])
        .arg(tmp.path().join("lake/bronze/account"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    extracts_n(tmp.path(), 2);
    let out = Command::new(BIN).args(["run", "--once", "--config"]).arg(&cfg).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("delta.setTransactionRetentionDuration"), "{err}");
}
