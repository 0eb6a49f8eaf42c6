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
//! Output: a Markdown table on stdout and `bench.json` in the work directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;

use changelake::config::{Config, Format};
use changelake::engine::{Mark, RunReport, TableRunner};
use changelake::error::{Error, Result};
use changelake::source::file::{content_version, read_debezium_jsonl};

#[derive(Debug, Clone)]
pub struct BenchOpts {
    pub dir: PathBuf,
    pub keys: u64,
    pub batch: usize,
    pub runs: usize,
    pub strategies: Vec<String>,
    pub distribution: Distribution,
    pub shape: Shape,
    pub mix: Mix,
    pub seed: u64,
    pub deltars: bool,
    pub broker_rate: Option<u64>,
    pub broker_secs: u64,
    pub max_age_ms: u64,
    pub load_chunk: usize,
    pub table_option: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    Uniform,
    /// 90% of updates on the newest 10% of keys.
    Recent,
    /// Recency-skewed power law: the key `n·u⁴` from the newest (u uniform),
    /// so half of the updates hit the newest 6% of keys and a tenth the oldest third.
    Skewed,
}

impl Distribution {
    pub fn parse(s: &str) -> Result<Distribution> {
        Ok(match s {
            "uniform" => Distribution::Uniform,
            "recent" => Distribution::Recent,
            "skewed" => Distribution::Skewed,
            other => {
                return Err(Error::Usage(format!(
                    "--distribution: `{other}` (uniform, recent, skewed)"
                )))
            }
        })
    }
}

/// Column mix of the account rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// About 20 columns, mostly short text (the CRM account entity).
    Crm,
    /// 6 columns, mostly numbers and timestamps (a ledger-like entity).
    Narrow,
    /// The CRM columns plus 24 custom fields (text, numbers, flags, dates): 44 columns.
    Wide,
}

impl Shape {
    pub fn parse(s: &str) -> Result<Shape> {
        Ok(match s {
            "crm" => Shape::Crm,
            "narrow" => Shape::Narrow,
            "wide" => Shape::Wide,
            other => return Err(Error::Usage(format!("--columns: `{other}` (crm, narrow, wide)"))),
        })
    }
}

/// Shares of a batch, in percent (the rest are updates).
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    pub insert: u32,
    pub delete: u32,
    pub late: u32,
    pub duplicate: u32,
}

impl Mix {
    pub fn parse(s: &str) -> Result<Mix> {
        let mut m = Mix { insert: 0, delete: 0, late: 0, duplicate: 0 };
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| Error::Usage(format!("--mix: `{part}` is not name=percent")))?;
            let v: u32 = v.trim().parse().map_err(|_| {
                Error::Usage(format!("--mix: `{part}`: percent must be an integer"))
            })?;
            match k.trim() {
                "insert" => m.insert = v,
                "delete" => m.delete = v,
                "late" => m.late = v,
                "duplicate" => m.duplicate = v,
                "update" => {}
                other => {
                    return Err(Error::Usage(format!(
                        "--mix: unknown kind `{other}` (insert, update, delete, late, duplicate)"
                    )))
                }
            }
        }
        if m.insert + m.delete + m.late + m.duplicate > 100 {
            return Err(Error::Usage("--mix: shares add up to more than 100".into()));
        }
        Ok(m)
    }
}

/// SplitMix64: tiny, seedable, good enough for workload shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

const CITIES: [&str; 12] = [
    "Berlin",
    "Hamburg",
    "Munich",
    "Cologne",
    "Frankfurt",
    "Stuttgart",
    "Leipzig",
    "Dresden",
    "Bremen",
    "Hanover",
    "Nuremberg",
    "Essen",
];
const WORDS: [&str; 8] =
    ["solutions", "logistics", "retail", "energy", "health", "software", "foods", "mobility"];

/// The workload: key space, sequence counter and the mix.
pub struct Workload {
    rng: Rng,
    /// Keys 0..next_key exist (or existed).
    next_key: u64,
    lsn: u64,
    mix: Mix,
    dist: Distribution,
    shape: Shape,
}

