//! `run`: the file sources (one pass, or a pass per `max_age`), then the
//! Kafka daemon if any table reads Kafka.

use std::path::Path;

use changelake::config::{Config, Format, SystemKind};
use changelake::daemon::{self, RunOpts};
use changelake::engine::{Mark, RunReport, TableRunner};
use changelake::error::{Error, Result};
use changelake::source::file::{
    content_version, expand, read_csv, read_debezium_jsonl, read_jsonl,
};
use changelake::telemetry::progress;

/// `run`: file sources first (one pass), then the Kafka daemon if any table reads Kafka.
pub async fn run(c: &Config, once: bool) -> Result<()> {
    let has_kafka = c.tables.iter().any(|t| c.reads_kafka(t));
    let has_files = c.tables.iter().any(|t| !c.reads_kafka(t));
    if has_files {
        run_files(c, once || has_kafka).await?;
    }
    if has_kafka {
        daemon::run(c, RunOpts { once, ..Default::default() }, daemon::signals()).await?;
    }
    Ok(())
}

/// One pass over every file source (or, without `--once`, a pass per `max_age`
/// until interrupted: unchanged files are skipped by their content version).
async fn run_files(c: &Config, once: bool) -> Result<()> {
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
    loop {
        for r in runners.iter_mut() {
            for report in run_table_files(c, r, once).await? {
                changelake::telemetry::run_committed(&report);
            }
        }
        let Some(stop) = shutdown.as_mut() else { return Ok(()) };
        tokio::select! {
            _ = stop => return Ok(()),
            _ = tokio::time::sleep(c.batching.max_age) => {}
        }
    }
}

async fn run_table_files(c: &Config, r: &mut TableRunner, once: bool) -> Result<Vec<RunReport>> {
    let system = &c.systems[&r.cfg.system];
    let (pattern, csv_delim, format) = match &system.kind {
        SystemKind::Csv { path, delimiter } => (path.clone(), Some(*delimiter), Format::Json),
        SystemKind::Jsonl { path, format } => (path.clone(), None, *format),
        SystemKind::Kafka { .. } => unreachable!("checked by run_files"),
    };
    let pattern = c.resolve(&pattern.replace("{object}", &r.cfg.object));
    let mut reports = vec![];
    let files = expand(&pattern)?;
    let table = r.cfg.name.clone();
    if once {
        progress::start(&table, progress::Unit::Files, files.len() as u64);
    }
    for file in files {
        let bytes =
            std::fs::read(&file).map_err(|e| Error::Input(format!("{}: {e}", file.display())))?;
        let rel = file.strip_prefix(&c.base_dir).unwrap_or(&file).to_string_lossy().to_string();
        let marks = vec![Mark::file(&r.cfg.name, &rel, content_version(&bytes))];
        if r.already_applied(&marks).await? {
            // The target it had before the command moved out of `cli` (log filters name it).
            tracing::debug!(target: "changelake::cli", table = %r.cfg.name, file = %rel, "unchanged since its last run, skipped");
            progress::advance(&table, 1, 0);
            continue;
        }
        let raw = match (csv_delim, format) {
            (Some(d), _) => read_csv(Path::new(&rel), &bytes, d)?,
            (None, Format::Json) => read_jsonl(Path::new(&rel), &bytes)?,
            (None, Format::Debezium) => read_debezium_jsonl(
                &rel,
                &bytes,
                &changelake::decode::store_paths(&r.cfg, format),
                Some(&changelake::decode::env_paths(&r.cfg, format)),
            ),
        };
        let events = raw.rows.len() as u64;
        reports.push(r.run_batch(raw, marks).await?);
        progress::advance(&table, 1, events);
    }
    progress::finish(&table);
    Ok(reports)
}
