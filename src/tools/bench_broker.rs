//! `changelake bench --broker-rate N`: produce-to-commit latency through a
//! Kafka-protocol broker (librdkafka's in-process mock cluster) at a fixed
//! event rate, with the daemon running in the same process.
//!
//! Latency of an event = time its table commit (carrying the offset) became
//! visible minus the time it was handed to the producer. The committed next
//! offset per partition is read from the daemon's own gauge, which is set
//! right after the Delta commit returns, so the measurement includes decode,
//! batching (`max_age`), merge and commit.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::ClientConfig;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use changelake::config::Config;
use changelake::daemon::{self, RunOpts};
use changelake::engine::RunReport;
use changelake::error::{Error, Result};

use crate::tools::workload::{Distribution, Mix, Workload};

const TOPIC: &str = "crm.public.account";
const PARTITIONS: i32 = 4;

/// What the broker bench runs.
#[derive(Debug, Clone)]
pub struct BrokerOpts {
    /// Work directory of this bench (recreated).
    pub dir: PathBuf,
    pub seed: u64,
    /// Events per second to produce, for `secs` seconds.
    pub rate: u64,
    pub secs: u64,
    /// The table's `batching.max_age`.
    pub max_age_ms: u64,
    /// Extra table `layout:` options.
    pub layout: Option<String>,
}

/// Send times per partition, indexed by offset (one producer, idempotent: in order).
type SendTimes = Arc<Mutex<Vec<Vec<Instant>>>>;

/// The daemon, running until its stop signal; it returns its reports.
type Daemon = (oneshot::Sender<()>, JoinHandle<Result<Vec<RunReport>>>);

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub async fn run(opts: &BrokerOpts) -> Result<(serde_json::Value, String)> {
    let cluster = MockCluster::new(1).map_err(|e| Error::Input(format!("mock cluster: {e}")))?;
    cluster
        .create_topic(TOPIC, PARTITIONS, 1)
        .map_err(|e| Error::Input(format!("mock topic: {e}")))?;
    let brokers = cluster.bootstrap_servers();
    let _ = std::fs::remove_dir_all(&opts.dir);
    std::fs::create_dir_all(&opts.dir).map_err(|e| Error::Input(e.to_string()))?;
    let (stop_tx, daemon) = start_daemon(opts, &brokers)?;

    let sent: SendTimes = Arc::new(Mutex::new(vec![vec![]; PARTITIONS as usize]));
    let total = opts.rate * opts.secs;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .map_err(|e| Error::Input(format!("producer: {e}")))?;
    // Let the daemon assign its partitions first.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let produce = produce(producer, opts, total, sent.clone());
    let (mut lat, (n, produce_time)) = watch_commits(&sent, produce, total, opts.secs).await?;
    let _ = stop_tx.send(());
    let reports = daemon.await.map_err(|e| Error::Input(e.to_string()))??;
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let commits = reports.iter().filter(|r| r.version.is_some()).count();
    let out = summary(opts, &lat, n, produce_time, commits);
    drop(cluster);
    Ok(out)
}

/// Starts the daemon on one scd1 table reading [`TOPIC`] from `brokers`.
fn start_daemon(opts: &BrokerOpts, brokers: &str) -> Result<Daemon> {
    let max_age = opts.max_age_ms;
    let layout =
        opts.layout.as_deref().map(|o| format!("\n      layout: {{{o}}}")).unwrap_or_default();
    let text = format!(
        "storage: {{root: ./lake}}\nsystems:\n  crm: {{type: kafka, brokers: \"{brokers}\", topic: \"crm.public.{{object}}\", format: debezium, kafka: {{fetch.wait.max.ms: \"50\"}}}}\n\
         bronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [accountid]\n      strategy: scd1\n      merge: {{sequence_by: [source.lsn], delete_mode: hard}}{layout}\n\
         batching: {{max_rows: 100000, max_age: {max_age}ms}}\nshutdown_timeout: 30s\n"
    );
    // fetch.wait.max.ms: librdkafka's mock cluster holds every fetch for the
    // full wait even when records arrive meanwhile (a real broker answers as
    // soon as fetch.min.bytes is there), which would add up to 500 ms of
    // mock-only latency (measured: p50 0.97 s -> 0.64 s at 5,000 events/s).
    let config = Config::parse(&text, &opts.dir)?;
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let daemon = tokio::spawn(async move {
        let shutdown: daemon::Shutdown = Box::pin(async move {
            let _ = stop_rx.await;
        });
        daemon::run(&config, RunOpts::default(), shutdown).await
    });
    Ok((stop_tx, daemon))
}

