//! Where tables live and how changelake talks to their storage
//! (docs/object-storage.md).
//!
//! A table's [`Location`] is its URL (or local path) together with the
//! object-store settings of `storage.options`. Every byte changelake or
//! delta-rs moves for a table goes through one object store built here and
//! wrapped in [`layer::Instrumented`], which retries what the store did not
//! answer (5xx, 429, timeouts, resets) with backoff and jitter and counts
//! requests and retries per table and operation. Why our own layer and not
//! `object_store`'s built-in retries: those are invisible, and operators need
//! to see a flaky store on the dashboard before it becomes an outage.
//!
//! The schemes a build writes are decided here ([`check_root`]), so `check`
//! refuses what `run` would. Option values are secrets as far as changelake
//! knows: [`StorageOptions`] never prints them.

pub mod layer;
pub mod probe;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Once};

use deltalake::{DeltaTableBuilder, DeltaTableError, ObjectStore};
use url::Url;

/// URL schemes this build reads and writes, with what they name.
pub const SCHEMES: &[(&str, &str)] = &[
    ("s3", "Amazon S3 and S3-compatible stores"),
    ("s3a", "Amazon S3 (Hadoop spelling)"),
    ("az", "Azure Blob Storage / ADLS Gen2"),
    ("abfs", "Azure Data Lake Storage Gen2"),
    ("abfss", "Azure Data Lake Storage Gen2 (TLS)"),
    ("gs", "Google Cloud Storage"),
    ("file", "local disk"),
];

/// What `--version` lists: one line per kind of store.
pub const BACKENDS: &[&str] = &[
    "local disk (paths, file://)",
    "Amazon S3 and S3-compatible (s3://, s3a://)",
    "Azure Blob Storage / ADLS Gen2 (az://, abfs://, abfss://)",
    "Google Cloud Storage (gs://)",
];

/// Registers the object-store handlers of every scheme in [`SCHEMES`], once.
pub fn register_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        deltalake::aws::register_handlers(None);
        deltalake::azure::register_handlers(None);
        deltalake::gcp::register_handlers(None);
    });
}

/// Why a `storage.root` cannot be used; `check` reports it under the YAML
/// path `storage.root`.
pub fn check_root(root: &str) -> Result<(), String> {
    if !root.contains("://") {
        return Ok(());
    }
    let url =
        Url::parse(root).map_err(|e| format!("`{}` is not a valid URL: {e}", redact_url(root)))?;
    let scheme = url.scheme();
    if !SCHEMES.iter().any(|(s, _)| *s == scheme) {
        let known: Vec<&str> = SCHEMES.iter().map(|(s, _)| *s).collect();
        return Err(format!(
            "scheme `{scheme}://` is not one this build can write (it writes {})",
            known.join(", ")
        ));
    }
    if url.password().is_some() {
        return Err("credentials in the URL are refused: put them in storage.options \
                    (with ${VAR}) or the environment"
            .into());
    }
    if scheme != "file" && url.host_str().is_none_or(str::is_empty) {
        let what = match scheme {
            "az" | "abfs" | "abfss" => "container",
            _ => "bucket",
        };
        return Err(format!("`{}` names no {what}", redact_url(root)));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "`{}`: a query or fragment is not part of a table location",
            redact_url(root)
        ));
    }
    Ok(())
}

/// A URL as it may be shown: without user info (also when it does not parse).
pub fn redact_url(uri: &str) -> String {
    if Url::parse(uri).is_err() {
        if let (Some(s), Some(at)) = (uri.find("://"), uri.rfind('@')) {
            if at > s {
                return format!("{}://***@{}", &uri[..s], &uri[at + 1..]);
            }
        }
        return uri.to_string();
    }
    match Url::parse(uri) {
        Ok(mut u) if u.password().is_some() || !u.username().is_empty() => {
            let _ = u.set_password(None);
            if !matches!(u.scheme(), "abfs" | "abfss") {
                let _ = u.set_username("");
            }
            u.to_string()
        }
        _ => uri.to_string(),
    }
}

/// `storage.options`: object-store settings passed to delta-rs as they are
/// (`AWS_ENDPOINT_URL`, `AZURE_STORAGE_ACCOUNT_KEY`, ...). Values are never
/// shown: `Debug` prints the keys only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StorageOptions(Arc<BTreeMap<String, String>>);

impl StorageOptions {
    pub fn new(map: BTreeMap<String, String>) -> StorageOptions {
        StorageOptions(Arc::new(map))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        let key = key.to_ascii_lowercase();
        self.0.iter().find(|(k, _)| k.to_ascii_lowercase() == key).map(|(_, v)| v.as_str())
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The options delta-rs gets: the user's, plus `max_retries: 0` (unless
    /// set) so that retries happen in [`layer::Instrumented`], where they
    /// are counted.
    fn for_delta(&self) -> HashMap<String, String> {
        let mut m: HashMap<String, String> =
            self.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if self.get("max_retries").is_none() {
            m.insert("max_retries".into(), "0".into());
        }
        m
    }
}

impl std::fmt::Debug for StorageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys().map(|k| format!("{k}=<redacted>"))).finish()
    }
}

/// Where one table lives: its location and the store settings to reach it.
#[derive(Clone, Debug)]
pub struct Location {
    uri: String,
    options: StorageOptions,
    /// The `table` label of this location's storage metrics.
    label: Arc<str>,
}

impl Location {
    /// `uri` is an absolute local path or a URL; `label` names the table in metrics.
    pub fn new(uri: impl Into<String>, options: StorageOptions, label: &str) -> Location {
        Location { uri: uri.into(), options, label: label.into() }
    }

