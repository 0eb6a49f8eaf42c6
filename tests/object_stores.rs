//! Tables on object stores, against real protocol servers on loopback:
//! moto (S3), Azurite (Azure Blob), s3rver (an S3 that ignores conditional
//! PUT) and a fault-injecting proxy. Results are read back with Python
//! `deltalake` through the same store and compared with the same runs on a
//! local lake (docs/object-storage.md).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::stores::{self, changelake, read_rows, run_cmd, Server};
use common::write;

/// Columns whose values differ between two runs by design (processing time).
const TIME_COLUMNS: &[&str] = &["_valid_from", "_valid_to"];

/// Three CSV files per object: inserts, updates with a delete, late and
/// repeated rows, and one value that cannot be converted (a dead letter).
fn write_inputs(dir: &Path) {
    write(
        dir,
        "data/account/1.csv",
        "id,name,amount,seq,op\n1,a,10,1,U\n2,b,20,1,U\n3,c,30,1,U\n4,d,40,1,U\n5,e,50,1,U\n",
    );
    write(
        dir,
        "data/account/2.csv",
        "id,name,amount,seq,op\n1,a2,11,2,U\n2,b,20,2,D\n6,f,60,1,U\n3,c2,31,3,U\n3,c1,30,2,U\n",
    );
    write(
        dir,
        "data/account/3.csv",
        "id,name,amount,seq,op\n4,d2,41,2,U\n2,b3,23,3,U\n7,g,oops,1,U\n1,a0,9,1,U\n5,e,50,1,U\n",
    );
}

/// scd1 copy-on-write, scd1 merge-on-read, scd2 and merge-on-read scd2
/// (its row companions in a local directory, as a table on an object store
/// keeps them: docs/object-storage.md), with maintenance that runs within
/// three commits (compaction, checkpoints, vacuum).
fn config(dir: &Path, storage: &str) -> PathBuf {
    let layout = "compact_min_files: 2, checkpoint_interval: 2, vacuum_retention: 0s";
    let companions = dir.join("companions");
    let companions = companions.to_string_lossy();
    write(
        dir,
        "changelake.yaml",
        &format!(
            "{storage}systems:\n  crm:\n    type: csv\n    path: 'data/{{object}}/*.csv'\n    columns: {{id: integer, amount: integer, seq: integer}}\nbronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd1\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\"}}\n      layout: {{{layout}}}\n    account_dv:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd1\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\", delete_mode: hard}}\n      layout: {{{layout}, deletion_vectors: true}}\n    account_history:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd2\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\"}}\n      layout: {{{layout}}}\n    account_history_dv:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd2\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\"}}\n      layout: {{{layout}, deletion_vectors: true, row_companions: '{companions}'}}\n"
        ),
    )
}

const TABLES: &[&str] =
    &["bronze/account", "bronze/account_dv", "bronze/account_history", "bronze/account_history_dv"];

/// Runs the three files on a local lake; returns each table's rows.
fn local_reference() -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let cfg = config(dir.path(), "storage: {root: ./lake}\n");
    common::ok(run_cmd(&mut changelake(None), &["run", "--once"], &cfg));
    let mut all: Vec<Vec<String>> = TABLES
        .iter()
        .map(|t| {
            let uri = dir.path().join("lake").join(t).to_string_lossy().to_string();
            read_rows(&uri, "{}", None, TIME_COLUMNS)
        })
        .collect();
    let dl = dir.path().join("lake/_dead_letters").to_string_lossy().to_string();
    all.push(dead_letter_errors(&dl, "{}", None));
    all
}

fn dead_letter_errors(uri: &str, options: &str, azurite: Option<u16>) -> Vec<String> {
    let rows = read_rows(uri, options, azurite, &["time"]);
    rows.iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(r).unwrap();
            format!("{} {} {}", v["table"], v["offset"], v["error"])
        })
        .collect()
}

