//! The top of the config file: which sections it has, and the process-wide
//! ones — storage, batching, metrics, dead letters, shutdown
//! (docs/config.md, storage and process settings; docs/operations.md).
//! Systems and tables have their own modules.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_yaml::Value as Y;

use super::cx::{Cx, Mapping};
use super::units::{parse_duration, parse_size};
use super::{defaults, paths, Batching, Config, DeadLetters};
use crate::storage::StorageOptions;

const TOP_KEYS: &[&str] =
    &["storage", "systems", "bronze", "batching", "metrics", "dead_letters", "shutdown_timeout"];

impl Cx {
    /// The whole document, section by section.
    pub(super) fn config(&mut self, doc: &Y, base: &Path) -> Config {
        let top = self.map(doc, "", TOP_KEYS);
        let (storage_root, storage_options) = self.storage(&top, base);
        let systems = self.systems(&top);
        let tables = self.tables(&top, &systems);
        let batching = self.batching(&top);
        let metrics_listen = self.metrics_listen(&top);
        let dead_letters = self.dead_letters(&top);
        let shutdown_timeout = self.shutdown_timeout(&top);
        if tables.is_empty() && self.errors.is_empty() {
            self.err("bronze.tables", "no tables declared");
        }
        Config {
            base_dir: base.to_path_buf(),
            storage_root,
            storage_options,
            systems,
            tables,
            batching,
            metrics_listen,
            dead_letters,
            shutdown_timeout,
        }
    }

    /// `storage.root`, absolute (relative paths resolve against the config's
    /// directory), refused when this build cannot write it; `storage.options`,
    /// the object-store settings (docs/object-storage.md).
    fn storage(&mut self, top: &Mapping, base: &Path) -> (String, StorageOptions) {
        let storage = top
            .get("storage")
            .map(|v| self.map(v, "storage", &["root", "options"]))
            .unwrap_or_default();
        let root = self
            .opt_string(&storage, "root", "storage")
            .unwrap_or_else(|| defaults::STORAGE_ROOT.into());
        if let Err(e) = crate::storage::check_root(&root) {
            self.err("storage.root", e);
        }
        let mut options = BTreeMap::new();
        if let Some(o) = storage.get("options") {
            for (key, val) in self.map(o, "storage.options", &[]) {
                if let Some(s) = self.string(val, &format!("storage.options.{key}")) {
                    options.insert(key, s);
                }
            }
        }
        (paths::storage_root(root, base), StorageOptions::new(options))
    }

    /// `batching`: when a table's open batch is committed, and the memory bound.
    fn batching(&mut self, top: &Mapping) -> Batching {
        let bm = top
            .get("batching")
            .map(|v| {
                self.map(v, "batching", &["max_rows", "max_bytes", "max_age", "max_buffered_bytes"])
            })
            .unwrap_or_default();
        let mut batching = Batching::default();
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
        batching
    }

    /// `metrics.listen`: the socket address `/metrics` is served on.
    fn metrics_listen(&mut self, top: &Mapping) -> Option<String> {
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
        metrics_listen
    }

    /// `dead_letters`: the table (and optional topic) bad input goes to.
    fn dead_letters(&mut self, top: &Mapping) -> DeadLetters {
        let dm = top
            .get("dead_letters")
            .map(|v| self.map(v, "dead_letters", &["table", "topic"]))
            .unwrap_or_default();
        let table = self
            .opt_string(&dm, "table", "dead_letters")
            .unwrap_or_else(|| defaults::DEAD_LETTER_TABLE.into());
        self.identifier(&table, "dead_letters.table", "table");
        DeadLetters { table, topic: self.opt_string(&dm, "topic", "dead_letters") }
    }

    /// `shutdown_timeout`: how long open batches may take to commit on shutdown.
    fn shutdown_timeout(&mut self, top: &Mapping) -> Duration {
        match top.get("shutdown_timeout") {
            None => defaults::SHUTDOWN_TIMEOUT,
            Some(v) => match self.string(v, "shutdown_timeout").and_then(|s| parse_duration(&s)) {
                Some(d) => d,
                None => {
                    self.err("shutdown_timeout", "expected a duration such as 30s");
                    defaults::SHUTDOWN_TIMEOUT
                }
            },
        }
    }
}
