//! What the command line accepts (docs/cli.md): the `clap` definitions of every
//! subcommand and option, apart from the code that runs them.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::commands::show::OutFormat;
use crate::commands::tables::TablesFormat;

#[derive(Parser, Debug)]
#[command(
    name = "changelake",
    about = "CDC change streams into SCD1/SCD2 Delta Lake tables, exactly once",
    long_about = "changelake reads op-coded change events (Debezium or flat JSON) from Kafka or \
files, micro-batches them per table, deduplicates them, applies SCD type 1 or type 2 rules \
and commits Delta Lake tables together with the source positions they consumed.",
    after_help = "\
Start here:
  changelake demo                                  # the whole pipeline, no services needed
  changelake check --config changelake.yaml        # validate a config
  changelake run --config changelake.yaml --once   # one pass over the input
  changelake tables --config changelake.yaml       # health of every table"
)]
pub struct Cli {
    /// Log format on stderr: text (human-readable) or json (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Fleets: this process owns shard I of N (0-based, e.g. a StatefulSet
    /// ordinal); tables are assigned by rendezvous hashing of their names.
    #[arg(long, global = true, value_name = "I/N")]
    pub shard: Option<changelake::config::Shard>,
    /// Only these tables (comma-separated); combines with --shard.
    #[arg(long, global = true, value_name = "A,B", value_delimiter = ',')]
    pub tables: Vec<String>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum LogFormat {
    /// Human-readable lines (also accepted as `human`).
    #[value(alias = "human")]
    Text,
    /// One JSON object per line, with the current span's fields (table, rows, version).
    Json,
}

// Parsed once per process; `bench`'s many options make its variant the
// largest, and boxing them would only obscure clap's derive.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run the pipeline until stopped (SIGTERM/SIGINT commit open batches first);
    /// with --once, one pass over the input, then exit.
    #[command(after_help = "\
Examples:
  changelake run --config changelake.yaml           # the daemon
  changelake run --config changelake.yaml --once    # read up to the end seen at start, then exit

With --once on a terminal, a progress line per table shows files or offsets
done, events per second and the time left.")]
    Run {
        /// The changelake YAML config.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// One pass: Kafka up to the high watermarks seen at start, each
        /// matching file once; then exit 0.
        #[arg(long)]
        once: bool,
    },
    /// Validate the config and report every error with its YAML path (exit 2 if any).
    #[command(after_help = "\
Examples:
  changelake check --config changelake.yaml
  changelake.yaml: ok (2 tables, 1 system)
  changelake check --config changelake.yaml --table account   # only what `account` needs")]
    Check {
        /// The changelake YAML config.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Check what one table needs: its settings and its system's (other
        /// systems' unset ${VAR}s are not errors).
        #[arg(long)]
        table: Option<String>,
    },
    /// One line of health numbers per table: version, rows, files, small files,
    /// masked rows, last commit and checkpoint, log files, stored positions.
    #[command(after_help = "\
Examples:
  changelake tables --config changelake.yaml
  changelake tables --config changelake.yaml --format json | jq '.[].stats.small_files'

Read from the Delta logs only: no broker and no data file is needed.")]
    Tables {
        /// The changelake YAML config (only storage and table settings are read).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = TablesFormat::Table)]
        format: TablesFormat,
    },
    /// Stored next offset, high watermark and lag per table, topic and partition.
    #[command(after_help = "\
Example:
  changelake offsets --config changelake.yaml

Asks the brokers for watermarks; consumes nothing.")]
    Offsets {
        /// The changelake YAML config.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Re-read a table's topic from an earlier position, then exit.
    #[command(after_help = "\
Examples:
  changelake replay --config changelake.yaml --table account --from-beginning
  changelake replay --config changelake.yaml --table account --from-offsets crm.account:0=1200,crm.account:1=980
  changelake replay --config changelake.yaml --table account --from-timestamp 2024-03-01T00:00:00Z

Events at or below the stored offsets are skipped unless --reapply is given;
the table ends the same either way.")]
    Replay {
        /// The changelake YAML config.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The table to replay (its topic is re-read; other tables are untouched).
        #[arg(long)]
        table: String,
        /// Start at each partition's first offset still in the topic.
        #[arg(long, conflicts_with_all = ["from_offsets", "from_timestamp"])]
        from_beginning: bool,
        /// Start offsets, TOPIC:PARTITION=OFFSET,... (unlisted partitions start at the beginning).
        #[arg(long, value_name = "TOPIC:PARTITION=OFFSET,...", conflicts_with = "from_timestamp")]
        from_offsets: Option<String>,
        /// Start at the first event at or after this RFC 3339 timestamp.
        #[arg(long, value_name = "RFC3339")]
        from_timestamp: Option<String>,
        /// Merge events at or below the stored offsets again (the result is the same).
        #[arg(long)]
        reapply: bool,
    },
    /// Start an in-process Kafka cluster, stream sample CRM changes, print the tables.
    #[command(after_help = "\
Example:
  changelake demo
  changelake show account_history --config changelake-demo/changelake.yaml --view active")]
    Demo {
        /// Where to leave the lake and the generated config.
        #[arg(long, value_name = "DIR", default_value = "changelake-demo")]
        dir: PathBuf,
    },
    /// Benchmark: a seeded CRM workload through decode → merge → commit, and
    /// the same batches through delta-rs MERGE (Python `deltalake`), side by side.
    #[command(after_help = "\
Examples:
  changelake bench --keys 1000000 --runs 3
  changelake bench --keys 100000 --strategies scd2 --distribution recent --no-deltars
  changelake bench --broker-rate 20000 --duration 30m     # soak: memory and lag over time

Writes bench.json, bench.md and bench.svg (seconds per run, both engines) to --dir.")]
    Bench {
        /// Work directory (tables, batch files, bench.json, bench.md, bench.svg).
        #[arg(long, value_name = "DIR", default_value = "bench-out")]
        dir: PathBuf,
        /// Keys in the table before the timed runs.
        #[arg(long, default_value_t = 1_000_000)]
        keys: u64,
        /// Events per batch (one batch = one run = one commit).
        #[arg(long, default_value_t = 100_000)]
        batch: usize,
        /// Timed runs per strategy.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Comma-separated: scd1, scd2 (the default copy-on-write layout),
        /// scd1-dv, scd2-dv (deletion vectors).
        #[arg(long, default_value = "scd1,scd2,scd1-dv,scd2-dv")]
        strategies: String,
        /// uniform, recent (90% of updates on the newest 10% of keys), or
        /// skewed (power law towards the newest keys: half of the updates on the newest 6%).
        #[arg(long, default_value = "uniform")]
        distribution: String,
        /// Column mix: crm (20 columns, mostly text), narrow (10, mostly
        /// numbers and timestamps; 12 with `op` and `lsn` as flat JSON),
        /// wide (44: crm plus 24 custom fields).
        #[arg(long, default_value = "crm")]
        columns: String,
        /// What an update changes: `all` columns, or N of them (chosen per
        /// update, the rest as loaded; `modifiedon` and `versionnumber`
        /// always change), as CRM edits do.
        #[arg(long, value_name = "N", default_value = "all")]
        changed_columns: String,
        /// How events are written: `debezium` envelopes, or `json` flat rows
        /// with `op` and `lsn` columns (`format: json`, `delete_when: op = 'd'`).
        #[arg(long, default_value = "debezium")]
        format: String,
        /// How the timed batches are encoded: `json`; `json-schema`
        /// (Debezium envelopes with the JSON converter's schema wrapper);
        /// `csv` (flat rows with a header, `--format json`); or `avro` (Avro
        /// in the schema registry's wire format, decoded as the Kafka source
        /// decodes it). Schemas follow the generated values.
        #[arg(long, default_value = "json")]
        encoding: String,
        /// Percent shares besides updates: insert=5,delete=2,late=3,duplicate=5
        #[arg(long, default_value = "insert=5,delete=2,late=3,duplicate=5")]
        mix: String,
        /// Seed of the workload generator (same seed, same events).
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Skip the delta-rs MERGE comparison.
        #[arg(long)]
        no_deltars: bool,
        /// Also stream through an in-process broker at this many events/s.
        #[arg(long, value_name = "EVENTS_PER_SEC")]
        broker_rate: Option<u64>,
        /// How long the broker run streams, in seconds.
        #[arg(long, default_value_t = 20)]
        broker_secs: u64,
        /// Soak instead: with --broker-rate, run the daemon as its own process
        /// for this long (e.g. 30m) and report its memory and lag over time
        /// (soak.md, soak.json); nothing else is benchmarked.
        #[arg(long, value_name = "DURATION", requires = "broker_rate")]
        duration: Option<String>,
        /// batching.max_age for the broker run, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        max_age_ms: u64,
        /// Events per load commit.
        #[arg(long, default_value_t = 250_000)]
        load_chunk: usize,
        /// Extra table `layout:` options, e.g. "file_rows: 200000".
        #[arg(long, value_name = "YAML")]
        layout: Option<String>,
        /// Also run every strategy on this object-store root (s3://, az://,
        /// gs://), beside the local figures: time and requests per run.
        #[arg(long, value_name = "URL")]
        root: Option<String>,
        /// An object-store setting for --root, KEY=VALUE (repeatable), e.g.
        /// AWS_ENDPOINT_URL=http://127.0.0.1:9000.
        #[arg(long = "storage-option", value_name = "KEY=VALUE")]
        storage_options: Vec<String>,
    },
    /// Exit 0 when an HTTP endpoint answers 200 (container health checks without curl).
    #[command(after_help = "\
Example (a container health check):
  changelake probe http://127.0.0.1:9464/readyz")]
    Probe {
        /// The endpoint to ask.
        #[arg(default_value = "http://127.0.0.1:9464/readyz")]
        url: String,
    },
    /// Print a table ordered by business key, then version order.
    #[command(after_help = "\
Examples:
  changelake show account --config changelake.yaml --limit 10
  changelake show account_history --config changelake.yaml --key 42
  changelake show account_history --config changelake.yaml --view as-of=2024-03-01T00:00:00Z
  changelake show account --config changelake.yaml --where \"country = 'FR' AND _is_deleted = false\" --format csv
  changelake show _dead_letters --config changelake.yaml --where \"reason = 'type'\"

Only the files that may hold the rows asked for are read; output streams, a
page of keys at a time, so memory follows the page, not the table.")]
    Show {
        /// Table name from the config's `bronze.tables`, or the dead-letter table (`_dead_letters`).
        table: String,
        /// The changelake YAML config (only storage and table settings are read).
        #[arg(long)]
        config: PathBuf,
        /// all: every version; active: scd1 rows not soft-deleted, scd2 current
        /// versions; as-of=<RFC 3339 timestamp>: scd2 versions valid then.
        #[arg(long, default_value = "all")]
        view: String,
        /// Print at most N rows (the N first in key order).
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Only rows where this SQL predicate is true, over the printed columns
        /// (the language of `delete_when`: =, <>, <, >, IN, BETWEEN, IS NULL, AND, OR, NOT).
        #[arg(long = "where", value_name = "PREDICATE")]
        filter: Option<String>,
        /// Only the rows of one business key: one value per key column, comma-separated.
        #[arg(long, value_name = "VALUE[,VALUE]")]
        key: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = OutFormat::Table)]
        format: OutFormat,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_command_and_argument_has_help_text_and_every_command_an_example() {
        let cli = Cli::command();
        cli.clone().debug_assert();
        for a in cli.get_arguments() {
            assert!(a.get_help().is_some(), "global --{} has no help", a.get_id());
        }
        for sub in cli.get_subcommands() {
            let name = sub.get_name();
            assert!(sub.get_about().is_some(), "{name} has no description");
            let after = sub.get_after_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(after.contains(&format!("changelake {name}")), "{name}: no example");
            for a in sub.get_arguments().filter(|a| !a.is_global_set()) {
                assert!(a.get_help().is_some(), "{name} {} has no help", a.get_id());
            }
        }
    }
}
