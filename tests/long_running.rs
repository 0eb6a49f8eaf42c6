//! A months-long deployment against a real Kafka-protocol broker (tansu):
//! a recreated topic is never skipped silently and never hangs `--once`
//! (docs/commit-protocol.md, offsets outside the partition range), and
//! SIGTERM during a broker outage commits what is open and exits quickly
//! (docs/operations.md, shutdown).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cli, debezium_config, debezium_stream, http_get, ok, show, write, Broker, BIN};

const TOPIC: &str = "crm.public.account";

/// The first `n` events of the generated stream, on one partition.
fn events(n: usize) -> Vec<(i32, String, Option<String>)> {
    debezium_stream(n, 1000, 1)
}

#[test]
fn a_recreated_topic_stops_the_run_naming_the_partition_or_continues_from_earliest() {
    let broker = Broker::start();
    broker.create_topic(TOPIC, 1);
    broker.produce(TOPIC, &events(20));
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "c.yaml", &debezium_config(&broker.brokers(), 1000, "200ms"));
    ok(cli(&["run", "--once"], &cfg));
    let before = show(&cfg, "account", &[]);
    // A re-snapshot: the topic is deleted and created again, with fewer events.
    broker.delete_topic(TOPIC);
    broker.create_topic(TOPIC, 1);
    let fresh: Vec<_> = events(25).split_off(20);
    broker.produce(TOPIC, &fresh);
    let t0 = Instant::now();
    let out = cli(&["run", "--once"], &cfg);
    assert!(t0.elapsed() < Duration::from_secs(60), "--once terminates");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for part in ["table account", TOPIC, "partition 0", "stored next offset 20", "[0, 5]"] {
        assert!(err.contains(part), "the error names {part}: {err}");
    }
    assert_eq!(show(&cfg, "account", &[]), before, "nothing was applied or skipped");
    // The runbook: a replay from the beginning (per table) sets progress back
    // and applies the new events.
    for table in ["account", "account_history"] {
        ok(cli(&["replay", "--table", table, "--from-beginning"], &cfg));
    }
    let after = show(&cfg, "account", &[]);
    assert_applied(&after, &fresh);
    ok(cli(&["run", "--once"], &cfg));
    assert_eq!(show(&cfg, "account", &[]), after, "later runs continue from the new position");

    // Recreated again; `earliest` continues from the low watermark, recorded and counted.
    broker.delete_topic(TOPIC);
    broker.create_topic(TOPIC, 1);
    let again: Vec<_> = events(28).split_off(25);
    broker.produce(TOPIC, &again);
    let earliest = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("format: debezium", "format: debezium\n    on_offset_out_of_range: earliest");
    write(tmp.path(), "c.yaml", &earliest);
    let out = ok(cli(&["run", "--once"], &cfg));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("progress reset to the partition's low watermark"), "{log}");
    let after = show(&cfg, "account", &[]);
    assert_applied(&after, &again);
    // A second pass finds the new progress and applies nothing twice.
    ok(cli(&["run", "--once"], &cfg));
    assert_eq!(show(&cfg, "account", &[]), after);
}

/// Every upserted key of `events` is in `rows`.
fn assert_applied(rows: &[serde_json::Value], events: &[(i32, String, Option<String>)]) {
    let ids: Vec<_> = rows.iter().map(|r| r["id"].clone()).collect();
    for (_, _, v) in events {
        let v: serde_json::Value = serde_json::from_str(v.as_deref().unwrap()).unwrap();
        let id = v["after"]["id"].clone();
        if !id.is_null() {
            assert!(ids.contains(&id), "event for {id} applied: {rows:?}");
        }
    }
}

/// Waits until the daemon's metrics say a table holds an open batch.
fn wait_buffered(port: u16) {
    let t0 = Instant::now();
    loop {
        if let Some((_, body)) = http_get(port, "/metrics") {
            let open = body.lines().any(|l| {
                l.starts_with("changelake_buffered_bytes{table=\"account\"}")
                    && l.split_whitespace().last().is_some_and(|v| v != "0")
            });
            if open {
                return;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the daemon never buffered the events");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A daemon on `broker` whose batches close only by age (10 minutes), so
/// what it reads stays open until SIGTERM; its metrics on the returned port.
fn daemon_with_open_batches(broker: &Broker, dir: &Path) -> (std::process::Child, PathBuf, u16) {
    let port = common::free_port();
    let cfg_text = debezium_config(&broker.brokers(), 100_000, "10m")
        + &format!("metrics: {{listen: \"127.0.0.1:{port}\"}}\n");
    let cfg = write(dir, "c.yaml", &cfg_text);
    let child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, cfg, port)
}

/// Stops `broker`, lets the outage be noticed, sends SIGTERM: the daemon's
/// output and how long it took to exit.
fn sigterm_during_outage(
    broker: &mut Broker,
    child: std::process::Child,
) -> (std::process::Output, Duration) {
    broker.stop();
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    (out, t0.elapsed())
}

#[test]
fn sigterm_during_a_broker_outage_commits_the_open_batch_and_exits_within_5s() {
    let mut broker = Broker::start();
    broker.create_topic(TOPIC, 1);
    broker.produce(TOPIC, &events(30));
    let tmp = tempfile::tempdir().unwrap();
    let (child, cfg, port) = daemon_with_open_batches(&broker, tmp.path());
    wait_buffered(port);
    let (out, took) = sigterm_during_outage(&mut broker, child);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit 0: {err}");
    assert!(took < Duration::from_secs(5), "exited after {took:?}: {err}");
    assert!(!show(&cfg, "account", &[]).is_empty(), "the open batch was committed: {err}");
    // The outage's repeating client errors are logged once per interval, with a count.
    let client_errors = err.lines().filter(|l| l.contains("kafka client error")).count();
    assert!(client_errors <= 10, "{client_errors} client-error lines in {took:?}: {err}");

    // Nothing to commit, broker down: out within 5 s too (a fresh broker and lake).
    let mut broker = Broker::start();
    broker.create_topic(TOPIC, 1);
    let tmp = tempfile::tempdir().unwrap();
    let (child, _, port) = daemon_with_open_batches(&broker, tmp.path());
    let t0 = Instant::now();
    while !http_get(port, "/metrics")
        .is_some_and(|(_, b)| b.lines().any(|l| l == "changelake_assigned_partitions 1"))
    {
        assert!(t0.elapsed() < Duration::from_secs(30), "daemon never assigned its partition");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (out, took) = sigterm_during_outage(&mut broker, child);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(took < Duration::from_secs(5), "exited after {took:?}");
}

#[test]
fn json_logs_carry_typed_values() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "data/account.csv", "id,name\n1,a\n");
    let cfg = write(
        tmp.path(),
        "c.yaml",
        "systems: {f: {type: csv, path: 'data/{object}.csv'}}\nbronze:\n  tables:\n    account:\n      source: {system: f, object: account}\n      business_key: [id]\n      strategy: scd1\n",
    );
    let out = Command::new(BIN)
        .args(["--log-format", "json", "run", "--once", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    let line =
        log.lines().find(|l| l.contains("batch committed")).unwrap_or_else(|| panic!("{log}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let fields = v.get("fields").unwrap_or(&v);
    assert_eq!(fields["version"], serde_json::json!(0), "{line}");
    assert!(fields["execution_id"].is_number(), "{line}");
}
