//! End-to-end tests of the binary on CSV input, read back by an independent
//! Delta reader (Python `deltalake`), plus layout, protection and crash tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use changelake::config::Config;
use changelake::engine::{Mark, TableRunner};
use changelake::source::file::read_csv;

const BIN: &str = env!("CARGO_BIN_EXE_changelake");

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn acceptance_scenarios_read_back_with_python_deltalake() {
    let dir = manifest().join("tests/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let out = Command::new("python3")
        .arg(dir.join("run.py"))
        .args(&files)
        .env("CHANGELAKE_BIN", BIN)
        .output()
        .expect("python3 runs");
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "scenarios failed:\n{text}");
    assert!(text.contains(&format!("{} passed, 0 failed", files.len())), "{text}");
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

fn run(cfg: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(BIN);
    c.args(["run", "--config"]).arg(cfg).arg("--once");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn show(cfg: &Path, table: &str) -> String {
    let out = Command::new(BIN)
        .args(["show", table, "--format", "jsonl", "--config"])
        .arg(cfg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

const SCD2_CFG: &str = "systems: {crm: {type: csv, path: 'data/*.csv'}}\nbronze:\n  tables:\n    customer:\n      source: {system: crm, object: account}\n      business_key: [id]\n      strategy: scd2\n      merge: {sequence_by: [seq], delete_when: \"op = 'D'\"}\n";

/// Commits in the `customer` table's log under `dir`.
fn customer_commits(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("lake/bronze/customer/_delta_log"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json"))
        .count()
}

/// Strips the processing-time columns, which differ between runs by design.
fn stable(jsonl: &str) -> Vec<serde_json::Value> {
    jsonl
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let m = v.as_object_mut().unwrap();
            m.remove("_valid_from");
            m.remove("_valid_to");
            v
        })
        .collect()
}

#[test]
fn glob_runs_files_in_lexical_order_and_skips_unchanged_files() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", SCD2_CFG);
    write(tmp.path(), "data/2.csv", "id,op,city,seq\n1,U,Hamburg,3\n");
    write(tmp.path(), "data/1.csv", "id,op,city,seq\n1,U,Berlin,2\n");
    assert!(run(&cfg, &[]).status.success());
    let rows = stable(&show(&cfg, "customer"));
    let cities: Vec<_> = rows
        .iter()
        .map(|r| (r["city"].as_str().unwrap().to_string(), r["_is_current"].as_bool().unwrap()))
        .collect();
    assert_eq!(cities, vec![("Berlin".into(), false), ("Hamburg".into(), true)]);
    // Each commit says what it applied, as JSON a log reader can query.
    let log = tmp.path().join("lake/bronze/customer/_delta_log");
    let first = std::fs::read_to_string(log.join(format!("{:020}.json", 0))).unwrap();
    let info: serde_json::Value = first
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|a| a.get("commitInfo").is_some())
        .unwrap();
    let stats = &info["commitInfo"]["changelake"]["stats"];
    assert_eq!(
        (stats["rows_in"].as_u64(), stats["inserted"].as_u64()),
        (Some(1), Some(1)),
        "{info}"
    );
    let commits = customer_commits(tmp.path());
    assert!(run(&cfg, &[]).status.success());
    let after = customer_commits(tmp.path());
    assert_eq!(commits, after, "re-running unchanged files commits nothing");
}

/// Each file's batch is logged when it commits, not when the pass ends: a
/// pass that stops at a bad file has already reported the files before it.
#[test]
fn each_file_batch_is_logged_as_it_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", SCD2_CFG);
    write(tmp.path(), "data/1.csv", "id,op,city,seq\n1,U,Berlin,2\n2,U,Bonn,2\n");
    // No business-key column: the pass stops here with an error.
    write(tmp.path(), "data/2.csv", "op,city,seq\nU,Hamburg,3\n");
    let out = run(&cfg, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("business key column `id` is missing"), "{err}");
    let committed: Vec<&str> = err.lines().filter(|l| l.contains("batch committed")).collect();
    assert_eq!(committed.len(), 1, "the first file's batch is reported:\n{err}");
    assert!(committed[0].contains("rows=2") && committed[0].contains("data/1.csv"), "{err}");
    let rows = stable(&show(&cfg, "customer"));
    assert_eq!(rows.len(), 2, "the first file's batch stays committed");
}
#[test]
fn crash_between_parquet_write_and_commit_loses_and_repeats_nothing() {
    let files = [
        ("data/1.csv", "id,op,city,seq\n1,U,Berlin,2\n2,U,Bonn,1\n"),
        ("data/2.csv", "id,op,city,seq\n1,U,Hamburg,3\n2,D,,2\n"),
        ("data/3.csv", "id,op,city,seq\n1,U,Paris,1\n3,U,Köln,1\n"),
    ];
    let clean = tempfile::tempdir().unwrap();
    let cfg = write(clean.path(), "c.yaml", SCD2_CFG);
    for (n, t) in files {
        write(clean.path(), n, t);
    }
    assert!(run(&cfg, &[]).status.success());
    let want = stable(&show(&cfg, "customer"));

    for fault in [
        "after_parquet_write:1",
        "after_parquet_write:2",
        "after_delta_commit:1",
        "after_delta_commit:2",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = write(tmp.path(), "c.yaml", SCD2_CFG);
        for (n, t) in files {
            write(tmp.path(), n, t);
        }
        let crashed = run(&cfg, &[("CHANGELAKE_FAULT", fault)]);
        assert!(!crashed.status.success(), "{fault}: the fault point must abort");
        assert!(run(&cfg, &[]).status.success(), "{fault}: restart");
        assert_eq!(
            stable(&show(&cfg, "customer")),
            want,
            "{fault}: restart must equal an uninterrupted run"
        );
    }
}