/// Produces `total` events at the target rate on a blocking thread, noting
/// each send time in `sent`; returns the events produced and the time taken.
fn produce(
    producer: ThreadedProducer<DefaultProducerContext>,
    opts: &BrokerOpts,
    total: u64,
    sent: SendTimes,
) -> JoinHandle<(u64, Duration)> {
    // The events are generated before the clock starts: in production the
    // producer runs elsewhere, and generating JSON here would take CPU from
    // the daemon on a small machine.
    let per_tick = (opts.rate / 100).max(1) as usize;
    let mut wl = Workload::new(
        opts.seed,
        100_000,
        Mix { insert: 5, delete: 1, late: 2, duplicate: 2 },
        Distribution::Recent,
    );
    let ticks: Vec<String> =
        (0..total.div_ceil(per_tick as u64)).map(|_| wl.batch(per_tick)).collect();
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let tick = Duration::from_millis(10);
        let mut done = 0u64;
        let mut i = 0u64;
        for lines in &ticks {
            if done >= total {
                break;
            }
            for line in lines.lines() {
                let key = line
                    .split("\"accountid\":")
                    .nth(1)
                    .and_then(|s| s.split(',').next())
                    .unwrap_or("0")
                    .to_string();
                let p = (i % PARTITIONS as u64) as i32;
                i += 1;
                send_waiting(&producer, BaseRecord::to(TOPIC).partition(p).key(&key).payload(line));
                sent.lock().unwrap_or_else(|e| e.into_inner())[p as usize].push(Instant::now());
                done += 1;
            }
            let due = start + tick * (done / per_tick as u64) as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let _ = producer.flush(Duration::from_secs(30));
        (done, start.elapsed())
    })
}

/// Sends `rec`, waiting (serving delivery reports) while the producer's
/// queue is full: a bench at a fixed rate must not drop events.
pub(crate) fn send_waiting<K: rdkafka::message::ToBytes + ?Sized>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut rec: BaseRecord<'_, K, str>,
) {
    loop {
        match producer.send(rec) {
            Ok(()) => return,
            Err((_, back)) => {
                producer.poll(Duration::from_millis(1));
                rec = back;
            }
        }
    }
}

/// Watches the committed offsets (set right after each Delta commit) until
/// every produced event is committed; returns each event's latency in
/// seconds, unsorted, and the producer's (events, time).
async fn watch_commits(
    sent: &SendTimes,
    produce: JoinHandle<(u64, Duration)>,
    total: u64,
    secs: u64,
) -> Result<(Vec<f64>, (u64, Duration))> {
    let m = changelake::telemetry::metrics();
    let mut produce = Some(produce);
    let mut seen: HashMap<i32, i64> = HashMap::new();
    let mut lat = vec![];
    let t0 = Instant::now();
    let mut produced: Option<(u64, Duration)> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = Instant::now();
        let mut committed_all = 0i64;
        {
            let sent = sent.lock().unwrap_or_else(|e| e.into_inner());
            for p in 0..PARTITIONS {
                let next =
                    m.committed_offset.with_label_values(&["account", TOPIC, &p.to_string()]).get();
                committed_all += next;
                let from = *seen.get(&p).unwrap_or(&0);
                let to = next.min(sent[p as usize].len() as i64);
                for o in from..to {
                    lat.push(now.duration_since(sent[p as usize][o as usize]).as_secs_f64());
                }
                seen.insert(p, to.max(from));
            }
        }
        if produce.as_ref().is_some_and(|h| h.is_finished()) {
            let h = produce.take().expect("checked");
            produced = Some(h.await.map_err(|e| Error::Input(e.to_string()))?);
            continue;
        }
        if let Some((n, _)) = produced {
            if committed_all as u64 >= n {
                break;
            }
        }
        if t0.elapsed() > Duration::from_secs(secs * 4 + 120) {
            return Err(Error::Input(format!(
                "broker bench: only {committed_all} of {total} events committed"
            )));
        }
    }
    Ok((lat, produced.unwrap_or((0, Duration::ZERO))))
}

/// The result as JSON and as a Markdown section; `lat` is sorted.
fn summary(
    opts: &BrokerOpts,
    lat: &[f64],
    n: u64,
    produce_time: Duration,
    commits: usize,
) -> (serde_json::Value, String) {
    let (rate, max_age) = (opts.rate, opts.max_age_ms);
    let bound = 2.0 * max_age as f64 / 1000.0;
    let (p50, p99, max) = (pct(lat, 0.5), pct(lat, 0.99), lat.last().copied().unwrap_or(f64::NAN));
    let achieved = n as f64 / produce_time.as_secs_f64();
    let mut md = String::new();
    let _ = writeln!(md, "### end to end through the broker (in-process mock cluster, {PARTITIONS} partitions, max_age {max_age} ms)\n");
    let _ = writeln!(
        md,
        "| target rate | achieved produce rate | events | commits | latency p50 | p99 | max | bound 2 x max_age |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let _ = writeln!(
        md,
        "| {rate}/s | {achieved:.0}/s | {n} | {commits} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms ({}) |\n",
        p50 * 1e3,
        p99 * 1e3,
        max * 1e3,
        bound * 1e3,
        if max < bound { "met" } else { "**missed**" }
    );
    let j = json!({
        "target_rate": rate, "achieved_rate": achieved, "events": n, "commits": commits, "max_age_ms": max_age,
        "latency_p50_seconds": p50, "latency_p99_seconds": p99, "latency_max_seconds": max, "bound_seconds": bound,
    });
    (j, md)
}
