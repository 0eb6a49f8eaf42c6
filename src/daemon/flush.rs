//! A table's batch becomes a Delta commit carrying the offsets it consumed,
//! retried after a conflict with what another writer committed meanwhile;
//! then the consumer-group offsets, for lag tools only
//! (docs/commit-protocol.md: one run, one commit; progress markers;
//! concurrent writers).

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{Instrument, Span};

use super::slots::Slot;
use crate::config::Config;
use crate::engine::{Mark, RunReport};
use crate::error::Result;
use crate::progress::partition_app_id;
use crate::source::kafka::Ctx;
use crate::source::RawBatch;
use crate::telemetry;

/// Commits one table's buffer with its offsets, then the consumer-group offsets.
pub(super) async fn flush(
    slots: &mut [Slot],
    i: usize,
    consumer: &StreamConsumer<Ctx>,
    config: &Config,
) -> Result<RunReport> {
    let buf = std::mem::take(&mut slots[i].buf);
    if buf.next.is_empty() {
        return Ok(RunReport { skipped: true, ..Default::default() });
    }
    let s = &mut slots[i];
    let mut marks: Vec<Mark> = buf
        .next
        .iter()
        .map(|(&p, &next)| {
            let next = next.max(s.stored.get(&p).copied().unwrap_or(0));
            Mark::partition(&s.runner.cfg.name, &s.topic, p, next)
        })
        .collect();
    let table = s.runner.cfg.name.clone();
    let span = tracing::info_span!(target: "changelake::daemon", "batch", table = %table, topic = %s.topic, rows = buf.rows.len() + buf.dead.len(), bytes = buf.bytes);
    let mut batch = buf.rows.into_batch(s.topic.clone());
    batch.unparsable = buf.dead;
    let report = commit_with_retries(s, config, batch, &mut marks, &span).await?;
    for m in &marks {
        s.stored.insert(m.partition.unwrap_or(0), m.version);
    }
    span.in_scope(|| {
        telemetry::run_committed(&report);
        let committed: Vec<(i32, i64)> =
            marks.iter().map(|m| (m.partition.unwrap_or(0), m.version)).collect();
        telemetry::offsets_committed(&table, &s.topic, &committed);
        telemetry::pending(&table, None);
        telemetry::buffered(&table, 0);
    });
    let topic = s.topic.clone();
    commit_group_offsets(slots, &topic, &marks, consumer);
    Ok(report)
}

/// Runs the batch; a retryable failure (a lost commit race, storage that
/// did not answer) is retried with backoff, each time on the table as it is
/// now: a commit that landed although its answer was lost shows up there as
/// stored offsets, and nothing is written twice.
async fn commit_with_retries(
    s: &mut Slot,
    config: &Config,
    mut batch: RawBatch,
    marks: &mut [Mark],
    span: &Span,
) -> Result<RunReport> {
    let table = s.runner.cfg.name.clone();
    let mut retries = crate::engine::Retries::default();
    loop {
        // A retry needs the rows again: the batch stays here.
        let e = match s.runner.run_batch_kept(&batch, marks.to_vec()).instrument(span.clone()).await
        {
            Ok(r) => {
                // Freeing every cell of the batch is real work: off the loop.
                crate::par::drop_later(batch);
                return Ok(r);
            }
            Err(e) => e,
        };
        let Some(pause) = retries.after(&e) else {
            span.in_scope(|| telemetry::commit_failed(&table, &e));
            return Err(e);
        };
        span.in_scope(|| telemetry::commit_retried(&table, retries.attempts(), &e));
        tokio::time::sleep(pause).await;
        s.runner.reopen(config).await?;
        catch_up_with_table(s, marks, &mut batch).await?;
    }
}

/// Another writer may have committed some of these offsets meanwhile (a
/// conflicting `txn`): keep only what the table still lacks.
async fn catch_up_with_table(s: &mut Slot, marks: &mut [Mark], batch: &mut RawBatch) -> Result<()> {
    // Refresh every partition, not only this batch's: the route
    // skip must know what the other writer committed everywhere.
    for p in s.partitions.clone() {
        if let Some(stored) =
            s.runner.store.txn_version(&partition_app_id(&s.runner.cfg.name, &s.topic, p)).await?
        {
            s.stored.insert(p, stored.max(s.stored.get(&p).copied().unwrap_or(0)));
        }
    }
    for m in marks.iter_mut() {
        m.version = m.version.max(s.stored.get(&m.partition.unwrap_or(0)).copied().unwrap_or(0));
    }
    let stored = s.stored.clone();
    let keep = |p: i32, pos: u64| stored.get(&p).is_none_or(|&next| pos as i64 >= next);
    batch.rows.retain(|r| r.replayed || keep(r.partition, r.pos));
    batch.unparsable.retain(|d| keep(d.partition, d.pos));
    Ok(())
}

/// Group offsets for lag tools: the smallest next offset over the tables reading each partition.
fn commit_group_offsets(
    slots: &[Slot],
    topic: &str,
    marks: &[Mark],
    consumer: &StreamConsumer<Ctx>,
) {
    let mut tpl = TopicPartitionList::new();
    for m in marks {
        let p = m.partition.unwrap_or(0);
        let min = slots
            .iter()
            .filter(|o| o.topic == topic)
            .map(|o| o.stored.get(&p).copied().unwrap_or(0))
            .min()
            .unwrap_or(0);
        if min > 0 {
            tpl.add_partition_offset(topic, p, Offset::Offset(min)).ok();
        }
    }
    if tpl.count() > 0 {
        if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
            tracing::warn!(target: "changelake::daemon", topic = %topic, error = %e, "consumer-group offset commit failed (lag dashboards only)");
        }
    }
}

/// Applies a truncate event at `offset` of partition `p` as a commit of its
/// own (the rows before it are already committed).
pub(super) async fn apply_truncate(s: &mut Slot, p: i32, offset: i64) -> Result<RunReport> {
    let next = offset + 1;
    let mark = Mark::partition(&s.runner.cfg.name, &s.topic, p, next);
    let report = s.runner.truncate(vec![mark]).await?;
    s.stored.insert(p, next);
    telemetry::run_committed(&report);
    telemetry::offsets_committed(&s.runner.cfg.name, &s.topic, &[(p, next)]);
    Ok(report)
}
