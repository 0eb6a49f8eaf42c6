//! One run of one table: raw batch → typed rows → merge → one Delta commit.
//!
//! The same entry point ([`TableRunner::run_batch`], in `run.rs`) serves file
//! sources (one file = one run) and the Kafka daemon: callers pass the batch
//! plus the progress markers (`txn` app id → next position) that the commit
//! must carry. This module holds the runner itself: opening and locking a
//! table, truncates, dead letters and upkeep after a commit.

mod freshness;
mod run;
mod spec;

use crate::config::{Config, TableConfig};
use crate::deadletter::{self, DeadLetter};
use crate::error::{Error, Result};
use crate::merge::{self, Key, KeyMap, Need, RunCtx};
use crate::table::{CommitRequest, TableMeta, TableStore};
use crate::value::DType;

pub use spec::build_spec;

/// Moved to [`crate::report`] (telemetry reads it too); still reachable here.
pub use crate::report::RunReport;

pub use crate::progress::Mark;

/// Times a batch is run again after a retryable failure (a lost commit race,
/// storage that stopped answering) before the process gives up and exits
/// non-zero; a restart resumes from the table's stored positions.
pub const BATCH_RETRIES: u32 = 8;

/// Commits lost to another writer before giving up. Each loss means the
/// other writer's commit landed, so the table moves on; the bound only
/// ends a livelock between writers.
pub const RACE_RETRIES: u32 = 200;

/// How a run that failed is retried (docs/commit-protocol.md, concurrent
/// writers): a storage failure after a growing pause, at most
/// [`BATCH_RETRIES`] times; a lost commit race after a short random one,
/// on its own budget. Backing off exponentially after lost races made a
/// writer racing a busy one wait seconds while the other committed
/// twenty times a second, so it kept losing until its retries ran out.
#[derive(Debug, Default)]
pub struct Retries {
    storage: u32,
    races: u32,
}

impl Retries {
    /// The pause before the next attempt after `e`, or None: `e` is final,
    /// or its budget is spent.
    pub fn after(&mut self, e: &crate::error::Error) -> Option<std::time::Duration> {
        if !e.retryable() {
            return None;
        }
        if e.lost_race() {
            self.races += 1;
            let pause = std::time::Duration::from_millis(fastrand::u64(5..=150));
            return (self.races <= RACE_RETRIES).then_some(pause);
        }
        self.storage += 1;
        (self.storage <= BATCH_RETRIES).then(|| retry_backoff(self.storage))
    }

    /// Attempts retried so far.
    pub fn attempts(&self) -> u32 {
        self.storage + self.races
    }
}

/// The pause before retry `attempt` (1-based): exponential from 200 ms,
/// capped at 10 s, with jitter so that racing writers fall out of step.
pub fn retry_backoff(attempt: u32) -> std::time::Duration {
    let ceiling = std::time::Duration::from_millis(200)
        .saturating_mul(1 << attempt.min(10))
        .min(std::time::Duration::from_secs(10));
    ceiling.mul_f64(0.5 + fastrand::f64() / 2.0)
}

pub struct TableRunner {
    pub cfg: TableConfig,
    /// Held while this process writes the table (local lakes), see [`TableRunner::lock`].
    lock: Option<std::fs::File>,
    pub store: TableStore,
    declared: Vec<(String, DType)>,
    /// The source's unavailable-value placeholder (Debezium TOAST).
    unavailable: Option<crate::batch::Unavailable>,
    dead_letter_loc: crate::storage::Location,
    /// Version of the last checkpoint this process wrote (see `maintain`).
    last_checkpoint: i64,
}

/// Opens a table to look at it (`show`, `tables`, `offsets`): its files,
/// schema and progress, without the key index a run loads.
pub async fn open_for_reading(config: &Config, t: &TableConfig) -> Result<TableStore> {
    let meta = TableMeta {
        name: t.name.clone(),
        strategy: t.strategy,
        business_key: t.business_key.clone(),
        reserved: t.reserved.clone(),
        surrogate_key: t.surrogate_key,
        layout: t.layout.clone(),
    };
    Ok(TableStore::open(&config.table_location(&t.name), meta).await?)
}

