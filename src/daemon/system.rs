//! One Kafka system's consume loop, as named steps: connect, open its
//! tables, assign every partition at its start offset, forward the partition
//! queues, then route messages into batches and commit them — on size, on
//! age, to bound memory — until shutdown or (`--once`) the end, and commit
//! what is left within the shutdown timeout (docs/operations.md, the daemon
//! and shutdown; docs/replay.md for `--once` runs).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::flush::{apply_truncate, flush};
use super::forward::{forward, forward_main_queue, Decoding, Ev, Received};
use super::probes::Probes;
use super::route::route;
use super::settings::KafkaSystem;
use super::slots::{open_slot, start_offset, PartitionKey, Slot, TopicPartitions};
use super::start::start_positions;
use super::{RunOpts, Shutdown};
use crate::config::{Config, OutOfRange, TableConfig};
use crate::engine::RunReport;
use crate::error::{Error, Result};
use crate::source::kafka::{client_config, Ctx, KafkaError};
use crate::source::registry::Registry;
use crate::telemetry;

/// How long a stopping daemon waits for its Kafka clients to close.
const CLIENTS_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Decoded messages waiting in the loop's channel above which the daemon is
/// behind and closes batches by size only (see the age check).
const BACKLOG_MESSAGES: usize = 1024;

/// Room in the loop's channel for the messages of a commit's duration at
/// tens of thousands of events/s: partition tasks keep receiving (and
/// stamping arrival times) while the loop commits.
const CHANNEL_CAPACITY: usize = 16_384;

/// The system's Kafka clients: the consumer the loop reads, and one for
/// metadata calls (partitions, watermarks, probes).
struct Clients {
    config: ClientConfig,
    consumer: Arc<StreamConsumer<Ctx>>,
    meta: BaseConsumer<Ctx>,
}

fn connect(kafka: &KafkaSystem<'_>) -> Result<Clients> {
    let system = kafka.name;
    let cc = client_config(kafka.brokers, kafka.group_id, kafka.kafka);
    let consumer: Arc<StreamConsumer<Ctx>> =
        Arc::new(cc.create_with_context(Ctx).map_err(|e| {
            Error::Input(format!("systems.{system}: cannot create Kafka consumer: {e}"))
        })?);
    let meta: BaseConsumer<Ctx> =
        cc.create_with_context(Ctx).map_err(|e| Error::Input(format!("systems.{system}: {e}")))?;
    Ok(Clients { config: cc, consumer, meta })
}

/// Runs one Kafka system until shutdown (or, with `once`, the end).
pub(super) async fn run_system(
    config: &Config,
    system: &str,
    tables: Vec<TableConfig>,
    opts: RunOpts,
    shutdown: Shutdown,
) -> Result<Vec<RunReport>> {
    let kafka = KafkaSystem::of(config, system);
    let clients = connect(&kafka)?;
    let mut slots = vec![];
    let mut topic_parts = TopicPartitions::new();
    for t in &tables {
        slots.push(open_slot(config, t, &kafka, &clients.meta, &mut topic_parts).await?);
    }
    let start =
        start_positions(&clients.config, &clients.meta, &kafka, &topic_parts, &mut slots, &opts)
            .await?;
    // Before assigning: between `assign` and splitting the partition
    // queues, fetched messages (and end-of-partition events) land in the
    // main queue, so nothing slow may sit in between (building the registry
    // client loads the system's root certificates).
    let how = decoding(&kafka, &tables)?;
    if how.registry.is_some() {
        // At zero from the start, so `rate()` and `increase()` see the first failure.
        telemetry::schema_registry_failures_init(system);
    }
    assign(&clients.consumer, system, &start.partitions)?;
    let (tx, mut rx) = mpsc::channel::<Ev>(CHANNEL_CAPACITY);
    let tasks = spawn_forwarders(&clients.consumer, &topic_parts, &how, &tx);
    // The daemon keeps the sender to report new topics and partitions; `--once` reads what existed at start.
    let refresh_tx = if opts.once { None } else { Some(tx.clone()) };
    drop(tx);
    let mut run = SystemLoop {
        config,
        kafka,
        opts: &opts,
        consumer: clients.consumer,
        slots,
        topic_parts,
        unfinished: start.position.keys().cloned().collect(),
        position: start.position,
        high_at_start: start.high_at_start,
        tasks,
        refresh_tx,
        how,
        probes: Probes::new(Arc::new(clients.meta), system, kafka.brokers),
        reports: vec![],
    };
    if opts.once {
        run.start_progress();
    }
    run.consume(&mut rx, shutdown).await?;
    run.finish().await
}

