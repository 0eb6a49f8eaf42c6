//! Where things live: the lake root, table locations under it, and file
//! paths relative to the config file (docs/config.md, storage;
//! docs/commit-protocol.md, where tables live).

use std::path::{Component, Path, PathBuf};

use super::Config;
use crate::storage::Location;

impl Config {
    /// Location of a table: `<root>/bronze/<table>`.
    pub fn table_uri(&self, table: &str) -> String {
        join_uri(&self.storage_root, &format!("bronze/{table}"))
    }

    pub fn dead_letter_uri(&self) -> String {
        join_uri(&self.storage_root, &self.dead_letters.table)
    }

    /// A table's location with the store settings to reach it.
    pub fn table_location(&self, table: &str) -> Location {
        Location::new(self.table_uri(table), self.storage_options.clone(), table)
    }

    /// The dead-letter table's location (under the same root).
    pub fn dead_letter_location(&self) -> Location {
        let name = &self.dead_letters.table;
        Location::new(self.dead_letter_uri(), self.storage_options.clone(), name)
    }

    /// The lake root (for the conditional-PUT probe).
    pub fn root_location(&self) -> Location {
        Location::new(self.storage_root.clone(), self.storage_options.clone(), "_root")
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

/// `storage.root` as written, made absolute: URLs are kept, local paths are
/// resolved against the config's directory `base`.
pub(super) fn storage_root(root: String, base: &Path) -> String {
    if let Some(path) = root
        .starts_with("file://")
        .then(|| url::Url::parse(&root).ok()?.to_file_path().ok())
        .flatten()
    {
        normalize(&path).to_string_lossy().into_owned()
    } else if root.contains("://") {
        root
    } else {
        let p = Path::new(&root);
        let abs = if p.is_absolute() { p.to_path_buf() } else { base.join(p) };
        normalize(&abs).to_string_lossy().into_owned()
    }
}

/// Drops `.` and resolves `..` lexically (the path need not exist yet).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
