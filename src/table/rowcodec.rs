//! The record codec of row companions (`rowstore/`): one table row as one
//! run of bytes, decoded back into Arrow columns for any chosen rows.
//!
//! Arrow's own row format (`arrow::row`) was measured first and rejected
//! here: it is built for sorting, pads text to blocks and spends a byte on
//! every value, so a `crm` row took 520 bytes, eight times its share of the
//! ZSTD parquet file, and writing it cost a third of an scd2 run's encode
//! phase. This codec stores what the values are and nothing else:
//!
//! - a null bitmap, one bit per column (set: NULL), `ceil(columns / 8)` bytes;
//! - then each non-NULL value in column order: booleans one byte; 64-bit
//!   integers, floats and timestamps eight bytes, dates four, decimals
//!   sixteen (little-endian); text and binary a LEB128 length and the bytes.
//!
//! It covers exactly the Arrow types a table's columns map to
//! (`convert::arrow_type`); a schema with any other type gets no companion.

use std::sync::Arc;

use deltalake::arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, BooleanArray, BooleanBuilder, Date32Array,
    Date32Builder, Decimal128Array, Decimal128Builder, Float64Array, Float64Builder, Int64Array,
    Int64Builder, RecordBatch, StringArray, StringBuilder, TimestampMicrosecondArray,
    TimestampMicrosecondBuilder,
};
use deltalake::arrow::datatypes::{DataType, Schema, TimeUnit};

