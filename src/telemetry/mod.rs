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
//! The pieces: `registry` defines every metric and creates a table's or a
//! partition's series; `events` is the log-and-count function per event;
//! `health` tracks readiness; `http` renders the registry and serves it.

mod events;
mod health;
mod http;
mod registry;
#[cfg(test)]
mod tests;

pub use self::events::{
    buffered, checkpointed, commit_failed, commit_retried, compacted, dropped, high_watermark,
    kafka_error, lag, maintenance_failed, offsets_committed, paused, run_committed,
};
pub use self::health::{broker_probe, pending, readiness, set_assigned, set_commit_deadline};
pub use self::http::{render, serve};
pub use self::registry::{
    metrics, register_partition, register_table, Metrics, DEAD_REASONS, DROP_REASONS,
};
