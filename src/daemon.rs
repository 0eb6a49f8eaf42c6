//! The streaming daemon: one consume loop per Kafka system, micro-batches per
//! table, one Delta commit per batch carrying the offsets it consumed.
//!
//! Exactly-once comes from the table, not from Kafka: every commit holds one
//! `txn` action per partition (`changelake/<table>/<topic>/<p>`, version = next
//! offset to read). At start each partition is sought to the smallest stored
//! offset over the tables that read it, and each table skips events below its
//! own offset. Consumer-group offsets are committed after the table commit,
//! for lag dashboards only. A crash anywhere loses nothing (offsets only move
//! with the data) and repeats nothing (replayed events are below the stored
//! offsets, and the merge is idempotent anyway).
//!
//! Partitions are assigned manually (every partition of every table's topic),
//! so one daemon owns a config; a second one racing on the same tables loses
//! at commit time (Delta's `txn` conflict check) and re-reads the table.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::config::{Config, Format, SystemKind, TableConfig};
use crate::decode::{decode, store_paths, Decoded};
use crate::engine::{Mark, RunReport, TableRunner};
use crate::error::{Error, Result};
use crate::source::kafka::{app_id, client_config, partitions, watermarks, Ctx};
use crate::source::{RawBatch, RawRow, Unparsable};
use crate::telemetry;
use crate::value::Value;

/// Where a run starts and when it stops.
#[derive(Debug, Clone, Default)]
pub struct RunOpts {
    /// Stop once every partition reached the high watermark seen at start.
    pub once: bool,
    /// Only these tables (replay).
    pub only_table: Option<String>,
    /// Start positions overriding the stored offsets (replay).
    pub start: Option<StartAt>,
    /// Merge events at or below the stored offsets again (replay --reapply).
    pub reapply: bool,
}

#[derive(Debug, Clone)]
pub enum StartAt {
    Beginning,
    Offsets(Vec<(String, i32, i64)>),
    /// Milliseconds since the epoch.
    Timestamp(i64),
}

/// Resolves when the process is asked to stop (SIGINT/SIGTERM); injectable for tests.
pub type Shutdown = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// SIGINT/SIGTERM stop the daemon. SIGHUP (sent by some supervisors and on
/// terminal hang-up) would kill the process by default; config reload is not
/// supported, so it is logged and ignored. Handlers are installed at once, not
/// when the future is first polled. Must be called inside the runtime.
pub fn signals() -> Shutdown {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        if let Ok(mut hup) = signal(SignalKind::hangup()) {
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    tracing::warn!("SIGHUP ignored: config reload is not supported; restart the daemon to apply a changed config");
                }
            });
        }
        Box::pin(async move {
            match term {
                Ok(mut term) => {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            tracing::info!("shutdown requested: stop fetching, commit open batches");
        })
    }
    #[cfg(not(unix))]
    Box::pin(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutdown requested: stop fetching, commit open batches");
    })
}

#[derive(Default)]
struct Buffer {
    rows: Vec<(Vec<(String, Value)>, RawRow)>,
    dead: Vec<Unparsable>,
    /// Next offset per partition covered by this buffer.
    next: BTreeMap<i32, i64>,
    bytes: usize,
    since: Option<Instant>,
}

struct Slot {
    runner: TableRunner,
    topic: String,
    /// Envelope paths to store as columns (Debezium `sequence_by` / `valid_time`).
    store_paths: Vec<String>,
    stored: HashMap<i32, i64>,
    /// Every assigned partition of `topic`.
    partitions: Vec<i32>,
    buf: Buffer,
    tombstones: u64,
    truncates: u64,
}

enum Ev {
    /// A message, its decoding (envelope paths not yet stored as columns),
    /// its payload as text (kept with the row for dead letters) and when it
    /// was received: a batch's `max_age` counts from its first message's
    /// arrival, not from when the loop got to it (it may have waited out a commit).
    Msg(OwnedMessage, std::result::Result<Decoded, String>, String, Instant),
    Eof(String, i32),
    Err(String),
    /// Current partitions of a topic (periodic metadata refresh).
    Partitions(String, Vec<i32>),
}

