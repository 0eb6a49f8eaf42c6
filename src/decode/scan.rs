//! The byte scans a JSON message gets before it is parsed: how deep it
//! nests, whether it holds a NUL (both refuse it, docs/bad-input.md), and
//! whether it holds a lone surrogate escape, which simd-json reads
//! differently from serde_json (it then takes the general path, which
//! decides).
//!
//! Why a module of their own, and one pass for most of them: they run on
//! every message, before any parsing. The searches that start at a NUL or
//! a backslash are one vectorised search for those two bytes, rare in CRM
//! text, and a look at what follows each. The other difference between
//! the parsers, a bare `-0`, is caught on the parsed values instead
//! (`fast::static_cell`): a search for minus signs stopped at every date.

use super::MAX_DEPTH;

/// Refuses a message nested deeper than [`MAX_DEPTH`].
pub(super) fn check_depth(v: &[u8]) -> Result<(), String> {
    check_depth_within(v, MAX_DEPTH)
}

/// [`check_depth`] for a part of a message already `MAX_DEPTH - max`
/// levels deep. Counting opening brackets first (a vectorised scan) clears
/// almost every message at once: a message with fewer of them cannot nest
/// deeper.
pub(super) fn check_depth_within(v: &[u8], max: usize) -> Result<(), String> {
    if memchr::memchr2_iter(b'[', b'{', v).count() <= max {
        return Ok(());
    }
    match brackets(v).any(|(_, depth)| depth > max) {
        true => Err(format!("nested deeper than {MAX_DEPTH} levels")),
        false => Ok(()),
    }
}

/// The brackets of JSON text outside its strings, each as (position, depth
/// after it); a closing bracket at depth 0 leaves it at 0. The walk the
/// depth check and the schema wrapper's splitter share.
pub(super) fn brackets(v: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    v.iter().enumerate().filter_map(move |(i, &b)| {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            return None;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                return Some((i, depth));
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                return Some((i, depth));
            }
            _ => {}
        }
        None
    })
}

/// What [`scan`] found in a message's bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Scan {
    /// A raw NUL byte or the JSON escape for one (`\u0000`): text with NUL
    /// breaks readers that hand strings to C, so the message is refused.
    pub nul: bool,
    /// Text simd-json reads differently from serde_json: a lone surrogate
    /// escape (simd-json turns it into NUL, which would slip past the NUL
    /// refusal; serde_json refuses it).
    pub simd_differs: bool,
}

/// One pass over `v` for NUL, the NUL escape and lone surrogates, to its
/// end: a caller that does not refuse NUL (the flat file reader) still
/// needs to know the rest. Every backslash is taken as the start of an
/// escape, even an escaped one: a false alarm refuses text that merely
/// spells `\u0000` or sends a message to the general path, never lets
/// one through.
pub(super) fn scan(v: &[u8]) -> Scan {
    let mut found = Scan::default();
    // The last escaped low surrogate that completed a pair, by position.
    let mut paired_low = None;
    for i in memchr::memchr2_iter(0, b'\\', v) {
        match v[i] {
            0 => found.nul = true,
            _ if v.get(i + 1) != Some(&b'u') => {}
            _ => {
                found.nul |= v.get(i + 2..i + 6) == Some(b"0000");
                match surrogate(v, i + 2) {
                    Some(Surrogate::High) if surrogate(v, i + 8) == Some(Surrogate::Low) => {
                        paired_low = Some(i + 6)
                    }
                    Some(Surrogate::Low) if paired_low == Some(i) => {}
                    Some(_) => found.simd_differs = true,
                    None => {}
                }
            }
        }
    }
    found
}

/// A raw NUL byte or the JSON escape for one.
pub(super) fn has_nul(v: &[u8]) -> bool {
    scan(v).nul
}

/// Half of a UTF-16 surrogate pair: high (D800-DBFF) comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surrogate {
    High,
    Low,
}

/// The surrogate whose four hex digits start at `at`, right after a `\u`.
fn surrogate(v: &[u8], at: usize) -> Option<Surrogate> {
    let h = v.get(at..at + 4)?;
    if !(v.get(at - 2..at)? == b"\\u" && matches!(h[0], b'd' | b'D')) {
        return None;
    }
    match h[1] {
        b'8' | b'9' | b'a' | b'b' | b'A' | b'B' => Some(Surrogate::High),
        b'c'..=b'f' | b'C'..=b'F' => Some(Surrogate::Low),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> (bool, bool) {
        let s = scan(text.as_bytes());
        (s.nul, s.simd_differs)
    }

    #[test]
    fn nul_raw_or_escaped_is_found() {
        assert_eq!(found("{\"a\":\"x\0y\"}"), (true, false));
        assert_eq!(found(r#"{"a":"x\u0000y"}"#), (true, false));
        // An escaped backslash before it counts too (refused, never let through).
        assert_eq!(found(r#"{"a":"x\\u0000"}"#), (true, false));
        assert_eq!(found(r#"{"a":"x\u0001","b":"\\n"}"#), (false, false));
        // What follows a NUL is still looked at.
        assert_eq!(found("{\"a\":\"\0\",\"b\":\"\\ud800\"}"), (true, true));
    }

    #[test]
    fn lone_surrogates_take_the_general_path_and_pairs_do_not() {
        assert_eq!(found(r#"{"a":"\ud83d\ude00"}"#), (false, false));
        assert_eq!(found(r#"{"a":"\uD83D\uDE00 and \ud83d\ude01"}"#), (false, false));
        assert_eq!(found(r#"{"a":"\ud83d"}"#), (false, true));
        assert_eq!(found(r#"{"a":"\ud83dx\ude00"}"#), (false, true));
        assert_eq!(found(r#"{"a":"\ude00"}"#), (false, true));
        assert_eq!(found(r#"{"a":"\ud83d\u0041"}"#), (false, true));
        assert_eq!(found(r#"{"a":"\u00e9\u20ac"}"#), (false, false));
    }

    #[test]
    fn depth_counts_brackets_outside_strings_only() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(check_depth(deep.as_bytes()).is_err());
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(check_depth(ok.as_bytes()).is_ok());
        let in_text = format!("{{\"a\":\"{}\"}}", "[".repeat(MAX_DEPTH * 2));
        assert!(check_depth(in_text.as_bytes()).is_ok());
    }
}
