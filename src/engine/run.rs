//! One batch of one table, as named steps: conform the raw rows to the
//! table's columns, apply the row predicates, prepare (NULL keys,
//! deduplication: docs/batch.md), classify each key against the key index,
//! load only the stored versions the merge needs, apply the scd1/scd2 rules
//! (docs/scd1.md, docs/scd2.md), write dead letters, then stage and commit
//! the result with the batch's progress markers (docs/commit-protocol.md).

use std::borrow::Cow;
use std::collections::HashSet;

use super::{build_spec, spec, Mark, RunReport, TableRunner};
use crate::batch::{conform, lookup, ConformError, Conformed, Guarded, TableShape};
use crate::config::TableConfig;
use crate::deadletter::DeadLetter;
use crate::error::{Error, Result};
use crate::merge::{self, InRow, Key, KeyMap, Need, Prepared, RunCtx, Spec, Stats, Summary};
use crate::phases::Phases;
use crate::source::{RawBatch, Unparsable};
use crate::table::{ClosingRows, CommitRequest};

/// The bookkeeping of one run: its report (which names the table and the
/// source) and its dead letters.
struct Run {
    started: std::time::Instant,
    report: RunReport,
    dead: Vec<DeadLetter>,
}

impl Run {
    fn start(t: &TableConfig, raw: &RawBatch) -> Run {
        let report = RunReport {
            table: t.name.clone(),
            strategy: t.strategy,
            source: raw.source.clone(),
            bytes: raw
                .rows
                .iter()
                .map(|r| r.raw.len() as u64)
                .chain(raw.unparsable.iter().map(|u| u.raw.len() as u64))
                .sum(),
            ..Default::default()
        };
        let mut run = Run { started: std::time::Instant::now(), report, dead: vec![] };
        run.add_dead(&raw.unparsable);
        run
    }

    fn dead_letter(&self, u: &Unparsable) -> DeadLetter {
        DeadLetter {
            table: self.report.table.clone(),
            topic: self.report.source.clone(),
            partition: u.partition,
            offset: u.pos as i64,
            raw: u.raw.clone(),
            error: u.error.clone(),
        }
    }

    /// Rows that could not be decoded or converted, counted by reason.
    fn add_dead(&mut self, unparsable: &[Unparsable]) {
        for u in unparsable {
            self.dead.push(self.dead_letter(u));
            *self.report.dead_by_reason.entry(u.reason).or_default() += 1;
        }
    }

    /// A guardrail rejected the batch: every row goes to the dead letters.
    fn reject(&mut self, reason: String, rows: &[Unparsable]) {
        for u in rows {
            self.dead.push(DeadLetter { error: reason.clone(), ..self.dead_letter(u) });
        }
        *self.report.dead_by_reason.entry("guardrail").or_default() += rows.len() as u64;
        self.report.rejected = Some(reason);
        // Nothing of the batch was applied: the table is no fresher.
        self.report.newest_source_ms = None;
    }

    fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

/// The rows left after the table's row predicates.
struct Filtered {
    rows: Vec<InRow>,
    /// The raw rows, kept only when a guardrail may reject the whole batch.
    raw_by_pos: Vec<Unparsable>,
    /// Rows dropped by `filter`.
    filtered: u64,
}

/// Keys classified against the key index.
struct Classified {
    /// Keys whose stored rows must be read (the rest are settled from the index).
    needs: KeyMap<Need>,
    keys: Vec<(Key, Vec<InRow>, Need)>,
    /// The stored summaries of the open versions the run closes: one per
    /// key whose need is [`Need::Close`], in the order of `keys`.
    closing: Vec<Option<Summary>>,
}

impl TableRunner {
    /// Runs one batch and commits it together with `progress`.
    pub async fn run_batch(&mut self, raw: RawBatch, progress: Vec<Mark>) -> Result<RunReport> {
        self.run_cow(Cow::Owned(raw), progress).await
    }

    /// [`Self::run_batch`] on a batch the caller keeps to retry it: cells
    /// are copied as they are typed (on the worker pool), not the whole
    /// batch up front on the caller's thread.
    pub async fn run_batch_kept(
        &mut self,
        raw: &RawBatch,
        progress: Vec<Mark>,
    ) -> Result<RunReport> {
        self.run_cow(Cow::Borrowed(raw), progress).await
    }

