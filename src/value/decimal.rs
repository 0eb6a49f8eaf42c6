//! Exact decimals: an unscaled 128-bit integer and a scale, as Delta,
//! Arrow (`Decimal128`) and Kafka Connect (`Decimal`: big-endian two's
//! complement bytes plus a `scale` parameter) all store them
//! (docs/types.md, decimals). Never through a float: a money column of
//! 20 digits must come back digit for digit.

use std::cmp::Ordering;

use base64::Engine;

/// The widest precision Delta (and `Decimal128`) holds.
pub const MAX_PRECISION: u8 = 38;

/// The scale a `VariableScaleDecimal` column gets when `columns:` does not
/// declare one.
pub const DEFAULT_VARIABLE_SCALE: u8 = 18;

/// 10^n for n <= 38 (None beyond i128).
pub fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

/// Number of decimal digits of |v| (0 has one digit).
pub fn digits(v: i128) -> u32 {
    let mut n = v.unsigned_abs();
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// 10^(hi - lo) for scales of any size (None beyond i128): scales come
/// from messages, so their difference may not fit an i32.
fn pow10_between(hi: i32, lo: i32) -> Option<i128> {
    pow10(u32::try_from(i64::from(hi) - i64::from(lo)).ok()?)
}

/// `v * 10^-from` at scale `to`, exactly; None when digits would be lost
/// (a non-zero digit beyond `to`) or the result leaves i128.
pub fn rescale(v: i128, from: i32, to: i32) -> Option<i128> {
    match to.cmp(&from) {
        Ordering::Equal => Some(v),
        Ordering::Greater if v == 0 => Some(0),
        Ordering::Greater => v.checked_mul(pow10_between(to, from)?),
        Ordering::Less => {
            let Some(f) = pow10_between(from, to) else {
                // More than 38 digits dropped: exact only for zero.
                return (v == 0).then_some(0);
            };
            (v % f == 0).then(|| v / f)
        }
    }
}

/// `v` (at scale `from`) as a value of `decimal(precision, scale)`, or why not.
pub fn fit(v: i128, from: i32, precision: u8, scale: u8) -> Result<i128, String> {
    let text = || format(v, from);
    let too_wide = || format!("{} does not fit decimal({precision},{scale})", text());
    let r = rescale(v, from, scale as i32).ok_or_else(|| match from > scale as i32 {
        true => format!("{} has more than {scale} decimal places", text()),
        false => too_wide(),
    })?;
    if digits(r) > precision as u32 {
        return Err(too_wide());
    }
    Ok(r)
}

/// Compares two decimals of any scales exactly.
pub fn cmp(a: i128, sa: i32, b: i128, sb: i32) -> Ordering {
    if sa == sb {
        return a.cmp(&b);
    }
    // A zero is zero at any scale (scaling it up below cannot overflow).
    if a == 0 || b == 0 {
        return a.signum().cmp(&b.signum());
    }
    // Bring both to the larger scale; a product that leaves i128 is larger
    // in magnitude than any i128, so its sign decides.
    let (hi, lo) = (sa.max(sb), sa.min(sb));
    let up = |v: i128| pow10_between(hi, lo).and_then(|f| v.checked_mul(f));
    if sa < sb {
        match up(a) {
            Some(a) => a.cmp(&b),
            None => 0.cmp(&a.signum()).reverse(),
        }
    } else {
        match up(b) {
            Some(b) => a.cmp(&b),
            None => b.signum().cmp(&0).reverse(),
        }
    }
}

/// Scales beyond this either way are written with an exponent: no Delta
/// decimal holds such a value unless it is zero (38 digits at most, scale
/// 0 to 38), and a scale read from a message may be anything up to 2^31,
/// which written out would be gigabytes of zeros.
const MAX_PLAIN_SCALE: i32 = 2 * MAX_PRECISION as i32;

/// The exact text: `-0.01`, `12345678901234567.89`, `100` (scale 0),
/// `1200` (negative scale -2, unscaled 12); `1E-100` and `12E+90` beyond
/// `MAX_PLAIN_SCALE`.
pub fn format(v: i128, scale: i32) -> String {
    if scale.unsigned_abs() > MAX_PLAIN_SCALE as u32 {
        let exp = -i64::from(scale);
        return format!("{v}E{}{exp}", if exp > 0 { "+" } else { "" });
    }
    if scale <= 0 {
        let mut s = v.to_string();
        if v != 0 {
            s.extend(std::iter::repeat_n('0', scale.unsigned_abs() as usize));
        }
        return s;
    }
    let scale = scale as usize;
    let digits = v.unsigned_abs().to_string();
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits
    };
    let (int, frac) = padded.split_at(padded.len() - scale);
    let sign = if v < 0 { "-" } else { "" };
    format!("{sign}{int}.{frac}")
}

