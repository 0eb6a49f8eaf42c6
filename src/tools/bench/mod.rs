//! `changelake bench`: a reproducible CRM workload through the real path, and
//! the same batches through delta-rs MERGE, side by side in one run.
//!
//! Why it is built this way: the claim to check is that a run's cost grows
//! with the batch, not with the table, and that this beats what a user would
//! otherwise write (delta-rs MERGE per micro-batch). So the benchmark
//!
//! * generates a seeded account workload (about 20 columns, Debezium JSON
//!   envelopes, a configurable insert/update/delete/late/duplicate mix, uniform
//!   or "recent" key choice) and writes each update batch to a file;
//! * loads the table through the file source (`type: jsonl, format: debezium`),
//!   then runs every batch file through decode → merge → Delta commit exactly
//!   as `changelake run` does, timing each run and counting rewritten files;
//! * runs `benches/deltars_merge.py` on the same batch files: it copies the
//!   loaded table into a delta-rs table, then parses, deduplicates and MERGEs
//!   each batch, and finally checks that both tables hold the same
//!   (key, sequence) pairs — a benchmark that compares different results
//!   compares nothing;
//! * optionally streams batches through an in-process Kafka cluster at a fixed
//!   rate and measures produce-to-commit latency.
//!
//! Output: a Markdown table on stdout, `bench.json` and the chart `bench.svg`
//! (seconds per run of both engines) in the work directory.
//!
//! This module runs the steps; the workload is [`crate::tools::workload`]'s,
//! the memory readings `memory`'s, the delta-rs side `deltars`' and the
//! report `results`'.

mod avro;
mod chart;
mod deltars;
mod io;
mod memory;
mod opts;
mod results;
mod text;

use std::path::PathBuf;
use std::time::Instant;

use changelake::config::{Config, Format, Strategy, TableConfig};
use changelake::engine::{Mark, RunReport, TableRunner};
use changelake::error::{Error, Result};
use changelake::source::file::{content_version, read_csv, read_debezium_jsonl, read_jsonl};

use self::memory::{reset_peak, rss, trim};
pub use self::opts::{BenchOpts, Encoding, Remote};
use self::results::{Output, PerKey, Restart, RunStat, TableResult};
use crate::tools::bench_broker::{self, BrokerOpts};
use crate::tools::soak::{self, SoakOpts};
use crate::tools::workload::Workload;

pub async fn run(opts: BenchOpts) -> Result<()> {
    if let (Some(duration), Some(rate)) = (opts.soak, opts.broker_rate) {
        let soak = SoakOpts {
            dir: opts.dir.join("soak"),
            seed: opts.seed,
            rate,
            duration,
            max_age_ms: opts.max_age_ms,
            layout: opts.table_option.clone(),
        };
        let (md, _) = soak::run(&soak).await?;
        print!("{md}");
        return Ok(());
    }
    if opts.deltars && opts.strategies.iter().any(|s| s == "scd1") {
        // Before minutes of loading, not after them.
        deltars::preflight()?;
    }
    let config = prepare(&opts)?;
    let remote = match &opts.remote {
        Some(r) => Some(remote_config(&opts, r).await?),
        None => None,
    };
    let files = write_batches(&opts)?;
    let mut out = Output::new(&opts);
    out.io = Some(io::IoRates::measure(&opts.dir)?);
    let mut scd1_eps = None;
    for strategy in &opts.strategies {
        let local = bench_table(&config, strategy, &opts, &files, &mut scd1_eps, &mut out).await?;
        out.layouts(strategy, &local);
        if let Some(rc) = &remote {
            bench_remote(rc, strategy, &opts, &files, &local, &mut out).await?;
        }
    }
    if let Some(rate) = opts.broker_rate {
        let broker = BrokerOpts {
            dir: opts.dir.join("broker"),
            seed: opts.seed,
            rate,
            secs: opts.broker_secs,
            max_age_ms: opts.max_age_ms,
            layout: opts.table_option.clone(),
        };
        let (j, text) = bench_broker::run(&broker).await?;
        out.md.push_str(&text);
        out.json.insert("broker".into(), j);
    }
    out.side_by_side();
    out.write(&opts.dir)?;
    print!("{}", out.md);
    Ok(())
}

