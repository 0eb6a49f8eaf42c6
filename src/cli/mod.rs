//! Command line (SPEC 10). Exit codes: 0 ok, 1 runtime failure, 2 bad config or usage.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

use changelake::config::{Config, Format, Strategy, SystemKind};
use changelake::daemon::{self, RunOpts, StartAt};
use changelake::engine::{build_spec, Mark, RunReport, TableRunner};
use changelake::error::{Error, Result};
use changelake::merge::Version;
use changelake::source::file::{
    content_version, expand, read_csv, read_debezium_jsonl, read_jsonl,
};
use changelake::source::kafka;
use changelake::value::{cmp_slices, parse_ts, Value};

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

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum OutFormat {
    Table,
    Csv,
    Jsonl,
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
    /// Re-read a table's topic from a position (SPEC 9).
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

pub fn main() -> i32 {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(dispatch(cli.cmd)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
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
        .with_writer(std::io::stderr);
    let _ = match f {
        LogFormat::Text => b.try_init(),
        LogFormat::Json => b.json().with_current_span(true).with_span_list(false).try_init(),
    };
}

async fn dispatch(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Check { config } => {
            let c = Config::load(&config)?;
            println!(
                "{}: ok ({} table{}, {} system{})",
                config.display(),
                c.tables.len(),
                if c.tables.len() == 1 { "" } else { "s" },
                c.systems.len(),
                if c.systems.len() == 1 { "" } else { "s" }
            );
            Ok(())
        }
        Cmd::Run { config, once } => {
            let c = Config::load(&config)?;
            run(&c, once).await
        }
        Cmd::Offsets { config } => {
            let c = Config::load(&config)?;
            print!("{}", offsets(&c).await?);
            Ok(())
        }
        Cmd::Replay { config, table, from_beginning, from_offsets, from_timestamp, reapply } => {
            let c = Config::load(&config)?;
            if c.table(&table).is_none() {
                return Err(Error::Usage(format!("no table `{table}` in the config")));
            }
            let start =
                match (from_beginning, from_offsets, from_timestamp) {
                    (true, None, None) => StartAt::Beginning,
                    (false, Some(o), None) => StartAt::Offsets(parse_offsets(&o)?),
                    (false, None, Some(ts)) => {
                        let t = parse_ts(&ts).ok_or_else(|| {
                            Error::Usage(format!("--from-timestamp {ts}: expected RFC 3339"))
                        })?;
                        StartAt::Timestamp(t / 1000)
                    }
                    _ => return Err(Error::Usage(
                        "give exactly one of --from-beginning, --from-offsets, --from-timestamp"
                            .into(),
                    )),
                };
            let opts = RunOpts { once: true, only_table: Some(table), start: Some(start), reapply };
            let reports = daemon::run(&c, opts, daemon::signals()).await?;
            let committed = reports.iter().filter(|r| r.version.is_some()).count();
            println!("replay done: {committed} commit(s)");
            Ok(())
        }
        Cmd::Demo { dir } => crate::tools::demo::run(&dir).await,
        Cmd::Bench {
            dir,
            keys,
            batch,
            runs,
            strategies,
            distribution,
            columns,
            mix,
            seed,
            no_deltars,
            broker_rate,
            broker_secs,
            max_age_ms,
            load_chunk,
            layout,
        } => {
            use crate::tools::bench::{BenchOpts, Distribution, Mix, Shape};
            let distribution = Distribution::parse(&distribution)?;
            let opts = BenchOpts {
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
                mix: Mix::parse(&mix)?,
                seed,
                deltars: !no_deltars,
                broker_rate,
                broker_secs,
                max_age_ms,
                load_chunk,
                table_option: layout,
            };
            crate::tools::bench::run(opts).await
        }
        Cmd::Probe { url } => {
            let body = tokio::task::spawn_blocking(move || probe(&url))
                .await
                .map_err(|e| Error::Input(e.to_string()))??;
            print!("{body}");
            Ok(())
        }
        Cmd::Show { table, config, view, format } => {
            let c = Config::load(&config)?;
            show(&c, &table, &view, format).await
        }
    }
}

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

/// GET `url` (plain http), Ok(body) on 200.
fn probe(url: &str) -> Result<String> {
    use std::io::{Read, Write};
    let u = url::Url::parse(url).map_err(|e| Error::Usage(format!("probe: `{url}`: {e}")))?;
    if u.scheme() != "http" {
        return Err(Error::Usage(format!("probe: `{url}`: only http:// is supported")));
    }
    let fail = |e: &dyn std::fmt::Display| Error::Input(format!("probe {url}: {e}"));
    let addrs = u.socket_addrs(|| Some(80)).map_err(|e| fail(&e))?;
    let addr = addrs.first().ok_or_else(|| fail(&"no address"))?;
    let timeout = std::time::Duration::from_secs(5);
    let mut s = std::net::TcpStream::connect_timeout(addr, timeout).map_err(|e| fail(&e))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| fail(&e))?;
    let host = u.host_str().unwrap_or("localhost");
    s.write_all(
        format!("GET {} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n", u.path())
            .as_bytes(),
    )
    .map_err(|e| fail(&e))?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| fail(&e))?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(body.to_string())
    } else {
        Err(fail(&format!("{status}: {}", body.trim())))
    }
}

