//! Where each partition starts: the smallest stored offset over the tables
//! reading it, or a replay's start position (docs/commit-protocol.md, where
//! a run starts and offsets outside the partition range; docs/replay.md,
//! start positions).

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::settings::meta_call;
use super::slots::{stored_min, PartitionKey, Slot, TopicPartitions};
use super::{RunOpts, StartAt};
use crate::error::{Error, Result};
use crate::source::kafka::{watermarks, Ctx, KafkaError, Watermarks};

/// Every partition's start, and how far each reached when the run started.
pub(super) struct Assignment {
    /// What to assign the consumer: every partition at its start offset.
    pub(super) partitions: TopicPartitionList,
    /// Next offset to read per partition.
    pub(super) position: HashMap<PartitionKey, i64>,
    /// High watermark per partition when the run started (`--once` reads up to it).
    pub(super) high_at_start: HashMap<PartitionKey, i64>,
}

/// Start positions: the smallest stored next offset over the tables reading
/// a partition, unless a replay says otherwise.
pub(super) async fn start_positions(
    cc: &ClientConfig,
    meta: &BaseConsumer<Ctx>,
    brokers: &str,
    topic_parts: &TopicPartitions,
    slots: &[Slot],
    opts: &RunOpts,
) -> Result<Assignment> {
    let mut a = Assignment {
        partitions: TopicPartitionList::new(),
        position: HashMap::new(),
        high_at_start: HashMap::new(),
    };
    let ts_offsets = match &opts.start {
        Some(StartAt::Timestamp(ms)) => timestamp_offsets(cc, topic_parts, *ms).await?,
        _ => HashMap::new(),
    };
    for (topic, ps) in topic_parts {
        for &p in ps {
            let key = PartitionKey::new(topic, p);
            let stored_min = stored_min(slots, topic, p);
            let start = match &opts.start {
                None => stored_min.map(Offset::Offset).unwrap_or(Offset::Beginning),
                Some(StartAt::Beginning) => Offset::Beginning,
                Some(StartAt::Offsets(list)) => list
                    .iter()
                    .find(|s| s.topic == *topic && s.partition == p)
                    .map(|s| Offset::Offset(s.offset))
                    .unwrap_or(Offset::Beginning),
                Some(StartAt::Timestamp(_)) => ts_offsets.get(&key).copied().unwrap_or(Offset::End),
            };
            a.partitions
                .add_partition_offset(topic, p, start)
                .map_err(|e| Error::Input(e.to_string()))?;
            let Watermarks { low, high } =
                meta_call(meta, |m| watermarks(m, topic, p, brokers)).await?;
            if let Some(stored) = stored_min.filter(|s| *s > high) {
                warn_stored_beyond_end(topic, p, stored, high);
            }
            let pos = match start {
                Offset::Offset(o) => o,
                Offset::End => high,
                _ => low,
            };
            a.position.insert(key.clone(), pos);
            a.high_at_start.insert(key, high);
        }
    }
    Ok(a)
}

/// `--from-timestamp`: the first offset at or after `ms` in every partition.
async fn timestamp_offsets(
    cc: &ClientConfig,
    topic_parts: &TopicPartitions,
    ms: i64,
) -> Result<HashMap<PartitionKey, Offset>> {
    let mut q = TopicPartitionList::new();
    for (topic, ps) in topic_parts {
        for &p in ps {
            q.add_partition_offset(topic, p, Offset::Offset(ms)).ok();
        }
    }
    let c2: BaseConsumer<Ctx> =
        cc.create_with_context(Ctx).map_err(|e| Error::Input(e.to_string()))?;
    let r = tokio::task::spawn_blocking(move || c2.offsets_for_times(q, Duration::from_secs(10)))
        .await
        .expect("join");
    let brokers = cc.get("bootstrap.servers").unwrap_or_default();
    Ok(r.map_err(|e| KafkaError::client(brokers, "offsets for timestamp", &e))?
        .elements()
        .iter()
        .map(|e| (PartitionKey::new(e.topic(), e.partition()), e.offset()))
        .collect())
}

/// The topic was recreated or truncated: events up to the stored offset
/// would be taken for replays and skipped.
fn warn_stored_beyond_end(topic: &str, p: i32, stored: i64, high: i64) {
    tracing::error!(
        target: "changelake::daemon",
        topic = %topic, partition = p, stored_next_offset = stored, high_watermark = high,
        "stored offset is beyond the partition's end (topic recreated?); new events below it are skipped as replays. \
         Re-read them with `changelake replay --from-offsets {topic}:{p}=0 --reapply`"
    );
}