/// Assigns every partition at its start offset.
fn assign(
    consumer: &StreamConsumer<Ctx>,
    system: &str,
    partitions: &TopicPartitionList,
) -> Result<()> {
    consumer.assign(partitions).map_err(|e| Error::Input(format!("assign: {e}")))?;
    tracing::info!(target: "changelake::daemon", system, partitions = partitions.count(), "assigned partitions");
    telemetry::set_assigned(system, partitions.count());
    telemetry::broker_probe(system, true, None);
    Ok(())
}

/// One forwarding task per partition queue (so EOF events name their
/// partition), then one for the main queue.
fn spawn_forwarders(
    consumer: &Arc<StreamConsumer<Ctx>>,
    topic_parts: &TopicPartitions,
    how: &Decoding,
    tx: &mpsc::Sender<Ev>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = vec![];
    for (topic, ps) in topic_parts {
        for &p in ps {
            tasks.extend(forward(consumer, topic, p, how, tx));
        }
    }
    tasks.push(forward_main_queue(consumer, topic_parts, how, tx));
    tasks
}

/// How the system's messages decode: the envelope fields its tables read,
/// and an Avro system's registry client.
fn decoding(kafka: &KafkaSystem<'_>, tables: &[TableConfig]) -> Result<Decoding> {
    let keep = crate::decode::tables_env_paths(tables, kafka.format);
    let registry = match kafka.avro {
        None => None,
        Some(cfg) => Some(Arc::new(
            Registry::new(cfg).map_err(|e| Error::Input(format!("systems.{}.{e}", kafka.name)))?,
        )),
    };
    Ok(Decoding { system: kafka.name.into(), format: kafka.format, registry, keep: keep.into() })
}

/// Whether the loop goes on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    /// `--once` read every partition up to its high watermark at start.
    Stop,
}

/// The loop's state: the system's tables and partitions, where each
/// partition stands, and the reports of the commits made so far.
struct SystemLoop<'a> {
    config: &'a Config,
    kafka: KafkaSystem<'a>,
    opts: &'a RunOpts,
    consumer: Arc<StreamConsumer<Ctx>>,
    slots: Vec<Slot>,
    topic_parts: TopicPartitions,
    /// Next offset to read per partition, as far as the loop has seen.
    position: HashMap<PartitionKey, i64>,
    /// High watermark per partition when the run started.
    high_at_start: HashMap<PartitionKey, i64>,
    /// Partitions not yet read up to their high watermark at start.
    unfinished: HashSet<PartitionKey>,
    tasks: Vec<JoinHandle<()>>,
    /// Reports new topics and partitions; None with `--once`.
    refresh_tx: Option<mpsc::Sender<Ev>>,
    /// How messages decode (for the forwarders of new partitions).
    how: Decoding,
    probes: Probes,
    reports: Vec<RunReport>,
}