impl Workload {
    pub fn new(seed: u64, keys: u64, mix: Mix, dist: Distribution) -> Workload {
        // Loaded rows of key k carry lsn 2k+2; a late event for k uses 2k+1,
        // older than anything ever stored for it. Update lsns start above all of them.
        Workload {
            rng: Rng(seed),
            next_key: keys,
            lsn: 2 * keys + 1_000_000,
            mix,
            dist,
            shape: Shape::Crm,
        }
    }

    pub fn with_shape(mut self, shape: Shape) -> Workload {
        self.shape = shape;
        self
    }

    /// One account row as the Debezium `after` object.
    fn row(out: &mut String, shape: Shape, key: u64, version: u64) {
        let h = Rng(key.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ version).next();
        if shape == Shape::Narrow {
            let _ = write!(
                out,
                "{{\"accountid\":{key},\"statecode\":{},\"balance\":{}.{:02},\"creditlimit\":{}.0,\"modifiedon\":\"2026-{:02}-{:02}T{:02}:{:02}:00Z\",\"versionnumber\":{version}}}",
                (h >> 40) % 2,
                (h >> 24) % 50_000_000,
                (h >> 30) % 100,
                ((h >> 28) % 1_000) * 1_000,
                1 + (h >> 44) % 12,
                1 + (h >> 48) % 28,
                (h >> 52) % 24,
                (h >> 56) % 60,
            );
            return;
        }
        let city = CITIES[(h % 12) as usize];
        let word = WORDS[((h >> 8) % 8) as usize];
        let _ = write!(
            out,
            "{{\"accountid\":{key},\"name\":\"Account {key} {word}\",\"accountnumber\":\"AC-{key:08}\",\"address1_city\":\"{city}\",\
             \"address1_country\":\"DE\",\"address1_postalcode\":\"{:05}\",\"telephone1\":\"+49 {} {:07}\",\
             \"emailaddress1\":\"info@account{key}.example\",\"websiteurl\":\"https://account{key}.example\",\
             \"industrycode\":{},\"revenue\":{}.{:02},\"numberofemployees\":{},\"statecode\":{},\"ownerid\":\"{:016x}\",\
             \"createdon\":\"2024-{:02}-{:02}T08:00:00Z\",\"modifiedon\":\"2026-{:02}-{:02}T{:02}:{:02}:00Z\",\
             \"description\":\"{word} customer in {city}, segment {}\",\"creditlimit\":{}.0,\"donotemail\":{},\"versionnumber\":{version}}}",
            h % 100_000,
            30 + h % 70,
            (h >> 12) % 10_000_000,
            (h >> 20) % 40,
            (h >> 24) % 50_000_000,
            (h >> 30) % 100,
            (h >> 32) % 5_000,
            (h >> 40) % 2,
            h.rotate_left(17),
            1 + key % 12,
            1 + key % 28,
            1 + (h >> 44) % 12,
            1 + (h >> 48) % 28,
            (h >> 52) % 24,
            (h >> 56) % 60,
            (h >> 36) % 9,
            ((h >> 28) % 1_000) * 1_000,
            (h >> 61) % 2 == 1,
        );
        if shape == Shape::Wide {
            out.pop(); // the closing brace
            for i in 0..24u64 {
                let g = Rng(h ^ i).next();
                let _ = match i % 4 {
                    0 => write!(
                        out,
                        ",\"custom_{i:02}\":\"{} {:x}\"",
                        WORDS[(g % 8) as usize],
                        g >> 20
                    ),
                    1 => write!(out, ",\"custom_{i:02}\":{}", g % 1_000_000),
                    2 => write!(out, ",\"custom_{i:02}\":{}", g.is_multiple_of(3)),
                    _ => write!(
                        out,
                        ",\"custom_{i:02}\":\"2025-{:02}-{:02}T00:00:00Z\"",
                        1 + g % 12,
                        1 + (g >> 8) % 28
                    ),
                };
            }
            out.push('}');
        }
    }

