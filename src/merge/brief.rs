//! A key's closed scd2 versions in brief (docs/scd2.md, "Late rows without
//! reading history").
//!
//! A late row is compared with the version that was valid at its sequence:
//! only that version's sequence, run (`_execution_id`) and tracked columns
//! matter, never its other values. So what a late row needs of a key's
//! history fits in a few bytes per closed version — sequence, run and the
//! tracked-column hash of [`Spec::hashes`] — and merge-on-read tables carry
//! it with the key's current row (in its row companion, `table/rowstore/`).
//! A late row then reads only its own key's current row, where it used to
//! scan every history file whose bloom filter might hold the key.
//!
//! A brief is either known whole or not used: one that would list more than
//! [`MAX_CLOSED`] versions, was written under other tracking rules, or cannot
//! be decoded is "unknown", and the key's history is read as before.

use std::cmp::Ordering;

use super::{version_order, Spec, Version};
use crate::value::{DType, Value};

/// Versions one brief lists at most: a key changed more often than this
/// falls back to reading its history (its current row's companion record
/// would otherwise grow with every change).
pub const MAX_CLOSED: usize = 64;

/// Format of the encoded brief, and of the tracked hashes it holds
/// ([`Spec::hashes`]); a change makes older briefs unknown (2: one hash
/// over the whole encoded row).
const FORMAT: u8 = 2;

/// One closed version in brief.
#[derive(Debug, Clone, PartialEq)]
pub struct Closed {
    /// Its sequence-column values.
    pub seq: Vec<Value>,
    /// The run that wrote it (`_execution_id`).
    pub exec: i64,
    /// [`Spec::tracked_hash`] of its data.
    pub tracked: u64,
}

impl Closed {
    /// The brief of a version.
    pub fn of(spec: &Spec, v: &Version) -> Closed {
        Closed { seq: spec.seq_values(&v.data), exec: v.exec, tracked: spec.tracked_hash(&v.data) }
    }
}

/// An open version's brief as stored, and the run that wrote the version:
/// what a close ([`super::Need::Close`]) extends without decoding it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub bytes: Box<[u8]>,
    pub exec: i64,
}

/// What a brief is valid for: the tracking rules its hashes were made
/// under. A column moving in or out of the tracked set changes it; a column
/// added to the table does not when it is tracked (stored rows hold NULL
/// there, which the hash leaves out).
pub fn fingerprint(spec: &Spec) -> u64 {
    let mut b = vec![FORMAT];
    for (i, n) in spec.names.iter().enumerate() {
        if !spec.tracked.get(i).copied().unwrap_or(true) {
            b.extend_from_slice(n.as_bytes());
            b.push(0);
        }
    }
    xxhash_rust::xxh3::xxh3_64(&b)
}

/// Encodes a brief; None when it lists more than [`MAX_CLOSED`] versions.
/// Layout: format byte, fingerprint (8), count (2), then per version the
/// sequence's encoded length (2) and bytes ([`Value::encode`]), run (8) and
/// tracked hash (8), big-endian.
pub fn encode(list: &[Closed], fingerprint: u64) -> Option<Vec<u8>> {
    if list.len() > MAX_CLOSED {
        return None;
    }
    let mut out = Vec::with_capacity(11 + list.len() * 28);
    out.push(FORMAT);
    out.extend_from_slice(&fingerprint.to_be_bytes());
    out.extend_from_slice(&(list.len() as u16).to_be_bytes());
    for c in list {
        push_entry(&mut out, c)?;
    }
    Some(out)
}

/// Appends one version's entry; None when its sequence is too long to encode.
fn push_entry(out: &mut Vec<u8>, c: &Closed) -> Option<()> {
    let len_at = out.len();
    out.extend_from_slice(&[0, 0]);
    c.seq.iter().for_each(|v| v.encode(out));
    let len = u16::try_from(out.len() - len_at - 2).ok()?;
    out[len_at..len_at + 2].copy_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&c.exec.to_be_bytes());
    out.extend_from_slice(&c.tracked.to_be_bytes());
    Some(())
}

/// A stored brief with one more closed version appended, without decoding
/// the others; None when it was written under other rules, is malformed,
/// or would list more than [`MAX_CLOSED`] versions.
pub fn append(stored: &[u8], closed: &Closed, fingerprint: u64) -> Option<Vec<u8>> {
    let head = stored.get(..11)?;
    if head[0] != FORMAT || head[1..9] != fingerprint.to_be_bytes() {
        return None;
    }
    let n = u16::from_be_bytes([head[9], head[10]]) as usize;
    if n >= MAX_CLOSED {
        return None;
    }
    let mut out = Vec::with_capacity(stored.len() + 28);
    out.extend_from_slice(&stored[..9]);
    out.extend_from_slice(&((n + 1) as u16).to_be_bytes());
    out.extend_from_slice(&stored[11..]);
    push_entry(&mut out, closed)?;
    Some(out)
}

