//! One run of one table: raw batch → typed rows → merge → one Delta commit.
//!
//! The same entry point serves file sources (one file = one run) and, later,
//! the Kafka micro-batcher: callers pass the batch plus the progress markers
//! (`txn` app id → next position) that the commit must carry.

use std::collections::HashSet;

use crate::batch::{conform, lookup, ConformError};
use crate::config::{Config, Strategy, TableConfig, ValidTime as CfgValidTime};
use crate::deadletter::{self, DeadLetter};
use crate::error::{Error, Result};
use crate::merge::{self, InRow, Key, KeyMap, Need, RunCtx, Spec, ValidTime};
use crate::source::{RawBatch, Unparsable};
use crate::table::{ClosingRows, CommitRequest, TableMeta, TableStore};
use crate::value::DType;

/// Moved to [`crate::report`] (telemetry reads it too); still reachable here.
pub use crate::report::RunReport;

/// Resolves a table's merge rules against its current columns.
pub fn build_spec(t: &TableConfig, columns: &[(String, DType)]) -> Result<Spec> {
    let names: Vec<String> = columns.iter().map(|(n, _)| n.clone()).collect();
    let path = format!("bronze.tables.{}", t.name);
    // Envelope paths (`source.lsn`) are stored under their column name (`source_lsn`).
    let find = |c: &str, what: &str| {
        names
            .iter()
            .position(|n| n == c)
            .or_else(|| names.iter().position(|n| *n == crate::decode::stored_name(c)))
            .ok_or_else(|| {
                Error::ConfigData(format!(
                    "{path}.{what}: column `{c}` is not in the data (columns: {})",
                    names.join(", ")
                ))
            })
    };
    let key = t.business_key.iter().map(|c| find(c, "business_key")).collect::<Result<Vec<_>>>()?;
    let seq =
        t.sequence_by.iter().map(|c| find(c, "merge.sequence_by")).collect::<Result<Vec<_>>>()?;
    let tracked = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            !key.contains(&i)
                && !seq.contains(&i)
                && match &t.track_columns {
                    Some(tc) => tc.contains(n),
                    None => !t.ignore_columns.contains(n),
                }
        })
        .collect();
    let valid_time = match &t.valid_time {
        CfgValidTime::Processing => ValidTime::Processing,
        CfgValidTime::Date(d) => ValidTime::Date(*d),
        CfgValidTime::Column(c) => ValidTime::Column(find(c, "merge.valid_time")?),
    };
    Ok(Spec {
        strategy: t.strategy,
        names,
        key,
        seq,
        tracked,
        delete_mode: t.delete_mode,
        snapshot: t.snapshot,
        intra_batch_all: t.intra_batch_all,
        valid_time,
        open_valid_to: t.open_valid_to,
        surrogate_key: t.surrogate_key && t.strategy == Strategy::Scd2,
        reject_duplicates: t.guardrails.reject_duplicates,
        reject_late: t.guardrails.reject_late,
    })
}

pub use crate::progress::Mark;

pub struct TableRunner {
    pub cfg: TableConfig,
    /// Held while this process writes the table (local lakes), see [`TableRunner::lock`].
    lock: Option<std::fs::File>,
    pub store: TableStore,
    declared: Vec<(String, DType)>,
    dead_letter_uri: String,
    /// Version of the last checkpoint this process wrote (see `maintain`).
    last_checkpoint: i64,
}

impl TableRunner {
    pub async fn open(config: &Config, t: &TableConfig) -> Result<TableRunner> {
        let meta = TableMeta {
            name: t.name.clone(),
            strategy: t.strategy,
            business_key: t.business_key.clone(),
            reserved: t.reserved.clone(),
            surrogate_key: t.surrogate_key,
            layout: t.layout.clone(),
        };
        let mut store = TableStore::open(&config.table_uri(&t.name), meta).await?;
        if store.exists() {
            store.load_index(&build_spec(t, &store.columns)?).await?;
        }
        let declared = config.systems.get(&t.system).map(|s| s.columns.clone()).unwrap_or_default();
        let last_checkpoint = store.version().unwrap_or(0);
        Ok(TableRunner {
            cfg: t.clone(),
            lock: None,
            store,
            declared,
            dead_letter_uri: config.dead_letter_uri(),
            last_checkpoint,
        })
    }

