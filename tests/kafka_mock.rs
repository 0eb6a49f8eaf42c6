//! In-process Kafka (librdkafka's mock cluster, a real Kafka-protocol
//! broker): the broker goes down mid-stream and comes back; and the demo.

mod common;

use std::time::{Duration, Instant};

use changelake::config::Config;
use changelake::daemon::{self, RunOpts};
use common::*;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::ClientConfig;

async fn produce(brokers: &str, topic: &str, records: &[(i32, String, Option<String>)]) {
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("message.timeout.ms", "60000")
        .create()
        .unwrap();
    for (part, key, value) in records {
        let mut r: FutureRecord<'_, String, String> =
            FutureRecord::to(topic).partition(*part).key(key);
        if let Some(v) = value {
            r = r.payload(v);
        }
        p.send(r, Duration::from_secs(60)).await.expect("produce");
    }
}

type Daemon =
    tokio::task::JoinHandle<changelake::error::Result<Vec<changelake::engine::RunReport>>>;

/// Runs the daemon in the background; sending on the returned channel is SIGTERM.
fn spawn_daemon(cfg: Config) -> (tokio::sync::oneshot::Sender<()>, Daemon) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(async move {
        let shutdown = Box::pin(async move {
            let _ = stop_rx.await;
        });
        daemon::run(&cfg, RunOpts::default(), shutdown).await
    });
    (stop_tx, daemon)
}