fn parse_offsets(s: &str) -> Result<Vec<(String, i32, i64)>> {
    s.split(',')
        .map(|part| {
            let bad =
                || Error::Usage(format!("--from-offsets: `{part}` is not topic:PARTITION=OFFSET"));
            let (topic, rest) = part.trim().rsplit_once(':').ok_or_else(bad)?;
            let (p, o) = rest.split_once('=').ok_or_else(bad)?;
            Ok((topic.to_string(), p.parse().map_err(|_| bad())?, o.parse().map_err(|_| bad())?))
        })
        .collect()
}

/// `offsets`: stored next offset, high watermark and lag per table/topic/partition.
pub async fn offsets(c: &Config) -> Result<String> {
    let mut rows = vec![];
    for t in &c.tables {
        let Some(SystemKind::Kafka { brokers, group_id, topic, kafka, .. }) =
            c.systems.get(&t.system).map(|s| &s.kind)
        else {
            continue;
        };
        let topic = topic.replace("{object}", &t.object);
        let consumer: rdkafka::consumer::BaseConsumer<kafka::Ctx> =
            kafka::client_config(brokers, group_id, kafka)
                .create_with_context(kafka::Ctx)
                .map_err(|e| Error::Input(format!("kafka: {e}")))?;
        let runner = TableRunner::open(c, t).await?;
        let parts = tokio::task::block_in_place(|| kafka::partitions(&consumer, &topic, brokers))
            .map_err(|e| Error::Input(e.to_string()))?;
        for p in parts {
            let stored = runner.store.txn_version(&kafka::app_id(&t.name, &topic, p)).await?;
            let (low, high) =
                tokio::task::block_in_place(|| kafka::watermarks(&consumer, &topic, p, brokers))
                    .map_err(|e| Error::Input(e.to_string()))?;
            let lag = high - stored.unwrap_or(low).max(low);
            rows.push(vec![
                Value::Str(t.name.clone()),
                Value::Str(topic.clone()),
                Value::Int(p as i64),
                stored.map(Value::Int).unwrap_or(Value::Null),
                Value::Int(high),
                Value::Int(lag.max(0)),
            ]);
        }
    }
    let header = ["table", "topic", "partition", "stored_next_offset", "high_watermark", "lag"]
        .map(String::from);
    Ok(render(&header, &rows, OutFormat::Table))
}