/// Parses decimal text (`-12.50`, `+3`, `.5`, `1e3`, `1.5E-2`) into an
/// unscaled value and its scale, exactly. None for anything else.
pub fn parse(s: &str) -> Option<(i128, i32)> {
    let s = s.trim();
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (neg, body) = match mantissa.as_bytes().first()? {
        b'-' => (true, &mantissa[1..]),
        b'+' => (false, &mantissa[1..]),
        _ => (false, mantissa),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: i128 = 0;
    let mut significant = 0u32;
    for b in int.bytes().chain(frac.bytes()) {
        if v != 0 || b != b'0' {
            significant += 1;
        }
        if significant > MAX_PRECISION as u32 {
            return None;
        }
        v = v * 10 + (b - b'0') as i128;
    }
    let scale = (frac.len() as i32).checked_sub(exp)?;
    // Canonical small scales: trailing zeros introduced by an exponent are
    // folded back in (`1e3` is 1000 at scale 0).
    let (v, scale) =
        if scale < 0 { (v.checked_mul(pow10((-scale) as u32)?)?, 0) } else { (v, scale) };
    Some((if neg { -v } else { v }, scale))
}

/// Kafka Connect's decimal bytes (big-endian two's complement, at most 16
/// bytes) as an unscaled value.
pub fn from_be_bytes(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() {
        return Some(0);
    }
    // Leading sign-extension bytes beyond 16 are allowed (they carry no value).
    let (head, tail) = bytes.split_at(bytes.len().saturating_sub(16));
    let neg = tail[0] & 0x80 != 0;
    let fill = if neg { 0xff } else { 0 };
    if head.iter().any(|&b| b != fill) {
        return None;
    }
    let mut n: i128 = if neg { -1 } else { 0 };
    for &b in tail {
        n = (n << 8) | b as i128;
    }
    Some(n)
}

/// The shortest big-endian two's complement bytes of `v` (what Kafka
/// Connect writes).
pub fn to_be_bytes(v: i128) -> Vec<u8> {
    let all = v.to_be_bytes();
    let fill = if v < 0 { 0xff } else { 0 };
    let mut start = 0;
    while start < 15 && all[start] == fill && (all[start + 1] & 0x80 != 0) == (v < 0) {
        start += 1;
    }
    all[start..].to_vec()
}

/// Base64 Kafka Connect decimal bytes (the JSON converter's encoding) as
/// an unscaled value.
pub fn from_base64(b64: &str) -> Option<i128> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    from_be_bytes(&bytes)
}

/// The longest unscaled value [`big_text`] writes out, in bytes.
const BIG_TEXT_BYTES: usize = 128;

/// The exact decimal text of base64 big-endian two's complement bytes at
/// `scale`, however many digits: a value beyond what [`from_base64`]
/// reads (38 digits, the most a Delta decimal holds) is kept as text,
/// which a column declared `string` stores and any decimal column refuses
/// as not fitting, never as NULL or as the JSON it came in (docs/types.md).
pub fn big_text(b64: &str, scale: i32) -> Option<String> {
    if b64.len() > BIG_TEXT_BYTES * 4 / 3 + 4 {
        return None;
    }
    big_text_of(&base64::engine::general_purpose::STANDARD.decode(b64).ok()?, scale)
}

