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
//!
//! This module holds the events: one function per event, logging and
//! counting it together. `registry` defines every metric and creates a
//! table's or a partition's series; `health` tracks readiness; `http`
//! renders the registry and serves it.

mod health;
mod http;
pub mod progress;
mod registry;
mod repeat;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

pub use self::health::{
    broker_probe, pending, readiness, registry_waiting, set_assigned, set_commit_deadline,
};
pub use self::http::{render, serve};
pub use self::registry::{
    metrics, register_partition, register_table, Metrics, DEAD_REASONS, DROP_REASONS,
    STORAGE_DIRECTIONS, STORAGE_OPERATIONS,
};
pub use self::repeat::{RepeatFilter, CLIENT_ERRORS};
use crate::config::Strategy;
use crate::report::RunReport;

/// The target of telemetry's log lines: this module's path, named explicitly
/// by the submodules so that splitting the module did not change what
/// operators filter and search logs by.
const LOG_TARGET: &str = "changelake::telemetry";

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
/// One request to a table's storage (retries included).
pub fn storage_request(table: &str, operation: &'static str) {
    metrics().storage_requests.with_label_values(&[table, operation]).inc();
}

/// Bytes a table's storage answered with (`read`) or took (`written`).
pub fn storage_bytes(table: &str, direction: &'static str, bytes: u64) {
    metrics().storage_bytes.with_label_values(&[table, direction]).inc_by(bytes);
}

/// Bytes of row companions (a local cache of scd2 merge-on-read tables,
/// beside the table's store) written or read.
pub fn row_companion_bytes(table: &str, direction: &'static str, bytes: u64) {
    metrics().row_companion_bytes.with_label_values(&[table, direction]).inc_by(bytes);
}

/// A storage request failed without an answer and is tried again.
pub fn storage_retried(
    table: &str,
    operation: &'static str,
    path: &str,
    attempt: u32,
    error: &dyn std::fmt::Display,
) {
    metrics().storage_retries.with_label_values(&[table, operation]).inc();
    // Once per interval per table and operation, with how many since.
    if let Some(repeated) = repeat::STORAGE_RETRIES.admit(&format!("{table} {operation}")) {
        tracing::warn!(target: LOG_TARGET, table, operation, path, attempt, repeated, error = %error, "storage request failed, retrying");
    }
}

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

pub fn checkpointed(
    table: &str,
    version: i64,
    vacuumed: usize,
    log_files_removed: usize,
    seconds: f64,
) {
    let m = metrics();
    m.checkpoints.with_label_values(&[table]).inc();
    m.files_vacuumed.with_label_values(&[table]).inc_by(vacuumed as u64);
    m.log_files_removed.with_label_values(&[table]).inc_by(log_files_removed as u64);
    tracing::info!(
        table,
        version,
        files_vacuumed = vacuumed,
        log_files_removed,
        duration_ms = (seconds * 1000.0) as u64,
        "checkpoint written, log cleaned up, table vacuumed"
    );
}

/// A table's stored next offset lies outside its partition's range.
pub fn offset_out_of_range(
    table: &str,
    topic: &str,
    partition: i32,
    stored: i64,
    low: i64,
    high: i64,
    why: &str,
) {
    let p = partition.to_string();
    metrics().offsets_out_of_range.with_label_values(&[table, topic, &p]).inc();
    tracing::error!(
        table,
        topic,
        partition,
        stored_next_offset = stored,
        low_watermark = low,
        high_watermark = high,
        why,
        "stored offset outside the partition's range"
    );
}

/// `on_offset_out_of_range: earliest` moved a table's progress.
pub fn offset_reset(table: &str, topic: &str, partition: i32, stored: i64, low: i64) {
    let p = partition.to_string();
    metrics().offset_resets.with_label_values(&[table, topic, &p]).inc();
    metrics().committed_offset.with_label_values(&[table, topic, &p]).set(low);
    tracing::warn!(
        table,
        topic,
        partition,
        from = stored,
        to = low,
        gap = stored - low,
        "progress reset to the partition's low watermark (on_offset_out_of_range: earliest)"
    );
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

/// The failure counter of an Avro system's registry, at zero.
pub fn schema_registry_failures_init(system: &str) {
    metrics().schema_registry_failures.with_label_values(&[system]);
}

/// A schema registry request failed (the partition waits and retries).
pub fn schema_registry_failure(system: &str, topic: &str, partition: i32, error: &str) {
    metrics().schema_registry_failures.with_label_values(&[system]).inc();
    if let Some(repeated) = CLIENT_ERRORS.admit(error) {
        tracing::warn!(
            system,
            topic,
            partition,
            error,
            repeated,
            "schema registry request failed; retrying"
        );
    }
}

pub fn kafka_error(system: &str, error: &str) {
    metrics().kafka_errors.inc();
    if let Some(repeated) = CLIENT_ERRORS.admit(error) {
        tracing::warn!(system, error, repeated, "kafka client error (the client retries)");
    }
}

/// Logs and counts one processed batch: the single place both happen.
pub fn run_committed(r: &RunReport) {
    let s = &r.stats;
    let t = r.table.as_str();
    let st = r.strategy.as_str();
    let duration_ms = ((r.merge_secs + r.commit_secs) * 1000.0).round() as u64;
    tracing::info!(
        table = %r.table, source = %r.source, version = r.version, execution_id = r.exec, duration_ms,
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
    m.rows_null_key.with_label_values(&[t]).inc_by(s.null_keys);
    if let Some(ms) = r.newest_source_ms {
        m.note_source_time(t, ms);
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
    m.rows_unavailable_values.with_label_values(&[t]).inc_by(s.unavailable_nulls);
    if s.unavailable_nulls > 0 {
        tracing::warn!(table = %r.table, count = s.unavailable_nulls, "rows with an unchanged-value placeholder but no stored value: those columns are NULL");
    }
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
