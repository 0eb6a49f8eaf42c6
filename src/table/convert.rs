//! Conversions between the merge's values and Arrow / Delta: column types,
//! schemas, building record batches from versions, reading cells, and
//! encoding key columns straight from Arrow.
//!
//! The merge works on [`Value`] cells because its rules are per key; the
//! table works on Arrow columns because that is what parquet reads and
//! writes. Everything that crosses between the two goes through here, so a
//! type maps the same way on every path.

use std::sync::Arc;

use deltalake::arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, BooleanArray, Date32Array, Decimal128Array,
    Float32Array, Float64Array, Int16Array, Int32Array, Int64Array, Int8Array, LargeBinaryArray,
    LargeStringArray, RecordBatch, StringArray, StringBuilder, StringViewArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
};
use deltalake::arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema, TimeUnit};
use deltalake::kernel::{
    DataType as DeltaType, DecimalType, PrimitiveType, StructField, StructType,
};

use super::Result;
use super::{TableError, TableStore};
use crate::merge::Version;
use crate::par::par_map;
use crate::value::{DType, Value};

pub(super) fn delta_type(t: DType) -> DeltaType {
    DeltaType::Primitive(match t {
        DType::Bool => PrimitiveType::Boolean,
        DType::Int => PrimitiveType::Long,
        DType::Float => PrimitiveType::Double,
        DType::Str | DType::Time => PrimitiveType::String,
        DType::Ts => PrimitiveType::Timestamp,
        DType::Date => PrimitiveType::Date,
        DType::Binary => PrimitiveType::Binary,
        DType::Decimal { precision, scale } => PrimitiveType::Decimal(
            DecimalType::try_new(precision, scale).expect("decimal types are checked when made"),
        ),
    })
}

/// The column type of a Delta type; None for types a table of ours never
/// holds (nested types).
pub(super) fn dtype_of(t: &DeltaType) -> Option<DType> {
    match t {
        DeltaType::Primitive(p) => Some(match p {
            PrimitiveType::Boolean => DType::Bool,
            PrimitiveType::Long
            | PrimitiveType::Integer
            | PrimitiveType::Short
            | PrimitiveType::Byte => DType::Int,
            PrimitiveType::Double | PrimitiveType::Float => DType::Float,
            PrimitiveType::String => DType::Str,
            PrimitiveType::Timestamp | PrimitiveType::TimestampNtz => DType::Ts,
            PrimitiveType::Date => DType::Date,
            PrimitiveType::Binary => DType::Binary,
            PrimitiveType::Decimal(d) => {
                DType::Decimal { precision: d.precision(), scale: d.scale() }
            }
            _ => return None,
        }),
        _ => None,
    }
}

pub(super) fn arrow_type(t: DType) -> ArrowType {
    match t {
        DType::Bool => ArrowType::Boolean,
        DType::Int => ArrowType::Int64,
        DType::Float => ArrowType::Float64,
        DType::Str | DType::Time => ArrowType::Utf8,
        DType::Ts => ArrowType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        DType::Date => ArrowType::Date32,
        DType::Binary => ArrowType::Binary,
        DType::Decimal { precision, scale } => ArrowType::Decimal128(precision, scale as i8),
    }
}