/// Decoded messages waiting in the loop's channel above which the daemon is
/// behind and closes batches by size only (see the age check).
const BACKLOG_MESSAGES: usize = 1024;

/// Forwards one partition queue into the loop's channel.
fn forward(
    consumer: &Arc<StreamConsumer<Ctx>>,
    topic: &str,
    p: i32,
    format: Format,
    tx: &mpsc::Sender<Ev>,
) -> Option<tokio::task::JoinHandle<()>> {
    let q = consumer.split_partition_queue(topic, p)?;
    let tx = tx.clone();
    let topic = topic.to_string();
    Some(tokio::spawn(async move {
        loop {
            let ev = match q.recv().await {
                Ok(m) => {
                    // Decoding is the costliest per-event step: done here, one
                    // task per partition, so it runs on every core instead of
                    // in the single consume loop. Table-specific stored
                    // envelope columns are added by `route`.
                    let received = Instant::now();
                    let d = decode(format, m.key(), m.payload(), &[]);
                    let raw = m
                        .payload()
                        .map(|x| String::from_utf8_lossy(x).into_owned())
                        .unwrap_or_default();
                    Ev::Msg(m.detach(), d, raw, received)
                }
                Err(RdError::PartitionEOF(_)) => Ev::Eof(topic.clone(), p),
                Err(e) => Ev::Err(e.to_string()),
            };
            if tx.send(ev).await.is_err() {
                return;
            }
        }
    }))
}

/// Starts reading a new partition: from the smallest stored offset over the tables reading it.
fn start_offset(slots: &[Slot], topic: &str, p: i32) -> Offset {
    slots
        .iter()
        .filter(|s| s.topic == topic)
        .map(|s| s.stored.get(&p).copied())
        .min()
        .flatten()
        .map(Offset::Offset)
        .unwrap_or(Offset::Beginning)
}

/// Serves `/metrics` on `metrics.listen`, or on 127.0.0.1:9464 for a
/// long-running daemon without one. A configured address that cannot be
/// bound is an error: an unmonitored daemon looks healthy while it is not.
pub async fn serve_metrics(config: &Config, once: bool) -> Result<()> {
    match (&config.metrics_listen, once) {
        (Some(addr), _) => telemetry::serve(addr)
            .await
            .map_err(|e| Error::Input(format!("metrics.listen {addr}: {e}"))),
        (None, false) => {
            if let Err(e) = telemetry::serve("127.0.0.1:9464").await {
                tracing::warn!(error = %e, "cannot serve metrics on the default 127.0.0.1:9464 (set metrics.listen)");
            }
            Ok(())
        }
        (None, true) => Ok(()),
    }
}

/// Runs every Kafka system of the config until shutdown (or, with `once`, the end).
pub async fn run(config: &Config, opts: RunOpts, shutdown: Shutdown) -> Result<Vec<RunReport>> {
    serve_metrics(config, opts.once).await?;
    // Events may wait max_age for their batch, then a commit with retries.
    telemetry::set_commit_deadline(config.batching.max_age * 2 + Duration::from_secs(60));
    let shared = futures::future::FutureExt::shared(shutdown);
    let mut runs = vec![];
    for (name, sys) in &config.systems {
        if matches!(sys.kind, SystemKind::Kafka { .. }) {
            let tables: Vec<TableConfig> = config
                .tables
                .iter()
                .filter(|t| {
                    &t.system == name && opts.only_table.as_ref().is_none_or(|o| *o == t.name)
                })
                .cloned()
                .collect();
            if !tables.is_empty() {
                runs.push(run_system(config, name, tables, opts.clone(), Box::pin(shared.clone())));
            }
        }
    }
    let mut reports = vec![];
    for r in futures::future::join_all(runs).await {
        reports.extend(r?);
    }
    Ok(reports)
}

