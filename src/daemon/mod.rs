//! The streaming daemon: one consume loop per Kafka system, micro-batches per
//! table, one Delta commit per batch carrying the offsets it consumed
//! (docs/operations.md, the daemon; docs/commit-protocol.md).
//!
//! Exactly-once comes from the table, not from Kafka: every commit holds one
//! `txn` action per partition (`changelake/<table>/<topic>/<p>`, version = next
//! offset to read). At start each partition is sought to the smallest stored
//! offset over the tables that read it, and each table skips events below its
//! own offset. Consumer-group offsets are committed after the table commit,
//! for lag dashboards only. A crash anywhere loses nothing (offsets only move
//! with the data) and repeats nothing (replayed events are below the stored
//! offsets, and the merge is idempotent anyway) (docs/commit-protocol.md,
//! progress markers, where a run starts, why this is exactly-once).
//!
//! Partitions are assigned manually (every partition of every table's topic),
//! so one daemon owns a config; a second one racing on the same tables loses
//! at commit time (Delta's `txn` conflict check) and re-reads the table
//! (docs/commit-protocol.md, concurrent writers).
//!
//! Modules, in the order a message meets them: `system` (one system's loop,
//! as named steps), `slots` (each table's state), `start` (where partitions
//! start, docs/replay.md), `forward` (partition queues into the loop),
//! `route` (messages into batches), `flush` (a batch's commit),
//! `probes` (background metadata, lag and broker probes), `shutdown`.

mod flush;
mod forward;
mod probes;
mod route;
mod settings;
mod shutdown;
mod slots;
mod start;
mod system;

use std::time::Duration;

pub use shutdown::{signals, Shutdown};

use crate::config::{Config, SystemKind, TableConfig};
use crate::engine::RunReport;
use crate::error::{Error, Result};
use crate::telemetry;

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

/// A replay's start position (docs/replay.md, start positions).
#[derive(Debug, Clone)]
pub enum StartAt {
    Beginning,
    Offsets(Vec<StartOffset>),
    /// Milliseconds since the epoch.
    Timestamp(i64),
}

/// `--from-offsets`: where one partition starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Serves `/metrics` on `metrics.listen`, or on 127.0.0.1:9464 for a
/// long-running daemon without one. A configured address that cannot be
/// bound is an error: an unmonitored daemon looks healthy while it is not
/// (docs/metrics.md, endpoint; docs/operations.md, health endpoints).
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
                runs.push(system::run_system(
                    config,
                    name,
                    tables,
                    opts.clone(),
                    Box::pin(shared.clone()),
                ));
            }
        }
    }
    let mut reports = vec![];
    for r in futures::future::join_all(runs).await {
        reports.extend(r?);
    }
    Ok(reports)
}
