//! `run`: the file sources (one pass, or a pass per `max_age`), then the
//! Kafka daemon if any table reads Kafka.

use std::path::Path;

use changelake::config::{Config, Format, SystemKind};
use changelake::daemon::{self, RunOpts};
use changelake::engine::{Mark, RunReport, TableRunner};
use changelake::error::{Error, Result};
use changelake::source::chunks::{scan, ChunkLimits, ChunkReader};
use changelake::source::file::{
    expand, read_csv, read_debezium_jsonl, read_jsonl, version_and_lines, FileError,
};
use changelake::telemetry::progress;

/// `run`: file sources first (one pass), then the Kafka daemon if any table reads Kafka.
pub async fn run(c: &Config, once: bool) -> Result<()> {
    probe_store(c).await?;
    let has_kafka = c.tables.iter().any(|t| c.reads_kafka(t));
    let has_files = c.tables.iter().any(|t| !c.reads_kafka(t));
    let mut missing = Missing::default();
    if has_files {
        missing = run_files(c, once || has_kafka).await?;
    }
    if has_kafka {
        daemon::run(c, RunOpts { once, ..Default::default() }, daemon::signals()).await?;
    }
    match missing.paths() {
        // `--once` says so by its exit status, after every other table ran.
        Some(paths) if once => Err(FileError::NoMatch(paths).into()),
        _ => Ok(()),
    }
}

/// File tables whose path matched no file (docs/operations.md, file
/// sources): each warned about once while it lasts, and the other tables
/// go on — one extract that has not arrived must not hold up the rest, nor
/// stop a polling `run` or the Kafka daemon after it.
#[derive(Default)]
struct Missing {
    /// Table and the path it looked for, in config order.
    now: Vec<(String, String)>,
}

impl Missing {
    fn note(&mut self, table: &str, path: String) {
        if !self.now.iter().any(|(t, _)| t == table) {
            tracing::warn!(table, path = %path, "no input file matches the table's path; the other tables go on");
            self.now.push((table.to_string(), path));
        }
    }

    fn found(&mut self, table: &str) {
        self.now.retain(|(t, _)| t != table);
    }

    fn paths(&self) -> Option<String> {
        let paths: Vec<&str> = self.now.iter().map(|(_, p)| p.as_str()).collect();
        (!paths.is_empty()).then(|| paths.join(", "))
    }
}

/// On an object store, refuses a store that would silently lose commits
/// (docs/object-storage.md, conditional PUT). Local lakes are guarded by
/// the file lock instead.
pub async fn probe_store(c: &Config) -> Result<()> {
    let root = c.root_location();
    if root.is_remote() {
        changelake::storage::probe::conditional_put(&root)
            .await
            .map_err(|e| Error::Input(e.to_string()))?;
    }
    Ok(())
}

/// One pass over every file source (or, without `--once`, a pass per `max_age`
/// until interrupted: unchanged files are skipped by their content version).
async fn run_files(c: &Config, once: bool) -> Result<Missing> {
    let mut runners = vec![];
    for t in &c.tables {
        if c.reads_kafka(t) {
            continue; // the daemon's
        }
        let mut r = TableRunner::open(c, t).await?;
        r.lock(c)?;
        changelake::telemetry::register_table(&t.name, t.strategy.as_str());
        runners.push(r);
    }
    let mut shutdown = if once {
        None
    } else {
        daemon::serve_metrics(c, false).await?;
        changelake::telemetry::set_assigned("files", 0);
        Some(daemon::signals())
    };
    let mut missing = Missing::default();
    loop {
        for r in runners.iter_mut() {
            match run_table_files(c, r, once).await {
                Ok(()) => missing.found(&r.cfg.name),
                Err(Error::File(FileError::NoMatch(path))) => missing.note(&r.cfg.name, path),
                Err(e) => return Err(e),
            }
        }
        let stopped = match shutdown.as_mut() {
            None => true,
            Some(stop) => tokio::select! {
                _ = stop => true,
                _ = tokio::time::sleep(c.batching.max_age) => false,
            },
        };
        if stopped {
            for r in runners.iter_mut() {
                r.save_index().await;
            }
            return Ok(missing);
        }
    }
}

