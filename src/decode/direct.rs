//! The direct path: the shapes CRM streams send — a Debezium envelope
//! whose row images hold scalars, a flat JSON row of scalars — read from
//! the message's bytes into cells in one pass, with nothing in between.
//!
//! Why a reader of our own in front of simd-json (`fast`): simd-json
//! first indexes every structural character of a message, then writes a
//! tape node for every value in it, the `source` block's dozen fields
//! included, and only then does the decoder walk the tape for the few
//! values it keeps. On the bench's narrow Debezium messages that parse
//! alone was about half the decode (docs/performance.md, "The direct
//! reader"). Here a value nobody reads is passed over (a string by a
//! search for its closing quote, a word at a time) and a kept one becomes
//! its cell as it is read.
//!
//! It takes only what it is sure of. Anything else returns None and the
//! tape path reads the message as before: a control character in a string
//! (text the parsers must refuse), a key with an escape, a number beyond
//! f64. A
//! nested value where a cell is kept (an array column) is parsed on its
//! own by serde_json, as the general path would. It also gives up on
//! what the byte scans look for (`scan`: nesting too deep, NUL, a lone
//! surrogate escape), which it meets as it reads: a message it takes
//! needs no scan before it, and one it gives up on is scanned, then read
//! from the tape. The general path (serde_json) stays the reference; the
//! tests hold both readers to it on the same inputs (`decode/tests.rs`).

use super::fast::{listed, skipped, Envelope};
use super::fields::RowNames;
use super::{env_name, json_cell, Env, Fields};
use crate::value::Value;

/// A flat JSON object's fields as cells, in document order; None for
/// anything this reader does not take (see the module comment). Nested
/// `max_depth` levels at most (the object is one).
pub(super) fn object_fields(value: &[u8], max_depth: usize) -> Option<Fields> {
    let mut c = Cursor::new(value, max_depth)?;
    let row = c.row(0)??;
    c.end()?;
    Some(row)
}

/// A Debezium envelope, as `fast::envelope` reads it from a tape: every
/// envelope field `keep` names (all with None), the `after` image, and
/// the `before` image only for a delete. `spare`: each image's room for
/// the envelope columns a table stores beside its fields.
pub(super) fn envelope(
    value: &[u8],
    max_depth: usize,
    keep: Option<&[String]>,
    spare: usize,
) -> Option<Envelope> {
    let mut c = Cursor::new(value, max_depth)?;
    let mut e = Envelope {
        env: Vec::with_capacity(keep.map_or(8, <[String]>::len)),
        ..Envelope::default()
    };
    // Where the last `before` image starts: read once `op` (after it) is known.
    let mut before = None;
    let read = c.object(|c, key| {
        match key {
            "before" => {
                c.spaces();
                before = Some(c.at);
                c.skip()
            }
            "after" => {
                e.after = c.row(spare)?;
                Some(())
            }
            "schema" | "payload" => {
                // The schema wrapper: the general path types its rows.
                e.wrapped = true;
                None
            }
            _ if skipped(keep, key) => c.skip(),
            _ => c.env_field(key, keep.filter(|_| key != "op"), &mut e.env),
        }
    });
    if e.wrapped {
        return Some(e);
    }
    read?;
    c.end()?;
    if let (Some(at), Some("d")) = (before, e.op()) {
        c.at = at;
        e.before = c.row(spare)?;
    }
    Some(e)
}

