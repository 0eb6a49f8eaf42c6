//! Row companions of merge-on-read scd2 tables (docs/scd2.md, "Closing
//! without reading column chunks"): closes read the stored rows from them
//! instead of parquet, and the table an independent reader sees is the one
//! a table without companions gets, also when a companion is damaged or
//! missing, or was written before a column was added.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_changelake");

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

fn config(dir: &Path, companions: &str) -> PathBuf {
    write(
        dir,
        "c.yaml",
        &format!(
            "systems: {{crm: {{type: csv, path: 'data/{{object}}/*.csv'}}}}\nbronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd2\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\"}}\n      schema_policy: additive\n      layout: {{file_rows: 64, deletion_vectors: true, compact_min_files: 0, row_companions: {companions}}}\n"
        ),
    )
}

/// Extract `run`: the first loads 300 accounts; later ones update keys
/// spread over every file, delete some, revive some, send a late row, and
/// from run 3 on carry a new column.
fn extract(run: u32) -> String {
    if run == 0 {
        let mut csv = String::from("id,op,city,amount,seq\n");
        for id in 0..300 {
            csv.push_str(&format!("{id},U,c{},{}.25,{id}\n", id % 7, id * 3));
        }
        return csv;
    }
    let tier = run >= 3;
    let mut csv =
        String::from(if tier { "id,op,city,amount,tier,seq\n" } else { "id,op,city,amount,seq\n" });
    for j in 0..45u32 {
        let id = (j * 41 + run * 17) % 320;
        let op = if j % 11 == 0 { "D" } else { "U" };
        let t = if tier { format!("t{},", j % 3) } else { String::new() };
        csv.push_str(&format!("{id},{op},r{run}-{j},{}.5,{t}{}\n", j * run, 10_000 * run + j));
    }
    // A late row: older than what is stored for key 5.
    let t = if tier { "t0," } else { "" };
    csv.push_str(&format!("5,U,late{run},1.0,{t}{}\n", 3));
    csv
}

fn run_once(cfg: &Path) -> String {
    run_logged(cfg, "changelake::table=info")
}

fn run_logged(cfg: &Path, filter: &str) -> String {
    let out = Command::new(BIN)
        .args(["run", "--once", "--config"])
        .arg(cfg)
        .env("RUST_LOG", filter)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{log}");
    log
}

