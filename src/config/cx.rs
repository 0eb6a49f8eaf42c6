//! The YAML walk's context: it collects every error instead of stopping at
//! the first, and reads the scalar shapes all sections share (strings,
//! booleans, column lists, mappings with a fixed set of keys).
//!
//! Every value read goes through `${VAR}` substitution (`subst`) and every
//! error is prefixed by the YAML path of its key (docs/config.md, loading
//! rules and configuration errors).

use std::collections::BTreeMap;

use serde_yaml::Value as Y;

use super::subst::substitute;

/// A mapping's entries by key, as returned by [`Cx::map`].
pub(super) type Mapping<'a> = BTreeMap<String, &'a Y>;

pub(super) struct Cx {
    pub(super) errors: Vec<String>,
    /// Positions in `errors` of unset `${VAR}`s under `systems.*`, with the
    /// system: settings only the commands that connect to it need (see `Needs`).
    pub(super) unset_in_systems: Vec<(usize, String)>,
}

/// The YAML path of `key` under `path` (`bronze.tables` + `x`).
pub(super) fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

pub(super) fn type_name(v: &Y) -> &'static str {
    match v {
        Y::Null => "null",
        Y::Bool(_) => "a boolean",
        Y::Number(_) => "a number",
        Y::String(_) => "a string",
        Y::Sequence(_) => "a list",
        Y::Mapping(_) => "a mapping",
        Y::Tagged(_) => "a tagged value",
    }
}

impl Cx {
    pub(super) fn err(&mut self, path: &str, msg: impl std::fmt::Display) {
        self.errors.push(format!("{path}: {msg}"));
    }

    /// Returns the mapping's entries, reporting unknown keys and non-mappings.
    pub(super) fn map<'a>(&mut self, v: &'a Y, path: &str, allowed: &[&str]) -> Mapping<'a> {
        let mut out = BTreeMap::new();
        match v {
            Y::Mapping(m) => {
                for (k, val) in m {
                    let Some(k) = k.as_str() else {
                        self.err(path, "keys must be strings");
                        continue;
                    };
                    if allowed.is_empty() || allowed.contains(&k) {
                        out.insert(k.to_string(), val);
                    } else {
                        self.err(
                            &child(path, k),
                            format!("unknown key `{k}` (expected one of: {})", allowed.join(", ")),
                        );
                    }
                }
            }
            Y::Null => {}
            other => self.err(path, format!("expected a mapping, found {}", type_name(other))),
        }
        out
    }

    /// Table and system names become paths (`<root>/bronze/<table>`) and
    /// parts of progress markers (`changelake/<table>/<topic>/<partition>`),
    /// so they are identifiers: letters, digits, `_` and `-`, starting with a
    /// letter or `_` (docs/config.md, names).
    pub(super) fn identifier(&mut self, name: &str, path: &str, what: &str) {
        let mut chars = name.chars();
        let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            self.err(
                path,
                format!(
                    "`{name}` is not a valid {what} name: use letters, digits, `_` and `-`, starting with a letter or `_`"
                ),
            );
        }
    }

    pub(super) fn subst(&mut self, s: &str, path: &str) -> String {
        let system = path.strip_prefix("systems.").map(|r| r.split('.').next().unwrap_or(r));
        substitute(s, |var| {
            if let Some(system) = system {
                self.unset_in_systems.push((self.errors.len(), system.to_string()));
            }
            self.err(path, format!("environment variable `{var}` is not set"))
        })
    }

    pub(super) fn string(&mut self, v: &Y, path: &str) -> Option<String> {
        match v {
            Y::String(s) => Some(self.subst(s, path)),
            Y::Number(n) => Some(n.to_string()),
            Y::Bool(b) => Some(b.to_string()),
            other => {
                self.err(path, format!("expected a string, found {}", type_name(other)));
                None
            }
        }
    }

    pub(super) fn opt_string(&mut self, m: &Mapping, key: &str, path: &str) -> Option<String> {
        m.get(key).and_then(|v| self.string(v, &child(path, key)))
    }

    pub(super) fn bool(&mut self, m: &Mapping, key: &str, path: &str, default: bool) -> bool {
        match m.get(key) {
            None => default,
            Some(Y::Bool(b)) => *b,
            Some(Y::String(s)) if matches!(self.subst(s, path).as_str(), "true" | "false") => {
                self.subst(s, path) == "true"
            }
            Some(other) => {
                self.err(
                    &child(path, key),
                    format!("expected true or false, found {}", type_name(other)),
                );
                default
            }
        }
    }

    pub(super) fn list(&mut self, v: &Y, path: &str) -> Vec<String> {
        match v {
            Y::Sequence(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, x)| self.string(x, &format!("{path}[{i}]")))
                .collect(),
            Y::String(s) => vec![self.subst(s, path)],
            other => {
                self.err(
                    path,
                    format!("expected a list of column names, found {}", type_name(other)),
                );
                vec![]
            }
        }
    }

    /// The column list under `key`, if the mapping has one.
    pub(super) fn opt_list(&mut self, m: &Mapping, key: &str, path: &str) -> Option<Vec<String>> {
        m.get(key).map(|v| self.list(v, &child(path, key)))
    }
}
