//! Test-only fault points: `CHANGELAKE_FAULT=<point>[:<n>]` aborts the process
//! (as SIGKILL would) the n-th time (default first) execution reaches `<point>`.
//! Crash-safety tests use it to stop between the parquet write and the Delta
//! commit, between the commit and the consumer-group commit, and inside
//! table upkeep (after the checkpoint, the log cleanup, the vacuum). Unset,
//! it costs one relaxed atomic load.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

static SPEC: OnceLock<Option<(String, i64)>> = OnceLock::new();
static HITS: AtomicI64 = AtomicI64::new(0);

pub fn hit(point: &str) {
    let spec = SPEC.get_or_init(|| {
        let v = std::env::var("CHANGELAKE_FAULT").ok()?;
        let (p, n) = match v.split_once(':') {
            Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
            None => (v, 1),
        };
        Some((p, n))
    });
    if let Some((p, n)) = spec {
        if p == point && HITS.fetch_add(1, Ordering::Relaxed) + 1 == *n {
            eprintln!("changelake: fault point {point} reached, aborting");
            std::process::abort();
        }
    }
}
