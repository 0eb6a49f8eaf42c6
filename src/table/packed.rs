//! A [`Summary`] as the key index keeps it, one per business key.
//!
//! Why its own shape: the index holds one summary per key for the life of
//! the process, so every byte is a megabyte per million keys. `Summary` is
//! 48 bytes, of which 7 are padding after its `deleted` flag; here the flag
//! is folded into the sequence's variant, and the sequences most tables
//! have (one integer or timestamp column, none, or a NULL) need no
//! allocation, so an index entry with its key is 64 bytes instead of 72
//! (docs/performance.md, "Memory").

use crate::merge::{Seq, Summary};
use crate::value::Value;

/// The sequence and the `deleted` flag, in one 16-byte enum.
#[derive(Debug, Clone, PartialEq)]
enum PackedSeq {
    Int(i64),
    Ts(i64),
    /// No `sequence_by` (an empty sequence).
    Empty,
    /// A single NULL sequence value.
    Null,
    Other(Box<Box<[Value]>>),
    DeletedInt(i64),
    DeletedTs(i64),
    DeletedEmpty,
    DeletedNull,
    DeletedOther(Box<Box<[Value]>>),
}

const _: () = assert!(std::mem::size_of::<PackedSeq>() == 16);

/// A key's [`Summary`], packed (see the module comment).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PackedSummary {
    seq: PackedSeq,
    valid_from: i64,
    row_hash: u64,
    tracked_hash: u64,
}

const _: () = assert!(std::mem::size_of::<PackedSummary>() == 40);

impl PackedSummary {
    pub(super) fn new(s: Summary) -> PackedSummary {
        let Summary { seq, deleted, valid_from, row_hash, tracked_hash } = s;
        let seq = match (seq, deleted) {
            (Seq::Int(v), false) => PackedSeq::Int(v),
            (Seq::Int(v), true) => PackedSeq::DeletedInt(v),
            (Seq::Ts(v), false) => PackedSeq::Ts(v),
            (Seq::Ts(v), true) => PackedSeq::DeletedTs(v),
            (Seq::Other(v), d) if v.is_empty() => {
                if d {
                    PackedSeq::DeletedEmpty
                } else {
                    PackedSeq::Empty
                }
            }
            (Seq::Other(v), d) if matches!(v[..], [Value::Null]) => {
                if d {
                    PackedSeq::DeletedNull
                } else {
                    PackedSeq::Null
                }
            }
            (Seq::Other(v), false) => PackedSeq::Other(v),
            (Seq::Other(v), true) => PackedSeq::DeletedOther(v),
        };
        PackedSummary { seq, valid_from, row_hash, tracked_hash }
    }

    /// The summary as the merge reads it.
    pub(super) fn unpack(&self) -> Summary {
        Summary {
            seq: self.seq(),
            deleted: self.deleted(),
            valid_from: self.valid_from,
            row_hash: self.row_hash,
            tracked_hash: self.tracked_hash,
        }
    }

    /// scd1: the row is soft-deleted; scd2: the latest version is a closed, deleted one.
    pub(super) fn deleted(&self) -> bool {
        use PackedSeq::*;
        matches!(
            self.seq,
            DeletedInt(_) | DeletedTs(_) | DeletedEmpty | DeletedNull | DeletedOther(_)
        )
    }

    /// The latest version's sequence.
    pub(super) fn seq(&self) -> Seq {
        use PackedSeq::*;
        match &self.seq {
            Int(v) | DeletedInt(v) => Seq::Int(*v),
            Ts(v) | DeletedTs(v) => Seq::Ts(*v),
            Empty | DeletedEmpty => Seq::Other(Box::default()),
            Null | DeletedNull => Seq::Other(Box::new(Box::new([Value::Null]))),
            Other(v) | DeletedOther(v) => Seq::Other(v.clone()),
        }
    }

    /// Runs `f` over the sequence as values, without allocating.
    pub(super) fn seq_with<R>(&self, f: impl FnOnce(&[Value]) -> R) -> R {
        use PackedSeq::*;
        match &self.seq {
            Int(v) | DeletedInt(v) => f(&[Value::Int(*v)]),
            Ts(v) | DeletedTs(v) => f(&[Value::Ts(*v)]),
            Empty | DeletedEmpty => f(&[]),
            Null | DeletedNull => f(&[Value::Null]),
            Other(v) | DeletedOther(v) => f(v),
        }
    }

    pub(super) fn valid_from(&self) -> i64 {
        self.valid_from
    }

    pub(super) fn row_hash(&self) -> u64 {
        self.row_hash
    }

    pub(super) fn tracked_hash(&self) -> u64 {
        self.tracked_hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_summary_unpacks_to_the_summary_it_was_made_from() {
        let seqs = [
            Seq::Int(-3),
            Seq::Ts(1_700_000_000_000_000),
            Seq::Other(Box::default()),
            Seq::Other(Box::new(Box::new([Value::Null]))),
            Seq::Other(Box::new(Box::new([Value::Int(1), Value::Str("b".into())]))),
        ];
        for seq in seqs {
            for deleted in [false, true] {
                let s = Summary {
                    seq: seq.clone(),
                    deleted,
                    valid_from: 11,
                    row_hash: 22,
                    tracked_hash: 33,
                };
                let p = PackedSummary::new(s.clone());
                assert_eq!(p.unpack(), s);
                assert_eq!(p.deleted(), deleted);
                let direct = p.seq_with(|v| v.to_vec());
                assert_eq!(seq.with(|v| v.to_vec()).len(), direct.len());
                assert!(seq.with(|v| v.iter().zip(&direct).all(|(a, b)| a.same(b))));
            }
        }
    }
}