/// Clears the previous run's lake, batches and delta-rs copy, writes
/// `bench.yaml` and loads it.
fn prepare(opts: &BenchOpts) -> Result<Config> {
    let dir = &opts.dir;
    if dir.join("lake").exists() {
        std::fs::remove_dir_all(dir.join("lake"))
            .map_err(|e| Error::Input(format!("{}: {e}", dir.display())))?;
    }
    let _ = std::fs::remove_dir_all(dir.join("runs"));
    let _ = std::fs::remove_dir_all(dir.join("deltars"));
    std::fs::create_dir_all(dir.join("runs"))
        .map_err(|e| Error::Input(format!("{}: {e}", dir.display())))?;
    let cfg_path = dir.join("bench.yaml");
    std::fs::write(&cfg_path, config_text(opts)).map_err(|e| Error::Input(e.to_string()))?;
    Ok(Config::load(&cfg_path)?)
}

/// The same tables on the object store of `--root`, under a fresh prefix
/// (`<root>/bench-<unix time>`: nothing to clear, earlier runs stay
/// comparable). The store must pass the conditional-PUT probe, as for `run`.
async fn remote_config(opts: &BenchOpts, r: &Remote) -> Result<Config> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let root = format!("{}/bench-{stamp}", r.root.trim_end_matches('/'));
    // Options stay out of the file (they may hold secrets).
    let text = config_text(opts)
        .replace("storage: {root: ./lake}", &format!("storage: {{root: \"{root}\"}}"));
    let path = opts.dir.join("bench-remote.yaml");
    std::fs::write(&path, text).map_err(|e| Error::Input(e.to_string()))?;
    let mut config = Config::load(&path)?;
    config.storage_options = r.options.clone();
    crate::commands::run::probe_store(&config).await?;
    eprintln!("remote runs on {root}");
    Ok(config)
}

/// One strategy on the object store: the same load and timed runs as the
/// local table, reported beside its figures with request counts.
async fn bench_remote(
    config: &Config,
    strategy: &str,
    opts: &BenchOpts,
    files: &[PathBuf],
    local: &TableResult,
    out: &mut Output,
) -> Result<()> {
    let tname = table_name(strategy);
    let Some(t) = config.table(&tname).cloned() else { return Ok(()) };
    let paths = changelake::decode::store_paths(&t, opts.format);
    let Loaded { mut runner, load_seconds, per_key, restart } =
        load(config, &t, opts, &paths).await?;
    let stats = timed_runs(&mut runner, files, opts, &paths).await?;
    let result = TableResult { stats, load_seconds, per_key, restart, peak: 0, load_peak: 0 };
    let entry = out.remote(&tname, &config.storage_root, &result, local);
    out.json.insert(format!("{tname}_remote"), entry);
    Ok(())
}

/// Requests to a table's store so far (every operation, retries included).
fn storage_requests(table: &str) -> u64 {
    let m = changelake::telemetry::metrics();
    (changelake::telemetry::STORAGE_OPERATIONS.iter())
        .map(|op| m.storage_requests.with_label_values(&[table, op]).get())
        .sum()
}

/// Bytes read from and written to a table's store so far, and to its row
/// companions (on the same disk here: the storage floor counts them).
fn storage_bytes(table: &str) -> (u64, u64) {
    let m = changelake::telemetry::metrics();
    let get = |d: &str| {
        m.storage_bytes.with_label_values(&[table, d]).get()
            + m.row_companion_bytes.with_label_values(&[table, d]).get()
    };
    (get("read"), get("written"))
}

/// The bench's tables: one per strategy, both reading the batch files.
fn config_text(opts: &BenchOpts) -> String {
    let extra = opts.table_option.as_deref();
    let layout = |dv: bool| match (dv, extra) {
        (false, None) => String::new(),
        (false, Some(o)) => format!("\n      layout: {{{o}}}"),
        (true, None) => "\n      layout: {deletion_vectors: true}".into(),
        (true, Some(o)) if o.contains("deletion_vectors") => format!("\n      layout: {{{o}}}"),
        (true, Some(o)) => format!("\n      layout: {{deletion_vectors: true, {o}}}"),
    };
    // Debezium envelopes sequence by the source's LSN and delete on `op`
    // `d` by default; flat rows carry both as columns.
    let (seq, deletes) = match opts.format {
        Format::Debezium => ("source.lsn", ""),
        Format::Json => ("lsn", ", delete_when: \"op = 'd'\""),
    };
    let format = opts.format.name();
    let mut text = format!(
        "# Written by `changelake bench`; `changelake run --once --config` on it replays the runs.\n\
         storage: {{root: ./lake}}\n\
         systems:\n  dump: {{type: jsonl, format: {format}, path: 'runs/{{object}}-*.jsonl'}}\n\
         bronze:\n  tables:\n",
    );
    // Each strategy in the default layout (copy-on-write) and with deletion
    // vectors (`-dv`, merge-on-read), so both can be run side by side.
    for dv in [false, true] {
        let suffix = if dv { "_dv" } else { "" };
        let layout = layout(dv);
        text.push_str(&format!(
            "    account_scd1{suffix}:\n      source: {{system: dump, object: account}}\n      business_key: [accountid]\n      strategy: scd1\n      merge: {{sequence_by: [{seq}], delete_mode: hard{deletes}}}{layout}\n\
             \x20   account_scd2{suffix}:\n      source: {{system: dump, object: account}}\n      business_key: [accountid]\n      strategy: scd2\n      merge: {{sequence_by: [{seq}]{deletes}}}{layout}\n"
        ));
    }
    text
}

