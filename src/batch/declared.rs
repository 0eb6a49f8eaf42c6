//! Declared column types: what a message's schema (the Kafka Connect
//! wrapper, later Avro) and the config's `columns:` say a column is, and
//! the rules for a declaration that differs from the stored column
//! (docs/types.md, declared types win; type changes).
//!
//! Kept apart from the typing loop because these are the rules a user
//! reasons about: which declaration wins, which change widens a column,
//! which one dead-letters the row.

use crate::decode::Declared;
use crate::value::decimal::{DEFAULT_VARIABLE_SCALE, MAX_PRECISION};
use crate::value::DType;

/// The column type a schema declaration stands for. A VariableScaleDecimal
/// takes the scale `columns:` configures (or text, when configured so),
/// else decimal(38, 18). Err: a type no Delta column holds exactly.
pub fn resolve(d: &Declared, configured: Option<DType>) -> Result<DType, String> {
    match d {
        Declared::Exact(t) => Ok(*t),
        Declared::VariableScaleDecimal => Ok(match configured {
            Some(t @ (DType::Decimal { .. } | DType::Str)) => t,
            _ => DType::Decimal { precision: MAX_PRECISION, scale: DEFAULT_VARIABLE_SCALE },
        }),
        Declared::Unstorable(e) => Err(e.clone()),
    }
}

/// The schema-declared type of each column in a batch: the first message
/// that declares the column decides; a decimal declared later with a
/// larger precision at the same scale widens it (the batch's widest).
pub fn batch_types<'a>(
    declarations: impl Iterator<Item = &'a [(String, Declared)]>,
    configured: &[(String, DType)],
) -> Vec<(String, DType)> {
    let mut out: Vec<(String, DType)> = vec![];
    let mut last: &[(String, Declared)] = &[];
    for row in declarations {
        // Messages of one schema declare the same: each schema is read once.
        if std::ptr::eq(row, last) || row == last {
            continue;
        }
        last = row;
        for (name, d) in row {
            let conf = configured.iter().find(|(n, _)| n == name).map(|(_, t)| *t);
            let Ok(t) = resolve(d, conf) else { continue };
            match out.iter_mut().find(|(n, _)| n == name) {
                None => out.push((name.clone(), t)),
                Some((_, have)) => {
                    if let Some(w) = widened(*have, t) {
                        *have = w;
                    }
                }
            }
        }
    }
    out
}

/// The wider decimal when `declared` grows `stored`'s precision at the
/// same scale (within 38 digits): the column widens without losing data.
pub fn widened(stored: DType, declared: DType) -> Option<DType> {
    match (stored, declared) {
        (DType::Decimal { precision: p, scale: s }, DType::Decimal { precision: q, scale: t })
            if s == t && q > p && q <= MAX_PRECISION =>
        {
            Some(declared)
        }
        _ => None,
    }
}

/// May a value declared `declared` land in a column stored as `stored`?
/// The same type (all integer widths are one), a decimal of the column's
/// scale and no larger precision, a VariableScaleDecimal in a decimal or
/// text column (converted exactly, or a dead letter). In a table written
/// by an older version (`exact: false`) also what that version made of
/// the declaration: floats for decimals, timestamps for dates, text or
/// integers for times, text for anything (docs/types.md, tables from
/// older versions).
pub fn compatible(declared: &Declared, resolved: DType, stored: DType, exact: bool) -> bool {
    let same = match (resolved, stored.storage()) {
        (DType::Decimal { precision: p, scale: s }, DType::Decimal { precision: q, scale: t }) => {
            s == t && p <= q || *declared == Declared::VariableScaleDecimal
        }
        (DType::Time, DType::Str) => true,
        (_, DType::Str) if *declared == Declared::VariableScaleDecimal => true,
        (r, s) => r.storage() == s,
    };
    same || (!exact && legacy(resolved, stored.storage()))
}

/// What older versions stored a declared type as.
fn legacy(declared: DType, stored: DType) -> bool {
    matches!(
        (declared, stored),
        (DType::Decimal { .. }, DType::Float)
            | (DType::Date, DType::Ts)
            | (DType::Time, DType::Int)
            | (DType::Int, DType::Float)
            | (_, DType::Str)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(precision: u8, scale: u8) -> DType {
        DType::Decimal { precision, scale }
    }

    #[test]
    fn types_a_variable_scale_decimal_with_the_configured_scale_or_18() {
        let vsd = Declared::VariableScaleDecimal;
        assert_eq!(resolve(&vsd, None), Ok(dec(38, 18)));
        assert_eq!(resolve(&vsd, Some(dec(38, 6))), Ok(dec(38, 6)));
        assert_eq!(resolve(&vsd, Some(DType::Str)), Ok(DType::Str));
        assert!(resolve(&Declared::Unstorable("wide".into()), None).is_err());
    }

    #[test]
    fn types_the_first_declaration_wins_and_decimals_widen_within_a_batch() {
        let rows = [
            vec![("a".to_string(), Declared::Exact(dec(10, 2)))],
            vec![
                ("a".to_string(), Declared::Exact(dec(12, 2))),
                ("b".into(), Declared::Exact(DType::Int)),
            ],
            vec![
                ("a".to_string(), Declared::Exact(dec(11, 3))),
                ("b".into(), Declared::Exact(DType::Str)),
            ],
        ];
        let got = batch_types(rows.iter().map(|r| r.as_slice()), &[]);
        assert_eq!(got, vec![("a".to_string(), dec(12, 2)), ("b".to_string(), DType::Int)]);
    }

    #[test]
    fn types_only_a_same_scale_precision_increase_widens_a_column() {
        assert_eq!(widened(dec(10, 2), dec(12, 2)), Some(dec(12, 2)));
        assert_eq!(widened(dec(12, 2), dec(10, 2)), None, "narrower: no change");
        assert_eq!(widened(dec(10, 2), dec(12, 3)), None, "a scale change is a type change");
        assert_eq!(widened(DType::Int, DType::Int), None);
    }

    #[test]
    fn types_any_other_change_is_refused_in_tables_of_this_version() {
        let ex = |t| Declared::Exact(t);
        assert!(compatible(&ex(DType::Int), DType::Int, DType::Int, true));
        assert!(compatible(&ex(dec(10, 2)), dec(10, 2), dec(12, 2), true));
        assert!(!compatible(&ex(dec(10, 3)), dec(10, 3), dec(12, 2), true));
        assert!(!compatible(&ex(DType::Int), DType::Int, DType::Str, true));
        assert!(!compatible(&ex(DType::Str), DType::Str, DType::Int, true));
        assert!(!compatible(&ex(dec(10, 2)), dec(10, 2), DType::Float, true));
        assert!(compatible(&ex(DType::Time), DType::Time, DType::Str, true));
        let vsd = Declared::VariableScaleDecimal;
        assert!(compatible(&vsd, dec(38, 18), dec(38, 6), true));
        // Older tables keep what older versions made of the declarations.
        assert!(compatible(&ex(dec(10, 2)), dec(10, 2), DType::Float, false));
        assert!(compatible(&ex(DType::Date), DType::Date, DType::Ts, false));
        assert!(compatible(&ex(DType::Int), DType::Int, DType::Str, false));
        assert!(!compatible(&ex(DType::Str), DType::Str, DType::Int, false));
    }
}
