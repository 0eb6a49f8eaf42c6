//! `changelake demo`: the whole pipeline in one command, no services.
//!
//! Starts an in-process Kafka cluster (librdkafka's mock cluster speaks the
//! real Kafka protocol), produces a realistic stream of CRM account and
//! contact changes in Debezium format — inserts, updates, a late event, a
//! duplicate, deletes, a NULL key and a poison message — runs the daemon
//! until the stream is consumed, prints the tables and the dead letters, and
//! leaves the lake and its config on disk for `show`, `offsets` and `replay`.

use std::path::Path;
use std::time::Duration;

use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use serde_json::{json, Value as J};

use crate::commands::show::{render, show, OutFormat, Query, View};
use changelake::config::Config;
use changelake::daemon::{self, RunOpts};
use changelake::error::{Error, Result};

fn lsn(n: u32) -> String {
    format!("{:08X}:{:08X}:{:04X}", 0x27, n, 1)
}

/// A Debezium SQL Server change event (the shape of the connector's docs).
fn event(
    table: &str,
    op: &str,
    before: serde_json::Value,
    after: serde_json::Value,
    n: u32,
) -> String {
    json!({
        "before": before,
        "after": after,
        "source": {"version": "2.7.0.Final", "connector": "sqlserver", "name": "crm", "ts_ms": 1_764_000_000_000u64 + n as u64 * 1000,
                   "snapshot": "false", "db": "CRM", "schema": "dbo", "table": table,
                   "change_lsn": lsn(n), "commit_lsn": lsn(n), "event_serial_no": 1},
        "op": op,
        "ts_ms": 1_764_000_000_500u64 + n as u64 * 1000
    })
    .to_string()
}

fn account(id: i64, name: &str, city: &str, tier: &str, owner: &str) -> serde_json::Value {
    json!({"accountid": id, "name": name, "city": city, "tier": tier, "owner": owner})
}

fn contact(id: i64, account: i64, email: &str, phone: Option<&str>) -> serde_json::Value {
    json!({"contactid": id, "accountid": account, "email": email, "phone": phone})
}

