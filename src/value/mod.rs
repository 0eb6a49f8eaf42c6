//! Typed cell values shared by every stage.
//!
//! The merge engine compares, hashes and orders individual cells (sequence
//! columns, business keys, tracked columns), so values are a small closed enum
//! rather than Arrow arrays: the rules of docs/batch.md, scd1.md, scd2.md and snapshot.md are per key, and a
//! per-key representation keeps them readable and unit-testable. Conversion to
//! and from Arrow happens only at the table edge (`table` module).

pub mod decimal;
pub mod temporal;

use compact_str::ToCompactString;
use std::cmp::Ordering;
use std::fmt;

use base64::Engine;

use self::temporal::{date_to_ts, format_date, format_time, parse_date, parse_time, ts_to_date};
pub use self::temporal::{format_ts, parse_ts};

/// Column types a table can hold (docs/types.md). Business keys may not be `Float`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    Bool,
    /// Every integer width: one type, so int32 after int64 is no change.
    Int,
    Float,
    Str,
    /// UTC timestamp, microseconds since the epoch.
    Ts,
    /// Calendar date, days since 1970-01-01.
    Date,
    /// Exact decimal; precision at most 38.
    Decimal {
        precision: u8,
        scale: u8,
    },
    Binary,
    /// Time of day: stored as text `HH:MM:SS[.ffffff]` (Delta has no time
    /// type); as a declared type it checks and normalises the text.
    Time,
}

impl DType {
    /// A type name as `columns:` writes it: `integer`, `decimal(10,2)`, ...
    pub fn parse(s: &str) -> Result<DType, String> {
        let l = s.trim().to_ascii_lowercase();
        if let Some(args) = l
            .strip_prefix("decimal")
            .or_else(|| l.strip_prefix("numeric"))
            .filter(|a| !a.is_empty())
        {
            return parse_decimal_args(args).map_err(|e| format!("`{s}`: {e}"));
        }
        Ok(match l.as_str() {
            "bool" | "boolean" => DType::Bool,
            "int" | "integer" | "long" | "bigint" | "int64" => DType::Int,
            "float" | "double" | "float64" | "real" => DType::Float,
            "string" | "str" | "text" | "utf8" => DType::Str,
            "timestamp" | "datetime" => DType::Ts,
            "date" => DType::Date,
            "time" => DType::Time,
            "binary" | "bytes" => DType::Binary,
            _ => {
                return Err(format!(
                    "unknown type `{s}` (expected integer, float, boolean, timestamp, date, time, string or decimal(p,s))"
                ))
            }
        })
    }

    pub fn name(self) -> String {
        self.to_string()
    }

    /// The type values of this type are stored as (a time of day is text).
    pub fn storage(self) -> DType {
        match self {
            DType::Time => DType::Str,
            t => t,
        }
    }
}

/// `(p,s)` or `(p)` after `decimal`.
fn parse_decimal_args(args: &str) -> Result<DType, String> {
    let inner = args
        .trim()
        .strip_prefix('(')
        .and_then(|a| a.strip_suffix(')'))
        .ok_or("expected decimal(precision,scale)")?;
    let mut nums = inner.split(',').map(|x| x.trim().parse::<u8>());
    let precision = nums.next().and_then(|p| p.ok()).ok_or("precision is not a number")?;
    let scale = match nums.next() {
        None => 0,
        Some(s) => s.map_err(|_| "scale is not a number")?,
    };
    if nums.next().is_some() {
        return Err("expected decimal(precision,scale)".into());
    }
    decimal_type(precision as u32, scale as i32)
}

/// `decimal(precision, scale)`, or why Delta cannot hold it.
pub fn decimal_type(precision: u32, scale: i32) -> Result<DType, String> {
    if precision == 0 || precision > decimal::MAX_PRECISION as u32 {
        return Err(format!(
            "precision {precision} is outside 1..={} (Delta decimals hold at most {} digits)",
            decimal::MAX_PRECISION,
            decimal::MAX_PRECISION
        ));
    }
    if scale < 0 || scale > precision as i32 {
        return Err(format!("scale {scale} is outside 0..={precision}"));
    }
    Ok(DType::Decimal { precision: precision as u8, scale: scale as u8 })
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DType::Bool => f.write_str("boolean"),
            DType::Int => f.write_str("integer"),
            DType::Float => f.write_str("float"),
            DType::Str => f.write_str("string"),
            DType::Ts => f.write_str("timestamp"),
            DType::Date => f.write_str("date"),
            DType::Decimal { precision, scale } => write!(f, "decimal({precision},{scale})"),
            DType::Binary => f.write_str("binary"),
            DType::Time => f.write_str("time"),
        }
    }
}