async fn run_system(
    config: &Config,
    system: &str,
    tables: Vec<TableConfig>,
    opts: RunOpts,
    mut shutdown: Shutdown,
) -> Result<Vec<RunReport>> {
    let SystemKind::Kafka { brokers, group_id, topic: template, format, kafka } =
        &config.systems[system].kind
    else {
        unreachable!()
    };
    let cc = client_config(brokers, group_id, kafka);
    let consumer: Arc<StreamConsumer<Ctx>> =
        Arc::new(cc.create_with_context(Ctx).map_err(|e| {
            Error::Input(format!("systems.{system}: cannot create Kafka consumer: {e}"))
        })?);
    let meta: BaseConsumer<Ctx> =
        cc.create_with_context(Ctx).map_err(|e| Error::Input(format!("systems.{system}: {e}")))?;

    let mut slots = vec![];
    let mut topic_parts: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for t in &tables {
        let topic = template.replace("{object}", &t.object);
        let mut runner = TableRunner::open(config, t).await?;
        runner.lock(config)?;
        if !topic_parts.contains_key(&topic) {
            let m = meta_call(&meta, |m| partitions(m, &topic, brokers)).await?;
            if m.is_empty() {
                tracing::warn!(table = %t.name, topic = %topic, "topic does not exist (yet); nothing to read");
            }
            topic_parts.insert(topic.clone(), m);
        }
        let mut stored = HashMap::new();
        telemetry::register_table(&t.name, t.strategy.as_str());
        for &p in &topic_parts[&topic] {
            let v = runner.store.txn_version(&app_id(&t.name, &topic, p)).await?;
            telemetry::register_partition(&t.name, &topic, p, v);
            if let Some(v) = v {
                stored.insert(p, v);
            }
        }
        slots.push(Slot {
            store_paths: store_paths(t, *format),
            partitions: topic_parts[&topic].clone(),
            runner,
            topic,
            stored,
            buf: Buffer::default(),
            tombstones: 0,
            truncates: 0,
        });
    }

    // Start positions: the smallest stored next offset over the tables reading a partition.
    let mut tpl = TopicPartitionList::new();
    let mut position: HashMap<(String, i32), i64> = HashMap::new();
    let mut high_at_start: HashMap<(String, i32), i64> = HashMap::new();
    let ts_offsets = match &opts.start {
        Some(StartAt::Timestamp(ms)) => {
            let mut q = TopicPartitionList::new();
            for (topic, ps) in &topic_parts {
                for &p in ps {
                    q.add_partition_offset(topic, p, Offset::Offset(*ms)).ok();
                }
            }
            let c2: BaseConsumer<Ctx> =
                cc.create_with_context(Ctx).map_err(|e| Error::Input(e.to_string()))?;
            let r = tokio::task::spawn_blocking(move || {
                c2.offsets_for_times(q, Duration::from_secs(10))
            })
            .await
            .expect("join");
            r.map_err(|e| Error::Input(format!("offsets for timestamp: {e}")))?
                .elements()
                .iter()
                .map(|e| ((e.topic().to_string(), e.partition()), e.offset()))
                .collect::<HashMap<_, _>>()
        }
        _ => HashMap::new(),
    };
    for (topic, ps) in &topic_parts {
        for &p in ps {
            let stored_min = slots
                .iter()
                .filter(|s| &s.topic == topic)
                .map(|s| s.stored.get(&p).copied())
                .min()
                .flatten();
            let start = match &opts.start {
                None => stored_min.map(Offset::Offset).unwrap_or(Offset::Beginning),
                Some(StartAt::Beginning) => Offset::Beginning,
                Some(StartAt::Offsets(list)) => list
                    .iter()
                    .find(|(t, pp, _)| t == topic && *pp == p)
                    .map(|(_, _, o)| Offset::Offset(*o))
                    .unwrap_or(Offset::Beginning),
                Some(StartAt::Timestamp(_)) => {
                    ts_offsets.get(&(topic.clone(), p)).copied().unwrap_or(Offset::End)
                }
            };
            tpl.add_partition_offset(topic, p, start).map_err(|e| Error::Input(e.to_string()))?;
            let (low, high) = meta_call(&meta, |m| watermarks(m, topic, p, brokers)).await?;
            if let Some(stored) = stored_min.filter(|s| *s > high) {
                // The topic was recreated or truncated: events up to the stored
                // offset would be taken for replays and skipped.
                tracing::error!(
                    topic = %topic, partition = p, stored_next_offset = stored, high_watermark = high,
                    "stored offset is beyond the partition's end (topic recreated?); new events below it are skipped as replays. \
                     Re-read them with `changelake replay --from-offsets {topic}:{p}=0 --reapply`"
                );
            }
            let pos = match start {
                Offset::Offset(o) => o,
                Offset::End => high,
                _ => low,
            };
            position.insert((topic.clone(), p), pos);
            high_at_start.insert((topic.clone(), p), high);
        }
    }
    consumer.assign(&tpl).map_err(|e| Error::Input(format!("assign: {e}")))?;
    tracing::info!(system, partitions = tpl.count(), "assigned partitions");
    telemetry::set_assigned(system, tpl.count());
    telemetry::broker_probe(system, true, None);
    let meta = Arc::new(meta);
    let mut last_lag = Instant::now() - Duration::from_secs(3600);
    let probing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut last_probe = Instant::now();

    // One forwarding task per partition queue: EOF events then name their partition.
    // Room for the messages of a commit's duration at tens of thousands of
    // events/s: partition tasks keep receiving (and stamping arrival times)
    // while the loop commits.
    let (tx, mut rx) = mpsc::channel::<Ev>(16_384);
    let mut tasks = vec![];
    for (topic, ps) in &topic_parts {
        for &p in ps {
            tasks.extend(forward(&consumer, topic, p, *format, &tx));
        }
    }
    {
        // The main queue only carries client-level errors once partitions are split.
        let c = consumer.clone();
        let tx = tx.clone();
        let format = *format;
        tasks.push(tokio::spawn(async move {
            loop {
                let ev = match c.recv().await {
                    Ok(m) => {
                        let received = Instant::now();
                        let d = decode(format, m.key(), m.payload(), &[]);
                        let raw = m
                            .payload()
                            .map(|x| String::from_utf8_lossy(x).into_owned())
                            .unwrap_or_default();
                        Ev::Msg(m.detach(), d, raw, received)
                    }
                    Err(e) => Ev::Err(e.to_string()),
                };
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
        }));
    }
    // The daemon keeps the sender to report new topics and partitions; `--once` reads what existed at start.
    let refresh_tx = if opts.once { None } else { Some(tx.clone()) };
    drop(tx);
    let mut last_refresh = Instant::now();

    let mut done: HashMap<(String, i32), bool> =
        position.keys().map(|k| (k.clone(), false)).collect();
    let batching = config.batching.clone();
    let mut reports = vec![];
    // max_age is honoured to a twentieth of itself (at most 100 ms late).
    let mut tick = tokio::time::interval(
        Duration::from_millis(100).min(batching.max_age / 20).max(Duration::from_millis(5)),
    );
    let finished = |done: &HashMap<(String, i32), bool>| done.values().all(|d| *d);
    let mut stopping = opts.once && finished(&done);
    while !stopping {
        tokio::select! {
            ev = rx.recv() => match ev {
                None => break,
                Some(Ev::Err(e)) => telemetry::kafka_error(system, &e),
                Some(Ev::Partitions(topic, ps)) => {
                    let known = topic_parts.entry(topic.clone()).or_default();
                    let new: Vec<i32> = ps.into_iter().filter(|p| !known.contains(p)).collect();
                    if !new.is_empty() {
                        let mut add = TopicPartitionList::new();
                        for &p in &new {
                            add.add_partition_offset(&topic, p, start_offset(&slots, &topic, p)).ok();
                        }
                        match consumer.incremental_assign(&add) {
                            Ok(()) => {
                                tracing::info!(topic = %topic, partitions = ?new, "assigned new partitions");
                                telemetry::set_assigned(system, new.len());
                                for &p in &new {
                                    known.push(p);
                                    for s in slots.iter_mut().filter(|s| s.topic == topic) {
                                        s.partitions.push(p);
                                        telemetry::register_partition(&s.runner.cfg.name, &topic, p, None);
                                    }
                                    position.insert((topic.clone(), p), 0);
                                    if let Some(tx) = &refresh_tx {
                                        tasks.extend(forward(&consumer, &topic, p, *format, tx));
                                    }
                                }
                            }
                            Err(e) => tracing::warn!(topic = %topic, error = %e, "cannot assign new partitions (will retry)"),
                        }
                    }
                }
                Some(Ev::Eof(topic, p)) => {
                    let key = (topic, p);
                    if position.get(&key).copied().unwrap_or(0) >= high_at_start.get(&key).copied().unwrap_or(0) {
                        done.insert(key, true);
                    }
                    if opts.once && finished(&done) {
                        stopping = true;
                    }
                }
                Some(Ev::Msg(m, decoded, raw, received)) => {
                    let (topic, p, off) = (m.topic().to_string(), m.partition(), m.offset());
                    position.insert((topic.clone(), p), off + 1);
                    for i in route(&mut slots, &opts, &m, decoded, raw, received) {
                        reports.push(flush(&mut slots, i, &consumer, config).await?);
                        let s = &mut slots[i];
                        let mark = Mark { app: app_id(&s.runner.cfg.name, &s.topic, p), version: off + 1, partition: Some(p) };
                        let report = s.runner.truncate(vec![mark]).await?;
                        s.stored.insert(p, off + 1);
                        telemetry::run_committed(&report);
                        telemetry::offsets_committed(&s.runner.cfg.name, &s.topic, &[(p, off + 1)]);
                        reports.push(report);
                    }
                    for i in 0..slots.len() {
                        let b = &slots[i].buf;
                        if b.rows.len() >= batching.max_rows || b.bytes >= batching.max_bytes {
                            reports.push(flush(&mut slots, i, &consumer, config).await?);
                        }
                    }
                    let total: usize = slots.iter().map(|s| s.buf.bytes).sum();
                    if total > batching.max_buffered_bytes {
                        // Bounded memory: pause fetching (librdkafka's prefetch queues too),
                        // commit the biggest buffer, resume.
                        let assigned = consumer.assignment().unwrap_or_default();
                        let _ = consumer.pause(&assigned);
                        telemetry::paused(assigned.count(), total, batching.max_buffered_bytes);
                        let i = (0..slots.len()).max_by_key(|&i| slots[i].buf.bytes).unwrap_or(0);
                        let r = flush(&mut slots, i, &consumer, config).await;
                        let _ = consumer.resume(&assigned);
                        telemetry::paused(0, 0, batching.max_buffered_bytes);
                        reports.push(r?);
                    }
                }
            },
            _ = tick.tick() => {
                if let Some(tx) = refresh_tx.as_ref().filter(|_| last_refresh.elapsed() >= Duration::from_secs(10)) {
                    last_refresh = Instant::now();
                    spawn_partition_refresh(meta.clone(), topic_parts.keys().cloned().collect(), brokers.clone(), tx.clone());
                }
                if last_lag.elapsed() >= Duration::from_secs(5) {
                    last_lag = Instant::now();
                    spawn_lag_probe(meta.clone(), &slots, brokers.clone());
                }
                if last_probe.elapsed() >= Duration::from_secs(2) && !probing.swap(true, std::sync::atomic::Ordering::AcqRel) {
                    last_probe = Instant::now();
                    spawn_broker_probe(meta.clone(), system.to_string(), probing.clone());
                }
                // Behind (a backlog of decoded messages waiting): keep routing, the
                // batches close by size. Closing on age here would commit the few
                // messages routed since the last commit, each already older than
                // max_age, and the loop would never catch up.
                let backlog = rx.len() > BACKLOG_MESSAGES;
                for i in 0..slots.len() {
                    // Buffer sizes are published here, not per message: a labelled gauge lookup per event costs more than the event's routing.
                    telemetry::buffered(&slots[i].runner.cfg.name, slots[i].buf.bytes);
                    if !backlog && slots[i].buf.since.is_some_and(|s| s.elapsed() >= batching.max_age) {
                        reports.push(flush(&mut slots, i, &consumer, config).await?);
                    }
                }
            }
            _ = &mut shutdown => stopping = true,
        }
    }
    // Stop fetching, then commit what is buffered within the shutdown timeout.
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        let _ = t.await;
    }
    let drain = async {
        let mut out = vec![];
        for i in 0..slots.len() {
            out.push(flush(&mut slots, i, &consumer, config).await?);
        }
        Ok::<_, Error>(out)
    };
    match tokio::time::timeout(config.shutdown_timeout, drain).await {
        Ok(r) => reports.extend(r?),
        Err(_) => tracing::warn!(
            system,
            "shutdown_timeout reached: open batches abandoned (they will be re-read)"
        ),
    }
    for s in &slots {
        if s.tombstones + s.truncates > 0 {
            tracing::info!(table = %s.runner.cfg.name, tombstones = s.tombstones, truncates = s.truncates, "skipped tombstones and truncate events");
        }
    }
    Ok(reports.into_iter().filter(|r| !r.skipped).collect())
}

