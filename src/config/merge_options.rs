//! `bronze.tables.<t>.merge`: how a batch's rows are merged into the table
//! — ordering, deletes, which columns count as a change, snapshot merge,
//! business time, surrogate keys and guardrails (docs/config.md, merge
//! options; the rules themselves: docs/batch.md, docs/scd1.md,
//! docs/scd2.md, docs/snapshot.md).
//!
//! Options are checked against the rest of the table ([`TableFacts`]):
//! some only apply to scd2, and no option may name a business key or
//! reserved column.

use serde_yaml::Value as Y;

use super::cx::{Cx, Mapping};
use super::{defaults, DeleteMode, Guardrails, Reserved, Strategy, ValidTime};
use crate::expr::{self, Expr};
use crate::value::parse_ts;

const MERGE_KEYS: &[&str] = &[
    "sequence_by",
    "delete_when",
    "delete_mode",
    "ignore_columns",
    "track_columns",
    "snapshot",
    "valid_time",
    "open_valid_to",
    "surrogate_key",
    "intra_batch",
    "guardrails",
    "apply_truncates",
];

/// Options that only apply to strategy scd2.
const SCD2_ONLY_KEYS: [&str; 4] = ["valid_time", "open_valid_to", "surrogate_key", "intra_batch"];

/// What the merge options are checked against: the rest of the table.
pub(super) struct TableFacts<'t> {
    pub(super) strategy: Strategy,
    /// The table's system sends Debezium envelopes (a default `delete_when`).
    pub(super) is_debezium: bool,
    pub(super) business_key: &'t [String],
    pub(super) reserved: &'t Reserved,
}

/// The `merge` section, read; every option has its default when absent.
pub(super) struct MergeOptions {
    pub(super) sequence_by: Vec<String>,
    pub(super) delete_when: Option<Expr>,
    pub(super) delete_mode: DeleteMode,
    pub(super) ignore_columns: Vec<String>,
    pub(super) track_columns: Option<Vec<String>>,
    pub(super) snapshot: bool,
    pub(super) apply_truncates: bool,
    pub(super) valid_time: ValidTime,
    pub(super) open_valid_to: Option<i64>,
    pub(super) surrogate_key: bool,
    pub(super) intra_batch_all: bool,
    pub(super) guardrails: Guardrails,
}

impl Cx {
    /// The table's `merge` section, option by option.
    pub(super) fn merge_options(
        &mut self,
        m: &Mapping,
        path: &str,
        table: &TableFacts,
    ) -> MergeOptions {
        let mp = format!("{path}.merge");
        let mm = m.get("merge").map(|v| self.map(v, &mp, MERGE_KEYS)).unwrap_or_default();
        let sequence_by = self.opt_list(&mm, "sequence_by", &mp).unwrap_or_default();
        let delete_when = self.delete_when(&mm, &mp, table.is_debezium);
        let delete_mode = self.delete_mode(&mm, &mp, table.strategy);
        let ignore_columns = self.opt_list(&mm, "ignore_columns", &mp).unwrap_or_default();
        let track_columns = self.opt_list(&mm, "track_columns", &mp);
        if mm.contains_key("ignore_columns") && track_columns.is_some() {
            self.err(
                &format!("{mp}.track_columns"),
                "cannot be combined with ignore_columns: list either the columns to track or the ones to ignore",
            );
        }
        for (opt, cols) in [
            ("ignore_columns", Some(&ignore_columns)),
            ("track_columns", track_columns.as_ref()),
            ("sequence_by", Some(&sequence_by)),
        ] {
            self.reject_key_and_reserved_columns(&mp, opt, cols.into_iter().flatten(), table);
        }
        let snapshot = self.bool(&mm, "snapshot", &mp, false);
        let apply_truncates = self.bool(&mm, "apply_truncates", &mp, false);
        self.reject_scd2_only_options(&mm, &mp, table.strategy);
        let valid_time = self.valid_time(&mm, &mp);
        let open_valid_to = self.open_valid_to(&mm, &mp);
        let surrogate_key = self.bool(&mm, "surrogate_key", &mp, false);
        let intra_batch_all = self.intra_batch_all(&mm, &mp);
        let guardrails = self.guardrails(&mm, &mp);
        if apply_truncates && table.strategy == Strategy::Scd2 {
            self.err(&format!("{mp}.apply_truncates"), "only applies to strategy scd1");
        }
        MergeOptions {
            sequence_by,
            delete_when,
            delete_mode,
            ignore_columns,
            track_columns,
            snapshot,
            apply_truncates,
            valid_time,
            open_valid_to,
            surrogate_key,
            intra_batch_all,
            guardrails,
        }
    }

    /// `delete_when`: a SQL predicate; `op = 'd'` for Debezium sources.
    fn delete_when(&mut self, mm: &Mapping, mp: &str, is_debezium: bool) -> Option<Expr> {
        match self.opt_string(mm, "delete_when", mp) {
            Some(s) => match expr::parse(&s) {
                Ok(e) => Some(e),
                Err(e) => {
                    self.err(
                        &format!("{mp}.delete_when"),
                        format!("cannot parse `{s}` as a SQL predicate: {e}"),
                    );
                    None
                }
            },
            None if is_debezium => expr::parse(defaults::DEBEZIUM_DELETE_WHEN).ok(),
            None => None,
        }
    }