/// A text cell's string. Most CRM text is short (codes, currencies, names,
/// ISO timestamps before typing), and a string of up to 24 bytes is held in
/// the cell itself: no allocation when it is decoded or cloned, no free when
/// it is dropped, and its bytes sit beside the cell when Arrow columns and
/// change hashes read them, instead of behind a pointer that missed the
/// cache for most cells (docs/performance.md, "Text cells inline").
pub type Text = compact_str::CompactString;

/// One cell. `Null` sorts lowest (docs/batch.md, deduplication and ordering).
#[derive(Debug, Clone)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Text; up to 24 bytes held inline (see [`Text`]).
    Str(Text),
    Ts(i64),
    /// Days since 1970-01-01.
    Date(i32),
    /// Unscaled value and scale (`Decimal(-1, 2)` is -0.01).
    Decimal(Unscaled, i32),
    Bytes(Box<[u8]>),
    /// A JSON number whose text a double would round (more than 15
    /// significant digits, or an integer beyond 64 bits), kept as sent: a
    /// decimal or text column takes it exactly, anything else as the
    /// double it reads as (docs/types.md, "JSON numbers").
    Number(Box<str>),
}

/// A decimal cell's unscaled value, held as four 32-bit words. Why not an
/// `i128`: its 16-byte alignment made every cell 32 bytes; held like this
/// (4-byte aligned, 20 bytes with the scale) the decimal fits beside the
/// text variant's spare byte and a cell is 24 bytes. A row's cells are
/// most of what a decoded event holds, and every cell is written once
/// per run into memory that a run after an idle spell faults in
/// (docs/performance.md, "24-byte cells").
#[derive(Clone, Copy)]
pub struct Unscaled([u32; 4]);

impl Unscaled {
    pub fn get(self) -> i128 {
        let [w0, w1, w2, w3] = self.0.map(u128::from);
        (w0 | w1 << 32 | w2 << 64 | w3 << 96) as i128
    }
}

impl From<i128> for Unscaled {
    /// The words from least to most significant.
    fn from(v: i128) -> Unscaled {
        let v = v as u128;
        Unscaled([v as u32, (v >> 32) as u32, (v >> 64) as u32, (v >> 96) as u32])
    }
}

impl fmt::Debug for Unscaled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.get())
    }
}

impl Value {
    /// A decimal cell: unscaled value and scale.
    pub fn decimal(unscaled: i128, scale: i32) -> Value {
        Value::Decimal(unscaled.into(), scale)
    }

    /// A binary cell.
    pub fn bytes(b: impl Into<Box<[u8]>>) -> Value {
        Value::Bytes(b.into())
    }

    /// The double a JSON number's text reads as (a [`Value::Number`]'s
    /// text is a checked JSON number, within a double's range).
    fn number_as_float(text: &str) -> f64 {
        text.parse().unwrap_or(f64::NAN)
    }

    /// A [`Value::Number`] as the cell it compares as: its exact decimal
    /// within 38 digits, else its double.
    fn number_as_cell(text: &str) -> Value {
        match decimal::parse(text) {
            Some((v, s)) => Value::decimal(v, s),
            None => Value::Float(Value::number_as_float(text)),
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The kind of value (a decimal's precision is its digit count).
    pub fn dtype(&self) -> Option<DType> {
        Some(match self {
            Value::Null => return None,
            Value::Bool(_) => DType::Bool,
            Value::Int(_) => DType::Int,
            Value::Float(_) | Value::Number(_) => DType::Float,
            Value::Str(_) => DType::Str,
            Value::Ts(_) => DType::Ts,
            Value::Date(_) => DType::Date,
            Value::Decimal(v, s) => {
                let scale = (*s).clamp(0, decimal::MAX_PRECISION as i32) as u8;
                let precision = decimal::digits(v.get()).max(scale as u32).max(1);
                DType::Decimal {
                    precision: precision.min(decimal::MAX_PRECISION as u32) as u8,
                    scale,
                }
            }
            Value::Bytes(_) => DType::Binary,
        })
    }

    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) | Value::Float(_) | Value::Decimal(..) | Value::Number(_) => 2,
            Value::Ts(_) | Value::Date(_) => 3,
            Value::Str(_) => 4,
            Value::Bytes(_) => 5,
        }
    }