/// The same runs on a remote lake equal the local ones, table by table;
/// a second `run --once` changes nothing; `show` and `tables` work there.
fn remote_equals_local(storage: &str, root: &str, reader: &str, azurite: Option<u16>) {
    let want = local_reference();
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let cfg = config(dir.path(), storage);
    // At debug level, where delta-rs and object_store describe the stores.
    let mut cmd = changelake(azurite);
    cmd.env("RUST_LOG", "debug");
    let out = common::ok(run_cmd(&mut cmd, &["run", "--once"], &cfg));
    let logs = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(logs.contains("DEBUG"), "debug logs were on");
    for secret in [stores::S3_SECRET, stores::AZURITE_KEY] {
        assert!(!logs.contains(secret), "a secret in the logs: {logs}");
    }
    for (i, t) in TABLES.iter().enumerate() {
        let got = read_rows(&format!("{root}/{t}"), reader, azurite, TIME_COLUMNS);
        assert!(!got.is_empty(), "{t} is empty");
        assert_eq!(got, want[i], "{t} differs from the local lake");
    }
    let dl = dead_letter_errors(&format!("{root}/_dead_letters"), reader, azurite);
    assert_eq!(dl, want[TABLES.len()], "dead letters differ");
    assert_eq!(dl.len(), TABLES.len(), "one dead letter per table for the bad amount: {dl:?}");
    // The merge-on-read scd2 table closed versions through companions kept
    // in the local directory, not on the store.
    let kept = std::fs::read_dir(dir.path().join("companions/account_history_dv"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".rows"))
                .count()
        })
        .unwrap_or(0);
    assert!(kept > 0, "no row companions in the local directory");

    // Nothing twice: a second pass finds every file applied.
    let tables_json = |c: &mut Command| {
        let out = common::ok(run_cmd(c, &["tables", "--format", "json"], &cfg));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let before = tables_json(&mut changelake(azurite));
    common::ok(run_cmd(&mut changelake(azurite), &["run", "--once"], &cfg));
    let after = tables_json(&mut changelake(azurite));
    assert_eq!(before, after, "a second run --once committed something");
    // Upkeep ran on the store: checkpoints written, small files compacted.
    for t in before.as_array().unwrap().iter().filter(|t| t["table"] != "_dead_letters") {
        let st = &t["stats"];
        assert!(st["last_checkpoint"].as_i64().is_some(), "no checkpoint on the store: {t}");
        // At most one small file per partition after compaction at 2.
        assert!(st["small_files"].as_u64().unwrap() <= 2, "small files left uncompacted: {t}");
    }

    // `show` reads the remote table like a local one.
    let shown = common::stdout_of(run_cmd(
        &mut changelake(azurite),
        &["show", "account", "--format", "jsonl"],
        &cfg,
    ));
    assert_eq!(shown.lines().count(), want[0].len(), "{shown}");
    let dead = common::stdout_of(run_cmd(
        &mut changelake(azurite),
        &["show", "_dead_letters", "--format", "jsonl"],
        &cfg,
    ));
    assert_eq!(dead.lines().count(), TABLES.len(), "{dead}");
}

#[test]
fn csv_runs_on_s3_equal_the_same_runs_on_a_local_lake() {
    let s3 = stores::moto();
    stores::create_bucket(s3.port, "lake");
    let storage = stores::s3_storage(s3.port, "s3://lake/prod");
    remote_equals_local(&storage, "s3://lake/prod", &stores::s3_reader_options(s3.port), None);
}

#[test]
fn csv_runs_on_azure_equal_the_same_runs_on_a_local_lake() {
    let az = stores::azurite();
    stores::create_container(az.port, "lake");
    let storage = stores::azure_storage("az://lake/prod");
    remote_equals_local(&storage, "az://lake/prod", &stores::azure_reader_options(), Some(az.port));
}

