//! Arrow columns read as cells: each column of a run decoded by
//! `arrow-avro` (`columnar`) becomes, value for value, the cells the
//! per-message path (`cells::cell`) makes of the same fields, so a table
//! fed either way holds the same rows (docs/avro.md, how messages are decoded).

use deltalake::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Decimal128Array, StringArray, StructArray,
};
use deltalake::arrow::datatypes::{
    DataType, Date32Type, Decimal256Type, Float32Type, Float64Type, Int32Type, Int64Type,
    Time32MillisecondType, Time64MicrosecondType, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType,
};

use super::plan::Conv;
use super::RowPlan;
use crate::value::temporal::format_time;
use crate::value::{decimal, parse_ts, Value};

/// A column read the way the per-message path reads its field.
pub(super) enum Column<'a> {
    Null,
    Bool(&'a BooleanArray),
    Int(&'a [i32], Nulls<'a>, Conv),
    Long(&'a [i64], Nulls<'a>, Conv),
    Date(&'a [i32], Nulls<'a>),
    TimeMillis(&'a [i32], Nulls<'a>),
    TimeMicros(&'a [i64], Nulls<'a>),
    TsMillis(&'a [i64], Nulls<'a>),
    TsMicros(&'a [i64], Nulls<'a>),
    TsNanos(&'a [i64], Nulls<'a>),
    Float(&'a [f32], Nulls<'a>),
    Double(&'a [f64], Nulls<'a>),
    Str(&'a StringArray, Conv),
    Bytes(&'a BinaryArray, Conv),
    Decimal(&'a Decimal128Array, i32),
    WideDecimal(&'a dyn Array, i32),
    VariableScaleDecimal(&'a StructArray),
}

type Nulls<'a> = Option<&'a deltalake::arrow::buffer::NullBuffer>;

impl<'a> Column<'a> {
    /// How a column of this type, read with this conversion, becomes cells
    /// (None for a type the fast path does not read: nested records,
    /// arrays, maps, enums, fixed, uuid and unions of several types).
    pub(super) fn of(a: &'a ArrayRef, conv: Conv) -> Option<Column<'a>> {
        if conv == Conv::Unstorable {
            return Some(Column::Null);
        }
        let n = a.nulls();
        Some(match a.data_type() {
            DataType::Null => Column::Null,
            DataType::Boolean => Column::Bool(a.as_boolean()),
            DataType::Int32 => Column::Int(a.as_primitive::<Int32Type>().values(), n, conv),
            DataType::Int64 => Column::Long(a.as_primitive::<Int64Type>().values(), n, conv),
            DataType::Date32 => Column::Date(a.as_primitive::<Date32Type>().values(), n),
            DataType::Time32(TimeUnit::Millisecond) => {
                Column::TimeMillis(a.as_primitive::<Time32MillisecondType>().values(), n)
            }
            DataType::Time64(TimeUnit::Microsecond) => {
                Column::TimeMicros(a.as_primitive::<Time64MicrosecondType>().values(), n)
            }
            DataType::Timestamp(TimeUnit::Millisecond, _) => {
                Column::TsMillis(a.as_primitive::<TimestampMillisecondType>().values(), n)
            }
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                Column::TsMicros(a.as_primitive::<TimestampMicrosecondType>().values(), n)
            }
            DataType::Timestamp(TimeUnit::Nanosecond, _) => {
                Column::TsNanos(a.as_primitive::<TimestampNanosecondType>().values(), n)
            }
            DataType::Float32 => Column::Float(a.as_primitive::<Float32Type>().values(), n),
            DataType::Float64 => Column::Double(a.as_primitive::<Float64Type>().values(), n),
            DataType::Utf8 => Column::Str(a.as_string::<i32>(), conv),
            DataType::Binary => Column::Bytes(a.as_binary::<i32>(), conv),
            DataType::Decimal128(..) => match conv {
                Conv::Decimal(scale) => Column::Decimal(a.as_primitive(), scale),
                _ => return None,
            },
            DataType::Decimal256(..) => match conv {
                Conv::Decimal(scale) => Column::WideDecimal(a.as_ref(), scale),
                _ => return None,
            },
            DataType::Struct(fields)
                if conv == Conv::VariableScaleDecimal
                    && fields.len() == 2
                    && fields[0].name() == "scale"
                    && fields[0].data_type() == &DataType::Int32
                    && fields[1].name() == "value"
                    && fields[1].data_type() == &DataType::Binary =>
            {
                Column::VariableScaleDecimal(a.as_struct())
            }
            _ => return None,
        })
    }

    /// Row `i`'s cell, as `cells::cell` makes it from the same field's
    /// `apache_avro` value; None where that path would keep the value in a
    /// shape this one does not build (the run then goes that way).
    pub(super) fn cell(&self, i: usize) -> Option<Value> {
        let null = |n: &Nulls<'_>| n.is_some_and(|n| n.is_null(i));
        Some(match self {
            Column::Null => Value::Null,
            Column::Bool(a) if a.is_null(i) => Value::Null,
            Column::Bool(a) => Value::Bool(a.value(i)),
            Column::Int(_, n, _)
            | Column::Date(_, n)
            | Column::TimeMillis(_, n)
            | Column::TimeMicros(_, n)
            | Column::Long(_, n, _)
            | Column::TsMillis(_, n)
            | Column::TsMicros(_, n)
            | Column::TsNanos(_, n)
            | Column::Float(_, n)
            | Column::Double(_, n)
                if null(n) =>
            {
                Value::Null
            }
            Column::Int(v, _, conv) => match conv {
                Conv::Date => Value::Date(v[i]),
                Conv::TimeMillis => Value::Str(format_time(v[i] as i64 * 1000).into()),
                _ => Value::Int(v[i] as i64),
            },
            Column::Long(v, _, conv) => long(v[i], *conv),
            Column::Date(v, _) => Value::Date(v[i]),
            Column::TimeMillis(v, _) => Value::Str(format_time(v[i] as i64 * 1000).into()),
            Column::TimeMicros(v, _) => Value::Str(format_time(v[i]).into()),
            Column::TsMillis(v, _) => v[i].checked_mul(1000).map_or(Value::Int(v[i]), Value::Ts),
            Column::TsMicros(v, _) => Value::Ts(v[i]),
            Column::TsNanos(v, _) => Value::Ts(v[i].div_euclid(1000)),
            // The float's shortest text, as the per-message path reads it.
            Column::Float(v, _) => Value::Float(v[i].to_string().parse().unwrap_or(v[i] as f64)),
            Column::Double(v, _) => Value::Float(v[i]),
            Column::Str(a, _) if a.is_null(i) => Value::Null,
            Column::Str(a, Conv::ZonedTs) => match parse_ts(a.value(i)) {
                Some(ts) => Value::Ts(ts),
                None => Value::Str(a.value(i).into()),
            },
            Column::Str(a, _) => Value::Str(a.value(i).into()),
            Column::Bytes(a, _) if a.is_null(i) => Value::Null,
            Column::Bytes(a, Conv::Decimal(scale)) => match decimal::from_be_bytes(a.value(i)) {
                Some(u) => Value::decimal(u, *scale),
                None => Value::bytes(a.value(i).to_vec()),
            },
            Column::Bytes(a, _) => Value::bytes(a.value(i).to_vec()),
            Column::Decimal(a, _) if a.is_null(i) => Value::Null,
            Column::Decimal(a, scale) => Value::decimal(a.value(i), *scale),
            Column::WideDecimal(a, _) if a.is_null(i) => Value::Null,
            Column::WideDecimal(a, scale) => {
                let u = a.as_primitive::<Decimal256Type>().value(i).to_i128()?;
                Value::decimal(u, *scale)
            }
            Column::VariableScaleDecimal(s) if s.is_null(i) => Value::Null,
            Column::VariableScaleDecimal(s) => {
                let scale = s.column(0).as_primitive::<Int32Type>();
                let value = s.column(1).as_binary::<i32>();
                if scale.is_null(i) || value.is_null(i) {
                    return None;
                }
                Value::decimal(decimal::from_be_bytes(value.value(i))?, scale.value(i))
            }
        })
    }
}

/// A long by its field's conversion (`cells::cell` for `Value::Long`).
fn long(x: i64, conv: Conv) -> Value {
    let converted = match conv {
        Conv::TsMillis => x.checked_mul(1000).map(Value::Ts),
        Conv::TsMicros => Some(Value::Ts(x)),
        Conv::TsNanos => Some(Value::Ts(x.div_euclid(1000))),
        Conv::TimeMillis => x.checked_mul(1000).map(|us| Value::Str(format_time(us).into())),
        Conv::TimeMicros => Some(Value::Str(format_time(x).into())),
        Conv::TimeNanos => Some(Value::Str(format_time(x.div_euclid(1000)).into())),
        _ => None,
    };
    converted.unwrap_or(Value::Int(x))
}

/// A record's columns (a struct column's children, or a batch's columns)
/// read by the row plan of its schema.
pub(super) struct Rows<'a> {
    columns: Vec<Column<'a>>,
}

impl<'a> Rows<'a> {
    pub(super) fn of(arrays: &'a [ArrayRef], plan: &RowPlan) -> Option<Rows<'a>> {
        if arrays.len() != plan.fields.len() {
            return None;
        }
        let columns = arrays.iter().zip(&plan.fields).map(|(a, f)| Column::of(a, f.conv));
        Some(Rows { columns: columns.collect::<Option<_>>()? })
    }

    /// Row `i`'s values in the schema's order.
    pub(super) fn values(&self, i: usize) -> Option<Vec<Value>> {
        // Sized up front (collecting into an Option<Vec> grows from empty),
        // with room for the envelope columns a table stores (`source_lsn`,
        // `decode::store_envelope`): one more would copy the row.
        let mut values = Vec::with_capacity(self.columns.len() + 2);
        for c in &self.columns {
            values.push(c.cell(i)?);
        }
        Some(values)
    }
}