type Event = (&'static str, serde_json::Value, Option<String>);

/// (topic object, key, value), in three waves; the daemon consumes each wave
/// to the end before the next is produced, so each wave is one batch.
fn stream() -> Vec<Vec<Event>> {
    vec![first_wave(), second_wave(), third_wave()]
}

fn account_key(id: i64) -> J {
    json!({ "accountid": id })
}

fn contact_key(id: i64) -> J {
    json!({ "contactid": id })
}

fn acme(city: &str) -> J {
    account(1, "Acme GmbH", city, "gold", "anna")
}

/// Snapshot rows and new rows of both tables.
fn first_wave() -> Vec<Event> {
    vec![
        ("account", account_key(1), Some(event("account", "r", J::Null, acme("Berlin"), 10))),
        (
            "account",
            account_key(2),
            Some(event(
                "account",
                "r",
                J::Null,
                account(2, "Bolt AG", "Bonn", "silver", "ben"),
                11,
            )),
        ),
        (
            "account",
            account_key(3),
            Some(event(
                "account",
                "c",
                J::Null,
                account(3, "Corvid Ltd", "Köln", "bronze", "anna"),
                12,
            )),
        ),
        (
            "contact",
            contact_key(100),
            Some(event(
                "contact",
                "c",
                J::Null,
                contact(100, 1, "jane@acme.example", Some("+49 30 1234")),
                13,
            )),
        ),
        (
            "contact",
            contact_key(101),
            Some(event("contact", "c", J::Null, contact(101, 2, "max@bolt.example", None), 14)),
        ),
    ]
}

/// Updates, one delivered twice.
fn second_wave() -> Vec<Event> {
    vec![
        (
            "account",
            account_key(1),
            Some(event("account", "u", acme("Berlin"), acme("Hamburg"), 20)),
        ),
        // Redelivered duplicate of the same change.
        (
            "account",
            account_key(1),
            Some(event("account", "u", acme("Berlin"), acme("Hamburg"), 20)),
        ),
        (
            "account",
            account_key(2),
            Some(event("account", "u", J::Null, account(2, "Bolt AG", "Bonn", "gold", "ben"), 21)),
        ),
        (
            "contact",
            contact_key(101),
            Some(event(
                "contact",
                "u",
                J::Null,
                contact(101, 2, "max@bolt.example", Some("+49 228 555")),
                23,
            )),
        ),
    ]
}

/// An ignored-column change, a late event, a delete and its tombstone, a
/// NULL key and a poison message.
fn third_wave() -> Vec<Event> {
    vec![
        // Owner-only change: an ignored column, updated in place.
        (
            "account",
            account_key(2),
            Some(event(
                "account",
                "u",
                J::Null,
                account(2, "Bolt AG", "Bonn", "gold", "carla"),
                22,
            )),
        ),
        // A late event: older LSN than the Hamburg change, arriving after it.
        (
            "account",
            account_key(1),
            Some(event("account", "u", acme("Berlin"), acme("Potsdam"), 15)),
        ),
        // Delete of account 3, then its tombstone.
        (
            "account",
            account_key(3),
            Some(event(
                "account",
                "d",
                account(3, "Corvid Ltd", "Köln", "bronze", "anna"),
                J::Null,
                24,
            )),
        ),
        ("account", account_key(3), None),
        // A row without a business key, and a poison message.
        (
            "account",
            json!({"accountid": null}),
            Some(event(
                "account",
                "c",
                J::Null,
                json!({"accountid": null, "name": "Nameless"}),
                25,
            )),
        ),
        ("account", account_key(4), Some("{\"op\":\"c\",\"after\":{\"accountid\":4,".to_string())),
        (
            "account",
            account_key(4),
            Some(event(
                "account",
                "c",
                J::Null,
                account(4, "Delta Corp", "München", "gold", "ben"),
                26,
            )),
        ),
        (
            "contact",
            contact_key(102),
            Some(event(
                "contact",
                "c",
                J::Null,
                contact(102, 4, "li@delta.example", Some("+49 89 777")),
                27,
            )),
        ),
    ]
}

pub const DEMO_CONFIG: &str = r#"# Written by `changelake demo`: CRM CDC topics (Debezium) into Delta tables.
storage: { root: ./lake }
systems:
  crm:
    type: kafka
    brokers: "${CHANGELAKE_DEMO_BROKERS}"
    group_id: changelake-demo
    topic: "crm.dbo.{object}"
    format: debezium
bronze:
  tables:
    account:
      source: { system: crm, object: account }
      business_key: [accountid]
      strategy: scd1
      merge: { sequence_by: [source.change_lsn], ignore_columns: [owner] }
    account_history:
      source: { system: crm, object: account }
      business_key: [accountid]
      strategy: scd2
      merge: { sequence_by: [source.change_lsn], ignore_columns: [owner], surrogate_key: true }
    contact:
      source: { system: crm, object: contact }
      business_key: [contactid]
      strategy: scd2
      merge: { sequence_by: [source.change_lsn] }
batching: { max_rows: 100000, max_age: 1s }
"#;

pub async fn run(dir: &Path) -> Result<()> {
    let started = std::time::Instant::now();
    let kerr = |e: rdkafka::error::KafkaError| Error::Input(format!("demo cluster: {e}"));
    let cluster = MockCluster::new(1).map_err(kerr)?;
    for t in ["crm.dbo.account", "crm.dbo.contact"] {
        cluster.create_topic(t, 2, 1).map_err(kerr)?;
    }
    let brokers = cluster.bootstrap_servers();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("linger.ms", "0")
        .create()
        .map_err(kerr)?;
    // Each demo starts a fresh cluster whose offsets start at 0 again: start a fresh lake too.
    let lake = dir.join("lake");
    if lake.join("bronze").exists() {
        std::fs::remove_dir_all(&lake)
            .map_err(|e| Error::Input(format!("{}: {e}", lake.display())))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::Input(format!("{}: {e}", dir.display())))?;
    let cfg_path = dir.join("changelake.yaml");
    std::fs::write(&cfg_path, DEMO_CONFIG)
        .map_err(|e| Error::Input(format!("{}: {e}", cfg_path.display())))?;
    std::env::set_var("CHANGELAKE_DEMO_BROKERS", &brokers);
    let config = Config::load(&cfg_path)?;
    let events = stream();
    let mut commits = 0;
    // Three waves, each consumed by the daemon up to the end of the stream, so
    // the history shows one version per wave.
    for wave in &events {
        for (object, key, value) in wave {
            let topic = format!("crm.dbo.{object}");
            let key = key.to_string();
            let mut rec: FutureRecord<'_, String, String> = FutureRecord::to(&topic).key(&key);
            if let Some(v) = value {
                rec = rec.payload(v);
            }
            producer.send(rec, Duration::from_secs(10)).await.map_err(|(e, _)| kerr(e))?;
        }
        let reports = daemon::run(
            &config,
            RunOpts { once: true, ..Default::default() },
            Box::pin(std::future::pending()),
        )
        .await?;
        commits += reports.iter().filter(|r| r.version.is_some()).count();
    }
    drop(producer);
    println!(
        "streamed {} Debezium change events through an in-process Kafka cluster ({brokers}) in {commits} table commits\n",
        events.iter().map(Vec::len).sum::<usize>()
    );

    for (table, title) in
        [("account", "scd1"), ("account_history", "scd2, full history"), ("contact", "scd2")]
    {
        println!("== {table} ({title})");
        show(&config, table, &Query::all(View::All, OutFormat::Table)).await?;
        println!();
    }
    let (header, rows) = changelake::deadletter::read_all(&config.dead_letter_location()).await?;
    println!("== _dead_letters");
    print!("{}", render(&header, &rows, OutFormat::Table));
    println!(
        "\nlake: {}/lake  config: {}  ({:.1}s)\nnext: changelake show account_history --config {} --view active",
        dir.display(),
        cfg_path.display(),
        started.elapsed().as_secs_f64(),
        cfg_path.display()
    );
    drop(cluster);
    Ok(())
}
