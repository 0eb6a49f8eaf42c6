//! `systems`: where events come from — Kafka topics, CSV files or JSONL
//! files — and the column types a system declares (docs/config.md, systems
//! and column types; docs/events.md for the event formats).

use std::collections::BTreeMap;

use serde_yaml::Value as Y;

use super::cx::{child, Cx, Mapping};
use super::{defaults, Format, OutOfRange, System, SystemKind};
use crate::value::DType;

impl Cx {
    /// Every system of the `systems` section, by name.
    pub(super) fn systems(&mut self, top: &Mapping) -> BTreeMap<String, System> {
        let mut systems = BTreeMap::new();
        match top.get("systems") {
            None => self.err("systems", "missing: at least one system is required"),
            Some(v) => {
                for (name, sv) in self.map(v, "systems", &[]) {
                    self.identifier(&name, &format!("systems.{name}"), "system");
                    if let Some(s) = self.system(&name, sv) {
                        systems.insert(name, s);
                    }
                }
            }
        }
        systems
    }

    /// `systems.<name>`; None when its type is missing or unknown.
    fn system(&mut self, name: &str, v: &Y) -> Option<System> {
        let path = format!("systems.{name}");
        let ty = match v.get("type").and_then(|t| t.as_str()) {
            Some(t) => t.to_string(),
            None => {
                self.err(&format!("{path}.type"), "missing: one of kafka, csv, jsonl");
                self.map(v, &path, &[]);
                return None;
            }
        };
        let allowed: &[&str] = match ty.as_str() {
            "kafka" => &[
                "type",
                "brokers",
                "group_id",
                "topic",
                "format",
                "kafka",
                "columns",
                "unavailable_value_placeholder",
                "on_offset_out_of_range",
                "schema_registry",
            ],
            "csv" => &["type", "path", "delimiter", "columns"],
            "jsonl" => &["type", "path", "format", "columns", "unavailable_value_placeholder"],
            other => {
                self.err(
                    &format!("{path}.type"),
                    format!("unknown system type `{other}` (expected kafka, csv or jsonl)"),
                );
                return None;
            }
        };
        let m = self.map(v, &path, allowed);
        let columns = self.declared_columns(&m, &path);
        let kind = match ty.as_str() {
            "kafka" => self.kafka_system(name, &m, &path),
            "csv" => self.csv_system(&m, &path),
            _ => self.jsonl_system(&m, &path),
        };
        let unavailable_placeholder = self.unavailable_placeholder(&m, &path, &kind);
        Some(System { name: name.to_string(), kind, columns, unavailable_placeholder })
    }

    /// `unavailable_value_placeholder`: Debezium's default unless set; only
    /// Debezium events carry one.
    fn unavailable_placeholder(
        &mut self,
        m: &Mapping,
        path: &str,
        kind: &SystemKind,
    ) -> Option<String> {
        let set = self.opt_string(m, "unavailable_value_placeholder", path);
        let debezium = matches!(
            kind,
            SystemKind::Kafka { format: Format::Debezium, .. }
                | SystemKind::Jsonl { format: Format::Debezium, .. }
        );
        match set {
            Some(_) if !debezium => {
                self.err(
                    &format!("{path}.unavailable_value_placeholder"),
                    "only Debezium events carry a placeholder (format: debezium)",
                );
                None
            }
            Some(p) if p.is_empty() => {
                self.err(&format!("{path}.unavailable_value_placeholder"), "must not be empty");
                None
            }
            Some(p) => Some(p),
            None => debezium.then(|| defaults::UNAVAILABLE_PLACEHOLDER.to_string()),
        }
    }

    /// `columns: {id: integer}`: column types the system declares.
    fn declared_columns(&mut self, m: &Mapping, path: &str) -> Vec<(String, DType)> {
        let mut columns = vec![];
        if let Some(c) = m.get("columns") {
            let cp = format!("{path}.columns");
            for (col, t) in self.map(c, &cp, &[]) {
                let tp = child(&cp, &col);
                if let Some(text) = self.string(t, &tp) {
                    match DType::parse(&text) {
                        Ok(dt) => columns.push((col, dt)),
                        Err(e) => self.err(&tp, e),
                    }
                }
            }
        }
        columns
    }

