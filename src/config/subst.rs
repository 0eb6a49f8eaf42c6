//! `${VAR}` substitution: every string value of the config is taken from
//! the environment where it says so, before it is interpreted
//! (docs/config.md, loading rules).

/// Replaces every `${VAR}` in `s` with the variable's value. A variable that
/// is not set is replaced by nothing and passed to `unset`; a `${` without
/// a closing `}` is kept as written.
pub(super) fn substitute(s: &str, mut unset: impl FnMut(&str)) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        match after.find('}') {
            Some(j) => {
                let var = &after[..j];
                match std::env::var(var) {
                    Ok(v) => out.push_str(&v),
                    Err(_) => unset(var),
                }
                rest = &after[j + 1..];
            }
            None => {
                out.push_str(&rest[i..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}