/// The table a `--strategies` entry names: `scd1` -> `account_scd1`,
/// `scd1-dv` -> `account_scd1_dv`.
fn table_name(strategy: &str) -> String {
    format!("account_{}", strategy.replace('-', "_"))
}

/// The update batches, written once and shared by every engine.
fn write_batches(opts: &BenchOpts) -> Result<Vec<PathBuf>> {
    let mut wl = Workload::new(opts.seed, opts.keys, opts.mix, opts.distribution)
        .with_shape(opts.shape)
        .with_changes(opts.changes)
        .with_format(opts.format);
    let mut files = vec![];
    let t_gen = Instant::now();
    for i in 0..opts.runs {
        let text = wl.batch(opts.batch);
        let f = opts.dir.join(format!("runs/account-{:04}.jsonl", i + 1));
        std::fs::write(&f, text.as_bytes()).map_err(|e| Error::Input(e.to_string()))?;
        files.push(f);
    }
    eprintln!(
        "generated {} batches of {} events in {:.1}s",
        opts.runs,
        opts.batch,
        t_gen.elapsed().as_secs_f64()
    );
    Ok(files)
}

/// One strategy's table: the load, the timed runs, delta-rs on the same
/// batches (scd1) and the table's report section. `scd1_eps` carries scd1's
/// throughput to the scd2 table's section.
async fn bench_table(
    config: &Config,
    strategy: &str,
    opts: &BenchOpts,
    files: &[PathBuf],
    scd1_eps: &mut Option<f64>,
    out: &mut Output,
) -> Result<TableResult> {
    let dir = &opts.dir;
    let tname = table_name(strategy);
    let t = config
        .table(&tname)
        .ok_or_else(|| {
            Error::Usage(format!(
                "--strategies: unknown `{strategy}` (scd1, scd2, scd1-dv, scd2-dv)"
            ))
        })?
        .clone();
    let paths = changelake::decode::store_paths(&t, opts.format);
    let Loaded { mut runner, load_seconds, per_key, restart } =
        load(config, &t, opts, &paths).await?;
    // Delta-rs gets the loaded table before our update runs change it (once:
    // beside the `scd1` table).
    let deltars_out = if opts.deltars && strategy == "scd1" {
        Some(deltars::run(dir, &runner.store.uri, files, opts.format)?)
    } else {
        None
    };
    let (_, load_peak) = rss();
    trim();
    reset_peak();
    let stats = timed_runs(&mut runner, files, opts, &paths).await?;
    let (_, peak) = rss();
    let deltars_out = match deltars_out {
        Some(d) => Some(deltars::compare(d, dir, &runner.store.uri, opts.format)?),
        None => None,
    };
    let result = TableResult { stats, load_seconds, per_key, restart, peak, load_peak };
    let mean = result.mean();
    let eps = opts.batch as f64 / mean;
    if t.strategy == Strategy::Scd1 {
        *scd1_eps = Some(eps);
    }
    let mut entry = out.table(&tname, &result, opts);
    if let Some(d) = deltars_out {
        if !out.deltars(&mut entry, &d, mean) {
            out.json.insert(tname.clone(), entry);
            out.write(dir)?;
            return Err(Error::Input(format!(
                "delta-rs and changelake disagree on the result: {}",
                d["mismatch"]
            )));
        }
    }
    if t.strategy == Strategy::Scd2 {
        if let Some(s1) = *scd1_eps {
            out.ratio_to_scd1(&mut entry, eps / s1);
        }
    }
    out.json.insert(tname, entry);
    Ok(result)
}

/// The loaded table, reopened as a restarted daemon would.
struct Loaded {
    runner: TableRunner,
    load_seconds: f64,
    /// Resident bytes per key after the reopen.
    per_key: PerKey,
    restart: Restart,
}