    /// Claims the table for writing. On a local lake an exclusive file lock
    /// (`<root>/.changelake/locks/<table>.lock`, released when the process
    /// ends, even by SIGKILL) makes a second writer fail fast instead of
    /// racing; on object stores Delta's `txn` conflict check is the guard.
    pub fn lock(&mut self, config: &Config) -> Result<()> {
        // CHANGELAKE_NO_WRITER_LOCK (tests): exercise the object-store path, where
        // only Delta's conflict check separates two writers.
        if self.lock.is_some()
            || config.storage_root.contains("://")
            || std::env::var_os("CHANGELAKE_NO_WRITER_LOCK").is_some()
        {
            return Ok(());
        }
        let dir = std::path::Path::new(&config.storage_root).join(".changelake/locks");
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Input(format!("{}: {e}", dir.display())))?;
        let path = dir.join(format!("{}.lock", self.cfg.name));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
        match f.try_lock() {
            Ok(()) => {
                self.lock = Some(f);
                Ok(())
            }
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::Input(format!(
                "table {} is being written by another changelake process (lock {}); stop it first",
                self.cfg.name,
                path.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(Error::Input(format!("{}: {e}", path.display())))
            }
        }
    }

    /// Re-reads the table (after a conflicting commit), keeping the write lock.
    pub async fn reopen(&mut self, config: &Config) -> Result<()> {
        let lock = self.lock.take();
        *self = TableRunner::open(config, &self.cfg.clone()).await?;
        self.lock = lock;
        Ok(())
    }