impl SystemLoop<'_> {
    /// Reads events until shutdown, the channel's end or (`--once`) every
    /// partition's high watermark at start.
    async fn consume(&mut self, rx: &mut mpsc::Receiver<Ev>, mut shutdown: Shutdown) -> Result<()> {
        // max_age is honoured to a twentieth of itself (at most 100 ms late).
        let mut tick = tokio::time::interval(
            Duration::from_millis(100)
                .min(self.config.batching.max_age / 20)
                .max(Duration::from_millis(5)),
        );
        let mut stopping = self.once_done();
        while !stopping {
            tokio::select! {
                ev = rx.recv() => match ev {
                    None => break,
                    Some(ev) => stopping = self.on_event(ev).await? == Flow::Stop,
                },
                _ = tick.tick() => {
                    stopping = self.take_waiting_if_due(rx).await? == Flow::Stop;
                    if !stopping {
                        self.on_tick(rx.len()).await?;
                    }
                }
                _ = &mut shutdown => stopping = true,
            }
        }
        Ok(())
    }

    /// `--once`: each table has the offsets up to the high watermarks at start to read.
    fn start_progress(&self) {
        for s in &self.slots {
            let total: i64 = s
                .partitions
                .iter()
                .map(|&p| {
                    let key = PartitionKey::new(&s.topic, p);
                    let high = self.high_at_start.get(&key).copied().unwrap_or(0);
                    (high - self.position.get(&key).copied().unwrap_or(high)).max(0)
                })
                .sum();
            telemetry::progress::start(
                &s.runner.cfg.name,
                telemetry::progress::Unit::Offsets,
                total as u64,
            );
        }
    }

    /// A `--once` run read every partition up to its high watermark at start.
    fn once_done(&self) -> bool {
        self.opts.once && self.unfinished.is_empty()
    }

    async fn on_event(&mut self, ev: Ev) -> Result<Flow> {
        match ev {
            Ev::Err(e) => telemetry::kafka_error(self.kafka.name, &e),
            Ev::OutOfRange { topic, partition } => self.on_out_of_range(topic, partition).await?,
            Ev::Partitions { topic, partitions } => self.assign_new_partitions(topic, partitions),
            Ev::Eof { topic, partition } => {
                return Ok(self.on_partition_end(PartitionKey::new(&topic, partition)));
            }
            Ev::Msg(received) => self.on_message(received).await?,
        }
        Ok(Flow::Continue)
    }

    /// New partitions of a topic (or a new topic): assigned at their start
    /// offsets, forwarded, and added to the tables reading them.
    fn assign_new_partitions(&mut self, topic: String, ps: Vec<i32>) {
        let known = self.topic_parts.entry(topic.clone()).or_default();
        let new: Vec<i32> = ps.into_iter().filter(|p| !known.contains(p)).collect();
        if new.is_empty() {
            return;
        }
        let mut add = TopicPartitionList::new();
        for &p in &new {
            add.add_partition_offset(&topic, p, start_offset(&self.slots, &topic, p)).ok();
        }
        match self.consumer.incremental_assign(&add) {
            Ok(()) => {
                tracing::info!(target: "changelake::daemon", topic = %topic, partitions = ?new, "assigned new partitions");
                telemetry::set_assigned(self.kafka.name, new.len());
                for &p in &new {
                    known.push(p);
                    for s in self.slots.iter_mut().filter(|s| s.topic == topic) {
                        s.partitions.push(p);
                        telemetry::register_partition(&s.runner.cfg.name, &topic, p, None);
                    }
                    self.position.insert(PartitionKey::new(&topic, p), 0);
                    if let Some(tx) = &self.refresh_tx {
                        self.tasks.extend(forward(&self.consumer, &topic, p, &self.how, tx));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(target: "changelake::daemon", topic = %topic, error = %e, "cannot assign new partitions (will retry)")
            }
        }
    }

    /// Fetching found the partition's next offset gone while running:
    /// retention deleted events before they were read (or the topic was
    /// recreated). As at start, `fail` stops naming the partition and range;
    /// `earliest` continues from the low watermark and counts the gap
    /// (docs/commit-protocol.md, offsets outside the partition range).
    async fn on_out_of_range(&mut self, topic: String, p: i32) -> Result<()> {
        let key = PartitionKey::new(&topic, p);
        let c = self.consumer.clone();
        let t = topic.clone();
        let range = tokio::task::spawn_blocking(move || {
            c.fetch_watermarks(&t, p, crate::source::kafka::METADATA_TIMEOUT)
        })
        .await
        .expect("join");
        let (low, high) = match range {
            Ok(r) => r,
            Err(e) => {
                // The client reports the partition again on its next fetch.
                telemetry::kafka_error(self.kafka.name, &format!("watermarks of {topic}/{p}: {e}"));
                return Ok(());
            }
        };
        let slots: Vec<&Slot> = self.slots.iter().filter(|s| s.topic == topic).collect();
        let stored = slots.iter().filter_map(|s| s.stored.get(&p).copied()).min();
        let position = self.position.get(&key).copied().or(stored).unwrap_or(low);
        let why = if position > high {
            "beyond the high watermark: the topic was recreated or truncated"
        } else {
            "below the low watermark: retention deleted events before they were read"
        };
        for s in &slots {
            let table = &s.runner.cfg.name;
            telemetry::offset_out_of_range(table, &topic, p, position, low, high, why);
        }
        match self.kafka.on_out_of_range {
            OutOfRange::Fail => Err(Error::OffsetOutOfRange {
                table: slots.first().map(|s| s.runner.cfg.name.clone()).unwrap_or_default(),
                topic,
                partition: p,
                stored: position,
                low,
                high,
                why,
            }),
            OutOfRange::Earliest => {
                // The client stopped fetching the partition (it cannot be
                // sought in that state): assign it again at the low watermark.
                let reassign = |e: &rdkafka::error::KafkaError| {
                    KafkaError::client(self.kafka.brokers, format_args!("reassign {topic}/{p}"), e)
                };
                let mut one = TopicPartitionList::new();
                one.add_partition(&topic, p);
                self.consumer.incremental_unassign(&one).map_err(|e| reassign(&e))?;
                let mut at = TopicPartitionList::new();
                at.add_partition_offset(&topic, p, Offset::Offset(low))
                    .map_err(|e| reassign(&e))?;
                self.consumer.incremental_assign(&at).map_err(|e| reassign(&e))?;
                for s in &slots {
                    telemetry::offset_reset(&s.runner.cfg.name, &topic, p, position, low);
                }
                self.position.insert(key, low);
                Ok(())
            }
        }
    }

    /// A partition reached its end: finished if that is past its high watermark at start.
    fn on_partition_end(&mut self, key: PartitionKey) -> Flow {
        let position = self.position.get(&key).copied().unwrap_or(0);
        if position >= self.high_at_start.get(&key).copied().unwrap_or(0) {
            self.unfinished.remove(&key);
        }
        if self.once_done() {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }

    /// Routes a message into its tables' batches; commits what must be committed now.
    async fn on_message(&mut self, received: Received) -> Result<()> {
        let (p, off) = (received.partition, received.offset);
        let key = PartitionKey { topic: received.topic.clone(), partition: p };
        if self.opts.once {
            // Offsets of the backlog at start now read (gaps in offsets included).
            let high = self.high_at_start.get(&key).copied().unwrap_or(0);
            let before = self.position.get(&key).copied().unwrap_or(0).min(high);
            let done = ((off + 1).min(high) - before).max(0) as u64;
            for s in self.slots.iter().filter(|s| *s.topic == *key.topic) {
                telemetry::progress::advance(&s.runner.cfg.name, done, 1);
            }
        }
        self.position.insert(key, off + 1);
        for i in route(&mut self.slots, self.opts, received) {
            self.commit(i).await?;
            self.reports.push(apply_truncate(&mut self.slots[i], p, off).await?);
        }
        self.commit_full_batches().await?;
        self.bound_memory().await
    }

    /// Commits table `i`'s batch.
    async fn commit(&mut self, i: usize) -> Result<()> {
        self.reports.push(flush(&mut self.slots, i, &self.consumer, self.config).await?);
        Ok(())
    }

    /// Batches at `max_rows` or `max_bytes` are committed.
    async fn commit_full_batches(&mut self) -> Result<()> {
        let batching = &self.config.batching;
        for i in 0..self.slots.len() {
            let b = &self.slots[i].buf;
            if b.rows.len() >= batching.max_rows || b.bytes >= batching.max_bytes {
                self.commit(i).await?;
            }
        }
        Ok(())
    }

    /// Bounded memory: over `max_buffered_bytes`, pause fetching (librdkafka's
    /// prefetch queues too), commit the biggest buffer, resume.
    async fn bound_memory(&mut self) -> Result<()> {
        let max = self.config.batching.max_buffered_bytes;
        let total: usize = self.slots.iter().map(|s| s.buf.bytes).sum();
        if total > max {
            let assigned = self.consumer.assignment().unwrap_or_default();
            let _ = self.consumer.pause(&assigned);
            telemetry::paused(assigned.count(), total, max);
            let i = (0..self.slots.len()).max_by_key(|&i| self.slots[i].buf.bytes).unwrap_or(0);
            let r = flush(&mut self.slots, i, &self.consumer, self.config).await;
            let _ = self.consumer.resume(&assigned);
            telemetry::paused(0, 0, max);
            self.reports.push(r?);
        }
        Ok(())
    }

    /// Before a batch closes on age, the messages already waiting in the
    /// channel are routed (at most [`BACKLOG_MESSAGES`]): after a commit
    /// slower than `max_age` (an object store) they were all older than it,
    /// and closing first committed the few routed so far, 1-4 rows a
    /// commit while catching up on S3 (docs/operations.md, the daemon).
    async fn take_waiting_if_due(&mut self, rx: &mut mpsc::Receiver<Ev>) -> Result<Flow> {
        let max_age = self.config.batching.max_age;
        if !self.slots.iter().any(|s| s.buf.since.is_some_and(|t| t.elapsed() >= max_age)) {
            return Ok(Flow::Continue);
        }
        for _ in 0..rx.len().min(BACKLOG_MESSAGES) {
            let Ok(ev) = rx.try_recv() else { break };
            if self.on_event(ev).await? == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }

    /// The periodic tick: due probes, buffer gauges, batches at `max_age`.
    /// `waiting` is the number of decoded messages in the loop's channel.
    async fn on_tick(&mut self, waiting: usize) -> Result<()> {
        self.probes.spawn_due(&self.slots, &self.topic_parts, self.refresh_tx.as_ref());
        // Behind (a backlog of decoded messages waiting): keep routing, the
        // batches close by size. Closing on age here would commit the few
        // messages routed since the last commit, each already older than
        // max_age, and the loop would never catch up.
        let backlog = waiting > BACKLOG_MESSAGES;
        let max_age = self.config.batching.max_age;
        for i in 0..self.slots.len() {
            // Buffer sizes are published here, not per message: a labelled gauge lookup per event costs more than the event's routing.
            telemetry::buffered(&self.slots[i].runner.cfg.name, self.slots[i].buf.bytes);
            if !backlog && self.slots[i].buf.since.is_some_and(|s| s.elapsed() >= max_age) {
                self.commit(i).await?;
            }
        }
        Ok(())
    }

    /// Stops fetching, then commits what is buffered within the shutdown
    /// timeout. Returns the reports of the commits that were made.
    async fn finish(mut self) -> Result<Vec<RunReport>> {
        for t in &self.tasks {
            t.abort();
        }
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
        let (slots, consumer, config) = (&mut self.slots, &self.consumer, self.config);
        let drain = async {
            let mut out = vec![];
            for i in 0..slots.len() {
                out.push(flush(slots, i, consumer, config).await?);
            }
            // Within the same bound: the next start loads the index instead
            // of rebuilding it.
            for s in slots.iter_mut() {
                s.runner.save_index().await;
            }
            Ok::<_, Error>(out)
        };
        let system = self.kafka.name;
        match tokio::time::timeout(config.shutdown_timeout, drain).await {
            Ok(r) => self.reports.extend(r?),
            Err(_) => tracing::warn!(
                target: "changelake::daemon",
                system,
                "shutdown_timeout reached: open batches abandoned (they will be re-read)"
            ),
        }
        for s in &self.slots {
            telemetry::progress::finish(&s.runner.cfg.name);
            if s.tombstones + s.truncates > 0 {
                tracing::info!(target: "changelake::daemon", table = %s.runner.cfg.name, tombstones = s.tombstones, truncates = s.truncates, "skipped tombstones and truncate events");
            }
        }
        // Closing the Kafka clients (leaving the group, so the fleet
        // rebalances at once) is waited for, but only briefly: with a dead
        // broker it can wait on requests in flight, and then it finishes
        // on a blocking thread the process exit does not wait for. Not
        // waiting at all left the clients closing while the caller went on
        // (`changelake demo` stopped its broker under them: errors after
        // its last line).
        let SystemLoop { consumer, probes, reports, .. } = self;
        let closing = tokio::task::spawn_blocking(move || drop((consumer, probes)));
        let _ = tokio::time::timeout(CLIENTS_CLOSE_WAIT, closing).await;
        Ok(reports.into_iter().filter(|r| !r.skipped).collect())
    }
}
