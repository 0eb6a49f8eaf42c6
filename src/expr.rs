//! `delete_when` and source filters: a small SQL predicate language.
//!
//! Parsing is delegated to `sqlparser` (so quoting, precedence and keywords
//! behave like SQL) and the result is lowered into a tiny AST that we evaluate
//! per row with SQL three-valued logic: a predicate selects a row only when it
//! is TRUE, never when it is NULL/unknown. Anything outside the supported
//! subset is rejected at config load, not at run time.

use std::cmp::Ordering;

use sqlparser::ast::{self, BinaryOperator, UnaryOperator};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use crate::value::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A column, or a dotted path into the event envelope (`source.lsn`).
    Column(Vec<String>),
    Lit(Lit),
    Cmp(Box<Expr>, CmpOp, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    IsNull(Box<Expr>, bool),
    In(Box<Expr>, Vec<Expr>, bool),
    Between(Box<Expr>, Box<Expr>, Box<Expr>, bool),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Parses a SQL predicate; the error says what was not understood.
pub fn parse(sql: &str) -> Result<Expr, String> {
    let mut parser =
        Parser::new(&GenericDialect {}).try_with_sql(sql).map_err(|e| e.to_string())?;
    let e = parser.parse_expr().map_err(|e| e.to_string())?;
    let rest = parser.peek_token();
    if rest.token != sqlparser::tokenizer::Token::EOF {
        return Err(format!("unexpected `{}` after the predicate", rest.token));
    }
    lower(&e)
}

fn lower(e: &ast::Expr) -> Result<Expr, String> {
    use ast::Expr as A;
    let b = |e: &ast::Expr| lower(e).map(Box::new);
    Ok(match e {
        A::Identifier(i) => Expr::Column(vec![i.value.clone()]),
        A::CompoundIdentifier(parts) => Expr::Column(parts.iter().map(|i| i.value.clone()).collect()),
        A::Value(v) => Expr::Lit(lit(&v.value)?),
        A::Nested(inner) => lower(inner)?,
        A::UnaryOp { op: UnaryOperator::Not, expr } => Expr::Not(b(expr)?),
        A::UnaryOp { op: UnaryOperator::Minus, expr } => match lower(expr)? {
            Expr::Lit(Lit::Int(i)) => Expr::Lit(Lit::Int(-i)),
            Expr::Lit(Lit::Float(f)) => Expr::Lit(Lit::Float(-f)),
            _ => return Err("unary minus applies to numbers only".into()),
        },
        A::IsNull(x) => Expr::IsNull(b(x)?, false),
        A::IsNotNull(x) => Expr::IsNull(b(x)?, true),
        A::IsTrue(x) => Expr::Cmp(b(x)?, CmpOp::Eq, Box::new(Expr::Lit(Lit::Bool(true)))),
        A::IsFalse(x) => Expr::Cmp(b(x)?, CmpOp::Eq, Box::new(Expr::Lit(Lit::Bool(false)))),
        A::InList { expr, list, negated } => Expr::In(b(expr)?, list.iter().map(lower).collect::<Result<_, _>>()?, *negated),
        A::Between { expr, negated, low, high } => Expr::Between(b(expr)?, b(low)?, b(high)?, *negated),
        A::BinaryOp { left, op, right } => {
            let (l, r) = (b(left)?, b(right)?);
            match op {
                BinaryOperator::And => Expr::And(l, r),
                BinaryOperator::Or => Expr::Or(l, r),
                BinaryOperator::Eq => Expr::Cmp(l, CmpOp::Eq, r),
                BinaryOperator::NotEq => Expr::Cmp(l, CmpOp::Ne, r),
                BinaryOperator::Lt => Expr::Cmp(l, CmpOp::Lt, r),
                BinaryOperator::LtEq => Expr::Cmp(l, CmpOp::Le, r),
                BinaryOperator::Gt => Expr::Cmp(l, CmpOp::Gt, r),
                BinaryOperator::GtEq => Expr::Cmp(l, CmpOp::Ge, r),
                other => return Err(format!("operator `{other}` is not supported")),
            }
        }
        other => return Err(format!("`{other}` is not supported (use comparisons, IN, BETWEEN, IS [NOT] NULL, AND, OR, NOT)")),
    })
}

fn lit(v: &ast::Value) -> Result<Lit, String> {
    Ok(match v {
        ast::Value::Null => Lit::Null,
        ast::Value::Boolean(b) => Lit::Bool(*b),
        ast::Value::Number(n, _) => match n.parse::<i64>() {
            Ok(i) => Lit::Int(i),
            Err(_) => Lit::Float(n.parse().map_err(|_| format!("bad number {n}"))?),
        },
        ast::Value::SingleQuotedString(s) => Lit::Str(s.clone()),
        other => {
            return Err(format!("literal `{other}` is not supported; strings use single quotes"))
        }
    })
}

impl Expr {
    /// Every column path the predicate reads.
    pub fn columns(&self, out: &mut Vec<Vec<String>>) {
        match self {
            Expr::Column(p) => out.push(p.clone()),
            Expr::Lit(_) => {}
            Expr::Cmp(a, _, b) | Expr::And(a, b) | Expr::Or(a, b) => {
                a.columns(out);
                b.columns(out);
            }
            Expr::Not(a) | Expr::IsNull(a, _) => a.columns(out),
            Expr::In(a, l, _) => {
                a.columns(out);
                l.iter().for_each(|x| x.columns(out));
            }
            Expr::Between(a, l, h, _) => {
                a.columns(out);
                l.columns(out);
                h.columns(out);
            }
        }
    }

    /// True only when the predicate is TRUE for the row (NULL is not true).
    pub fn matches(&self, get: &dyn Fn(&[String]) -> Value) -> bool {
        self.truth(get) == Some(true)
    }

    fn value(&self, get: &dyn Fn(&[String]) -> Value) -> Value {
        match self {
            Expr::Column(p) => get(p),
            Expr::Lit(l) => match l {
                Lit::Null => Value::Null,
                Lit::Bool(b) => Value::Bool(*b),
                Lit::Int(i) => Value::Int(*i),
                Lit::Float(f) => Value::Float(*f),
                Lit::Str(s) => Value::Str(s.as_str().into()),
            },
            other => match other.truth(get) {
                Some(b) => Value::Bool(b),
                None => Value::Null,
            },
        }
    }

    fn truth(&self, get: &dyn Fn(&[String]) -> Value) -> Option<bool> {
        match self {
            Expr::And(a, b) => match (a.truth(get), b.truth(get)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
            Expr::Or(a, b) => match (a.truth(get), b.truth(get)) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
            Expr::Not(a) => a.truth(get).map(|b| !b),
            Expr::IsNull(a, negated) => Some(a.value(get).is_null() != *negated),
            Expr::Cmp(a, op, b) => {
                let o = sql_cmp(&a.value(get), &b.value(get))?;
                Some(match op {
                    CmpOp::Eq => o == Ordering::Equal,
                    CmpOp::Ne => o != Ordering::Equal,
                    CmpOp::Lt => o == Ordering::Less,
                    CmpOp::Le => o != Ordering::Greater,
                    CmpOp::Gt => o == Ordering::Greater,
                    CmpOp::Ge => o != Ordering::Less,
                })
            }
            Expr::In(a, list, negated) => {
                let v = a.value(get);
                let mut unknown = false;
                for item in list {
                    match sql_cmp(&v, &item.value(get)) {
                        Some(Ordering::Equal) => return Some(!negated),
                        None => unknown = true,
                        _ => {}
                    }
                }
                if unknown {
                    None
                } else {
                    Some(*negated)
                }
            }
            Expr::Between(a, lo, hi, negated) => {
                let v = a.value(get);
                let ge = sql_cmp(&v, &lo.value(get))? != Ordering::Less;
                let le = sql_cmp(&v, &hi.value(get))? != Ordering::Greater;
                Some((ge && le) != *negated)
            }
            Expr::Column(_) | Expr::Lit(_) => match self.value(get) {
                Value::Bool(b) => Some(b),
                _ => None,
            },
        }
    }
}

/// SQL comparison: NULL is unknown; a number compared with its text form
/// (CSV `op` columns, JSON strings) compares as text.
fn sql_cmp(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Null, _) | (_, Value::Null) => None,
        (Value::Str(s), other) | (other, Value::Str(s)) if !matches!(other, Value::Str(_)) => {
            let o = s.as_str().cmp(other.to_string().as_str());
            Some(if matches!(a, Value::Str(_)) { o } else { o.reverse() })
        }
        _ => Some(a.total_cmp(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(pairs: &'a [(&'a str, Value)]) -> impl Fn(&[String]) -> Value + 'a {
        move |p: &[String]| {
            let name = p.join(".");
            pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()).unwrap_or(Value::Null)
        }
    }

    #[test]
    fn delete_when_equality_on_op() {
        let e = parse("op = 'D'").unwrap();
        assert!(e.matches(&row(&[("op", Value::Str("D".into()))])));
        assert!(!e.matches(&row(&[("op", Value::Str("U".into()))])));
        assert!(!e.matches(&row(&[])), "NULL op is not a delete");
    }

    #[test]
    fn delete_when_in_is_null_and_or_not() {
        let e = parse("op IN ('d', 'D') OR (deleted IS NOT NULL AND NOT deleted = false)").unwrap();
        assert!(e.matches(&row(&[("op", Value::Str("d".into()))])));
        assert!(e.matches(&row(&[("deleted", Value::Bool(true))])));
        assert!(!e.matches(&row(&[("deleted", Value::Bool(false))])));
        let n = parse("x NOT IN (1, 2)").unwrap();
        assert!(n.matches(&row(&[("x", Value::Int(3))])));
        assert!(!n.matches(&row(&[])));
    }

    #[test]
    fn delete_when_reads_dotted_paths_and_numbers() {
        let e = parse("source.lsn >= 10 AND __deleted = 'true'").unwrap();
        let cells = [("source.lsn", Value::Int(12)), ("__deleted", Value::Str("true".into()))];
        assert!(e.matches(&row(&cells)));
        let b = parse("amount BETWEEN -1.5 AND 2").unwrap();
        assert!(b.matches(&row(&[("amount", Value::Float(0.5))])));
    }

    #[test]
    fn unparsable_delete_when_is_rejected() {
        assert!(parse("op = ").is_err());
        assert!(parse("op == 'D' garbage").is_err());
        assert!(parse("lower(op) = 'd'").is_err());
    }
}