    /// Has this exact progress marker already been committed?
    pub async fn already_applied(&self, progress: &[Mark]) -> Result<bool> {
        if progress.is_empty() {
            return Ok(false);
        }
        for m in progress {
            if self.store.txn_version(&m.app).await? != Some(m.version) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Dead letters first: their commit is idempotent (txn), so a crash
    /// before the data commit re-runs the batch without duplicating them.
    async fn write_dead_letters(&self, progress: &[Mark], dead: &[DeadLetter]) -> Result<()> {
        let groups: Vec<deadletter::Group> = progress
            .iter()
            .map(|m| deadletter::Group {
                app: m.dead_letter_app_id(),
                version: m.version,
                by_offset: m.partition.is_some(),
                rows: dead
                    .iter()
                    .filter(|d| m.partition.is_none_or(|p| p == d.partition))
                    .cloned()
                    .collect(),
            })
            .collect();
        // Logged and counted by `telemetry::run_committed` (the report carries them).
        let n = deadletter::append(&self.dead_letter_uri, groups).await?;
        tracing::debug!(table = %self.cfg.name, written = n, "dead-letter commit (replayed groups are skipped)");
        Ok(())
    }

    /// Applies a source truncate (Debezium `t`, scd1 with `apply_truncates`):
    /// every live row is deleted per `delete_mode`, in one commit with `progress`.
    pub async fn truncate(&mut self, progress: Vec<Mark>) -> Result<RunReport> {
        let started = std::time::Instant::now();
        let t = self.cfg.clone();
        let mut report = RunReport {
            table: t.name.clone(),
            strategy: t.strategy,
            source: "truncate".into(),
            ..Default::default()
        };
        if !self.store.exists() {
            return Ok(report);
        }
        let mut spec = build_spec(&t, &self.store.columns)?;
        spec.snapshot = true;
        let absent: Vec<Key> = self.store.live_keys().map(Key::from).collect();
        let needs: KeyMap<Need> = absent.iter().map(|k| (k.clone(), Need::Current)).collect();
        let loaded = self.store.load_states(&spec, &needs, &[]).await?;
        let exec = self.store.last_exec + 1;
        let mut out = merge::apply(
            &spec,
            RunCtx { exec, now: chrono::Utc::now().timestamp_micros() },
            vec![],
            loaded.states,
            absent,
        );
        let changes = out.has_changes();
        let pc = self.store.stage(&spec, &mut out, exec, loaded.closing).await?;
        report.files_added = pc.files_added;
        report.files_removed = pc.files_removed;
        report.merge_secs = started.elapsed().as_secs_f64();
        let info = serde_json::json!({ "source": "truncate" });
        let committing = std::time::Instant::now();
        let req = CommitRequest { progress, execution: changes.then_some(exec), info };
        report.version = Some(self.store.commit(pc, req).await?);
        report.commit_secs = committing.elapsed().as_secs_f64();
        report.exec = changes.then_some(exec);
        report.stats = out.stats;
        tracing::warn!(table = %t.name, deleted = report.stats.snapshot_deleted, "source truncate applied (apply_truncates)");
        Ok(report)
    }

    /// Keeps a long-running table healthy after a data commit: compacts small
    /// files, and every `checkpoint_interval` versions writes a checkpoint and
    /// vacuums. None of it changes what a reader sees; a failure is logged and
    /// retried after a later batch (the data commit already succeeded).
    async fn maintain(&mut self, spec: &merge::Spec) -> Result<()> {
        let table = self.cfg.name.clone();
        match self.store.stage_compaction(spec).await {
            Ok(Some(pc)) => {
                let (removed, added) = (pc.files_removed, pc.files_added);
                let started = std::time::Instant::now();
                let info = serde_json::json!({ "source": "compaction" });
                let req = CommitRequest { progress: vec![], execution: None, info };
                match self.store.commit(pc, req).await {
                    Ok(v) => crate::telemetry::compacted(
                        &table,
                        removed,
                        added,
                        v,
                        started.elapsed().as_secs_f64(),
                    ),
                    Err(e) => {
                        // The commit may be in the log even though it reported an
                        // error: never stage on top of a layout that may be stale.
                        crate::telemetry::maintenance_failed(&table, "compaction", &e);
                        self.reload_store().await?;
                    }
                }
            }
            Ok(None) => {}
            Err(e) => crate::telemetry::maintenance_failed(&table, "compaction", &e),
        }
        let interval = self.cfg.layout.checkpoint_interval.max(1) as i64;
        if let Some(v) = self.store.version().filter(|v| *v > 0) {
            if v / interval > self.last_checkpoint / interval {
                self.last_checkpoint = v;
                match self.store.checkpoint_and_vacuum().await {
                    Ok(vacuumed) => crate::telemetry::checkpointed(&table, v, vacuumed),
                    Err(e) => crate::telemetry::maintenance_failed(&table, "checkpoint", &e),
                }
            }
        }
        Ok(())
    }

    /// Re-reads the table's layout and key index from the Delta log.
    async fn reload_store(&mut self) -> Result<()> {
        let mut store = TableStore::open(&self.store.uri, self.store.meta.clone()).await?;
        if store.exists() {
            store.load_index(&build_spec(&self.cfg, &store.columns)?).await?;
        }
        self.store = store;
        Ok(())
    }

    /// Runs one batch and commits it together with `progress`.
    pub async fn run_batch(&mut self, raw: RawBatch, progress: Vec<Mark>) -> Result<RunReport> {
        let t = self.cfg.clone();
        let started = std::time::Instant::now();
        let mut report = RunReport {
            table: t.name.clone(),
            strategy: t.strategy,
            source: raw.source.clone(),
            ..Default::default()
        };
        let text = raw.text;
        let source = raw.source.clone();
        let to_dead = |u: &Unparsable| DeadLetter {
            table: t.name.clone(),
            topic: source.clone(),
            partition: u.partition,
            offset: u.pos as i64,
            raw: u.raw.clone(),
            error: u.error.clone(),
        };
        let mut dead: Vec<DeadLetter> = raw.unparsable.iter().map(to_dead).collect();
        report.bytes = raw
            .rows
            .iter()
            .map(|r| r.raw.len() as u64)
            .chain(raw.unparsable.iter().map(|u| u.raw.len() as u64))
            .sum();
        for u in &raw.unparsable {
            *report.dead_by_reason.entry(u.reason).or_default() += 1;
        }
        let mut phases: Vec<(&str, f64)> = vec![];
        let mut lap = std::time::Instant::now();
        let mut mark = |name: &'static str, phases: &mut Vec<(&str, f64)>| {
            phases.push((name, lap.elapsed().as_secs_f64() * 1e3));
            lap = std::time::Instant::now();
        };
        let conformed =
            conform(raw, &self.store.columns, &self.declared, t.schema_policy, &t.business_key)
                .map_err(|e| match e {
                    ConformError::FloatKey { .. } => {
                        Error::ConfigData(format!("bronze.tables.{}.business_key: {e}", t.name))
                    }
                    ConformError::MissingKey { .. } => Error::Input(e.to_string()),
                })?;
        dead.extend(conformed.dead.iter().map(to_dead));
        for u in &conformed.dead {
            *report.dead_by_reason.entry(u.reason).or_default() += 1;
        }
        if t.business_key.iter().any(|k| !conformed.columns.iter().any(|(c, _)| c == k)) {
            // A new table and no row carrying the key yet: nothing can be
            // merged or created. The rows are NULL-key rows; offsets stay
            // uncommitted, so they are simply re-read later.
            report.stats.rows_in = conformed.rows.len() as u64;
            report.stats.null_keys = conformed.rows.len() as u64;
            report.merge_secs = started.elapsed().as_secs_f64();
            if !dead.is_empty() {
                self.write_dead_letters(&progress, &dead).await?;
            }
            report.dead_letters = dead.len();
            return Ok(report);
        }
        if !conformed.ignored_columns.is_empty() {
            tracing::info!(table = %t.name, columns = ?conformed.ignored_columns, "schema_policy ignore: dropped new columns");
        }
        let spec = build_spec(&t, &conformed.columns)?;
        let cols = conformed.columns.clone();
        // Raw rows are kept only when a guardrail may send the whole batch to the dead letters.
        let guarded = t.guardrails.reject_duplicates || t.guardrails.reject_late;
        // Predicates are per row: on all cores, order kept.
        let parts = crate::par::par_map(crate::par::split(conformed.rows, 8), |chunk| {
            let (mut rows, mut raw_by_pos, mut filtered) =
                (Vec::with_capacity(chunk.len()), vec![], 0u64);
            for r in chunk {
                let get = |p: &[String]| lookup(&cols, &r, text, p);
                if t.filter.as_ref().is_some_and(|f| !f.matches(&get)) {
                    filtered += 1;
                    continue;
                }
                let delete = t.delete_when.as_ref().is_some_and(|d| d.matches(&get));
                if guarded {
                    raw_by_pos.push(Unparsable {
                        partition: r.partition,
                        pos: r.pos,
                        raw: r.raw.clone().into_bytes(),
                        error: String::new(),
                        reason: "guardrail",
                    });
                }
                rows.push(InRow {
                    data: r.data,
                    delete,
                    order: r.pos,
                    replayed: r.replayed,
                    hashes: None,
                });
            }
            (rows, raw_by_pos, filtered)
        });
        let mut rows = Vec::with_capacity(parts.iter().map(|p| p.0.len()).sum());
        let mut raw_by_pos = vec![];
        for (r, raw, filtered) in parts {
            rows.extend(r);
            raw_by_pos.extend(raw);
            report.filtered += filtered;
        }
        mark("conform", &mut phases);
        let prepared = merge::prepare(&spec, rows);
        mark("prepare", &mut phases);
        let mut stats = prepared.stats.clone();
        let reject = |reason: String, dead: &mut Vec<DeadLetter>| {
            for u in &raw_by_pos {
                dead.push(DeadLetter { error: reason.clone(), ..to_dead(u) });
            }
        };
        let exec = self.store.last_exec + 1;
        let mut out = merge::Output::default();
        let mut closing_rows = ClosingRows::default();
        if let Some(reason) = prepared.rejected.clone() {
            reject(reason.clone(), &mut dead);
            *report.dead_by_reason.entry("guardrail").or_default() += raw_by_pos.len() as u64;
            report.rejected = Some(reason);
        } else {
            let absent: Vec<Key> = if t.snapshot {
                let batch_keys: HashSet<&[u8]> =
                    prepared.keys.iter().map(|(k, _)| &k[..]).collect();
                self.store.live_keys().filter(|k| !batch_keys.contains(k)).map(Key::from).collect()
            } else {
                vec![]
            };
            // Classification only reads the key index: on all cores, in key order.
            let store = &self.store;
            let parts = crate::par::par_map(crate::par::split(prepared.keys, 8), |chunk| {
                let mut st = merge::Stats::default();
                let kept: Vec<_> = chunk
                    .into_iter()
                    .filter_map(|(k, mut rs)| {
                        // A single live row is hashed once here: classification
                        // compares the hashes, the merge stores them.
                        if let [r] = rs.as_mut_slice() {
                            if !r.delete {
                                r.hashes = Some(spec.hashes(&r.data));
                            }
                        }
                        let stored = store.summary(&k);
                        merge::classify(&spec, stored, &rs, &mut st).map(|n| {
                            let closing = if n == Need::Close { stored.cloned() } else { None };
                            (k, rs, n, closing)
                        })
                    })
                    .collect();
                (kept, st)
            });
            let mut needs: KeyMap<Need> = KeyMap::default();
            let mut keys = Vec::with_capacity(parts.iter().map(|(k, _)| k.len()).sum());
            let mut closing = vec![];
            for (kept, st) in parts {
                stats.add(&st);
                for (k, rs, n, c) in kept {
                    if let Some(c) = c {
                        closing.push((k.clone(), c));
                    }
                    // Only keys whose stored rows must be read go through the
                    // table; the rest are settled from the key index.
                    if matches!(n, Need::Current | Need::History) {
                        needs.insert(k.clone(), n);
                    }
                    keys.push((k, rs, n));
                }
            }
            for k in &absent {
                needs.insert(k.clone(), Need::Current);
            }
            mark("classify", &mut phases);
            let closing_keys: Vec<&Key> = closing.iter().map(|(k, _)| k).collect();
            let loaded = self.store.load_states(&spec, &needs, &closing_keys).await?;
            let mut states = loaded.states;
            closing_rows = loaded.closing;
            for (k, s) in closing {
                states.insert(k, merge::KeyState { stored: Some(s), ..Default::default() });
            }
            mark("load_states", &mut phases);
            let ctx = RunCtx { exec, now: chrono::Utc::now().timestamp_micros() };
            out = merge::apply(&spec, ctx, keys, states, absent);
            mark("apply", &mut phases);
            if let Some(reason) = out.rejected.clone() {
                reject(reason.clone(), &mut dead);
                *report.dead_by_reason.entry("guardrail").or_default() += raw_by_pos.len() as u64;
                report.rejected = Some(reason);
                out = merge::Output::default();
            }
        }
        stats.add(&out.stats);
        // Dead letters first: their commit is idempotent (txn), so a crash
        // before the data commit re-runs the batch without duplicating them.
        if !dead.is_empty() {
            self.write_dead_letters(&progress, &dead).await?;
        }
        let changes = out.has_changes();
        let info = serde_json::json!({ "source": source, "stats": format!("{stats:?}") });
        if changes || !self.store.exists() {
            self.store.add_columns(&conformed.columns);
            let pc = self.store.stage(&spec, &mut out, exec, closing_rows).await?;
            mark("stage", &mut phases);
            report.merge_secs = started.elapsed().as_secs_f64();
            report.files_added = pc.files_added;
            report.files_removed = pc.files_removed;
            report.files_masked = pc.files_masked;
            let committing = std::time::Instant::now();
            let req = CommitRequest { progress, execution: changes.then_some(exec), info };
            report.version = Some(self.store.commit(pc, req).await?);
            mark("commit", &mut phases);
            tracing::debug!(table = %t.name, phases_ms = ?phases, "batch phases");
            report.commit_secs = committing.elapsed().as_secs_f64();
            report.exec = changes.then_some(exec);
            self.maintain(&spec).await?;
        } else if !self.already_applied(&progress).await? {
            // Offsets moved but nothing changed: a txn-only commit, no data files.
            // The run still takes its `_execution_id` (docs/batch.md, execution
            // id: every run gets one); no row carries it, so nothing is bumped.
            report.merge_secs = started.elapsed().as_secs_f64();
            let committing = std::time::Instant::now();
            let req = CommitRequest { progress, execution: Some(exec), info };
            report.version = Some(self.store.commit(Default::default(), req).await?);
            report.commit_secs = committing.elapsed().as_secs_f64();
        } else {
            report.merge_secs = started.elapsed().as_secs_f64();
        }
        report.dead_letters = dead.len();
        report.stats = stats;
        crate::par::drop_later(out);
        Ok(report)
    }
}