/// A fraction of the requests to the S3 server fail (503, reset, delay,
/// or an answer lost after the write landed): the runs still equal the
/// local ones, and the retries were logged and counted.
#[test]
fn transient_storage_errors_are_retried_and_the_table_still_equals_a_local_one() {
    let want = local_reference();
    let s3 = stores::moto();
    stores::create_bucket(s3.port, "lake");
    let dir = tempfile::tempdir().unwrap();
    let faults = dir.path().join("faults.log");
    let proxy = stores::faulty_proxy(s3.port, 0.15, 7, false, &faults);
    write_inputs(dir.path());
    let cfg = config(dir.path(), &stores::s3_storage(proxy.port, "s3://lake/flaky"));
    let out = common::ok(run_cmd(&mut changelake(None), &["run", "--once"], &cfg));
    let logs = String::from_utf8_lossy(&out.stderr);
    let injected = std::fs::read_to_string(&faults).unwrap();
    let n = injected.lines().filter(|l| *l != "ready").count();
    assert!(n >= 5, "too few faults injected to mean anything: {injected}");
    assert!(logs.contains("storage request failed, retrying"), "{logs}");
    let reader = stores::s3_reader_options(s3.port);
    for (i, t) in TABLES.iter().enumerate() {
        let got = read_rows(&format!("s3://lake/flaky/{t}"), &reader, None, TIME_COLUMNS);
        assert_eq!(got, want[i], "{t} differs from the local lake after {n} faults");
    }
    let dl = dead_letter_errors("s3://lake/flaky/_dead_letters", &reader, None);
    assert_eq!(dl, want[TABLES.len()], "dead letters after {n} faults");
    drop(proxy);
}

/// A store that ignores create-if-absent would let two writers both commit
/// one version: `run` refuses it before writing anything.
#[test]
fn a_store_that_ignores_conditional_put_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let refused = |s: &Server, cfg: &Path, key: &str| {
        let mut cmd = changelake(None);
        cmd.env("S3_TEST_KEY_ID", key).env("S3_TEST_SECRET", key);
        let out = run_cmd(&mut cmd, &["run", "--once"], cfg);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("ignores conditional PUT"), "{err}");
        assert!(!err.contains(stores::S3_SECRET), "{err}");
        let _ = s;
    };
    // s3rver ignores If-None-Match (its fixed test keys are S3RVER).
    let s3rver = stores::s3rver();
    stores::create_bucket(s3rver.port, "lake");
    let cfg = config(dir.path(), &stores::s3_storage(s3rver.port, "s3://lake/x"));
    refused(&s3rver, &cfg, "S3RVER");
    // moto honours it, unless a proxy strips the header.
    let s3 = stores::moto();
    stores::create_bucket(s3.port, "lake");
    let log = dir.path().join("proxy.log");
    let strip = stores::faulty_proxy(s3.port, 0.0, 1, true, &log);
    let cfg = config(dir.path(), &stores::s3_storage(strip.port, "s3://lake/x"));
    refused(&strip, &cfg, "testing");
    let cfg = config(dir.path(), &stores::s3_storage(s3.port, "s3://lake/x"));
    common::ok(run_cmd(&mut changelake(None), &["run", "--once"], &cfg));
}

/// `check` refuses, with exit 2 and the YAML path, what `run` could not use.
#[test]
fn check_refuses_storage_urls_and_librdkafka_settings_run_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    for (root, says) in [
        ("hdfs://nn/lake", "not one this build can write"),
        ("s3://", "names no bucket"),
        ("'s3://bu cket/lake'", "not a valid URL"),
        ("memory:///lake", "not one this build can write"),
    ] {
        let cfg = config(dir.path(), &format!("storage: {{root: {root}}}\n"));
        let out = run_cmd(&mut changelake(None), &["check"], &cfg);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{root}: {err}");
        assert!(err.contains("storage.root") && err.contains(says), "{root}: {err}");
    }
    let kafka = "storage: {root: ./lake}\nsystems:\n  crm:\n    type: kafka\n    brokers: 127.0.0.1:1\n    kafka: {fetch.wait.max.msz: 10, socket.timeout.ms: nope}\nbronze:\n  tables:\n    account:\n      source: {system: crm, object: account}\n      business_key: [id]\n";
    let cfg = write(dir.path(), "kafka.yaml", kafka);
    let out = run_cmd(&mut changelake(None), &["check"], &cfg);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("systems.crm.kafka.fetch.wait.max.msz"), "{err}");
    assert!(err.contains("systems.crm.kafka.socket.timeout.ms"), "{err}");
}

