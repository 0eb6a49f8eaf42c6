//! Typed cell values shared by every stage.
//!
//! The merge engine compares, hashes and orders individual cells (sequence
//! columns, business keys, tracked columns), so values are a small closed enum
//! rather than Arrow arrays: the rules of docs/batch.md, scd1.md, scd2.md and snapshot.md are per key, and a
//! per-key representation keeps them readable and unit-testable. Conversion to
//! and from Arrow happens only at the table edge (`table` module).

use std::cmp::Ordering;
use std::fmt;

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone, Utc};

/// Column types a table can hold. Business keys may not be `Float`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    Bool,
    Int,
    Float,
    Str,
    /// UTC timestamp, microseconds since the epoch.
    Ts,
}

impl DType {
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "bool" | "boolean" => DType::Bool,
            "int" | "integer" | "long" | "bigint" | "int64" => DType::Int,
            "float" | "double" | "float64" | "real" => DType::Float,
            "string" | "str" | "text" | "utf8" => DType::Str,
            "timestamp" | "datetime" | "date" => DType::Ts,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "boolean",
            DType::Int => "integer",
            DType::Float => "float",
            DType::Str => "string",
            DType::Ts => "timestamp",
        }
    }
}

/// One cell. `Null` sorts lowest (docs/batch.md, deduplication and ordering).
#[derive(Debug, Clone)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ts(i64),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn dtype(&self) -> Option<DType> {
        Some(match self {
            Value::Null => return None,
            Value::Bool(_) => DType::Bool,
            Value::Int(_) => DType::Int,
            Value::Float(_) => DType::Float,
            Value::Str(_) => DType::Str,
            Value::Ts(_) => DType::Ts,
        })
    }

    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) | Value::Float(_) => 2,
            Value::Ts(_) => 3,
            Value::Str(_) => 4,
        }
    }

    /// Total order: NULL lowest, numbers compared numerically across int/float.
    pub fn total_cmp(&self, other: &Value) -> Ordering {
        use Value::*;
        match (self, other) {
            (Null, Null) => Ordering::Equal,
            (Bool(a), Bool(b)) => a.cmp(b),
            (Int(a), Int(b)) => a.cmp(b),
            (Float(a), Float(b)) => a.total_cmp(b),
            (Int(a), Float(b)) => (*a as f64).total_cmp(b),
            (Float(a), Int(b)) => a.total_cmp(&(*b as f64)),
            (Ts(a), Ts(b)) => a.cmp(b),
            (Str(a), Str(b)) => a.cmp(b),
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
    /// ([`encode_int`], [`encode_str`]).
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
        }
    }

    /// Decodes bytes written by [`Value::encode`] (a whole key) back into
    /// values; None if they are not such an encoding.
    pub fn decode_all(mut bytes: &[u8]) -> Option<Vec<Value>> {
        let mut out = vec![];
        let take = |b: &mut &[u8], n: usize| -> Option<Vec<u8>> {
            let (head, rest) = b.split_at_checked(n)?;
            *b = rest;
            Some(head.to_vec())
        };
        let be8 = |v: Vec<u8>| -> [u8; 8] { v.try_into().expect("8 bytes") };
        while let Some((&t, rest)) = bytes.split_first() {
            bytes = rest;
            out.push(match t {
                tag::NULL => Value::Null,
                tag::BOOL => Value::Bool(take(&mut bytes, 1)?[0] != 0),
                tag::INT => Value::Int(i64::from_be_bytes(be8(take(&mut bytes, 8)?))),
                tag::FLOAT => {
                    Value::Float(f64::from_bits(u64::from_be_bytes(be8(take(&mut bytes, 8)?))))
                }
                tag::STR => {
                    let n = u32::from_be_bytes(take(&mut bytes, 4)?.try_into().expect("4 bytes"))
                        as usize;
                    Value::Str(String::from_utf8(take(&mut bytes, n)?).ok()?)
                }
                tag::TS => Value::Ts(i64::from_be_bytes(be8(take(&mut bytes, 8)?))),
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
    pub fn convert(self, t: DType) -> Result<Value, String> {
        use Value::*;
        let out = match (self, t) {
            (Null, _) => Null,
            (v @ Bool(_), DType::Bool) => v,
            (v @ Int(_), DType::Int) => v,
            (v @ Float(_), DType::Float) => v,
            (v @ Str(_), DType::Str) => v,
            (v @ Ts(_), DType::Ts) => v,
            (Int(i), DType::Float) => Float(i as f64),
            (Float(f), DType::Int) if f.fract() == 0.0 && f.abs() < 9.0e15 => Int(f as i64),
            (Bool(b), DType::Str) => Str(b.to_string()),
            (Int(i), DType::Str) => Str(i.to_string()),
            (Float(f), DType::Str) => Str(f.to_string()),
            (Ts(t), DType::Str) => Str(format_ts(t)),
            (Str(s), t) => {
                return parse_as(&s, t).ok_or_else(|| format!("{s:?} is not a valid {}", t.name()))
            }
            (Int(i), DType::Ts) => Ts(i),
            (v, t) => return Err(format!("{v} cannot be converted to {}", t.name())),
        };
        Ok(out)
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
        }
    }
}

pub fn format_ts(micros: i64) -> String {
    match Utc.timestamp_micros(micros).single() {
        Some(dt) => dt.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        None => micros.to_string(),
    }
}

/// Parses a text cell as `t`. Timestamps accept RFC 3339, `YYYY-MM-DD HH:MM:SS[.f]`
/// (taken as UTC) and plain dates (midnight UTC).
pub fn parse_as(s: &str, t: DType) -> Option<Value> {
    let s = s.trim();
    Some(match t {
        DType::Str => Value::Str(s.to_string()),
        DType::Int => Value::Int(parse_int(s)?),
        DType::Float => Value::Float(parse_float(s)?),
        DType::Bool => Value::Bool(parse_bool(s)?),
        DType::Ts => Value::Ts(parse_ts(s)?),
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

pub fn parse_bool(s: &str) -> Option<bool> {
    if s.eq_ignore_ascii_case("true") {
        Some(true)
    } else if s.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

pub fn parse_ts(s: &str) -> Option<i64> {
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        return Some(dt.with_timezone(&Utc).timestamp_micros());
    }
    for fmt in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(s, fmt) {
            return Some(dt.and_utc().timestamp_micros());
        }
    }
    if s.len() == 10 {
        if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
            return Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_micros());
        }
    }
    None
}

/// Infers the narrowest type of a text cell (empty cells are NULL and carry no type).
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

/// The type that holds both: int widens to float, anything else mixed is a string.
pub fn unify(a: Option<DType>, b: Option<DType>) -> Option<DType> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(x), Some(y)) if x == y => Some(x),
        (Some(DType::Int), Some(DType::Float)) | (Some(DType::Float), Some(DType::Int)) => {
            Some(DType::Float)
        }
        _ => Some(DType::Str),
    }
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
mod tests {
    use super::*;

