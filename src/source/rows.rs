//! Decoded rows on their way into a batch: each row's values already in
//! its cells, in the order of its own layout, and the layouts kept apart,
//! once per run of rows that share one.
//!
//! Why: a batch's columns are known only once every row is decoded (the
//! union of their layouts). Collecting (fields, row) pairs first and
//! building the rows from them afterwards wrote every row twice, into two
//! lists: 200 of the 990 bytes a narrow Debezium message allocated as it
//! was decoded, all of it memory that a run after an idle spell (or a
//! restart) faults in. Here the row list is built once and becomes the
//! batch's; only rows whose layout differs from the batch's column order
//! are rearranged, where they lie.

use rustc_hash::FxHashMap;

use super::{in_order, place, RawBatch, RawRow};
use crate::decode::{layout_id, Fields, Layout, Name};

/// Rows as they are decoded, before their batch knows its columns.
#[derive(Debug, Default)]
pub struct DecodedRows {
    rows: Vec<RawRow>,
    /// Each run of rows with one layout; rows of a schema share one, so
    /// runs are few.
    runs: Vec<Run>,
}

/// Rows from `first` to the next run's first that share `layout` (None:
/// rows without fields).
#[derive(Debug)]
struct Run {
    first: usize,
    layout: Option<Layout>,
}

impl DecodedRows {
    pub fn with_capacity(rows: usize) -> DecodedRows {
        DecodedRows { rows: Vec::with_capacity(rows), runs: vec![] }
    }

    /// A row and its fields: the values become its cells as they are.
    pub fn push(&mut self, data: Fields, mut row: RawRow) {
        let same = match (self.runs.last().map(|r| &r.layout), data.layout()) {
            (Some(Some(last)), Some(l)) => std::sync::Arc::ptr_eq(last, l),
            (Some(None), None) => true,
            _ => false,
        };
        if !same {
            self.runs.push(Run { first: self.rows.len(), layout: data.layout().cloned() });
        }
        row.cells = data.into_values();
        self.rows.push(row);
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The batch: its columns are the union of the rows' field names, in
    /// order of first appearance; a row whose layout is not the first
    /// columns in that order gets its values moved into place (NULL where
    /// it has no such field). Rows are not padded to the batch's width
    /// ([`RawRow::cells`]).
    pub fn into_batch(self, source: String) -> RawBatch {
        let DecodedRows { mut rows, runs } = self;
        let mut columns: Vec<String> = vec![];
        let mut at: FxHashMap<Name, usize> = FxHashMap::default();
        // Each distinct layout mapped to column positions once, by address
        // (the runs hold their layouts, so no address is reused meanwhile).
        let mut mapped: FxHashMap<usize, usize> = FxHashMap::default();
        let mut maps: Vec<Vec<usize>> = vec![];
        let run_maps: Vec<usize> = runs
            .iter()
            .map(|Run { layout, .. }| {
                let names: &[Name] = layout.as_deref().unwrap_or(&[]);
                *mapped.entry(layout_id(layout.as_ref())).or_insert_with(|| {
                    maps.push(
                        names
                            .iter()
                            .map(|k| {
                                *at.entry(k.clone()).or_insert_with(|| {
                                    columns.push(k.to_string());
                                    columns.len() - 1
                                })
                            })
                            .collect(),
                    );
                    maps.len() - 1
                })
            })
            .collect();
        for (i, Run { first, .. }) in runs.iter().enumerate() {
            let map = &maps[run_maps[i]];
            if in_order(map) {
                continue;
            }
            let end = runs.get(i + 1).map_or(rows.len(), |next| next.first);
            for r in &mut rows[*first..end] {
                place(&mut r.cells, map);
            }
        }
        RawBatch { source, columns, rows, text: false, unparsable: vec![] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    fn fields(layout: &Layout, values: Vec<Value>) -> Fields {
        Fields::new(layout.clone(), values)
    }

    fn row(pos: u64) -> RawRow {
        RawRow::decoded(0, pos, "".into(), vec![], Default::default())
    }

    #[test]
    fn rows_of_other_layouts_get_the_union_of_columns_in_first_seen_order_and_no_padding() {
        let ab: Layout = vec![Name::from("a"), Name::from("b")].into();
        let ba: Layout = vec![Name::from("b"), Name::from("a")].into();
        let c: Layout = vec![Name::from("c")].into();
        let mut rows = DecodedRows::default();
        rows.push(fields(&ab, vec![Value::Int(1), Value::Int(2)]), row(1));
        rows.push(fields(&ab, vec![Value::Int(3), Value::Int(4)]), row(2));
        rows.push(fields(&ba, vec![Value::Int(6), Value::Int(5)]), row(3));
        rows.push(Fields::default(), row(4));
        rows.push(fields(&c, vec![Value::Int(7)]), row(5));
        rows.push(fields(&ab, vec![Value::Int(8), Value::Int(9)]), row(6));
        assert_eq!(rows.len(), 6);
        let batch = rows.into_batch("s".into());
        assert_eq!(batch.columns, vec!["a", "b", "c"]);
        let cells: Vec<Vec<Option<i64>>> = batch
            .rows
            .iter()
            .map(|r| {
                r.cells
                    .iter()
                    .map(|v| match v {
                        Value::Int(i) => Some(*i),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        assert_eq!(
            cells,
            // No row is padded to the batch's width: the columns past a
            // row's last cell are NULL.
            vec![
                vec![Some(1), Some(2)],
                vec![Some(3), Some(4)],
                vec![Some(5), Some(6)],
                vec![],
                vec![None, None, Some(7)],
                vec![Some(8), Some(9)],
            ]
        );
        assert_eq!(batch.rows.iter().map(|r| r.pos).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn rows_in_column_order_keep_their_values_where_they_are() {
        let ab: Layout = vec![Name::from("a"), Name::from("b")].into();
        let mut rows = DecodedRows::with_capacity(1);
        rows.push(fields(&ab, vec![Value::Int(1), Value::Null]), row(1));
        let batch = rows.into_batch("s".into());
        assert_eq!(batch.columns, vec!["a", "b"]);
        assert_eq!(batch.rows[0].cells.len(), 2);
        assert!(batch.rows[0].cells[0].same(&Value::Int(1)) && batch.rows[0].cells[1].is_null());
    }
}