/// A position in a message known to be UTF-8. Between tokens it passes
/// JSON's whitespace (space, tab, line breaks: a pretty-printed message, a
/// CRLF line); inside a string any control character is left to the tape
/// path, which refuses it.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
    /// How many more levels a skipped value may nest. The objects this
    /// reader keeps are two levels at most (the envelope, a record in
    /// it); counted from there, what it skips is bounded as if at that
    /// depth, which errs on the side of giving up.
    nest: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `value`, if it is UTF-8 (the SIMD check
    /// simd-json also uses). Control characters are found as strings are
    /// read ([`stop`]); outside strings the grammar refuses them.
    fn new(value: &'a [u8], max_depth: usize) -> Option<Cursor<'a>> {
        let text = simdutf8::basic::from_utf8(value).ok()?;
        Some(Cursor { text, at: 0, nest: max_depth.checked_sub(2)? })
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn spaces(&mut self) {
        // One comparison for the usual case, a token right here: JSON's
        // whitespace is all at or below the space.
        while let Some(b) = self.peek().filter(|b| *b <= b' ') {
            if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                return;
            }
            self.at += 1;
        }
    }

    /// Takes `c` after any spaces.
    fn eat(&mut self, c: u8) -> bool {
        self.spaces();
        let found = self.peek() == Some(c);
        self.at += usize::from(found);
        found
    }

    /// Nothing but spaces to the end.
    fn end(&mut self) -> Option<()> {
        self.spaces();
        (self.at == self.text.len()).then_some(())
    }

    /// An object's fields, each read by `field` (which takes the value
    /// after the colon); the cursor is at the object's opening brace.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let key = self.key()?;
            if !self.eat(b':') {
                return None;
            }
            field(self, key)?;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b'}').then_some(());
        }
    }

    /// A key without escapes (a key with one takes the tape path).
    fn key(&mut self) -> Option<&'a str> {
        self.spaces();
        let start = self.at + 1;
        if self.peek()? != b'"' {
            return None;
        }
        let end = stop(self.bytes(), start)?;
        if self.bytes()[end] != b'"' {
            return None;
        }
        self.at = end + 1;
        self.text.get(start..end)
    }

    /// A row image: an object of scalars as cells, named by [`RowNames`],
    /// with room for `spare` more; Some(None) for null.
    fn row(&mut self, spare: usize) -> Option<Option<Fields>> {
        self.spaces();
        if self.peek()? == b'n' {
            return self.literal("null", Value::Null).map(|_| None);
        }
        let mut names = RowNames::start();
        let mut values = Vec::with_capacity(names.expected() + spare);
        self.object(|c, key| {
            names.push(key);
            values.push(c.cell()?);
            Some(())
        })?;
        Some(Some(Fields::new(names.finish(), values)))
    }

    /// Envelope field `name` into `out`; a record (`source`) is flattened
    /// one level, keeping with `Some(paths)` only the fields listed there.
    fn env_field(&mut self, name: &str, keep: Option<&[String]>, out: &mut Env) -> Option<()> {
        self.spaces();
        if self.peek()? != b'{' {
            out.push((env_name(None, name), self.cell()?));
            return Some(());
        }
        self.object(|c, key| match keep.is_none_or(|p| listed(p, name, key)) {
            true => {
                out.push((env_name(Some(name), key), c.cell()?));
                Some(())
            }
            false => c.skip(),
        })
    }

    /// A scalar as a cell, as the general path maps it.
    fn cell(&mut self) -> Option<Value> {
        self.spaces();
        match self.peek()? {
            b'"' => self.string(),
            b't' => self.literal("true", Value::Bool(true)),
            b'f' => self.literal("false", Value::Bool(false)),
            b'n' => self.literal("null", Value::Null),
            b'{' | b'[' => self.nested(),
            _ => self.number()?.cell(self.text),
        }
    }

    /// A nested value (an array, a record) as the general path maps it:
    /// parsed by serde_json, the general path's parser, from its own text
    /// (checked first as it is passed over), then [`json_cell`].
    fn nested(&mut self) -> Option<Value> {
        let start = self.at;
        self.skip()?;
        let v: serde_json::Value = serde_json::from_str(self.text.get(start..self.at)?).ok()?;
        Some(json_cell(&v))
    }

    fn literal(&mut self, word: &str, value: Value) -> Option<Value> {
        let found = self.text.get(self.at..)?.starts_with(word);
        self.at += if found { word.len() } else { 0 };
        found.then_some(value)
    }

    /// A string at its opening quote, escapes decoded.
    fn string(&mut self) -> Option<Value> {
        let start = self.at + 1;
        let end = stop(self.bytes(), start)?;
        if self.bytes()[end] == b'"' {
            self.at = end + 1;
            return Some(Value::Str(self.text.get(start..end)?.into()));
        }
        let mut out = String::from(self.text.get(start..end)?);
        self.at = end;
        loop {
            let (ch, len) = escape(self.bytes(), self.at)?;
            out.push(ch);
            self.at += len;
            let from = self.at;
            let stop = stop(self.bytes(), from)?;
            out.push_str(self.text.get(from..stop)?);
            self.at = stop;
            if self.bytes()[stop] == b'"' {
                self.at += 1;
                return Some(Value::Str(out.as_str().into()));
            }
        }
    }

    /// Passes over any JSON value, checking it is valid JSON.
    fn skip(&mut self) -> Option<()> {
        self.spaces();
        match self.peek()? {
            b'"' => self.skip_string(),
            open @ (b'{' | b'[') => {
                self.nest = self.nest.checked_sub(1)?;
                match open {
                    b'{' => self.object(|c, _| c.skip())?,
                    _ => self.skip_array()?,
                }
                self.nest += 1;
                Some(())
            }
            b't' | b'f' | b'n' => self.cell().map(drop),
            _ => self.number().map(drop),
        }
    }

    fn skip_string(&mut self) -> Option<()> {
        let mut from = self.at + 1;
        loop {
            let stop = stop(self.bytes(), from)?;
            if self.bytes()[stop] == b'"' {
                self.at = stop + 1;
                return Some(());
            }
            from = stop + escape(self.bytes(), stop)?.1;
        }
    }

    fn skip_array(&mut self) -> Option<()> {
        self.at += 1;
        if self.eat(b']') {
            return Some(());
        }
        loop {
            self.skip()?;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b']').then_some(());
        }
    }

    /// A number's text, checked against JSON's grammar (no leading zeros,
    /// digits after a point and in an exponent).
    fn number(&mut self) -> Option<Number> {
        let b = self.bytes();
        let digits_at = |mut i: usize| {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        let start = self.at;
        let negative = b.get(start) == Some(&b'-');
        let int_start = start + usize::from(negative);
        let int_end = match b.get(int_start)? {
            b'0' => int_start + 1,
            b'1'..=b'9' => digits_at(int_start + 1),
            _ => return None,
        };
        let mut end = int_end;
        if b.get(end) == Some(&b'.') {
            let after = digits_at(end + 1);
            if after == end + 1 {
                return None;
            }
            end = after;
        }
        if matches!(b.get(end), Some(b'e' | b'E')) {
            let sign = usize::from(matches!(b.get(end + 1), Some(b'+' | b'-')));
            let after = digits_at(end + 1 + sign);
            if after == end + 1 + sign {
                return None;
            }
            end = after;
        }
        self.at = end;
        Some(Number { start, int_start, int_end, end, negative })
    }
}