/// [`big_text`] of the bytes themselves (Avro holds decimals as bytes).
pub fn big_text_of(bytes: &[u8], scale: i32) -> Option<String> {
    // The division below is quadratic in the length: a hostile megabyte
    // would hold a run for minutes. 128 bytes is over 300 digits.
    if bytes.len() > BIG_TEXT_BYTES || scale.unsigned_abs() > MAX_PLAIN_SCALE as u32 {
        return None;
    }
    let mut mag = bytes.to_vec();
    let neg = mag.first().is_some_and(|b| b & 0x80 != 0);
    if neg {
        // Two's complement: invert, add one.
        mag.iter_mut().for_each(|b| *b = !*b);
        for b in mag.iter_mut().rev() {
            let (v, carry) = b.overflowing_add(1);
            *b = v;
            if !carry {
                break;
            }
        }
    }
    // Decimal digits, least significant first, by long division.
    let mut digits = vec![];
    while mag.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in mag.iter_mut() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(b'0' + rem as u8);
    }
    let zero = digits.is_empty();
    // A negative scale multiplies by ten: zeros after the digits.
    if scale < 0 && !zero {
        digits.splice(0..0, std::iter::repeat_n(b'0', scale.unsigned_abs() as usize));
    }
    let scale = usize::try_from(scale).unwrap_or(0);
    while digits.len() <= scale {
        digits.push(b'0');
    }
    let mut text = String::with_capacity(digits.len() + 2);
    if neg {
        text.push('-');
    }
    for (i, d) in digits.iter().rev().enumerate() {
        if i == digits.len() - scale {
            text.push('.');
        }
        text.push(char::from(*d));
    }
    Some(text)
}

/// The decimal nearest to a float, by its shortest round-trip text (a JSON
/// number such as 12.34 arrives as a float; its text is what was sent).
pub fn from_f64(f: f64) -> Option<(i128, i32)> {
    if !f.is_finite() {
        return None;
    }
    parse(&format!("{f:?}"))
}

