//! The merge engine: the rules of docs/batch.md, scd1.md, scd2.md and snapshot.md as pure functions.
//!
//! No I/O, no async, no Delta: the table module hands in the batch rows and
//! the stored versions of exactly the keys that need them, and gets back the
//! rows to write. The work is split in three steps so that a run never loads
//! more of the table than it must:
//!
//! 1. [`prepare`] drops NULL keys and ignored deletes and deduplicates the
//!    batch (docs/batch.md: NULL business keys, deduplication and ordering).
//! 2. [`classify`] decides per key, from the in-memory key index alone
//!    ([`Summary`]), whether the stored row is needed at all. Older rows and
//!    exact replays are settled here without reading any data file, which is
//!    what makes a replay cheap and a no-op (docs/batch.md, replaying a batch is a no-op).
//! 3. [`apply`] runs the scd1 or scd2 rules against the loaded versions.

mod apply;
pub mod brief;
mod classify;
mod prepare;
pub mod scd1;
pub mod scd2;
mod unavailable;

use std::cmp::Ordering;

pub use self::apply::apply;
pub use self::classify::classify;
pub use self::prepare::prepare;

use xxhash_rust::xxh3::xxh3_64;

use crate::config::{DeleteMode, Strategy};
use crate::value::{cell, Value};

/// Encoded business key: the type-tagged bytes of every key column.
pub type Key = Box<[u8]>;
/// Maps keyed by business key use FxHash: keys are already well-mixed byte
/// strings, and SipHash's DoS resistance buys nothing for data we commit.
pub type KeyMap<V> = std::collections::HashMap<Key, V, rustc_hash::FxBuildHasher>;

/// Encodes business-key values (in key order); None when all are NULL.
pub fn key_from<'a>(vals: impl Iterator<Item = &'a Value> + Clone) -> Option<Key> {
    if vals.clone().all(|v| v.is_null()) {
        return None;
    }
    let mut out = Vec::with_capacity(16);
    for v in vals {
        v.encode(&mut out);
    }
    Some(out.into_boxed_slice())
}

/// How `_valid_from/_valid_to` are stamped (scd2): the config's rule with
/// its column resolved to a position in the data.
pub type ValidTime = crate::config::ValidTime<TimeColumn>;

/// A business-time column (docs/scd2.md, business time): its index, and
/// the unit of an integer value, which its name says: `source.ts_ms` and
/// any `…_ms` are epoch milliseconds (as Debezium and Kafka Connect write
/// them), `…_ns` nanoseconds, anything else microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeColumn {
    pub index: usize,
    pub int_unit: IntUnit,
}

/// What one unit of an integer timestamp is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntUnit {
    Millis,
    Micros,
    Nanos,
}

impl TimeColumn {
    pub fn named(index: usize, name: &str) -> TimeColumn {
        let name = name.to_ascii_lowercase();
        let int_unit = match () {
            _ if name.ends_with("_ms") => IntUnit::Millis,
            _ if name.ends_with("_ns") => IntUnit::Nanos,
            _ => IntUnit::Micros,
        };
        TimeColumn { index, int_unit }
    }

    /// An integer value of the column as microseconds (saturated).
    fn micros(&self, v: i64) -> i64 {
        match self.int_unit {
            IntUnit::Millis => v.saturating_mul(1000),
            IntUnit::Micros => v,
            IntUnit::Nanos => v.div_euclid(1000),
        }
    }
}

/// The merge rules of one table, resolved against its current columns.
#[derive(Debug, Clone)]
pub struct Spec {
    pub strategy: Strategy,
    pub names: Vec<String>,
    pub key: Vec<usize>,
    pub seq: Vec<usize>,
    /// Per data column: does a difference there count as a change?
    pub tracked: Vec<bool>,
    pub delete_mode: DeleteMode,
    pub snapshot: bool,
    pub intra_batch_all: bool,
    pub valid_time: ValidTime,
    pub open_valid_to: Option<i64>,
    pub surrogate_key: bool,
    pub reject_duplicates: bool,
    pub reject_late: bool,
}

