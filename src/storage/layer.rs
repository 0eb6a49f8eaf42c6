//! The object store every table operation goes through: counts requests and
//! retries what the store did not answer (docs/object-storage.md, transient
//! errors).
//!
//! What is transient is decided by the error's kind, never its text: a
//! store that answered (not found, already exists, precondition failed,
//! permission denied, ...) gave a definite answer and is not asked again;
//! `Generic` — an HTTP 5xx or 429, a timeout, a reset connection, an I/O
//! error — is retried up to [`RETRIES`] times with exponential backoff and
//! full jitter. A create-if-absent PUT whose first attempt landed but whose
//! answer was lost comes back "already exists" on the retry: for a commit
//! that is a lost race, and the engine settles it by reading the log
//! (docs/commit-protocol.md, a commit that may or may not have landed).
//!
//! Reads of remote objects and listings are collected inside the retry, so
//! a connection reset halfway through a body or a listing is retried like
//! any other; changelake's objects (data files, log entries, checkpoints)
//! and listings fit in memory.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// Retries after the first attempt, per request.
pub const RETRIES: u32 = 8;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Counts and retries requests to `inner` on behalf of one table.
pub struct Instrumented {
    inner: Arc<dyn ObjectStore>,
    table: Arc<str>,
    /// Remote bodies are buffered inside the retry (local files are not).
    buffer_reads: bool,
    first_backoff: Duration,
}

impl Instrumented {
    pub fn new(inner: Arc<dyn ObjectStore>, table: Arc<str>, remote: bool) -> Instrumented {
        Instrumented { inner, table, buffer_reads: remote, first_backoff: FIRST_BACKOFF }
    }

    async fn retry<T, F, Fut>(&self, op: &'static str, path: &Path, attempt: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        retry(&self.table, self.first_backoff, op, path, attempt).await
    }

    /// A listing, collected inside the retry (a listing that breaks off
    /// halfway is started again), then streamed.
    fn list_retrying(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let (inner, table, first) = (self.inner.clone(), self.table.clone(), self.first_backoff);
        let (prefix, offset) = (prefix.cloned(), offset.cloned());
        let listed = async move {
            let p = prefix.clone().unwrap_or_default();
            retry(&table, first, "list", &p, || {
                let s = match &offset {
                    Some(o) => inner.list_with_offset(prefix.as_ref(), o),
                    None => inner.list(prefix.as_ref()),
                };
                s.try_collect::<Vec<ObjectMeta>>()
            })
            .await
        };
        futures::stream::once(listed)
            .map(|r| match r {
                Ok(all) => futures::stream::iter(all.into_iter().map(Ok)).boxed(),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            })
            .flatten()
            .boxed()
    }
}

/// Runs `attempt` until it succeeds, fails definitely, or the budget is spent.
async fn retry<T, F, Fut>(
    table: &str,
    first_backoff: Duration,
    op: &'static str,
    path: &Path,
    attempt: F,
) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut n = 0;
    loop {
        crate::telemetry::storage_request(table, op);
        match attempt().await {
            Err(e) if transient(&e) && n < RETRIES => {
                n += 1;
                crate::telemetry::storage_retried(table, op, path.as_ref(), n, &e);
                tokio::time::sleep(backoff(first_backoff, n)).await;
            }
            r => return r,
        }
    }
}

/// Did the store fail to answer (worth asking again)?
pub fn transient(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Generic { .. } | object_store::Error::JoinError { .. })
}

/// Full jitter over an exponential ceiling: retries of many writers spread out.
fn backoff(first: Duration, attempt: u32) -> Duration {
    let ceiling = first.saturating_mul(1 << attempt.min(16)).min(MAX_BACKOFF);
    ceiling.mul_f64(fastrand::f64())
}

/// By hand: the inner store's `Debug` may show credentials (delta-rs logs
/// stores at debug level); its `Display` names the store and bucket only.
impl fmt::Debug for Instrumented {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Instrumented {{ table: {}, inner: {} }}", self.table, self.inner)
    }
}

