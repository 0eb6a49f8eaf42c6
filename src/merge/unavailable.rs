//! Values the source left out as unchanged (Debezium's placeholder for
//! PostgreSQL TOAST columns, docs/types.md): they take the key's previous
//! value — from an earlier event of the batch, else from the stored row —
//! before the scd1/scd2 rules compare anything.

use std::cmp::Ordering;

use super::{InRow, KeyState, Spec, Stats, Version};
use crate::config::Strategy;
use crate::value::{cell, set_cell};

/// Within one key's rows in order, an unchanged (unavailable) value is the
/// previous row's: a deduplicated batch keeps what the rows it drops had set.
pub(super) fn carry(group: &mut [InRow]) {
    for i in 1..group.len() {
        if group[i].unavailable.is_empty() {
            continue;
        }
        let (before, rest) = group.split_at_mut(i);
        let (prev, row) = (&before[i - 1], &mut rest[0]);
        row.unavailable.retain(|&c| {
            if prev.unavailable.contains(&c) {
                return true;
            }
            set_cell(&mut row.data, c, cell(&prev.data, c).clone());
            false
        });
        row.hashes = None;
    }
}

/// The key's stored value for every column a row left out as unchanged
/// (scd1: the row; scd2: the version valid at the row's sequence — the
/// open one for a newer row, the deleted one for a key coming back, the
/// one a late row follows). Without one those columns stay NULL, and the
/// row is counted (docs/types.md, unchanged values).
pub(super) fn fill(spec: &Spec, rows: &mut [InRow], state: &KeyState, stats: &mut Stats) {
    for r in rows.iter_mut().filter(|r| !r.unavailable.is_empty()) {
        match valid_at(spec, state, &r.data) {
            Some(v) => {
                for &c in &r.unavailable {
                    set_cell(&mut r.data, c, cell(&v.data, c).clone());
                }
            }
            None => stats.unavailable_nulls += 1,
        }
        r.unavailable.clear();
        r.hashes = None;
    }
}

/// The stored version a row's unchanged values come from (see [`fill`]).
fn valid_at<'a>(
    spec: &Spec,
    state: &'a KeyState,
    row: &[crate::value::Value],
) -> Option<&'a Version> {
    let latest = state.current.as_ref().or(state.latest_closed.as_ref());
    if spec.strategy == Strategy::Scd1 || spec.seq.is_empty() {
        return latest;
    }
    // Versions not newer than the row, the last of them (ties: the later run).
    let versions = state.current.iter().chain(&state.history).chain(&state.latest_closed);
    versions
        .filter(|v| spec.cmp_seq(&v.data, row) != Ordering::Greater)
        .max_by(|a, b| spec.cmp_versions(a, b))
}
