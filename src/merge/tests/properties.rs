//! Properties over random batches: replaying any batch changes nothing
//! (docs/batch.md, replaying a batch is a no-op), and an scd1 table without
//! deletes does not depend on where the stream is cut into batches
//! (docs/scd1.md).

use super::*;
use crate::config::Strategy;
use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest, Strategy as PStrategy};

fn arb_row() -> impl PStrategy<Value = (i64, u8, i64, bool)> {
    (0i64..6, 0u8..3, 0i64..5, any::<bool>())
}

fn to_row((id, c, seq, d): (i64, u8, i64, bool)) -> InRow {
    if d {
        del(id, seq)
    } else {
        up(id, ["x", "y", ""][c as usize], seq)
    }
}

proptest! {
    #[test]
    fn replaying_any_batch_twice_leaves_the_table_unchanged(
        batches in proptest::collection::vec(proptest::collection::vec(arb_row(), 0..8), 1..5),
        scd2 in any::<bool>(), hard in any::<bool>()
    ) {
        let strategy = if scd2 { Strategy::Scd2 } else { Strategy::Scd1 };
        let mut t = table(strategy, |s| if hard && !scd2 { s.delete_mode = DeleteMode::Hard });
        for b in &batches {
            t.run(b.iter().cloned().map(to_row).collect());
            let before = t.rows();
            let out = t.run(b.iter().cloned().map(to_row).collect());
            prop_assert!(!out.has_changes(), "replay changed the table: {:?}", out.stats);
            prop_assert_eq!(t.rows(), before);
        }
    }

    #[test]
    fn scd1_without_deletes_does_not_depend_on_batch_cuts(
        stream in proptest::collection::vec((0i64..6, 0u8..3, 0i64..5), 1..30),
        cuts in proptest::collection::vec(1usize..30, 0..6)
    ) {
        // Distinct sequences per key make the stream's outcome well defined.
        let mut seen = std::collections::HashSet::new();
        let stream: Vec<_> = stream.into_iter().filter(|(id, _, seq)| seen.insert((*id, *seq))).collect();
        let rows = |s: &[(i64, u8, i64)]| s.iter().map(|&(id, c, seq)| up(id, ["x", "y", ""][c as usize], seq)).collect::<Vec<_>>();
        let mut whole = table(Strategy::Scd1, |_| {});
        whole.run(rows(&stream));
        let mut cut = table(Strategy::Scd1, |_| {});
        let mut bounds: Vec<usize> = cuts.into_iter().filter(|c| *c < stream.len()).collect();
        bounds.sort();
        bounds.dedup();
        let mut start = 0;
        for b in bounds.into_iter().chain([stream.len()]) {
            cut.run(rows(&stream[start..b]));
            start = b;
        }
        let strip = |t: &MemTable| t.rows().into_iter().map(|v| (v.data, v.deleted)).collect::<Vec<_>>();
        prop_assert_eq!(strip(&whole), strip(&cut));
    }
}
