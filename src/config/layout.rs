//! `bronze.tables.<t>.layout`: how a table's data files are laid out and
//! kept tidy — file sizes, checkpoints, compaction, vacuum, deletion vectors
//! (docs/config.md, layout; docs/operations.md, table upkeep and
//! merge-on-read).

use super::cx::{child, Cx, Mapping};
use super::units::parse_duration;
use super::{Layout, RowCompanions};

const LAYOUT_KEYS: &[&str] = &[
    "file_rows",
    "spread",
    "checkpoint_interval",
    "compact_min_files",
    "vacuum_retention",
    "log_retention",
    "deletion_vectors",
    "row_companions",
];

impl Cx {
    /// The table's layout: the defaults, overridden by its `layout` section.
    pub(super) fn layout(&mut self, m: &Mapping, path: &str) -> Layout {
        let mut layout = Layout::default();
        let Some(l) = m.get("layout") else {
            return layout;
        };
        let lp = format!("{path}.layout");
        let lm = self.map(l, &lp, LAYOUT_KEYS);
        if let Some(v) = lm.get("deletion_vectors") {
            match v.as_bool() {
                Some(b) => layout.deletion_vectors = b,
                None => self.err(&child(&lp, "deletion_vectors"), "expected true or false"),
            }
        }
        for (key, slot) in [
            ("file_rows", &mut layout.file_rows),
            ("spread", &mut layout.spread),
            ("checkpoint_interval", &mut layout.checkpoint_interval),
        ] {
            if let Some(v) = lm.get(key) {
                match v.as_u64() {
                    Some(n) if n > 0 => *slot = n as usize,
                    _ => self.err(&child(&lp, key), "expected a positive integer"),
                }
            }
        }
        if let Some(v) = lm.get("compact_min_files") {
            match v.as_u64() {
                Some(n) if n == 0 || n >= 2 => layout.compact_min_files = n as usize,
                _ => self.err(
                    &child(&lp, "compact_min_files"),
                    "expected 0 (off) or an integer of at least 2",
                ),
            }
        }
        if let Some(s) = self.opt_string(&lm, "vacuum_retention", &lp) {
            match s.as_str() {
                "off" | "never" => layout.vacuum_retention = None,
                _ => match parse_duration(&s) {
                    Some(d) => layout.vacuum_retention = Some(d),
                    None => self.err(
                        &child(&lp, "vacuum_retention"),
                        format!("`{s}` is not a duration such as 168h, or off"),
                    ),
                },
            }
        }
        if let Some(s) = self.opt_string(&lm, "row_companions", &lp) {
            layout.row_companions = match s.as_str() {
                "auto" => RowCompanions::Auto,
                "off" => RowCompanions::Off,
                dir if std::path::Path::new(dir).is_absolute() => RowCompanions::Dir(dir.into()),
                _ => {
                    self.err(
                        &child(&lp, "row_companions"),
                        format!("`{s}` is not auto, off or an absolute local directory"),
                    );
                    RowCompanions::Auto
                }
            };
        }
        if let Some(s) = self.opt_string(&lm, "log_retention", &lp) {
            match parse_duration(&s) {
                Some(d) => layout.log_retention = d,
                None => self.err(
                    &child(&lp, "log_retention"),
                    format!("`{s}` is not a duration such as 720h or 0s"),
                ),
            }
        }
        layout
    }
}
