//! Metrics in the Prometheus text format, and the one place that both logs
//! and counts what a run did (Vector's discipline: an event is never logged
//! without being counted, or counted without being logged).
//!
//! Names follow `changelake_<noun>_<unit>[_total]`; labels are bounded
//! (table, topic, partition, strategy, reason, change) — never a key or an
//! error text. Served on `metrics.listen` with `/metrics`, `/healthz`
//! (process alive) and `/readyz` (partitions assigned and the broker reachable).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::engine::RunReport;

/// (name, type, help) of every metric the daemon exports.
pub const METRICS: &[(&str, &str, &str)] = &[
    ("changelake_rows_read_total", "counter", "Rows read from sources into batches."),
    ("changelake_rows_decoded_total", "counter", "Rows that decoded and converted into table rows."),
    (
        "changelake_rows_dropped_total",
        "counter",
        "Rows dropped, by reason (null_key, duplicate, older, late_delete, ignored_delete, unchanged, tombstone, truncate).",
    ),
    ("changelake_rows_null_key_total", "counter", "Rows dropped because their business key is NULL."),
    ("changelake_rows_dead_lettered_total", "counter", "Rows written to the dead-letter table."),
    (
        "changelake_versions_total",
        "counter",
        "Row versions written, by change (inserted, updated, closed, in_place, deleted, revived, late).",
    ),
    ("changelake_batches_total", "counter", "Micro-batches processed."),
    ("changelake_commits_total", "counter", "Delta commits written (data or offsets)."),
    ("changelake_batch_rows", "histogram", "Rows per batch."),
    ("changelake_merge_duration_seconds", "histogram", "Time to merge a batch (read state, apply rules, write files)."),
    ("changelake_commit_duration_seconds", "histogram", "Time to commit a batch to the Delta log."),
    ("changelake_committed_offset", "gauge", "Next offset to read, as committed with the table."),
    ("changelake_consumer_lag_messages", "gauge", "High watermark minus the committed next offset."),
    ("changelake_table_version", "gauge", "Latest Delta table version written."),
    ("changelake_ready", "gauge", "1 when partitions are assigned and the broker is reachable."),
];