    async fn run_cow(&mut self, raw: Cow<'_, RawBatch>, progress: Vec<Mark>) -> Result<RunReport> {
        let t = self.cfg.clone();
        let mut run = Run::start(&t, &raw);
        let mut phases = Phases::new();
        let text = raw.text;
        let conformed = self.conform(raw)?;
        run.add_dead(&conformed.dead);
        if t.business_key.iter().all(|k| conformed.untyped.contains(k)) {
            return self.finish_without_key(run, &conformed, &progress).await;
        }
        run.report.newest_source_ms =
            super::freshness::newest_source_ms(&t, &conformed.columns, &conformed.rows);
        if !conformed.ignored_columns.is_empty() {
            tracing::info!(target: "changelake::engine", table = %t.name, columns = ?conformed.ignored_columns, "schema_policy ignore: dropped new columns");
        }
        spec::missing_sequence_columns(&t, &conformed.columns, &conformed.untyped)?;
        let spec = build_spec(&t, &conformed.columns)?;
        if !conformed.widened.is_empty() && self.store.exists() {
            self.widen(&spec, &conformed.widened).await?;
        }
        let filtered = filter_rows(&t, &conformed.columns, conformed.rows, text);
        run.report.filtered += filtered.filtered;
        phases.mark("conform");
        let prepared = merge::prepare(&spec, filtered.rows);
        phases.mark("prepare");
        let mut stats = prepared.stats.clone();
        let exec = self.store.last_exec + 1;
        let (mut out, closing) = match prepared.rejected.clone() {
            Some(reason) => {
                run.reject(reason, &filtered.raw_by_pos);
                (merge::Output::default(), ClosingRows::default())
            }
            None => self.merge(&spec, prepared, exec, &mut stats, &mut phases).await?,
        };
        if let Some(reason) = out.rejected.clone() {
            run.reject(reason, &filtered.raw_by_pos);
            out = merge::Output::default();
        }
        stats.add(&out.stats);
        // Dead letters first: their commit is idempotent (txn), so a crash
        // before the data commit re-runs the batch without duplicating them.
        if !run.dead.is_empty() {
            self.write_dead_letters(&progress, &run.dead).await?;
        }
        let (columns, untyped) = (conformed.columns, conformed.untyped);
        self.commit_run(
            &mut run,
            &spec,
            &mut out,
            Commit { exec, progress, closing, columns, untyped, stats: &stats },
            &mut phases,
        )
        .await?;
        run.report.dead_letters = run.dead.len();
        run.report.stats = stats;
        crate::par::drop_later(out);
        Ok(run.report)
    }

    /// The raw rows typed and aligned with the table's columns. A float
    /// business key is a config error (the config's key does not fit the
    /// data); a text extract without the key is bad input.
    fn conform(&self, raw: Cow<'_, RawBatch>) -> Result<Conformed> {
        let t = &self.cfg;
        // Sequence columns as stored (envelope paths under their column name).
        let sequence: Vec<String> = (t.sequence_by.iter())
            .flat_map(|c| [c.clone(), crate::decode::stored_name(c)])
            .collect();
        let guarded = Guarded { keys: &t.business_key, sequence: &sequence };
        let written = self.store.meta.written_columns();
        let table = TableShape {
            columns: &self.store.columns,
            written: &written,
            untyped: &self.store.untyped,
            exact: self.store.exact_types,
            unavailable: self.unavailable.as_ref(),
            debezium: self.unavailable.is_some(),
        };
        conform(raw, table, &self.declared, t.schema_policy, guarded).map_err(|e| match e {
            ConformError::FloatKey { .. } => {
                Error::ConfigData(format!("bronze.tables.{}.business_key: {e}", t.name))
            }
            ConformError::MissingKey { .. } => Error::Input(e.to_string()),
        })
    }

    /// A new table and no row carrying any part of the key yet: nothing
    /// can be merged or created. The rows are NULL-key rows; offsets stay
    /// uncommitted, so they are simply re-read later.
    async fn finish_without_key(
        &self,
        mut run: Run,
        conformed: &Conformed,
        progress: &[Mark],
    ) -> Result<RunReport> {
        run.report.stats.rows_in = conformed.rows.len() as u64;
        run.report.stats.null_keys = conformed.rows.len() as u64;
        run.report.merge_secs = run.elapsed();
        if !run.dead.is_empty() {
            self.write_dead_letters(progress, &run.dead).await?;
        }
        run.report.dead_letters = run.dead.len();
        Ok(run.report)
    }