/// Every row as an independent reader sees it, without the processing-time
/// columns (they differ between two tables written at different moments).
fn rows(table: &Path) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/read_delta.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(table)
        .arg("{}")
        .args(["_valid_from", "_valid_to", "_execution_id"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

/// Names of the live current-partition files, from the Delta log.
fn live_current_files(table: &Path) -> BTreeSet<String> {
    let script = "import sys, os\nfrom deltalake import DeltaTable\nfor u in DeltaTable(sys.argv[1]).file_uris():\n    if '_is_current=true' in u: print(u.rsplit('/', 1)[-1])\nsys.stdout.flush(); os._exit(0)\n";
    let out = Command::new("python3").args(["-c", script]).arg(table).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

fn companions(table: &Path) -> BTreeSet<String> {
    let dir = table.join("_changelake/rows");
    let Ok(entries) = std::fs::read_dir(dir) else { return BTreeSet::new() };
    entries
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .map(|n| n.strip_suffix(".rows").unwrap_or(&n).to_string())
        .collect()
}

#[test]
fn scd2_closes_from_row_companions_write_the_table_parquet_reads_write() {
    let with = tempfile::tempdir().unwrap();
    let without = tempfile::tempdir().unwrap();
    let cfg_with = config(with.path(), "auto");
    let cfg_without = config(without.path(), "off");
    let table_with = with.path().join("lake/bronze/account");
    let table_without = without.path().join("lake/bronze/account");
    for run in 0..6u32 {
        for dir in [with.path(), without.path()] {
            write(dir, &format!("data/account/{run:03}.csv"), &extract(run));
        }
        if run == 2 {
            // One companion damaged, one lost: both tables must still agree,
            // and the next close rebuilds them.
            let mut names: Vec<String> = companions(&table_with).into_iter().collect();
            assert!(names.len() >= 2, "companions were written: {names:?}");
            let dir = table_with.join("_changelake/rows");
            let damaged = dir.join(format!("{}.rows", names.pop().unwrap()));
            let mut bytes = std::fs::read(&damaged).unwrap();
            bytes[20] ^= 0x55; // inside the schema: caught by its checksum
            std::fs::write(&damaged, bytes).unwrap();
            std::fs::remove_file(dir.join(format!("{}.rows", names.pop().unwrap()))).unwrap();
        }
        let log = run_once(&cfg_with);
        if run == 2 {
            assert!(log.contains("row companion not usable"), "damage noticed: {log}");
            assert!(log.contains("row companions built"), "missing companions rebuilt: {log}");
        }
        run_once(&cfg_without);
        assert_eq!(rows(&table_with), rows(&table_without), "after run {run}");
    }
    let all = rows(&table_with);
    assert!(all.iter().any(|r| r.contains("\"tier\": \"t1\"")), "the added column is there");
    assert!(all.iter().any(|r| r.contains("late")), "late rows went into history");
    // Exactly the live current files have companions: those of removed
    // files are gone, and the table without them has none.
    assert_eq!(companions(&table_with), live_current_files(&table_with));
    assert!(companions(&table_without).is_empty());
}

/// A table written without companions (as before they existed) gets them
/// over its next runs, at most 16 files per run, and reads the same.
#[test]
fn a_table_written_without_companions_gets_them_a_few_files_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let reference = tempfile::tempdir().unwrap();
    let small = |d: &Path, companions: &str| {
        let cfg = config(d, companions);
        let text = std::fs::read_to_string(&cfg).unwrap().replace("file_rows: 64", "file_rows: 8");
        std::fs::write(&cfg, text).unwrap();
        cfg
    };
    let table = dir.path().join("lake/bronze/account");
    for run in 0..4u32 {
        for d in [dir.path(), reference.path()] {
            write(d, &format!("data/account/{run:03}.csv"), &extract(run));
        }
        // Two runs as an older version wrote them, then companions on.
        let log = run_once(&small(dir.path(), if run < 2 { "off" } else { "auto" }));
        run_once(&small(reference.path(), "off"));
        assert_eq!(rows(&table), rows(&reference.path().join("lake/bronze/account")), "run {run}");
        let kept = companions(&table).len();
        match run {
            0 | 1 => assert_eq!(kept, 0),
            2 => {
                assert!(log.contains("row companions left to build in later runs"), "{log}");
                assert!((1..=16 + 8).contains(&kept), "{kept} companions after the first run");
            }
            _ => assert!(kept > 16, "more companions a run later: {kept}"),
        }
    }
}

/// Extract `run` of the late-row test: 120 accounts loaded at sequence 1000;
/// then per run updates (new sequence, tracked change), an untracked-only
/// change, deletes of keys 100..=102 in run 2 and a revival of one in run 4,
/// and late rows of every kind: below every version, between two versions,
/// equal to the version valid at their sequence (a no-op), equal to an
/// earlier late row, and one for a deleted key.
fn late_extract(run: u32) -> String {
    let mut csv = String::from("id,op,city,note,seq\n");
    if run == 0 {
        for id in 0..120 {
            csv.push_str(&format!("{id},U,c{},n,1000\n", id % 5));
        }
        return csv;
    }
    let now = 1000 + 100 * run;
    for j in 0..20u32 {
        let id = (j * 7 + run * 3) % 100;
        csv.push_str(&format!("{id},U,r{run}-{j},n,{now}\n"));
    }
    // Only the untracked `note` changes: updated in place.
    csv.push_str(&format!("110,U,c0,changed{run},{now}\n"));
    if run == 2 {
        for id in 100..103 {
            csv.push_str(&format!("{id},D,,,{now}\n"));
        }
    }
    if run == 4 {
        csv.push_str(&format!("100,U,back,n,{now}\n"));
    }
    let updated_now = |id: u32| (0..20u32).any(|u| (u * 7 + run * 3) % 100 == id);
    for j in 0..12u32 {
        let (id, city, seq) = match j % 4 {
            // Below every version.
            0 => ((j * 11 + run * 5 + 50) % 100, format!("late{run}"), 5 + run),
            // A key updated last run, as loaded, just after the load: the
            // version valid then is the loaded one, so nothing changes.
            1 => {
                let id = (j * 7 + (run - 1) * 3) % 100;
                (id, format!("c{}", id % 5), 1001)
            }
            // Between the last run's versions and this run's.
            2 => ((j * 11 + run * 5 + 50) % 100, format!("mid{run}"), 1000 + 100 * (run - 1) + 50),
            // Equal to run 1's late row, below it or above it.
            _ => ((j * 11 + run * 5 + 50) % 100, "late1".to_string(), 5 + (j / 4) % 3),
        };
        // Keys this run updates are left alone (the update would win the batch).
        if !updated_now(id) {
            csv.push_str(&format!("{id},U,{city},n,{seq}\n"));
        }
    }
    // Key 60: a late row in run 1, then later ones equal to it at higher
    // (still late) sequences: the version valid then is run 1's late row.
    if !updated_now(60) {
        csv.push_str(&format!("60,U,early,n,{}\n", if run == 1 { 20 } else { 30 + run }));
    }
    if run >= 3 {
        // A late row for a key deleted in run 2: it has no current row to
        // carry its brief (kept apart, or else its history is read).
        csv.push_str("102,U,late-deleted,n,7\n");
    }
    csv
}

/// The late-row tests' table: `note` is not tracked.
fn late_config(dir: &Path, companions: &str) -> PathBuf {
    let cfg = config(dir, companions);
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "merge: {sequence_by: [seq]",
        "merge: {ignore_columns: [note], sequence_by: [seq]",
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// The late-row tests' table twice: with row companions and without.
struct LatePair {
    with: tempfile::TempDir,
    without: tempfile::TempDir,
    cfg_with: PathBuf,
    cfg_without: PathBuf,
}

impl LatePair {
    fn new() -> LatePair {
        let (with, without) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let cfg_with = late_config(with.path(), "auto");
        let cfg_without = late_config(without.path(), "off");
        LatePair { with, without, cfg_with, cfg_without }
    }
}

/// Late scd2 rows compare with their key's closed versions in brief, read
/// with its current row from the row companion (docs/scd2.md, "Late rows
/// without reading history"), and give the table that reading history gives.
#[test]
fn late_rows_read_their_key_s_brief_not_history_and_agree_with_it() {
    let LatePair { with, without, cfg_with, cfg_without } = LatePair::new();
    let table_with = with.path().join("lake/bronze/account");
    let table_without = without.path().join("lake/bronze/account");
    let (mut in_brief, mut scans_without) = (0usize, 0usize);
    for run in 0..7u32 {
        for dir in [with.path(), without.path()] {
            write(dir, &format!("data/account/{run:03}.csv"), &late_extract(run));
        }
        let log = run_logged(&cfg_with, "changelake::table=debug");
        for line in log.lines().filter(|l| l.contains("late rows:")) {
            eprintln!("run {run}: {line}");
            let n = line.split("in_brief=").nth(1).and_then(|t| t.split(' ').next());
            in_brief += n.and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
            if run < 3 {
                // No deleted key has a late row yet: nothing is scanned.
                assert!(line.contains("every key's history in brief"), "run {run}: {line}");
            }
        }
        let log_without = run_logged(&cfg_without, "changelake::table=debug");
        scans_without += log_without.matches("history files scanned").count();
        assert_eq!(rows(&table_with), rows(&table_without), "after run {run}");
    }
    assert!(in_brief >= 30, "late rows served from briefs: {in_brief}");
    assert!(scans_without >= 5, "the table without companions read history: {scans_without}");
    let all = rows(&table_with);
    for made in ["late1", "mid3", "late-deleted", "back"] {
        assert!(all.iter().any(|r| r.contains(made)), "{made} is in the table");
    }
    let early = all.iter().filter(|r| r.contains("\"early\"")).count();
    assert_eq!(early, 1, "later equal late rows are no-ops");
}

/// A deleted key has no current row whose companion could carry its closed
/// versions in brief: the process that deleted it keeps them, and saves
/// them with the key index (docs/scd2.md, "Late rows without reading
/// history"). Late rows for it then read no history, in that process's
/// later batches and after a restart; a restart that replays a commit the
/// saved briefs do not know (a process killed right after it) drops the
/// brief of every key that commit wrote history for, and those keys read
/// history. Each step gives the table that reading history gives.
#[test]
fn late_rows_of_deleted_keys_read_their_kept_brief_not_history() {
    let LatePair { with, without, cfg_with, cfg_without } = LatePair::new();
    let table_with = with.path().join("lake/bronze/account");
    let table_without = without.path().join("lake/bronze/account");
    let same_tables = || assert_eq!(rows(&table_with), rows(&table_without));
    let add = |name: &str, text: &str| {
        for dir in [with.path(), without.path()] {
            write(dir, &format!("data/account/{name}.csv"), text);
        }
    };
    let in_brief = |log: &str| {
        let late: Vec<&str> = log.lines().filter(|l| l.contains("late rows:")).collect();
        !late.is_empty() && late.iter().all(|l| l.contains("every key's history in brief"))
    };
    // One process: the load, deletes of keys 100..=102 (file 2), a revival
    // of key 100 (file 4), late rows for key 102 (files 3 to 5).
    for run in 0..6u32 {
        add(&format!("{run:03}"), &late_extract(run));
    }
    let log = run_logged(&cfg_with, "changelake::table=debug");
    assert!(in_brief(&log), "{log}");
    assert!(log.matches("late rows:").count() >= 5, "{log}");
    run_logged(&cfg_without, "changelake::table=info");
    same_tables();

    // A new process: the briefs were saved with the key index.
    add("006", "id,op,city,note,seq\n102,U,later-deleted,n,6\n");
    let log = run_logged(&cfg_with, "changelake::table=debug");
    assert!(in_brief(&log), "{log}");
    run_logged(&cfg_without, "changelake::table=info");
    same_tables();

    // Killed right after committing another late version of key 102: the
    // saved index and briefs stay behind that commit.
    add("007", "id,op,city,note,seq\n102,U,latest-deleted,n,5\n");
    let killed = Command::new(BIN)
        .args(["run", "--once", "--config"])
        .arg(&cfg_with)
        .env("CHANGELAKE_FAULT", "after_delta_commit:1")
        .output()
        .unwrap();
    assert!(!killed.status.success(), "{}", String::from_utf8_lossy(&killed.stderr));
    run_logged(&cfg_without, "changelake::table=info");
    same_tables();
    // The same row again, equal to the version the killed run added: a
    // no-op, which key 102's saved brief (without that version) would
    // have missed. Its brief was dropped in the replay: history is read.
    add("008", "id,op,city,note,seq\n102,U,latest-deleted,n,5\n");
    let log = run_logged(&cfg_with, "changelake::table=debug");
    assert!(log.contains("history files scanned"), "{log}");
    run_logged(&cfg_without, "changelake::table=info");
    same_tables();
    let all = rows(&table_with);
    for made in ["late-deleted", "later-deleted", "latest-deleted", "back"] {
        assert!(all.iter().any(|r| r.contains(made)), "{made} is in the table");
    }
    assert_eq!(all.iter().filter(|r| r.contains("\"latest-deleted\"")).count(), 1);
}
