//! Configuration: YAML in the seed format plus the options of SPEC section 1.
//!
//! The YAML is walked by hand instead of deserialized with serde derive:
//! serde stops at the first error, while `changelake check` must report
//! *every* error at once, each with the YAML path of the offending key
//! (`bronze.tables.customer.merge.delete_mode: ...`). Every mapping declares the
//! keys it accepts, so unknown keys are errors too. `${VAR}` is substituted
//! from the environment in every string value before it is interpreted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value as Y;

use crate::expr::{self, Expr};
use crate::value::{parse_ts, DType};

#[derive(Debug, Clone)]
pub struct Config {
    /// Directory of the config file; relative paths resolve against it.
    pub base_dir: PathBuf,
    /// Lake root: an absolute local path or an object-store URL.
    pub storage_root: String,
    pub systems: BTreeMap<String, System>,
    pub tables: Vec<TableConfig>,
    pub batching: Batching,
    pub metrics_listen: Option<String>,
    pub dead_letters: DeadLetters,
    pub shutdown_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct DeadLetters {
    pub table: String,
    pub topic: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Batching {
    pub max_rows: usize,
    pub max_bytes: usize,
    pub max_age: Duration,
    pub max_buffered_bytes: usize,
}

#[derive(Debug, Clone)]
pub struct System {
    pub name: String,
    pub kind: SystemKind,
    /// Declared column types (`columns: {id: integer}`); others are inferred.
    pub columns: Vec<(String, DType)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Debezium,
}

#[derive(Debug, Clone)]
pub enum SystemKind {
    Kafka {
        brokers: String,
        group_id: String,
        topic: String,
        format: Format,
        kafka: BTreeMap<String, String>,
    },
    Csv {
        path: String,
        delimiter: u8,
    },
    /// One event per line: flat JSON rows, or Debezium envelopes (`format: debezium`).
    Jsonl {
        path: String,
        format: Format,
    },
}

impl SystemKind {
    /// The event format of a Kafka or JSONL system (CSV has none).
    pub fn format(&self) -> Option<Format> {
        match self {
            SystemKind::Kafka { format, .. } | SystemKind::Jsonl { format, .. } => Some(*format),
            SystemKind::Csv { .. } => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Scd1,
    Scd2,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Scd1 => "scd1",
            Strategy::Scd2 => "scd2",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteMode {
    Soft,
    Hard,
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaPolicy {
    Additive,
    Ignore,
    Strict,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ValidTime {
    /// `_valid_from/_valid_to` are commit (processing) times.
    Processing,
    /// Business time read from a column of the row.
    Column(String),
    /// One literal business date for the whole run (microseconds, UTC midnight).
    Date(i64),
}

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

impl Default for Reserved {
    fn default() -> Self {
        Reserved {
            is_current: "_is_current".into(),
            valid_from: "_valid_from".into(),
            valid_to: "_valid_to".into(),
            is_deleted: "_is_deleted".into(),
            execution_id: "_execution_id".into(),
            sk: "_sk".into(),
        }
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
}

#[derive(Debug, Clone, Default)]
pub struct Guardrails {
    pub reject_duplicates: bool,
    pub reject_late: bool,
}

/// Physical layout knobs (changelake extension, see `table` module docs).
#[derive(Debug, Clone)]
pub struct Layout {
    /// Upper bound of rows per data file.
    pub file_rows: usize,
    /// Target number of files a large load of new keys is spread over.
    pub spread: usize,
    /// A Delta checkpoint every this many commits (readers and restarts
    /// replay at most this many JSON commits); vacuum runs at the same time.
    pub checkpoint_interval: usize,
    /// Compact a partition once it has this many small files (under a
    /// quarter of `file_rows` and under 1024 rows); 0 disables compaction.
    pub compact_min_files: usize,
    /// Data files removed from the table longer ago than this are deleted
    /// from storage (readers time-travelling further back lose them); None
    /// disables vacuum.
    pub vacuum_retention: Option<std::time::Duration>,
    /// Merge-on-read: updates and deletes mask stored rows with Delta
    /// deletion vectors instead of rewriting their files (new tables only;
    /// readers need the `deletionVectors` feature).
    pub deletion_vectors: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            file_rows: 65_536,
            spread: 32,
            checkpoint_interval: 20,
            compact_min_files: 16,
            vacuum_retention: Some(std::time::Duration::from_secs(7 * 24 * 3600)),
            deletion_vectors: false,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TableConfig {
    pub name: String,
    pub system: String,
    pub object: String,
    pub filter: Option<Expr>,
    pub business_key: Vec<String>,
    pub strategy: Strategy,
    pub sequence_by: Vec<String>,
    pub delete_when: Option<Expr>,
    pub delete_mode: DeleteMode,
    pub ignore_columns: Vec<String>,
    pub track_columns: Option<Vec<String>>,
    pub snapshot: bool,
    pub valid_time: ValidTime,
    pub open_valid_to: Option<i64>,
    pub surrogate_key: bool,
    pub intra_batch_all: bool,
    pub guardrails: Guardrails,
    pub schema_policy: SchemaPolicy,
    pub reserved: Reserved,
    pub apply_truncates: bool,
    pub layout: Layout,
}

/// Every problem found, each prefixed by its YAML path.
#[derive(Debug, Clone)]
pub struct ConfigErrors(pub Vec<String>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "invalid configuration ({} error{}):",
            self.0.len(),
            if self.0.len() == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors(vec![format!("{}: cannot read: {e}", path.display())]))?;
        let base = path
            .parent()
            .map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p })
            .unwrap_or(Path::new("."));
        let base = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
        Config::parse(&text, &base)
    }

    pub fn parse(text: &str, base_dir: &Path) -> Result<Config, ConfigErrors> {
        let doc: Y = serde_yaml::from_str(text)
            .map_err(|e| ConfigErrors(vec![format!("(document): not valid YAML: {e}")]))?;
        let mut cx = Cx { errors: vec![] };
        let cfg = cx.config(&doc, base_dir);
        if cx.errors.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigErrors(cx.errors))
        }
    }

    /// Does this table read a Kafka system (the daemon's), rather than files?
    pub fn reads_kafka(&self, t: &TableConfig) -> bool {
        matches!(self.systems.get(&t.system).map(|s| &s.kind), Some(SystemKind::Kafka { .. }))
    }

    pub fn table(&self, name: &str) -> Option<&TableConfig> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// Location of a table: `<root>/bronze/<table>`.
    pub fn table_uri(&self, table: &str) -> String {
        join_uri(&self.storage_root, &format!("bronze/{table}"))
    }

    pub fn dead_letter_uri(&self) -> String {
        join_uri(&self.storage_root, &self.dead_letters.table)
    }

    /// A file path from the config, resolved against the config's directory.
    pub fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }
}

pub fn join_uri(root: &str, rel: &str) -> String {
    format!("{}/{}", root.trim_end_matches('/'), rel)
}

struct Cx {
    errors: Vec<String>,
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Y) -> &'static str {
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

const RESERVED_DEFAULTS: [&str; 6] =
    ["_is_current", "_valid_from", "_valid_to", "_is_deleted", "_execution_id", "_sk"];

impl Cx {
    fn err(&mut self, path: &str, msg: impl std::fmt::Display) {
        self.errors.push(format!("{path}: {msg}"));
    }

    /// Returns the mapping's entries, reporting unknown keys and non-mappings.
    fn map<'a>(&mut self, v: &'a Y, path: &str, allowed: &[&str]) -> BTreeMap<String, &'a Y> {
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

    fn subst(&mut self, s: &str, path: &str) -> String {
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
                        Err(_) => {
                            self.err(path, format!("environment variable `{var}` is not set"))
                        }
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

    fn string(&mut self, v: &Y, path: &str) -> Option<String> {
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

    fn opt_string(&mut self, m: &BTreeMap<String, &Y>, key: &str, path: &str) -> Option<String> {
        m.get(key).and_then(|v| self.string(v, &child(path, key)))
    }

    fn bool(&mut self, m: &BTreeMap<String, &Y>, key: &str, path: &str, default: bool) -> bool {
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

    fn list(&mut self, v: &Y, path: &str) -> Vec<String> {
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

    fn config(&mut self, doc: &Y, base: &Path) -> Config {
        let top = self.map(
            doc,
            "",
            &[
                "storage",
                "systems",
                "bronze",
                "batching",
                "metrics",
                "dead_letters",
                "shutdown_timeout",
            ],
        );

        let storage =
            top.get("storage").map(|v| self.map(v, "storage", &["root"])).unwrap_or_default();
        let root = self.opt_string(&storage, "root", "storage").unwrap_or_else(|| "./lake".into());
        let storage_root = if root.contains("://") {
            root
        } else {
            let p = Path::new(&root);
            let abs = if p.is_absolute() { p.to_path_buf() } else { base.join(p) };
            normalize(&abs).to_string_lossy().into_owned()
        };

        let mut systems = BTreeMap::new();
        match top.get("systems") {
            None => self.err("systems", "missing: at least one system is required"),
            Some(v) => {
                for (name, sv) in self.map(v, "systems", &[]) {
                    if let Some(s) = self.system(&name, sv) {
                        systems.insert(name, s);
                    }
                }
            }
        }

        let mut tables = vec![];
        match top.get("bronze") {
            None => self.err("bronze", "missing: `bronze.tables` declares the tables to write"),
            Some(b) => {
                let bm = self.map(b, "bronze", &["tables"]);
                match bm.get("tables") {
                    None => self.err("bronze.tables", "missing"),
                    Some(t) => {
                        if let Y::Mapping(m) = t {
                            for (k, tv) in m {
                                let Some(name) = k.as_str() else { continue };
                                if let Some(tc) = self.table(name, tv, &systems) {
                                    tables.push(tc);
                                }
                            }
                        } else {
                            self.err("bronze.tables", "expected a mapping of table name to table");
                        }
                    }
                }
            }
        }

        let bm = top
            .get("batching")
            .map(|v| {
                self.map(v, "batching", &["max_rows", "max_bytes", "max_age", "max_buffered_bytes"])
            })
            .unwrap_or_default();
        let mut batching = Batching {
            max_rows: 100_000,
            max_bytes: 64 << 20,
            max_age: Duration::from_secs(5),
            max_buffered_bytes: 512 << 20,
        };
        if let Some(v) = bm.get("max_rows") {
            match v.as_u64() {
                Some(n) if n > 0 => batching.max_rows = n as usize,
                _ => self.err("batching.max_rows", "expected a positive integer"),
            }
        }
        for (key, slot) in [
            ("max_bytes", &mut batching.max_bytes),
            ("max_buffered_bytes", &mut batching.max_buffered_bytes),
        ] {
            if let Some(v) = bm.get(key) {
                let p = format!("batching.{key}");
                match self.string(v, &p).and_then(|s| parse_size(&s)) {
                    Some(n) if n > 0 => *slot = n,
                    _ => self.err(&p, "expected a size such as 64MiB, 512KB or 1048576"),
                }
            }
        }
        if let Some(v) = bm.get("max_age") {
            match self.string(v, "batching.max_age").and_then(|s| parse_duration(&s)) {
                Some(d) => batching.max_age = d,
                None => self.err("batching.max_age", "expected a duration such as 5s, 500ms or 1m"),
            }
        }

        let mm =
            top.get("metrics").map(|v| self.map(v, "metrics", &["listen"])).unwrap_or_default();
        let metrics_listen = self.opt_string(&mm, "listen", "metrics");
        if let Some(l) = &metrics_listen {
            if l.parse::<std::net::SocketAddr>().is_err() {
                self.err(
                    "metrics.listen",
                    format!("`{l}` is not a socket address such as 127.0.0.1:9464"),
                );
            }
        }
        let dm = top
            .get("dead_letters")
            .map(|v| self.map(v, "dead_letters", &["table", "topic"]))
            .unwrap_or_default();
        let dead_letters = DeadLetters {
            table: self
                .opt_string(&dm, "table", "dead_letters")
                .unwrap_or_else(|| "_dead_letters".into()),
            topic: self.opt_string(&dm, "topic", "dead_letters"),
        };
        let shutdown_timeout = match top.get("shutdown_timeout") {
            None => Duration::from_secs(30),
            Some(v) => match self.string(v, "shutdown_timeout").and_then(|s| parse_duration(&s)) {
                Some(d) => d,
                None => {
                    self.err("shutdown_timeout", "expected a duration such as 30s");
                    Duration::from_secs(30)
                }
            },
        };
        if tables.is_empty() && self.errors.is_empty() {
            self.err("bronze.tables", "no tables declared");
        }
        Config {
            base_dir: base.to_path_buf(),
            storage_root,
            systems,
            tables,
            batching,
            metrics_listen,
            dead_letters,
            shutdown_timeout,
        }
    }

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
            "kafka" => &["type", "brokers", "group_id", "topic", "format", "kafka", "columns"],
            "csv" => &["type", "path", "delimiter", "columns"],
            "jsonl" => &["type", "path", "format", "columns"],
            other => {
                self.err(
                    &format!("{path}.type"),
                    format!("unknown system type `{other}` (expected kafka, csv or jsonl)"),
                );
                return None;
            }
        };
        let m = self.map(v, &path, allowed);
        let mut columns = vec![];
        if let Some(c) = m.get("columns") {
            let cp = format!("{path}.columns");
            for (col, t) in self.map(c, &cp, &[]) {
                let tp = child(&cp, &col);
                match self.string(t, &tp).and_then(|s| DType::parse(&s)) {
                    Some(dt) => columns.push((col, dt)),
                    None => self.err(
                        &tp,
                        "unknown type (expected integer, float, boolean, timestamp or string)",
                    ),
                }
            }
        }
        let kind = match ty.as_str() {
            "kafka" => {
                let brokers = self.opt_string(&m, "brokers", &path).unwrap_or_else(|| {
                    self.err(
                        &format!("{path}.brokers"),
                        "missing: host:port of the Kafka bootstrap servers",
                    );
                    String::new()
                });
                let group_id = self
                    .opt_string(&m, "group_id", &path)
                    .unwrap_or_else(|| format!("changelake-{name}"));
                let topic =
                    self.opt_string(&m, "topic", &path).unwrap_or_else(|| "{object}".into());
                let format = self.format(&m, &path, Format::Debezium);
                let mut kafka = BTreeMap::new();
                if let Some(k) = m.get("kafka") {
                    let kp = format!("{path}.kafka");
                    for (key, val) in self.map(k, &kp, &[]) {
                        if let Some(s) = self.string(val, &child(&kp, &key)) {
                            kafka.insert(key, s);
                        }
                    }
                }
                SystemKind::Kafka { brokers, group_id, topic, format, kafka }
            }
            "csv" => {
                let delimiter = match self.opt_string(&m, "delimiter", &path) {
                    None => b',',
                    Some(d) if d.len() == 1 => d.as_bytes()[0],
                    Some(d) if d == "\\t" || d == "\t" => b'\t',
                    Some(_) => {
                        self.err(&format!("{path}.delimiter"), "expected a single character");
                        b','
                    }
                };
                let p = self.file_path(&m, &path);
                SystemKind::Csv { path: p, delimiter }
            }
            _ => SystemKind::Jsonl {
                path: self.file_path(&m, &path),
                format: self.format(&m, &path, Format::Json),
            },
        };
        Some(System { name: name.to_string(), kind, columns })
    }

    fn format(&mut self, m: &BTreeMap<String, &Y>, path: &str, default: Format) -> Format {
        match self.opt_string(m, "format", path).as_deref() {
            None => default,
            Some("debezium") => Format::Debezium,
            Some("json") => Format::Json,
            Some(other) => {
                self.err(
                    &format!("{path}.format"),
                    format!("unknown format `{other}` (expected debezium or json)"),
                );
                default
            }
        }
    }

    fn file_path(&mut self, m: &BTreeMap<String, &Y>, path: &str) -> String {
        self.opt_string(m, "path", path).unwrap_or_else(|| {
            self.err(&format!("{path}.path"), "missing: a file or glob, e.g. data/{object}.csv");
            String::new()
        })
    }

    fn table(
        &mut self,
        name: &str,
        v: &Y,
        systems: &BTreeMap<String, System>,
    ) -> Option<TableConfig> {
        let path = format!("bronze.tables.{name}");
        let m = self.map(
            v,
            &path,
            &["source", "business_key", "strategy", "merge", "schema_policy", "columns", "layout"],
        );

        // Source.
        let sp = format!("{path}.source");
        let (mut system, mut object, mut filter) = (String::new(), name.to_string(), None);
        match m.get("source") {
            None => self.err(&sp, "missing: `source: {system: ..., object: ...}`"),
            Some(s) => {
                let sm = self.map(s, &sp, &["system", "object", "filter"]);
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
                    Some(s) => system = s,
                }
                if let Some(o) = self.opt_string(&sm, "object", &sp) {
                    object = o;
                }
                if let Some(f) = self.opt_string(&sm, "filter", &sp) {
                    match expr::parse(&f) {
                        Ok(e) => filter = Some(e),
                        Err(e) => {
                            self.err(&format!("{sp}.filter"), format!("cannot parse `{f}`: {e}"))
                        }
                    }
                }
            }
        }

        // Reserved-column names first: business keys and options are checked against them.
        let mut reserved = Reserved::default();
        if let Some(c) = m.get("columns") {
            let cp = format!("{path}.columns");
            let cm = self.map(c, &cp, &RESERVED_DEFAULTS);
            for (k, val) in cm {
                let kp = child(&cp, &k);
                let Some(new) = self.string(val, &kp) else {
                    continue;
                };
                if new.is_empty() {
                    self.err(&kp, "must not be empty");
                    continue;
                }
                match k.as_str() {
                    "_is_current" => reserved.is_current = new,
                    "_valid_from" => reserved.valid_from = new,
                    "_valid_to" => reserved.valid_to = new,
                    "_is_deleted" => reserved.is_deleted = new,
                    "_execution_id" => reserved.execution_id = new,
                    _ => reserved.sk = new,
                }
            }
            let names = reserved.all();
            for (i, n) in names.iter().enumerate() {
                if names[..i].contains(n) {
                    self.err(&cp, format!("two reserved columns are both named `{n}`"));
                }
            }
        }
        let is_reserved =
            |c: &str, r: &Reserved| r.all().contains(&c) || RESERVED_DEFAULTS.contains(&c);

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
            if is_reserved(k, &reserved) {
                self.err(&kp, format!("`{k}` is a reserved column changelake writes itself"));
            }
        }
        for (i, k) in business_key.iter().enumerate() {
            if business_key[..i].contains(k) {
                self.err(&kp, format!("`{k}` is listed twice"));
            }
        }
        if let Some(sys) = systems.get(&system) {
            for (c, t) in &sys.columns {
                if business_key.contains(c) && *t == DType::Float {
                    self.err(&kp, format!("`{c}` is declared float; floating-point business keys have no stable identity"));
                }
            }
        }

        let strategy = match self.opt_string(&m, "strategy", &path).as_deref() {
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
        };

        let schema_policy = match self.opt_string(&m, "schema_policy", &path).as_deref() {
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
        };

        let mut layout = Layout::default();
        if let Some(l) = m.get("layout") {
            let lp = format!("{path}.layout");
            let lm = self.map(
                l,
                &lp,
                &[
                    "file_rows",
                    "spread",
                    "checkpoint_interval",
                    "compact_min_files",
                    "vacuum_retention",
                    "deletion_vectors",
                ],
            );
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
        }

        // merge:
        let mp = format!("{path}.merge");
        let mm = m
            .get("merge")
            .map(|v| {
                self.map(
                    v,
                    &mp,
                    &[
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
                    ],
                )
            })
            .unwrap_or_default();
        let sequence_by = mm
            .get("sequence_by")
            .map(|v| self.list(v, &format!("{mp}.sequence_by")))
            .unwrap_or_default();
        let is_debezium =
            systems.get(&system).is_some_and(|s| s.kind.format() == Some(Format::Debezium));
        let delete_when = match self.opt_string(&mm, "delete_when", &mp) {
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
            None if is_debezium => expr::parse("op = 'd'").ok(),
            None => None,
        };
        let delete_mode = match self.opt_string(&mm, "delete_mode", &mp).as_deref() {
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
        let ignore_columns = mm
            .get("ignore_columns")
            .map(|v| self.list(v, &format!("{mp}.ignore_columns")))
            .unwrap_or_default();
        let track_columns =
            mm.get("track_columns").map(|v| self.list(v, &format!("{mp}.track_columns")));
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
            for c in cols.into_iter().flatten() {
                if business_key.contains(c) {
                    self.err(&format!("{mp}.{opt}"), format!("`{c}` is a business key column"));
                }
                if is_reserved(c, &reserved) {
                    self.err(&format!("{mp}.{opt}"), format!("`{c}` is a reserved column"));
                }
            }
        }
        let snapshot = self.bool(&mm, "snapshot", &mp, false);
        let apply_truncates = self.bool(&mm, "apply_truncates", &mp, false);
        let scd2_only = |cx: &mut Cx, key: &str| {
            if strategy != Strategy::Scd2 && mm.contains_key(key) {
                cx.err(&format!("{mp}.{key}"), "only applies to strategy scd2");
            }
        };
        scd2_only(self, "valid_time");
        scd2_only(self, "open_valid_to");
        scd2_only(self, "surrogate_key");
        scd2_only(self, "intra_batch");
        let valid_time = match self.opt_string(&mm, "valid_time", &mp) {
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
        };
        let open_valid_to = match self.opt_string(&mm, "open_valid_to", &mp) {
            None => None,
            Some(s) => match parse_ts(&s) {
                Some(t) => Some(t),
                None => {
                    self.err(
                        &format!("{mp}.open_valid_to"),
                        format!("`{s}` is not a timestamp or date"),
                    );
                    None
                }
            },
        };
        let surrogate_key = self.bool(&mm, "surrogate_key", &mp, false);
        let intra_batch_all = match self.opt_string(&mm, "intra_batch", &mp).as_deref() {
            None | Some("latest") => false,
            Some("all") => true,
            Some(other) => {
                self.err(
                    &format!("{mp}.intra_batch"),
                    format!("unknown value `{other}` (expected latest or all)"),
                );
                false
            }
        };
        let mut guardrails = Guardrails::default();
        if let Some(g) = mm.get("guardrails") {
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
        }
        if apply_truncates && strategy == Strategy::Scd2 {
            self.err(&format!("{mp}.apply_truncates"), "only applies to strategy scd1");
        }

        Some(TableConfig {
            name: name.to_string(),
            system,
            object,
            filter,
            business_key,
            strategy,
            sequence_by,
            delete_when,
            delete_mode,
            ignore_columns,
            track_columns,
            snapshot,
            valid_time,
            open_valid_to,
            surrogate_key,
            intra_batch_all,
            guardrails,
            schema_policy,
            reserved,
            apply_truncates,
            layout,
        })
    }
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num.parse().ok()?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "kib" | "k" => 1 << 10,
        "mb" => 1_000_000,
        "mib" | "m" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" | "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => return None,
    };
    (secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(y: &str) -> Result<Config, ConfigErrors> {
        Config::parse(y, Path::new("/cfg"))
    }

    fn errors(y: &str) -> Vec<String> {
        parse(y).expect_err("config should be rejected").0
    }

    const SEED: &str = r#"
systems:
  crm: {type: csv, path: data/customer.csv}
bronze:
  tables:
    customer:
      source: { system: crm, object: account }
      business_key: [id]
      strategy: scd2
      merge:
        sequence_by: [seq]
        delete_when: "op = 'D'"
        ignore_columns: [modified_on]
"#;

    #[test]
    fn seed_config_loads_with_defaults() {
        let c = parse(SEED).unwrap();
        assert_eq!(c.storage_root, "/cfg/lake");
        let t = c.table("customer").unwrap();
        assert_eq!(t.strategy, Strategy::Scd2);
        assert_eq!(t.delete_mode, DeleteMode::Soft);
        assert_eq!(t.sequence_by, vec!["seq"]);
        assert_eq!(c.table_uri("customer"), "/cfg/lake/bronze/customer");
        assert_eq!(c.batching.max_rows, 100_000);
        assert_eq!(c.batching.max_bytes, 64 << 20);
    }

    #[test]
    fn config_rejects_unknown_keys_with_their_path() {
        let e = errors(&SEED.replace("ignore_columns", "ignore_colums"));
        assert!(
            e.iter().any(|m| m.starts_with("bronze.tables.customer.merge.ignore_colums:")),
            "{e:?}"
        );
        let e = errors(&format!("{SEED}\nextra: 1\n"));
        assert!(e.iter().any(|m| m.starts_with("extra:")), "{e:?}");
    }

    #[test]
    fn config_reports_every_error_at_once() {
        let y = SEED
            .replace("strategy: scd2", "strategy: scd2\n      schema_policy: loose")
            .replace(
                "delete_when: \"op = 'D'\"",
                "delete_when: \"op = \"\n        delete_mode: hard\n        track_columns: [city]",
            )
            .replace("system: crm", "system: nope");
        let e = errors(&y);
        for needle in
            ["schema_policy", "delete_when", "delete_mode", "track_columns", "source.system"]
        {
            assert!(e.iter().any(|m| m.contains(needle)), "missing {needle} in {e:?}");
        }
    }

    #[test]
    fn config_rejects_missing_business_key() {
        let e = errors(&SEED.replace("business_key: [id]", ""));
        assert!(e.iter().any(|m| m.starts_with("bronze.tables.customer.business_key")), "{e:?}");
    }

    #[test]
    fn config_rejects_reserved_business_key() {
        let e = errors(&SEED.replace("business_key: [id]", "business_key: [id, _is_current]"));
        assert!(e.iter().any(|m| m.contains("business_key") && m.contains("_is_current")), "{e:?}");
        let renamed = SEED.replace(
            "business_key: [id]",
            "business_key: [is_current]\n      columns: {_is_current: is_current}",
        );
        assert!(errors(&renamed).iter().any(|m| m.contains("is_current")));
    }

    #[test]
    fn config_rejects_hard_delete_with_scd2() {
        let e =
            errors(&SEED.replace("ignore_columns", "delete_mode: hard\n        ignore_columns"));
        assert!(
            e.iter()
                .any(|m| m.starts_with("bronze.tables.customer.merge.delete_mode")
                    && m.contains("scd2")),
            "{e:?}"
        );
        assert!(parse(
            &SEED
                .replace("scd2", "scd1")
                .replace("ignore_columns", "delete_mode: hard\n        ignore_columns")
        )
        .is_ok());
    }

    #[test]
    fn config_rejects_track_columns_with_ignore_columns() {
        let e = errors(
            &SEED.replace("ignore_columns", "track_columns: [city]\n        ignore_columns"),
        );
        assert!(
            e.iter().any(|m| m.contains("track_columns") && m.contains("ignore_columns")),
            "{e:?}"
        );
    }

    #[test]
    fn config_rejects_unparsable_delete_when() {
        let e = errors(&SEED.replace("op = 'D'", "op = = 'D'"));
        assert!(
            e.iter().any(|m| m.starts_with("bronze.tables.customer.merge.delete_when")),
            "{e:?}"
        );
    }

    #[test]
    fn config_rejects_unknown_system() {
        let e = errors(&SEED.replace("system: crm", "system: erp"));
        assert!(e.iter().any(|m| m.starts_with("bronze.tables.customer.source.system") && m.contains("erp")), "{e:?}");
        let e = errors(&SEED.replace("type: csv", "type: ftp"));
        assert!(e.iter().any(|m| m.starts_with("systems.crm.type")), "{e:?}");
    }

    #[test]
    fn config_rejects_malformed_valid_time() {
        for bad in
            ["valid_time: business", "valid_time: \"date:2024-13-01\"", "valid_time: \"column:\""]
        {
            let e =
                errors(&SEED.replace("ignore_columns", &format!("{bad}\n        ignore_columns")));
            assert!(
                e.iter().any(|m| m.starts_with("bronze.tables.customer.merge.valid_time")),
                "{bad}: {e:?}"
            );
        }
        let ok =
            parse(&SEED.replace(
                "ignore_columns",
                "valid_time: \"date:2026-01-01\"\n        ignore_columns",
            ))
            .unwrap();
        assert!(matches!(ok.tables[0].valid_time, ValidTime::Date(_)));
    }

    #[test]
    fn config_rejects_float_business_key_when_declared() {
        let y = SEED
            .replace("path: data/customer.csv}", "path: data/customer.csv, columns: {id: float}}");
        let e = errors(&y);
        assert!(e.iter().any(|m| m.contains("business_key") && m.contains("float")), "{e:?}");
    }

    #[test]
    fn config_substitutes_environment_variables() {
        std::env::set_var("CHANGELAKE_TEST_ROOT", "/data/lake");
        let c =
            parse(&format!("storage: {{root: \"${{CHANGELAKE_TEST_ROOT}}\"}}\n{SEED}")).unwrap();
        assert_eq!(c.storage_root, "/data/lake");
        let e = errors(&format!("storage: {{root: \"${{CHANGELAKE_TEST_UNSET_VAR}}\"}}\n{SEED}"));
        assert!(
            e.iter()
                .any(|m| m.starts_with("storage.root") && m.contains("CHANGELAKE_TEST_UNSET_VAR")),
            "{e:?}"
        );
    }

    #[test]
    fn config_resolves_relative_paths_against_the_config_dir() {
        let c = parse(&format!("storage: {{root: ../lake}}\n{SEED}")).unwrap();
        assert_eq!(c.storage_root, "/lake");
        assert_eq!(c.resolve("data/x.csv"), PathBuf::from("/cfg/data/x.csv"));
        let c = parse(&format!("storage: {{root: \"s3://bucket/lake\"}}\n{SEED}")).unwrap();
        assert_eq!(c.table_uri("customer"), "s3://bucket/lake/bronze/customer");
    }

    #[test]
    fn config_debezium_default_delete_when_is_op_d() {
        let y = r#"
systems:
  crm: {type: kafka, brokers: "localhost:9092", topic: "crm.dbo.{object}"}
bronze:
  tables:
    account:
      source: {system: crm, object: account}
      business_key: [accountid]
      strategy: scd1
"#;
        let c = parse(y).unwrap();
        assert_eq!(c.tables[0].delete_when, expr::parse("op = 'd'").ok());
        match &c.systems["crm"].kind {
            SystemKind::Kafka { group_id, format, .. } => {
                assert_eq!(group_id, "changelake-crm");
                assert_eq!(*format, Format::Debezium);
            }
            _ => panic!(),
        }
    }

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("64MiB"), Some(64 << 20));
        assert_eq!(parse_size("10kb"), Some(10_000));
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_size("lots"), None);
    }
}
