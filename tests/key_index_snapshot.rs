//! Key index snapshots (docs/commit-protocol.md, "Key index snapshots"): a
//! process saves its key index next to the table, the next one loads it
//! instead of reading every data file and replays the commits made since
//! it was saved; a damaged or differently configured snapshot is ignored
//! and the index rebuilt. Either way the table comes out the same as on a
//! table that never had a snapshot.

mod common;

use std::fmt::Write as _;
use std::path::Path;

use common::{cli, ok, show, write};

const HEADER: &str = "id,city,op,seq\n";

/// Rows `from..to` at sequence `seq`; every seventh one a delete.
fn csv(from: u64, to: u64, seq: u64, city: &str) -> String {
    let mut s = String::from(HEADER);
    for id in from..to {
        let op = if id % 7 == 3 && seq > 1 { "D" } else { "U" };
        let _ = writeln!(s, "{id},{city}{},{op},{seq}", id % 13);
    }
    s
}

fn config(extra: &str) -> String {
    format!(
        "systems: {{crm: {{type: csv, path: 'data/*.csv'}}}}\nbronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd2\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\"{extra}}}\n"
    )
}

fn run(cfg: &Path) -> String {
    let out = ok(cli(&["run", "--once"], cfg));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The table as `show` prints it, without the processing-time columns.
fn rows(cfg: &Path) -> Vec<serde_json::Value> {
    show(cfg, "account", &["_execution_id"])
}

#[test]
fn a_saved_key_index_is_used_only_for_the_table_it_describes() {
    let snap = tempfile::tempdir().unwrap();
    let plain = tempfile::tempdir().unwrap();
    let cfg = write(snap.path(), "c.yaml", &config(""));
    let plain_cfg = write(plain.path(), "c.yaml", &config(""));
    let snapshot = snap.path().join("lake/bronze/account/_changelake/key-index");

    write(snap.path(), "data/1.csv", &csv(0, 20_000, 1, "Berlin"));
    let log = run(&cfg);
    assert!(log.contains("key index saved"), "{log}");
    assert!(snapshot.exists());

    // Loaded, not rebuilt; results as on a table whose index is always rebuilt.
    write(snap.path(), "data/2.csv", &csv(5_000, 25_000, 2, "Hamburg"));
    let log = run(&cfg);
    assert!(log.contains("key index loaded from its snapshot"), "{log}");
    write(plain.path(), "data/1.csv", &csv(0, 20_000, 1, "Berlin"));
    run(&plain_cfg);
    write(plain.path(), "data/2.csv", &csv(5_000, 25_000, 2, "Hamburg"));
    std::fs::remove_file(plain.path().join("lake/bronze/account/_changelake/key-index")).unwrap();
    let log = run(&plain_cfg);
    assert!(log.contains("none saved"), "{log}");
    assert_eq!(rows(&cfg), rows(&plain_cfg));

    // A damaged snapshot is rebuilt over.
    let mut bytes = std::fs::read(&snapshot).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&snapshot, bytes).unwrap();
    write(snap.path(), "data/3.csv", &csv(10_000, 12_000, 3, "Paris"));
    let log = run(&cfg);
    assert!(log.contains("damaged"), "{log}");
    write(plain.path(), "data/3.csv", &csv(10_000, 12_000, 3, "Paris"));
    run(&plain_cfg);
    assert_eq!(rows(&cfg), rows(&plain_cfg));

    // A stale one (the table moved on without saving: a crash) is loaded
    // and the later commits replayed.
    let saved = std::fs::read(&snapshot).unwrap();
    write(snap.path(), "data/4.csv", &csv(0, 1_000, 4, "Rome"));
    run(&cfg);
    std::fs::write(&snapshot, saved).unwrap();
    write(snap.path(), "data/5.csv", &csv(500, 1_500, 5, "Oslo"));
    let log = run(&cfg);
    assert!(log.contains("key index loaded from its snapshot"), "{log}");
    assert!(!log.contains("files_replayed=0"), "{log}");
    for (f, seq, city) in [("data/4.csv", 4, "Rome"), ("data/5.csv", 5, "Oslo")] {
        let (from, to) = if seq == 4 { (0, 1_000) } else { (500, 1_500) };
        write(plain.path(), f, &csv(from, to, seq, city));
    }
    run(&plain_cfg);
    assert_eq!(rows(&cfg), rows(&plain_cfg));

    // Other merge settings derive other summaries: not used.
    let tracked = write(snap.path(), "c.yaml", &config(", ignore_columns: [op]"));
    write(snap.path(), "data/6.csv", &csv(0, 10, 6, "Lima"));
    let log = run(&tracked);
    assert!(log.contains("other merge settings"), "{log}");
}

