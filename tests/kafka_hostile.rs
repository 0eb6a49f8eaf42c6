//! Hostile messages through a Kafka-protocol broker (librdkafka's mock
//! cluster), one of each kind between good ones (docs/bad-input.md): the
//! daemon never stops, every good row lands, every hostile message is one
//! dead letter — also when the topic is read again from the beginning.

mod common;

use std::time::Duration;

use changelake::config::Config;
use changelake::daemon::{self, RunOpts, StartAt};
use common::*;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

async fn produce(brokers: &str, topic: &str, payloads: &[Vec<u8>]) {
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("message.timeout.ms", "60000")
        .set("message.max.bytes", "10000000")
        .create()
        .unwrap();
    for v in payloads {
        let r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).partition(0).payload(v);
        p.send(r, Duration::from_secs(60)).await.expect("produce");
    }
}

fn good(id: i64, lsn: i64) -> Vec<u8> {
    format!(r#"{{"op":"c","after":{{"id":{id},"name":"good {id}"}},"source":{{"lsn":{lsn}}}}}"#)
        .into_bytes()
}

/// One message of each hostile kind (docs/bad-input.md, hostile messages).
fn hostile() -> Vec<(&'static str, Vec<u8>)> {
    let deep = format!("{}1{}", "[".repeat(200_000), "]".repeat(200_000));
    vec![
        (
            "nested 200,000 levels",
            format!(r#"{{"op":"c","after":{{"id":90,"name":{deep}}},"source":{{"lsn":90}}}}"#)
                .into_bytes(),
        ),
        (
            "integer beyond 64 bits as key",
            br#"{"op":"c","after":{"id":99999999999999999999999,"name":"x"},"source":{"lsn":91}}"#
                .to_vec(),
        ),
        (
            "text in the integer sequence",
            br#"{"op":"c","after":{"id":92,"name":"x"},"source":{"lsn":"not-a-number"}}"#.to_vec(),
        ),
        ("float key", br#"{"op":"c","after":{"id":93.5,"name":"x"},"source":{"lsn":93}}"#.to_vec()),
        ("not JSON", b"{\"op\":\"c\",\"after\":{\"id\":94".to_vec()),
        ("invalid UTF-8", b"{\"op\":\"c\",\"after\":{\"id\":95,\"name\":\"\xff\xfe\"}}".to_vec()),
        ("a list where an object belongs", br#"{"op":"c","after":[1,2,3]}"#.to_vec()),
        ("a bare number", b"42".to_vec()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_hostile_messages_between_good_ones_are_dead_letters_exactly_once() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("crm.public.account", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let mut payloads = vec![];
    let bad = hostile();
    for (i, (_, msg)) in bad.iter().enumerate() {
        payloads.push(good(i as i64 + 1, i as i64 + 1));
        payloads.push(msg.clone());
    }
    payloads.push(good(100, 100));
    produce(&brokers, "crm.public.account", &payloads).await;

    let tmp = tempfile::tempdir().unwrap();
    // One table: a value that does not fit is a dead letter of each table reading it.
    let yaml = debezium_config(&brokers, 3, "200ms");
    let yaml = yaml[..yaml.find("    account_history:").unwrap()].to_string()
        + "batching: {max_rows: 3, max_age: 200ms}\nshutdown_timeout: 10s\n";
    let cfg_path = write(tmp.path(), "c.yaml", &yaml);
    let cfg = Config::load(&cfg_path).unwrap();
    daemon::run(
        &cfg,
        RunOpts { once: true, ..Default::default() },
        Box::pin(std::future::pending()),
    )
    .await
    .expect("hostile messages never stop the daemon");
    let ids = |rows: Vec<serde_json::Value>| -> Vec<i64> {
        rows.iter().map(|r| r["id"].as_i64().unwrap()).collect()
    };
    let want: Vec<i64> = (1..=bad.len() as i64).chain([100]).collect();
    assert_eq!(ids(show(&cfg_path, "account", &[])), want);
    let dead = show(&cfg_path, "_dead_letters", &[]);
    assert_eq!(dead.len(), bad.len(), "one dead letter per hostile message: {dead:#?}");
    let offsets: Vec<i64> = dead.iter().map(|d| d["offset"].as_i64().unwrap()).collect();
    let hostile_offsets: Vec<i64> = (0..bad.len() as i64).map(|i| 2 * i + 1).collect();
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, hostile_offsets, "{dead:#?}");

    // Read again from the beginning, as after a restart with lost progress:
    // the same table, no dead letter written twice.
    let replay = RunOpts {
        once: true,
        only_table: Some("account".into()),
        start: Some(StartAt::Beginning),
        reapply: true,
    };
    daemon::run(&cfg, replay, Box::pin(std::future::pending())).await.expect("replay");
    assert_eq!(ids(show(&cfg_path, "account", &[])), want);
    assert_eq!(show(&cfg_path, "_dead_letters", &[]).len(), bad.len());
}
