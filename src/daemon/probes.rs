//! Background probes, off the hot path (metadata and watermark calls
//! block): new topics and partitions, watermarks and consumer lag, broker
//! reachability for `/readyz` (docs/metrics.md, offsets and lag;
//! docs/operations.md, health endpoints and outages).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use tokio::sync::mpsc;

use super::forward::Ev;
use super::slots::{PartitionKey, Slot, TopicPartitions};
use crate::source::kafka::{partitions, watermarks, Ctx, Watermarks};
use crate::telemetry;

/// Re-read topic metadata this often (daemon only).
const REFRESH_EVERY: Duration = Duration::from_secs(10);
/// Update the watermark and lag gauges this often.
const LAG_EVERY: Duration = Duration::from_secs(5);
/// Ask the brokers for metadata this often (`/readyz`).
const BROKER_PROBE_EVERY: Duration = Duration::from_secs(2);

/// When each probe last ran; the loop's tick starts the ones that are due.
pub(super) struct Probes {
    meta: Arc<BaseConsumer<Ctx>>,
    system: String,
    brokers: String,
    last_refresh: Instant,
    last_lag: Instant,
    last_probe: Instant,
    /// A broker probe is running (at most one at a time).
    probing: Arc<AtomicBool>,
}

impl Probes {
    /// The lag probe is due at once; the others one period from now.
    pub(super) fn new(meta: Arc<BaseConsumer<Ctx>>, system: &str, brokers: &str) -> Self {
        Probes {
            meta,
            system: system.to_string(),
            brokers: brokers.to_string(),
            last_refresh: Instant::now(),
            last_lag: Instant::now() - Duration::from_secs(3600),
            last_probe: Instant::now(),
            probing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Starts every probe that is due. `refresh_tx` is None when the run
    /// reads only what existed at start (`--once`).
    pub(super) fn spawn_due(
        &mut self,
        slots: &[Slot],
        topic_parts: &TopicPartitions,
        refresh_tx: Option<&mpsc::Sender<Ev>>,
    ) {
        if let Some(tx) = refresh_tx.filter(|_| self.last_refresh.elapsed() >= REFRESH_EVERY) {
            self.last_refresh = Instant::now();
            let topics = topic_parts.keys().cloned().collect();
            spawn_partition_refresh(self.meta.clone(), topics, self.brokers.clone(), tx.clone());
        }
        if self.last_lag.elapsed() >= LAG_EVERY {
            self.last_lag = Instant::now();
            spawn_lag_probe(self.meta.clone(), slots, self.brokers.clone());
        }
        if self.last_probe.elapsed() >= BROKER_PROBE_EVERY
            && !self.probing.swap(true, Ordering::AcqRel)
        {
            self.last_probe = Instant::now();
            spawn_broker_probe(self.meta.clone(), self.system.clone(), self.probing.clone());
        }
    }
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
                if !ps.is_empty()
                    && tx.blocking_send(Ev::Partitions { topic, partitions: ps }).is_err()
                {
                    return;
                }
            }
        }
    });
}

/// One partition a table reads, and the next offset the table stored for it.
struct LagTarget {
    table: String,
    topic: String,
    partition: i32,
    stored: Option<i64>,
}

/// Updates the watermark and consumer-lag gauges off the hot path (watermark
/// calls block). A partition a table never committed counts from its low
/// watermark.
fn spawn_lag_probe(meta: Arc<BaseConsumer<Ctx>>, slots: &[Slot], brokers: String) {
    let targets: Vec<LagTarget> = slots
        .iter()
        .flat_map(|s| {
            s.partitions.iter().map(|p| LagTarget {
                table: s.runner.cfg.name.clone(),
                topic: s.topic.clone(),
                partition: *p,
                stored: s.stored.get(p).copied(),
            })
        })
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut seen: HashMap<PartitionKey, Watermarks> = HashMap::new();
        for LagTarget { table, topic, partition: p, stored } in targets {
            let key = PartitionKey::new(&topic, p);
            let marks = match seen.get(&key) {
                Some(m) => Some(*m),
                None => watermarks(&meta, &topic, p, &brokers).ok().inspect(|&m| {
                    seen.insert(key, m);
                }),
            };
            if let Some(Watermarks { low, high }) = marks {
                telemetry::high_watermark(&topic, p, high);
                telemetry::lag(&table, &topic, p, stored.unwrap_or(low).max(low));
            }
        }
    });
}

/// Asks the cluster for metadata (off the hot path): `/readyz` reports the
/// broker unreachable when this fails, and reachable again when it answers.
fn spawn_broker_probe(meta: Arc<BaseConsumer<Ctx>>, system: String, busy: Arc<AtomicBool>) {
    tokio::task::spawn_blocking(move || {
        // Only brokers answer a metadata request; a cached answer would hide an outage.
        let r = meta.fetch_metadata(None, Duration::from_secs(3));
        match r {
            Ok(md) if !md.brokers().is_empty() => telemetry::broker_probe(&system, true, None),
            Ok(_) => telemetry::broker_probe(&system, false, Some("no brokers in metadata")),
            Err(e) => telemetry::broker_probe(&system, false, Some(&e.to_string())),
        }
        busy.store(false, Ordering::Release);
    });
}
