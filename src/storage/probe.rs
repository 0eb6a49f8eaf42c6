//! The conditional-PUT probe (docs/object-storage.md, conditional PUT).
//!
//! Delta's commit protocol on an object store is "create `_delta_log/N.json`
//! only if it does not exist yet". A store that ignores the condition
//! (If-None-Match on S3) lets two writers both create version N: one
//! commit silently replaces the other, and rows are lost without any error.
//! So before `run` writes anything it creates one probe object twice; the
//! second create must be refused, or the store is refused.

use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions};

use super::{Location, StorageError};

/// Why a store cannot hold changelake tables.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "storage {uri} ignores conditional PUT (a create-if-absent write of an existing object \
         succeeded): two writers could both commit the same Delta version and one commit would \
         be lost. Use a store that honours If-None-Match (AWS S3, MinIO, Azure, GCS)"
    )]
    Unsafe { uri: String },
    /// The first write of the probe failed: nothing can be written there.
    #[error("storage {uri}: cannot write to the lake root (does the bucket or container exist, and may these credentials write to it?): {source}")]
    Unwritable {
        uri: String,
        #[source]
        source: object_store::Error,
    },
    #[error("storage {uri}: the conditional-PUT probe failed: {source}")]
    Failed {
        uri: String,
        #[source]
        source: object_store::Error,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Creates `<root>/.changelake/probe/<uuid>` twice; the second must be refused.
/// The probe object is deleted afterwards (best effort).
pub async fn conditional_put(root: &Location) -> Result<(), ProbeError> {
    let store = root.object_store()?;
    let uri = super::redact_url(root.uri());
    let path = Path::from(format!(".changelake/probe/{}", uuid::Uuid::new_v4()));
    let create = || PutOptions { mode: PutMode::Create, ..Default::default() };
    let failed = |source| ProbeError::Failed { uri: uri.clone(), source };
    store
        .put_opts(&path, bytes::Bytes::from_static(b"1").into(), create())
        .await
        .map_err(|source| ProbeError::Unwritable { uri: uri.clone(), source })?;
    let second = store.put_opts(&path, bytes::Bytes::from_static(b"2").into(), create()).await;
    let _ = store.delete(&path).await;
    match second {
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => Ok(()),
        Ok(_) => Err(ProbeError::Unsafe { uri }),
        Err(e) => Err(failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_store_that_refuses_the_second_create_passes_the_probe() {
        let dir = tempfile::tempdir().unwrap();
        let root = Location::local(dir.path().to_string_lossy().to_string());
        conditional_put(&root).await.unwrap();
        let left: Vec<_> =
            std::fs::read_dir(dir.path().join(".changelake/probe")).unwrap().collect();
        assert!(left.is_empty(), "probe object left behind");
    }
}