/// Where a number's text lies in the message.
struct Number {
    start: usize,
    int_start: usize,
    int_end: usize,
    end: usize,
    negative: bool,
}

impl Number {
    /// The cell serde_json's value maps to: an integer within i64, else a
    /// float; a bare `-0` is the float -0.0. A number a double would round
    /// (more than 15 significant digits, an integer beyond i64) is kept as
    /// its text ([`Value::Number`]): a decimal column takes it exactly.
    /// Numbers beyond f64 are left to the tape path (None).
    fn cell(&self, text: &str) -> Option<Value> {
        if self.end == self.int_end {
            let digits = text.as_bytes().get(self.int_start..self.int_end)?;
            if digits.len() <= 19 {
                // At most 19 digits: below 10^19, within u64.
                let magnitude = digits.iter().fold(0u64, |m, d| m * 10 + u64::from(d - b'0'));
                let int = match self.negative {
                    false => i64::try_from(magnitude).ok(),
                    true if magnitude == 0 => return Some(Value::Float(-0.0)),
                    true => 0i64.checked_sub_unsigned(magnitude),
                };
                if let Some(i) = int {
                    return Some(Value::Int(i));
                }
            }
        }
        let number = text.get(self.start..self.end)?;
        let v: f64 = number.parse().ok()?;
        if !v.is_finite() {
            return None;
        }
        // A point or an exponent is one of the characters: 16 or fewer
        // hold at most 15 digits.
        let short = number.len() - usize::from(self.negative) <= 16;
        if short || self.significant_digits(text.as_bytes()) <= 15 {
            return Some(Value::Float(v));
        }
        Some(long_number(number))
    }

    /// Digits of the mantissa from its first non-zero one (a double holds
    /// any decimal of up to 15 exactly: its shortest text reads back the same).
    fn significant_digits(&self, b: &[u8]) -> usize {
        let mantissa = b.get(self.int_start..self.end).unwrap_or_default();
        let mantissa = match mantissa.iter().position(|c| matches!(c, b'e' | b'E')) {
            Some(e) => &mantissa[..e],
            None => mantissa,
        };
        let digits = mantissa.iter().filter(|c| c.is_ascii_digit());
        digits.skip_while(|c| **c == b'0').count()
    }
}

/// A number kept as its text: rare, and out of the hot loop.
#[cold]
#[inline(never)]
fn long_number(text: &str) -> Value {
    Value::Number(text.into())
}

