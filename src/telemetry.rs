//! Metrics, health and the one place that both logs and counts each event.
//!
//! Vector's discipline: an event is never logged without being counted, or
//! counted without being logged, so every function here that bumps a metric
//! also emits the matching `tracing` event — the daemon, the file runner and
//! the engine call these functions and never touch a metric themselves. The
//! merge code stays pure: it returns [`Stats`](crate::merge::Stats), and
//! [`run_committed`] turns them into both a log line and counters.
//!
//! Names follow `changelake_<noun>_<unit>[_total]`; labels are bounded
//! (table, topic, partition, strategy, reason, outcome, version) — never a key
//! or an error text. Every label combination a dashboard or alert queries is
//! created at zero when a table or partition is registered, so a scrape shows
//! the full set from the first second (an absent series makes `rate()` and
//! `absent()` alerts misleading).
//!
//! Served on `metrics.listen`: `/metrics` (Prometheus text format, via the
//! `prometheus` crate), `/healthz` (the process answers) and `/readyz`
//! (partitions assigned, broker reachable, no uncommitted data older than the
//! commit deadline).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::Strategy;
use crate::report::RunReport;

/// Why a row was dropped (`changelake_rows_dropped_total{reason}`).
pub const DROP_REASONS: &[&str] = &[
    "null_key",
    "duplicate",
    "late",
    "ignored_delete",
    "tombstone",
    "filtered",
    "unchanged",
    "truncate",
];
/// Why a row went to the dead-letter table (`changelake_dead_letters_total{reason}`).
pub const DEAD_REASONS: &[&str] = &["malformed", "schema", "type", "guardrail"];
const OUTCOMES: &[&str] = &["ok", "retried", "failed"];

const ROW_BUCKETS: &[f64] = &[1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0, 1_000_000.0];
const BYTE_BUCKETS: &[f64] = &[1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];
const SECONDS_BUCKETS: &[f64] =
    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Every metric the daemon exports.
pub struct Metrics {
    registry: Registry,
    pub rows_read: IntCounterVec,
    pub rows_decoded: IntCounterVec,
    pub rows_upserted: IntCounterVec,
    pub rows_deleted: IntCounterVec,
    pub rows_dropped: IntCounterVec,
    pub dead_letters: IntCounterVec,
    pub versions_inserted: IntCounterVec,
    pub versions_closed: IntCounterVec,
    pub versions_updated_in_place: IntCounterVec,
    pub batches: IntCounterVec,
    pub commits: IntCounterVec,
    pub batch_rows: HistogramVec,
    pub batch_bytes: HistogramVec,
    pub merge_seconds: HistogramVec,
    pub commit_seconds: HistogramVec,
    pub files_written: IntCounterVec,
    pub files_removed: IntCounterVec,
    pub committed_offset: IntGaugeVec,
    pub high_watermark: IntGaugeVec,
    pub consumer_lag: IntGaugeVec,
    pub table_version: IntGaugeVec,
    pub last_commit: GaugeVec,
    pub buffered_bytes: IntGaugeVec,
    pub paused_partitions: IntGauge,
    pub assigned_partitions: IntGauge,
    pub broker_up: IntGauge,
    pub ready: IntGauge,
    pub kafka_errors: IntCounter,
    pub build_info: IntGaugeVec,
    pub start_time: IntGauge,
    pub compactions: IntCounterVec,
    pub files_compacted: IntCounterVec,
    pub checkpoints: IntCounterVec,
    pub files_vacuumed: IntCounterVec,
    pub maintenance_failures: IntCounterVec,
}

/// Registers a metric and hands it back (metrics are cheap shared handles).
fn reg<M: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: M) -> M {
    r.register(Box::new(m.clone())).expect("metric registered once");
    m
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    reg(r, IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    reg(r, IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    reg(r, IntGauge::new(name, help).expect("valid metric"))
}

fn histogram(r: &Registry, name: &str, help: &str, buckets: &[f64]) -> HistogramVec {
    reg(
        r,
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), &["table"])
            .expect("valid metric"),
    )
}