    /// Total order: NULL lowest, numbers compared numerically across
    /// integer, float and decimal (exactly between integers and decimals),
    /// dates as their midnight.
    pub fn total_cmp(&self, other: &Value) -> Ordering {
        use Value::*;
        match (self, other) {
            (Null, Null) => Ordering::Equal,
            (Bool(a), Bool(b)) => a.cmp(b),
            (Int(a), Int(b)) => a.cmp(b),
            (Float(a), Float(b)) => a.total_cmp(b),
            (Int(a), Float(b)) => (*a as f64).total_cmp(b),
            (Float(a), Int(b)) => a.total_cmp(&(*b as f64)),
            (Decimal(a, sa), Decimal(b, sb)) => decimal::cmp(a.get(), *sa, b.get(), *sb),
            (Decimal(a, sa), Int(b)) => decimal::cmp(a.get(), *sa, *b as i128, 0),
            (Int(a), Decimal(b, sb)) => decimal::cmp(*a as i128, 0, b.get(), *sb),
            (Decimal(a, sa), Float(b)) => decimal::to_f64(a.get(), *sa).total_cmp(b),
            (Float(a), Decimal(b, sb)) => a.total_cmp(&decimal::to_f64(b.get(), *sb)),
            (Ts(a), Ts(b)) => a.cmp(b),
            (Date(a), Date(b)) => a.cmp(b),
            (Date(a), Ts(b)) => date_to_ts(*a).cmp(b),
            (Ts(a), Date(b)) => a.cmp(&date_to_ts(*b)),
            (Str(a), Str(b)) => a.cmp(b),
            (Bytes(a), Bytes(b)) => a.cmp(b),
            (Number(a), _) => Value::number_as_cell(a).total_cmp(other),
            (_, Number(b)) => self.total_cmp(&Value::number_as_cell(b)),
            _ => self.rank().cmp(&other.rank()),
        }
    }

    /// NULL-safe equality used for change detection and key matching.
    pub fn same(&self, other: &Value) -> bool {
        self.total_cmp(other) == Ordering::Equal && self.is_null() == other.is_null()
    }