/// One incoming row, aligned to the table's data columns.
#[derive(Debug, Clone)]
pub struct InRow {
    pub data: Vec<Value>,
    pub delete: bool,
    /// Position in the input: later offset / later line wins a sequence tie.
    pub order: u64,
    /// Already applied once (replay --reapply): it may restore a missing row
    /// but never adds a late version, so a reapply equals a single pass even
    /// where the first pass deduplicated this row away inside its batch.
    pub replayed: bool,
    /// `(row_hash, tracked_hash)` of `data`, when already computed (classification
    /// computes them; the new version's key-index summary reuses them).
    pub hashes: Option<(u64, u64)>,
    /// Columns the source left out as unchanged (Debezium's placeholder,
    /// PostgreSQL TOAST): they take the key's previous value before the
    /// rules apply (`unavailable::fill`).
    pub unavailable: Vec<usize>,
}

/// Where a stored version lives; opaque to the merge, used by the table module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Loc {
    pub file: u32,
    pub row: u32,
}

/// One stored row (scd1) or version (scd2).
#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    pub data: Vec<Value>,
    pub valid_from: Option<i64>,
    pub valid_to: Option<i64>,
    pub current: bool,
    pub deleted: bool,
    pub exec: i64,
    pub sk: Option<i64>,
    pub loc: Option<Loc>,
    /// An open version to write: its key's closed versions in brief
    /// ([`brief::encode`]), when the table keeps them and they are known.
    pub brief: Option<std::sync::Arc<[u8]>>,
}

/// What the key index remembers per key: enough to settle most rows
/// without reading the table (the key index, `table::index`).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Sequence of the latest version (scd1: of the row, including a soft delete's).
    pub seq: Seq,
    /// scd1: the row is soft-deleted. scd2: the latest version is a closed, deleted one.
    pub deleted: bool,
    /// scd2: `_valid_from` of the latest version (`i64::MIN`: none), so an
    /// open version can be closed without reading it ([`Need::Close`]).
    pub valid_from: i64,
    /// Hash of every non-NULL data column by name.
    pub row_hash: u64,
    /// Hash of the non-NULL tracked columns (see [`Spec::tracked_hash`]).
    pub tracked_hash: u64,
}

/// A stored sequence. The key index holds one per key, so the usual single
/// integer or timestamp column is kept inline (16 bytes, no allocation).
#[derive(Debug, Clone, PartialEq)]
pub enum Seq {
    Int(i64),
    Ts(i64),
    Other(Box<Box<[Value]>>),
}

impl Seq {
    pub fn new(vals: Vec<Value>) -> Seq {
        match vals.as_slice() {
            [Value::Int(i)] => Seq::Int(*i),
            [Value::Ts(t)] => Seq::Ts(*t),
            _ => Seq::Other(Box::new(vals.into_boxed_slice())),
        }
    }

    /// Runs `f` over the sequence as values.
    pub fn with<R>(&self, f: impl FnOnce(&[Value]) -> R) -> R {
        match self {
            Seq::Int(i) => f(&[Value::Int(*i)]),
            Seq::Ts(t) => f(&[Value::Ts(*t)]),
            Seq::Other(v) => f(v),
        }
    }
}

/// Stored versions of one key, loaded by the table module on request.
#[derive(Debug, Clone, Default)]
pub struct KeyState {
    /// scd1: the row. scd2: the open version.
    pub current: Option<Version>,
    /// scd2: the latest version when it is closed (deleted key), if known.
    pub latest_closed: Option<Version>,
    /// scd2: every closed version of the key, when [`Need::History`] asked for it.
    pub history: Vec<Version>,
    /// scd1: a live row exists and is replaced (see [`Need::Replace`]).
    pub replace: bool,
    /// scd2: the open version's index summary, when it is closed without
    /// being read (see [`Need::Close`]).
    pub stored: Option<Summary>,
    /// scd2: every closed version of the key in brief, when known (see
    /// [`brief`]); the merge then needs no `history` for late rows.
    pub brief: Option<Vec<brief::Closed>>,
    /// scd2, [`Need::Close`]: the brief stored with the open version closed.
    pub stored_brief: Option<brief::Stored>,
    /// scd2: `history` holds every closed version of the key (it was read).
    pub history_read: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// Settled without stored rows (skip, insert of a new key).
    Nothing,
    /// scd2: a deleted key comes back; settled without stored rows, but it
    /// has closed versions the run does not read.
    Reopen,
    /// The stored current row is needed.
    Current,
    /// scd1: the stored live row is replaced wholesale by a newer row whose
    /// tracked columns differ (known from the key index): no read needed.
    Replace,
    /// scd2 (processing time): one newer row whose tracked columns differ
    /// from the open version (or a delete of it), known from the key index.
    /// The open version is closed as stored: the table copies its row into
    /// history with `_valid_to` set, at the Arrow level, never as values.
    Close,
    /// Current plus every closed version (scd2 late rows, business-time backdating).
    History,
    /// scd2: [`Need::History`] with the closed versions' rows read even when
    /// the key's briefs would do: a row leaving a value unchanged (TOAST)
    /// takes it from the version valid at its sequence, a deleted one too.
    HistoryRows,
}

