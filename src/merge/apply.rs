//! Applying the rules to a run's keys: on all cores, in key order (see
//! [`apply`]); the rules themselves are in `scd1.rs` and `scd2.rs`.

use super::{scd1, scd2, unavailable};
use super::{InRow, Key, KeyMap, KeyState, Need, Output, RunCtx, Spec};
use crate::config::Strategy;

/// Applies the strategy to every prepared key. `states` holds the stored
/// versions the table loaded for the keys [`classify`] asked about;
/// `absent` lists stored live keys missing from a snapshot batch.
///
/// Each key comes with its [`Need`]; keys needing nothing stored (new keys,
/// scd1 replacements settled from the index) may be absent from `states`.
/// `closing` holds the states of the keys whose need is [`Need::Close`],
/// in their order (no map: they are most keys of an scd2 run).
pub fn apply(
    spec: &Spec,
    ctx: RunCtx,
    keys: Vec<(Key, Vec<InRow>, Need)>,
    mut states: KeyMap<KeyState>,
    closing: Vec<KeyState>,
    absent: Vec<Key>,
) -> Output {
    // Keys are independent: runs of keys are merged on all cores, each key
    // with its own stored state (taken from `states` once, here), and the
    // outputs joined in key order (the same output, rejection included, as
    // one pass in order).
    let mut closing = closing.into_iter();
    let keyed: Vec<Keyed> = keys
        .into_iter()
        .map(|(k, rows, need)| {
            let state = match need {
                Need::Close => closing.next().or_else(|| states.remove(&k)),
                // A reopened key's state holds its brief, when the table kept it.
                Need::Current | Need::History | Need::HistoryRows | Need::Reopen => {
                    states.remove(&k)
                }
                _ => None,
            };
            (k, rows, need, state.map(Box::new))
        })
        .collect();
    let chunks = crate::par::split(keyed, 8);
    let mut out = join(crate::par::par_map(chunks, |c| apply_keys(spec, &ctx, c)));
    if out.rejected.is_some() {
        return out;
    }
    if spec.snapshot {
        for key in absent {
            let state = states.remove(&key).unwrap_or_default();
            match spec.strategy {
                Strategy::Scd1 => scd1::snapshot_delete(spec, &ctx, key, state, &mut out),
                Strategy::Scd2 => scd2::snapshot_delete(spec, &ctx, key, state, &mut out),
            }
        }
    }
    out
}

/// The outputs of consecutive runs of keys as one, in order, up to the
/// first rejection. Each list is sized once: grown by doubling, the joined
/// upserts were copied and faulted in again at every step.
fn join(mut parts: Vec<Output>) -> Output {
    let upto = parts.iter().position(|p| p.rejected.is_some()).map_or(parts.len(), |i| i + 1);
    parts.truncate(upto);
    let total = |len: fn(&Output) -> usize| parts.iter().map(len).sum::<usize>();
    let mut out = Output::default();
    out.upserts.reserve_exact(total(|p| p.upserts.len()));
    out.removes.reserve_exact(total(|p| p.removes.len()));
    out.history_appends.reserve_exact(total(|p| p.history_appends.len()));
    out.history_replacements.reserve_exact(total(|p| p.history_replacements.len()));
    out.closes.reserve_exact(total(|p| p.closes.len()));
    out.index.reserve_exact(total(|p| p.index.len()));
    out.deleted_briefs.reserve_exact(total(|p| p.deleted_briefs.len()));
    for part in parts {
        out.upserts.extend(part.upserts);
        out.removes.extend(part.removes);
        out.history_appends.extend(part.history_appends);
        out.history_replacements.extend(part.history_replacements);
        out.closes.extend(part.closes);
        out.index.extend(part.index);
        out.deleted_briefs.extend(part.deleted_briefs);
        out.stats.add(&part.stats);
        out.rejected = part.rejected;
    }
    out
}

/// A key to apply: its rows, what it needed and its stored state (when
/// its need asked for one and the table had it). The state is boxed: most
/// keys of a batch have none, and inline its 352 bytes made the batch's
/// list of keys 40 MB at 100,000 keys, written, copied into runs and freed
/// in every merge (docs/performance.md, "Text cells inline").
type Keyed = (Key, Vec<InRow>, Need, Option<Box<KeyState>>);

/// Applies the strategy to a run of keys, in order; stops at a rejection.
fn apply_keys(spec: &Spec, ctx: &RunCtx, keys: Vec<Keyed>) -> Output {
    let ctx = *ctx;
    let mut out = Output::default();
    for (key, mut rows, need, state) in keys {
        let state = state.map_or_else(
            || KeyState {
                replace: need == Need::Replace,
                // A new key has no closed versions.
                brief: (need == Need::Nothing && ctx.briefs.is_some()).then(Vec::new),
                ..Default::default()
            },
            |s| *s,
        );
        unavailable::fill(spec, &mut rows, &state, &mut out.stats);
        match spec.strategy {
            Strategy::Scd1 => scd1::apply_key(spec, &ctx, key, rows, state, &mut out),
            Strategy::Scd2 => scd2::apply_key(spec, &ctx, key, rows, state, &mut out),
        }
        if out.rejected.is_some() {
            return out;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's output holding one key-index entry, rejected or not.
    fn part(key: u8, rejected: bool) -> Output {
        let mut out = Output::default();
        out.index.push((vec![key].into_boxed_slice(), None));
        out.stats.rows_in = 1;
        out.rejected = rejected.then(|| format!("run {key}"));
        out
    }

    #[test]
    fn join_keeps_run_order_and_stops_after_the_first_rejection() {
        let out = join(vec![part(1, false), part(2, false), part(3, true), part(4, true)]);
        let keys: Vec<u8> = out.index.iter().map(|(k, _)| k[0]).collect();
        assert_eq!(keys, [1, 2, 3]);
        assert_eq!(out.rejected.as_deref(), Some("run 3"));
        assert_eq!(out.stats.rows_in, 3);
        let all = join(vec![part(1, false), part(2, false)]);
        assert_eq!(all.index.len(), 2);
        assert!(all.rejected.is_none());
    }
}