    /// Appends a self-delimiting, type-tagged encoding. Used for key bytes,
    /// change hashes and surrogate keys, so it must never change meaning.
    /// Key columns read straight from Arrow use the same encoders
    /// ([`encode_int`], [`encode_str`]). A decimal column's values all
    /// have the column's scale, so equal values encode equally.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Null => out.push(tag::NULL),
            Value::Bool(b) => {
                out.push(tag::BOOL);
                out.push(*b as u8);
            }
            Value::Int(i) => encode_int(*i, out),
            Value::Float(f) => {
                out.push(tag::FLOAT);
                // -0.0 and 0.0 are the same value for change detection.
                let f = if *f == 0.0 { 0.0 } else { *f };
                out.extend_from_slice(&f.to_bits().to_be_bytes());
            }
            Value::Str(s) => encode_str(s, out),
            Value::Ts(t) => {
                out.push(tag::TS);
                out.extend_from_slice(&t.to_be_bytes());
            }
            Value::Date(d) => {
                out.push(tag::DATE);
                out.extend_from_slice(&d.to_be_bytes());
            }
            Value::Decimal(v, s) => {
                out.push(tag::DECIMAL);
                out.extend_from_slice(&s.to_be_bytes());
                out.extend_from_slice(&v.get().to_be_bytes());
            }
            Value::Bytes(b) => {
                out.push(tag::BYTES);
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                out.extend_from_slice(b);
            }
            // As the double another JSON reader gives (cells are typed
            // before hashes and keys are taken; this is for completeness).
            Value::Number(t) => Value::Float(Value::number_as_float(t)).encode(out),
        }
    }

    /// Decodes bytes written by [`Value::encode`] (a whole key) back into
    /// values; None if they are not such an encoding.
    pub fn decode_all(mut bytes: &[u8]) -> Option<Vec<Value>> {
        fn take<const N: usize>(b: &mut &[u8]) -> Option<[u8; N]> {
            let (head, rest) = b.split_at_checked(N)?;
            *b = rest;
            head.try_into().ok()
        }
        fn take_n<'a>(b: &mut &'a [u8]) -> Option<&'a [u8]> {
            let n = u32::from_be_bytes(take::<4>(b)?) as usize;
            let (head, rest) = b.split_at_checked(n)?;
            *b = rest;
            Some(head)
        }
        let mut out = vec![];
        while let Some((&t, rest)) = bytes.split_first() {
            bytes = rest;
            let b = &mut bytes;
            out.push(match t {
                tag::NULL => Value::Null,
                tag::BOOL => Value::Bool(take::<1>(b)?[0] != 0),
                tag::INT => Value::Int(i64::from_be_bytes(take(b)?)),
                tag::FLOAT => Value::Float(f64::from_bits(u64::from_be_bytes(take(b)?))),
                tag::STR => Value::Str(Text::from_utf8(take_n(b)?).ok()?),
                tag::TS => Value::Ts(i64::from_be_bytes(take(b)?)),
                tag::DATE => Value::Date(i32::from_be_bytes(take(b)?)),
                tag::DECIMAL => {
                    let s = i32::from_be_bytes(take(b)?);
                    Value::decimal(i128::from_be_bytes(take(b)?), s)
                }
                tag::BYTES => Value::bytes(take_n(b)?),
                _ => return None,
            });
        }
        Some(out)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Converts to `t`, or explains why not. NULL converts to anything.
    /// Conversions are exact: a value that would lose digits, a time of
    /// day or its meaning is refused.
    pub fn convert(self, t: DType) -> Result<Value, String> {
        use Value::*;
        // An instant or day no Delta column holds is refused whatever the
        // column (as text it would be a number no reader takes for it).
        let beyond = match self {
            Ts(us) => !temporal::TS_RANGE.contains(&us),
            Date(d) => !temporal::DATE_RANGE.contains(&d),
            _ => false,
        };
        if beyond {
            return Err(beyond_range(&self));
        }
        let out = match (self, t) {
            (Null, _) => Null,
            (v @ Bool(_), DType::Bool) => v,
            (v @ Int(_), DType::Int) => v,
            (v @ Float(_), DType::Float) => v,
            (v @ Str(_), DType::Str) => v,
            (v @ Ts(_), DType::Ts) => v,
            (v @ Date(_), DType::Date) => v,
            (v @ Bytes(_), DType::Binary) => v,
            (Int(i), DType::Float) => Float(i as f64),
            // Exactly as sent into decimals, integers and text; a double
            // elsewhere, as any other JSON number.
            (Number(n), DType::Decimal { .. }) => {
                return parse_as(&n, t).ok_or_else(|| format!("{n} does not fit {t}"))
            }
            (Number(n), DType::Int) => Int(decimal::parse(&n)
                .and_then(|(v, s)| decimal::rescale(v, s, 0))
                .and_then(|v| i64::try_from(v).ok())
                .ok_or_else(|| format!("{n} is not an integer"))?),
            (Number(n), DType::Str) => Str(n.as_ref().into()),
            (Number(n), t) => return Float(Value::number_as_float(&n)).convert(t),
            (Float(f), DType::Int) if f.fract() == 0.0 && f.abs() < 9.0e15 => Int(f as i64),
            (Decimal(v, s), DType::Decimal { precision, scale }) => {
                Value::decimal(decimal::fit(v.get(), s, precision, scale)?, scale as i32)
            }
            (Int(i), DType::Decimal { precision, scale }) => {
                Value::decimal(decimal::fit(i as i128, 0, precision, scale)?, scale as i32)
            }
            (Float(f), DType::Decimal { precision, scale }) => {
                let (v, s) = decimal::from_f64(f).ok_or_else(|| format!("{f} is not a decimal"))?;
                Value::decimal(decimal::fit(v, s, precision, scale)?, scale as i32)
            }
            (Decimal(v, s), DType::Int) => Int(decimal::rescale(v.get(), s, 0)
                .and_then(|v| i64::try_from(v).ok())
                .ok_or_else(|| format!("{} is not an integer", decimal::format(v.get(), s)))?),
            // Tables written before exact decimals and dates (docs/types.md,
            // tables from older versions): a float column takes decimals as
            // floats, a timestamp column takes dates as their midnight.
            (Decimal(v, s), DType::Float) => Float(decimal::to_f64(v.get(), s)),
            (Date(d), DType::Ts) => Ts(date_to_ts(d)),
            (Ts(t), DType::Date) => {
                Date(ts_to_date(t).ok_or_else(|| format!("{} is not a date", format_ts(t)))?)
            }
            (Int(d), DType::Date) => {
                Date(i32::try_from(d).map_err(|_| format!("{d} days is not a date"))?)
            }
            (Int(i), DType::Time) => Str(format_time(i).into()),
            (Int(i), DType::Ts) => Ts(i),
            (Bytes(b), DType::Str) => {
                Str(base64::engine::general_purpose::STANDARD.encode(b).into())
            }
            (Str(s), t) => {
                return parse_as(&s, t).ok_or_else(|| format!("{s:?} is not a valid {t}"))
            }
            (v, DType::Str) => Str(v.to_compact_string()),
            (v, t) => return Err(format!("{v} cannot be converted to {t}")),
        };
        match out {
            Ts(us) if !temporal::TS_RANGE.contains(&us) => Err(beyond_range(&out)),
            Date(d) if !temporal::DATE_RANGE.contains(&d) => Err(beyond_range(&out)),
            out => Ok(out),
        }
    }
}

