//! Integration tests against a real Kafka-protocol broker (tansu, started per
//! test on loopback): end to end, crash safety under SIGKILL and fault
//! points, replay, restart, poison messages.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

#[test]
fn kafka_end_to_end_equals_the_file_source() {
    let broker = Broker::start();
    broker.create_topic("crm.flat.account", 3);
    // Flat JSON rows over three partitions (keyed), and the same rows as a JSONL file.
    let mut lines = vec![];
    let mut records = vec![];
    for i in 0..120u64 {
        let id = (i * 7) % 23;
        let row = if i % 17 == 16 {
            format!("{{\"id\":{id},\"op\":\"d\",\"lsn\":{}}}", 100 + i)
        } else {
            format!(
                "{{\"id\":{id},\"op\":\"u\",\"city\":\"c{}\",\"amount\":{}.5,\"lsn\":{}}}",
                i % 5,
                i,
                100 + i
            )
        };
        records.push(((id % 3) as i32, format!("{id}"), Some(row.clone())));
        lines.push(row);
    }
    broker.produce("crm.flat.account", &records);
    let tables = r#"bronze:
  tables:
    account:
      source: {system: src, object: account}
      business_key: [id]
      strategy: scd1
      merge: {sequence_by: [lsn], delete_when: "op = 'd'"}
    account_history:
      source: {system: src, object: account}
      business_key: [id]
      strategy: scd2
      merge: {sequence_by: [lsn], delete_when: "op = 'd'"}
batching: {max_rows: 100000, max_age: 60s}
"#;
    let k = tempfile::tempdir().unwrap();
    let kcfg = write(
        k.path(),
        "c.yaml",
        &format!(
            "systems:\n  src: {{type: kafka, brokers: \"{}\", topic: \"crm.flat.{{object}}\", format: json}}\n{tables}",
            broker.brokers()
        ),
    );
    let f = tempfile::tempdir().unwrap();
    let fcfg = write(
        f.path(),
        "c.yaml",
        &format!("systems:\n  src: {{type: jsonl, path: \"data/{{object}}.jsonl\"}}\n{tables}"),
    );
    write(f.path(), "data/account.jsonl", &(lines.join("\n") + "\n"));
    ok(cli(&["run", "--once"], &kcfg));
    ok(cli(&["run", "--once"], &fcfg));
    for t in ["account", "account_history"] {
        let (a, b) = (show(&kcfg, t, &[]), show(&fcfg, t, &[]));
        assert!(!a.is_empty());
        assert_eq!(a, b, "{t}: Kafka and file source disagree");
    }
    // offsets: zero lag everywhere after run --once.
    let out = String::from_utf8(ok(cli(&["offsets"], &kcfg)).stdout).unwrap();
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("account")).collect();
    assert_eq!(rows.len(), 6, "{out}");
    for r in rows {
        assert!(r.trim_end().ends_with("| 0"), "lag not zero: {r}\n{out}");
    }
}

/// Live rows: with deletes in the stream, whether a key created and deleted
/// shows as a soft-deleted row depends on the batch cuts (docs/batch.md: deduplication
/// within a batch), so crash runs and reference runs compare live rows.
fn live(rows: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
    rows.into_iter().filter(|r| r["_is_deleted"] == false).collect()
}

fn reference(broker: &Broker, events: usize) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", &debezium_config(&broker.brokers(), 100_000, "60s"));
    ok(cli(&["run", "--once"], &cfg));
    let scd1 = live(show(&cfg, "account", &["_execution_id"]));
    let cur: Vec<_> = show(&cfg, "account_history", &["_execution_id"])
        .into_iter()
        .filter(|r| r["_is_current"] == true)
        .collect();
    assert!(scd1.len() > 10, "reference has data ({events} events)");
    (scd1, cur)
}

/// Runs the daemon once per entry of `faults` (a fault point, or "" for
/// none) and SIGKILLs it after a pseudo-random wait of `base_ms` plus up to
/// `spread_ms`, whether or not the fault point fired first.
fn crash_rounds(cfg: &Path, faults: &[&str], seed: u64, base_ms: u64, spread_ms: u64) {
    let table = cfg.parent().unwrap().join("lake/bronze/account");
    let mut x = seed;
    for (i, fault) in faults.iter().enumerate() {
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--config"]).arg(cfg).stdout(Stdio::null()).stderr(Stdio::null());
        if !fault.is_empty() {
            cmd.env("CHANGELAKE_FAULT", fault);
        }
        let mut child = cmd.spawn().unwrap();
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let wait = Duration::from_millis(base_ms + (x >> 33) % spread_ms);
        std::thread::sleep(wait);
        let _ = child.kill();
        let _ = child.wait();
        eprintln!(
            "round {i}: fault={fault:?} killed after {wait:?}, table versions: {}",
            versions(&table)
        );
    }
}

