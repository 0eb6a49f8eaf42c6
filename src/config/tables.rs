//! `bronze.tables`: one entry per Delta table — where its rows come from,
//! its business key, strategy and schema policy; the `columns`, `layout`
//! and `merge` sub-sections have their own modules (docs/config.md, tables;
//! docs/schema.md for schema policies).
//!
//! A table is read as a sequence of named steps in a fixed order: the order
//! in which errors are reported, and the reserved names come before the
//! business key and merge options that are checked against them.

use std::collections::BTreeMap;

use serde_yaml::Value as Y;

use super::cx::{Cx, Mapping};
use super::merge_options::TableFacts;
use super::{Format, Reserved, SchemaPolicy, Strategy, System, TableConfig};
use crate::expr::{self, Expr};
use crate::value::DType;

const TABLE_KEYS: &[&str] =
    &["source", "business_key", "strategy", "merge", "schema_policy", "columns", "layout"];

/// `source`: the system and object a table reads, and its row filter.
struct Source {
    /// Empty when missing or unknown (errors are reported).
    system: String,
    object: String,
    filter: Option<Expr>,
    /// `time_column`, split at its dots.
    time: Option<Vec<String>>,
}

impl Cx {
    /// Every table of `bronze.tables`, in the order written.
    pub(super) fn tables(
        &mut self,
        top: &Mapping,
        systems: &BTreeMap<String, System>,
    ) -> Vec<TableConfig> {
        let mut tables = vec![];
        let Some(b) = top.get("bronze") else {
            self.err("bronze", "missing: `bronze.tables` declares the tables to write");
            return tables;
        };
        let bm = self.map(b, "bronze", &["tables"]);
        match bm.get("tables") {
            None => self.err("bronze.tables", "missing"),
            Some(Y::Mapping(m)) => {
                for (k, tv) in m {
                    let Some(name) = k.as_str() else {
                        self.err("bronze.tables", "table names are strings");
                        continue;
                    };
                    self.identifier(name, &format!("bronze.tables.{name}"), "table");
                    tables.push(self.table(name, tv, systems));
                }
            }
            Some(_) => self.err("bronze.tables", "expected a mapping of table name to table"),
        }
        tables
    }

    /// `bronze.tables.<name>`, step by step.
    fn table(&mut self, name: &str, v: &Y, systems: &BTreeMap<String, System>) -> TableConfig {
        let path = format!("bronze.tables.{name}");
        let m = self.map(v, &path, TABLE_KEYS);
        let source = self.source(name, &m, &path, systems);
        let system = systems.get(&source.system);
        let reserved = self.reserved_columns(&m, &path);
        let business_key = self.business_key(&m, &path, &reserved, system);
        let strategy = self.strategy(&m, &path);
        let schema_policy = self.schema_policy(&m, &path);
        let layout = self.layout(&m, &path);
        let facts = TableFacts {
            strategy,
            is_debezium: system.is_some_and(|s| s.kind.format() == Some(Format::Debezium)),
            business_key: &business_key,
            reserved: &reserved,
        };
        let merge = self.merge_options(&m, &path, &facts);
        // Debezium envelopes say when the source committed each change.
        let source_time = source
            .time
            .or_else(|| facts.is_debezium.then(|| vec!["source".to_string(), "ts_ms".to_string()]));
        TableConfig {
            name: name.to_string(),
            system: source.system,
            object: source.object,
            filter: source.filter,
            source_time,
            business_key,
            strategy,
            sequence_by: merge.sequence_by,
            delete_when: merge.delete_when,
            delete_mode: merge.delete_mode,
            ignore_columns: merge.ignore_columns,
            track_columns: merge.track_columns,
            snapshot: merge.snapshot,
            valid_time: merge.valid_time,
            open_valid_to: merge.open_valid_to,
            surrogate_key: merge.surrogate_key,
            intra_batch_all: merge.intra_batch_all,
            guardrails: merge.guardrails,
            schema_policy,
            reserved,
            apply_truncates: merge.apply_truncates,
            layout,
        }
    }

