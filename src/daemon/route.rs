//! Messages into batches: each message goes to every table reading its
//! topic — unless that table already has it (docs/commit-protocol.md, where
//! a run starts; docs/replay.md, skipping versus reapplying) — as a row, a
//! counted tombstone or truncate (docs/events.md, tombstones and truncates),
//! or a dead letter (docs/bad-input.md).

use super::forward::{Payload, Received};
use super::slots::Slot;
use super::RunOpts;
use crate::decode::{store_envelope, Decoded};
use crate::source::{RawRow, Unparsable};
use crate::telemetry;

/// Hands one message to every table reading its topic. Returns the tables
/// that must apply a truncate now (after committing what came before it).
pub(super) fn route(slots: &mut [Slot], opts: &RunOpts, received: Received) -> Vec<usize> {
    let Received { topic, partition: p, offset: off, decoded, payload, at } = received;
    let topic = &*topic;
    let mut truncates = vec![];
    let targets: Vec<usize> =
        slots.iter().enumerate().filter(|(_, s)| s.topic == topic).map(|(i, _)| i).collect();
    // A message that does not decode is dead-lettered once, by the first table reading the topic.
    let owner = targets.first().copied();
    let mut owned = Some((decoded, payload));
    for (n, &i) in targets.iter().enumerate() {
        let s = &mut slots[i];
        let Some((d, _)) = owned.as_ref() else { break };
        let replayed = s.stored.get(&p).is_some_and(|&next| off < next);
        if replayed && !opts.reapply {
            continue; // already in this table
        }
        if s.runner.cfg.apply_truncates && matches!(d, Ok(Decoded::Truncate)) {
            // Committed on its own, right after the rows before it.
            s.truncates += 1;
            truncates.push(i);
            continue;
        }
        let b = &mut s.buf;
        if b.since.is_none() {
            b.since = Some(at);
            telemetry::pending(&s.runner.cfg.name, Some(at));
        }
        let next = b.next.entry(p).or_insert(off + 1);
        *next = (*next).max(off + 1);
        match d {
            Ok(Decoded::Row { .. }) => {
                // The last table reading the topic takes the decoded row; the others get copies.
                let row = if n + 1 == targets.len() { owned.take() } else { owned.clone() };
                let Some((Ok(Decoded::Row { mut data, env, declared }), Payload::Text(raw))) = row
                else {
                    unreachable!("checked: a decoded row, kept as text")
                };
                b.bytes += raw.len() + 64;
                store_envelope(&mut data, &env, &s.store_paths);
                let mut raw_row = RawRow::decoded(p, off as u64, raw, env, declared);
                raw_row.replayed = replayed;
                b.rows.push(data, raw_row);
            }
            Ok(Decoded::Tombstone) => {
                s.tombstones += 1;
                telemetry::dropped(&s.runner.cfg.name, "tombstone", topic, p, off);
            }
            Ok(Decoded::Truncate) => {
                s.truncates += 1;
                telemetry::dropped(&s.runner.cfg.name, "truncate", topic, p, off);
            }
            Err(_) if Some(i) != owner => {}
            Err(e) => {
                // Copied, not taken: the tables after this one still move
                // their offsets past the message.
                let raw = match &owned {
                    Some((_, Payload::Bytes(raw))) => raw.clone(),
                    _ => unreachable!("a message that did not decode keeps its bytes"),
                };
                let (error, reason) = (e.error.clone(), e.reason);
                b.bytes += raw.len();
                b.dead.push(Unparsable { partition: p, pos: off as u64, raw, error, reason });
            }
        }
    }
    truncates
}