/// Runs a table's files in order; each file's batch is logged and counted
/// as it commits, so a long `run --once` shows its progress batch by batch.
async fn run_table_files(c: &Config, r: &mut TableRunner, once: bool) -> Result<()> {
    let system = &c.systems[&r.cfg.system];
    let (pattern, csv_delim, format) = match &system.kind {
        SystemKind::Csv { path, delimiter } => (path.clone(), Some(*delimiter), Format::Json),
        SystemKind::Jsonl { path, format } => (path.clone(), None, *format),
        SystemKind::Kafka { .. } => unreachable!("checked by run_files"),
    };
    let pattern = c.resolve(&pattern.replace("{object}", &r.cfg.object));
    let files = expand(&pattern)?;
    let table = r.cfg.name.clone();
    let store_paths = changelake::decode::store_paths(&r.cfg, format);
    let env_paths = changelake::decode::env_paths(&r.cfg, format);
    if once {
        progress::start(&table, progress::Unit::Files, files.len() as u64);
    }
    let limits = ChunkLimits { max_rows: c.batching.max_rows, max_bytes: c.batching.max_bytes };
    let reader = FileReader { csv_delim, format, store_paths: &store_paths, env_paths: &env_paths };
    for file in files {
        let rel = file.strip_prefix(&c.base_dir).unwrap_or(&file).to_string_lossy().to_string();
        let on_disk = std::fs::metadata(&file).map_err(|e| input(&file, e))?.len();
        // A file within the batch limits is read whole, one run; a larger
        // one chunk by chunk (snapshot tables excepted: a key missing from
        // one chunk is not missing from the file).
        let whole = if r.cfg.snapshot || on_disk <= limits.max_bytes as u64 {
            let bytes = std::fs::read(&file).map_err(|e| input(&file, e))?;
            let (version, lines) = version_and_lines(&bytes);
            let header = usize::from(csv_delim.is_some());
            (r.cfg.snapshot || lines <= limits.max_rows + header).then_some((bytes, version))
        } else {
            None
        };
        let (version, size) = match &whole {
            Some((bytes, version)) => (*version, bytes.len() as u64),
            None => scan(&file).map_err(|e| input(&file, e))?,
        };
        let marks = vec![Mark::file(&r.cfg.name, &rel, version)];
        if r.already_applied(&marks).await? {
            // The target it had before the command moved out of `cli` (log filters name it).
            tracing::debug!(target: "changelake::cli", table = %r.cfg.name, file = %rel, "unchanged since its last run, skipped");
            progress::advance(&table, 1, 0);
            continue;
        }
        let Some((bytes, _)) = whole else {
            let content = Content { path: &file, rel: &rel, version, size };
            run_in_chunks(c, r, content, limits, &reader).await?;
            progress::advance(&table, 1, 0);
            continue;
        };
        let bytes = bytes::Bytes::from(bytes);
        let events = run_and_report(c, r, &|| reader.decode(&rel, &bytes, 0), &marks).await?;
        progress::advance(&table, 1, events);
    }
    progress::finish(&table);
    Ok(())
}

/// How a table's files decode: CSV with its delimiter, or JSON lines.
struct FileReader<'a> {
    csv_delim: Option<u8>,
    format: Format,
    store_paths: &'a [String],
    env_paths: &'a [String],
}

impl FileReader<'_> {
    /// Decodes a file's bytes (or a chunk's, whose positions are `shift`
    /// lines into the file).
    fn decode(
        &self,
        rel: &str,
        bytes: &bytes::Bytes,
        shift: u64,
    ) -> Result<changelake::source::RawBatch> {
        let mut raw = match (self.csv_delim, self.format) {
            (Some(d), _) => read_csv(Path::new(rel), bytes, d)?,
            (None, Format::Json) => read_jsonl(Path::new(rel), bytes)?,
            (None, Format::Debezium) => {
                read_debezium_jsonl(rel, bytes, self.store_paths, Some(self.env_paths))
            }
        };
        if shift > 0 {
            raw.rows.iter_mut().for_each(|row| row.pos += shift);
            raw.unparsable.iter_mut().for_each(|row| row.pos += shift);
        }
        Ok(raw)
    }
}