    /// Classify, load the stored state the merge needs, apply the rules.
    async fn merge(
        &self,
        spec: &Spec,
        prepared: Prepared,
        exec: i64,
        stats: &mut Stats,
        phases: &mut Phases,
    ) -> Result<(merge::Output, ClosingRows)> {
        let absent: Vec<Key> = if self.cfg.snapshot {
            let batch_keys: HashSet<&[u8]> = prepared.keys.iter().map(|(k, _)| &k[..]).collect();
            self.store.live_keys().filter(|k| !batch_keys.contains(k)).map(Key::from).collect()
        } else {
            vec![]
        };
        let mut c = self.classify(spec, prepared.keys, stats);
        for k in &absent {
            c.needs.insert(k.clone(), Need::Current);
        }
        phases.mark("classify");
        let closing_keys: Vec<&Key> =
            c.keys.iter().filter(|(_, _, n)| *n == Need::Close).map(|(k, _, _)| k).collect();
        let loaded = self.store.load_states(spec, &c.needs, &closing_keys).await?;
        let closing: Vec<merge::KeyState> = (c.closing.into_iter().zip(loaded.closing_briefs))
            .map(|(stored, b)| merge::KeyState { stored, stored_brief: b, ..Default::default() })
            .collect();
        phases.mark("load_states");
        let briefs = self.store.briefs(spec);
        let ctx = RunCtx { exec, now: chrono::Utc::now().timestamp_micros(), briefs };
        let out = merge::apply(spec, ctx, c.keys, loaded.states, closing, absent);
        phases.mark("apply");
        Ok((out, loaded.closing))
    }

    /// Classification only reads the key index: on all cores, in key order.
    fn classify(&self, spec: &Spec, keys: Vec<(Key, Vec<InRow>)>, stats: &mut Stats) -> Classified {
        let stored = self.store.summaries(&keys, |(k, _)| &k[..]);
        let keys: Vec<_> = keys.into_iter().zip(stored).collect();
        let parts = crate::par::par_map(crate::par::split(keys, 8), |chunk| {
            let mut st = Stats::default();
            let kept: Vec<_> = chunk
                .into_iter()
                .filter_map(|((k, mut rs), stored)| {
                    // A single live row is hashed once (`merge::prepare`
                    // hashes every live row; a row whose cells changed
                    // since is hashed here): classification compares the
                    // hashes, the merge stores them.
                    if let [r] = rs.as_mut_slice() {
                        if !r.delete && r.hashes.is_none() {
                            r.hashes = Some(spec.hashes(&r.data));
                        }
                    }
                    merge::classify(spec, stored.as_ref(), &rs, &mut st).map(|n| {
                        let closing = if n == Need::Close { stored } else { None };
                        (k, rs, n, closing)
                    })
                })
                .collect();
            (kept, st)
        });
        let mut c = Classified {
            needs: KeyMap::default(),
            keys: Vec::with_capacity(parts.iter().map(|(k, _)| k.len()).sum()),
            closing: vec![],
        };
        for (kept, st) in parts {
            stats.add(&st);
            for (k, rs, n, closing) in kept {
                if n == Need::Close {
                    c.closing.push(closing);
                }
                // Only keys whose stored rows must be read go through the
                // table, and reopened ones for their brief (table/deleted_briefs.rs);
                // the rest are settled from the key index.
                if matches!(n, Need::Current | Need::Reopen) || n.history() {
                    c.needs.insert(k.clone(), n);
                }
                c.keys.push((k, rs, n));
            }
        }
        c
    }