    fn kafka_system(&mut self, name: &str, m: &Mapping, path: &str) -> SystemKind {
        let brokers = self.opt_string(m, "brokers", path).unwrap_or_else(|| {
            self.err(
                &format!("{path}.brokers"),
                "missing: host:port of the Kafka bootstrap servers",
            );
            String::new()
        });
        let group_id =
            self.opt_string(m, "group_id", path).unwrap_or_else(|| defaults::kafka_group_id(name));
        let topic =
            self.opt_string(m, "topic", path).unwrap_or_else(|| defaults::KAFKA_TOPIC.into());
        let (format, avro) = match self.opt_string(m, "format", path) {
            None => (defaults::KAFKA_FORMAT, false),
            Some(name) => super::registry::kafka_format(&name).unwrap_or_else(|| {
                self.err(
                    &format!("{path}.format"),
                    format!(
                        "unknown format `{name}` (expected debezium, json, debezium-avro or avro)"
                    ),
                );
                (defaults::KAFKA_FORMAT, false)
            }),
        };
        let avro = self.schema_registry(m, path, avro).map(Box::new);
        let mut kafka = BTreeMap::new();
        if let Some(k) = m.get("kafka") {
            let kp = format!("{path}.kafka");
            for (key, val) in self.map(k, &kp, &[]) {
                let errors = self.errors.len();
                if let Some(s) = self.string(val, &child(&kp, &key)) {
                    if self.errors.len() == errors {
                        self.librdkafka_setting(&key, &s, &child(&kp, &key));
                    }
                    kafka.insert(key, s);
                }
            }
        }
        let on_out_of_range = match self.opt_string(m, "on_offset_out_of_range", path).as_deref() {
            None | Some("fail") => OutOfRange::Fail,
            Some("earliest") => OutOfRange::Earliest,
            Some(other) => {
                self.err(
                    &format!("{path}.on_offset_out_of_range"),
                    format!("unknown value `{other}` (expected fail or earliest)"),
                );
                OutOfRange::Fail
            }
        };
        SystemKind::Kafka { brokers, group_id, topic, format, kafka, on_out_of_range, avro }
    }

    /// librdkafka judges its own settings (names and values), exactly as
    /// the daemon's client will: `check` refuses what `run` would.
    fn librdkafka_setting(&mut self, key: &str, value: &str, path: &str) {
        let mut c = rdkafka::ClientConfig::new();
        c.set(key, value);
        if let Err(e) = c.create_native_config() {
            self.err(path, format!("librdkafka refuses it: {e}"));
        }
    }

    fn csv_system(&mut self, m: &Mapping, path: &str) -> SystemKind {
        let delimiter = match self.opt_string(m, "delimiter", path) {
            None => defaults::CSV_DELIMITER,
            Some(d) if d.len() == 1 => d.as_bytes()[0],
            Some(d) if d == "\\t" || d == "\t" => b'\t',
            Some(_) => {
                self.err(&format!("{path}.delimiter"), "expected a single character");
                defaults::CSV_DELIMITER
            }
        };
        let p = self.file_path(m, path);
        SystemKind::Csv { path: p, delimiter }
    }

    fn jsonl_system(&mut self, m: &Mapping, path: &str) -> SystemKind {
        SystemKind::Jsonl {
            path: self.file_path(m, path),
            format: self.format(m, path, defaults::JSONL_FORMAT),
        }
    }

    fn format(&mut self, m: &Mapping, path: &str, default: Format) -> Format {
        let Some(name) = self.opt_string(m, "format", path) else { return default };
        Format::parse(&name).unwrap_or_else(|| {
            let hint = if super::registry::kafka_format(&name).is_some() {
                " (Avro is read from Kafka only)"
            } else {
                ""
            };
            self.err(
                &format!("{path}.format"),
                format!("unknown format `{name}` (expected debezium or json){hint}"),
            );
            default
        })
    }

    fn file_path(&mut self, m: &Mapping, path: &str) -> String {
        self.opt_string(m, "path", path).unwrap_or_else(|| {
            self.err(&format!("{path}.path"), "missing: a file or glob, e.g. data/{object}.csv");
            String::new()
        })
    }
}
