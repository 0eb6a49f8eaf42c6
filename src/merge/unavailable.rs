//! Values the source left out as unchanged (Debezium's placeholder for
//! PostgreSQL TOAST columns, docs/types.md): they take the key's previous
//! value — from an earlier event of the batch, else from the stored row —
//! before the scd1/scd2 rules compare anything.

use super::{InRow, Stats, Version};
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
/// (scd1: the row; scd2: the open version). Without one those columns
/// stay NULL, and the row is counted (docs/types.md, unchanged values).
pub(super) fn fill(rows: &mut [InRow], current: Option<&Version>, stats: &mut Stats) {
    for r in rows.iter_mut().filter(|r| !r.unavailable.is_empty()) {
        match current {
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