/// Re-reads topic metadata off the hot path: topics created after start and
/// partitions added later are picked up without a restart.
fn spawn_partition_refresh(
    meta: Arc<BaseConsumer<Ctx>>,
    topics: Vec<String>,
    brokers: String,
    tx: mpsc::Sender<Ev>,
) {
    tokio::task::spawn_blocking(move || {
        for topic in topics {
            if let Ok(ps) = partitions(&meta, &topic, &brokers) {
                if !ps.is_empty() && tx.blocking_send(Ev::Partitions(topic, ps)).is_err() {
                    return;
                }
            }
        }
    });
}

/// Updates the watermark and consumer-lag gauges off the hot path (watermark
/// calls block). A partition a table never committed counts from its low
/// watermark.
fn spawn_lag_probe(meta: Arc<BaseConsumer<Ctx>>, slots: &[Slot], brokers: String) {
    let targets: Vec<(String, String, i32, Option<i64>)> = slots
        .iter()
        .flat_map(|s| {
            s.partitions
                .iter()
                .map(|p| (s.runner.cfg.name.clone(), s.topic.clone(), *p, s.stored.get(p).copied()))
        })
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut seen: HashMap<(String, i32), (i64, i64)> = HashMap::new();
        for (table, topic, p, stored) in targets {
            let key = (topic.clone(), p);
            let marks = match seen.get(&key) {
                Some(m) => Some(*m),
                None => watermarks(&meta, &topic, p, &brokers).ok().inspect(|&m| {
                    seen.insert(key, m);
                }),
            };
            if let Some((low, high)) = marks {
                telemetry::high_watermark(&topic, p, high);
                telemetry::lag(&table, &topic, p, stored.unwrap_or(low).max(low));
            }
        }
    });
}