    fn envelope(out: &mut String, shape: Shape, op: char, key: u64, lsn: u64, version: u64) {
        let ts = 1_764_000_000_000u64 + lsn % 1_000_000_000;
        out.push_str("{\"before\":");
        if op == 'd' {
            Self::row(out, shape, key, version);
            out.push_str(",\"after\":null");
        } else {
            out.push_str("null,\"after\":");
            Self::row(out, shape, key, version);
        }
        let _ = writeln!(
            out,
            ",\"source\":{{\"version\":\"2.7.0.Final\",\"connector\":\"postgresql\",\"name\":\"crm\",\"ts_ms\":{ts},\"db\":\"crm\",\"schema\":\"public\",\"table\":\"account\",\"lsn\":{lsn},\"txId\":{}}},\"op\":\"{op}\",\"ts_ms\":{}}}",
            lsn / 8,
            ts + 40
        );
    }

    /// Snapshot events (`op: r`) for keys `from..to`.
    pub fn load_chunk(&self, from: u64, to: u64) -> String {
        let mut out = String::with_capacity(((to - from) * 800) as usize);
        for k in from..to {
            Self::envelope(&mut out, self.shape, 'r', k, 2 * k + 2, 0);
        }
        out
    }

    fn pick(&mut self) -> u64 {
        match self.dist {
            Distribution::Uniform => self.rng.below(self.next_key),
            Distribution::Recent => {
                let n = self.next_key;
                let hot = (n / 10).max(1);
                if self.rng.below(100) < 90 {
                    n - 1 - self.rng.below(hot)
                } else {
                    self.rng.below(n)
                }
            }
            Distribution::Skewed => {
                let n = self.next_key;
                let u = (self.rng.next() >> 11) as f64 / (1u64 << 53) as f64;
                n - 1 - ((n as f64 * u.powi(4)) as u64).min(n - 1)
            }
        }
    }

    /// One update batch of `n` events (one JSON line each).
    pub fn batch(&mut self, n: usize) -> String {
        let mut out = String::with_capacity(n * 820);
        let mut starts: Vec<usize> = Vec::with_capacity(n);
        for _ in 0..n {
            let roll = self.rng.below(100) as u32;
            let m = self.mix;
            let start = out.len();
            if roll < m.duplicate && !starts.is_empty() {
                // At-least-once delivery: an exact copy of an earlier event of the batch.
                let s = starts[self.rng.below(starts.len() as u64) as usize];
                let end = s + out[s..].find('\n').expect("line") + 1;
                let line = out[s..end].to_string();
                out.push_str(&line);
            } else if roll < m.duplicate + m.insert {
                let k = self.next_key;
                self.next_key += 1;
                self.lsn += 1;
                Self::envelope(&mut out, self.shape, 'c', k, self.lsn, self.lsn);
            } else if roll < m.duplicate + m.insert + m.delete {
                let k = self.pick();
                self.lsn += 1;
                Self::envelope(&mut out, self.shape, 'd', k, self.lsn, self.lsn);
            } else if roll < m.duplicate + m.insert + m.delete + m.late {
                let k = self.pick();
                Self::envelope(&mut out, self.shape, 'u', k, 2 * k + 1, 1);
            } else {
                let k = self.pick();
                self.lsn += 1;
                Self::envelope(&mut out, self.shape, 'u', k, self.lsn, self.lsn);
            }
            starts.push(start);
        }
        out
    }
}

/// (current, peak) resident set size in bytes, from /proc/self/status.
pub fn rss() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Returns freed heap pages to the OS so RSS shows what is live: on this
/// thread and on every worker of the pool (mimalloc keeps per-thread heaps,
/// and an idle worker holds the pages it freed until it allocates again).
fn trim() {
    // SAFETY: mi_collect only frees memory no allocation refers to.
    rayon::broadcast(|_| unsafe { libmimalloc_sys::mi_collect(true) });
    unsafe { libmimalloc_sys::mi_collect(true) };
}