/// Loads `opts.keys` keys through the same path, in chunks, then reopens the
/// table as a restarted process would: once rebuilding the key index from
/// the data files (a crash), once from the saved index (a graceful stop).
async fn load(
    config: &Config,
    t: &TableConfig,
    opts: &BenchOpts,
    paths: &[String],
) -> Result<Loaded> {
    trim();
    let (rss0, _) = rss();
    let mut runner = TableRunner::open(config, t).await?;
    // Initial load through the same path, in chunks.
    let t_load = Instant::now();
    let mut from = 0;
    let mut n = 0;
    while from < opts.keys {
        let to = (from + opts.load_chunk as u64).min(opts.keys);
        let text = Workload::new(opts.seed, opts.keys, opts.mix, opts.distribution)
            .with_shape(opts.shape)
            .with_changes(opts.changes)
            .with_format(opts.format)
            .load_chunk(from, to);
        n += 1;
        let load = Input { format: opts.format, encoding: Encoding::Json };
        apply(&mut runner, &format!("load-{n:05}"), &text.into(), paths, load).await?;
        from = to;
    }
    let load_s = t_load.elapsed().as_secs_f64();
    let loc = runner.store.loc.clone();
    drop(runner);
    // Reopen without a saved index (the loading process saved one at its
    // checkpoints): the rebuild from the data files.
    changelake::table::forget_saved_index(&loc).await?;
    trim();
    let opened = Instant::now();
    let mut runner = TableRunner::open(config, t).await?;
    let rebuild_seconds = opened.elapsed().as_secs_f64();
    let saving = Instant::now();
    runner.save_index().await;
    let save_seconds = saving.elapsed().as_secs_f64();
    drop(runner);
    trim();
    let opened = Instant::now();
    let runner = TableRunner::open(config, t).await?;
    let restart =
        Restart { rebuild_seconds, snapshot_seconds: opened.elapsed().as_secs_f64(), save_seconds };
    // What a restarted daemon holds: the table with its index loaded from
    // the snapshot (no load buffers, no rebuild leftovers).
    trim();
    let (rss_restarted, _) = rss();
    let keys = opts.keys.max(1) as f64;
    let per_key = PerKey {
        table: rss_restarted.saturating_sub(rss0) as f64 / keys,
        process: rss_restarted as f64 / keys,
    };
    eprintln!(
        "{}: loaded {} keys in {load_s:.1}s; reopen {rebuild_seconds:.2}s rebuilding the key index, {:.2}s from the saved one (saved in {save_seconds:.2}s); resident {:.0} B/key for the table, {:.0} B/key for the whole process",
        t.name, opts.keys, restart.snapshot_seconds, per_key.table, per_key.process
    );
    Ok(Loaded { runner, load_seconds: load_s, per_key, restart })
}

fn slices(all: &[Vec<u8>]) -> Vec<&[u8]> {
    all.iter().map(Vec::as_slice).collect()
}

/// Runs every batch file through decode → merge → commit, timing each run.
async fn timed_runs(
    runner: &mut TableRunner,
    files: &[PathBuf],
    opts: &BenchOpts,
    paths: &[String],
) -> Result<Vec<RunStat>> {
    let tname = runner.cfg.name.clone();
    let mut stats = vec![];
    let all = || files.iter().map(std::fs::read).collect::<std::io::Result<Vec<_>>>();
    let avro = match opts.encoding {
        Encoding::Avro => Some(avro::AvroBatches::derive(&slices(&all()?), opts.format)?),
        _ => None,
    };
    let text = match opts.encoding {
        Encoding::Csv => Some(text::TextBatches::csv(&slices(&all()?))),
        Encoding::JsonSchema => Some(text::TextBatches::json_schema(&slices(&all()?))),
        _ => None,
    };
    // What the load left to free is the load's work, not the first run's.
    changelake::par::settle_drops();
    for (i, f) in files.iter().enumerate() {
        let bytes: bytes::Bytes = std::fs::read(f).map_err(|e| Error::Input(e.to_string()))?.into();
        // Avro, CSV, the schema wrapper: encoded before the clock starts;
        // only decoding is timed.
        let frames = avro.as_ref().map(|a| a.encode(&bytes)).transpose()?;
        let input = match &text {
            Some(t) => t.encode(&bytes)?,
            None => bytes.clone(),
        };
        let keys_before = runner.store.live_keys().count() as u64;
        let requests_before = storage_requests(&tname);
        let bytes_before = storage_bytes(&tname);
        let t0 = Instant::now();
        let name = f.strip_prefix(&opts.dir).unwrap_or(f).to_string_lossy().to_string();
        let (r, decode) = match (&avro, &frames) {
            (Some(a), Some(frames)) => {
                apply_avro(runner, &name, a, frames, content_version(&bytes), paths).await?
            }
            _ => {
                let how = Input { format: opts.format, encoding: opts.encoding };
                apply(runner, &name, &input, paths, how).await?
            }
        };
        let Decode { seconds: decode, cpu_seconds: decode_cpu } = decode;
        let secs = t0.elapsed().as_secs_f64();
        // The run's output is freed on the pool after its commit
        // (`par::drop_later`), where the daemon overlaps it with the next
        // batch. The bench waits for it outside the run's clock, so that
        // the next run's decode clock (CPU time of the whole process) is
        // not charged with it, and shows the wait as its own column.
        let freeing = Instant::now();
        changelake::par::settle_drops();
        let freed_ms = freeing.elapsed().as_secs_f64() * 1e3;
        stats.push(RunStat {
            run: i + 1,
            events: opts.batch,
            seconds: secs,
            decode_seconds: decode,
            decode_events_per_cpu_second: opts.batch as f64 / decode_cpu.max(1e-9),
            events_per_second: opts.batch as f64 / secs,
            files_removed: r.files_removed,
            files_added: r.files_added,
            files_masked: r.files_masked,
            table_keys_before: keys_before,
            requests: storage_requests(&tname) - requests_before,
            bytes_read: storage_bytes(&tname).0 - bytes_before.0,
            bytes_written: storage_bytes(&tname).1 - bytes_before.1,
            phases_ms: r
                .phases
                .iter()
                .map(|(n, ms)| (n.to_string(), *ms))
                .chain([("freed after commit".to_string(), freed_ms)])
                .collect(),
        });
        eprintln!(
            "{tname} run {}: {secs:.3}s ({:.0} events/s), files -{} +{}",
            i + 1,
            opts.batch as f64 / secs,
            r.files_removed,
            r.files_added
        );
    }
    Ok(stats)
}

