//! Configuration: the YAML file of docs/config.md, loaded into a typed
//! [`Config`].
//!
//! The YAML is walked by hand instead of deserialized with serde derive:
//! serde stops at the first error, while `changelake check` must report
//! *every* error at once, each with the YAML path of the offending key
//! (`bronze.tables.customer.merge.delete_mode: ...`). Every mapping declares the
//! keys it accepts, so unknown keys are errors too. `${VAR}` is substituted
//! from the environment in every string value before it is interpreted.
//!
//! One module per concern:
//! - `model`: the typed configuration; `reserved`: the columns changelake
//!   writes itself; `defaults`: every default value.
//! - `cx`: the walk's context (error collection, scalar readers), `subst`:
//!   `${VAR}`, `units`: sizes and durations, `paths`: storage and files,
//!   `select`: the tables one process of a fleet owns (`--shard`, `--tables`).
//! - One module per section: `document` (the top and the process-wide
//!   sections), `systems`, `tables`, `layout`, `merge_options`.
//! - `errors`: how a rejected config is reported.

mod cx;
mod defaults;
mod document;
mod errors;
mod layout;
mod merge_options;
mod model;
mod paths;
mod registry;
mod reserved;
mod select;
mod subst;
mod systems;
mod tables;
mod units;

#[cfg(test)]
mod tests;

use std::path::Path;

use serde_yaml::Value as Y;

pub use errors::ConfigErrors;
pub use model::{
    Batching, Config, DeadLetters, DeleteMode, Format, Guardrails, Layout, OutOfRange,
    RowCompanions, SchemaPolicy, SchemaRegistry, Strategy, System, SystemKind, TableConfig,
    ValidTime,
};
pub use paths::join_uri;
pub use reserved::Reserved;
pub use select::{owner, Selection, Shard};
pub use units::{parse_duration, parse_size};

use cx::Cx;

/// Which settings a command needs resolved. Commands that never connect to
/// a source (`show`, `tables`) read the lake with a config whose source
/// settings may name `${VAR}`s of another environment (the demo's brokers, a
/// deployment's secrets); a command about one table (`replay`, `check
/// --table`) needs that table's system only; the daemon needs everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Needs {
    Everything,
    /// Unset `${VAR}`s under `systems.*` are left empty instead of failing.
    TablesOnly,
    /// Only the named table's system must resolve (the table must exist).
    Table(String),
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        Config::load_for(path, Needs::Everything)
    }

    /// [`Config::load`] for a command that needs only `needs`.
    pub fn load_for(path: &Path, needs: Needs) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors(vec![format!("{}: cannot read: {e}", path.display())]))?;
        let base = path
            .parent()
            .map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p })
            .unwrap_or(Path::new("."));
        let base = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
        Config::parse_for(&text, &base, needs)
    }

    pub fn parse(text: &str, base_dir: &Path) -> Result<Config, ConfigErrors> {
        Config::parse_for(text, base_dir, Needs::Everything)
    }

    fn parse_for(text: &str, base_dir: &Path, needs: Needs) -> Result<Config, ConfigErrors> {
        let doc: Y = serde_yaml::from_str(text)
            .map_err(|e| ConfigErrors(vec![format!("(document): not valid YAML: {e}")]))?;
        let mut cx = Cx { errors: vec![], unset_in_systems: vec![] };
        let cfg = cx.config(&doc, base_dir);
        // Unset variables under systems nobody here reads are not errors.
        let unread = |system: &str| match &needs {
            Needs::Everything => false,
            Needs::TablesOnly => true,
            Needs::Table(t) => cfg.table(t).is_none_or(|t| t.system != system),
        };
        let mut errors: Vec<String> = (cx.errors.into_iter().enumerate())
            .filter(|(i, _)| {
                !cx.unset_in_systems.iter().any(|(at, system)| at == i && unread(system))
            })
            .map(|(_, e)| e)
            .collect();
        if let Needs::Table(t) = &needs {
            if cfg.table(t).is_none() {
                let names: Vec<&str> = cfg.tables.iter().map(|t| t.name.as_str()).collect();
                errors
                    .push(format!("bronze.tables: no table `{t}` (tables: {})", names.join(", ")));
            }
        }
        if errors.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigErrors(errors))
        }
    }

    /// Does this table read a Kafka system (the daemon's), rather than files?
    pub fn reads_kafka(&self, t: &TableConfig) -> bool {
        matches!(self.systems.get(&t.system).map(|s| &s.kind), Some(SystemKind::Kafka { .. }))
    }

    pub fn table(&self, name: &str) -> Option<&TableConfig> {
        self.tables.iter().find(|t| t.name == name)
    }
}