impl TableRunner {
    pub async fn open(config: &Config, t: &TableConfig) -> Result<TableRunner> {
        let mut store = open_for_reading(config, t).await?;
        if store.exists() {
            store.load_index(&build_spec(t, &store.columns)?).await?;
        }
        let system = config.systems.get(&t.system);
        let declared = system.map(|s| s.columns.clone()).unwrap_or_default();
        let unavailable = (system.and_then(|s| s.unavailable_placeholder.as_deref()))
            .map(crate::batch::Unavailable::new);
        let last_checkpoint = store.version().unwrap_or(0);
        Ok(TableRunner {
            cfg: t.clone(),
            lock: None,
            store,
            declared,
            unavailable,
            dead_letter_loc: config.dead_letter_location(),
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

    /// Saves the key index next to the table, so that the next process
    /// opening it skips the rebuild (src/table/restart.rs). Called at every
    /// checkpoint and when a process is done with the table; a failure only
    /// costs a longer restart, so it is logged, never returned.
    pub async fn save_index(&mut self) {
        let table = self.cfg.name.clone();
        let Ok(spec) = build_spec(&self.cfg, &self.store.columns) else { return };
        let started = std::time::Instant::now();
        match self.store.save_index(&spec).await {
            Ok(Some(keys)) => {
                tracing::info!(target: "changelake::engine", table = %table, keys, version = self.store.version(), duration_ms = started.elapsed().as_millis() as u64, "key index saved")
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(target: "changelake::engine", table = %table, error = %e, "key index not saved; the next start rebuilds it")
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

    /// The version a progress marker's app id holds in the table, if any.
    pub async fn marker_version(&self, app: &str) -> Result<Option<i64>> {
        Ok(self.store.txn_version(app).await?)
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
        let n = deadletter::append(&self.dead_letter_loc, groups).await?;
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
            RunCtx { exec, now: chrono::Utc::now().timestamp_micros(), briefs: None },
            vec![],
            loaded.states,
            vec![],
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
                let started = std::time::Instant::now();
                match self.store.checkpoint_and_vacuum().await {
                    Ok(done) => crate::telemetry::checkpointed(
                        &table,
                        v,
                        done.files_vacuumed,
                        done.log_files_removed,
                        started.elapsed().as_secs_f64(),
                    ),
                    Err(e) => crate::telemetry::maintenance_failed(&table, "checkpoint", &e),
                }
                // A restart after a crash then replays only the commits since.
                self.save_index().await;
            }
        }
        Ok(())
    }

    /// Widens decimal columns whose declared precision grew (docs/types.md,
    /// type changes) in a commit of its own, before the batch merges: the
    /// new schema and every file rewritten with it. A failure leaves the
    /// table as it was (the batch is retried on a fresh read).
    pub(crate) async fn widen(
        &mut self,
        spec: &merge::Spec,
        widened: &[(String, DType)],
    ) -> Result<()> {
        let table = self.cfg.name.clone();
        let started = std::time::Instant::now();
        let pc = match self.store.stage_widening(spec, widened).await {
            Ok(pc) => pc,
            Err(e) => {
                self.reload_store().await?;
                return Err(e.into());
            }
        };
        let rewritten = pc.files_removed;
        let columns: Vec<String> = widened.iter().map(|(n, t)| format!("{n} {t}")).collect();
        let info = serde_json::json!({ "source": "widen", "columns": columns });
        let req = CommitRequest { progress: vec![], execution: None, info };
        match self.store.commit(pc, req).await {
            Ok(v) => {
                tracing::warn!(target: "changelake::engine", table = %table, columns = ?columns, files_rewritten = rewritten, version = v, duration_ms = started.elapsed().as_millis() as u64, "decimal columns widened");
                Ok(())
            }
            Err(e) => {
                self.reload_store().await?;
                Err(e.into())
            }
        }
    }

    /// Re-reads the table's layout and key index from the Delta log.
    async fn reload_store(&mut self) -> Result<()> {
        let mut store = TableStore::open(&self.store.loc, self.store.meta.clone()).await?;
        if store.exists() {
            store.load_index(&build_spec(&self.cfg, &store.columns)?).await?;
        }
        self.store = store;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::TableError;
    use deltalake::DeltaTableError;

    fn delta(source: DeltaTableError) -> Error {
        TableError::Delta { uri: "t".into(), source }.into()
    }

    /// docs/commit-protocol.md, concurrent writers: lost races are retried
    /// soon and on their own budget; storage failures back off, at most
    /// BATCH_RETRIES times; a final error is not retried.
    #[test]
    fn retries_lost_races_soon_and_apart_from_storage_failures() {
        let race = delta(DeltaTableError::VersionAlreadyExists(3));
        let storage = delta(DeltaTableError::Generic("the store did not answer".into()));
        assert!(race.lost_race() && race.retryable() && !storage.lost_race());
        let mut r = Retries::default();
        for _ in 0..BATCH_RETRIES - 1 {
            assert!(r.after(&storage).is_some());
        }
        for _ in 0..RACE_RETRIES {
            let pause = r.after(&race).expect("a lost race is retried");
            assert!(pause <= std::time::Duration::from_millis(150));
        }
        assert!(r.after(&race).is_none(), "a livelock ends");
        assert!(r.after(&storage).is_some(), "the storage budget is its own");
        assert!(r.after(&storage).is_none());
        let refused = Error::from(TableError::Refused { uri: "t".into(), msg: "no".into() });
        assert!(Retries::default().after(&refused).is_none());
    }
}