/// An Arrow array of type `t` from cells (a cell of another type is NULL,
/// an integer in a float column widens, anything in a string column is its
/// text, a decimal is brought to the column's scale when that is exact).
pub(super) fn build_array<'a>(t: DType, vals: impl Iterator<Item = &'a Value>) -> ArrayRef {
    match t {
        DType::Bool => Arc::new(
            vals.map(|v| if let Value::Bool(x) = v { Some(*x) } else { None })
                .collect::<BooleanArray>(),
        ),
        DType::Int => Arc::new(
            vals.map(|v| if let Value::Int(x) = v { Some(*x) } else { None })
                .collect::<Int64Array>(),
        ),
        DType::Float => Arc::new(
            vals.map(|v| match v {
                Value::Float(x) => Some(*x),
                Value::Int(x) => Some(*x as f64),
                Value::Number(n) => n.parse().ok(),
                _ => None,
            })
            .collect::<Float64Array>(),
        ),
        DType::Str | DType::Time => {
            let mut b = StringBuilder::new();
            for v in vals {
                match v {
                    Value::Null => b.append_null(),
                    Value::Str(s) => b.append_value(s),
                    other => b.append_value(other.to_string()),
                }
            }
            Arc::new(b.finish())
        }
        DType::Ts => Arc::new(
            vals.map(|v| if let Value::Ts(x) = v { Some(*x) } else { None })
                .collect::<TimestampMicrosecondArray>()
                .with_timezone("UTC"),
        ),
        DType::Date => Arc::new(
            vals.map(|v| if let Value::Date(x) = v { Some(*x) } else { None })
                .collect::<Date32Array>(),
        ),
        DType::Binary => {
            let mut b = BinaryBuilder::new();
            for v in vals {
                match v {
                    Value::Bytes(x) => b.append_value(x),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        DType::Decimal { precision, scale } => Arc::new(
            vals.map(|v| match v {
                Value::Decimal(x, s) => crate::value::decimal::rescale(x.get(), *s, scale as i32),
                _ => None,
            })
            .collect::<Decimal128Array>()
            .with_precision_and_scale(precision, scale as i8)
            .expect("decimal types are checked when made"),
        ),
    }
}

/// The key columns of one Arrow batch, encoded row by row into key bytes
/// exactly as [`crate::merge::key_from`] over converted cells would, without
/// building a [`Value`] per cell: scanning history for keys touches every
/// stored row, and a String per row cost most of that scan.
pub(super) struct KeyCols<'a>(Vec<KeyCol<'a>>);

pub(super) enum KeyCol<'a> {
    Str(&'a StringArray),
    Int(&'a Int64Array),
    Other(&'a ArrayRef, DType),
    Missing,
}

impl<'a> KeyCols<'a> {
    pub(super) fn new(cols: &'a [(Option<ArrayRef>, DType)]) -> Self {
        KeyCols(
            cols.iter()
                .map(|(c, t)| match (c, t) {
                    (None, _) => KeyCol::Missing,
                    (Some(c), DType::Str) if c.as_any().is::<StringArray>() => {
                        KeyCol::Str(c.as_any().downcast_ref().expect("checked"))
                    }
                    (Some(c), DType::Int) if c.as_any().is::<Int64Array>() => {
                        KeyCol::Int(c.as_any().downcast_ref().expect("checked"))
                    }
                    (Some(c), t) => KeyCol::Other(c, *t),
                })
                .collect(),
        )
    }

    /// Row `i`'s key into `out` (cleared first); false when every part is NULL.
    pub(super) fn encode(&self, i: usize, out: &mut Vec<u8>) -> bool {
        out.clear();
        let mut any = false;
        for c in &self.0 {
            match c {
                KeyCol::Str(a) if a.is_valid(i) => {
                    crate::value::encode_str(a.value(i), out);
                    any = true;
                }
                KeyCol::Int(a) if a.is_valid(i) => {
                    crate::value::encode_int(a.value(i), out);
                    any = true;
                }
                KeyCol::Other(a, t) => {
                    let v = cell(a, i).convert(*t).unwrap_or(Value::Null);
                    any |= !v.is_null();
                    v.encode(out);
                }
                _ => Value::Null.encode(out),
            }
        }
        any
    }
}

/// One Arrow cell as a [`Value`].
pub fn cell(a: &ArrayRef, i: usize) -> Value {
    if a.is_null(i) {
        return Value::Null;
    }
    let any = a.as_any();
    if let Some(x) = any.downcast_ref::<Int64Array>() {
        Value::Int(x.value(i))
    } else if let Some(x) = any.downcast_ref::<Int32Array>() {
        Value::Int(x.value(i) as i64)
    } else if let Some(x) = any.downcast_ref::<Float64Array>() {
        Value::Float(x.value(i))
    } else if let Some(x) = any.downcast_ref::<Float32Array>() {
        Value::Float(x.value(i) as f64)
    } else if let Some(x) = any.downcast_ref::<BooleanArray>() {
        Value::Bool(x.value(i))
    } else if let Some(x) = any.downcast_ref::<StringArray>() {
        Value::Str(x.value(i).into())
    } else if let Some(x) = any.downcast_ref::<LargeStringArray>() {
        Value::Str(x.value(i).into())
    } else if let Some(x) = any.downcast_ref::<StringViewArray>() {
        Value::Str(x.value(i).into())
    } else if let Some(x) = any.downcast_ref::<TimestampMicrosecondArray>() {
        Value::Ts(x.value(i))
    } else if let Some(x) = any.downcast_ref::<TimestampMillisecondArray>() {
        Value::Ts(x.value(i) * 1000)
    } else if let Some(x) = any.downcast_ref::<TimestampNanosecondArray>() {
        Value::Ts(x.value(i) / 1000)
    } else if let Some(x) = any.downcast_ref::<Date32Array>() {
        Value::Date(x.value(i))
    } else if let Some(x) = any.downcast_ref::<Decimal128Array>() {
        Value::decimal(x.value(i), x.scale() as i32)
    } else if let Some(x) = any.downcast_ref::<BinaryArray>() {
        Value::bytes(x.value(i).to_vec())
    } else if let Some(x) = any.downcast_ref::<LargeBinaryArray>() {
        Value::bytes(x.value(i).to_vec())
    } else if let Some(x) = any.downcast_ref::<Int16Array>() {
        Value::Int(x.value(i) as i64)
    } else if let Some(x) = any.downcast_ref::<Int8Array>() {
        Value::Int(x.value(i) as i64)
    } else {
        Value::Null
    }
}

impl TableStore {
    /// The table's columns as files hold them: every typed data column,
    /// then the system columns.
    pub(super) fn arrow_schema(&self) -> Arc<ArrowSchema> {
        self.file_schema(&self.columns_kept(None))
    }

    /// Which data columns (by table position) a file holds: the typed ones
    /// (an untyped column is NULL to readers) with a value in at least one
    /// of `versions`' rows, or every typed one (None). A column that is
    /// NULL in every row of a file is left out of it, as files written
    /// before a column was added leave it out: every reader reads it as
    /// NULL (docs/schema.md, "What a data file holds"). Without this, one
    /// message that gave an `additive` table thousands of columns made
    /// every later file carry them all, NULL, as full Arrow buffers.
    pub(super) fn columns_kept(&self, versions: Option<&[&Version]>) -> Vec<bool> {
        let mut kept: Vec<bool> = self.columns.iter().map(|_| versions.is_none()).collect();
        if let Some(vs) = versions {
            let mut left = kept.len();
            for v in vs {
                for (k, c) in kept.iter_mut().zip(v.data.iter()) {
                    if !*k && !matches!(c, Value::Null) {
                        *k = true;
                        left -= 1;
                    }
                }
                if left == 0 {
                    break;
                }
            }
        }
        let always = self.always_held();
        for (k, (n, _)) in kept.iter_mut().zip(&self.columns) {
            *k = self.stored(n) && (*k || always(n));
        }
        kept
    }

    /// Columns every file holds, NULL or not: the system columns, and the
    /// business key (key lookups, bloom filters and key ranges, read it
    /// from every file).
    fn always_held(&self) -> impl Fn(&str) -> bool + '_ {
        let system: Vec<String> = self.meta.system_fields().into_iter().map(|(n, _)| n).collect();
        move |name| {
            system.iter().any(|n| n == name) || self.meta.business_key.iter().any(|k| k == name)
        }
    }

    /// How many columns a file holding a version has at most: its data
    /// columns up to its last value, and the system columns (what
    /// [`plan::cut_by_width`](super::plan::cut_by_width) counts).
    pub(super) fn file_width(&self) -> impl Fn(&Version) -> usize {
        let system = self.meta.system_fields().len();
        move |v| v.data.len() + system
    }

    /// The schema of a file gathering rows of these batches (each in the
    /// columns its file holds): the data columns any of them holds, in the
    /// table's order, and the system columns.
    pub(super) fn held_schema<'b>(
        &self,
        batches: impl IntoIterator<Item = &'b RecordBatch>,
    ) -> Arc<ArrowSchema> {
        let mut held = std::collections::HashSet::new();
        for b in batches {
            held.extend(b.schema_ref().fields().iter().map(|f| f.name().clone()));
        }
        let kept: Vec<bool> =
            self.columns.iter().map(|(n, _)| self.stored(n) && held.contains(n)).collect();
        self.file_schema(&kept)
    }

    /// The table's columns as Delta counts them for statistics: every data
    /// column (an untyped one too, as text), then the system columns.
    pub(super) fn stats_schema(&self) -> Arc<ArrowSchema> {
        let mut fields: Vec<Field> =
            self.columns.iter().map(|(n, t)| Field::new(n, arrow_type(*t), true)).collect();
        for (n, t) in self.meta.system_fields() {
            fields.push(Field::new(n, arrow_type(t), true));
        }
        Arc::new(ArrowSchema::new(fields))
    }

    /// The schema of a file holding the `kept` data columns (see
    /// [`Self::columns_kept`]) and every system column.
    pub(super) fn file_schema(&self, kept: &[bool]) -> Arc<ArrowSchema> {
        let mut fields: Vec<Field> = (self.columns.iter().zip(kept))
            .filter(|(_, &k)| k)
            .map(|((n, t), _)| Field::new(n, arrow_type(*t), true))
            .collect();
        for (n, t) in self.meta.system_fields() {
            fields.push(Field::new(n, arrow_type(t), true));
        }
        Arc::new(ArrowSchema::new(fields))
    }

    /// The Delta schema: data columns, system columns, then the partition column.
    pub fn delta_schema(&self) -> StructType {
        let mut fields: Vec<StructField> = self
            .columns
            .iter()
            .map(|(n, t)| StructField::new(n.clone(), delta_type(*t), true))
            .collect();
        for (n, t) in self.meta.system_fields() {
            fields.push(StructField::new(n, delta_type(t), true));
        }
        if let Some(p) = self.meta.partition() {
            fields.push(StructField::new(p.to_string(), delta_type(DType::Bool), true));
        }
        StructType::try_new(fields).expect("unique column names")
    }

    pub(super) fn to_batch(&self, versions: &[Version]) -> Result<RecordBatch> {
        self.to_batch_refs(&versions.iter().collect::<Vec<_>>())
    }

    /// The versions' rows as one Arrow batch holding the columns they have
    /// values in (see [`Self::columns_kept`]).
    pub(super) fn to_batch_refs(&self, versions: &[&Version]) -> Result<RecordBatch> {
        let kept = self.columns_kept((!versions.is_empty()).then_some(versions));
        self.to_batch_keeping(versions, &kept)
    }

    /// [`Self::to_batch_refs`] with the file's data columns given.
    pub(super) fn to_batch_keeping(
        &self,
        versions: &[&Version],
        kept: &[bool],
    ) -> Result<RecordBatch> {
        // Row ranges on all cores, each small enough to stay in cache while
        // its columns are built one after another, then joined. Column by
        // column over the whole batch, each column's pass went through every
        // version's values again (narrow merge-on-read staging, build step:
        // 29-46 ms -> 26-34 ms for 100,000 rows; docs/performance.md).
        let chunk = versions.len().div_ceil(2 * rayon::current_num_threads()).clamp(1024, 4096);
        let parts: Vec<Result<RecordBatch>> =
            par_map(versions.chunks(chunk).collect(), |part| self.batch_of(part, kept));
        let parts = parts.into_iter().collect::<Result<Vec<_>>>()?;
        match &parts[..] {
            [one] => Ok(one.clone()),
            _ => deltalake::arrow::compute::concat_batches(&self.file_schema(kept), &parts)
                .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() }),
        }
    }

    /// The versions' rows as one Arrow batch of the `kept` data columns
    /// and the system columns.
    fn batch_of(&self, versions: &[&Version], kept: &[bool]) -> Result<RecordBatch> {
        let cols = (self.columns.iter().enumerate()).filter(|(i, _)| kept[*i]);
        let mut arrays: Vec<ArrayRef> = cols
            .map(|(i, (_, t))| {
                build_array(*t, versions.iter().map(|v| v.data.get(i).unwrap_or(&Value::Null)))
            })
            .collect();
        for (n, t) in self.meta.system_fields() {
            let r = &self.meta.reserved;
            let vals: Vec<Value> = versions
                .iter()
                .map(|v| {
                    if n == r.valid_from {
                        v.valid_from.map(Value::Ts).unwrap_or(Value::Null)
                    } else if n == r.valid_to {
                        v.valid_to.map(Value::Ts).unwrap_or(Value::Null)
                    } else if n == r.is_deleted {
                        Value::Bool(v.deleted)
                    } else if n == r.execution_id {
                        Value::Int(v.exec)
                    } else {
                        v.sk.map(Value::Int).unwrap_or(Value::Null)
                    }
                })
                .collect();
            arrays.push(build_array(t, vals.iter()));
        }
        RecordBatch::try_new(self.file_schema(kept), arrays)
            .map_err(|e| TableError::Data { uri: self.uri.clone(), msg: e.to_string() })
    }

    /// `batch` (a file about to be written) without the data columns that
    /// are NULL in every row (see [`Self::columns_kept`]). Files gathered
    /// from stored rows (closes, compaction, rewrites) come in the columns
    /// their sources hold, which may be NULL in every row gathered.
    pub(super) fn without_empty_columns(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let schema = batch.schema();
        let always = self.always_held();
        let keep: Vec<usize> = (0..batch.num_columns())
            .filter(|&i| {
                batch.num_rows() == 0
                    || batch.column(i).null_count() < batch.num_rows()
                    || always(schema.field(i).name())
            })
            .collect();
        if keep.len() == batch.num_columns() {
            return Ok(batch);
        }
        batch.project(&keep).map_err(|e| self.data_err(e.to_string()))
    }
}

