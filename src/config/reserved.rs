//! The columns changelake writes itself (`_is_current`, `_valid_from`, ...):
//! their default names, a table's renames (`columns:`), and the check that
//! no user column takes one of them (docs/config.md, reserved column names).
//!
//! The default names are written once, in [`COLUMNS`]; the default, the
//! renames and the list of accepted `columns:` keys are all read from it.

use super::cx::{child, Cx, Mapping};

/// Names of the columns changelake adds; renameable per table (`columns:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    pub is_current: String,
    pub valid_from: String,
    pub valid_to: String,
    pub is_deleted: String,
    pub execution_id: String,
    pub sk: String,
}

/// The field of [`Reserved`] holding one column's name.
type Field = fn(&mut Reserved) -> &mut String;

/// Every column changelake adds: its default name (also its key under
/// `columns:`) and the field that holds the name a table gives it.
const COLUMNS: [(&str, Field); 6] = [
    ("_is_current", |r| &mut r.is_current),
    ("_valid_from", |r| &mut r.valid_from),
    ("_valid_to", |r| &mut r.valid_to),
    ("_is_deleted", |r| &mut r.is_deleted),
    ("_execution_id", |r| &mut r.execution_id),
    ("_sk", |r| &mut r.sk),
];

/// The default names, in [`COLUMNS`] order.
fn default_names() -> [&'static str; 6] {
    COLUMNS.map(|(name, _)| name)
}

impl Default for Reserved {
    fn default() -> Self {
        let mut r = Reserved {
            is_current: String::new(),
            valid_from: String::new(),
            valid_to: String::new(),
            is_deleted: String::new(),
            execution_id: String::new(),
            sk: String::new(),
        };
        for (name, field) in COLUMNS {
            *field(&mut r) = name.to_string();
        }
        r
    }
}

impl Reserved {
    pub fn all(&self) -> [&str; 6] {
        [
            &self.is_current,
            &self.valid_from,
            &self.valid_to,
            &self.is_deleted,
            &self.execution_id,
            &self.sk,
        ]
    }

    /// Is `column` a column changelake writes, under this table's name for
    /// it or under its default name?
    pub(super) fn is_reserved(&self, column: &str) -> bool {
        self.all().contains(&column) || default_names().contains(&column)
    }

    /// Gives the column whose default name is `default_name` a new name.
    fn rename(&mut self, default_name: &str, new: String) {
        if let Some((_, field)) = COLUMNS.iter().find(|(name, _)| *name == default_name) {
            *field(self) = new;
        }
    }
}

impl Cx {
    /// `bronze.tables.<t>.columns`: the table's names for the reserved
    /// columns. Read before the business key and the merge options, which
    /// are checked against them.
    pub(super) fn reserved_columns(&mut self, m: &Mapping, path: &str) -> Reserved {
        let mut reserved = Reserved::default();
        let Some(c) = m.get("columns") else {
            return reserved;
        };
        let cp = format!("{path}.columns");
        let cm = self.map(c, &cp, &default_names());
        for (k, val) in cm {
            let kp = child(&cp, &k);
            let Some(new) = self.string(val, &kp) else {
                continue;
            };
            if new.is_empty() {
                self.err(&kp, "must not be empty");
                continue;
            }
            reserved.rename(&k, new);
        }
        let names = reserved.all();
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                self.err(&cp, format!("two reserved columns are both named `{n}`"));
            }
        }
        reserved
    }
}