    /// A local directory (tests and tools).
    pub fn local(path: impl Into<String>) -> Location {
        let uri: String = path.into();
        let label = uri.rsplit('/').next().unwrap_or_default().to_string();
        Location::new(uri, StorageOptions::default(), &label)
    }

    /// The location as it may be printed (no secrets).
    pub fn uri(&self) -> &str {
        &self.uri
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn options(&self) -> &StorageOptions {
        &self.options
    }

    /// On an object store (not a local disk)?
    pub fn is_remote(&self) -> bool {
        self.uri.contains("://") && !self.uri.starts_with("file://")
    }

    /// A location below this one (`<uri>/<rel>`), with the same settings.
    pub fn join(&self, rel: &str, label: &str) -> Location {
        let uri = format!("{}/{}", self.uri.trim_end_matches('/'), rel.trim_start_matches('/'));
        Location::new(uri, self.options.clone(), label)
    }

    /// The table URL; a local directory is created first (a local table's
    /// URL must name an existing directory).
    pub fn url(&self) -> Result<Url, StorageError> {
        if self.uri.contains("://") {
            check_root(&self.uri).map_err(|msg| self.refused(msg))?;
            let mut u = Url::parse(&self.uri).map_err(|e| self.refused(e.to_string()))?;
            if !u.path().ends_with('/') {
                u.set_path(&format!("{}/", u.path()));
            }
            Ok(u)
        } else {
            std::fs::create_dir_all(&self.uri)
                .map_err(|e| self.refused(format!("cannot create directory: {e}")))?;
            let abs = std::fs::canonicalize(&self.uri).map_err(|e| self.refused(e.to_string()))?;
            Url::from_directory_path(&abs).map_err(|_| self.refused("not an absolute path".into()))
        }
    }

    /// A Delta table builder for this location, on the instrumented store.
    pub fn builder(&self) -> Result<DeltaTableBuilder, StorageError> {
        register_handlers();
        let url = self.url()?;
        let root = self.root_store(&url)?;
        let delta = |e| self.delta(e);
        Ok(DeltaTableBuilder::from_url(url.clone())
            .map_err(delta)?
            .with_storage_options(self.options.for_delta())
            .with_storage_backend(root, url))
    }

    /// The store rooted at the table's directory (paths relative to the table).
    pub fn object_store(&self) -> Result<Arc<dyn ObjectStore>, StorageError> {
        let log_store = self.builder()?.build_storage().map_err(|e| self.delta(e))?;
        Ok(log_store.object_store(None))
    }

    /// The bucket- (or filesystem-) level store of `url`, instrumented.
    fn root_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>, StorageError> {
        use deltalake::logstore::{object_store_factories, StorageConfig};
        let scheme =
            Url::parse(&format!("{}://", url.scheme())).map_err(|e| self.refused(e.to_string()))?;
        let factory = object_store_factories()
            .get(&scheme)
            .map(|f| f.value().clone())
            .ok_or_else(|| self.refused(format!("no store for scheme `{}`", url.scheme())))?;
        let config =
            StorageConfig::parse_options(self.options.for_delta()).map_err(|e| self.delta(e))?;
        let (store, _prefix) = factory.parse_url_opts(url, &config).map_err(|e| self.delta(e))?;
        Ok(Arc::new(layer::Instrumented::new(store, self.label.clone(), self.is_remote())))
    }

    fn refused(&self, msg: String) -> StorageError {
        StorageError::Refused { uri: redact_url(&self.uri), msg }
    }

    fn delta(&self, source: DeltaTableError) -> StorageError {
        StorageError::Delta { uri: redact_url(&self.uri), source }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage {uri}: {msg}")]
    Refused { uri: String, msg: String },
    #[error("storage {uri}: {source}")]
    Delta {
        uri: String,
        #[source]
        source: DeltaTableError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_root_schemes_this_build_cannot_write_are_refused() {
        for ok in [
            "s3://bucket/lake",
            "s3a://bucket/lake",
            "az://container/lake",
            "abfss://container@account.dfs.core.windows.net/lake",
            "gs://bucket/lake",
            "file:///tmp/lake",
            "./lake",
        ] {
            assert_eq!(check_root(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("hdfs://nn/lake", "not one this build can write"),
            ("memory:///lake", "not one this build can write"),
            ("s3://", "names no bucket"),
            ("az:///lake", "names no container"),
            ("s3://key:secret@bucket/lake", "credentials in the URL"),
            ("s3://bucket/lake?x=1", "query"),
            ("s3://bu cket/lake", "not a valid URL"),
            ("s3://key:secret@bu cket/lake", "not a valid URL"),
        ] {
            let e = check_root(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("secret"), "{bad}: {e}");
        }
    }

    #[test]
    fn storage_options_never_print_their_values() {
        let o = StorageOptions::new(
            [("AZURE_STORAGE_ACCOUNT_KEY".to_string(), "s3cr3t".to_string())].into(),
        );
        let shown = format!("{o:?} {:?}", Location::new("az://c/l", o.clone(), "t"));
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("AZURE_STORAGE_ACCOUNT_KEY"), "{shown}");
        assert_eq!(o.get("azure_storage_account_key"), Some("s3cr3t"));
    }

    #[test]
    fn our_retry_layer_replaces_the_stores_own_unless_the_user_sets_it() {
        assert_eq!(
            StorageOptions::default().for_delta().get("max_retries").map(String::as_str),
            Some("0")
        );
        let o = StorageOptions::new([("max_retries".to_string(), "3".to_string())].into());
        assert_eq!(o.for_delta().get("max_retries").map(String::as_str), Some("3"));
    }
}