/// The first quote or backslash at or after `b[from]`: where a string
/// ends or its next escape starts; None at a control character first
/// (JSON refuses them raw in strings: the tape path reports it). Eight
/// bytes at a time in a machine word: most strings in a CRM message are
/// keys and short values, for which setting up a vectorised search
/// (memchr) cost more than the search (a tenth of the envelope's decode).
fn stop(b: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // Bytes of `word` below `c` (at most 0x80) get their high bit set; a
    // false one can appear only above a true one, so the lowest set bit
    // is exact. Equal to `c` is below `c + 1` in `word ^ c`.
    let below = |word: u64, c: u8| word.wrapping_sub(ONES * u64::from(c)) & !word & HIGHS;
    let equal = |word: u64, c: u8| below(word ^ (ONES * u64::from(c)), 1);
    let at_stop = |at: usize| (b[at] >= 0x20).then_some(at);
    let mut at = from;
    while let Some(chunk) = b.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        let found = equal(word, b'"') | equal(word, b'\\') | below(word, 0x20);
        if found != 0 {
            return at_stop(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    let tail = b.get(at..)?.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
    at_stop(at + tail)
}

/// The escape at `b[at]` (a backslash): its character and how many bytes
/// it takes. A surrogate pair is one character; a lone surrogate is None
/// (serde_json refuses it), and so is NUL.
fn escape(b: &[u8], at: usize) -> Option<(char, usize)> {
    let simple = match b.get(at + 1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let high = hex4(b, at + 2)?;
            if high == 0 {
                // NUL: refused in envelopes, kept in flat rows; the scan
                // and the tape path decide.
                return None;
            }
            if !(0xD800..0xDC00).contains(&high) {
                return Some((char::from_u32(high)?, 6));
            }
            if b.get(at + 6..at + 8)? != b"\\u" {
                return None;
            }
            let low = hex4(b, at + 8)?;
            if !(0xDC00..0xE000).contains(&low) {
                return None;
            }
            return Some((char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))?, 12));
        }
        _ => return None,
    };
    Some((simple, 2))
}