fn config(brokers: &str) -> String {
    format!(
        "storage: {{root: ./lake}}\nsystems:\n  crm: {{type: kafka, brokers: \"{brokers}\", topic: \"crm.public.{{object}}\", format: debezium, kafka: {{reconnect.backoff.max.ms: \"500\"}}}}\nbronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd1\n      merge: {{sequence_by: [source.lsn]}}\nbatching: {{max_rows: 50, max_age: 200ms}}\nshutdown_timeout: 10s\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn broker_stopped_mid_stream_and_restarted_loses_nothing() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("crm.public.account", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let events = debezium_stream(400, 50, 2);
    let (first, second) = events.split_at(200);
    produce(&brokers, "crm.public.account", first).await;

    let tmp = tempfile::tempdir().unwrap();
    let cfg_path = write(tmp.path(), "c.yaml", &config(&brokers));
    let cfg = Config::load(&cfg_path).unwrap();
    let (stop_tx, daemon) = spawn_daemon(cfg);
    let table = tmp.path().join("lake/bronze/account");
    let t0 = Instant::now();
    while versions(&table) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "daemon never committed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.broker_down(1).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.broker_up(1).unwrap();
    produce(&brokers, "crm.public.account", second).await;

    // Wait until the daemon has committed every event of both halves.
    let app = |p: i32| changelake::source::kafka::app_id("account", "crm.public.account", p);
    let cfg = Config::load(&cfg_path).unwrap();
    let counts: Vec<i64> =
        (0..2).map(|p| events.iter().filter(|e| e.0 == p).count() as i64).collect();
    let t0 = Instant::now();
    loop {
        let r = changelake::engine::TableRunner::open(&cfg, &cfg.tables[0]).await.unwrap();
        let mut done = true;
        for p in 0..2 {
            done &= r.store.txn_version(&app(p)).await.unwrap() == Some(counts[p as usize]);
        }
        if done {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "daemon did not resume after the broker came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop_tx.send(()).unwrap();
    daemon.await.unwrap().expect("daemon exits cleanly");

    // Same events, one uninterrupted --once run into a fresh lake.
    let fresh = tempfile::tempdir().unwrap();
    let fresh_cfg = write(
        fresh.path(),
        "c.yaml",
        &config(&brokers).replace("max_rows: 50, max_age: 200ms", "max_rows: 100000, max_age: 60s"),
    );
    daemon_once(&fresh_cfg).await.unwrap();
    let live = |v: Vec<serde_json::Value>| {
        v.into_iter().filter(|r| r["_is_deleted"] == false).collect::<Vec<_>>()
    };
    let (a, b) = (
        tokio::task::spawn_blocking(move || show(&cfg_path, "account", &["_execution_id"])),
        tokio::task::spawn_blocking(move || show(&fresh_cfg, "account", &["_execution_id"])),
    );
    let (a, b) = (live(a.await.unwrap()), live(b.await.unwrap()));
    assert!(a.len() > 10);
    assert_eq!(a, b);
}

#[test]
fn demo_runs_in_one_command_under_a_minute() {
    let tmp = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let out = std::process::Command::new(BIN)
        .args(["demo", "--dir"])
        .arg(tmp.path().join("demo"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(t0.elapsed() < Duration::from_secs(60));
    for needle in [
        "== account (scd1)",
        "== account_history",
        "== contact",
        "== _dead_letters",
        "Potsdam",
        "not JSON",
        "(1 row)",
    ] {
        assert!(text.contains(needle), "demo output lacks {needle:?}:\n{text}");
    }
    // The lake stays on disk and is a Delta table any reader opens.
    let cfg = tmp.path().join("demo/changelake.yaml");
    assert!(cfg.exists());
    let hist = show_env(&cfg, "account_history");
    assert!(
        hist.iter().any(|r| r["city"] == "Potsdam" && r["_is_current"] == false),
        "the late event is a closed version"
    );
    // The command the demo suggests next works as printed, in a shell
    // without the demo's broker variable (`show` never talks to Kafka).
    let next = text.lines().find_map(|l| l.strip_prefix("next: changelake ")).expect("a next hint");
    let out = std::process::Command::new(BIN)
        .args(next.split_whitespace())
        .env_remove("CHANGELAKE_DEMO_BROKERS")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "`{next}`: {shown}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(shown.contains("city") && shown.contains("row"), "`{next}` printed:\n{shown}");
}

/// `show` for the demo's config, which reads its brokers from the environment.
fn show_env(cfg: &std::path::Path, table: &str) -> Vec<serde_json::Value> {
    let out = std::process::Command::new(BIN)
        .args(["show", table, "--format", "jsonl", "--config"])
        .arg(cfg)
        .env("CHANGELAKE_DEMO_BROKERS", "127.0.0.1:1")
        .output()
        .unwrap();
    let out = ok(out);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn http_get(port: u16, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_endpoint_serves_valid_prometheus_text() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("crm.public.account", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let mut events = debezium_stream(100, 20, 2);
    events.push((0, "{\"id\":1}".into(), None));
    events.push((1, "{\"id\":2}".into(), Some("not json".into())));
    produce(&brokers, "crm.public.account", &events).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let cfg_path = write(
        tmp.path(),
        "c.yaml",
        &format!("{}metrics: {{listen: \"127.0.0.1:{port}\"}}\n", config(&brokers)),
    );
    let cfg = Config::load(&cfg_path).unwrap();
    let (stop_tx, daemon) = spawn_daemon(cfg);
    let t0 = Instant::now();
    let body = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (status, body) =
            tokio::task::spawn_blocking(move || http_get(port, "/metrics")).await.unwrap();
        assert!(status.contains("200"), "{status}");
        // Counters are process-wide and other tests here use the same table name: look for movement.
        let positive = |series: &str| {
            body.lines().any(|l| {
                l.strip_prefix(series)
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .is_some_and(|v| v > 0.0)
            })
        };
        if positive("changelake_dead_letters_total{reason=\"malformed\",table=\"account\"}")
            && positive("changelake_rows_dropped_total{reason=\"tombstone\",table=\"account\"}")
        {
            break body;
        }
        if daemon.is_finished() {
            panic!("daemon stopped early: {:?}", daemon.await.unwrap().err());
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "metrics never showed the stream:\n{body}");
    };
    for needle in [
        "changelake_rows_read_total{table=\"account\"}",
        "changelake_versions_inserted_total{strategy=\"scd1\",table=\"account\"}",
        "changelake_commit_duration_seconds_bucket",
        "changelake_committed_offset{partition=\"0\",table=\"account\",topic=\"crm.public.account\"}",
    ] {
        assert!(body.contains(needle), "missing {needle} in:\n{body}");
    }
    // (Readiness is process-wide and other tests here stop brokers: tests/operations.rs checks it.)
    let (health, _) =
        tokio::task::spawn_blocking(move || http_get(port, "/healthz")).await.unwrap();
    assert!(health.contains("200"), "{health}");
    // An independent parser: promtool.
    promtool(&["check", "metrics"], Some(&body));
    stop_tx.send(()).unwrap();
    daemon.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn daemon_picks_up_a_topic_created_after_it_started() {
    let cluster = MockCluster::new(1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let tmp = tempfile::tempdir().unwrap();
    let cfg_path = write(tmp.path(), "c.yaml", &config(&brokers));
    let cfg = Config::load(&cfg_path).unwrap();
    let (stop_tx, daemon) = spawn_daemon(cfg);
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.create_topic("crm.public.account", 2, 1).unwrap();
    produce(&brokers, "crm.public.account", &debezium_stream(50, 10, 2)).await;
    let table = tmp.path().join("lake/bronze/account");
    let t0 = Instant::now();
    while versions(&table) == 0 {
        assert!(!daemon.is_finished(), "daemon stopped");
        assert!(t0.elapsed() < Duration::from_secs(40), "the new topic was never read");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop_tx.send(()).unwrap();
    daemon.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn debezium_truncate_is_counted_or_applied_with_apply_truncates() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("crm.public.account", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let ev = |id: i64, lsn: i64| {
        (
            0,
            format!("{{\"id\":{id}}}"),
            Some(format!("{{\"before\":null,\"after\":{{\"id\":{id},\"city\":\"c{id}\"}},\"source\":{{\"lsn\":{lsn}}},\"op\":\"c\"}}")),
        )
    };
    let truncate = (
        0,
        String::new(),
        Some("{\"before\":null,\"after\":null,\"source\":{\"lsn\":50},\"op\":\"t\"}".to_string()),
    );
    produce(&brokers, "crm.public.account", &[ev(1, 10), ev(2, 20), truncate, ev(3, 60)]).await;
    for (apply, want) in [
        (false, vec![(1, false), (2, false), (3, false)]),
        (true, vec![(1, true), (2, true), (3, false)]),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let yaml = config(&brokers).replace(
            "merge: {sequence_by: [source.lsn]}",
            &format!("merge: {{sequence_by: [source.lsn], apply_truncates: {apply}}}"),
        );
        let cfg_path = write(tmp.path(), "c.yaml", &yaml);
        daemon_once(&cfg_path).await.unwrap();
        let rows =
            tokio::task::spawn_blocking(move || show(&cfg_path, "account", &[])).await.unwrap();
        let got: Vec<(i64, bool)> = rows
            .iter()
            .map(|r| (r["id"].as_i64().unwrap(), r["_is_deleted"].as_bool().unwrap()))
            .collect();
        assert_eq!(got, want, "apply_truncates: {apply}");
    }
}

/// The daemon builds only the envelope fields its tables read (the rest of
/// `source` is passed over), and every field some table reads reaches it:
/// two tables share a topic, each selects its rows by `source.table`, one
/// deletes by `source.snapshot`, both sequence by `source.lsn`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn envelope_fields_the_tables_read_reach_them_and_no_others_are_needed() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("crm.public.shared", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let ev = |table: &str, id: i64, lsn: i64, snapshot: &str| {
        (
            0,
            format!("{{\"id\":{id}}}"),
            Some(format!(
                "{{\"before\":null,\"after\":{{\"id\":{id},\"city\":\"{table}{lsn}\"}},\"source\":{{\"version\":\"2.7.0.Final\",\"connector\":\"postgresql\",\"name\":\"crm\",\"ts_ms\":{lsn},\"snapshot\":\"{snapshot}\",\"db\":\"crm\",\"schema\":\"public\",\"table\":\"{table}\",\"lsn\":{lsn},\"txId\":7}},\"op\":\"u\",\"ts_ms\":{lsn}}}"
            )),
        )
    };
    let events = [
        ev("account", 1, 10, "false"),
        ev("contact", 1, 11, "false"),
        ev("account", 2, 12, "false"),
        ev("contact", 2, 13, "false"),
        ev("account", 1, 14, "false"),
        // Deleted by the account table's `delete_when`; the contact table has no such rule.
        ev("account", 2, 15, "gone"),
        ev("contact", 2, 16, "gone"),
        // An older row of account 1, by `source.lsn`: ignored.
        ev("account", 1, 9, "false"),
    ];
    produce(&brokers, "crm.public.shared", &events).await;
    let tmp = tempfile::tempdir().unwrap();
    let table = |name: &str, filter: &str, deletes: &str| {
        format!("    {name}:\n      source: {{system: crm, object: shared, filter: \"source.table = '{filter}'\"}}\n      business_key: [id]\n      strategy: scd1\n      merge: {{sequence_by: [source.lsn]{deletes}}}\n")
    };
    let yaml = format!(
        "storage: {{root: ./lake}}\nsystems:\n  crm: {{type: kafka, brokers: \"{brokers}\", topic: \"crm.public.{{object}}\", format: debezium}}\nbronze:\n  tables:\n{}{}batching: {{max_rows: 3, max_age: 200ms}}\n",
        table("account", "account", ", delete_when: \"source.snapshot = 'gone'\""),
        table("contact", "contact", "")
    );
    let cfg_path = write(tmp.path(), "c.yaml", &yaml);
    daemon_once(&cfg_path).await.unwrap();
    let rows = |t: &'static str| {
        let cfg_path = cfg_path.clone();
        tokio::task::spawn_blocking(move || show(&cfg_path, t, &[]))
    };
    let summary = |rows: Vec<serde_json::Value>| -> Vec<(i64, String, bool)> {
        rows.iter()
            .map(|r| {
                let city = r["city"].as_str().unwrap().to_string();
                (r["id"].as_i64().unwrap(), city, r["_is_deleted"].as_bool().unwrap())
            })
            .collect()
    };
    let account = summary(rows("account").await.unwrap());
    let contact = summary(rows("contact").await.unwrap());
    assert_eq!(account, [(1, "account14".into(), false), (2, "account12".into(), true)]);
    assert_eq!(contact, [(1, "contact11".into(), false), (2, "contact16".into(), false)]);
}

/// Debezium creates of ~400 KB each, for keys `from..to`.
fn big_events(from: usize, to: usize) -> Vec<(i32, String, Option<String>)> {
    let pad = "x".repeat(400_000);
    (from..to)
        .map(|i| {
            let v = format!(
                "{{\"before\":null,\"after\":{{\"id\":{i},\"blob\":\"{pad}\"}},\"source\":{{\"lsn\":{i}}},\"op\":\"c\"}}"
            );
            (0, i.to_string(), Some(v))
        })
        .collect()
}

/// The mock broker keeps about 5 MB per partition. Once the daemon has
/// committed the first events, its fetches fail for a while (injected
/// broker errors; producing still works) and 24 MB more are produced: the
/// events after its fetch position are deleted before it can read them.
async fn lose_events_to_retention_while_running(policy: &str) -> (tempfile::TempDir, Daemon) {
    let cluster = Box::leak(Box::new(MockCluster::new(1).unwrap()));
    cluster.create_topic("crm.public.account", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let tmp = tempfile::tempdir().unwrap();
    let text = config(&brokers).replace(
        "kafka: {reconnect.backoff.max.ms: \"500\"}",
        &format!("on_offset_out_of_range: {policy}, kafka: {{reconnect.backoff.max.ms: \"500\"}}"),
    );
    let cfg_path = write(tmp.path(), "c.yaml", &text);
    let (stop, daemon) = spawn_daemon(Config::load(&cfg_path).unwrap());
    std::mem::forget(stop); // the daemon runs until it stops by itself (or the test ends)
    produce(&brokers, "crm.public.account", &big_events(0, 4)).await;
    let table = tmp.path().join("lake/bronze/account");
    let t0 = Instant::now();
    while stored_offset(&table) != Some(4) {
        assert!(t0.elapsed() < Duration::from_secs(30), "the first events were never committed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.request_errors(
        RDKafkaApiKey::Fetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 12],
    );
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("message.timeout.ms", "60000")
        .create()
        .unwrap();
    let burst = big_events(4, 64);
    let sends = burst.iter().map(|(part, key, value)| {
        let r: FutureRecord<'_, String, String> = FutureRecord::to("crm.public.account")
            .partition(*part)
            .key(key)
            .payload(value.as_ref().unwrap());
        p.send(r, Duration::from_secs(60))
    });
    for r in futures::future::join_all(sends).await {
        r.expect("produce");
    }
    (tmp, daemon)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_deleted_by_retention_while_running_stop_the_daemon() {
    let (_tmp, daemon) = lose_events_to_retention_while_running("fail").await;
    let r = tokio::time::timeout(Duration::from_secs(60), daemon)
        .await
        .expect("the daemon stops by itself")
        .unwrap();
    let err = r.expect_err("events were lost: the daemon must not go on");
    let text = err.to_string();
    assert!(matches!(err, changelake::error::Error::OffsetOutOfRange { .. }), "{text}");
    assert_eq!(err.exit_code(), 1);
    assert!(text.contains("crm.public.account") && text.contains("low watermark"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_deleted_by_retention_while_running_are_skipped_and_counted_with_earliest() {
    let (tmp, daemon) = lose_events_to_retention_while_running("earliest").await;
    let table = tmp.path().join("lake/bronze/account");
    let resets = || {
        let m = changelake::telemetry::metrics();
        m.offset_resets.with_label_values(&["account", "crm.public.account", "0"]).get()
    };
    let t0 = Instant::now();
    // The newest events survive retention and are applied after the skip.
    while !(resets() >= 1 && stored_offset(&table) >= Some(64)) {
        assert!(!daemon.is_finished(), "daemon stopped: {:?}", daemon.await);
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "resets {} stored {:?}",
            resets(),
            stored_offset(&table)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    daemon.abort();
}

/// The next offset the account table stored for partition 0.
fn stored_offset(table: &std::path::Path) -> Option<i64> {
    let log = table.join("_delta_log");
    let app = changelake::source::kafka::app_id("account", "crm.public.account", 0);
    let mut best = None;
    for e in std::fs::read_dir(log).ok()? {
        let p = e.ok()?.path();
        if p.extension().is_some_and(|x| x == "json") {
            for line in std::fs::read_to_string(&p).ok()?.lines() {
                let v: serde_json::Value = serde_json::from_str(line).ok()?;
                if v["txn"]["appId"] == app.as_str() {
                    best = best.max(v["txn"]["version"].as_i64());
                }
            }
        }
    }
    best
}