/// Asks the cluster for metadata (off the hot path): `/readyz` reports the
/// broker unreachable when this fails, and reachable again when it answers.
fn spawn_broker_probe(
    meta: Arc<BaseConsumer<Ctx>>,
    system: String,
    busy: Arc<std::sync::atomic::AtomicBool>,
) {
    tokio::task::spawn_blocking(move || {
        // Only brokers answer a metadata request; a cached answer would hide an outage.
        let r = meta.fetch_metadata(None, Duration::from_secs(3));
        match r {
            Ok(md) if !md.brokers().is_empty() => telemetry::broker_probe(&system, true, None),
            Ok(_) => telemetry::broker_probe(&system, false, Some("no brokers in metadata")),
            Err(e) => telemetry::broker_probe(&system, false, Some(&e.to_string())),
        }
        busy.store(false, std::sync::atomic::Ordering::Release);
    });
}

async fn meta_call<T: Send + 'static>(
    meta: &BaseConsumer<Ctx>,
    f: impl FnOnce(&BaseConsumer<Ctx>) -> std::result::Result<T, crate::source::kafka::KafkaError>,
) -> Result<T> {
    // Metadata calls block; they are short and rare (start-up only).
    tokio::task::block_in_place(|| f(meta)).map_err(|e| Error::Input(e.to_string()))
}