    /// `delete_mode`: soft, hard or ignore; never hard on scd2 (history stays).
    fn delete_mode(&mut self, mm: &Mapping, mp: &str, strategy: Strategy) -> DeleteMode {
        let delete_mode = match self.opt_string(mm, "delete_mode", mp).as_deref() {
            None | Some("soft") => DeleteMode::Soft,
            Some("hard") => DeleteMode::Hard,
            Some("ignore") => DeleteMode::Ignore,
            Some(other) => {
                self.err(
                    &format!("{mp}.delete_mode"),
                    format!("unknown mode `{other}` (expected soft, hard or ignore)"),
                );
                DeleteMode::Soft
            }
        };
        if delete_mode == DeleteMode::Hard && strategy == Strategy::Scd2 {
            self.err(
                &format!("{mp}.delete_mode"),
                "`hard` is not allowed with strategy scd2: it would destroy history (use soft or ignore)",
            );
        }
        delete_mode
    }

    /// The columns of option `opt` must be neither business key nor reserved columns.
    fn reject_key_and_reserved_columns<'c>(
        &mut self,
        mp: &str,
        opt: &str,
        columns: impl Iterator<Item = &'c String>,
        table: &TableFacts,
    ) {
        for c in columns {
            if table.business_key.contains(c) {
                self.err(&format!("{mp}.{opt}"), format!("`{c}` is a business key column"));
            }
            if table.reserved.is_reserved(c) {
                self.err(&format!("{mp}.{opt}"), format!("`{c}` is a reserved column"));
            }
        }
    }

    fn reject_scd2_only_options(&mut self, mm: &Mapping, mp: &str, strategy: Strategy) {
        for key in SCD2_ONLY_KEYS {
            if strategy != Strategy::Scd2 && mm.contains_key(key) {
                self.err(&format!("{mp}.{key}"), "only applies to strategy scd2");
            }
        }
    }

    /// `valid_time`: processing, `column:<name>` or `date:<YYYY-MM-DD>`.
    fn valid_time(&mut self, mm: &Mapping, mp: &str) -> ValidTime {
        match self.opt_string(mm, "valid_time", mp) {
            None => ValidTime::Processing,
            Some(s) if s == "processing" => ValidTime::Processing,
            Some(s) if s.starts_with("column:") && s.len() > "column:".len() => {
                ValidTime::Column(s["column:".len()..].trim().to_string())
            }
            Some(s) if s.starts_with("date:") => {
                match chrono::NaiveDate::parse_from_str(s["date:".len()..].trim(), "%Y-%m-%d") {
                    Ok(d) => ValidTime::Date(
                        d.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_micros(),
                    ),
                    Err(_) => {
                        self.err(
                            &format!("{mp}.valid_time"),
                            format!("`{s}`: date must be YYYY-MM-DD"),
                        );
                        ValidTime::Processing
                    }
                }
            }
            Some(s) => {
                self.err(
                    &format!("{mp}.valid_time"),
                    format!("`{s}` is malformed (expected processing, column:<name> or date:<YYYY-MM-DD>)"),
                );
                ValidTime::Processing
            }
        }
    }

    /// `open_valid_to`: the `_valid_to` of open versions (a timestamp or date).
    fn open_valid_to(&mut self, mm: &Mapping, mp: &str) -> Option<i64> {
        let s = self.opt_string(mm, "open_valid_to", mp)?;
        let t = parse_ts(&s);
        if t.is_none() {
            self.err(&format!("{mp}.open_valid_to"), format!("`{s}` is not a timestamp or date"));
        }
        t
    }

    /// `intra_batch`: `latest` (one version per key and batch) or `all`.
    fn intra_batch_all(&mut self, mm: &Mapping, mp: &str) -> bool {
        match self.opt_string(mm, "intra_batch", mp).as_deref() {
            None | Some("latest") => false,
            Some("all") => true,
            Some(other) => {
                self.err(
                    &format!("{mp}.intra_batch"),
                    format!("unknown value `{other}` (expected latest or all)"),
                );
                false
            }
        }
    }

    /// `guardrails`: a list of names, or a mapping of name to true/false.
    fn guardrails(&mut self, mm: &Mapping, mp: &str) -> Guardrails {
        let mut guardrails = Guardrails::default();
        let Some(g) = mm.get("guardrails") else {
            return guardrails;
        };
        let gp = format!("{mp}.guardrails");
        match g {
            Y::Sequence(_) => {
                for item in self.list(g, &gp) {
                    match item.as_str() {
                        "reject_duplicates" => guardrails.reject_duplicates = true,
                        "reject_late" => guardrails.reject_late = true,
                        other => self.err(&gp, format!("unknown guardrail `{other}` (expected reject_duplicates, reject_late)")),
                    }
                }
            }
            _ => {
                let gm = self.map(g, &gp, &["reject_duplicates", "reject_late"]);
                guardrails.reject_duplicates = self.bool(&gm, "reject_duplicates", &gp, false);
                guardrails.reject_late = self.bool(&gm, "reject_late", &gp, false);
            }
        }
        guardrails
    }
}