/// Why a timestamp or date beyond the years 1-9999 is refused.
fn beyond_range(v: &Value) -> String {
    match v {
        Value::Date(d) => {
            format!("{d} days since 1970 is outside the years 1-9999 a Delta date holds")
        }
        Value::Ts(us) => {
            format!(
                "{us} microseconds since 1970 is outside the years 1-9999 a Delta timestamp holds"
            )
        }
        other => format!("{other} is outside the years 1-9999"),
    }
}

/// NULL-safe equality (`NULL = NULL`), as change detection needs.
impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.same(other)
    }
}

/// The type tags of [`Value::encode`], one byte before each value.
mod tag {
    pub const NULL: u8 = 0;
    pub const BOOL: u8 = 1;
    pub const INT: u8 = 2;
    pub const FLOAT: u8 = 3;
    pub const STR: u8 = 4;
    pub const TS: u8 = 5;
    pub const DATE: u8 = 6;
    pub const DECIMAL: u8 = 7;
    pub const BYTES: u8 = 8;
}

/// Appends an integer exactly as [`Value::encode`] encodes `Value::Int`.
#[inline]
pub fn encode_int(i: i64, out: &mut Vec<u8>) {
    out.push(tag::INT);
    out.extend_from_slice(&i.to_be_bytes());
}

/// Appends a string exactly as [`Value::encode`] encodes `Value::Str`.
#[inline]
pub fn encode_str(s: &str, out: &mut Vec<u8>) {
    out.push(tag::STR);
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => f.write_str(s),
            Value::Ts(t) => f.write_str(&format_ts(*t)),
            Value::Date(d) => f.write_str(&format_date(*d)),
            Value::Decimal(v, s) => f.write_str(&decimal::format(v.get(), *s)),
            Value::Bytes(b) => f.write_str(&base64::engine::general_purpose::STANDARD.encode(b)),
            Value::Number(n) => f.write_str(n),
        }
    }
}

/// Parses a text cell as `t`. Timestamps accept RFC 3339, `YYYY-MM-DD HH:MM:SS[.f]`
/// (taken as UTC) and plain dates (midnight UTC); decimals plain or
/// exponent notation, exactly; times `HH:MM:SS[.f]`.
pub fn parse_as(s: &str, t: DType) -> Option<Value> {
    let s = s.trim();
    Some(match t {
        DType::Str => Value::Str(s.into()),
        DType::Int => Value::Int(parse_int(s)?),
        DType::Float => Value::Float(parse_float(s).or_else(|| non_finite(s))?),
        DType::Bool => Value::Bool(parse_bool(s)?),
        DType::Ts => Value::Ts(parse_ts(s)?),
        DType::Date => Value::Date(parse_date(s).or_else(|| ts_to_date(parse_ts(s)?))?),
        DType::Time => Value::Str(format_time(parse_time(s)?).into()),
        DType::Decimal { precision, scale } => {
            let (v, sc) = decimal::parse(s)?;
            Value::decimal(decimal::fit(v, sc, precision, scale).ok()?, scale as i32)
        }
        DType::Binary => Value::bytes(base64::engine::general_purpose::STANDARD.decode(s).ok()?),
    })
}

