//! `changelake bench --broker-rate N --duration 30m`: the soak. A daemon runs
//! as its own process (`changelake run`, the binary users deploy) against a
//! Kafka-protocol broker while this process produces a steady stream and
//! watches, window by window, the daemon's resident memory (from
//! `/proc/<pid>/status`) and how far its commits trail the producer (from
//! its `/metrics`, as Prometheus would).
//!
//! Why a child process: the broker (librdkafka's mock cluster) and the
//! producer live here, so their buffers never count towards the daemon's
//! memory. Why generate on the fly: a 30-minute stream at 20,000 events/s is
//! tens of gigabytes of JSON. Why a fixed key space (updates, deletes and
//! re-inserts over the same keys): the soak looks for memory that grows with
//! time, not with data; memory per key is the main bench's figure. The mock
//! broker keeps about 5 MB per partition (its own retention), so a daemon
//! that falls behind by more than that stops with `offset out of range`:
//! unbounded lag cannot go unnoticed.

pub mod report;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::ClientConfig;

use changelake::error::{Error, Result};

use self::report::{Filling, Heading, Histogram};
use crate::commands::probe::probe;
use crate::tools::bench_broker::send_waiting;
use crate::tools::workload::{Distribution, Mix, Workload};

const TOPIC: &str = "crm.public.account";
const PARTITIONS: i32 = 8;
const KEYS: u64 = 100_000;
/// How often the daemon's metrics and memory are read.
const TICK: Duration = Duration::from_millis(100);
/// Upkeep that a 30-minute run actually exercises (vacuum, log cleanup).
const DEFAULT_LAYOUT: &str = "vacuum_retention: 5m, log_retention: 10m";

/// What the soak runs.
#[derive(Debug, Clone)]
pub struct SoakOpts {
    /// Work directory (recreated): lake, config, daemon log, soak.{md,json}.
    pub dir: PathBuf,
    pub seed: u64,
    pub rate: u64,
    pub duration: Duration,
    pub max_age_ms: u64,
    /// Table `layout:` options (default [`DEFAULT_LAYOUT`]).
    pub layout: Option<String>,
}

/// Send times per partition, oldest first; `base[p]` is the offset of the
/// front. Committed events are popped, so it holds only the lag.
#[derive(Default)]
struct InFlight {
    base: Vec<i64>,
    sent: Vec<VecDeque<Instant>>,
    produced: u64,
}

type Shared = Arc<Mutex<InFlight>>;