/// Resets the kernel's peak-RSS mark (VmHWM), so the peak of the timed runs
/// is reported apart from the load's.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn config_text(opts: &BenchOpts) -> String {
    let layout = match opts.table_option.as_deref() {
        Some(o) => format!("\n      layout: {{{o}}}"),
        None => String::new(),
    };
    format!(
        "# Written by `changelake bench`; `changelake run --once --config` on it replays the runs.\n\
         storage: {{root: ./lake}}\n\
         systems:\n  dump: {{type: jsonl, format: debezium, path: 'runs/{{object}}-*.jsonl'}}\n\
         bronze:\n  tables:\n\
         \x20   account_scd1:\n      source: {{system: dump, object: account}}\n      business_key: [accountid]\n      strategy: scd1\n      merge: {{sequence_by: [source.lsn], delete_mode: hard}}{layout}\n\
         \x20   account_scd2:\n      source: {{system: dump, object: account}}\n      business_key: [accountid]\n      strategy: scd2\n      merge: {{sequence_by: [source.lsn]}}{layout}\n"
    )
}

#[derive(Debug, Clone, serde::Serialize)]
struct RunStat {
    run: usize,
    events: usize,
    seconds: f64,
    decode_seconds: f64,
    events_per_second: f64,
    files_removed: usize,
    files_added: usize,
    files_masked: usize,
    table_keys_before: u64,
}

async fn apply(
    runner: &mut TableRunner,
    name: &str,
    bytes: &[u8],
    paths: &[String],
) -> Result<(RunReport, f64)> {
    let t0 = Instant::now();
    let keep = changelake::decode::env_paths(&runner.cfg, Format::Debezium);
    let raw = read_debezium_jsonl(name, bytes, paths, Some(&keep));
    let decode = t0.elapsed().as_secs_f64();
    let mark = Mark {
        app: format!("changelake/{}/file/{name}", runner.cfg.name),
        version: content_version(bytes),
        partition: None,
    };
    let r = runner.run_batch(raw, vec![mark]).await?;
    Ok((r, decode))
}

