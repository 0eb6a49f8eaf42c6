//! Each table's place in the loop: its runner, the topic it reads, the
//! offsets its table has stored, and its open batch (docs/operations.md,
//! the daemon; docs/commit-protocol.md, progress markers and where a run
//! starts).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use rdkafka::consumer::BaseConsumer;
use rdkafka::Offset;

use super::settings::meta_call;
use super::settings::KafkaSystem;
use crate::config::{Config, TableConfig};
use crate::decode::store_paths;
use crate::engine::TableRunner;
use crate::error::Result;
use crate::progress::partition_app_id;
use crate::source::kafka::{partitions, Ctx};
use crate::source::Unparsable;
use crate::telemetry;

/// The assigned partitions of every topic the loop reads.
pub(super) type TopicPartitions = BTreeMap<String, Vec<i32>>;

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct PartitionKey {
    /// Shared: the loop keys every message's partition without copying its topic.
    pub(super) topic: std::sync::Arc<str>,
    pub(super) partition: i32,
}

impl PartitionKey {
    pub(super) fn new(topic: &str, partition: i32) -> Self {
        PartitionKey { topic: topic.into(), partition }
    }
}

/// A table's open batch.
#[derive(Default)]
pub(super) struct Buffer {
    pub(super) rows: crate::source::DecodedRows,
    pub(super) dead: Vec<Unparsable>,
    /// Next offset per partition covered by this buffer.
    pub(super) next: BTreeMap<i32, i64>,
    pub(super) bytes: usize,
    pub(super) since: Option<Instant>,
}

/// One table of the system.
pub(super) struct Slot {
    pub(super) runner: TableRunner,
    pub(super) topic: String,
    /// Envelope paths to store as columns (Debezium `sequence_by` / `valid_time`).
    pub(super) store_paths: Vec<String>,
    pub(super) stored: HashMap<i32, i64>,
    /// Every assigned partition of `topic`.
    pub(super) partitions: Vec<i32>,
    pub(super) buf: Buffer,
    pub(super) tombstones: u64,
    pub(super) truncates: u64,
}

/// Opens a table for the loop: its runner (locked), its topic's partitions
/// (looked up once per topic, into `topic_parts`) and its stored offsets.
pub(super) async fn open_slot(
    config: &Config,
    t: &TableConfig,
    kafka: &KafkaSystem<'_>,
    meta: &BaseConsumer<Ctx>,
    topic_parts: &mut TopicPartitions,
) -> Result<Slot> {
    let topic = kafka.topic(&t.object);
    let mut runner = TableRunner::open(config, t).await?;
    runner.lock(config)?;
    if !topic_parts.contains_key(&topic) {
        let m = meta_call(meta, |m| partitions(m, &topic, kafka.brokers)).await?;
        if m.is_empty() {
            tracing::warn!(target: "changelake::daemon", table = %t.name, topic = %topic, "topic does not exist (yet); nothing to read");
        }
        topic_parts.insert(topic.clone(), m);
    }
    let mut stored = HashMap::new();
    telemetry::register_table(&t.name, t.strategy.as_str());
    for &p in &topic_parts[&topic] {
        let v = runner.store.txn_version(&partition_app_id(&t.name, &topic, p)).await?;
        telemetry::register_partition(&t.name, &topic, p, v);
        if let Some(v) = v {
            stored.insert(p, v);
        }
    }
    Ok(Slot {
        store_paths: store_paths(t, kafka.format),
        partitions: topic_parts[&topic].clone(),
        runner,
        topic,
        stored,
        buf: Buffer::default(),
        tombstones: 0,
        truncates: 0,
    })
}

/// The smallest stored next offset over the tables reading a partition;
/// None when one of them has none.
pub(super) fn stored_min(slots: &[Slot], topic: &str, p: i32) -> Option<i64> {
    slots.iter().filter(|s| s.topic == topic).map(|s| s.stored.get(&p).copied()).min().flatten()
}

/// Starts reading a new partition: from the smallest stored offset over the tables reading it.
pub(super) fn start_offset(slots: &[Slot], topic: &str, p: i32) -> Offset {
    stored_min(slots, topic, p).map(Offset::Offset).unwrap_or(Offset::Beginning)
}
