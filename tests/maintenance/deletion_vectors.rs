//! Merge-on-read against copy-on-write, read back by an independent reader.

use super::*;

const SCAN: &str = r#"
import sys, json
import pyarrow as pa
from deltalake import DeltaTable
dt = DeltaTable(sys.argv[1])
names = [f.name for f in pa.schema(dt.schema().to_arrow())]
cols = [c for c in ["id", "city", "seq", "_is_current", "_is_deleted"] if c in names]
t = pa.RecordBatchReader.from_stream(dt.scan(columns=cols)).read_all()
rows = sorted(json.dumps(r, sort_keys=True) for r in t.to_pylist())
dvs = pa.RecordBatchReader.from_stream(dt.deletion_vectors()).read_all().num_rows if "deletionVectors" in (dt.protocol().reader_features or []) else 0
print(json.dumps({"rows": rows, "files_with_dv": dvs}), flush=True)
import os; os._exit(0)
"#;

fn scan(table: &Path) -> serde_json::Value {
    let out = Command::new("python3").args(["-c", SCAN]).arg(table).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Merge-on-read (`layout.deletion_vectors`) gives exactly the rows
/// copy-on-write gives, read back by delta-rs' DataFusion reader (which
/// applies deletion vectors), across process restarts (DVs re-read at open),
/// with updates, hard deletes (scd1) and closed versions (scd2).
#[test]
fn deletion_vectors_read_back_exactly_like_copy_on_write() {
    let make = |dir: &Path, layout: &str| {
        let mut csv = String::from("id,op,city,seq\n");
        for id in 0..400 {
            csv.push_str(&format!("{id},U,c0,{id}\n"));
        }
        write(dir, "data/account/000.csv", &csv);
        write(
            dir,
            "c.yaml",
            &format!(
                "systems: {{crm: {{type: csv, path: 'data/{{object}}/*.csv'}}}}\nbronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd1\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\", delete_mode: hard}}\n      layout: {{{layout}}}\n    account_history:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd2\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\"}}\n      layout: {{{layout}}}\n"
            ),
        )
    };
    let cow = tempfile::tempdir().unwrap();
    let mor = tempfile::tempdir().unwrap();
    let (cow_cfg, mor_cfg) = (
        make(cow.path(), "file_rows: 128"),
        make(mor.path(), "file_rows: 128, deletion_vectors: true, checkpoint_interval: 2"),
    );
    for (cfg, _) in [(&cow_cfg, 0), (&mor_cfg, 1)] {
        run_once(cfg);
    }
    // Later extracts, each its own process: updates spread over all files, deletes, revivals.
    for run in 1..6u32 {
        let mut csv = String::from("id,op,city,seq\n");
        for j in 0..40u32 {
            let id = (j * 37 + run * 11) % 420;
            let op = if j % 9 == 0 { "D" } else { "U" };
            csv.push_str(&format!("{id},{op},c{run},{}\n", 1000 * run + j));
        }
        for dir in [cow.path(), mor.path()] {
            write(dir, &format!("data/account/{run:03}.csv"), &csv);
        }
        run_once(&cow_cfg);
        run_once(&mor_cfg);
    }
    for t in ["account", "account_history"] {
        let (a, b) = (
            scan(&cow.path().join("lake/bronze").join(t)),
            scan(&mor.path().join("lake/bronze").join(t)),
        );
        assert_eq!(a["rows"], b["rows"], "{t}: merge-on-read differs from copy-on-write");
        assert!(b["files_with_dv"].as_u64().unwrap() > 0, "{t}: deletion vectors were written");
        // Checkpoints carry the DV descriptors that the restarts re-read.
        let log = mor.path().join("lake/bronze").join(t).join("_delta_log");
        assert!(std::fs::read_dir(&log).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".checkpoint.")));
        // changelake's own reader (show) agrees too.
        let show = |cfg: &Path| {
            let out = Command::new(BIN)
                .args(["show", t, "--format", "csv", "--config"])
                .arg(cfg)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8(out.stdout).unwrap();
            let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
            let keep: Vec<usize> = header
                .iter()
                .enumerate()
                .filter(|(_, h)| ["id", "city", "seq", "_is_current"].contains(h))
                .map(|(i, _)| i)
                .collect();
            let mut rows: Vec<String> = text
                .lines()
                .skip(1)
                .map(|l| {
                    l.split(',')
                        .enumerate()
                        .filter(|(i, _)| keep.contains(i))
                        .map(|(_, v)| v)
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect();
            rows.sort();
            rows
        };
        assert_eq!(show(&cow_cfg), show(&mor_cfg), "{t}: show differs");
    }

    let table = mor.path().join("lake/bronze/account");
    let files = |ext: &str| {
        let mut v: Vec<String> = std::fs::read_dir(&table)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(ext))
            .collect();
        v.sort();
        v
    };
    // Distinct deletion-vector files the live adds of the latest checkpoint name.
    let live_dvs = || {
        let py = r#"
import sys, json, os, pyarrow.parquet as pq
log = os.path.join(sys.argv[1], "_delta_log")
v = json.load(open(os.path.join(log, "_last_checkpoint")))["version"]
t = pq.read_table(os.path.join(log, f"{v:020}.checkpoint.parquet"), columns=["add"]).column("add").to_pylist()
print(len({a["deletionVector"]["pathOrInlineDv"] for a in t if a and a.get("deletionVector")}))
"#;
        let out = Command::new("python3").args(["-c", py]).arg(&table).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().parse::<usize>().unwrap()
    };
    let dv_files = files(".bin");
    assert!(dv_files.len() > live_dvs(), "replaced deletion vectors are on disk: {dv_files:?}");

    // A deletion vector counts from when it was replaced, not from when it
    // was written: with every DV file written "two hours ago", a run that
    // replaces some of them and vacuums with a one-hour retention keeps them
    // all, and the version before that run still reads.
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    for f in &dv_files {
        std::fs::File::options()
            .write(true)
            .open(table.join(f))
            .unwrap()
            .set_modified(two_hours_ago)
            .unwrap();
    }
    let version_before = std::fs::read_dir(table.join("_delta_log"))
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .strip_suffix(".json")
                .and_then(|v| v.parse::<u64>().ok())
        })
        .max()
        .unwrap();
    let hour_cfg = mor.path().join("hour.yaml");
    let text = std::fs::read_to_string(&mor_cfg)
        .unwrap()
        .replace("checkpoint_interval: 2", "checkpoint_interval: 1, vacuum_retention: 1h");
    std::fs::write(&hour_cfg, text).unwrap();
    let mut csv = String::from("id,op,city,seq\n");
    for id in (0..400).step_by(7) {
        csv.push_str(&format!("{id},U,hour,{}\n", 50_000 + id));
    }
    write(mor.path(), "data/account/900.csv", &csv);
    let log = run_once(&hour_cfg);
    assert!(log.contains("files_vacuumed"), "{log}");
    for f in &dv_files {
        assert!(table.join(f).exists(), "{f} was replaced just now: kept for the retention");
    }
    let py = "import sys, pyarrow as pa\nfrom deltalake import DeltaTable\ndt = DeltaTable(sys.argv[1], version=int(sys.argv[2]))\nprint(pa.RecordBatchReader.from_stream(dt.scan()).read_all().num_rows, flush=True)\nimport os; os._exit(0)\n";
    let out = Command::new("python3")
        .args(["-c", py])
        .arg(&table)
        .arg(version_before.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the previous version must stay readable: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Vacuum with a zero retention also deletes deletion vectors that newer
    // ones replaced (their data file stays live, so delta-rs' vacuum never
    // deletes them) and files no commit references (a writer that died
    // before committing), only under our own names and never in a nested
    // directory; what readers see stays.
    let dv_files = files(".bin");
    assert!(dv_files.len() > live_dvs(), "replaced deletion vectors are on disk: {dv_files:?}");
    let before: Vec<_> = ["account", "account_history"]
        .iter()
        .map(|t| scan(&mor.path().join("lake/bronze").join(t)))
        .collect();

    let history = mor.path().join("lake/bronze/account_history");
    let current_dir = std::fs::read_dir(&history)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("_is_current="))
        .unwrap();
    let orphans = [
        table.join("part-0000000000-00000-crashed.zstd.parquet"),
        current_dir.join("part-0000000000-00000-crashed.zstd.parquet"),
    ];
    let bystanders = [
        table.join("notes.txt"),
        table.join("nested/part-0000000000-00000-other-table.zstd.parquet"),
    ];
    for f in orphans.iter().chain(&bystanders) {
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, b"never committed").unwrap();
        // Orphans are only taken once an hour old, whatever the retention.
        std::fs::File::options().write(true).open(f).unwrap().set_modified(two_hours_ago).unwrap();
    }
    // Live files aged too: only the checkpoint's adds keep them.
    for dir in [table.clone(), current_dir.clone()] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                std::fs::File::options()
                    .write(true)
                    .open(&p)
                    .unwrap()
                    .set_modified(two_hours_ago)
                    .unwrap();
            }
        }
    }
    let fresh = table.join("part-0000000000-00000-another-writer.zstd.parquet");
    std::fs::write(&fresh, b"awaiting its commit").unwrap();
    let vacuum_cfg = mor.path().join("vacuum.yaml");
    let text = std::fs::read_to_string(&mor_cfg)
        .unwrap()
        .replace("checkpoint_interval: 2", "checkpoint_interval: 1, vacuum_retention: 0s");
    std::fs::write(&vacuum_cfg, text).unwrap();
    write(mor.path(), "data/account/999.csv", "id,op,city,seq\n1,U,final,99999\n");
    let log = run_once(&vacuum_cfg);
    assert!(log.contains("files_vacuumed"), "{log}");
    let after = scan(&table);
    for f in &orphans {
        assert!(!f.exists(), "{f:?}: never committed, older than the retention: vacuumed");
    }
    for f in &bystanders {
        assert!(f.exists(), "{f:?}: not one of this table's files: left alone");
    }
    assert!(fresh.exists(), "a file younger than an hour may still be committed: left alone");
    assert_eq!(
        files(".bin").len(),
        live_dvs(),
        "only live deletion vectors stay: {:?}",
        files(".bin")
    );
    let mut expect: Vec<String> = before[0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    expect.retain(|r| !r.contains("\"id\": 1,"));
    let mut got: Vec<String> =
        after["rows"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_string()).collect();
    assert!(got.iter().any(|r| r.contains("\"id\": 1,") && r.contains("\"final\"")), "{got:?}");
    got.retain(|r| !r.contains("\"id\": 1,"));
    assert_eq!(got, expect, "vacuum changed what readers see");
}