/// Hands one message to every table reading its topic. Returns the tables
/// that must apply a truncate now (after committing what came before it).
fn route(
    slots: &mut [Slot],
    opts: &RunOpts,
    m: &OwnedMessage,
    d: std::result::Result<Decoded, String>,
    raw: String,
    received: Instant,
) -> Vec<usize> {
    let mut truncates = vec![];
    let (topic, p, off) = (m.topic(), m.partition(), m.offset());
    let targets: Vec<usize> =
        slots.iter().enumerate().filter(|(_, s)| s.topic == topic).map(|(i, _)| i).collect();
    // A message that does not decode is dead-lettered once, by the first table reading the topic.
    let owner = targets.first().copied();
    // The last table reading the topic takes the decoded row; the others get copies.
    let mut owned = Some((d, raw));
    for (n, &i) in targets.iter().enumerate() {
        let s = &mut slots[i];
        let Some((d, _)) = owned.as_ref() else { break };
        let replayed = s.stored.get(&p).is_some_and(|&next| off < next);
        if replayed && !opts.reapply {
            continue; // already in this table
        }
        if s.runner.cfg.apply_truncates && matches!(d, Ok(Decoded::Truncate)) {
            // Committed on its own, right after the rows before it.
            s.truncates += 1;
            truncates.push(i);
            continue;
        }
        let b = &mut s.buf;
        if b.since.is_none() {
            b.since = Some(received);
            telemetry::pending(&s.runner.cfg.name, Some(received));
        }
        let next = b.next.entry(p).or_insert(off + 1);
        *next = (*next).max(off + 1);
        match d {
            Ok(Decoded::Row { .. }) => {
                let (mut data, env, raw) = match (n + 1 == targets.len(), &owned) {
                    (false, Some((Ok(Decoded::Row { data, env }), raw))) => {
                        (data.clone(), env.clone(), raw.clone())
                    }
                    (_, _) => match owned.take() {
                        Some((Ok(Decoded::Row { data, env }), raw)) => (data, env, raw),
                        _ => unreachable!("checked: a decoded row"),
                    },
                };
                b.bytes += raw.len() + 64;
                // This table's stored envelope columns (`source.lsn` -> `source_lsn`).
                for path in &s.store_paths {
                    let col = crate::decode::stored_name(path);
                    if !data.iter().any(|(n, _)| *n == col) {
                        if let Some((_, v)) = env.iter().find(|(n, _)| n == path) {
                            data.push((col, v.clone()));
                        }
                    }
                }
                b.rows.push((
                    data,
                    RawRow {
                        cells: vec![],
                        pos: off as u64,
                        partition: p,
                        raw,
                        extra: env,
                        replayed,
                    },
                ));
            }
            Ok(Decoded::Tombstone) => {
                s.tombstones += 1;
                telemetry::dropped(&s.runner.cfg.name, "tombstone", topic, p, off);
            }
            Ok(Decoded::Truncate) => {
                s.truncates += 1;
                telemetry::dropped(&s.runner.cfg.name, "truncate", topic, p, off);
            }
            Err(_) if Some(i) != owner => {}
            Err(e) => {
                b.bytes += m.payload().map_or(0, |x| x.len());
                b.dead.push(Unparsable {
                    partition: p,
                    pos: off as u64,
                    raw: m.payload().unwrap_or_default().to_vec(),
                    error: e.clone(),
                    reason: "malformed",
                });
            }
        }
    }
    truncates
}