/// One content version of a source file: what its progress markers name.
#[derive(Clone, Copy)]
struct Content<'a> {
    path: &'a Path,
    /// The path relative to the config's directory (marker app ids use it).
    rel: &'a str,
    version: i64,
    /// The bytes `version` was computed over.
    size: u64,
}

/// Runs a file larger than the batch limits chunk by chunk
/// (docs/commit-protocol.md, large files): each chunk is a run that records
/// how far into this content version of the file it read, the last one
/// records the file done. A crash resumes after the last committed chunk.
async fn run_in_chunks(
    c: &Config,
    r: &mut TableRunner,
    content: Content<'_>,
    limits: ChunkLimits,
    reader: &FileReader<'_>,
) -> Result<()> {
    let Content { path: file, rel, version, size } = content;
    let unreadable = |e| input(file, e);
    let part = changelake::progress::file_part_app_id(&r.cfg.name, rel, version);
    let start = r.marker_version(&part).await?.unwrap_or(0).max(0) as u64;
    if start > 0 {
        tracing::info!(table = %r.cfg.name, file = %rel, offset = start, "resuming a partly read file after its last committed chunk");
    }
    let mut chunks =
        ChunkReader::open(file, reader.csv_delim, start, size, limits).map_err(unreadable)?;
    while let Some(chunk) = chunks.next_chunk().map_err(unreadable)? {
        let mark = if chunk.last {
            Mark::file(&r.cfg.name, rel, version)
        } else {
            Mark::file_part(&r.cfg.name, rel, version, chunk.end)
        };
        let (bytes, shift) = (bytes::Bytes::from(chunk.bytes), chunk.shift);
        // A record too long to read is the chunk's dead letter.
        let skipped = chunk.oversized.as_ref().map(|o| o.dead_letter());
        let decode = || {
            let mut raw = reader.decode(rel, &bytes, shift)?;
            raw.unparsable.extend(skipped.clone());
            Ok(raw)
        };
        let events = run_and_report(c, r, &decode, &[mark]).await?;
        progress::advance(&r.cfg.name, 0, events);
    }
    Ok(())
}

/// A source file that could not be read.
fn input(file: &Path, e: std::io::Error) -> Error {
    Error::Input(format!("{}: {e}", file.display()))
}

/// Runs one batch of a file (the whole file, or a chunk of it) with its
/// progress `marks`; logs and counts it as it commits. Returns its events.
async fn run_and_report(
    c: &Config,
    r: &mut TableRunner,
    decode: &dyn Fn() -> Result<changelake::source::RawBatch>,
    marks: &[Mark],
) -> Result<u64> {
    let raw = decode()?;
    let events = raw.rows.len() as u64;
    if let Some(report) = run_with_retries(c, r, raw, decode, marks).await? {
        changelake::telemetry::run_committed(&report);
    }
    Ok(events)
}

/// Runs one file's batch; a retryable failure (a lost commit race, storage
/// that did not answer) is retried with backoff on the table as it is now,
/// on the file decoded `again` (the first attempt needs no copy).
/// A commit that landed although its answer was lost is found by its
/// progress marker: the file is then done (`None`), never applied twice.
async fn run_with_retries(
    c: &Config,
    r: &mut TableRunner,
    first: changelake::source::RawBatch,
    again: &dyn Fn() -> Result<changelake::source::RawBatch>,
    marks: &[Mark],
) -> Result<Option<RunReport>> {
    let mut retries = changelake::engine::Retries::default();
    let mut first = Some(first);
    loop {
        let raw = match first.take() {
            Some(raw) => raw,
            None => again()?,
        };
        let e = match r.run_batch(raw, marks.to_vec()).await {
            Ok(report) => return Ok(Some(report)),
            Err(e) => e,
        };
        let Some(pause) = retries.after(&e) else {
            changelake::telemetry::commit_failed(&r.cfg.name, &e);
            return Err(e);
        };
        changelake::telemetry::commit_retried(&r.cfg.name, retries.attempts(), &e);
        tokio::time::sleep(pause).await;
        // Re-reading can fail like the run did; the next attempt retries it.
        match r.reopen(c).await {
            Ok(()) => {}
            Err(e) if e.retryable() => continue,
            Err(e) => return Err(e),
        }
        if r.already_applied(marks).await? {
            return Ok(None);
        }
    }
}