/// Decodes a brief written under `fingerprint`, its sequence values
/// converted to the sequence columns' current `types`; None when it was
/// written under other rules or is malformed.
pub fn decode(mut b: &[u8], fingerprint: u64, types: &[DType]) -> Option<Vec<Closed>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = b.split_at_checked(n)?;
        *b = rest;
        Some(head)
    }
    let be8 = |s: &[u8]| <[u8; 8]>::try_from(s).ok();
    if take(&mut b, 1)? != [FORMAT] || u64::from_be_bytes(be8(take(&mut b, 8)?)?) != fingerprint {
        return None;
    }
    let n = u16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?) as usize;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = u16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?) as usize;
        let seq = Value::decode_all(take(&mut b, len)?)?;
        if seq.len() != types.len() {
            return None;
        }
        let seq: Option<Vec<Value>> =
            seq.into_iter().zip(types).map(|(v, t)| v.convert(*t).ok()).collect();
        let exec = i64::from_be_bytes(be8(take(&mut b, 8)?)?);
        let tracked = u64::from_be_bytes(be8(take(&mut b, 8)?)?);
        out.push(Closed { seq: seq?, exec, tracked });
    }
    b.is_empty().then_some(out)
}

/// Is `row` (a late row, with its tracked hash) the same, in the tracked
/// columns, as the version valid at its sequence — the greatest (sequence,
/// run) at or below it among the brief's versions and the open one `cur`?
/// The same question `scd2::KeyRun::valid_at` answers from whole versions.
pub fn valid_at_is_equal(
    spec: &Spec,
    list: &[Closed],
    cur: Option<&Version>,
    row: &[Value],
    row_tracked: u64,
) -> bool {
    let at_or_below = |seq: &[Value]| spec.cmp_seq_to(row, seq) != Ordering::Less;
    let best = list
        .iter()
        .filter(|c| at_or_below(&c.seq))
        .max_by(|a, b| version_order(crate::value::cmp_slices(&a.seq, &b.seq), a.exec, b.exec));
    let cur = cur.filter(|c| spec.cmp_seq(&c.data, row) != Ordering::Greater);
    match (best, cur) {
        (None, None) => false,
        (Some(b), None) => b.tracked == row_tracked,
        (None, Some(c)) => spec.tracked_equal(&c.data, row),
        (Some(b), Some(c)) => {
            let order = version_order(spec.cmp_seq_to(&c.data, &b.seq), c.exec, b.exec);
            if order == Ordering::Less {
                b.tracked == row_tracked
            } else {
                spec.tracked_equal(&c.data, row)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(seq: i64, exec: i64, tracked: u64) -> Closed {
        Closed { seq: vec![Value::Int(seq)], exec, tracked }
    }

    #[test]
    fn a_brief_reads_back_as_written_and_only_under_its_fingerprint() {
        let list = vec![closed(3, 1, 7), closed(-5, 2, u64::MAX), closed(9, 9, 0)];
        let b = encode(&list, 42).unwrap();
        assert_eq!(decode(&b, 42, &[DType::Int]), Some(list.clone()));
        assert_eq!(decode(&b, 43, &[DType::Int]), None, "other tracking rules");
        assert_eq!(decode(&b[..b.len() - 1], 42, &[DType::Int]), None, "truncated");
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(decode(&longer, 42, &[DType::Int]), None, "trailing bytes");
        assert_eq!(decode(&b, 42, &[DType::Int, DType::Int]), None, "other sequence columns");
        assert_eq!(decode(&encode(&[], 42).unwrap(), 42, &[DType::Int]), Some(vec![]));
    }

    #[test]
    fn appending_to_a_stored_brief_equals_encoding_the_longer_list() {
        let list = vec![closed(3, 1, 7), closed(4, 2, 8)];
        let more = closed(9, 3, 9);
        let stored = encode(&list, 42).unwrap();
        let mut longer = list.clone();
        longer.push(more.clone());
        assert_eq!(append(&stored, &more, 42), encode(&longer, 42));
        assert_eq!(
            append(&encode(&[], 42).unwrap(), &more, 42),
            encode(std::slice::from_ref(&more), 42)
        );
        assert_eq!(append(&stored, &more, 41), None, "other tracking rules");
        assert_eq!(append(&stored[..5], &more, 42), None, "malformed");
        let full: Vec<Closed> = (0..MAX_CLOSED as i64).map(|i| closed(i, 1, 1)).collect();
        assert_eq!(append(&encode(&full, 42).unwrap(), &more, 42), None, "over the limit");
    }

    #[test]
    fn a_brief_longer_than_the_limit_is_not_written() {
        let list: Vec<Closed> = (0..=MAX_CLOSED as i64).map(|i| closed(i, 1, 1)).collect();
        assert!(encode(&list, 1).is_none());
        assert!(encode(&list[..MAX_CLOSED], 1).is_some());
    }

    #[test]
    fn sequences_are_read_in_the_sequence_columns_current_types() {
        let b = encode(&[closed(12, 1, 1)], 5).unwrap();
        let got = decode(&b, 5, &[DType::Decimal { precision: 20, scale: 2 }]).unwrap();
        assert_eq!(
            got[0].seq,
            vec![Value::Int(12).convert(DType::Decimal { precision: 20, scale: 2 }).unwrap()]
        );
    }
}