/// Four hex digits at `b[at..]` (nothing else: no sign).
fn hex4(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)?.iter().try_fold(0u32, |v, &d| Some(v << 4 | char::from(d).to_digit(16)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(text: &str) -> Option<Value> {
        Cursor::new(text.as_bytes(), 128)?.cell()
    }

    #[test]
    fn numbers_follow_the_json_grammar_and_the_general_paths_cells() {
        assert_eq!(cell("0"), Some(Value::Int(0)));
        assert_eq!(cell("-9223372036854775808"), Some(Value::Int(i64::MIN)));
        assert_eq!(cell("9223372036854775807"), Some(Value::Int(i64::MAX)));
        // Beyond i64, or more digits than a double holds: the text as sent.
        let number = |t: &str| Some(Value::Number(t.into()));
        assert_eq!(cell("9223372036854775808"), number("9223372036854775808"));
        assert_eq!(cell("-9223372036854775809"), number("-9223372036854775809"));
        assert_eq!(cell("12345678901234567890123"), number("12345678901234567890123"));
        assert_eq!(cell("12345678901234567.89"), number("12345678901234567.89"));
        assert_eq!(cell("-0.30000000000000004"), number("-0.30000000000000004"));
        assert_eq!(cell("1.2345678901234567e-3"), number("1.2345678901234567e-3"));
        assert_eq!(cell("123456789012345.6"), number("123456789012345.6"));
        // Up to 15 significant digits a double is exact (leading zeros are
        // not digits of the value).
        assert!(matches!(cell("12345678901234.5"), Some(Value::Float(_))));
        assert!(matches!(cell("-0.000000123456789012345"), Some(Value::Float(_))));
        assert!(matches!(cell("1.23456789012345e300"), Some(Value::Float(_))));
        assert!(matches!(cell("-0"), Some(Value::Float(z)) if z == 0.0 && z.is_sign_negative()));
        assert_eq!(cell("1.5e3"), Some(Value::Float(1500.0)));
        assert_eq!(cell("2E-2"), Some(Value::Float(0.02)));
        assert_eq!(cell("1e400"), None, "beyond f64");
        for bad in ["01", "1.", ".5", "-", "1e", "1e+", "+1", "--1", "0x1"] {
            let mut c = Cursor::new(bad.as_bytes(), 128).unwrap();
            let whole = c.cell().is_some() && c.end().is_some();
            assert!(!whole, "{bad}");
        }
    }

    #[test]
    fn a_string_stops_at_its_first_quote_or_backslash_in_any_word_position() {
        for len in 0..40 {
            for stop_char in [b'"', b'\\'] {
                let mut text = vec![b'a'; len];
                text.push(stop_char);
                text.extend_from_slice(b"x\"y\\");
                for from in 0..=len {
                    assert_eq!(stop(&text, from), Some(len), "{len} {from}");
                }
            }
            // Bytes next to the two it looks for are not them; a control
            // character before them is a stop without a position.
            assert_eq!(stop(&vec![b'!'; len], 0), None);
            assert_eq!(stop(&[b'#', b'[', b']', 0xa2, 0xdc, b' ', b'"'], 0), Some(6));
            let mut text = vec![b' '; len];
            text.extend_from_slice(b"\x1f\"");
            assert_eq!(stop(&text, 0), None, "{len}");
            text[len] = 0;
            assert_eq!(stop(&text, 0), None, "{len}");
        }
    }

    #[test]
    fn strings_decode_their_escapes_and_refuse_broken_ones() {
        assert_eq!(cell(r#""plain""#), Some(Value::Str("plain".into())));
        assert_eq!(
            cell(r#""a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00""#),
            Some(Value::Str("a\"b\\c/d\u{8}\u{c}\n\r\t\u{e9}\u{1F600}".into()))
        );
        for bad in [r#""\x""#, r#""\u12""#, r#""\u+123""#, r#""\ud83d""#, r#""\udc00""#, r#""open"#]
        {
            assert_eq!(cell(bad), None, "{bad}");
        }
        assert_eq!(cell("\"tab\there\""), None, "control characters: the tape path");
        // Between tokens, JSON's whitespace: a pretty-printed row, a CRLF line.
        let row = object_fields(b"{\r\n\t\"a\": 1,\n \"b\":\t\"x\"\r\n}\r\n", 8).unwrap();
        assert_eq!(row.len(), 2);
        assert_eq!(object_fields(b"{\"id\":\n1}", 128).map(|r| r.len()), Some(1));
        assert!(Cursor::new(&[b'"', 0xff, b'"'], 128).is_none(), "not UTF-8");
    }

    #[test]
    fn rows_are_read_and_anything_unusual_is_left_to_the_tape() {
        let row =
            object_fields(br#" { "id" : 1 , "name":"x", "ok":false, "n":null } "#, 128).unwrap();
        assert_eq!(row.names().iter().map(|n| &**n).collect::<Vec<_>>(), ["id", "name", "ok", "n"]);
        assert_eq!(row.values()[3], Value::Null);
        assert!(object_fields(b"{}", 128).unwrap().is_empty());
        // Nested cells are JSON text, as the general path makes them.
        let row = object_fields(br#"{"id":1,"tags":[1, -0],"meta":{"a":{"b":null}}}"#, 128);
        let row = row.unwrap();
        assert_eq!(row.get("tags"), Some(&Value::Str("[1,-0.0]".into())));
        assert_eq!(row.get("meta"), Some(&Value::Str(r#"{"a":{"b":null}}"#.into())));
        for other in
            [r#"{"i\"d":1}"#, r#"{"id":1}x"#, r#"{"id":1,}"#, r#"{"id" 1}"#, r#"[1]"#, "null"]
        {
            assert!(object_fields(other.as_bytes(), 128).is_none(), "{other}");
        }
    }

    #[test]
    fn skipped_values_are_checked_but_not_kept() {
        let keep = vec!["source.lsn".to_string()];
        let msg = br#"{"before":{"id":1,"x":[1,{"y":"\u00e9"}]},"after":{"id":1},"source":{"v":"a\"b","lsn":7,"deep":{"a":[true,null,-1.5e2]}},"op":"u","ts_ms":18446744073709551616}"#;
        let e = envelope(msg, 128, Some(&keep), 1).unwrap();
        assert!(e.before.is_none(), "an update's before image is not kept");
        let env: Vec<(&str, &Value)> = e.env.iter().map(|(n, v)| (&**n, v)).collect();
        assert_eq!(env, [("source.lsn", &Value::Int(7)), ("op", &Value::Str("u".into()))]);
        // The same text broken where it is skipped is not taken.
        let broken = br#"{"after":{"id":1},"source":{"v":"a\qb","lsn":7},"op":"u"}"#;
        assert!(envelope(broken, 128, Some(&keep), 1).is_none());
        let broken = br#"{"after":{"id":1},"source":{"lsn":7,"deep":[1,]},"op":"u"}"#;
        assert!(envelope(broken, 128, Some(&keep), 1).is_none());
    }
}