impl Need {
    /// The key's closed versions are needed (in brief, or read).
    pub fn history(self) -> bool {
        matches!(self, Need::History | Need::HistoryRows)
    }
}

/// Counters of one run; the daemon turns them into metrics, and each
/// commit carries them as JSON (`commitInfo.changelake.stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub rows_in: u64,
    pub null_keys: u64,
    pub duplicates: u64,
    pub deletes_ignored: u64,
    pub inserted: u64,
    pub updated: u64,
    pub updated_in_place: u64,
    pub unchanged: u64,
    pub older_ignored: u64,
    pub late_inserted: u64,
    pub late_noop: u64,
    pub late_deletes_ignored: u64,
    pub deleted: u64,
    pub revived: u64,
    pub deletes_unknown: u64,
    pub versions_closed: u64,
    pub restated: u64,
    pub snapshot_deleted: u64,
    /// Rows with an unchanged-value placeholder but no stored value to keep:
    /// those columns are NULL.
    pub unavailable_nulls: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        macro_rules! sum { ($($f:ident),*) => { $(self.$f += o.$f;)* } }
        sum!(
            rows_in,
            null_keys,
            duplicates,
            deletes_ignored,
            inserted,
            updated,
            updated_in_place,
            unchanged,
            older_ignored,
            late_inserted,
            late_noop,
            late_deletes_ignored,
            deleted,
            revived,
            deletes_unknown,
            versions_closed,
            restated,
            snapshot_deleted,
            unavailable_nulls
        );
    }
}

/// The batch after NULL-key drop and dedup: per key, its surviving rows in
/// ascending sequence order (one row unless scd2 `intra_batch: all`).
#[derive(Debug, Default)]
pub struct Prepared {
    pub keys: Vec<(Key, Vec<InRow>)>,
    pub stats: Stats,
    /// `reject_duplicates` tripped: the reason the batch must be rejected.
    pub rejected: Option<String>,
}

/// Result of [`apply`]: the complete set of writes of one run.
#[derive(Debug, Default)]
pub struct Output {
    /// New content of the current partition for a key (replaces any stored row).
    pub upserts: Vec<(Key, Version)>,
    /// Keys whose row leaves the current partition.
    pub removes: Vec<Key>,
    /// Closed versions to append to history (scd2).
    pub history_appends: Vec<Version>,
    /// Stored closed versions rewritten in place (business-time neighbours).
    pub history_replacements: Vec<(Loc, Version)>,
    /// Open versions closed as stored ([`Need::Close`]): (key, `_valid_to`,
    /// `_is_deleted`). The table copies each key's stored current row into
    /// history with these values; every other column is kept.
    pub closes: Vec<(Key, i64, bool)>,
    /// New key-index entries (`None`: the key is gone).
    pub index: Vec<(Key, Option<Summary>)>,
    /// scd2 with briefs ([`RunCtx::briefs`]): the brief of each key left
    /// without an open version whose closed versions changed in this run
    /// (deleted, or given a late version while deleted), `None` when it is
    /// not known; and `None` for each deleted key with known closed
    /// versions that gets an open version, whose brief now goes with it.
    /// A deleted key has no current row to carry its brief; the table keeps
    /// these (`table/deleted_briefs.rs`).
    pub deleted_briefs: Vec<(Key, Option<std::sync::Arc<[u8]>>)>,
    pub stats: Stats,
    pub rejected: Option<String>,
}

