//! Step 2 of a run's merge: what each key needs from the table, decided
//! from the key index's summary alone. Most rows of a run are settled here
//! (older than stored, unchanged, a replay) or need only the summary, so a
//! run reads stored rows for few keys, and a replayed batch reads none.

use std::cmp::Ordering;

use super::{InRow, Need, Spec, Stats, Summary, ValidTime};
use crate::config::Strategy;

/// Decides from the key index alone what stored data a key's rows need.
/// Returns `None` when every row is settled without touching the table
/// (older than stored, exact replay, late delete).
pub fn classify(
    spec: &Spec,
    stored: Option<&Summary>,
    rows: &[InRow],
    stats: &mut Stats,
) -> Option<Need> {
    let need = classify_key(spec, stored, rows, stats)?;
    // scd2 rows leaving values unchanged (TOAST) take them from the version
    // valid at their sequence (`unavailable::fill`): a late row or a
    // deleted key's needs the closed versions' rows, not only their briefs.
    let toast = spec.strategy == Strategy::Scd2 && rows.iter().any(|r| !r.unavailable.is_empty());
    Some(match need {
        Need::History | Need::Reopen if toast => Need::HistoryRows,
        need => need,
    })
}

fn classify_key(
    spec: &Spec,
    stored: Option<&Summary>,
    rows: &[InRow],
    stats: &mut Stats,
) -> Option<Need> {
    // An already-applied row (replay --reapply) may only re-merge onto the
    // very version it produced: the first pass's batch boundaries decided
    // which intermediate versions and keys exist, and a reapply must not
    // second-guess them (docs/replay.md: the result equals a single pass).
    if rows.iter().all(|r| r.replayed) {
        let same = stored.is_some_and(|s| {
            !s.deleted
                && rows
                    .iter()
                    .any(|r| s.seq.with(|seq| spec.cmp_seq_to(&r.data, seq)) == Ordering::Equal)
        });
        if !same {
            stats.unchanged += rows.len() as u64;
            return None;
        }
    }
    let Some(s) = stored else {
        // New key (or hard-deleted): insert / ignore without stored rows.
        return Some(Need::Nothing);
    };
    if rows.len() > 1 {
        return Some(Need::History);
    }
    let row = &rows[0];
    let older =
        !spec.seq.is_empty() && s.seq.with(|seq| spec.cmp_seq_to(&row.data, seq)) == Ordering::Less;
    let business = spec.valid_time != ValidTime::Processing;
    match spec.strategy {
        Strategy::Scd1 => {
            if older {
                stats.older_ignored += 1;
                return None;
            }
            // A row with unchanged (unavailable) values is compared only
            // once the stored values are in: the stored row is needed.
            if !row.delete && !s.deleted && row.unavailable.is_empty() {
                match tracked_change(spec, row, s, stats) {
                    None => return None,
                    Some(true) => return Some(Need::Replace),
                    Some(false) => {}
                }
            }
            if row.delete && spec.delete_mode == crate::config::DeleteMode::Hard {
                // A newer hard delete of a stored key: removed without reading it.
                return Some(Need::Replace);
            }
            Some(Need::Current)
        }
        Strategy::Scd2 if business => Some(Need::History),
        Strategy::Scd2 => {
            if older {
                if row.delete {
                    stats.late_deletes_ignored += 1;
                    return None;
                }
                return Some(Need::History);
            }
            if s.deleted {
                // The key has no open version: a delete does nothing, a row reopens it.
                if row.delete {
                    stats.deletes_unknown += 1;
                    return None;
                }
                return Some(Need::Reopen);
            }
            if row.replayed {
                return Some(Need::Current);
            }
            if row.delete {
                return Some(Need::Close);
            }
            if !row.unavailable.is_empty() {
                return Some(Need::Current);
            }
            match tracked_change(spec, row, s, stats)? {
                true => Some(Need::Close),
                false => Some(Need::Current),
            }
        }
    }
}

/// A live row against the stored live version, by their hashes: None when
/// they are identical (counted as unchanged), else whether a tracked column
/// changed (false: only untracked columns differ, the stored row is needed).
fn tracked_change(spec: &Spec, row: &InRow, s: &Summary, stats: &mut Stats) -> Option<bool> {
    let (row_hash, tracked_hash) = row.hashes.unwrap_or_else(|| spec.hashes(&row.data));
    if row_hash == s.row_hash {
        stats.unchanged += 1;
        return None;
    }
    Some(tracked_hash != s.tracked_hash)
}