    #[test]
    fn key_encoding_decodes_back() {
        let vals = vec![
            Value::Str("acc-é".into()),
            Value::Int(-7),
            Value::Null,
            Value::Bool(true),
            Value::Float(2.5),
            Value::Ts(1_700_000_000_000_000),
            Value::Str(String::new()),
        ];
        let mut bytes = vec![];
        vals.iter().for_each(|v| v.encode(&mut bytes));
        let back = Value::decode_all(&bytes).unwrap();
        assert_eq!(back.len(), vals.len());
        assert!(back.iter().zip(&vals).all(|(a, b)| a.same(b)), "{back:?}");
        assert!(
            Value::decode_all(&bytes[..bytes.len() - 1]).is_none(),
            "a truncated key is not a key"
        );
        assert!(Value::decode_all(&[9]).is_none());
    }

    #[test]
    fn null_sorts_lowest() {
        assert_eq!(Value::Null.total_cmp(&Value::Int(i64::MIN)), Ordering::Less);
        assert_eq!(Value::Str("".into()).total_cmp(&Value::Null), Ordering::Greater);
    }

    #[test]
    fn composite_sequences_compare_column_by_column() {
        let a = [Value::Int(1), Value::Int(9)];
        let b = [Value::Int(2), Value::Int(0)];
        assert_eq!(cmp_slices(&a, &b), Ordering::Less);
        let c = [Value::Int(1), Value::Null];
        assert_eq!(cmp_slices(&c, &a), Ordering::Less);
    }

    #[test]
    fn inference_picks_the_narrowest_type() {
        assert_eq!(infer("42"), Some(DType::Int));
        assert_eq!(infer("-4.5"), Some(DType::Float));
        assert_eq!(infer("TRUE"), Some(DType::Bool));
        assert_eq!(infer("2024-01-02"), Some(DType::Ts));
        assert_eq!(infer("2024-01-02T03:04:05Z"), Some(DType::Ts));
        assert_eq!(infer("Köln"), Some(DType::Str));
        assert_eq!(infer("nan"), Some(DType::Str));
        assert_eq!(infer(""), None);
        assert_eq!(unify(Some(DType::Int), Some(DType::Float)), Some(DType::Float));
        assert_eq!(unify(Some(DType::Int), Some(DType::Bool)), Some(DType::Str));
    }

    #[test]
    fn conversion_refuses_lossy_values() {
        assert!(Value::Str("abc".into()).convert(DType::Int).is_err());
        assert!(Value::Float(1.5).convert(DType::Int).is_err());
        assert!(Value::Float(2.0).convert(DType::Int).is_ok());
        assert!(matches!(Value::Int(3).convert(DType::Float), Ok(Value::Float(f)) if f == 3.0));
    }

    #[test]
    fn encoding_distinguishes_types_and_null() {
        let enc = |v: &Value| {
            let mut o = vec![];
            v.encode(&mut o);
            o
        };
        assert_ne!(enc(&Value::Int(1)), enc(&Value::Str("1".into())));
        assert_ne!(enc(&Value::Null), enc(&Value::Str(String::new())));
    }
}
