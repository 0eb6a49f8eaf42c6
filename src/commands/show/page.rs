//! One page of `show`: the smallest business keys after the last one
//! printed, and where their rows live.
//!
//! `show` prints a table ordered by key without sorting it in memory: each
//! page is a pass over the key columns of the files that may hold keys
//! after the previous page, keeping only the `cap` smallest keys seen
//! (docs/cli.md, `show`). Memory follows the page, not the table.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use changelake::value::{cmp_slices, Value};

/// A business key ordered as `show` prints keys (NULL lowest, numbers by
/// value, text by code point).
#[derive(Debug, Clone)]
pub struct SortKey(pub Vec<Value>);

impl Ord for SortKey {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_slices(&self.0, &other.0)
    }
}
impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for SortKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for SortKey {}

/// A stored row: data file and physical row in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowAt {
    pub file: u32,
    pub row: u32,
}

/// The `cap` smallest keys offered so far, each with all its rows (every
/// version of a key lands on the same page).
pub struct Page {
    cap: usize,
    keys: BTreeMap<SortKey, Vec<RowAt>>,
}

impl Page {
    pub fn new(cap: usize) -> Page {
        Page { cap: cap.max(1), keys: BTreeMap::new() }
    }

    pub fn is_full(&self) -> bool {
        self.keys.len() >= self.cap
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The largest key kept, once the page is full: nothing above it can
    /// join the page any more.
    pub fn bound(&self) -> Option<&[Value]> {
        self.is_full().then(|| self.keys.last_key_value().map(|(k, _)| k.0.as_slice())).flatten()
    }

    /// Offers a row of `key`; returns whether the page kept it.
    pub fn offer(&mut self, key: &[Value], at: RowAt) -> bool {
        if self.bound().is_some_and(|b| cmp_slices(key, b).is_gt()) {
            return false;
        }
        let k = SortKey(key.to_vec());
        self.keys.entry(k).or_default().push(at);
        if self.keys.len() > self.cap {
            self.keys.pop_last();
        }
        true
    }

    /// The rows to read, per file, each list sorted.
    pub fn rows_by_file(&self) -> BTreeMap<u32, Vec<u32>> {
        let mut out: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for at in self.keys.values().flatten() {
            out.entry(at.file).or_default().push(at.row);
        }
        for rows in out.values_mut() {
            rows.sort_unstable();
            rows.dedup();
        }
        out
    }

    /// Keys in order, with their rows.
    pub fn into_keys(self) -> impl Iterator<Item = (SortKey, Vec<RowAt>)> {
        self.keys.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(file: u32, row: u32) -> RowAt {
        RowAt { file, row }
    }

    #[test]
    fn a_page_keeps_the_smallest_keys_with_all_their_rows_whatever_the_order_offered() {
        let mut p = Page::new(2);
        for (k, a) in [(5, at(0, 0)), (3, at(1, 0)), (9, at(0, 1)), (3, at(2, 7)), (1, at(1, 1))] {
            p.offer(&[Value::Int(k)], a);
        }
        assert!(p.is_full());
        assert_eq!(p.bound(), Some(&[Value::Int(3)][..]));
        assert!(!p.offer(&[Value::Int(4)], at(3, 0)), "above the bound of a full page");
        assert!(p.offer(&[Value::Int(3)], at(3, 1)), "another version of a kept key");
        let rows = p.rows_by_file();
        assert_eq!(rows, BTreeMap::from([(1, vec![0, 1]), (2, vec![7]), (3, vec![1])]));
        let keys: Vec<(i64, usize)> = p
            .into_keys()
            .map(|(k, rows)| match k.0[..] {
                [Value::Int(i)] => (i, rows.len()),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(keys, vec![(1, 1), (3, 3)]);
    }

    #[test]
    fn keys_order_nulls_first_then_by_value_and_composite_keys_column_by_column() {
        let mut p = Page::new(10);
        let s = |x: &str| Value::Str(x.into());
        for k in [
            vec![s("b"), Value::Int(2)],
            vec![s("a"), Value::Int(10)],
            vec![Value::Null, Value::Int(1)],
            vec![s("a"), Value::Int(9)],
        ] {
            p.offer(&k, at(0, 0));
        }
        let got: Vec<Vec<Value>> = p.into_keys().map(|(k, _)| k.0).collect();
        assert_eq!(
            got,
            vec![
                vec![Value::Null, Value::Int(1)],
                vec![s("a"), Value::Int(9)],
                vec![s("a"), Value::Int(10)],
                vec![s("b"), Value::Int(2)],
            ]
        );
    }
}