/// One pass over every file source (or, without `--once`, a pass per `max_age`
/// until interrupted: unchanged files are skipped by their content version).
pub async fn run_files(c: &Config, once: bool) -> Result<()> {
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
            for report in run_table_files(c, r).await? {
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

async fn run_table_files(c: &Config, r: &mut TableRunner) -> Result<Vec<RunReport>> {
    let system = &c.systems[&r.cfg.system];
    let (pattern, csv_delim, format) = match &system.kind {
        SystemKind::Csv { path, delimiter } => (path.clone(), Some(*delimiter), Format::Json),
        SystemKind::Jsonl { path, format } => (path.clone(), None, *format),
        SystemKind::Kafka { .. } => unreachable!("checked by run_files"),
    };
    let pattern = c.resolve(&pattern.replace("{object}", &r.cfg.object));
    let mut reports = vec![];
    for file in expand(&pattern)? {
        let bytes =
            std::fs::read(&file).map_err(|e| Error::Input(format!("{}: {e}", file.display())))?;
        let rel = file.strip_prefix(&c.base_dir).unwrap_or(&file).to_string_lossy().to_string();
        let progress = vec![Mark {
            app: format!("changelake/{}/file/{rel}", r.cfg.name),
            version: content_version(&bytes),
            partition: None,
        }];
        if r.already_applied(&progress).await? {
            tracing::debug!(table = %r.cfg.name, file = %rel, "unchanged since its last run, skipped");
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
        reports.push(r.run_batch(raw, progress).await?);
    }
    Ok(reports)
}

pub async fn show(c: &Config, table: &str, view: &str, format: OutFormat) -> Result<()> {
    let t = c.table(table).ok_or_else(|| {
        Error::Usage(format!(
            "no table `{table}` in the config (tables: {})",
            c.tables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let runner = TableRunner::open(c, t).await?;
    if !runner.store.exists() {
        return Err(Error::Input(format!("table {table} has no data yet at {}", runner.store.uri)));
    }
    let spec = build_spec(t, &runner.store.columns)?;
    let mut rows = runner.store.read_all(&spec).await?;
    let scd2 = t.strategy == Strategy::Scd2;
    match view {
        "all" => {}
        "active" => rows.retain(|v| if scd2 { v.current } else { !v.deleted }),
        v if v.starts_with("as-of=") => {
            if !scd2 {
                return Err(Error::Usage("--view as-of needs an scd2 table".into()));
            }
            let ts = parse_ts(&v["as-of=".len()..]).ok_or_else(|| {
                Error::Usage(format!("`{v}`: expected as-of=<RFC 3339 timestamp>"))
            })?;
            rows.retain(|r| {
                r.valid_from.is_some_and(|f| f <= ts)
                    && (r.current || r.valid_to.is_some_and(|e| ts < e))
            });
        }
        other => {
            return Err(Error::Usage(format!(
                "unknown view `{other}` (expected all, active or as-of=TS)"
            )))
        }
    }
    rows.sort_by(|a, b| {
        let ka: Vec<Value> = spec.key.iter().map(|&i| a.data[i].clone()).collect();
        let kb: Vec<Value> = spec.key.iter().map(|&i| b.data[i].clone()).collect();
        cmp_slices(&ka, &kb)
            .then(spec.cmp_seq(&a.data, &b.data))
            .then(a.exec.cmp(&b.exec))
            .then(a.valid_from.cmp(&b.valid_from))
    });
    let r = &t.reserved;
    let mut header: Vec<String> = runner.store.columns.iter().map(|(n, _)| n.clone()).collect();
    if scd2 {
        header.extend([r.valid_from.clone(), r.valid_to.clone(), r.is_current.clone()]);
    }
    header.extend([r.is_deleted.clone(), r.execution_id.clone()]);
    if scd2 && t.surrogate_key {
        header.push(r.sk.clone());
    }
    let cells = |v: &Version| -> Vec<Value> {
        let mut out = v.data.clone();
        if scd2 {
            out.push(v.valid_from.map(Value::Ts).unwrap_or(Value::Null));
            out.push(v.valid_to.map(Value::Ts).unwrap_or(Value::Null));
            out.push(Value::Bool(v.current));
        }
        out.push(Value::Bool(v.deleted));
        out.push(Value::Int(v.exec));
        if scd2 && t.surrogate_key {
            out.push(v.sk.map(Value::Int).unwrap_or(Value::Null));
        }
        out
    };
    let body: Vec<Vec<Value>> = rows.iter().map(cells).collect();
    print!("{}", render(&header, &body, format));
    Ok(())
}

/// Renders rows as an aligned text table, CSV or JSON lines.
pub fn render(header: &[String], rows: &[Vec<Value>], format: OutFormat) -> String {
    match format {
        OutFormat::Csv => {
            let mut w = csv::Writer::from_writer(vec![]);
            let _ = w.write_record(header);
            for r in rows {
                let _ = w.write_record(r.iter().map(|v| {
                    if v.is_null() {
                        String::new()
                    } else {
                        v.to_string()
                    }
                }));
            }
            String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
        }
        OutFormat::Jsonl => {
            let mut s = String::new();
            for r in rows {
                let mut m = serde_json::Map::new();
                for (h, v) in header.iter().zip(r) {
                    let j = match v {
                        Value::Null => serde_json::Value::Null,
                        Value::Bool(b) => (*b).into(),
                        Value::Int(i) => (*i).into(),
                        Value::Float(f) => serde_json::Number::from_f64(*f)
                            .map(Into::into)
                            .unwrap_or(serde_json::Value::Null),
                        other => other.to_string().into(),
                    };
                    m.insert(h.clone(), j);
                }
                s.push_str(&serde_json::Value::Object(m).to_string());
                s.push('\n');
            }
            s
        }
        OutFormat::Table => {
            let text: Vec<Vec<String>> =
                rows.iter().map(|r| r.iter().map(|v| v.to_string()).collect()).collect();
            let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
            for r in &text {
                for (i, c) in r.iter().enumerate() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
            let line = |cells: &[String]| {
                cells
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("{c:<width$}", width = w[i]))
                    .collect::<Vec<_>>()
                    .join(" | ")
                    .trim_end()
                    .to_string()
                    + "\n"
            };
            let mut s = line(header);
            s.push_str(&(w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>().join("-+-") + "\n"));
            for r in &text {
                s.push_str(&line(r));
            }
            s.push_str(&format!(
                "({} row{})\n",
                rows.len(),
                if rows.len() == 1 { "" } else { "s" }
            ));
            s
        }
    }
}
