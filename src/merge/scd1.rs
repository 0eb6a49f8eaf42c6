//! scd1 (docs/scd1.md and its worked example): one row per key, updated in place.

use std::cmp::Ordering;

use super::{InRow, Key, KeyState, Output, RunCtx, Spec, Version};
use crate::config::DeleteMode;
use crate::value::{cell, set_cell};

fn row(data: Vec<super::Value>, exec: i64, deleted: bool) -> Version {
    Version {
        data,
        valid_from: None,
        valid_to: None,
        current: true,
        deleted,
        exec,
        sk: None,
        loc: None,
        brief: None,
    }
}

pub(super) fn apply_key(
    spec: &Spec,
    ctx: &RunCtx,
    key: Key,
    mut rows: Vec<InRow>,
    state: KeyState,
    out: &mut Output,
) {
    let r = rows.pop().expect("one row per key");
    if state.replace && r.delete && spec.delete_mode == DeleteMode::Hard {
        out.removes.push(key.clone());
        out.index.push((key, None));
        out.stats.deleted += 1;
        return;
    }
    if state.replace && !r.delete {
        // A newer row with changed tracked columns over a live row (classify
        // settled it from the key index): replace it, bump `_execution_id`.
        let v = row(r.data, ctx.exec, false);
        out.index.push((key.clone(), Some(spec.summary_hashed(&v, r.hashes))));
        out.upserts.push((key, v));
        out.stats.updated += 1;
        return;
    }
    let Some(cur) = state.current else {
        if r.delete {
            out.stats.deletes_unknown += 1;
        } else {
            let v = row(r.data, ctx.exec, false);
            out.index.push((key.clone(), Some(spec.summary_hashed(&v, r.hashes))));
            out.upserts.push((key, v));
            out.stats.inserted += 1;
        }
        return;
    };
    // docs/batch.md, ordering across runs: an older row is ignored, deletes included; a tie goes to the later batch.
    if !spec.seq.is_empty() && spec.cmp_seq(&r.data, &cur.data) == Ordering::Less {
        out.stats.older_ignored += 1;
        return;
    }
    let mut next = cur.clone();
    if r.delete {
        match spec.delete_mode {
            DeleteMode::Hard => {
                out.removes.push(key.clone());
                out.index.push((key, None));
                out.stats.deleted += 1;
                return;
            }
            DeleteMode::Ignore => return,
            DeleteMode::Soft => {
                // Keep the values, store the delete row's own sequence.
                for &i in &spec.seq {
                    set_cell(&mut next.data, i, cell(&r.data, i).clone());
                }
                if !cur.deleted {
                    next.deleted = true;
                    next.exec = ctx.exec;
                    out.stats.deleted += 1;
                } else if spec.all_equal(&cur.data, &next.data) {
                    out.stats.unchanged += 1;
                    return;
                } else {
                    out.stats.updated_in_place += 1;
                }
            }
        }
    } else if cur.deleted {
        // A soft-deleted key that comes back is active again, even with identical values.
        next.data = r.data;
        next.deleted = false;
        next.exec = ctx.exec;
        out.stats.revived += 1;
    } else if !spec.tracked_equal(&cur.data, &r.data) {
        next.data = r.data;
        next.exec = ctx.exec;
        out.stats.updated += 1;
    } else if !spec.all_equal(&cur.data, &r.data) {
        // Only sequence / ignored / untracked columns differ: in place, no bump.
        next.data = r.data;
        out.stats.updated_in_place += 1;
    } else {
        out.stats.unchanged += 1;
        return;
    }
    next.loc = None;
    out.index.push((key.clone(), Some(spec.summary(&next))));
    out.upserts.push((key, next));
}

/// docs/snapshot.md: a stored, live key missing from a snapshot batch.
pub(super) fn snapshot_delete(
    spec: &Spec,
    ctx: &RunCtx,
    key: Key,
    state: KeyState,
    out: &mut Output,
) {
    let Some(cur) = state.current else { return };
    if cur.deleted {
        return;
    }
    match spec.delete_mode {
        DeleteMode::Ignore => {}
        DeleteMode::Hard => {
            out.removes.push(key.clone());
            out.index.push((key, None));
            out.stats.snapshot_deleted += 1;
        }
        DeleteMode::Soft => {
            let mut next = cur;
            next.deleted = true;
            next.exec = ctx.exec;
            next.loc = None;
            out.index.push((key.clone(), Some(spec.summary(&next))));
            out.upserts.push((key, next));
            out.stats.snapshot_deleted += 1;
        }
    }
}
