//! Step 1 of a run's merge: the batch alone, before the table is asked
//! anything. NULL keys and ignored deletes leave here, and each key keeps
//! the rows that count (the newest, or with `intra_batch: all` one per
//! distinct sequence), so every later step works per key.

use std::cmp::Ordering;

use super::{unavailable, InRow, Key, Prepared, Spec};
use crate::config::{DeleteMode, Strategy};

/// docs/batch.md: drop NULL keys, drop deletes under `delete_mode: ignore`,
/// keep the row with the highest sequence per key (ties: later position).
pub fn prepare(spec: &Spec, mut rows: Vec<InRow>) -> Prepared {
    use rayon::prelude::*;
    let mut p = Prepared::default();
    p.stats.rows_in = rows.len() as u64;
    let hash = |k: &Key| std::hash::BuildHasher::hash_one(&rustc_hash::FxBuildHasher, k);
    // Each row's key bytes and their hash on all cores (encoding a key
    // allocates it); only grouping is serial. A live row's change hashes
    // are taken in the same pass, while its cells are in cache: reading
    // them again at classification missed the cache for most rows, and
    // classification compares them, the merge stores them (whatever
    // changes a row's cells later clears them: `unavailable`).
    let keys: Vec<Option<(Key, u64)>> = rows
        .par_iter_mut()
        .with_min_len(4096)
        .map(|r| {
            if !r.delete && r.hashes.is_none() {
                r.hashes = Some(spec.hashes(&r.data));
            }
            spec.key_of(&r.data).map(|k| {
                let h = hash(&k);
                (k, h)
            })
        })
        .collect();
    // Each key's group, found by the key's hash: the table holds positions
    // in `p.keys`, so a key is stored once (no copy for a map), and both
    // are sized for the batch up front (no rehash while they grow).
    p.keys.reserve(rows.len());
    let mut at: hashbrown::HashTable<u32> = hashbrown::HashTable::with_capacity(rows.len());
    let mut dup_keys = 0u64;
    for (row, key) in rows.into_iter().zip(keys) {
        let Some((key, h)) = key else {
            p.stats.null_keys += 1;
            continue;
        };
        if row.delete && spec.delete_mode == DeleteMode::Ignore {
            p.stats.deletes_ignored += 1;
            continue;
        }
        let keys = &mut p.keys;
        match at.entry(h, |&i| keys[i as usize].0 == key, |&i| hash(&keys[i as usize].0)) {
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(keys.len() as u32);
                keys.push((key, vec![row]));
            }
            hashbrown::hash_table::Entry::Occupied(e) => {
                dup_keys += 1;
                keys[*e.get() as usize].1.push(row);
            }
        }
    }
    if spec.reject_duplicates && dup_keys > 0 {
        p.rejected = Some(format!(
            "reject_duplicates: {dup_keys} duplicate business key row(s) in the batch"
        ));
    }
    let all = spec.intra_batch_all && spec.strategy == Strategy::Scd2 && !spec.seq.is_empty();
    let removed: usize =
        p.keys.par_iter_mut().with_min_len(1024).map(|(_, group)| dedupe(spec, group, all)).sum();
    p.stats.duplicates += removed as u64;
    p
}

/// Orders a key's rows by (sequence, position) and keeps the winner, or
/// with `all` one row per distinct sequence value (the later position
/// winning ties). Returns how many rows it dropped.
fn dedupe(spec: &Spec, group: &mut Vec<InRow>, all: bool) -> usize {
    if group.len() == 1 {
        return 0;
    }
    // Ascending by (sequence, position): the last row is the winner.
    group.sort_by(|a, b| spec.cmp_seq(&a.data, &b.data).then(a.order.cmp(&b.order)));
    unavailable::carry(group);
    let before = group.len();
    if all {
        let mut kept: Vec<InRow> = Vec::with_capacity(group.len());
        for r in group.drain(..) {
            if let Some(last) = kept.last() {
                if spec.cmp_seq(&last.data, &r.data) == Ordering::Equal {
                    kept.pop();
                }
            }
            kept.push(r);
        }
        *group = kept;
    } else {
        let last = group.pop().expect("non-empty group");
        group.clear();
        group.push(last);
    }
    before - group.len()
}