impl Metrics {
    fn new() -> Metrics {
        let r = Registry::new();
        let t = &["table"];
        let ts = &["table", "strategy"];
        let tr = &["table", "reason"];
        let tp = &["table", "topic", "partition"];
        let last_commit = reg(
            &r,
            GaugeVec::new(
                Opts::new(
                    "changelake_last_commit_timestamp_seconds",
                    "Unix time of the table's latest Delta commit.",
                ),
                t,
            )
            .expect("valid metric"),
        );
        let m = Metrics {
            rows_read: counter(&r, "changelake_rows_read_total", "Events read from the source for a table (rows, unparsable events, tombstones).", t),
            rows_decoded: counter(&r, "changelake_rows_decoded_total", "Events decoded and converted into table rows.", t),
            rows_upserted: counter(&r, "changelake_rows_upserted_total", "Rows that inserted or updated the table.", ts),
            rows_deleted: counter(&r, "changelake_rows_deleted_total", "Rows deleted (scd1) or closed by a delete (scd2), including snapshot deletes.", ts),
            rows_dropped: counter(
                &r,
                "changelake_rows_dropped_total",
                "Rows dropped without changing the table, by reason: null_key, duplicate (same key in a batch, older sequence), late (older than the stored sequence), ignored_delete (delete of an unknown or already deleted key), tombstone (Kafka tombstone), filtered (source filter), unchanged (no column changed), truncate (truncate event not applied).",
                tr,
            ),
            dead_letters: counter(
                &r,
                "changelake_dead_letters_total",
                "Rows written to the dead-letter table, by reason: malformed (not parseable), schema (unknown column under schema_policy strict), type (value does not convert to the column type), guardrail (batch rejected by reject_duplicates / reject_late).",
                tr,
            ),
            versions_inserted: counter(&r, "changelake_versions_inserted_total", "Row versions inserted: new and revived keys, scd2 versions after a change, late scd2 versions.", ts),
            versions_closed: counter(&r, "changelake_versions_closed_total", "scd2 versions closed (_valid_to set, _is_current false).", ts),
            versions_updated_in_place: counter(
                &r,
                "changelake_versions_updated_in_place_total",
                "Row versions rewritten in place: scd1 updates, scd2 restatements and ignore_columns changes.",
                ts,
            ),
            batches: counter(&r, "changelake_batches_total", "Micro-batches processed (each becomes at most one data commit).", t),
            commits: counter(&r, "changelake_commits_total", "Delta commit attempts by outcome: ok, retried (conflict or transient error, retried after re-reading the table), failed.", &["table", "outcome"]),
            batch_rows: histogram(&r, "changelake_batch_rows", "Events per batch.", ROW_BUCKETS),
            batch_bytes: histogram(&r, "changelake_batch_bytes", "Source bytes per batch.", BYTE_BUCKETS),
            merge_seconds: histogram(&r, "changelake_merge_duration_seconds", "Time to merge a batch: decode, read state, apply the rules, write data files.", SECONDS_BUCKETS),
            commit_seconds: histogram(&r, "changelake_commit_duration_seconds", "Time to write one Delta commit (data and offsets).", SECONDS_BUCKETS),
            files_written: counter(&r, "changelake_files_written_total", "Parquet data files added to the table.", t),
            files_removed: counter(&r, "changelake_files_removed_total", "Parquet data files removed (rewritten) from the table.", t),
            committed_offset: gauge_vec(&r, "changelake_committed_offset", "Next offset to read, as committed with the table.", tp),
            high_watermark: gauge_vec(&r, "changelake_high_watermark", "Partition high watermark (offset of the next message produced).", &["topic", "partition"]),
            consumer_lag: gauge_vec(&r, "changelake_consumer_lag_messages", "High watermark minus the committed next offset.", tp),
            table_version: gauge_vec(&r, "changelake_table_version", "Latest Delta table version written by this process.", t),
            last_commit,
            buffered_bytes: gauge_vec(&r, "changelake_buffered_bytes", "Bytes of events read but not yet committed.", t),
            paused_partitions: gauge(&r, "changelake_paused_partitions", "Partitions paused because buffered bytes reached batching.max_buffered_bytes."),
            assigned_partitions: gauge(&r, "changelake_assigned_partitions", "Kafka partitions assigned to this process."),
            broker_up: gauge(&r, "changelake_broker_up", "1 when every Kafka cluster answered the latest metadata probe."),
            ready: gauge(&r, "changelake_ready", "1 when /readyz answers 200: partitions assigned, broker reachable, commits within their deadline."),
            kafka_errors: reg(
                &r,
                IntCounter::new("changelake_kafka_errors_total", "Kafka client errors (the client retries them).").expect("valid metric"),
            ),
            build_info: gauge_vec(&r, "changelake_build_info", "Build information; always 1.", &["version"]),
            start_time: gauge(&r, "changelake_start_time_seconds", "Unix time the process started (a restart loop shows as changes)."),
            compactions: counter(&r, "changelake_compactions_total", "Small-file compactions committed (dataChange false: rows unchanged).", t),
            files_compacted: counter(&r, "changelake_files_compacted_total", "Small data files replaced by compaction.", t),
            checkpoints: counter(&r, "changelake_checkpoints_total", "Delta checkpoints written.", t),
            files_vacuumed: counter(&r, "changelake_files_vacuumed_total", "Removed data files deleted from storage after the vacuum retention.", t),
            maintenance_failures: counter(
                &r,
                "changelake_maintenance_failures_total",
                "Compactions, checkpoints or vacuums that failed (retried after a later batch; data commits are unaffected).",
                tr,
            ),
            registry: r,
        };
        m.build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        m.start_time.set(chrono::Utc::now().timestamp());
        m
    }
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

pub fn metrics() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

/// Creates every series of a table at zero (see the module comment).
pub fn register_table(table: &str, strategy: &str) {
    let m = metrics();
    for c in [
        &m.rows_read,
        &m.rows_decoded,
        &m.batches,
        &m.files_written,
        &m.files_removed,
        &m.compactions,
        &m.files_compacted,
        &m.checkpoints,
        &m.files_vacuumed,
    ] {
        c.with_label_values(&[table]);
    }
    for c in [
        &m.rows_upserted,
        &m.rows_deleted,
        &m.versions_inserted,
        &m.versions_closed,
        &m.versions_updated_in_place,
    ] {
        c.with_label_values(&[table, strategy]);
    }
    for r in DROP_REASONS {
        m.rows_dropped.with_label_values(&[table, r]);
    }
    for r in DEAD_REASONS {
        m.dead_letters.with_label_values(&[table, r]);
    }
    for r in ["compaction", "checkpoint"] {
        m.maintenance_failures.with_label_values(&[table, r]);
    }
    for o in OUTCOMES {
        m.commits.with_label_values(&[table, o]);
    }
    for h in [&m.batch_rows, &m.batch_bytes, &m.merge_seconds, &m.commit_seconds] {
        h.with_label_values(&[table]);
    }
    m.table_version.with_label_values(&[table]);
    m.buffered_bytes.with_label_values(&[table]);
}

/// Creates a partition's series; the offset is the stored next offset, if any.
pub fn register_partition(table: &str, topic: &str, partition: i32, stored: Option<i64>) {
    let m = metrics();
    let p = partition.to_string();
    let g = m.committed_offset.with_label_values(&[table, topic, &p]);
    if let Some(o) = stored {
        g.set(o);
    }
    m.consumer_lag.with_label_values(&[table, topic, &p]);
    m.high_watermark.with_label_values(&[topic, &p]);
}

/// The last high watermark seen per (topic, partition), for lag at commit time.
fn highs() -> std::sync::MutexGuard<'static, BTreeMap<(String, i32), i64>> {
    static H: OnceLock<Mutex<BTreeMap<(String, i32), i64>>> = OnceLock::new();
    H.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// A watermark probe's answer.
pub fn high_watermark(topic: &str, partition: i32, high: i64) {
    metrics().high_watermark.with_label_values(&[topic, &partition.to_string()]).set(high);
    highs().insert((topic.to_string(), partition), high);
}

/// Lag of one table on one partition, from the latest watermark and its committed offset.
pub fn lag(table: &str, topic: &str, partition: i32, committed: i64) {
    let high = highs().get(&(topic.to_string(), partition)).copied().unwrap_or(committed);
    metrics()
        .consumer_lag
        .with_label_values(&[table, topic, &partition.to_string()])
        .set((high - committed).max(0));
}

/// Offsets committed together with a table version.
pub fn offsets_committed(table: &str, topic: &str, marks: &[(i32, i64)]) {
    for &(p, next) in marks {
        metrics().committed_offset.with_label_values(&[table, topic, &p.to_string()]).set(next);
        lag(table, topic, p, next);
    }
    tracing::debug!(table, topic, offsets = ?marks, "offsets committed with the table");
}

/// Rows dropped outside a batch (tombstones and truncate events are never buffered).
pub fn dropped(table: &str, reason: &'static str, topic: &str, partition: i32, offset: i64) {
    debug_assert!(DROP_REASONS.contains(&reason));
    let m = metrics();
    m.rows_read.with_label_values(&[table]).inc();
    m.rows_dropped.with_label_values(&[table, reason]).inc();
    if reason == "truncate" {
        tracing::warn!(
            table,
            topic,
            partition,
            offset,
            "truncate event: counted, not applied (apply_truncates is off)"
        );
    } else {
        tracing::debug!(table, topic, partition, offset, reason, "event dropped");
    }
}

/// A commit attempt failed and will be retried after re-reading the table.
pub fn commit_retried(table: &str, attempt: u32, error: &dyn std::fmt::Display) {
    metrics().commits.with_label_values(&[table, "retried"]).inc();
    tracing::warn!(table, attempt, error = %error, "commit failed; re-reading the table and retrying");
}

/// A batch could not be committed: the process stops, nothing is lost (its offsets were not committed).
pub fn commit_failed(table: &str, error: &dyn std::fmt::Display) {
    metrics().commits.with_label_values(&[table, "failed"]).inc();
    tracing::error!(table, error = %error, "commit failed; the batch's events will be re-read after a restart");
}

pub fn compacted(table: &str, removed: usize, added: usize, version: i64, secs: f64) {
    let m = metrics();
    m.compactions.with_label_values(&[table]).inc();
    m.files_compacted.with_label_values(&[table]).inc_by(removed as u64);
    m.table_version.with_label_values(&[table]).set(version);
    tracing::info!(
        table,
        files_removed = removed,
        files_added = added,
        version,
        duration_ms = (secs * 1e3) as u64,
        "small files compacted"
    );
}

pub fn checkpointed(table: &str, version: i64, vacuumed: usize) {
    let m = metrics();
    m.checkpoints.with_label_values(&[table]).inc();
    m.files_vacuumed.with_label_values(&[table]).inc_by(vacuumed as u64);
    tracing::info!(table, version, files_vacuumed = vacuumed, "checkpoint written, table vacuumed");
}

pub fn maintenance_failed(table: &str, what: &'static str, error: &dyn std::fmt::Display) {
    metrics().maintenance_failures.with_label_values(&[table, what]).inc();
    tracing::warn!(table, what, error = %error, "table maintenance failed (retried after a later batch)");
}

pub fn buffered(table: &str, bytes: usize) {
    metrics().buffered_bytes.with_label_values(&[table]).set(bytes as i64);
}

/// Fetching paused (or resumed, with 0) because of the buffer limit.
pub fn paused(partitions: usize, buffered: usize, limit: usize) {
    metrics().paused_partitions.set(partitions as i64);
    if partitions > 0 {
        tracing::info!(
            partitions,
            buffered,
            limit,
            "buffer limit reached: fetching paused until the largest batch commits"
        );
    }
}

pub fn kafka_error(system: &str, error: &str) {
    metrics().kafka_errors.inc();
    tracing::warn!(system, error, "kafka client error (the client retries)");
}

/// Logs and counts one processed batch: the single place both happen.
pub fn run_committed(r: &RunReport) {
    let s = &r.stats;
    let t = r.table.as_str();
    let st = r.strategy.as_str();
    let duration_ms = ((r.merge_secs + r.commit_secs) * 1000.0).round() as u64;
    tracing::info!(
        table = %r.table, source = %r.source, version = ?r.version, execution_id = ?r.exec, duration_ms,
        rows = s.rows_in, inserted = s.inserted, updated = s.updated, in_place = s.updated_in_place,
        deleted = s.deleted + s.snapshot_deleted, revived = s.revived, late = s.late_inserted,
        ignored_older = s.older_ignored, unchanged = s.unchanged + s.late_noop, filtered = r.filtered,
        null_keys = s.null_keys, duplicates = s.duplicates, dead_letters = r.dead_letters,
        files_added = r.files_added, files_removed = r.files_removed, "batch committed"
    );
    if let Some(why) = &r.rejected {
        tracing::error!(table = %r.table, source = %r.source, reason = %why, "batch rejected by a guardrail; its rows are in the dead-letter table");
    }
    if s.null_keys > 0 {
        tracing::warn!(table = %r.table, count = s.null_keys, "dropped rows with a NULL business key");
    }
    if r.dead_letters > 0 {
        tracing::warn!(table = %r.table, count = r.dead_letters, reasons = ?r.dead_by_reason, "rows sent to the dead-letter table");
    }
    let m = metrics();
    let dead: u64 = r.dead_by_reason.values().sum();
    m.rows_read.with_label_values(&[t]).inc_by(
        s.rows_in + r.filtered + dead - r.dead_by_reason.get("guardrail").copied().unwrap_or(0),
    );
    m.rows_decoded.with_label_values(&[t]).inc_by(s.rows_in + r.filtered);
    for (reason, v) in r.dead_by_reason.iter() {
        m.dead_letters.with_label_values(&[t, reason]).inc_by(*v);
    }
    for (reason, v) in [
        ("null_key", s.null_keys),
        ("duplicate", s.duplicates),
        ("late", s.older_ignored + s.late_deletes_ignored),
        ("ignored_delete", s.deletes_ignored + s.deletes_unknown),
        ("filtered", r.filtered),
        ("unchanged", s.unchanged + s.late_noop),
    ] {
        m.rows_dropped.with_label_values(&[t, reason]).inc_by(v);
    }
    let scd2 = r.strategy == Strategy::Scd2;
    let (new_versions, in_place) = if scd2 {
        (s.updated, s.updated_in_place + s.restated)
    } else {
        (0, s.updated + s.updated_in_place + s.restated)
    };
    m.versions_inserted
        .with_label_values(&[t, st])
        .inc_by(s.inserted + s.revived + s.late_inserted + new_versions);
    m.versions_closed.with_label_values(&[t, st]).inc_by(s.versions_closed);
    m.versions_updated_in_place.with_label_values(&[t, st]).inc_by(in_place);
    m.rows_upserted.with_label_values(&[t, st]).inc_by(
        s.inserted + s.updated + s.updated_in_place + s.restated + s.revived + s.late_inserted,
    );
    m.rows_deleted.with_label_values(&[t, st]).inc_by(s.deleted + s.snapshot_deleted);
    m.batches.with_label_values(&[t]).inc();
    m.files_written.with_label_values(&[t]).inc_by(r.files_added as u64);
    m.files_removed.with_label_values(&[t]).inc_by(r.files_removed as u64);
    m.batch_rows.with_label_values(&[t]).observe((s.rows_in + r.filtered + dead) as f64);
    m.batch_bytes.with_label_values(&[t]).observe(r.bytes as f64);
    m.merge_seconds.with_label_values(&[t]).observe(r.merge_secs);
    if let Some(v) = r.version {
        m.commits.with_label_values(&[t, "ok"]).inc();
        m.table_version.with_label_values(&[t]).set(v);
        m.last_commit
            .with_label_values(&[t])
            .set(chrono::Utc::now().timestamp_millis() as f64 / 1000.0);
        m.commit_seconds.with_label_values(&[t]).observe(r.commit_secs);
    }
}

// ---- health ---------------------------------------------------------------

#[derive(Default)]
struct Health {
    /// Per Kafka system: partitions assigned, broker answered the last probe.
    systems: BTreeMap<String, (bool, bool)>,
    /// Per table: when its oldest uncommitted event was read.
    pending: BTreeMap<String, Instant>,
    deadline: Option<Duration>,
}

fn health() -> std::sync::MutexGuard<'static, Health> {
    static H: OnceLock<Mutex<Health>> = OnceLock::new();
    H.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// How long read events may stay uncommitted before `/readyz` fails.
pub fn set_commit_deadline(d: Duration) {
    health().deadline = Some(d);
}

pub fn set_assigned(system: &str, partitions: usize) {
    health().systems.entry(system.to_string()).or_insert((false, true)).0 = true;
    metrics().assigned_partitions.add(partitions as i64);
}

/// The result of a broker metadata probe; logs transitions only.
pub fn broker_probe(system: &str, ok: bool, error: Option<&str>) {
    let mut h = health();
    let e = h.systems.entry(system.to_string()).or_insert((false, true));
    if e.1 != ok {
        if ok {
            tracing::info!(system, "broker reachable again");
        } else {
            tracing::warn!(system, error = error.unwrap_or(""), "broker unreachable; not ready");
        }
    }
    e.1 = ok;
    let all = h.systems.values().all(|(_, up)| *up);
    metrics().broker_up.set(all as i64);
}

/// A table has uncommitted events since `since` (None: everything committed).
pub fn pending(table: &str, since: Option<Instant>) {
    let mut h = health();
    match since {
        Some(s) => {
            h.pending.entry(table.to_string()).or_insert(s);
        }
        None => {
            h.pending.remove(table);
        }
    }
}

/// Whether the process is ready, and if not, why.
pub fn readiness() -> std::result::Result<(), Vec<String>> {
    let h = health();
    let mut why = vec![];
    if h.systems.is_empty() {
        why.push("no partitions assigned yet".to_string());
    }
    for (s, (assigned, up)) in &h.systems {
        if !assigned {
            why.push(format!("system {s}: partitions not assigned"));
        }
        if !up {
            why.push(format!("system {s}: broker unreachable"));
        }
    }
    if let Some(d) = h.deadline {
        for (t, since) in &h.pending {
            if since.elapsed() > d {
                why.push(format!(
                    "table {t}: events uncommitted for {}s (deadline {}s)",
                    since.elapsed().as_secs(),
                    d.as_secs()
                ));
            }
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why)
    }
}

/// The whole registry in the Prometheus text exposition format.
pub fn render() -> String {
    let m = metrics();
    m.ready.set(readiness().is_ok() as i64);
    let mut out = vec![];
    TextEncoder::new().encode(&m.registry.gather(), &mut out).expect("text encoding");
    String::from_utf8(out).expect("utf-8 metrics")
}

/// Serves `/metrics`, `/healthz` and `/readyz` until the process ends (once per address).
pub async fn serve(addr: &str) -> std::io::Result<()> {
    static SERVING: Mutex<Vec<String>> = Mutex::new(Vec::new());
    if SERVING.lock().unwrap_or_else(|e| e.into_inner()).contains(&addr.to_string()) {
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    SERVING.lock().unwrap_or_else(|e| e.into_inner()).push(addr.to_string());
    tracing::info!(%addr, "metrics on http://{addr}/metrics");
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                // Read the request head (a client may send it in several writes).
                let mut buf = Vec::with_capacity(1024);
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
                    match tokio::time::timeout(Duration::from_secs(5), sock.read(&mut chunk)).await
                    {
                        Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                        _ => break,
                    }
                }
                let req = String::from_utf8_lossy(&buf);
                let path = req.split_whitespace().nth(1).unwrap_or("/");
                let (status, ctype, body) = match path {
                    "/metrics" => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render()),
                    "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
                    "/readyz" => match readiness() {
                        Ok(()) => ("200 OK", "text/plain", "ready\n".to_string()),
                        Err(why) => (
                            "503 Service Unavailable",
                            "text/plain",
                            format!("not ready: {}\n", why.join("; ")),
                        ),
                    },
                    _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::Stats;

    fn line<'a>(out: &'a str, prefix: &str) -> Option<&'a str> {
        out.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn registered_table_exports_every_reason_at_zero_with_help() {
        register_table("zero_t", "scd1");
        let out = render();
        for r in DROP_REASONS {
            assert!(
                line(
                    &out,
                    &format!("changelake_rows_dropped_total{{reason=\"{r}\",table=\"zero_t\"}} 0")
                )
                .is_some(),
                "{r}\n{out}"
            );
        }
        for r in DEAD_REASONS {
            assert!(
                line(
                    &out,
                    &format!("changelake_dead_letters_total{{reason=\"{r}\",table=\"zero_t\"}} 0")
                )
                .is_some(),
                "{r}"
            );
        }
        // Every family has HELP and TYPE, and every name is changelake_*.
        for l in out.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(name.starts_with("changelake_"), "{name}");
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                out.contains(&format!("# HELP {family} "))
                    || out.contains(&format!("# HELP {name} ")),
                "no HELP for {name}"
            );
        }
        assert!(line(&out, "changelake_build_info{version=").is_some());
    }

    #[test]
    fn run_committed_counts_drops_versions_and_dead_letters_by_reason() {
        let stats = Stats {
            rows_in: 10,
            null_keys: 2,
            duplicates: 3,
            older_ignored: 1,
            inserted: 2,
            updated: 1,
            versions_closed: 1,
            ..Default::default()
        };
        let mut dead = BTreeMap::new();
        dead.insert("type", 1u64);
        dead.insert("malformed", 2u64);
        let r = RunReport {
            table: "rc_t".into(),
            strategy: Strategy::Scd2,
            stats,
            filtered: 4,
            dead_by_reason: dead,
            dead_letters: 3,
            version: Some(7),
            bytes: 5000,
            ..Default::default()
        };
        register_table("rc_t", "scd2");
        run_committed(&r);
        let out = render();
        let has = |s: &str| assert!(out.lines().any(|l| l == s), "missing `{s}`");
        has("changelake_rows_read_total{table=\"rc_t\"} 17");
        has("changelake_rows_decoded_total{table=\"rc_t\"} 14");
        has("changelake_rows_dropped_total{reason=\"null_key\",table=\"rc_t\"} 2");
        has("changelake_rows_dropped_total{reason=\"duplicate\",table=\"rc_t\"} 3");
        has("changelake_rows_dropped_total{reason=\"late\",table=\"rc_t\"} 1");
        has("changelake_rows_dropped_total{reason=\"filtered\",table=\"rc_t\"} 4");
        has("changelake_dead_letters_total{reason=\"type\",table=\"rc_t\"} 1");
        has("changelake_dead_letters_total{reason=\"malformed\",table=\"rc_t\"} 2");
        has("changelake_versions_inserted_total{strategy=\"scd2\",table=\"rc_t\"} 3");
        has("changelake_versions_closed_total{strategy=\"scd2\",table=\"rc_t\"} 1");
        has("changelake_commits_total{outcome=\"ok\",table=\"rc_t\"} 1");
        has("changelake_table_version{table=\"rc_t\"} 7");
        has("changelake_batch_bytes_bucket{table=\"rc_t\",le=\"10000\"} 1");
    }

    #[test]
    fn lag_uses_the_latest_watermark_and_never_goes_negative() {
        register_partition("lag_t", "lag.topic", 0, Some(5));
        high_watermark("lag.topic", 0, 12);
        offsets_committed("lag_t", "lag.topic", &[(0, 9)]);
        let out = render();
        assert!(out.contains("changelake_consumer_lag_messages{partition=\"0\",table=\"lag_t\",topic=\"lag.topic\"} 3"), "{out}");
        offsets_committed("lag_t", "lag.topic", &[(0, 15)]);
        assert!(render().contains("changelake_consumer_lag_messages{partition=\"0\",table=\"lag_t\",topic=\"lag.topic\"} 0"));
    }
}