/// Where each column of a schema is, by name (a schema of thousands of
/// columns is looked up by name once per column, not searched).
pub(super) fn positions(schema: &ArrowSchema) -> std::collections::HashMap<&str, usize> {
    schema.fields().iter().enumerate().map(|(i, f)| (f.name().as_str(), i)).collect()
}

/// A batch in `schema` (a superset of its columns, same types): columns by
/// name, NULL where the batch has none.
pub(super) fn padded_to(
    batch: RecordBatch,
    schema: &Arc<ArrowSchema>,
) -> std::result::Result<RecordBatch, deltalake::arrow::error::ArrowError> {
    if batch.schema() == *schema {
        return Ok(batch);
    }
    let n = batch.num_rows();
    let at = positions(batch.schema_ref());
    let cols = (schema.fields().iter())
        .map(|f| match at.get(f.name().as_str()) {
            Some(&i) => batch.column(i).clone(),
            None => deltalake::arrow::array::new_null_array(f.data_type(), n),
        })
        .collect();
    RecordBatch::try_new(schema.clone(), cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Key bytes of Arrow rows must equal the key bytes the merge computes
    /// from values (`merge::key_from` over `Value::encode`): the key index is
    /// built from one and looked up with the other.
    #[test]
    fn key_bytes_from_arrow_columns_equal_key_bytes_from_values() {
        let ids: ArrayRef = Arc::new(StringArray::from(vec![Some("a-1"), None, Some(""), None]));
        let ns: ArrayRef = Arc::new(Int64Array::from(vec![Some(7), Some(-1), None, None]));
        let ts: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![Some(5), None, Some(-9), None])
                .with_timezone("UTC"),
        );
        let cols = vec![
            (Some(ids.clone()), DType::Str),
            (Some(ns.clone()), DType::Int),
            (Some(ts.clone()), DType::Ts),
            (None, DType::Str),
        ];
        let keys = KeyCols::new(&cols);
        let mut buf = vec![];
        for i in 0..4 {
            let values = [cell(&ids, i), cell(&ns, i), cell(&ts, i), Value::Null];
            let want = crate::merge::key_from(values.iter());
            let any = keys.encode(i, &mut buf);
            assert_eq!(any.then(|| buf.clone()), want.map(|k| k.to_vec()), "row {i}");
        }
    }
}