const ROW_BUCKETS: &[f64] = &[1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0, 1_000_000.0];
const SECONDS_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Default)]
struct Hist {
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Default)]
struct Registry {
    values: BTreeMap<(&'static str, String), f64>,
    hists: BTreeMap<(&'static str, String), Hist>,
}

static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
static READY: AtomicBool = AtomicBool::new(false);

fn reg() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

fn labels(l: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (i, (k, v)) in l.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let v = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        let _ = write!(s, "{k}=\"{v}\"");
    }
    s
}

fn known(name: &'static str) -> &'static str {
    debug_assert!(METRICS.iter().any(|(n, _, _)| *n == name), "undeclared metric {name}");
    name
}

pub fn count(name: &'static str, l: &[(&str, &str)], v: u64) {
    if v > 0 {
        *reg().values.entry((known(name), labels(l))).or_insert(0.0) += v as f64;
    }
}

pub fn gauge(name: &'static str, l: &[(&str, &str)], v: f64) {
    reg().values.insert((known(name), labels(l)), v);
}

pub fn observe(name: &'static str, l: &[(&str, &str)], v: f64) {
    let buckets = if name.ends_with("_seconds") { SECONDS_BUCKETS } else { ROW_BUCKETS };
    let mut r = reg();
    let h = r.hists.entry((known(name), labels(l))).or_default();
    if h.buckets.is_empty() {
        h.buckets = vec![0; buckets.len()];
    }
    for (i, b) in buckets.iter().enumerate() {
        if v <= *b {
            h.buckets[i] += 1;
        }
    }
    h.sum += v;
    h.count += 1;
}

pub fn set_ready(ready: bool) {
    READY.store(ready, Ordering::Relaxed);
    gauge("changelake_ready", &[], if ready { 1.0 } else { 0.0 });
}

pub fn is_ready() -> bool {
    READY.load(Ordering::Relaxed)
}

/// The whole registry in the Prometheus text exposition format.
pub fn render() -> String {
    let r = reg();
    let mut out = String::new();
    for (name, ty, help) in METRICS {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {ty}");
        if *ty == "histogram" {
            let buckets = if name.ends_with("_seconds") { SECONDS_BUCKETS } else { ROW_BUCKETS };
            for ((n, l), h) in r.hists.iter().filter(|((n, _), _)| n == name) {
                let sep = if l.is_empty() { "" } else { "," };
                for (i, b) in buckets.iter().enumerate() {
                    let _ = writeln!(out, "{n}_bucket{{{l}{sep}le=\"{b}\"}} {}", h.buckets[i]);
                }
                let _ = writeln!(out, "{n}_bucket{{{l}{sep}le=\"+Inf\"}} {}", h.count);
                let braces = if l.is_empty() { String::new() } else { format!("{{{l}}}") };
                let _ = writeln!(out, "{n}_sum{braces} {}", h.sum);
                let _ = writeln!(out, "{n}_count{braces} {}", h.count);
            }
        } else {
            for ((_, l), v) in r.values.iter().filter(|((n, _), _)| n == name) {
                if l.is_empty() {
                    let _ = writeln!(out, "{name} {v}");
                } else {
                    let _ = writeln!(out, "{name}{{{l}}} {v}");
                }
            }
        }
    }
    out
}

/// Logs and counts one committed run: the single place both happen.
pub fn run_committed(r: &RunReport) {
    let s = &r.stats;
    let t = r.table.as_str();
    let st = r.strategy.as_str();
    tracing::info!(
        table = %r.table, source = %r.source, version = ?r.version, execution_id = ?r.exec,
        rows = s.rows_in, inserted = s.inserted, updated = s.updated, in_place = s.updated_in_place,
        deleted = s.deleted + s.snapshot_deleted, revived = s.revived, late = s.late_inserted,
        ignored_older = s.older_ignored, unchanged = s.unchanged + s.late_noop,
        null_keys = s.null_keys, duplicates = s.duplicates, dead_letters = r.dead_letters,
        files_added = r.files_added, files_removed = r.files_removed, "run committed"
    );
    if let Some(why) = &r.rejected {
        tracing::error!(table = %r.table, source = %r.source, reason = %why, "batch rejected by a guardrail; its rows are in the dead-letter table");
    }
    if s.null_keys > 0 {
        tracing::warn!(table = %r.table, count = s.null_keys, "dropped rows with a NULL business key");
    }
    count("changelake_rows_read_total", &[("table", t)], s.rows_in + r.dead_letters as u64);
    count("changelake_rows_decoded_total", &[("table", t)], s.rows_in);
    count("changelake_rows_null_key_total", &[("table", t)], s.null_keys);
    count("changelake_rows_dead_lettered_total", &[("table", t)], r.dead_letters as u64);
    for (reason, v) in [
        ("null_key", s.null_keys),
        ("duplicate", s.duplicates),
        ("older", s.older_ignored),
        ("late_delete", s.late_deletes_ignored),
        ("ignored_delete", s.deletes_ignored + s.deletes_unknown),
        ("unchanged", s.unchanged + s.late_noop),
    ] {
        count("changelake_rows_dropped_total", &[("table", t), ("reason", reason)], v);
    }
    for (change, v) in [
        ("inserted", s.inserted),
        ("updated", s.updated + s.restated),
        ("closed", s.versions_closed),
        ("in_place", s.updated_in_place),
        ("deleted", s.deleted + s.snapshot_deleted),
        ("revived", s.revived),
        ("late", s.late_inserted),
    ] {
        count("changelake_versions_total", &[("table", t), ("strategy", st), ("change", change)], v);
    }
    count("changelake_batches_total", &[("table", t)], 1);
    if let Some(v) = r.version {
        count("changelake_commits_total", &[("table", t)], 1);
        gauge("changelake_table_version", &[("table", t)], v as f64);
    }
    observe("changelake_batch_rows", &[("table", t)], s.rows_in as f64);
    observe("changelake_merge_duration_seconds", &[("table", t)], r.merge_secs);
    if r.version.is_some() {
        observe("changelake_commit_duration_seconds", &[("table", t)], r.commit_secs);
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` until the process ends.
pub async fn serve(addr: &str) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "metrics on http://{addr}/metrics");
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                // Read the request head (a client may send it in several writes).
                let mut buf = Vec::with_capacity(1024);
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
                    match tokio::time::timeout(std::time::Duration::from_secs(5), sock.read(&mut chunk)).await {
                        Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                        _ => break,
                    }
                }
                let req = String::from_utf8_lossy(&buf);
                let path = req.split_whitespace().nth(1).unwrap_or("/");
                let (status, ctype, body) = match path {
                    "/metrics" => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render()),
                    "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
                    "/readyz" if is_ready() => ("200 OK", "text/plain", "ready\n".to_string()),
                    "/readyz" => ("503 Service Unavailable", "text/plain", "not ready\n".to_string()),
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

    #[test]
    fn text_format_has_help_type_and_escaped_labels() {
        count("changelake_rows_read_total", &[("table", "a\"b")], 3);
        observe("changelake_batch_rows", &[("table", "t")], 42.0);
        let out = render();
        assert!(out.contains("# TYPE changelake_rows_read_total counter"));
        assert!(out.contains("changelake_rows_read_total{table=\"a\\\"b\"} 3"));
        assert!(out.contains("changelake_batch_rows_bucket{table=\"t\",le=\"100\"} 1"));
        assert!(out.contains("changelake_batch_rows_count{table=\"t\"} 1"));
    }
}