/// How long decoding a batch file took: wall seconds, and CPU seconds of
/// the process over all its threads (the decode runs on every core).
#[derive(Debug, Clone, Copy)]
struct Decode {
    seconds: f64,
    cpu_seconds: f64,
}

/// CPU seconds this process has used so far, over all threads
/// (`CLOCK_PROCESS_CPUTIME_ID`: nanoseconds, not the kernel's 10 ms ticks,
/// which made a 30 ms decode read as 20 or 40).
#[allow(unsafe_code)]
fn process_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime` is `unsafe` only because it is a foreign
    // function; `ts` is a valid, writable timespec for the whole call.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// [`apply`] for a batch encoded as Avro frames.
async fn apply_avro(
    runner: &mut TableRunner,
    name: &str,
    avro: &avro::AvroBatches,
    frames: &avro::Frames,
    version: i64,
    paths: &[String],
) -> Result<(RunReport, Decode)> {
    let t0 = Instant::now();
    let cpu0 = process_cpu_seconds();
    let keep = changelake::decode::env_paths(&runner.cfg, Format::Debezium);
    let raw = avro.decode(name, frames, paths, &keep);
    let decode =
        Decode { seconds: t0.elapsed().as_secs_f64(), cpu_seconds: process_cpu_seconds() - cpu0 };
    let mark = Mark::file(&runner.cfg.name, name, version);
    let r = runner.run_batch(raw, vec![mark]).await?;
    Ok((r, decode))
}

/// How a batch file's events are written: the events' format, and the
/// text form they are in (JSON lines, CSV, the schema wrapper).
#[derive(Debug, Clone, Copy)]
struct Input {
    format: Format,
    encoding: Encoding,
}

/// Decodes one batch file's bytes and runs it as `changelake run` would;
/// returns the run's report and what the decode took.
async fn apply(
    runner: &mut TableRunner,
    name: &str,
    bytes: &bytes::Bytes,
    paths: &[String],
    Input { format, encoding }: Input,
) -> Result<(RunReport, Decode)> {
    let t0 = Instant::now();
    let cpu0 = process_cpu_seconds();
    let path = std::path::Path::new(name);
    let raw = match (format, encoding) {
        (_, Encoding::Csv) => {
            read_csv(path, bytes, b',').map_err(|e| Error::Input(e.to_string()))?
        }
        (Format::Json, _) => read_jsonl(path, bytes).map_err(|e| Error::Input(e.to_string()))?,
        (Format::Debezium, _) => {
            let keep = changelake::decode::env_paths(&runner.cfg, Format::Debezium);
            read_debezium_jsonl(name, bytes, paths, Some(&keep))
        }
    };
    let decode =
        Decode { seconds: t0.elapsed().as_secs_f64(), cpu_seconds: process_cpu_seconds() - cpu0 };
    let mark = Mark::file(&runner.cfg.name, name, content_version(bytes));
    let r = runner.run_batch(raw, vec![mark]).await?;
    Ok((r, decode))
}