/// Commits one table's buffer with its offsets, then the consumer-group offsets.
async fn flush(
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
    let marks: Vec<Mark> = buf
        .next
        .iter()
        .map(|(&p, &next)| Mark {
            app: app_id(&s.runner.cfg.name, &s.topic, p),
            version: next.max(s.stored.get(&p).copied().unwrap_or(0)),
            partition: Some(p),
        })
        .collect();
    let mut attempt = 0;
    let mut marks = marks;
    let table = s.runner.cfg.name.clone();
    let span = tracing::info_span!("batch", table = %table, topic = %s.topic, rows = buf.rows.len() + buf.dead.len(), bytes = buf.bytes);
    let mut batch = RawBatch::from_maps(s.topic.clone(), buf.rows);
    batch.unparsable = buf.dead;
    let report = loop {
        // A retry needs the rows again, so each attempt gets a copy.
        match s.runner.run_batch(batch.clone(), marks.clone()).instrument(span.clone()).await {
            Ok(r) => break r,
            Err(e) if e.retryable() && attempt < 5 => {
                attempt += 1;
                span.in_scope(|| telemetry::commit_retried(&table, attempt, &e));
                tokio::time::sleep(Duration::from_millis(200 * (1 << attempt))).await;
                s.runner.reopen(config).await?;
                // Another writer may have committed some of these offsets meanwhile
                // (a conflicting `txn`): keep only what the table still lacks.
                // Refresh every partition, not only this batch's: the route
                // skip must know what the other writer committed everywhere.
                for p in s.partitions.clone() {
                    if let Some(stored) =
                        s.runner.store.txn_version(&app_id(&s.runner.cfg.name, &s.topic, p)).await?
                    {
                        s.stored.insert(p, stored.max(s.stored.get(&p).copied().unwrap_or(0)));
                    }
                }
                for m in marks.iter_mut() {
                    m.version = m
                        .version
                        .max(s.stored.get(&m.partition.unwrap_or(0)).copied().unwrap_or(0));
                }
                let stored = s.stored.clone();
                let keep = |p: i32, pos: u64| stored.get(&p).is_none_or(|&next| pos as i64 >= next);
                batch.rows.retain(|r| r.replayed || keep(r.partition, r.pos));
                batch.unparsable.retain(|d| keep(d.partition, d.pos));
            }
            Err(e) => {
                span.in_scope(|| telemetry::commit_failed(&table, &e));
                return Err(e);
            }
        }
    };
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
    // Group offsets for lag tools: the smallest next offset over the tables reading each partition.
    let topic = s.topic.clone();
    let mut tpl = TopicPartitionList::new();
    for m in &marks {
        let p = m.partition.unwrap_or(0);
        let min = slots
            .iter()
            .filter(|o| o.topic == topic)
            .map(|o| o.stored.get(&p).copied().unwrap_or(0))
            .min()
            .unwrap_or(0);
        if min > 0 {
            tpl.add_partition_offset(&topic, p, Offset::Offset(min)).ok();
        }
    }
    if tpl.count() > 0 {
        if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
            tracing::warn!(topic = %topic, error = %e, "consumer-group offset commit failed (lag dashboards only)");
        }
    }
    Ok(report)
}
