//! Every metric the daemon exports, defined once with its name, help and
//! labels, in one Prometheus registry; and the registration that creates a
//! table's or partition's series at zero. Separate from the events that
//! bump them, so the full metric surface reads in one place.

use std::sync::OnceLock;

use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

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
pub const DEAD_REASONS: &[&str] = &["malformed", "schema", "type", "guardrail", "internal"];
const OUTCOMES: &[&str] = &["ok", "retried", "failed"];

const ROW_BUCKETS: &[f64] = &[1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0, 1_000_000.0];
const BYTE_BUCKETS: &[f64] = &[1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];
const SECONDS_BUCKETS: &[f64] =
    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Every metric the daemon exports.
pub struct Metrics {
    pub(super) registry: Registry,
    pub rows_read: IntCounterVec,
    pub rows_decoded: IntCounterVec,
    pub rows_upserted: IntCounterVec,
    pub rows_deleted: IntCounterVec,
    pub rows_unavailable_values: IntCounterVec,
    pub log_files_removed: IntCounterVec,
    pub rows_dropped: IntCounterVec,
    pub rows_null_key: IntCounterVec,
    pub source_lag: GaugeVec,
    /// Per table, the newest source timestamp committed (Unix ms): the
    /// lag is computed from it at each scrape ([`Metrics::refresh_source_lag`]).
    newest_source_ms: std::sync::Mutex<std::collections::HashMap<String, i64>>,
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
    pub offsets_out_of_range: IntCounterVec,
    pub offset_resets: IntCounterVec,
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
    pub schema_registry_failures: IntCounterVec,
    pub schema_registry_waiting: IntGauge,
    pub build_info: IntGaugeVec,
    pub start_time: IntGauge,
    pub compactions: IntCounterVec,
    pub files_compacted: IntCounterVec,
    pub checkpoints: IntCounterVec,
    pub files_vacuumed: IntCounterVec,
    pub maintenance_failures: IntCounterVec,
    pub storage_requests: IntCounterVec,
    pub storage_retries: IntCounterVec,
    pub storage_bytes: IntCounterVec,
    pub row_companion_bytes: IntCounterVec,
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
            log_files_removed: counter(&r, "changelake_log_files_removed_total", "Delta log files (commits, old checkpoints) deleted by log cleanup: older than layout.log_retention and covered by a checkpoint.", t),
            rows_unavailable_values: counter(&r, "changelake_rows_unavailable_values_total", "Rows with Debezium's unchanged-value placeholder (PostgreSQL TOAST) for a key with no stored value: those columns were written NULL.", t),
            rows_dropped: counter(
                &r,
                "changelake_rows_dropped_total",
                "Rows dropped without changing the table, by reason: null_key, duplicate (same key in a batch, older sequence), late (older than the stored sequence), ignored_delete (delete of an unknown or already deleted key), tombstone (Kafka tombstone), filtered (source filter), unchanged (no column changed), truncate (truncate event not applied).",
                tr,
            ),
            rows_null_key: counter(&r, "changelake_rows_null_key_total", "Rows dropped because their business key is NULL (every key column NULL for a composite key); also under changelake_rows_dropped_total{reason=\"null_key\"}.", t),
            source_lag: reg(
                &r,
                GaugeVec::new(
                    Opts::new(
                        "changelake_source_lag_seconds",
                        "Now minus the newest source timestamp committed to the table (Debezium source.ts_ms, or the table's source.time_column); NaN until a committed event carried one.",
                    ),
                    t,
                )
                .expect("valid metric"),
            ),
            newest_source_ms: Default::default(),
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
            offsets_out_of_range: counter(&r, "changelake_offsets_out_of_range_total", "A table's stored next offset found outside its partition's range at start (events lost to retention, or the topic recreated).", tp),
            offset_resets: counter(&r, "changelake_offset_resets_total", "Stored offsets moved to the partition's low watermark (on_offset_out_of_range: earliest).", tp),
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
            schema_registry_failures: counter(
                &r,
                "changelake_schema_registry_failures_total",
                "Schema registry requests that failed (unreachable, timeout, 5xx): retried while the partition waits; nothing is dead-lettered.",
                &["system"],
            ),
            schema_registry_waiting: gauge(&r, "changelake_schema_registry_waiting_partitions", "Partitions waiting for the schema registry to answer (/readyz is false meanwhile)."),
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
            storage_requests: counter(
                &r,
                "changelake_storage_requests_total",
                "Requests to the table's storage (object store or local disk), retries included.",
                &["table", "operation"],
            ),
            storage_retries: counter(
                &r,
                "changelake_storage_retries_total",
                "Storage requests retried after a transient error (5xx, 429, timeout, reset).",
                &["table", "operation"],
            ),
            storage_bytes: counter(
                &r,
                "changelake_storage_bytes_total",
                "Bytes read from and written to the table's storage (answered requests).",
                &["table", "direction"],
            ),
            row_companion_bytes: counter(
                &r,
                "changelake_row_companion_bytes_total",
                "Bytes of row companions (the local cache scd2 merge-on-read closes read) written and read.",
                &["table", "direction"],
            ),
            registry: r,
        };
        m.build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        m.start_time.set(chrono::Utc::now().timestamp());
        m
    }
}

impl Metrics {
    /// Records a committed batch's newest source timestamp (Unix ms); the
    /// table's stays the newest committed so far.
    pub fn note_source_time(&self, table: &str, newest_ms: i64) {
        let mut newest = self.newest_source_ms.lock().unwrap_or_else(|e| e.into_inner());
        let slot = newest.entry(table.to_string()).or_insert(newest_ms);
        *slot = (*slot).max(newest_ms);
    }

    /// Sets each table's `changelake_source_lag_seconds` to now minus its
    /// newest committed source timestamp (called at each scrape: the lag
    /// grows while nothing newer commits).
    pub fn refresh_source_lag(&self, now_ms: i64) {
        let newest = self.newest_source_ms.lock().unwrap_or_else(|e| e.into_inner());
        for (table, ms) in newest.iter() {
            self.source_lag.with_label_values(&[table]).set((now_ms - ms) as f64 / 1000.0);
        }
    }
}

/// The `operation` label of the storage metrics.
pub const STORAGE_OPERATIONS: &[&str] = &["get", "head", "put", "list", "delete", "copy", "rename"];
/// Directions of `changelake_storage_bytes_total`.
pub const STORAGE_DIRECTIONS: &[&str] = &["read", "written"];

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
        &m.rows_unavailable_values,
        &m.log_files_removed,
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
    for op in STORAGE_OPERATIONS {
        m.storage_requests.with_label_values(&[table, op]);
        m.storage_retries.with_label_values(&[table, op]);
    }
    for d in STORAGE_DIRECTIONS {
        m.storage_bytes.with_label_values(&[table, d]);
        m.row_companion_bytes.with_label_values(&[table, d]);
    }
    for h in [&m.batch_rows, &m.batch_bytes, &m.merge_seconds, &m.commit_seconds] {
        h.with_label_values(&[table]);
    }
    m.table_version.with_label_values(&[table]);
    m.buffered_bytes.with_label_values(&[table]);
    m.rows_null_key.with_label_values(&[table]);
    // Unknown until a committed event carries a source time (not 0: a
    // table that never committed is not fresh).
    let lag = m.source_lag.with_label_values(&[table]);
    if !m.newest_source_ms.lock().unwrap_or_else(|e| e.into_inner()).contains_key(table) {
        lag.set(f64::NAN);
    }
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
    m.offsets_out_of_range.with_label_values(&[table, topic, &p]);
    m.offset_resets.with_label_values(&[table, topic, &p]);
}