    /// `source: {system, object, filter}`; the object defaults to the table's name.
    fn source(
        &mut self,
        name: &str,
        m: &Mapping,
        path: &str,
        systems: &BTreeMap<String, System>,
    ) -> Source {
        let sp = format!("{path}.source");
        let mut source =
            Source { system: String::new(), object: name.to_string(), filter: None, time: None };
        let Some(s) = m.get("source") else {
            self.err(&sp, "missing: `source: {system: ..., object: ...}`");
            return source;
        };
        let sm = self.map(s, &sp, &["system", "object", "filter", "time_column"]);
        match self.opt_string(&sm, "system", &sp) {
            None => self.err(&format!("{sp}.system"), "missing"),
            Some(s) if !systems.contains_key(&s) => {
                // Only blame the table if the system is not merely broken itself.
                let known: Vec<_> = systems.keys().cloned().collect();
                self.err(
                    &format!("{sp}.system"),
                    format!(
                        "unknown system `{s}` (declared: {})",
                        if known.is_empty() { "none".into() } else { known.join(", ") }
                    ),
                );
            }
            Some(s) => source.system = s,
        }
        if let Some(o) = self.opt_string(&sm, "object", &sp) {
            source.object = o;
        }
        if let Some(f) = self.opt_string(&sm, "filter", &sp) {
            match expr::parse(&f) {
                Ok(e) => source.filter = Some(e),
                Err(e) => self.err(&format!("{sp}.filter"), format!("cannot parse `{f}`: {e}")),
            }
        }
        if let Some(c) = self.opt_string(&sm, "time_column", &sp) {
            let path: Vec<String> = c.split('.').map(str::to_string).collect();
            match path.iter().any(String::is_empty) {
                true => self.err(
                    &format!("{sp}.time_column"),
                    format!("`{c}` is not a column or a dotted path"),
                ),
                false => source.time = Some(path),
            }
        }
        source
    }

    /// `business_key`: one or more columns, none reserved, none twice, none
    /// declared float by the table's system.
    fn business_key(
        &mut self,
        m: &Mapping,
        path: &str,
        reserved: &Reserved,
        system: Option<&System>,
    ) -> Vec<String> {
        let kp = format!("{path}.business_key");
        let business_key = match m.get("business_key") {
            None => {
                self.err(&kp, "missing: one or more columns that identify a row");
                vec![]
            }
            Some(v) => self.list(v, &kp),
        };
        if m.contains_key("business_key") && business_key.is_empty() {
            self.err(&kp, "must name at least one column");
        }
        for k in &business_key {
            if reserved.is_reserved(k) {
                self.err(&kp, format!("`{k}` is a reserved column changelake writes itself"));
            }
        }
        for (i, k) in business_key.iter().enumerate() {
            if business_key[..i].contains(k) {
                self.err(&kp, format!("`{k}` is listed twice"));
            }
        }
        if let Some(sys) = system {
            for (c, t) in &sys.columns {
                if business_key.contains(c) && *t == DType::Float {
                    self.err(&kp, format!("`{c}` is declared float; floating-point business keys have no stable identity"));
                }
            }
        }
        business_key
    }

    fn strategy(&mut self, m: &Mapping, path: &str) -> Strategy {
        match self.opt_string(m, "strategy", path).as_deref() {
            Some("scd1") => Strategy::Scd1,
            Some("scd2") => Strategy::Scd2,
            None => {
                self.err(&format!("{path}.strategy"), "missing: scd1 or scd2");
                Strategy::Scd1
            }
            Some(other) => {
                self.err(
                    &format!("{path}.strategy"),
                    format!("unknown strategy `{other}` (expected scd1 or scd2)"),
                );
                Strategy::Scd1
            }
        }
    }

    fn schema_policy(&mut self, m: &Mapping, path: &str) -> SchemaPolicy {
        match self.opt_string(m, "schema_policy", path).as_deref() {
            None | Some("additive") => SchemaPolicy::Additive,
            Some("ignore") => SchemaPolicy::Ignore,
            Some("strict") => SchemaPolicy::Strict,
            Some(other) => {
                self.err(
                    &format!("{path}.schema_policy"),
                    format!("unknown policy `{other}` (expected additive, ignore or strict)"),
                );
                SchemaPolicy::Additive
            }
        }
    }
}