impl Output {
    pub fn has_changes(&self) -> bool {
        !(self.upserts.is_empty()
            && self.removes.is_empty()
            && self.history_appends.is_empty()
            && self.history_replacements.is_empty()
            && self.closes.is_empty())
    }
}

/// Per-run constants.
#[derive(Debug, Clone, Copy)]
pub struct RunCtx {
    pub exec: i64,
    /// Processing time of the run, microseconds UTC.
    pub now: i64,
    /// scd2, processing time: the table keeps each key's closed versions in
    /// brief with its current row ([`brief`]); the rules' [`brief::fingerprint`].
    pub briefs: Option<u64>,
}

/// Versions of one key order by sequence, then by the run that wrote them
/// (`_execution_id`): of two versions with the same sequence, the later run's
/// is the newer (docs/scd2.md, version order). `by_sequence` is the
/// comparison of their sequences.
pub fn version_order(by_sequence: Ordering, exec_a: i64, exec_b: i64) -> Ordering {
    by_sequence.then(exec_a.cmp(&exec_b))
}

impl Spec {
    pub fn key_of(&self, data: &[Value]) -> Option<Key> {
        key_from(self.key.iter().map(|&i| cell(data, i)))
    }

    pub fn seq_of(&self, data: &[Value]) -> Seq {
        Seq::new(self.seq_values(data))
    }

    /// The sequence columns' values of a row.
    pub fn seq_values(&self, data: &[Value]) -> Vec<Value> {
        self.seq.iter().map(|&i| cell(data, i).clone()).collect()
    }

    /// Compares a row's sequence columns with a stored sequence, in place.
    pub fn cmp_seq_to(&self, row: &[Value], seq: &[Value]) -> Ordering {
        for (&i, s) in self.seq.iter().zip(seq) {
            let o = cell(row, i).total_cmp(s);
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    /// The order of two versions of one key (see [`version_order`]).
    pub fn cmp_versions(&self, a: &Version, b: &Version) -> Ordering {
        version_order(self.cmp_seq(&a.data, &b.data), a.exec, b.exec)
    }

    /// The last of a deleted key's closed versions: the one its delete
    /// closed, whose end is where the key may come back. In processing time
    /// that is the highest in version order; in business time the latest to
    /// end (a backdated row can hand the delete to a version of a lower
    /// sequence, docs/scd2.md, "Business time").
    pub fn latest_closed<'a>(&self, history: &'a [Version]) -> Option<&'a Version> {
        match self.valid_time {
            ValidTime::Processing => history.iter().max_by(|a, b| self.cmp_versions(a, b)),
            _ => history
                .iter()
                .max_by(|a, b| a.valid_to.cmp(&b.valid_to).then_with(|| self.cmp_versions(a, b))),
        }
    }