/// The Kafka daemon onto S3, killed (SIGKILL) at random moments and
/// restarted: nothing lost, nothing applied twice (docs/commit-protocol.md).
#[test]
fn kafka_daemon_on_s3_killed_at_random_loses_and_repeats_nothing() {
    use std::time::Duration;
    let broker = common::Broker::start();
    broker.create_topic("crm.public.account", 3);
    let events = common::debezium_stream(600, 60, 3);
    broker.produce("crm.public.account", &events);
    let show = |cfg: &Path, table: &str| -> Vec<serde_json::Value> {
        let out = common::stdout_of(run_cmd(
            &mut changelake(None),
            &["show", table, "--format", "jsonl"],
            cfg,
        ));
        out.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                for c in ["_valid_from", "_valid_to", "_execution_id"] {
                    v.as_object_mut().unwrap().remove(c);
                }
                v
            })
            .collect()
    };
    let local = tempfile::tempdir().unwrap();
    let text = common::debezium_config(&broker.brokers(), 40, "100ms");
    let cfg = write(local.path(), "c.yaml", &text);
    common::ok(run_cmd(&mut changelake(None), &["run", "--once"], &cfg));
    let want: Vec<_> = ["account", "account_history"].iter().map(|t| show(&cfg, t)).collect();
    assert!(want[0].len() > 10, "the reference has data");

    let s3 = stores::moto();
    stores::create_bucket(s3.port, "lake");
    let dir = tempfile::tempdir().unwrap();
    let remote =
        text.replace("storage: {root: ./lake}\n", &stores::s3_storage(s3.port, "s3://lake/kafka"));
    assert_ne!(remote, text);
    let cfg = write(dir.path(), "c.yaml", &remote);
    let mut x: u64 = 11;
    for round in 0..6 {
        let mut child = changelake(None)
            .args(["run", "--config"])
            .arg(&cfg)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let wait = Duration::from_millis(500 + (x >> 33) % 1500);
        std::thread::sleep(wait);
        let _ = child.kill();
        let _ = child.wait();
        eprintln!("round {round}: killed after {wait:?}");
    }
    common::ok(run_cmd(&mut changelake(None), &["run", "--once"], &cfg));
    let got: Vec<_> = ["account", "account_history"].iter().map(|t| show(&cfg, t)).collect();
    // Batch boundaries differ between the runs: a soft-deleted row keeps the
    // values of its batch, and scd2 keeps one version per key per batch. The
    // live scd1 rows and the current scd2 versions must be equal.
    let live = |rows: &[serde_json::Value]| -> Vec<serde_json::Value> {
        rows.iter().filter(|r| r["_is_deleted"] == false).cloned().collect()
    };
    let current = |rows: &[serde_json::Value]| -> Vec<serde_json::Value> {
        rows.iter().filter(|r| r["_is_current"] == true).cloned().collect()
    };
    assert_eq!(live(&got[0]), live(&want[0]), "scd1 on S3 after kills equals an uninterrupted run");
    assert_eq!(current(&got[1]), current(&want[1]), "scd2 current versions equal");
    let mut seen = std::collections::HashSet::new();
    for r in &got[1] {
        let v = (r["id"].to_string(), r["source_lsn"].to_string(), r["_is_deleted"].to_string());
        assert!(seen.insert(v), "a version applied twice: {r}");
    }
}