pub async fn run(opts: BenchOpts) -> Result<()> {
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
    std::fs::write(&cfg_path, config_text(&opts)).map_err(|e| Error::Input(e.to_string()))?;
    let config = Config::load(&cfg_path)?;

    // The update batches, written once and shared by every engine.
    let mut wl =
        Workload::new(opts.seed, opts.keys, opts.mix, opts.distribution).with_shape(opts.shape);
    let mut files = vec![];
    let t_gen = Instant::now();
    for i in 0..opts.runs {
        let text = wl.batch(opts.batch);
        let f = dir.join(format!("runs/account-{:04}.jsonl", i + 1));
        std::fs::write(&f, text.as_bytes()).map_err(|e| Error::Input(e.to_string()))?;
        files.push(f);
    }
    eprintln!(
        "generated {} batches of {} events in {:.1}s",
        opts.runs,
        opts.batch,
        t_gen.elapsed().as_secs_f64()
    );

    let mut results = serde_json::Map::new();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n## changelake bench: {} keys, {} runs of {} events, {:?} keys, {:?} columns, mix insert={}% delete={}% late={}% duplicate={}% (rest updates){}\n",
        opts.keys,
        opts.runs,
        opts.batch,
        opts.distribution,
        opts.shape,
        opts.mix.insert,
        opts.mix.delete,
        opts.mix.late,
        opts.mix.duplicate,
        opts.table_option.as_deref().map(|o| format!(", layout {{{o}}}")).unwrap_or_default()
    );
    let mut scd1_eps = None;
    for strategy in &opts.strategies {
        let tname = format!("account_{strategy}");
        let t = config
            .table(&tname)
            .ok_or_else(|| {
                Error::Usage(format!("--strategies: unknown `{strategy}` (scd1, scd2)"))
            })?
            .clone();
        let paths = changelake::decode::store_paths(&t, Format::Debezium);
        trim();
        let (rss0, _) = rss();
        let mut runner = TableRunner::open(&config, &t).await?;
        // Initial load through the same path, in chunks.
        let t_load = Instant::now();
        let mut from = 0;
        let mut n = 0;
        while from < opts.keys {
            let to = (from + opts.load_chunk as u64).min(opts.keys);
            let text = Workload::new(opts.seed, opts.keys, opts.mix, opts.distribution)
                .with_shape(opts.shape)
                .load_chunk(from, to);
            n += 1;
            apply(&mut runner, &format!("load-{n:05}"), text.as_bytes(), &paths).await?;
            from = to;
        }
        let load_s = t_load.elapsed().as_secs_f64();
        drop(runner);
        // Reopen: what a restarted daemon holds (table index only, no load buffers).
        trim();
        let mut runner = TableRunner::open(&config, &t).await?;
        trim();
        let (rss_loaded, _) = rss();
        let per_key = rss_loaded.saturating_sub(rss0) as f64 / opts.keys.max(1) as f64;
        eprintln!(
            "{tname}: loaded {} keys in {load_s:.1}s; resident {per_key:.0} B/key after reopen",
            opts.keys
        );

        // Delta-rs gets the loaded table before our update runs change it.
        let deltars_out = if opts.deltars && strategy == "scd1" {
            Some(run_deltars(dir, &runner.store.uri, &files)?)
        } else {
            None
        };

        let (_, load_peak) = rss();
        trim();
        reset_peak();
        let mut stats = vec![];
        for (i, f) in files.iter().enumerate() {
            let bytes = std::fs::read(f).map_err(|e| Error::Input(e.to_string()))?;
            let keys_before = runner.store.live_keys().count() as u64;
            let t0 = Instant::now();
            let name = f.strip_prefix(dir).unwrap_or(f).to_string_lossy().to_string();
            let (r, decode) = apply(&mut runner, &name, &bytes, &paths).await?;
            let secs = t0.elapsed().as_secs_f64();
            stats.push(RunStat {
                run: i + 1,
                events: opts.batch,
                seconds: secs,
                decode_seconds: decode,
                events_per_second: opts.batch as f64 / secs,
                files_removed: r.files_removed,
                files_added: r.files_added,
                files_masked: r.files_masked,
                table_keys_before: keys_before,
            });
            eprintln!(
                "{tname} run {}: {secs:.3}s ({:.0} events/s), files -{} +{}",
                i + 1,
                opts.batch as f64 / secs,
                r.files_removed,
                r.files_added
            );
        }
        let (_, peak) = rss();
        let deltars_out = match deltars_out {
            Some(mut d) => {
                // Both engines applied the same batches: compare the results.
                let out = std::process::Command::new("python3")
                    .arg(script())
                    .arg("compare")
                    .arg("--ours")
                    .arg(runner.store.uri.trim_start_matches("file://"))
                    .arg("--table")
                    .arg(dir.join("deltars"))
                    .output()
                    .map_err(|e| Error::Input(format!("python3: {e}")))?;
                let c: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
                    Error::Input(format!("compare: {e}: {}", String::from_utf8_lossy(&out.stderr)))
                })?;
                d["same_result"] = c["same_result"].clone();
                d["mismatch"] = c["mismatch"].clone();
                d["rows"] = c["rows"].clone();
                Some(d)
            }
            None => None,
        };
        let mean = stats.iter().map(|s| s.seconds).sum::<f64>() / stats.len().max(1) as f64;
        let eps = opts.batch as f64 / mean;
        if strategy == "scd1" {
            scd1_eps = Some(eps);
        }
        let _ = writeln!(md, "### {tname}\n");
        let _ = writeln!(
            md,
            "| run | seconds | events/s | decode s | files rewritten | files masked (DV) | files added |\n| --- | --- | --- | --- | --- | --- | --- |"
        );
        for s in &stats {
            let _ = writeln!(
                md,
                "| {} | {:.3} | {:.0} | {:.3} | {} | {} | {} |",
                s.run,
                s.seconds,
                s.events_per_second,
                s.decode_seconds,
                s.files_removed,
                s.files_masked,
                s.files_added
            );
        }
        let _ = writeln!(
            md,
            "\nmean {mean:.3}s per run, {eps:.0} events/s; load {load_s:.1}s; resident {per_key:.0} B/key (table index after reopen); \
             peak RSS {:.0} MiB during the runs ({:.0} MiB while loading in chunks of {} events)\n",
            peak as f64 / 1048576.0,
            load_peak as f64 / 1048576.0,
            opts.load_chunk
        );
        let mut entry = json!({
            "runs": stats, "mean_seconds": mean, "events_per_second": eps, "load_seconds": load_s,
            "resident_bytes_per_key": per_key, "peak_rss_bytes": peak, "load_peak_rss_bytes": load_peak,
        });
        if let Some(d) = deltars_out {
            let merge_mean = mean_of(&d, "total_seconds");
            let merge_only = mean_of(&d, "merge_seconds");
            let _ = writeln!(
                md,
                "delta-rs MERGE on the same batches (parse + dedupe + MERGE, per run):\n"
            );
            let _ = writeln!(
                md,
                "| run | parse s | dedupe s | MERGE s | total s |\n| --- | --- | --- | --- | --- |"
            );
            for (i, r) in d["runs"].as_array().into_iter().flatten().enumerate() {
                let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
                let _ = writeln!(
                    md,
                    "| {} | {:.3} | {:.3} | {:.3} | {:.3} |",
                    i + 1,
                    f("parse_seconds"),
                    f("dedupe_seconds"),
                    f("merge_seconds"),
                    f("total_seconds")
                );
            }
            let same = d["same_result"].as_bool().unwrap_or(false);
            let _ = writeln!(
                md,
                "\n**speed-up vs delta-rs: {:.1}x** (end to end per batch; {:.1}x vs the MERGE call alone). Same (key, sequence) pairs in both tables: {}\n",
                merge_mean / mean,
                merge_only / mean,
                if same { "yes" } else { "**NO**" }
            );
            entry["deltars"] = d.clone();
            entry["speedup_vs_deltars"] = json!(merge_mean / mean);
            entry["speedup_vs_deltars_merge_only"] = json!(merge_only / mean);
            if !same {
                results.insert(tname.clone(), entry);
                write_results(dir, &results, &md)?;
                return Err(Error::Input(format!(
                    "delta-rs and changelake disagree on the result: {}",
                    d["mismatch"]
                )));
            }
        }
        if strategy == "scd2" {
            if let Some(s1) = scd1_eps {
                let _ = writeln!(md, "scd2 / scd1 throughput: {:.2}\n", eps / s1);
                entry["ratio_to_scd1"] = json!(eps / s1);
            }
        }
        results.insert(tname, entry);
    }
    if let Some(rate) = opts.broker_rate {
        let (j, text) = crate::tools::bench_broker::run(&opts, rate).await?;
        md.push_str(&text);
        results.insert("broker".into(), j);
    }
    write_results(dir, &results, &md)?;
    print!("{md}");
    Ok(())
}