/// After the crashes, one clean pass: both tables equal an uninterrupted
/// run, and no key has two versions with the same sequence and values.
fn assert_equals_uninterrupted(
    cfg: &Path,
    want1: &[serde_json::Value],
    want2: &[serde_json::Value],
) {
    ok(cli(&["run", "--once"], cfg));
    assert_eq!(
        live(show(cfg, "account", &["_execution_id"])),
        want1,
        "scd1 after crashes equals an uninterrupted run"
    );
    let hist = show(cfg, "account_history", &["_execution_id"]);
    let cur: Vec<_> = hist.iter().filter(|r| r["_is_current"] == true).cloned().collect();
    assert_eq!(cur, want2, "scd2 current versions equal an uninterrupted run");
    let mut seen = std::collections::HashSet::new();
    for r in &hist {
        let v = (
            r["id"].to_string(),
            r["source_lsn"].to_string(),
            r["city"].to_string(),
            r["_is_deleted"].to_string(),
        );
        assert!(seen.insert(v), "duplicate version {r}");
    }
}

#[test]
fn crash_safety_sigkill_and_fault_points_lose_and_repeat_nothing() {
    let broker = Broker::start();
    broker.create_topic("crm.public.account", 3);
    let events = debezium_stream(600, 60, 3);
    broker.produce("crm.public.account", &events);
    let (want1, want2) = reference(&broker, events.len());

    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", &debezium_config(&broker.brokers(), 40, "100ms"));
    let faults = [
        "after_parquet_write:2",
        "after_delta_commit:1",
        "after_parquet_write:5",
        "after_delta_commit:4",
        "",
        "",
        "",
        "",
    ];
    crash_rounds(&cfg, &faults, 7, 300, 900);
    assert_equals_uninterrupted(&cfg, &want1, &want2);
}

/// Kills during table upkeep — checkpoints every 3 commits, compaction of
/// 2 small files, vacuum and log cleanup with zero retention — at fault
/// points inside each step and at random moments: the tables end equal to
/// an uninterrupted run, with no version applied twice.
#[test]
fn crash_safety_kills_during_upkeep_lose_and_repeat_nothing() {
    let broker = Broker::start();
    broker.create_topic("crm.public.account", 2);
    let events = debezium_stream(500, 50, 2);
    broker.produce("crm.public.account", &events);
    let (want1, want2) = reference(&broker, events.len());
    let tmp = tempfile::tempdir().unwrap();
    let layout = "      layout: {checkpoint_interval: 3, compact_min_files: 2, vacuum_retention: 0s, log_retention: 0s}\n";
    let text = debezium_config(&broker.brokers(), 30, "100ms")
        .replace("strategy: scd1\n", &format!("strategy: scd1\n{layout}"))
        .replace("strategy: scd2\n", &format!("strategy: scd2\n{layout}"));
    let cfg = write(tmp.path(), "c.yaml", &text);
    let faults = [
        "after_checkpoint:1",
        "after_log_cleanup:1",
        "after_vacuum:1",
        "after_delta_commit:3",
        "after_checkpoint:2",
        "after_log_cleanup:3",
        "",
        "",
    ];
    crash_rounds(&cfg, &faults, 11, 400, 1200);
    assert_equals_uninterrupted(&cfg, &want1, &want2);
    let log = tmp.path().join("lake/bronze/account/_delta_log");
    let commits = std::fs::read_dir(&log)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".json"))
        .count();
    assert!(commits <= 12, "log cleanup kept the log short: {commits} commit files");
}