/// Copy-on-write rewrites keep rows in place and give the new file the old
/// one's id, so the key index is only told about rows that moved (a
/// dropped row's place taken by the file's last row) or arrived. Many
/// batches in one process, each updating, deleting and inserting keys
/// spread over every small file (some emptied whole, some later larger than
/// a lowered `file_rows`), must leave exactly the current rows an oracle
/// computes — a wrongly placed entry would make a later batch replace or
/// drop the wrong row.
#[test]
fn copy_on_write_in_place_rewrites_keep_the_key_index_true_across_batches() {
    use std::collections::BTreeMap;
    for strategy in ["scd1", "scd2"] {
        let dir = tempfile::tempdir().unwrap();
        let config = |file_rows: u32| {
            let hard = if strategy == "scd1" { ", delete_mode: hard" } else { "" };
            format!(
                "systems: {{crm: {{type: csv, path: 'data/*.csv'}}}}\nbronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: {strategy}\n      layout: {{file_rows: {file_rows}, spread: 8}}\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\"{hard}}}\n"
            )
        };
        let cfg = write(dir.path(), "c.yaml", &config(64));
        let mut oracle: BTreeMap<u64, String> = BTreeMap::new();
        let mut batch = |n: u64, rows: Vec<(u64, &str)>| {
            let mut s = String::from(HEADER);
            for (id, op) in rows {
                let city = format!("c{n}-{id}");
                let _ = writeln!(s, "{id},{city},{op},{n}");
                if op == "D" {
                    oracle.remove(&id);
                } else {
                    oracle.insert(id, city);
                }
            }
            write(dir.path(), &format!("data/{n:02}.csv"), &s);
        };
        batch(1, (0..1_000).map(|id| (id, "U")).collect());
        // The first keys' files emptied whole.
        batch(2, (0..150).map(|id| (id, "D")).collect());
        for n in 3..8u64 {
            // Every 3rd key updated, every 11th (shifted per batch) deleted, 40 new keys.
            let rows = (0..1_000 + 40 * n)
                .filter_map(|id| match id {
                    _ if id >= 1_000 + 40 * (n - 1) => Some((id, "U")),
                    _ if (id + n) % 11 == 0 => Some((id, "D")),
                    _ if (id + n) % 3 == 0 => Some((id, "U")),
                    _ => None,
                })
                .collect();
            batch(n, rows);
        }
        run(&cfg);
        // Files now hold more rows than a lowered `file_rows`: rewrites spill.
        let cfg = write(dir.path(), "c.yaml", &config(24));
        for n in 8..10u64 {
            batch(n, (0..1_400).filter(|id| (id + n) % 5 == 0).map(|id| (id, "U")).collect());
        }
        run(&cfg);
        let live: Vec<(u64, String)> = rows(&cfg)
            .into_iter()
            .filter(|r| r["_is_deleted"] != serde_json::json!(true))
            .filter(|r| r["_is_current"] != serde_json::json!(false))
            .map(|r| {
                let id = r["id"].as_i64().or_else(|| r["id"].as_str().and_then(|s| s.parse().ok()));
                (id.unwrap() as u64, r["city"].as_str().unwrap().to_string())
            })
            .collect();
        let got: BTreeMap<u64, String> = live.iter().cloned().collect();
        assert_eq!(live.len(), got.len(), "{strategy}: a key with two current rows");
        assert_eq!(got.len(), oracle.len(), "{strategy}: live rows");
        assert_eq!(got, oracle, "{strategy}");
    }
}

/// A snapshot saved before later commits (a crash, or a checkpoint's save
/// followed by more batches) is replayed up to the table's version: for
/// copy-on-write scd1 with hard deletes, scd2, and merge-on-read (rows
/// masked by deletion vectors in files the snapshot knew). The batch after
/// the replay touches every key ever written — updates, deletes, keys
/// deleted before — so a wrongly placed, missing or left-over entry would
/// show as a different table than one whose index was rebuilt.
#[test]
fn a_stale_snapshot_is_replayed_to_the_table_version() {
    let layouts = [
        ("scd1", ", delete_mode: hard", ""),
        ("scd2", "", ""),
        ("scd1", "", "\n      layout: {deletion_vectors: true}"),
        ("scd2", "", "\n      layout: {deletion_vectors: true}"),
    ];
    for (strategy, merge, layout) in layouts {
        let what = format!("{strategy}{merge}{layout}");
        let config = format!(
            "systems: {{crm: {{type: csv, path: 'data/*.csv'}}}}\nbronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: {strategy}{layout}\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\"{merge}}}\n"
        );
        let (replayed, rebuilt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let cfgs = [&replayed, &rebuilt].map(|d| write(d.path(), "c.yaml", &config));
        let snapshot =
            |d: &tempfile::TempDir| d.path().join("lake/bronze/account/_changelake/key-index");
        let batch = |name: &str, text: String| {
            for d in [&replayed, &rebuilt] {
                write(d.path(), name, &text);
            }
        };
        batch("data/1.csv", csv(0, 6_000, 1, "Berlin"));
        cfgs.iter().for_each(|c| drop(run(c)));
        let early = std::fs::read(snapshot(&replayed)).unwrap();
        batch("data/2.csv", csv(2_000, 8_000, 2, "Hamburg"));
        batch("data/3.csv", csv(100, 300, 3, "Paris"));
        cfgs.iter().for_each(|c| drop(run(c)));
        // The process saved at its end; put back the snapshot from before
        // those commits, as after a crash.
        std::fs::write(snapshot(&replayed), &early).unwrap();
        std::fs::remove_file(snapshot(&rebuilt)).unwrap();
        batch("data/4.csv", csv(0, 9_000, 4, "Oslo"));
        let log = run(&cfgs[0]);
        assert!(log.contains("key index loaded from its snapshot"), "{what}: {log}");
        assert!(!log.contains("files_replayed=0"), "{what}: {log}");
        assert!(run(&cfgs[1]).contains("none saved"), "{what}");
        assert_eq!(rows(&cfgs[0]), rows(&cfgs[1]), "{what}");
    }
}