/// Kills the daemon if the soak ends early (error or panic).
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn run(opts: &SoakOpts) -> Result<(String, serde_json::Value)> {
    let io = |e: std::io::Error| Error::Input(format!("soak: {e}"));
    let cluster = MockCluster::new(1).map_err(|e| Error::Input(format!("mock cluster: {e}")))?;
    cluster
        .create_topic(TOPIC, PARTITIONS, 1)
        .map_err(|e| Error::Input(format!("mock topic: {e}")))?;
    let _ = std::fs::remove_dir_all(&opts.dir);
    std::fs::create_dir_all(&opts.dir).map_err(io)?;
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(io)?.port();
    let layout = opts.layout.clone().unwrap_or_else(|| DEFAULT_LAYOUT.to_string());
    let config =
        write_config(&opts.dir, &cluster.bootstrap_servers(), port, opts.max_age_ms, &layout)?;
    let mut daemon = start_daemon(&opts.dir, &config)?;
    let metrics_url = format!("http://127.0.0.1:{port}/metrics");
    wait_ready(&mut daemon, &format!("http://127.0.0.1:{port}/readyz")).await?;

    let shared: Shared = Arc::new(Mutex::new(InFlight {
        base: vec![0; PARTITIONS as usize],
        sent: vec![VecDeque::new(); PARTITIONS as usize],
        produced: 0,
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = produce(&cluster.bootstrap_servers(), opts, shared.clone(), stop.clone())?;

    let every = (opts.duration.as_secs_f64() / 60.0).clamp(5.0, 60.0);
    let pid = daemon.0.id();
    let (mut windows, mut overall, mut filling) =
        (vec![], Histogram::default(), Filling::default());
    let t0 = Instant::now();
    let mut next_window = every;
    let mut committed = HashMap::new();
    let mut caught_up_by = None;
    loop {
        tokio::time::sleep(TICK).await;
        if let Some(status) = daemon.0.try_wait().map_err(io)? {
            stop.store(true, Ordering::Relaxed);
            return Err(Error::Input(format!(
                "soak: the daemon exited ({status}) after {:.0} s; see {}",
                t0.elapsed().as_secs_f64(),
                opts.dir.join("daemon.log").display()
            )));
        }
        let body = probe(&metrics_url).unwrap_or_default();
        read_committed(&body, &mut committed);
        let now = Instant::now();
        let (produced, done) = {
            let mut f = shared.lock().unwrap_or_else(|e| e.into_inner());
            let mut done = 0u64;
            for p in 0..PARTITIONS as usize {
                let next = committed.get(&(p as i32)).copied().unwrap_or(0);
                while f.base[p] < next {
                    let Some(at) = f.sent[p].pop_front() else { break };
                    filling.latency.record(now.duration_since(at).as_secs_f64());
                    f.base[p] += 1;
                }
                done += f.base[p] as u64;
            }
            (f.produced, done)
        };
        filling.sample(rss_of(pid), produced.saturating_sub(done));
        let at = t0.elapsed().as_secs_f64();
        if at >= next_window {
            overall.merge(&filling.latency);
            let w = filling.close(at, produced, done, commits_ok(&body));
            eprintln!(
                "soak {:>5.0} s: produced {} committed {} max lag {} rss {:.0} MB p99 {:.2} s",
                w.at,
                w.produced,
                w.committed,
                w.max_lag,
                w.rss_mean as f64 / 1048576.0,
                w.p99
            );
            windows.push(w);
            next_window += every;
        }
        if at >= opts.duration.as_secs_f64() {
            stop.store(true, Ordering::Relaxed);
        }
        if producer.is_finished() && done >= produced {
            caught_up_by.get_or_insert(at);
            break;
        }
        if at > opts.duration.as_secs_f64() + 300.0 {
            return Err(Error::Input(format!(
                "soak: {done} of {produced} events committed 5 min after the producer stopped"
            )));
        }
    }
    let _ = producer.await;
    let exit = stop_daemon(daemon).await?;
    let heading = Heading {
        rate: opts.rate,
        secs: opts.duration.as_secs_f64(),
        partitions: PARTITIONS,
        keys: KEYS,
        max_age_ms: opts.max_age_ms,
        layout,
        // A third of the run: the soak layout's upkeep (vacuum after 5
        // minutes, log cleanup after 10) reaches its steady state in it.
        warmup: opts.duration.as_secs_f64() / 3.0,
        span: opts.duration.as_secs_f64() / 6.0,
    };
    let (mut md, mut j) = report::render(&heading, &windows, &overall);
    md.push_str(&format!("\nThe daemon exited with {exit} after SIGTERM; every event was committed {:.1} s after the last was produced.\n", caught_up_by.unwrap_or(0.0) - opts.duration.as_secs_f64()));
    j["daemon_exit"] = serde_json::json!(exit.to_string());
    std::fs::write(opts.dir.join("soak.md"), &md).map_err(io)?;
    std::fs::write(
        opts.dir.join("soak.json"),
        serde_json::to_string_pretty(&j).unwrap_or_default(),
    )
    .map_err(io)?;
    drop(cluster);
    Ok((md, j))
}

/// The daemon's config: one scd1 table on the mock broker, metrics on `port`.
fn write_config(
    dir: &Path,
    brokers: &str,
    port: u16,
    max_age_ms: u64,
    layout: &str,
) -> Result<PathBuf> {
    // fetch.wait.max.ms: the mock cluster holds every fetch for the full
    // wait even when records arrive meanwhile (see bench_broker.rs).
    let text = format!(
        "storage: {{root: ./lake}}\nmetrics: {{listen: \"127.0.0.1:{port}\"}}\n\
         systems:\n  crm: {{type: kafka, brokers: \"{brokers}\", topic: \"crm.public.{{object}}\", format: debezium, kafka: {{fetch.wait.max.ms: \"50\"}}}}\n\
         bronze:\n  tables:\n    account:\n      source: {{system: crm, object: account}}\n      business_key: [accountid]\n      strategy: scd1\n      merge: {{sequence_by: [source.lsn], delete_mode: hard}}\n      layout: {{{layout}}}\n\
         batching: {{max_rows: 100000, max_age: {max_age_ms}ms}}\nshutdown_timeout: 30s\n"
    );
    let path = dir.join("changelake.yaml");
    std::fs::write(&path, text).map_err(|e| Error::Input(format!("soak: {e}")))?;
    Ok(path)
}

/// `changelake run --config <config>` from this very binary, logging (JSON) to `daemon.log`.
fn start_daemon(dir: &Path, config: &Path) -> Result<Daemon> {
    let io = |e: std::io::Error| Error::Input(format!("soak: starting the daemon: {e}"));
    let log = std::fs::File::create(dir.join("daemon.log")).map_err(io)?;
    let child = Command::new(std::env::current_exe().map_err(io)?)
        .args(["--log-format", "json", "run", "--config"])
        .arg(config)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io)?)
        .stderr(log)
        .spawn()
        .map_err(io)?;
    Ok(Daemon(child))
}

/// Waits until the daemon's /readyz answers 200 (partitions assigned).
async fn wait_ready(daemon: &mut Daemon, url: &str) -> Result<()> {
    let t0 = Instant::now();
    while probe(url).is_err() {
        if daemon.0.try_wait().ok().flatten().is_some() || t0.elapsed() > Duration::from_secs(60) {
            return Err(Error::Input(
                "soak: the daemon did not become ready within 60 s; see daemon.log".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// SIGTERM, then the exit status (the daemon commits what it holds first).
async fn stop_daemon(mut daemon: Daemon) -> Result<std::process::ExitStatus> {
    let io = |e: std::io::Error| Error::Input(format!("soak: stopping the daemon: {e}"));
    Command::new("kill").args(["-TERM", &daemon.0.id().to_string()]).status().map_err(io)?;
    let t0 = Instant::now();
    loop {
        if let Some(status) = daemon.0.try_wait().map_err(io)? {
            return Ok(status);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            return Err(Error::Input(
                "soak: the daemon did not exit within 60 s of SIGTERM".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Produces at `opts.rate` until `stop`, generating each 10 ms tick's events
/// as it goes (round-robin over the partitions, lz4 like many Connect
/// deployments: it also stretches the mock broker's 5 MB per partition).
fn produce(
    brokers: &str,
    opts: &SoakOpts,
    shared: Shared,
    stop: Arc<AtomicBool>,
) -> Result<tokio::task::JoinHandle<()>> {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .map_err(|e| Error::Input(format!("producer: {e}")))?;
    let per_tick = (opts.rate / 100).max(1) as usize;
    let mix = Mix { insert: 0, delete: 2, late: 2, duplicate: 2 };
    let mut wl = Workload::new(opts.seed, KEYS, mix, Distribution::Recent);
    Ok(tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let tick = Duration::from_millis(10);
        let mut ticks = 0u32;
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let lines = wl.batch(per_tick);
            for line in lines.lines() {
                let p = (i % PARTITIONS as u64) as i32;
                i += 1;
                send_waiting(
                    &producer,
                    BaseRecord::<(), str>::to(TOPIC).partition(p).payload(line),
                );
                let mut f = shared.lock().unwrap_or_else(|e| e.into_inner());
                f.sent[p as usize].push_back(Instant::now());
                f.produced += 1;
            }
            ticks += 1;
            if let Some(wait) = (start + tick * ticks).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let _ = producer.flush(Duration::from_secs(30));
    }))
}

/// The daemon's committed next offset per partition, from its /metrics text.
fn read_committed(metrics: &str, out: &mut HashMap<i32, i64>) {
    for line in metrics.lines().filter(|l| l.starts_with("changelake_committed_offset{")) {
        let Some(p) = label(line, "partition").and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            out.insert(p, v as i64);
        }
    }
}

fn commits_ok(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("changelake_commits_total{") && label(l, "outcome") == Some("ok"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let from = line.find(&format!("{name}=\""))? + name.len() + 2;
    line[from..].split('"').next()
}

/// Resident set size of process `pid`, in bytes (0 once it is gone).
fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            l.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_offsets_and_commits_are_read_from_the_metrics_text() {
        let text = "# HELP x\nchangelake_committed_offset{partition=\"3\",table=\"account\",topic=\"t\"} 120\n\
                    changelake_committed_offset{partition=\"0\",table=\"account\",topic=\"t\"} 7\n\
                    changelake_commits_total{outcome=\"ok\",table=\"account\"} 12\n\
                    changelake_commits_total{outcome=\"retried\",table=\"account\"} 2\n";
        let mut m = HashMap::new();
        read_committed(text, &mut m);
        assert_eq!(m, HashMap::from([(3, 120), (0, 7)]));
        assert_eq!(commits_ok(text), 12);
    }
}