#[test]
fn replay_from_beginning_commits_nothing_and_reapply_keeps_the_table() {
    let broker = Broker::start();
    broker.create_topic("crm.public.account", 2);
    broker.produce("crm.public.account", &debezium_stream(200, 30, 2));
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", &debezium_config(&broker.brokers(), 50, "60s"));
    ok(cli(&["run", "--once"], &cfg));
    let dir = tmp.path().join("lake/bronze/account_history");
    let (v0, t0) = (versions(&dir), show(&cfg, "account_history", &[]));
    ok(cli(&["replay", "--table", "account_history", "--from-beginning"], &cfg));
    assert_eq!(
        versions(&dir),
        v0,
        "replay without --reapply finds nothing new and commits nothing"
    );
    let out =
        ok(cli(&["replay", "--table", "account_history", "--from-beginning", "--reapply"], &cfg));
    let now = show(&cfg, "account_history", &[]);
    if now != t0 {
        let fmt = |v: &[serde_json::Value]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>();
        let (a, b) = (fmt(&t0), fmt(&now));
        panic!(
            "--reapply changed the content\nonly before: {:?}\nonly after: {:?}\n{}",
            a.iter().filter(|x| !b.contains(x)).collect::<Vec<_>>(),
            b.iter().filter(|x| !a.contains(x)).collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ok(cli(
        &[
            "replay",
            "--table",
            "account_history",
            "--from-offsets",
            "crm.public.account:0=10,crm.public.account:1=0",
            "--reapply",
        ],
        &cfg,
    ));
    assert_eq!(show(&cfg, "account_history", &[]), t0);
    // A partition the table does not read (a typo: it would replay every
    // partition from the beginning) or a negative offset is a usage error.
    let v1 = versions(&dir);
    for bad in ["crm.public.acount:0=5", "crm.public.account:9=0", "crm.public.account:0=-5"] {
        let out = cli(&["replay", "--table", "account_history", "--from-offsets", bad], &cfg);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--from-offsets"), "{bad}: {err}");
    }
    assert_eq!(versions(&dir), v1, "a refused replay commits nothing");
}

#[test]
fn restart_after_clean_shutdown_resumes_at_the_stored_offsets() {
    let broker = Broker::start();
    broker.create_topic("crm.public.account", 2);
    let all = debezium_stream(300, 40, 2);
    let (first, second) = all.split_at(180);
    broker.produce("crm.public.account", first);
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", &debezium_config(&broker.brokers(), 1000, "200ms"));
    let child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while versions(&tmp.path().join("lake/bronze/account")) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "daemon never committed");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(800));
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "SIGTERM exits 0: {}", String::from_utf8_lossy(&out.stderr));
    broker.produce("crm.public.account", second);
    let out = ok(cli(&["run", "--once"], &cfg));
    let log = String::from_utf8_lossy(&out.stderr);
    let rows: u64 = log
        .lines()
        .filter(|l| l.contains("batch committed") && l.contains("table=account "))
        .filter_map(|l| {
            l.split("rows=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .trim_matches(|c: char| !c.is_ascii_digit())
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(rows, second.len() as u64, "the restart read exactly the new events\n{log}");
    let (want1, _) = reference(&broker, all.len());
    assert_eq!(live(show(&cfg, "account", &["_execution_id"])), want1);
}

#[test]
fn poison_message_lands_once_in_the_dead_letters_and_the_table_goes_on() {
    let broker = Broker::start();
    broker.create_topic("crm.public.account", 1);
    let mut events = debezium_stream(20, 5, 1);
    events.insert(7, (0, "{\"id\":1}".into(), Some("\u{1}\u{2}not json at all".into())));
    events.insert(9, (0, "{\"id\":2}".into(), None)); // tombstone: skipped, not dead
    broker.produce("crm.public.account", &events);
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", &debezium_config(&broker.brokers(), 1000, "60s"));
    ok(cli(&["run", "--once"], &cfg));
    ok(cli(&["replay", "--table", "account", "--from-beginning", "--reapply"], &cfg));
    ok(cli(&["run", "--once"], &cfg));
    assert!(!show(&cfg, "account", &[]).is_empty());
    let py = "import sys, os, json; from deltalake import DeltaTable; print(json.dumps(DeltaTable(sys.argv[1]).to_pyarrow_table().to_pylist(), default=str)); sys.stdout.flush(); os._exit(0)";
    let out = ok(Command::new("python3")
        .args(["-c", py])
        .arg(tmp.path().join("lake/_dead_letters"))
        .output()
        .unwrap());
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["offset"], 7);
    assert_eq!(rows[0]["topic"], "crm.public.account");
    assert!(rows[0]["error"].as_str().unwrap().contains("not JSON"));
}

/// Two daemons on one table: with the writer lock the second loses at start;
/// without it (as on object stores) both run, each commit lands only on the
/// version its run read, and the loser of each race re-reads the table and
/// keeps only what is still missing (docs/object-storage.md, racing writers).
#[test]
fn two_daemons_on_one_table_do_not_corrupt_it() {
    let broker = Broker::start();
    broker.create_topic("crm.public.account", 2);
    let events = debezium_stream(1500, 40, 2);
    broker.produce("crm.public.account", &events);
    let (want1, want2) = reference(&broker, events.len());
    for locked in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = write(tmp.path(), "c.yaml", &debezium_config(&broker.brokers(), 30, "100ms"));
        let spawn = || {
            let mut c = Command::new(BIN);
            c.args(["run", "--config"]).arg(&cfg).stdout(Stdio::null()).stderr(Stdio::piped());
            if !locked {
                c.env("CHANGELAKE_NO_WRITER_LOCK", "1");
            }
            c.spawn().unwrap()
        };
        let (a, b) = (spawn(), spawn());
        std::thread::sleep(Duration::from_secs(4));
        for c in [&a, &b] {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        }
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        let losers: Vec<String> = [&a, &b]
            .iter()
            .filter(|o| !o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stderr).to_string())
            .collect();
        if locked {
            // Exactly one daemon owns the tables; the other loses at start with a clear error.
            assert_eq!(losers.len(), 1, "{losers:?}");
            assert!(losers[0].contains("another changelake process"), "{}", losers[0]);
        } else {
            assert!(losers.is_empty(), "both daemons run and resolve their conflicts: {losers:?}");
        }
        ok(cli(&["run", "--once"], &cfg));
        assert_eq!(live(show(&cfg, "account", &["_execution_id"])), want1, "locked: {locked}");
        let hist = show(&cfg, "account_history", &["_execution_id"]);
        let cur: Vec<_> = hist.iter().filter(|r| r["_is_current"] == true).cloned().collect();
        assert_eq!(cur, want2, "locked: {locked}");
        let mut seen = std::collections::HashSet::new();
        for r in &hist {
            assert!(
                seen.insert((
                    r["id"].to_string(),
                    r["source_lsn"].to_string(),
                    r["_is_deleted"].to_string()
                )),
                "locked: {locked}: version applied twice: {r}"
            );
        }
    }
}