fn write_results(
    dir: &Path,
    results: &serde_json::Map<String, serde_json::Value>,
    md: &str,
) -> Result<()> {
    let text =
        serde_json::to_string_pretty(&serde_json::Value::Object(results.clone())).expect("json");
    std::fs::write(dir.join("bench.json"), text).map_err(|e| Error::Input(e.to_string()))?;
    std::fs::write(dir.join("bench.md"), md).map_err(|e| Error::Input(e.to_string()))?;
    Ok(())
}

fn mean_of(d: &serde_json::Value, k: &str) -> f64 {
    let v: Vec<f64> =
        d["runs"].as_array().into_iter().flatten().filter_map(|r| r[k].as_f64()).collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn script() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/deltars_merge.py");
    if here.exists() {
        here
    } else {
        PathBuf::from("benches/deltars_merge.py")
    }
}

/// Runs the delta-rs side (copy of the loaded table, then every batch) and reads its timings.
fn run_deltars(dir: &Path, ours: &str, files: &[PathBuf]) -> Result<serde_json::Value> {
    let mut c = std::process::Command::new("python3");
    c.arg(script())
        .arg("merge")
        .arg("--ours")
        .arg(ours.trim_start_matches("file://"))
        .arg("--table")
        .arg(dir.join("deltars"));
    c.arg("--out").arg(dir.join("deltars.json"));
    for f in files {
        c.arg(f);
    }
    let st =
        c.status().map_err(|e| Error::Input(format!("python3 benches/deltars_merge.py: {e}")))?;
    if !st.success() {
        return Err(Error::Input(format!("benches/deltars_merge.py failed ({st})")));
    }
    let text = std::fs::read_to_string(dir.join("deltars.json"))
        .map_err(|e| Error::Input(format!("deltars.json: {e}")))?;
    serde_json::from_str(&text).map_err(|e| Error::Input(format!("deltars.json: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_is_reproducible_and_follows_the_mix() {
        let mix = Mix::parse("insert=10,delete=5,late=5,duplicate=10").unwrap();
        let a = Workload::new(7, 1000, mix, Distribution::Uniform).batch(2000);
        let b = Workload::new(7, 1000, mix, Distribution::Uniform).batch(2000);
        assert_eq!(a, b, "same seed, same batch");
        let lines: Vec<serde_json::Value> =
            a.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2000);
        let ops = |op: &str| lines.iter().filter(|l| l["op"] == op).count();
        assert!((150..250).contains(&ops("c")), "inserts {}", ops("c"));
        assert!((50..150).contains(&ops("d")), "deletes {}", ops("d"));
        let after =
            lines.iter().find(|l| l["op"] == "u").unwrap()["after"].as_object().unwrap().len();
        assert_eq!(after, 20, "about twenty columns");
        // Late events are older than the loaded row of their key.
        let late =
            lines.iter().filter(|l| l["source"]["lsn"].as_u64().unwrap() < 1_000_000).count();
        assert!(late >= 50, "late {late}");
    }

    #[test]
    fn recent_distribution_hits_the_newest_tenth() {
        let mix = Mix::parse("").unwrap();
        let text = Workload::new(1, 10_000, mix, Distribution::Recent).batch(5000);
        let hot = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["after"]["accountid"]
                    .as_u64()
                    .unwrap()
                    >= 9000
            })
            .count();
        assert!(hot > 4400 && hot < 4800, "{hot} of 5000 on the newest 10%");
    }

    #[test]
    fn skewed_distribution_favours_the_newest_keys_but_reaches_old_ones() {
        let text =
            Workload::new(3, 100_000, Mix::parse("").unwrap(), Distribution::Skewed).batch(10_000);
        let keys: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["after"]["accountid"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        let newest = keys.iter().filter(|&&k| k >= 94_000).count();
        let oldest = keys.iter().filter(|&&k| k < 33_000).count();
        assert!(newest > 4700 && newest < 5300, "{newest} of 10000 on the newest 6%");
        assert!(oldest > 800 && oldest < 1200, "{oldest} of 10000 on the oldest third");
    }

    #[test]
    fn column_shapes_have_their_column_counts_and_decode() {
        for (shape, n) in [(Shape::Crm, 20), (Shape::Narrow, 6), (Shape::Wide, 44)] {
            let text = Workload::new(5, 100, Mix::parse("").unwrap(), Distribution::Uniform)
                .with_shape(shape)
                .batch(50);
            for l in text.lines() {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                assert_eq!(v["after"].as_object().unwrap().len(), n, "{shape:?}: {l}");
            }
            let b = read_debezium_jsonl("x", text.as_bytes(), &["source.lsn".to_string()], None);
            assert_eq!(b.rows.len(), 50);
            assert!(b.unparsable.is_empty());
        }
    }
}