impl fmt::Display for Instrumented {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Instrumented({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Instrumented {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let len = payload.content_length() as u64;
        let r = self
            .retry("put", location, || self.inner.put_opts(location, payload.clone(), opts.clone()))
            .await?;
        crate::telemetry::storage_bytes(&self.table, "written", len);
        Ok(r)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        crate::telemetry::storage_request(&self.table, "put");
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head { "head" } else { "get" };
        self.retry(op, location, || async {
            let r = self.inner.get_opts(location, options.clone()).await?;
            if !options.head {
                crate::telemetry::storage_bytes(&self.table, "read", r.range.end - r.range.start);
            }
            if !self.buffer_reads || options.head {
                return Ok(r);
            }
            let GetResult { meta, range, attributes, payload } = r;
            let body = match payload {
                GetResultPayload::Stream(s) => {
                    let mut chunks: Vec<Bytes> = s.try_collect().await?;
                    if chunks.len() == 1 {
                        chunks.pop().unwrap_or_default() // no copy
                    } else {
                        Bytes::from(chunks.concat())
                    }
                }
                file => return Ok(GetResult { meta, range, attributes, payload: file }),
            };
            let once = futures::stream::once(async move { Ok(body) }).boxed();
            Ok(GetResult { meta, range, attributes, payload: GetResultPayload::Stream(once) })
        })
        .await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let r = self.retry("get", location, || self.inner.get_ranges(location, ranges)).await?;
        let len = r.iter().map(|b| b.len() as u64).sum();
        crate::telemetry::storage_bytes(&self.table, "read", len);
        Ok(r)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        crate::telemetry::storage_request(&self.table, "delete");
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_retrying(prefix, None)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_retrying(prefix, Some(offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let p = prefix.cloned().unwrap_or_default();
        self.retry("list", &p, || self.inner.list_with_delimiter(prefix)).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.retry("copy", to, || self.inner.copy_opts(from, to, options.clone())).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.retry("rename", to, || self.inner.rename_opts(from, to, options.clone())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A store that fails the first `fail` requests with `error`.
    #[derive(Debug)]
    struct Flaky {
        inner: object_store::memory::InMemory,
        fail: AtomicU32,
        definite: bool,
    }

    impl fmt::Display for Flaky {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Flaky")
        }
    }

    impl Flaky {
        fn err(&self) -> Option<object_store::Error> {
            let left = self.fail.load(Ordering::SeqCst);
            if left == 0 {
                return None;
            }
            self.fail.store(left - 1, Ordering::SeqCst);
            Some(if self.definite {
                object_store::Error::NotFound { path: "x".into(), source: "gone".into() }
            } else {
                object_store::Error::Generic { store: "Flaky", source: "503 Slow Down".into() }
            })
        }
    }

    #[async_trait]
    impl ObjectStore for Flaky {
        async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> Result<PutResult> {
            match self.err() {
                Some(e) => Err(e),
                None => self.inner.put_opts(l, p, o).await,
            }
        }
        async fn put_multipart_opts(
            &self,
            l: &Path,
            o: PutMultipartOptions,
        ) -> Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(l, o).await
        }
        async fn get_opts(&self, l: &Path, o: GetOptions) -> Result<GetResult> {
            match self.err() {
                Some(e) => Err(e),
                None => self.inner.get_opts(l, o).await,
            }
        }
        fn delete_stream(
            &self,
            l: BoxStream<'static, Result<Path>>,
        ) -> BoxStream<'static, Result<Path>> {
            self.inner.delete_stream(l)
        }
        fn list(&self, p: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
            self.inner.list(p)
        }
        async fn list_with_delimiter(&self, p: Option<&Path>) -> Result<ListResult> {
            self.inner.list_with_delimiter(p).await
        }
        async fn copy_opts(&self, f: &Path, t: &Path, o: CopyOptions) -> Result<()> {
            self.inner.copy_opts(f, t, o).await
        }
    }

    fn flaky(fail: u32, definite: bool) -> (Arc<Flaky>, Instrumented) {
        let f = Arc::new(Flaky {
            inner: object_store::memory::InMemory::new(),
            fail: AtomicU32::new(fail),
            definite,
        });
        let table: Arc<str> = format!("layer_test_{fail}_{definite}").into();
        let mut s = Instrumented::new(f.clone(), table, true);
        s.first_backoff = Duration::from_millis(1);
        (f, s)
    }

    fn retries(table: &str, op: &str) -> u64 {
        crate::telemetry::metrics().storage_retries.with_label_values(&[table, op]).get()
    }

    #[tokio::test]
    async fn transient_storage_errors_are_retried_and_counted() {
        let (_, s) = flaky(3, false);
        s.put(&Path::from("a"), Bytes::from_static(b"x").into()).await.unwrap();
        assert_eq!(retries("layer_test_3_false", "put"), 3);
        let got = s.get(&Path::from("a")).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"x");
    }

    #[tokio::test]
    async fn a_definite_answer_is_not_retried() {
        let (f, s) = flaky(1, true);
        let e = s.get(&Path::from("a")).await.unwrap_err();
        assert!(matches!(e, object_store::Error::NotFound { .. }));
        assert_eq!(f.fail.load(Ordering::SeqCst), 0);
        assert_eq!(retries("layer_test_1_true", "get"), 0);
    }

    #[tokio::test]
    async fn the_retry_budget_ends_in_the_stores_error() {
        let (_, s) = flaky(RETRIES + 1, false);
        let e = s.put(&Path::from("a"), Bytes::from_static(b"x").into()).await.unwrap_err();
        assert!(transient(&e), "{e}");
        assert_eq!(retries(&format!("layer_test_{}_false", RETRIES + 1), "put"), RETRIES as u64);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        for n in 1..20 {
            let b = backoff(FIRST_BACKOFF, n);
            assert!(b <= MAX_BACKOFF);
            assert!(b <= FIRST_BACKOFF * (1 << n.min(16)));
        }
    }
}