pub fn parse_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

pub fn parse_float(s: &str) -> Option<f64> {
    // Only decimal notation: "nan", "inf" and friends stay strings.
    if !s.bytes().any(|b| b.is_ascii_digit())
        || !s.bytes().all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
    {
        return None;
    }
    s.parse().ok()
}

/// A double that is not a number, as text: Jackson (so Kafka Connect's JSON
/// converter) writes a PostgreSQL `NaN` or `Infinity` as the strings
/// `"NaN"`, `"Infinity"`, `"-Infinity"`. Taken only where the column is
/// a double already: inference keeps such text a string ([`parse_float`]).
fn non_finite(s: &str) -> Option<f64> {
    let (negative, word) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let infinite = word.eq_ignore_ascii_case("infinity") || word.eq_ignore_ascii_case("inf");
    match (infinite, negative) {
        (true, false) => Some(f64::INFINITY),
        (true, true) => Some(f64::NEG_INFINITY),
        (false, _) if word.eq_ignore_ascii_case("nan") && word.len() == s.len() => Some(f64::NAN),
        _ => None,
    }
}

pub fn parse_bool(s: &str) -> Option<bool> {
    if s.eq_ignore_ascii_case("true") {
        Some(true)
    } else if s.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// Infers the narrowest type of a text cell (empty cells are NULL and carry no type).
/// JSON text that is a timestamp (what [`infer`] calls one): a cheap look
/// at its shape first, since most text is not.
pub fn looks_like_ts(s: &str) -> bool {
    // Every form `parse_ts` takes starts with a digit and is 8 bytes or more.
    let b = s.as_bytes();
    b.len() >= 8 && b[0].is_ascii_digit() && parse_ts(s).is_some()
}

pub fn infer(s: &str) -> Option<DType> {
    if s.is_empty() {
        None
    } else if parse_int(s).is_some() {
        Some(DType::Int)
    } else if parse_float(s).is_some() {
        Some(DType::Float)
    } else if parse_bool(s).is_some() {
        Some(DType::Bool)
    } else if parse_ts(s).is_some() {
        Some(DType::Ts)
    } else {
        Some(DType::Str)
    }
}

/// The type that holds both: int widens to float, decimals of one scale
/// widen to the larger precision, anything else mixed is a string.
pub fn unify(a: Option<DType>, b: Option<DType>) -> Option<DType> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(x), Some(y)) if x == y => Some(x),
        (Some(DType::Int), Some(DType::Float)) | (Some(DType::Float), Some(DType::Int)) => {
            Some(DType::Float)
        }
        (
            Some(DType::Decimal { precision: p, scale: s }),
            Some(DType::Decimal { precision: q, scale: t }),
        ) => {
            // The smallest type holding both exactly.
            let scale = s.max(t);
            let int = (p - s).max(q - t);
            match decimal_type((int + scale) as u32, scale as i32) {
                Ok(d) => Some(d),
                Err(_) => Some(DType::Str),
            }
        }
        _ => Some(DType::Str),
    }
}

/// Column `i` of a row: NULL past its last cell. A row holds the columns
/// up to its last field, not the table's whole width (docs/bad-input.md,
/// width), and rows written before a column was added end before it.
#[inline]
pub fn cell(row: &[Value], i: usize) -> &Value {
    row.get(i).unwrap_or(&Value::Null)
}

/// Sets column `i` of a row, growing the row to it first (see [`cell`]).
pub fn set_cell(row: &mut Vec<Value>, i: usize, v: Value) {
    if row.len() <= i {
        row.resize(i + 1, Value::Null);
    }
    row[i] = v;
}

/// Compares two value slices column by column (composite sequences, docs/batch.md).
pub fn cmp_slices(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = x.total_cmp(y);
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests;