/// `bench --root s3://...` runs every strategy on the store beside the
/// local figures and reports time and requests per run (SPEC 13's
/// object-store target is measured by full-size runs, not asserted here).
#[test]
fn bench_on_s3_reports_time_and_requests_beside_the_local_runs() {
    let s3 = stores::moto();
    stores::create_bucket(s3.port, "lake");
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("AWS_ENDPOINT_URL=http://127.0.0.1:{}", s3.port);
    let secret = format!("AWS_SECRET_ACCESS_KEY={}", stores::S3_SECRET);
    let out = changelake(None)
        .args(["bench", "--dir"])
        .arg(dir.path())
        .args(["--keys", "2000", "--batch", "500", "--runs", "2", "--no-deltars"])
        .args(["--root", "s3://lake/bench", "--storage-option", &endpoint])
        .args([
            "--storage-option",
            "AWS_REGION=us-east-1",
            "--storage-option",
            "AWS_ALLOW_HTTP=true",
        ])
        .args(["--storage-option", "AWS_ACCESS_KEY_ID=testing", "--storage-option", &secret])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("bench.json")).unwrap()).unwrap();
    for t in ["account_scd1", "account_scd2"] {
        let r = &j[format!("{t}_remote")];
        assert!(r["mean_seconds"].as_f64().unwrap() > 0.0, "{j}");
        assert!(r["mean_requests"].as_f64().unwrap() >= 3.0, "a run reads and writes: {r}");
        assert!(r["ratio_to_local"].as_f64().is_some(), "{r}");
        assert_eq!(r["runs"].as_array().unwrap().len(), 2, "{r}");
    }
    assert!(stdout.contains("on s3://lake/bench/bench-"), "{stdout}");
    let yaml = std::fs::read_to_string(dir.path().join("bench-remote.yaml")).unwrap();
    assert!(!yaml.contains(stores::S3_SECRET), "options stay out of the file");
}

/// A key index larger than one 8 MiB part (200,000 keys, about 10 MB) is
/// saved as a multipart upload and loaded back in ranges, on S3 and Azure:
/// the second run starts from it instead of rebuilding.
#[test]
fn a_key_index_of_several_parts_is_saved_and_loaded_on_s3_and_azure() {
    let s3 = stores::moto();
    stores::create_bucket(s3.port, "lake");
    let az = stores::azurite();
    stores::create_container(az.port, "lake");
    let stores = [
        (stores::s3_storage(s3.port, "s3://lake/big"), None),
        (stores::azure_storage("az://lake/big"), Some(az.port)),
    ];
    for (storage, azurite) in stores {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = String::from("id,name,amount,seq,op\n");
        for id in 0..200_000 {
            rows.push_str(&format!("{id},n{id},{},1,U\n", id % 1000));
        }
        write(dir.path(), "data/account/1.csv", &rows);
        write(
            dir.path(),
            "changelake.yaml",
            &format!(
                "{storage}systems:\n  crm:\n    type: csv\n    path: 'data/{{object}}/*.csv'\n    columns: {{id: integer, amount: integer, seq: integer}}\nbronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd1\n      merge: {{sequence_by: [seq], delete_when: \"op = 'D'\"}}\n"
            ),
        );
        let cfg = dir.path().join("changelake.yaml");
        let run = || {
            let out = common::ok(run_cmd(&mut changelake(azurite), &["run", "--once"], &cfg));
            String::from_utf8_lossy(&out.stderr).to_string()
        };
        let log = run();
        assert!(log.contains("key index saved") && log.contains("keys=200000"), "{storage}: {log}");
        write(
            dir.path(),
            "data/account/2.csv",
            "id,name,amount,seq,op\n7,x,1,2,U\n200000,y,2,1,U\n",
        );
        let log = run();
        assert!(log.contains("key index loaded from its snapshot"), "{storage}: {log}");
        assert!(
            log.contains("keys=200000") && log.contains("files_replayed=0"),
            "{storage}: {log}"
        );
        assert!(log.contains("keys=200001"), "{storage}: the new key saved: {log}");
    }
}