    /// Compares the sequence columns of two rows in place (no allocation: this runs in sorts).
    pub fn cmp_seq(&self, a: &[Value], b: &[Value]) -> Ordering {
        for &i in &self.seq {
            let o = cell(a, i).total_cmp(cell(b, i));
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    pub fn tracked_equal(&self, a: &[Value], b: &[Value]) -> bool {
        (0..self.names.len()).all(|i| {
            !self.tracked[i]
                || a.get(i).unwrap_or(&Value::Null).same(b.get(i).unwrap_or(&Value::Null))
        })
    }

    pub fn all_equal(&self, a: &[Value], b: &[Value]) -> bool {
        (0..self.names.len())
            .all(|i| a.get(i).unwrap_or(&Value::Null).same(b.get(i).unwrap_or(&Value::Null)))
    }

    /// Like [`Spec::row_hash`] over the tracked columns only: a different
    /// tracked hash means a real change (scd1: the row is replaced and its
    /// `_execution_id` bumped) without reading the stored row.
    pub fn tracked_hash(&self, data: &[Value]) -> u64 {
        self.hashes(data).1
    }

    /// Hash of every non-NULL column by name, so that adding a column (NULL in
    /// old rows) does not change the hash of stored rows.
    pub fn row_hash(&self, data: &[Value]) -> u64 {
        self.hashes(data).0
    }

    /// `(row_hash, tracked_hash)` in one pass. Each non-NULL column's name
    /// and value are encoded one after another (names end in 0xff, which
    /// UTF-8 never holds, and value encodings delimit themselves, so two
    /// rows that differ in any column encode differently) and the whole row
    /// is hashed once: a dozen short hashes folded per row had cost a tenth
    /// of a narrow merge-on-read run's CPU (docs/performance.md, "Conform in
    /// place, one hash per row"). The tracked hash is the same encoding of
    /// the tracked columns only, so it equals the row hash while every
    /// column is tracked. Key-index snapshots and scd2 briefs store these
    /// hashes: changing the encoding means bumping their formats. The
    /// buffers are reused per thread: this runs for every incoming and every
    /// indexed row.
    pub fn hashes(&self, data: &[Value]) -> (u64, u64) {
        thread_local!(static BUF: std::cell::RefCell<(Vec<u8>, Vec<u8>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) });
        BUF.with_borrow_mut(|(all, tracked)| {
            all.clear();
            tracked.clear();
            // Whether a non-NULL column left out of tracking has been met:
            // until then the tracked encoding is `all`'s.
            let mut partial = false;
            for (i, v) in data.iter().enumerate() {
                if v.is_null() {
                    continue;
                }
                let start = all.len();
                all.extend_from_slice(self.names[i].as_bytes());
                all.push(0xff);
                v.encode(all);
                let is_tracked = self.tracked.get(i).copied().unwrap_or(true);
                match (is_tracked, partial) {
                    (true, true) => tracked.extend_from_slice(&all[start..]),
                    (false, false) => {
                        partial = true;
                        tracked.extend_from_slice(&all[..start]);
                    }
                    _ => {}
                }
            }
            let row = xxh3_64(all);
            (row, if partial { xxh3_64(tracked) } else { row })
        })
    }

    pub fn summary(&self, v: &Version) -> Summary {
        self.summary_hashed(v, None)
    }

    /// [`Spec::summary`] with the hashes of `v.data`, if known.
    pub fn summary_hashed(&self, v: &Version, hashes: Option<(u64, u64)>) -> Summary {
        let (row_hash, tracked_hash) = hashes.unwrap_or_else(|| self.hashes(&v.data));
        Summary {
            seq: self.seq_of(&v.data),
            deleted: v.deleted,
            valid_from: v.valid_from.unwrap_or(i64::MIN),
            row_hash,
            tracked_hash,
        }
    }

    fn business_time(&self, data: &[Value], ctx: &RunCtx) -> Option<i64> {
        match &self.valid_time {
            ValidTime::Processing => None,
            ValidTime::Date(d) => Some(*d),
            ValidTime::Column(c) => Some(match cell(data, c.index) {
                Value::Ts(t) => *t,
                Value::Date(d) => crate::value::temporal::date_to_ts(*d),
                Value::Int(t) => c.micros(*t),
                Value::Str(s) => crate::value::parse_ts(s).unwrap_or(ctx.now),
                _ => ctx.now,
            }),
        }
    }

    /// Deterministic surrogate key: business key + `_valid_from` (+ the
    /// version's run and ordinal, so versions sharing a `_valid_from` in one
    /// run stay distinct).
    pub fn surrogate(&self, key: &[u8], valid_from: i64, exec: i64, ordinal: usize) -> Option<i64> {
        if !self.surrogate_key {
            return None;
        }
        let mut buf = key.to_vec();
        buf.extend_from_slice(&valid_from.to_be_bytes());
        if ordinal > 0 {
            buf.extend_from_slice(&exec.to_be_bytes());
            buf.extend_from_slice(&(ordinal as u64).to_be_bytes());
        }
        Some((xxh3_64(&buf) >> 1) as i64)
    }
}

#[cfg(test)]
pub(crate) mod memtable;
#[cfg(test)]
mod tests;
