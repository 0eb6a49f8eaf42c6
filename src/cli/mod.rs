//! Command line (docs/cli.md). Exit codes: 0 ok, 1 runtime failure, 2 bad config or usage.
//!
//! Parses the arguments ([`args`]), sets up logging and the runtime, and
//! hands each subcommand to its implementation: the operator commands in
//! [`crate::commands`], the bench and the demo in [`crate::tools`].

mod args;
mod progress;

use changelake::config::{Config, Needs, Selection};
use changelake::error::{Error, Result};

use self::args::{Cli, Cmd, LogFormat};
use crate::commands::{offsets, probe, replay, run, show, tables};
use crate::tools::bench::{self, BenchOpts};
use crate::tools::demo;
use crate::tools::workload::{Changes, Distribution, Mix, Shape};

/// Threads of the runtime's blocking pool (see `main`).
const BLOCKING_THREADS: usize = 8;

pub fn main() -> i32 {
    let cli = parse_args();
    init_tracing(cli.log_format);
    if matches!(cli.cmd, Cmd::Run { once: true, .. })
        && cli.log_format == LogFormat::Text
        && std::io::IsTerminal::is_terminal(&std::io::stderr())
    {
        progress::install();
    }
    // A small blocking pool: local-disk storage, the Delta log replay and
    // Kafka probes run there, and every thread that ever ran such work keeps
    // its own allocator heap with the pages it last used. With tokio's
    // default of up to 512 threads the soak showed ~35 of them holding over
    // a gigabyte between them after 15 minutes (docs/operations.md, memory).
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return 1;
        }
    };
    let sel = Selection { shard: cli.shard, tables: cli.tables };
    let code = match rt.block_on(dispatch(cli.cmd, sel)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    };
    // Whatever the run promised is committed by now. Blocking work still
    // running — a metadata probe or a Kafka client closing against a dead
    // broker — must not hold the exit (docs/operations.md, shutdown).
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    code
}

/// The arguments; `--version` also names the storage backends of this build.
fn parse_args() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let version = format!(
        "{}\nstorage backends: {}",
        env!("CARGO_PKG_VERSION"),
        changelake::storage::BACKENDS.join(", ")
    );
    // Built once per process; clap keeps a `&'static str`.
    let matches = Cli::command().version(&*version.leak()).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Logs go to stderr. `RUST_LOG` (or `CHANGELAKE_LOG`) sets the filter with
/// the usual `tracing` directives; the default is `warn,changelake=info`.
fn init_tracing(f: LogFormat) {
    let filter = ["RUST_LOG", "CHANGELAKE_LOG"]
        .iter()
        .find_map(|v| {
            std::env::var(v)
                .ok()
                .filter(|s| !s.trim().is_empty())
                .and_then(|s| tracing_subscriber::EnvFilter::try_new(s).ok())
        })
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("warn,changelake=info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(progress::LogWriter);
    let _ = match f {
        LogFormat::Text => b.try_init(),
        LogFormat::Json => b.json().with_current_span(true).with_span_list(false).try_init(),
    };
}

async fn dispatch(cmd: Cmd, sel: Selection) -> Result<()> {
    match cmd {
        Cmd::Check { config, table } => {
            let needs = table.clone().map_or(Needs::Everything, Needs::Table);
            let c = Config::load_for(&config, needs)?.select(&sel)?;
            let tables = if table.is_some() { 1 } else { c.tables.len() };
            println!(
                "{}: ok ({tables} table{}, {} system{})",
                config.display(),
                if tables == 1 { "" } else { "s" },
                c.systems.len(),
                if c.systems.len() == 1 { "" } else { "s" }
            );
            Ok(())
        }
        Cmd::Run { config, once } => {
            let c = Config::load(&config)?.select(&sel)?;
            run::run(&c, once).await
        }
        Cmd::Tables { config, format } => {
            // Like `show`, `tables` reads the lake only.
            let c = Config::load_for(&config, Needs::TablesOnly)?.select(&sel)?;
            print!("{}", tables::tables(&c, format).await?);
            Ok(())
        }
        Cmd::Offsets { config } => {
            let c = Config::load(&config)?.select(&sel)?;
            print!("{}", offsets::offsets(&c).await?);
            Ok(())
        }
        Cmd::Replay { config, table, from_beginning, from_offsets, from_timestamp, reapply } => {
            let c = Config::load_for(&config, Needs::Table(table.clone()))?.select(&sel)?;
            replay::replay(&c, table, from_beginning, from_offsets, from_timestamp, reapply).await
        }
        Cmd::Demo { dir } => demo::run(&dir).await,
        cmd @ Cmd::Bench { .. } => bench::run(bench_opts(cmd)?).await,
        Cmd::Probe { url } => {
            let body = tokio::task::spawn_blocking(move || probe::probe(&url))
                .await
                .map_err(|e| Error::Input(e.to_string()))??;
            print!("{body}");
            Ok(())
        }
        Cmd::Show { table, config, view, limit, filter, key, format } => {
            // `show` reads the lake only: source settings need not resolve.
            let c = Config::load_for(&config, Needs::TablesOnly)?.select(&sel)?;
            let q = show::Query { view: show::View::parse(&view)?, limit, filter, key, format };
            show::show(&c, &table, &q).await
        }
    }
}

/// The bench's options from `bench`'s arguments.
fn bench_opts(cmd: Cmd) -> Result<BenchOpts> {
    let Cmd::Bench {
        dir,
        keys,
        batch,
        runs,
        strategies,
        distribution,
        columns,
        changed_columns,
        format,
        encoding,
        mix,
        seed,
        no_deltars,
        broker_rate,
        broker_secs,
        duration,
        max_age_ms,
        load_chunk,
        layout,
        root,
        storage_options,
    } = cmd
    else {
        unreachable!("dispatch passes only `bench`");
    };
    let distribution = Distribution::parse(&distribution)?;
    let soak = duration
        .map(|d| {
            changelake::config::parse_duration(&d).filter(|d| !d.is_zero()).ok_or_else(|| {
                Error::Usage(format!("--duration: `{d}` is not a duration such as 30m"))
            })
        })
        .transpose()?;
    let format = changelake::config::Format::parse(&format)
        .ok_or_else(|| Error::Usage(format!("--format: `{format}` (debezium, json)")))?;
    Ok(BenchOpts {
        dir,
        keys,
        batch,
        runs,
        strategies: strategies
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        distribution,
        shape: Shape::parse(&columns)?,
        changes: Changes::parse(&changed_columns)?,
        format,
        encoding: bench::Encoding::parse(&encoding)?.fitting(format)?,
        mix: Mix::parse(&mix)?,
        seed,
        deltars: !no_deltars,
        broker_rate,
        broker_secs,
        soak,
        max_age_ms,
        load_chunk,
        table_option: layout,
        remote: root.map(|r| remote_target(r, &storage_options)).transpose()?,
    })
}

/// `--root` with its `--storage-option`s, checked as `storage.root` is.
fn remote_target(root: String, options: &[String]) -> Result<bench::Remote> {
    changelake::storage::check_root(&root).map_err(|e| Error::Usage(format!("--root: {e}")))?;
    if !root.contains("://") {
        return Err(Error::Usage("--root: an object-store URL (s3://, az://, gs://)".into()));
    }
    let mut map = std::collections::BTreeMap::new();
    for o in options {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| Error::Usage("--storage-option: expected KEY=VALUE".into()))?;
        map.insert(k.to_string(), v.to_string());
    }
    Ok(bench::Remote { root, options: changelake::storage::StorageOptions::new(map) })
}
