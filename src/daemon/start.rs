//! Where each partition starts: the smallest stored offset over the tables
//! reading it, or a replay's start position (docs/commit-protocol.md, where
//! a run starts and offsets outside the partition range; docs/replay.md,
//! start positions).

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::settings::{meta_call, KafkaSystem};
use super::slots::{stored_min, PartitionKey, Slot, TopicPartitions};
use super::{RunOpts, StartAt};
use crate::config::OutOfRange;
use crate::error::{Error, Result};
use crate::source::kafka::{watermarks, Ctx, KafkaError, Watermarks};
use crate::telemetry;

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
    kafka: &KafkaSystem<'_>,
    topic_parts: &TopicPartitions,
    slots: &mut [Slot],
    opts: &RunOpts,
) -> Result<Assignment> {
    let brokers = kafka.brokers;
    let mut a = Assignment {
        partitions: TopicPartitionList::new(),
        position: HashMap::new(),
        high_at_start: HashMap::new(),
    };
    if let Some(StartAt::Offsets(list)) = &opts.start {
        unknown_start(list, topic_parts)?;
    }
    let ts_offsets = match &opts.start {
        Some(StartAt::Timestamp(ms)) => timestamp_offsets(cc, topic_parts, *ms).await?,
        _ => HashMap::new(),
    };
    for (topic, ps) in topic_parts {
        for &p in ps {
            let key = PartitionKey::new(topic, p);
            let Watermarks { low, high } =
                meta_call(meta, |m| watermarks(m, topic, p, brokers)).await?;
            // A replay is the operator setting progress: an out-of-range
            // position is reset to the partition's start as with `earliest`.
            let policy =
                if opts.start.is_some() { OutOfRange::Earliest } else { kafka.on_out_of_range };
            check_stored_in_range(slots, topic, p, Watermarks { low, high }, policy).await?;
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

/// `--from-offsets` naming a partition this run does not read: a typo in
/// a topic would otherwise replay every partition from its beginning
/// (docs/replay.md). A usage error, before anything is read.
fn unknown_start(list: &[super::StartOffset], topic_parts: &TopicPartitions) -> Result<()> {
    for s in list {
        let read = topic_parts.iter().any(|(t, ps)| *t == s.topic && ps.contains(&s.partition));
        if !read {
            let known: Vec<String> = (topic_parts.iter())
                .flat_map(|(t, ps)| ps.iter().map(move |p| format!("{t}:{p}")))
                .collect();
            return Err(Error::Usage(format!(
                "--from-offsets: {}:{} is not a partition this table reads ({})",
                s.topic,
                s.partition,
                known.join(", ")
            )));
        }
    }
    Ok(())
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

/// Every table's stored next offset in one partition must lie within the
/// partition's range: below the low watermark, events were deleted before
/// they were applied (retention); beyond the high watermark, the topic was
/// recreated and every new event would be taken for a replay and skipped.
/// `fail` stops the run naming it all; `earliest` moves the table's
/// progress to the low watermark (its next commit records it), logged and
/// counted (docs/commit-protocol.md, offsets outside the partition range).
async fn check_stored_in_range(
    slots: &mut [Slot],
    topic: &str,
    p: i32,
    range: Watermarks,
    policy: OutOfRange,
) -> Result<()> {
    for slot in slots.iter_mut().filter(|s| s.topic == topic) {
        let Some(&stored) = slot.stored.get(&p) else { continue };
        let why = if stored < range.low {
            "below the low watermark: retention deleted events before they were applied"
        } else if stored > range.high {
            "beyond the high watermark: the topic was recreated or truncated"
        } else {
            continue;
        };
        let table = slot.runner.cfg.name.clone();
        telemetry::offset_out_of_range(&table, topic, p, stored, range.low, range.high, why);
        match policy {
            OutOfRange::Fail => {
                return Err(Error::OffsetOutOfRange {
                    table,
                    topic: topic.to_string(),
                    partition: p,
                    stored,
                    low: range.low,
                    high: range.high,
                    why,
                })
            }
            OutOfRange::Earliest => {
                // Recorded at once (a txn-only commit), so a restart, a
                // conflict re-read and lag tools all see the new position.
                let mark = crate::progress::Mark::partition(&table, topic, p, range.low);
                let empty =
                    crate::source::RawBatch { source: topic.to_string(), ..Default::default() };
                slot.runner.run_batch(empty, vec![mark]).await?;
                telemetry::offset_reset(&table, topic, p, stored, range.low);
                slot.stored.insert(p, range.low);
            }
        }
    }
    Ok(())
}