    /// Stages and commits the run's changes with its progress; a run without
    /// changes commits only its progress (unless it is already recorded).
    async fn commit_run(
        &mut self,
        run: &mut Run,
        spec: &Spec,
        out: &mut merge::Output,
        c: Commit<'_>,
        phases: &mut Phases,
    ) -> Result<()> {
        let changes = out.has_changes();
        let info = serde_json::json!({ "source": run.report.source, "stats": c.stats });
        let report = &mut run.report;
        if changes || !self.store.exists() {
            self.store.add_columns(&c.columns, &c.untyped);
            let pc = self.store.stage(spec, out, c.exec, c.closing).await?;
            phases.mark("stage");
            report.merge_secs = run.started.elapsed().as_secs_f64();
            report.files_added = pc.files_added;
            report.files_removed = pc.files_removed;
            report.files_masked = pc.files_masked;
            let committing = std::time::Instant::now();
            let execution = changes.then_some(c.exec);
            let req = CommitRequest { progress: c.progress, execution, info };
            report.version = Some(self.store.commit(pc, req).await?);
            phases.mark("commit");
            tracing::debug!(target: "changelake::engine", table = %self.cfg.name, phases_ms = ?phases.done(), "batch phases");
            report.commit_secs = committing.elapsed().as_secs_f64();
            report.exec = execution;
            self.maintain(spec).await?;
            phases.mark("upkeep");
            report.phases = phases.done().to_vec();
        } else if !self.already_applied(&c.progress).await? {
            // Offsets moved but nothing changed: a txn-only commit, no data
            // files. The run still takes its `_execution_id` (docs/batch.md,
            // execution id: every run gets one); no row carries it.
            report.merge_secs = run.started.elapsed().as_secs_f64();
            let committing = std::time::Instant::now();
            let req = CommitRequest { progress: c.progress, execution: Some(c.exec), info };
            report.version = Some(self.store.commit(Default::default(), req).await?);
            report.commit_secs = committing.elapsed().as_secs_f64();
        } else {
            report.merge_secs = run.started.elapsed().as_secs_f64();
        }
        Ok(())
    }
}

/// What the commit of a run carries besides the merge output.
struct Commit<'a> {
    exec: i64,
    progress: Vec<Mark>,
    closing: ClosingRows,
    /// The batch's columns (new ones are added to the table).
    columns: Vec<(String, crate::value::DType)>,
    /// Columns still without a type after the batch.
    untyped: Vec<String>,
    stats: &'a Stats,
}

/// A typed row as the merge takes it: a delete when `delete_when` holds.
fn in_row(
    t: &TableConfig,
    cols: &[(String, crate::value::DType)],
    r: crate::batch::TypedRow,
    text: bool,
) -> InRow {
    let delete = (t.delete_when.as_ref())
        .is_some_and(|d| d.matches(&|p: &[String]| lookup(cols, &r, text, p)));
    InRow {
        data: r.data,
        delete,
        order: r.pos,
        replayed: r.replayed,
        hashes: None,
        unavailable: r.unavailable,
    }
}

/// The table's row predicates (`filter`, `delete_when`), per row on all
/// cores, order kept.
fn filter_rows(
    t: &TableConfig,
    cols: &[(String, crate::value::DType)],
    rows: Vec<crate::batch::TypedRow>,
    text: bool,
) -> Filtered {
    // Raw rows are kept only when a guardrail may send the whole batch to the dead letters.
    let guarded = t.guardrails.reject_duplicates || t.guardrails.reject_late;
    if t.filter.is_none() && !guarded {
        // Every row stays: converted where it lies, on all cores (split
        // and joined, the rows were copied twice on the caller's thread).
        use rayon::prelude::*;
        let rows =
            rows.into_par_iter().with_min_len(4096).map(|r| in_row(t, cols, r, text)).collect();
        return Filtered { rows, raw_by_pos: vec![], filtered: 0 };
    }
    let parts = crate::par::par_map(crate::par::split(rows, 8), |chunk| {
        let mut f =
            Filtered { rows: Vec::with_capacity(chunk.len()), raw_by_pos: vec![], filtered: 0 };
        for r in chunk {
            let get = |p: &[String]| lookup(cols, &r, text, p);
            if t.filter.as_ref().is_some_and(|f| !f.matches(&get)) {
                f.filtered += 1;
                continue;
            }
            if guarded {
                f.raw_by_pos.push(Unparsable {
                    partition: r.partition,
                    pos: r.pos,
                    raw: r.raw.as_bytes().to_vec(),
                    error: String::new(),
                    reason: "guardrail",
                });
            }
            f.rows.push(in_row(t, cols, r, text));
        }
        f
    });
    let mut all = Filtered {
        rows: Vec::with_capacity(parts.iter().map(|p| p.rows.len()).sum()),
        raw_by_pos: vec![],
        filtered: 0,
    };
    for p in parts {
        all.rows.extend(p.rows);
        all.raw_by_pos.extend(p.raw_by_pos);
        all.filtered += p.filtered;
    }
    all
}