/// The float nearest to a decimal (for comparisons with float values).
pub fn to_f64(v: i128, scale: i32) -> f64 {
    format(v, scale).parse().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_big_text_is_exact_beyond_38_digits() {
        use base64::Engine;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        // -10^48 - 0.01 at scale 2 (helper found it stored as JSON text).
        assert_eq!(
            big_text("u5PE6gZtmXgtO/rLAkqb////////", 2).unwrap(),
            "-1000000000000000000000000000000000000000000000000.01"
        );
        assert_eq!(big_text(&b64(&[0x05]), 2).unwrap(), "0.05");
        assert_eq!(big_text(&b64(&[0xff]), 0).unwrap(), "-1");
        assert_eq!(big_text(&b64(&[]), 3).unwrap(), "0.000");
        // Within 38 digits it agrees with the exact decimal's text.
        for v in [0i128, 7, -7, 123_456_789, -99_999_999_999_999_999_999_999_999_999_999_999_999] {
            assert_eq!(big_text(&b64(&to_be_bytes(v)), 4).unwrap(), format(v, 4), "{v}");
        }
        assert_eq!(big_text(&b64(&[0x05]), -3).unwrap(), "5000");
        assert!(big_text("not base64!", 0).is_none());
        // Bounded: a hostile length is not written out (quadratic work).
        assert!(big_text(&b64(&[0x7f; 128]), 0).is_some());
        assert!(big_text(&b64(&[0x7f; 200]), 0).is_none());
    }

    #[test]
    fn decimal_text_round_trips_exactly() {
        for (text, v, s) in [
            ("12345678901234567.89", 1234567890123456789i128, 2),
            ("-0.01", -1, 2),
            ("0.00", 0, 2),
            ("3.14159", 314159, 5),
            ("-99999999999999999999999999999999999999", -(pow10(38).unwrap() - 1), 0),
            ("7", 7, 0),
        ] {
            assert_eq!(parse(text), Some((v, s)), "{text}");
            assert_eq!(format(v, s), text);
        }
        assert_eq!(parse("1e3"), Some((1000, 0)));
        assert_eq!(parse("1.5E-2"), Some((15, 3)));
        assert_eq!(parse(".5"), Some((5, 1)));
        for bad in ["", "-", ".", "1.2.3", "abc", "1e", "NaN", "inf", "1 2"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(parse("123456789012345678901234567890123456789"), None, "39 digits");
        assert_eq!(format(12, -2), "1200");
    }

    #[test]
    fn any_scale_a_message_can_claim_is_handled_without_overflow_or_giant_text() {
        // A hostile `{"scale": -2147483648, ...}` once overflowed the
        // zero padding and panicked the batch; i32::MAX made 2 GiB of text.
        for scale in [i32::MIN, i32::MIN + 1, -1000, -77, 77, 1000, i32::MAX] {
            let text = format(1, scale);
            assert!(text.len() < 16, "{scale}: {text}");
            assert!(fit(1, scale, 38, 18).is_err(), "{scale}");
            assert_eq!(fit(0, scale, 38, 18), Ok(0), "{scale}");
            assert_eq!(
                cmp(1, scale, 1, 0),
                if scale > 0 { Ordering::Less } else { Ordering::Greater }
            );
        }
        assert_eq!(format(-12, 100), "-12E-100");
        assert_eq!(format(12, -90), "12E+90");
        assert_eq!(format(1, 76).len(), 78, "written out up to 76");
        assert_eq!(parse("1E-2147483647"), Some((1, i32::MAX)));
        assert_eq!(to_f64(1, i32::MAX), 0.0);
        assert_eq!(to_f64(1, i32::MIN), f64::INFINITY);
        assert_eq!(rescale(1, i32::MIN, i32::MAX), None);
        assert_eq!(rescale(0, i32::MAX, i32::MIN), Some(0));
    }

    #[test]
    fn kafka_connect_bytes_decode_as_the_debezium_documentation_shows() {
        // The PostgreSQL connector's example: NUMERIC 3.14159 is {"scale":5,"value":"BMsv"}.
        assert_eq!(from_base64("BMsv"), Some(314159));
        assert_eq!(from_base64("/w=="), Some(-1));
        assert_eq!(from_base64(""), Some(0));
        assert_eq!(from_be_bytes(&[0xff; 20]), Some(-1), "sign extension beyond 16 bytes");
        assert_eq!(from_be_bytes(&[1; 17]), None, "a value wider than 128 bits");
        for v in [0i128, 1, -1, 127, 128, -128, -129, 314159, i128::MAX, i128::MIN] {
            assert_eq!(from_be_bytes(&to_be_bytes(v)), Some(v), "{v}");
        }
        assert_eq!(to_be_bytes(128), vec![0, 128]);
        assert_eq!(to_be_bytes(-128), vec![128]);
    }

    #[test]
    fn rescaling_never_drops_a_digit() {
        assert_eq!(rescale(314159, 5, 18), Some(314159 * pow10(13).unwrap()));
        assert_eq!(rescale(1230, 3, 2), Some(123));
        assert_eq!(rescale(1234, 3, 2), None);
        assert_eq!(fit(1234, 3, 10, 2).unwrap_err(), "1.234 has more than 2 decimal places");
        assert!(fit(12345, 0, 4, 0).unwrap_err().contains("does not fit decimal(4,0)"));
        assert_eq!(fit(-1, 2, 1, 2), Ok(-1));
    }

    #[test]
    fn comparison_is_exact_across_scales() {
        assert_eq!(cmp(150, 2, 15, 1), Ordering::Equal);
        assert_eq!(cmp(-1, 2, 0, 0), Ordering::Less);
        assert_eq!(cmp(i128::MAX, 0, 1, 30), Ordering::Greater);
        assert_eq!(cmp(1, 30, i128::MAX, 0), Ordering::Less);
        assert_eq!(cmp(i128::MIN, 0, -1, 30), Ordering::Less);
        assert_eq!(cmp(-1, 30, i128::MIN, 0), Ordering::Greater);
        // Zero against values whose scales are too far apart to bring together.
        assert_eq!(cmp(0, 0, 5, 40), Ordering::Less);
        assert_eq!(cmp(5, 40, 0, 0), Ordering::Greater);
        assert_eq!(cmp(0, 40, -5, 0), Ordering::Greater);
        assert_eq!(cmp(0, 3, 0, 90), Ordering::Equal);
        assert_eq!(from_f64(12.34), Some((1234, 2)));
        assert_eq!(from_f64(1e20), Some((100000000000000000000, 0)));
    }
}
