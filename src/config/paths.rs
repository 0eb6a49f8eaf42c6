//! Where things live: the lake root, table locations under it, and file
//! paths relative to the config file (docs/config.md, storage;
//! docs/commit-protocol.md, where tables live).

use std::path::{Component, Path, PathBuf};

use super::Config;

impl Config {
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

/// `storage.root` as written, made absolute: URLs are kept, local paths are
/// resolved against the config's directory `base`.
pub(super) fn storage_root(root: String, base: &Path) -> String {
    if root.contains("://") {
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
