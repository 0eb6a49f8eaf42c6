//! What one run of one table did: [`RunReport`].
//!
//! The engine fills it in, `telemetry` turns it into a log line and counters,
//! and callers (daemon, file runner, bench) read it. It has a module of its
//! own so that the engine and telemetry both depend on it rather than on
//! each other.

use std::collections::BTreeMap;

use crate::config::Strategy;
use crate::merge::Stats;

/// What one run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub table: String,
    pub strategy: Strategy,
    /// Seconds spent merging (state loads, rules, file writes) and committing.
    pub merge_secs: f64,
    pub commit_secs: f64,
    pub source: String,
    pub skipped: bool,
    pub stats: Stats,
    pub version: Option<i64>,
    pub exec: Option<i64>,
    pub files_added: usize,
    pub files_removed: usize,
    /// Files whose deletion vector grew instead of being rewritten (merge-on-read).
    pub files_masked: usize,
    pub dead_letters: usize,
    /// Dead letters by bounded reason (malformed, schema, type, guardrail).
    pub dead_by_reason: BTreeMap<&'static str, u64>,
    /// Rows dropped by the source filter.
    pub filtered: u64,
    /// Source bytes of the batch.
    pub bytes: u64,
    pub rejected: Option<String>,
    /// The newest source timestamp of the batch's rows (Unix milliseconds),
    /// when the table has a source time (docs/metrics.md, freshness).
    pub newest_source_ms: Option<i64>,
    /// Milliseconds per phase of the merge (conform ... commit, upkeep), in order.
    pub phases: Vec<(&'static str, f64)>,
}

/// An empty report. Its `strategy` is scd1 until the run sets its table's:
/// a report of no table (a skipped flush) is neither logged nor counted.
impl Default for RunReport {
    fn default() -> RunReport {
        RunReport {
            table: String::new(),
            strategy: Strategy::Scd1,
            merge_secs: 0.0,
            commit_secs: 0.0,
            source: String::new(),
            skipped: false,
            stats: Stats::default(),
            version: None,
            exec: None,
            files_added: 0,
            files_removed: 0,
            files_masked: 0,
            dead_letters: 0,
            dead_by_reason: BTreeMap::new(),
            filtered: 0,
            bytes: 0,
            phases: vec![],
            rejected: None,
            newest_source_ms: None,
        }
    }
}