/// A column's values as the codec reads them.
enum Col<'a> {
    Bool(&'a BooleanArray),
    I64(&'a Int64Array),
    F64(&'a Float64Array),
    Ts(&'a TimestampMicrosecondArray),
    Date(&'a Date32Array),
    Dec(&'a Decimal128Array),
    Str(&'a StringArray),
    Bin(&'a BinaryArray),
}

/// Why a schema or a record cannot go through the codec.
#[derive(Debug, thiserror::Error)]
pub(super) enum CodecError {
    #[error("column {0}: type {1} has no row encoding")]
    Type(String, DataType),
    #[error("record {0} is malformed")]
    Malformed(usize),
}

/// Can rows of this schema be encoded?
pub(super) fn supports(schema: &Schema) -> Result<(), CodecError> {
    for f in schema.fields() {
        let ok = matches!(
            f.data_type(),
            DataType::Boolean
                | DataType::Int64
                | DataType::Float64
                | DataType::Date32
                | DataType::Decimal128(_, _)
                | DataType::Utf8
                | DataType::Binary
                | DataType::Timestamp(TimeUnit::Microsecond, _)
        );
        if !ok {
            return Err(CodecError::Type(f.name().clone(), f.data_type().clone()));
        }
    }
    Ok(())
}

fn columns(batch: &RecordBatch) -> Result<Vec<Col<'_>>, CodecError> {
    supports(&batch.schema())?;
    Ok(batch
        .columns()
        .iter()
        .map(|c| {
            let a = c.as_any();
            match c.data_type() {
                DataType::Boolean => Col::Bool(a.downcast_ref().expect("boolean")),
                DataType::Int64 => Col::I64(a.downcast_ref().expect("int64")),
                DataType::Float64 => Col::F64(a.downcast_ref().expect("float64")),
                DataType::Date32 => Col::Date(a.downcast_ref().expect("date32")),
                DataType::Decimal128(_, _) => Col::Dec(a.downcast_ref().expect("decimal128")),
                DataType::Utf8 => Col::Str(a.downcast_ref().expect("utf8")),
                DataType::Binary => Col::Bin(a.downcast_ref().expect("binary")),
                _ => Col::Ts(a.downcast_ref().expect("timestamp(us)")),
            }
        })
        .collect())
}

fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Every row of a batch, back to back into `out`, each followed by what
/// `seal` appends given the bytes from the record's start (a checksum);
/// returns where each sealed record ends.
pub(super) fn encode(
    batch: &RecordBatch,
    out: &mut Vec<u8>,
    mut seal: impl FnMut(&mut Vec<u8>, usize),
) -> Result<Vec<u64>, CodecError> {
    let cols = columns(batch)?;
    let bitmap = cols.len().div_ceil(8);
    let mut ends = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let nulls_at = out.len();
        out.resize(nulls_at + bitmap, 0);
        for (i, c) in cols.iter().enumerate() {
            macro_rules! fixed {
                ($a:expr) => {
                    if $a.is_null(row) {
                        out[nulls_at + i / 8] |= 1 << (i % 8);
                    } else {
                        out.extend_from_slice(&$a.value(row).to_le_bytes());
                    }
                };
            }
            macro_rules! bytes {
                ($a:expr) => {
                    if $a.is_null(row) {
                        out[nulls_at + i / 8] |= 1 << (i % 8);
                    } else {
                        let v: &[u8] = $a.value(row).as_ref();
                        put_len(out, v.len());
                        out.extend_from_slice(v);
                    }
                };
            }
            match c {
                Col::Bool(a) => {
                    if a.is_null(row) {
                        out[nulls_at + i / 8] |= 1 << (i % 8);
                    } else {
                        out.push(a.value(row) as u8);
                    }
                }
                Col::I64(a) => fixed!(a),
                Col::F64(a) => fixed!(a),
                Col::Ts(a) => fixed!(a),
                Col::Date(a) => fixed!(a),
                Col::Dec(a) => fixed!(a),
                Col::Str(a) => bytes!(a),
                Col::Bin(a) => bytes!(a),
            }
        }
        seal(out, nulls_at);
        ends.push(out.len() as u64);
    }
    Ok(ends)
}

/// A column being rebuilt from records.
enum Build {
    Bool(BooleanBuilder),
    I64(Int64Builder),
    F64(Float64Builder),
    Ts(TimestampMicrosecondBuilder, Option<Arc<str>>),
    Date(Date32Builder),
    Dec(Decimal128Builder, u8, i8),
    Str(StringBuilder),
    Bin(BinaryBuilder),
    /// A column not built: its values are read over (their width, None
    /// for a length-prefixed one).
    Skip(Option<usize>),
}

/// Reads records back, one byte slice per row.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn fixed<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N).map(|s| s.try_into().expect("N bytes"))
    }
    fn len(&mut self) -> Option<usize> {
        let mut n = 0usize;
        for shift in (0..64).step_by(7) {
            let byte = *self.take(1)?.first()?;
            n |= ((byte & 0x7f) as usize) << shift;
            if byte < 0x80 {
                return Some(n);
            }
        }
        None
    }
}

/// Which columns [`decode`] builds.
#[derive(Debug, Clone, Copy)]
pub(super) enum Columns<'a> {
    /// Every column of the schema (tests compare whole batches).
    #[cfg(test)]
    All,
    /// The columns with a value in at least one of the records: a reader
    /// that reads a missing column as NULL (as for a data file that lacks
    /// it) needs no more, and a file one wide message widened to thousands
    /// of columns gives its narrow rows in their own few.
    Filled,
    /// The one column of this name (none if the schema has no such column).
    Named(&'a str),
}

/// Chosen records (each one row's bytes, as [`encode`] wrote it) as a batch
/// of `schema`'s `columns`.
pub(super) fn decode(
    schema: Arc<Schema>,
    records: &[&[u8]],
    columns: Columns<'_>,
) -> Result<RecordBatch, CodecError> {
    supports(&schema)?;
    let n = records.len();
    let bitmap = schema.fields().len().div_ceil(8);
    let built = which_columns(&schema, records, columns, bitmap)?;
    let mut builds: Vec<Build> = (schema.fields().iter().zip(&built))
        .map(|(f, &built)| match f.data_type() {
            _ if !built => Build::Skip(fixed_width(f.data_type())),
            DataType::Boolean => Build::Bool(BooleanBuilder::with_capacity(n)),
            DataType::Int64 => Build::I64(Int64Builder::with_capacity(n)),
            DataType::Float64 => Build::F64(Float64Builder::with_capacity(n)),
            DataType::Date32 => Build::Date(Date32Builder::with_capacity(n)),
            DataType::Decimal128(p, s) => Build::Dec(Decimal128Builder::with_capacity(n), *p, *s),
            DataType::Utf8 => Build::Str(StringBuilder::with_capacity(n, n * 16)),
            DataType::Binary => Build::Bin(BinaryBuilder::with_capacity(n, n * 16)),
            DataType::Timestamp(_, tz) => {
                Build::Ts(TimestampMicrosecondBuilder::with_capacity(n), tz.clone())
            }
            _ => unreachable!("checked by supports"),
        })
        .collect();
    for (row, rec) in records.iter().enumerate() {
        let bad = || CodecError::Malformed(row);
        let mut r = Reader { b: rec, at: 0 };
        let nulls = r.take(bitmap).ok_or_else(bad)?;
        for (i, b) in builds.iter_mut().enumerate() {
            let null = nulls[i / 8] & (1 << (i % 8)) != 0;
            macro_rules! fixed {
                ($b:expr, $t:ty, $n:literal) => {
                    if null {
                        $b.append_null()
                    } else {
                        $b.append_value(<$t>::from_le_bytes(r.fixed::<$n>().ok_or_else(bad)?))
                    }
                };
            }
            match b {
                Build::Bool(b) => {
                    if null {
                        b.append_null()
                    } else {
                        b.append_value(r.fixed::<1>().ok_or_else(bad)?[0] != 0)
                    }
                }
                Build::I64(b) => fixed!(b, i64, 8),
                Build::F64(b) => fixed!(b, f64, 8),
                Build::Ts(b, _) => fixed!(b, i64, 8),
                Build::Date(b) => fixed!(b, i32, 4),
                Build::Dec(b, _, _) => fixed!(b, i128, 16),
                Build::Str(b) => {
                    if null {
                        b.append_null()
                    } else {
                        let len = r.len().ok_or_else(bad)?;
                        let s =
                            std::str::from_utf8(r.take(len).ok_or_else(bad)?).map_err(|_| bad())?;
                        b.append_value(s)
                    }
                }
                Build::Bin(b) => {
                    if null {
                        b.append_null()
                    } else {
                        let len = r.len().ok_or_else(bad)?;
                        b.append_value(r.take(len).ok_or_else(bad)?)
                    }
                }
                Build::Skip(width) => {
                    if !null {
                        let len = match *width {
                            Some(w) => w,
                            None => r.len().ok_or_else(bad)?,
                        };
                        r.take(len).ok_or_else(bad)?;
                    }
                }
            }
        }
        if r.at != rec.len() {
            return Err(bad());
        }
    }
    let cols: Vec<ArrayRef> = (builds.into_iter())
        .filter_map(|b| -> Option<ArrayRef> {
            Some(match b {
                Build::Bool(mut b) => Arc::new(b.finish()),
                Build::I64(mut b) => Arc::new(b.finish()),
                Build::F64(mut b) => Arc::new(b.finish()),
                Build::Ts(mut b, tz) => Arc::new(b.finish().with_timezone_opt(tz)),
                Build::Date(mut b) => Arc::new(b.finish()),
                Build::Dec(mut b, p, s) => Arc::new(
                    b.finish().with_precision_and_scale(p, s).expect("a valid decimal type"),
                ),
                Build::Str(mut b) => Arc::new(b.finish()),
                Build::Bin(mut b) => Arc::new(b.finish()),
                Build::Skip(_) => return None,
            })
        })
        .collect();
    let fields: Vec<_> =
        (schema.fields().iter().zip(&built)).filter(|(_, &b)| b).map(|(f, _)| f.clone()).collect();
    let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    let opts = deltalake::arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
    RecordBatch::try_new_with_options(schema, cols, &opts).map_err(|_| CodecError::Malformed(0))
}

/// Which of `schema`'s columns [`decode`] builds for `columns`.
fn which_columns(
    schema: &Schema,
    records: &[&[u8]],
    columns: Columns<'_>,
    bitmap: usize,
) -> Result<Vec<bool>, CodecError> {
    let fields = schema.fields();
    Ok(match columns {
        #[cfg(test)]
        Columns::All => vec![true; fields.len()],
        Columns::Named(name) => fields.iter().map(|f| f.name() == name).collect(),
        Columns::Filled => {
            // A column is NULL in every record where its bit is set in all
            // the null bitmaps.
            let mut all_null = vec![0xffu8; bitmap];
            for (row, rec) in records.iter().enumerate() {
                let nulls = rec.get(..bitmap).ok_or(CodecError::Malformed(row))?;
                for (a, n) in all_null.iter_mut().zip(nulls) {
                    *a &= n;
                }
            }
            (0..fields.len()).map(|i| all_null[i / 8] & (1 << (i % 8)) == 0).collect()
        }
    })
}

/// The bytes a non-NULL value of this type takes (None: a length, then
/// that many bytes).
fn fixed_width(t: &DataType) -> Option<usize> {
    match t {
        DataType::Boolean => Some(1),
        DataType::Date32 => Some(4),
        DataType::Decimal128(_, _) => Some(16),
        DataType::Utf8 | DataType::Binary => None,
        _ => Some(8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake::arrow::datatypes::Field;

    #[test]
    fn every_column_type_round_trips_with_nulls() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("b", DataType::Boolean, true),
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("t", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
            Field::new("d", DataType::Date32, true),
            Field::new("m", DataType::Decimal128(38, 9), true),
            Field::new("s", DataType::Utf8, true),
            Field::new("x", DataType::Binary, true),
            Field::new("s2", DataType::Utf8, true),
        ]));
        let n = 300;
        let some = |i: usize, k: usize| !(i + k).is_multiple_of(5);
        let long = |i: usize| "é".repeat(i);
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(BooleanArray::from_iter((0..n).map(|i| some(i, 0).then_some(i % 2 == 0)))),
                Arc::new(Int64Array::from_iter(
                    (0..n).map(|i| some(i, 1).then_some(i as i64 - 150)),
                )),
                Arc::new(Float64Array::from_iter(
                    (0..n).map(|i| some(i, 2).then_some(i as f64 / 7.0)),
                )),
                Arc::new(
                    TimestampMicrosecondArray::from_iter(
                        (0..n).map(|i| some(i, 3).then_some(i as i64 * 86_400_000_001)),
                    )
                    .with_timezone("UTC"),
                ),
                Arc::new(Date32Array::from_iter(
                    (0..n).map(|i| some(i, 4).then_some(i as i32 - 9)),
                )),
                Arc::new(
                    Decimal128Array::from_iter(
                        (0..n).map(|i| some(i, 1).then_some(-(i as i128) * 10i128.pow(30))),
                    )
                    .with_precision_and_scale(38, 9)
                    .unwrap(),
                ),
                Arc::new(StringArray::from_iter((0..n).map(|i| some(i, 2).then(|| long(i))))),
                Arc::new(BinaryArray::from_iter(
                    (0..n).map(|i| some(i, 3).then(|| vec![i as u8; i % 200])),
                )),
                Arc::new(StringArray::from_iter((0..n).map(|i| some(i, 4).then_some("")))),
            ],
        )
        .unwrap();
        let mut bytes = vec![];
        let ends = encode(&batch, &mut bytes, |_, _| ()).unwrap();
        let records: Vec<&[u8]> = (0..n)
            .map(|r| &bytes[if r == 0 { 0 } else { ends[r - 1] as usize }..ends[r] as usize])
            .collect();
        assert_eq!(decode(schema.clone(), &records, Columns::All).unwrap(), batch);
        let chosen = [records[3], records[299], records[0]];
        let idx = deltalake::arrow::array::UInt32Array::from(vec![3, 299, 0]);
        let expected = deltalake::arrow::compute::take_record_batch(&batch, &idx).unwrap();
        assert_eq!(decode(schema.clone(), &chosen, Columns::All).unwrap(), expected);
        // A record cut short or too long is an error, not a wrong row.
        let cut = &records[7][..records[7].len() - 1];
        assert!(matches!(
            decode(schema.clone(), &[cut], Columns::All),
            Err(CodecError::Malformed(0))
        ));
        let mut long_rec = records[7].to_vec();
        long_rec.push(0);
        assert!(decode(schema, &[&long_rec], Columns::All).is_err());
    }

    #[test]
    fn filled_leaves_out_columns_null_in_every_record_read_and_named_reads_over_the_others() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Utf8, true),
            Field::new("c", DataType::Decimal128(38, 2), true),
            Field::new("d", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), Some(2), Some(3)])),
                Arc::new(StringArray::from(vec![None, None, Some("wide ".repeat(40))])),
                Arc::new(
                    Decimal128Array::from(vec![None, None, Some(7)])
                        .with_precision_and_scale(38, 2)
                        .unwrap(),
                ),
                Arc::new(StringArray::from(vec!["x", "yy", "zzz"])),
            ],
        )
        .unwrap();
        let mut bytes = vec![];
        let ends = encode(&batch, &mut bytes, |_, _| ()).unwrap();
        let rec =
            |r: usize| &bytes[if r == 0 { 0 } else { ends[r - 1] as usize }..ends[r] as usize];
        let names = |b: &RecordBatch| -> Vec<String> {
            b.schema().fields().iter().map(|f| f.name().clone()).collect()
        };
        // Rows 0 and 1: b and c are NULL in both, so not built.
        let narrow = decode(schema.clone(), &[rec(0), rec(1)], Columns::Filled).unwrap();
        assert_eq!(names(&narrow), ["a", "d"]);
        assert_eq!(narrow.num_rows(), 2);
        let d = narrow.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(d.iter().collect::<Vec<_>>(), [Some("x"), Some("yy")]);
        // With row 2 every column has a value somewhere.
        let all = decode(schema.clone(), &[rec(1), rec(2)], Columns::Filled).unwrap();
        assert_eq!(names(&all), ["a", "b", "c", "d"]);
        // One column by name: the values before it are read over.
        let one = decode(schema.clone(), &[rec(2), rec(0)], Columns::Named("d")).unwrap();
        assert_eq!(names(&one), ["d"]);
        let d = one.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(d.iter().collect::<Vec<_>>(), [Some("zzz"), Some("x")]);
        // A record too short for its null bitmap is malformed, not skipped.
        assert!(matches!(
            decode(schema, &[rec(0), &[]], Columns::Filled),
            Err(CodecError::Malformed(1))
        ));
    }

    #[test]
    fn a_type_without_a_row_encoding_is_refused() {
        let schema = Schema::new(vec![Field::new("l", DataType::LargeUtf8, true)]);
        assert!(matches!(supports(&schema), Err(CodecError::Type(_, _))));
    }
}
