//! What the command line accepts (docs/cli.md): the `clap` definitions of every
//! subcommand and option, apart from the code that runs them.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::commands::show::OutFormat;

#[derive(Parser, Debug)]
#[command(
    name = "changelake",
    version,
    about = "CDC change streams into SCD1/SCD2 Delta Lake tables, exactly once"
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum LogFormat {
    /// Human-readable lines (also accepted as `human`).
    #[value(alias = "human")]
    Text,
    /// One JSON object per line, with the current span's fields (table, rows, version).
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run the pipeline; with --once, one pass over the input, then exit.
    Run {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        once: bool,
    },
    /// Validate the config and report every error (exit 2 if any).
    Check {
        #[arg(long)]
        config: PathBuf,
    },
    /// Stored next offset, high watermark and lag per table, topic and partition.
    Offsets {
        #[arg(long)]
        config: PathBuf,
    },
    /// Re-read a table's topic from a position.
    Replay {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        table: String,
        #[arg(long, conflicts_with_all = ["from_offsets", "from_timestamp"])]
        from_beginning: bool,
        /// topic:PARTITION=OFFSET,... (unlisted partitions start at the beginning)
        #[arg(long, conflicts_with = "from_timestamp")]
        from_offsets: Option<String>,
        /// RFC 3339 timestamp
        #[arg(long)]
        from_timestamp: Option<String>,
        /// Merge events at or below the stored offsets again (the result is the same).
        #[arg(long)]
        reapply: bool,
    },
    /// Start an in-process Kafka cluster, stream sample CRM changes, print the tables.
    Demo {
        /// Where to leave the lake and the generated config.
        #[arg(long, default_value = "changelake-demo")]
        dir: PathBuf,
    },
    /// Benchmark: a seeded CRM workload through decode → merge → commit, and
    /// the same batches through delta-rs MERGE (Python `deltalake`), side by side.
    Bench {
        /// Work directory (tables, batch files, bench.json, bench.md).
        #[arg(long, default_value = "bench-out")]
        dir: PathBuf,
        /// Keys in the table before the timed runs.
        #[arg(long, default_value_t = 1_000_000)]
        keys: u64,
        /// Events per batch (one batch = one run = one commit).
        #[arg(long, default_value_t = 100_000)]
        batch: usize,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Comma-separated: scd1, scd2.
        #[arg(long, default_value = "scd1,scd2")]
        strategies: String,
        /// uniform, recent (90% of updates on the newest 10% of keys), or
        /// skewed (power law towards the newest keys: half of the updates on the newest 6%).
        #[arg(long, default_value = "uniform")]
        distribution: String,
        /// Column mix: crm (20 columns, mostly text), narrow (6, mostly
        /// numbers and timestamps), wide (44: crm plus 24 custom fields).
        #[arg(long, default_value = "crm")]
        columns: String,
        /// Percent shares besides updates: insert=5,delete=2,late=3,duplicate=5
        #[arg(long, default_value = "insert=5,delete=2,late=3,duplicate=5")]
        mix: String,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Skip the delta-rs MERGE comparison.
        #[arg(long)]
        no_deltars: bool,
        /// Also stream through an in-process broker at this many events/s.
        #[arg(long)]
        broker_rate: Option<u64>,
        #[arg(long, default_value_t = 20)]
        broker_secs: u64,
        /// batching.max_age for the broker run, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        max_age_ms: u64,
        /// Events per load commit.
        #[arg(long, default_value_t = 250_000)]
        load_chunk: usize,
        /// Extra table `layout:` options, e.g. "file_rows: 200000".
        #[arg(long)]
        layout: Option<String>,
    },
    /// Exit 0 when an HTTP endpoint answers 200 (container health checks without curl).
    Probe {
        #[arg(default_value = "http://127.0.0.1:9464/readyz")]
        url: String,
    },
    /// Print a table ordered by business key, then version order.
    Show {
        table: String,
        #[arg(long)]
        config: PathBuf,
        /// all | active | as-of=<RFC 3339 timestamp>
        #[arg(long, default_value = "all")]
        view: String,
        #[arg(long, value_enum, default_value_t = OutFormat::Table)]
        format: OutFormat,
    },
}
