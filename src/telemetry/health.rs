//! Readiness (`/readyz`): partitions assigned, brokers reachable, and no
//! table holding events uncommitted past the commit deadline. Its own
//! module because it is state the events update and the HTTP side reads.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::registry::metrics;
use super::LOG_TARGET;

#[derive(Default)]
struct Health {
    /// Per Kafka system: partitions assigned, broker answered the last probe.
    systems: BTreeMap<String, (bool, bool)>,
    /// Per table: when its oldest uncommitted event was read.
    pending: BTreeMap<String, Instant>,
    deadline: Option<Duration>,
    /// Per Kafka system: partitions waiting for its schema registry.
    registry_waiting: BTreeMap<String, usize>,
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
            tracing::info!(target: LOG_TARGET, system, "broker reachable again");
        } else {
            tracing::warn!(target: LOG_TARGET, system, error = error.unwrap_or(""), "broker unreachable; not ready");
        }
    }
    e.1 = ok;
    let all = h.systems.values().all(|(_, up)| *up);
    metrics().broker_up.set(all as i64);
}

/// A partition of `system` starts (`true`) or stops waiting for the
/// schema registry; logs when the first starts and the last stops.
pub fn registry_waiting(system: &str, waiting: bool, error: Option<&str>) {
    let mut h = health();
    let n = h.registry_waiting.entry(system.to_string()).or_default();
    match waiting {
        true => {
            *n += 1;
            if *n == 1 {
                tracing::warn!(target: LOG_TARGET, system, error = error.unwrap_or(""), "schema registry unreachable: partitions wait and retry; not ready");
            }
        }
        false => {
            *n = n.saturating_sub(1);
            if *n == 0 {
                tracing::info!(target: LOG_TARGET, system, "schema registry answers again; partitions resume");
            }
        }
    }
    let total: usize = h.registry_waiting.values().sum();
    metrics().schema_registry_waiting.set(total as i64);
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
    for (s, waiting) in &h.registry_waiting {
        if *waiting > 0 {
            why.push(format!(
                "system {s}: schema registry unreachable ({waiting} partitions waiting)"
            ));
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
