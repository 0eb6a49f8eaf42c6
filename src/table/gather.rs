//! Rows of several batches gathered into one, when the batches hold
//! different columns.
//!
//! A data file holds only the columns with a value in its rows
//! (docs/schema.md, "What a data file holds"), so the rows a close or a
//! copy-on-write rewrite joins come from batches of different widths. The
//! obvious join pads every batch to the result's columns first, and that is
//! what one wide message made expensive: 25,000 narrow new versions built
//! in the 4,007 columns of the file they were joining were 814 MB of NULL
//! buffers. Here a batch lacking a column gives it as a one-row NULL array
//! and its rows point at that one row, so a missing column costs nothing
//! per row on that side.

use std::collections::HashMap;

use deltalake::arrow::array::{new_null_array, Array, ArrayRef, RecordBatch};
use deltalake::arrow::compute::interleave;
use deltalake::arrow::datatypes::Field;
use deltalake::arrow::error::ArrowError;

/// Batches to gather rows from, with where each holds its columns (see
/// [`super::convert::positions`]).
pub(super) struct Sources<'a> {
    batches: &'a [&'a RecordBatch],
    at: Vec<HashMap<&'a str, usize>>,
}

impl<'a> Sources<'a> {
    pub(super) fn new(batches: &'a [&'a RecordBatch]) -> Sources<'a> {
        let at = batches.iter().map(|b| super::convert::positions(b.schema_ref())).collect();
        Sources { batches, at }
    }

    /// Does batch `s` hold the column `name`?
    pub(super) fn holds(&self, s: usize, name: &str) -> bool {
        self.at[s].contains_key(name)
    }

    /// The column `field` for the rows `order` names ((batch, row) pairs),
    /// NULL in rows whose batch lacks it. The column's type must be the
    /// field's in every batch that holds it.
    pub(super) fn column(
        &self,
        field: &Field,
        order: &[(usize, usize)],
    ) -> Result<ArrayRef, ArrowError> {
        let name = field.name().as_str();
        let held: Vec<Option<usize>> = self.at.iter().map(|at| at.get(name).copied()).collect();
        let null = new_null_array(field.data_type(), 1);
        let arrays: Vec<&dyn Array> = (self.batches.iter().zip(&held))
            .map(|(b, i)| i.map_or(null.as_ref(), |i| b.column(i).as_ref()))
            .collect();
        if order.iter().all(|&(s, _)| held[s].is_some()) {
            return interleave(&arrays, order);
        }
        let order: Vec<(usize, usize)> =
            order.iter().map(|&(s, row)| (s, if held[s].is_some() { row } else { 0 })).collect();
        interleave(&arrays, &order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake::arrow::array::{Int64Array, StringArray};
    use deltalake::arrow::datatypes::{DataType, Schema};
    use std::sync::Arc;

    #[test]
    fn a_batch_lacking_a_column_gives_null_in_its_rows_and_the_others_their_values() {
        let a = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, true),
                Field::new("x", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec!["a1", "a2", "a3"])),
            ],
        )
        .unwrap();
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(vec![10, 20]))],
        )
        .unwrap();
        let batches = [&a, &b];
        let sources = Sources::new(&batches);
        let order = [(1, 1), (0, 2), (1, 0), (0, 0)];
        let id = sources.column(&Field::new("id", DataType::Int64, true), &order).unwrap();
        let id = id.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(id.iter().collect::<Vec<_>>(), [Some(20), Some(3), Some(10), Some(1)]);
        let x = sources.column(&Field::new("x", DataType::Utf8, true), &order).unwrap();
        let x = x.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(x.iter().collect::<Vec<_>>(), [None, Some("a3"), None, Some("a1")]);
        // Only rows of batches holding the column: gathered as they are.
        let x = sources.column(&Field::new("x", DataType::Utf8, true), &order[1..2]).unwrap();
        assert_eq!(x.len(), 1);
        assert!(x.is_valid(0));
        // Neither holds it: all NULL.
        let y = sources.column(&Field::new("y", DataType::Int64, true), &order).unwrap();
        assert_eq!((y.len(), y.null_count()), (4, 4));
        assert!(sources.holds(0, "x") && !sources.holds(1, "x"));
    }
}