/// A file larger than the batch limits runs chunk by chunk, each chunk a
/// run: the table equals the one the same rows give as one file per chunk,
/// and a crash at any chunk resumes after the last committed one.
#[test]
fn large_files_run_in_chunks_and_resume_after_the_last_committed_chunk() {
    let chunks = [
        "id,op,city,seq\n1,U,Berlin,2\n2,U,Bonn,1\n",
        "id,op,city,seq\n1,U,Hamburg,3\n2,D,,2\n",
        "id,op,city,seq\n1,U,Paris,1\n3,U,\"Köln\nam Rhein\",1\n",
    ];
    let per_file = tempfile::tempdir().unwrap();
    let cfg = write(per_file.path(), "c.yaml", SCD2_CFG);
    for (i, t) in chunks.iter().enumerate() {
        write(per_file.path(), &format!("data/{i}.csv"), t);
    }
    assert!(run(&cfg, &[]).status.success());
    let want = stable(&show(&cfg, "customer"));
    assert_eq!(want.len(), 5, "{want:?}");

    // The same rows as one file, two records per batch.
    let one_file = format!("{}{}{}", chunks[0], &chunks[1][15..], &chunks[2][15..]);
    let chunked = format!("{SCD2_CFG}batching: {{max_rows: 2}}\n");
    // (fault, whether a chunk had committed before it: the restart resumes)
    for (fault, resumes) in [
        (None, false),
        (Some("after_parquet_write:1"), false),
        (Some("after_parquet_write:3"), true),
        (Some("after_delta_commit:1"), true),
        (Some("after_delta_commit:2"), true),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = write(tmp.path(), "c.yaml", &chunked);
        write(tmp.path(), "data/all.csv", &one_file);
        if let Some(f) = fault {
            let crashed = run(&cfg, &[("CHANGELAKE_FAULT", f)]);
            assert!(!crashed.status.success(), "{f}: the fault point must abort");
        }
        let out = run(&cfg, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{fault:?}: {err}");
        let resumed = err.contains("resuming a partly read file");
        assert_eq!(resumed, resumes, "{fault:?}: {err}");
        assert_eq!(stable(&show(&cfg, "customer")), want, "{fault:?}: equals one file per chunk");
        // Done: a second pass skips the file.
        let versions = customer_commits(tmp.path());
        assert!(run(&cfg, &[]).status.success());
        assert_eq!(customer_commits(tmp.path()), versions, "{fault:?}: the file is done");
    }
}

#[test]
fn refuses_a_table_with_another_strategy_or_not_created_by_changelake() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", SCD2_CFG);
    write(tmp.path(), "data/1.csv", "id,op,city,seq\n1,U,Berlin,2\n");
    assert!(run(&cfg, &[]).status.success());
    let cfg1 = write(tmp.path(), "c1.yaml", &SCD2_CFG.replace("scd2", "scd1"));
    write(tmp.path(), "data/2.csv", "id,op,city,seq\n1,U,Hamburg,3\n");
    let out = run(&cfg1, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("strategy scd2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A Delta table written by someone else.
    let py = "import sys, os, pyarrow as pa; from deltalake import write_deltalake; write_deltalake(sys.argv[1], pa.table({'id': [1]})); sys.stdout.flush(); os._exit(0)";
    let foreign = tmp.path().join("lake/bronze/customer2");
    assert!(Command::new("python3").args(["-c", py]).arg(&foreign).status().unwrap().success());
    let cfg2 = write(tmp.path(), "c2.yaml", &SCD2_CFG.replace("customer:", "customer2:"));
    let out = run(&cfg2, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not created by changelake"));
}

#[test]
fn check_exit_codes_and_error_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let good = write(tmp.path(), "good.yaml", SCD2_CFG);
    assert_eq!(
        Command::new(BIN).args(["check", "--config"]).arg(&good).status().unwrap().code(),
        Some(0)
    );
    let bad = write(
        tmp.path(),
        "bad.yaml",
        &SCD2_CFG.replace("strategy: scd2", "strategy: scd3\n      extra: 1"),
    );
    let out = Command::new(BIN).args(["check", "--config"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bronze.tables.customer.strategy")
            && err.contains("bronze.tables.customer.extra"),
        "{err}"
    );
    assert_eq!(
        Command::new(BIN).arg("frobnicate").status().unwrap().code(),
        Some(2),
        "usage errors exit 2"
    );
}

#[test]
fn unconvertible_values_go_to_the_dead_letter_table_and_the_batch_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", SCD2_CFG);
    write(tmp.path(), "data/1.csv", "id,op,city,seq\n1,U,Berlin,2\n");
    write(tmp.path(), "data/2.csv", "id,op,city,seq\n2,U,Bonn,not-a-number\n3,U,Köln,1\n");
    assert!(run(&cfg, &[]).status.success());
    assert_eq!(show(&cfg, "customer").lines().count(), 2);
    let py = "import sys, os, json; from deltalake import DeltaTable; print(json.dumps([r['error'] for r in DeltaTable(sys.argv[1]).to_pyarrow_table().to_pylist()])); sys.stdout.flush(); os._exit(0)";
    let out = Command::new("python3")
        .args(["-c", py])
        .arg(tmp.path().join("lake/_dead_letters"))
        .output()
        .unwrap();
    let errors: Vec<String> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains("seq"), "{errors:?}");
    // The dead-letter table is shown like any other, with --where.
    let dead = show(&cfg, "_dead_letters");
    assert_eq!(dead.lines().count(), 1, "{dead}");
    let row: serde_json::Value = serde_json::from_str(dead.lines().next().unwrap()).unwrap();
    assert_eq!(row["error"].as_str(), Some(errors[0].as_str()));
    let none = Command::new(BIN)
        .args([
            "show",
            "_dead_letters",
            "--where",
            "topic = 'no such source'",
            "--format",
            "csv",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(none.status.success(), "{}", String::from_utf8_lossy(&none.stderr));
    assert_eq!(String::from_utf8_lossy(&none.stdout).lines().count(), 1, "the header alone");
}

/// Layout (src/table/plan.rs): a run touching 1% of the keys rewrites only the files holding them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_one_percent_update_rewrites_only_files_holding_touched_keys() {
    for strategy in ["scd1", "scd2"] {
        let tmp = tempfile::tempdir().unwrap();
        let yaml = SCD2_CFG.replace("scd2", strategy);
        let cfg = Config::parse(&yaml, tmp.path()).unwrap();
        let mut runner = TableRunner::open(&cfg, &cfg.tables[0]).await.unwrap();
        let mut load = String::from("id,op,city,seq\n");
        for id in 0..10_000 {
            load.push_str(&format!("{id},U,c{id},1\n"));
        }
        let r = runner
            .run_batch(
                read_csv(Path::new("load.csv"), load.as_bytes(), b',').unwrap(),
                vec![Mark { app: "load".into(), version: 1, partition: None }],
            )
            .await
            .unwrap();
        let total = r.files_added;
        assert!(total >= 8, "{strategy}: a 10k-key load spreads over several files, got {total}");
        let mut upd = String::from("id,op,city,seq\n");
        for id in 5_000..5_100 {
            upd.push_str(&format!("{id},U,changed{id},2\n"));
        }
        let r = runner
            .run_batch(
                read_csv(Path::new("upd.csv"), upd.as_bytes(), b',').unwrap(),
                vec![Mark { app: "upd".into(), version: 1, partition: None }],
            )
            .await
            .unwrap();
        assert_eq!(r.stats.updated, 100);
        assert!(
            r.files_removed >= 1 && r.files_removed <= 2,
            "{strategy}: 1% of keys rewrote {} of {total} files",
            r.files_removed
        );
        // The key index survives a reopen: a replay reads no data and commits nothing.
        let mut reopened = TableRunner::open(&cfg, &cfg.tables[0]).await.unwrap();
        assert_eq!(reopened.store.key_count(), 10_000);
        let again = reopened
            .run_batch(
                read_csv(Path::new("upd.csv"), upd.as_bytes(), b',').unwrap(),
                vec![Mark { app: "upd".into(), version: 1, partition: None }],
            )
            .await
            .unwrap();
        assert_eq!(again.stats.unchanged, 100);
        assert_eq!(again.files_removed + again.files_added, 0);
        assert_eq!(again.version, None);
    }
}

#[test]
fn renamed_reserved_columns_are_what_readers_see() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = SCD2_CFG.replace(
        "      strategy: scd2\n",
        "      strategy: scd2\n      columns: {_is_current: is_current, _valid_from: valid_from, _valid_to: valid_to}\n",
    );
    let cfg = write(tmp.path(), "c.yaml", &yaml);
    write(tmp.path(), "data/1.csv", "id,op,city,seq\n1,U,Berlin,1\n");
    write(tmp.path(), "data/2.csv", "id,op,city,seq\n1,U,Hamburg,2\n");
    assert!(run(&cfg, &[]).status.success());
    let py = "import sys, os; from deltalake import DeltaTable; t = DeltaTable(sys.argv[1]); print(sorted(t.schema().to_arrow().names)); print(t.metadata().partition_columns); sys.stdout.flush(); os._exit(0)";
    let out = Command::new("python3")
        .args(["-c", py])
        .arg(tmp.path().join("lake/bronze/customer"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("'is_current'")
            && text.contains("'valid_from'")
            && !text.contains("'_is_current'"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("['is_current']"),
        "scd2 is partitioned by the (renamed) current flag: {text}"
    );
}

#[test]
fn jsonl_source_and_show_views() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml =
        SCD2_CFG.replace("type: csv, path: 'data/*.csv'", "type: jsonl, path: 'data/*.jsonl'");
    let cfg = write(tmp.path(), "c.yaml", &yaml);
    write(
        tmp.path(),
        "data/1.jsonl",
        "{\"id\":1,\"op\":\"U\",\"city\":\"Berlin\",\"seq\":1}\n{\"id\":2,\"op\":\"U\",\"city\":\"Bonn\",\"seq\":1}\nnot json\n",
    );
    assert!(run(&cfg, &[]).status.success());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let between = chrono::Utc::now().to_rfc3339();
    std::thread::sleep(std::time::Duration::from_millis(20));
    write(tmp.path(), "data/2.jsonl", "{\"id\":1,\"op\":\"U\",\"city\":\"Hamburg\",\"seq\":2}\n{\"id\":2,\"op\":\"D\",\"seq\":2}\n");
    assert!(run(&cfg, &[]).status.success());
    let view = |v: &str| {
        let out = Command::new(BIN)
            .args(["show", "customer", "--format", "csv", "--view", v, "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let active = view("active");
    assert!(
        active.contains("Hamburg") && !active.contains("Berlin") && !active.contains("Bonn"),
        "{active}"
    );
    let past = view(&format!("as-of={between}"));
    assert!(
        past.contains("Berlin") && past.contains("Bonn") && !past.contains("Hamburg"),
        "{past}"
    );
    assert_eq!(view("all").lines().count(), 1 + 3);
}

#[test]
fn dashboard_queries_only_use_exported_metrics_and_cover_them_all() {
    let text = std::fs::read_to_string(manifest().join("dashboards/changelake.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    // What a daemon with one table on one partition exports (the live scrape
    // is checked the same way in tests/operations.rs).
    changelake::telemetry::register_table("t", "scd2");
    changelake::telemetry::register_partition("t", "topic", 0, Some(1));
    let committed = changelake::engine::RunReport {
        table: "t".into(),
        strategy: changelake::config::Strategy::Scd2,
        version: Some(1),
        ..Default::default()
    };
    changelake::telemetry::run_committed(&committed);
    let scrape = changelake::telemetry::render();
    let exported: Vec<&str> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_whitespace().next())
        .collect();
    let mut used = std::collections::HashSet::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(i) = rest.find("changelake_") {
                let name: String = rest[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[i + name.len()..];
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(&name)
                    .to_string();
                assert!(
                    exported.contains(&base.as_str()),
                    "panel {} queries {name}, which the daemon does not export",
                    p["title"]
                );
                used.insert(base);
            }
        }
    }
    for m in exported {
        assert!(used.contains(m), "no dashboard panel shows {m}");
    }
}

#[test]
fn shipped_configs_pass_check() {
    for cfg in [
        "config/changelake.yaml",
        "config/production.yaml",
        "config/s3-production.yaml",
        "docker/changelake.yaml",
    ] {
        let out = Command::new(BIN)
            .args(["check", "--config"])
            .arg(manifest().join(cfg))
            .env("CHANGELAKE_BROKERS", "kafka:9092")
            .env("CHANGELAKE_LAKE_ROOT", "/tmp/changelake-check-lake")
            .env("KAFKA_CA_PEM", "/etc/ssl/ca.pem")
            .env("KAFKA_CLIENT_CERT_PEM", "/etc/ssl/client.pem")
            .env("KAFKA_CLIENT_KEY_PEM", "/etc/ssl/client.key")
            .env("KAFKA_CLIENT_KEY_PASSWORD", "")
            .env("LAKE_BUCKET", "example-lake")
            .env("AWS_REGION", "eu-west-1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{cfg}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_small_table_one_key_update_rewrites_one_file() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = Config::parse(&SCD2_CFG.replace("scd2", "scd1"), tmp.path()).unwrap();
    let mut runner = TableRunner::open(&cfg, &cfg.tables[0]).await.unwrap();
    let mut load = String::from("id,op,city,seq\n");
    for id in 0..100 {
        load.push_str(&format!("{id},U,c{id},1\n"));
    }
    let r = runner
        .run_batch(read_csv(Path::new("load.csv"), load.as_bytes(), b',').unwrap(), vec![])
        .await
        .unwrap();
    assert!(
        r.files_added > 2,
        "a 100-key load still spreads over several files: {}",
        r.files_added
    );
    let upd = "id,op,city,seq\n42,U,changed,2\n";
    let r2 = runner
        .run_batch(read_csv(Path::new("upd.csv"), upd.as_bytes(), b',').unwrap(), vec![])
        .await
        .unwrap();
    assert_eq!((r2.stats.updated, r2.files_removed, r2.files_added), (1, 1, 1));
}

#[test]
fn jsonl_debezium_dump_decodes_like_the_kafka_source() {
    let ev = |op: &str, id: i64, city: &str, lsn: i64| {
        let row = format!("{{\"id\":{id},\"city\":\"{city}\"}}");
        let (before, after) =
            if op == "d" { (row.as_str(), "null") } else { ("null", row.as_str()) };
        format!("{{\"before\":{before},\"after\":{after},\"source\":{{\"lsn\":{lsn}}},\"op\":\"{op}\",\"ts_ms\":1}}\n")
    };
    let mut dump = String::new();
    dump += &ev("c", 1, "Berlin", 10);
    dump += &ev("c", 2, "Bonn", 11);
    dump += "{not json\n";
    dump += &ev("u", 1, "Hamburg", 13);
    dump += &ev("u", 1, "stale", 12); // older sequence: loses
    dump += &ev("d", 2, "", 14);
    let config = "systems: {dump: {type: jsonl, format: debezium, path: 'dump/{object}.jsonl'}}\nbronze:\n  tables:\n    account:\n      source: {system: dump, object: account}\n      business_key: [id]\n      strategy: scd1\n      merge: {sequence_by: [source.lsn], delete_mode: hard}\n";
    // Read whole, and in chunks of two lines (docs/commit-protocol.md,
    // large files): the same table, the bad line dead-lettered at its line.
    for config in [config.to_string(), format!("{config}batching: {{max_rows: 2}}\n")] {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "dump/account.jsonl", &dump);
        let cfg = write(tmp.path(), "c.yaml", &config);
        let out = run(&cfg, &[]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let rows = show(&cfg, "account");
        assert!(
            rows.contains("Hamburg")
                && !rows.contains("Berlin")
                && !rows.contains("stale")
                && !rows.contains("Bonn"),
            "{config}: {rows}"
        );
        assert!(rows.contains("13"), "the sequence is stored as source_lsn: {rows}");
        let dead = Command::new("python3")
            .args(["-c", "import sys, os; from deltalake import DeltaTable; t = DeltaTable(sys.argv[1]).to_pyarrow_table(); print(t.num_rows, t.column('offset')[0]); sys.stdout.flush(); os._exit(0)"])
            .arg(tmp.path().join("lake/_dead_letters"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&dead.stdout).trim(),
            "1 3",
            "{config}: {}",
            String::from_utf8_lossy(&dead.stderr)
        );
    }
}
