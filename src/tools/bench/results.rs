//! What the bench reports: a Markdown summary (printed and written to
//! `bench.md`) and the same numbers as `bench.json`. Separate from the steps
//! that measure, so the measuring code reads as the experiment it is.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use changelake::error::{Error, Result};

use super::opts::BenchOpts;

/// One timed run of one table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunStat {
    pub run: usize,
    pub events: usize,
    pub seconds: f64,
    pub decode_seconds: f64,
    /// Events decoded per CPU second (all threads): the decode rate of one core.
    pub decode_events_per_cpu_second: f64,
    pub events_per_second: f64,
    pub files_removed: usize,
    pub files_added: usize,
    pub files_masked: usize,
    pub table_keys_before: u64,
    /// Requests to the table's store during the run.
    pub requests: u64,
    /// Bytes read from and written to the table's store during the run.
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Milliseconds per phase of the run after decoding (the engine's
    /// `batch phases`: conform ... commit, then upkeep), and the wait for
    /// the run's output to be freed after it (not in `seconds`).
    pub phases_ms: Vec<(String, f64)>,
}

/// Seconds to reopen the loaded table (until the first batch could merge).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Restart {
    /// Rebuilding the key index from the data files (after a crash).
    pub rebuild_seconds: f64,
    /// Loading the index saved by the previous process (after a graceful stop).
    pub snapshot_seconds: f64,
    /// Saving it.
    pub save_seconds: f64,
}

/// A strategy's mean seconds per run and restart seconds (from the saved
/// key index), for the side-by-side table.
#[derive(Debug, Clone, Copy)]
struct LayoutFigures {
    mean: f64,
    restart: f64,
}

/// Resident bytes per key once the loaded table is reopened from its saved
/// key index, as a restarted daemon holds it.
#[derive(Debug, Clone, Copy, Default)]
pub struct PerKey {
    /// The table: what reopening it added to the process.
    pub table: f64,
    /// The whole process, fixed costs included.
    pub process: f64,
}

/// One table's measurements: its timed runs and the load before them.
pub struct TableResult {
    pub stats: Vec<RunStat>,
    pub load_seconds: f64,
    pub per_key: PerKey,
    pub restart: Restart,
    /// Peak RSS during the timed runs and while loading.
    pub peak: u64,
    pub load_peak: u64,
}

impl TableResult {
    /// Mean seconds per run.
    pub fn mean(&self) -> f64 {
        self.stats.iter().map(|s| s.seconds).sum::<f64>() / self.stats.len().max(1) as f64
    }

    /// Mean storage requests per run.
    pub fn mean_requests(&self) -> f64 {
        self.stats.iter().map(|s| s.requests as f64).sum::<f64>() / self.stats.len().max(1) as f64
    }
}

/// bench.json's object (one entry per table, and `broker`) and bench.md's text.
pub struct Output {
    pub json: serde_json::Map<String, serde_json::Value>,
    pub md: String,
    /// The chart's caption: the workload in a line.
    title: String,
    /// This machine's file read and write rates (the runs' storage floor).
    pub io: Option<super::io::IoRates>,
    /// Each strategy's figures, for [`Output::side_by_side`].
    layouts: Vec<(String, LayoutFigures)>,
    /// delta-rs MERGE's mean seconds per run, when it ran.
    deltars_mean: Option<f64>,
}

impl Output {
    /// An empty report under the heading that names the workload.
    pub fn new(opts: &BenchOpts) -> Output {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "\n## changelake bench: {} keys, {} runs of {} events, {:?} keys, {:?} columns, {:?} events ({:?}), updates change {}, mix insert={}% delete={}% late={}% duplicate={}% (rest updates){}\n",
            opts.keys,
            opts.runs,
            opts.batch,
            opts.distribution,
            opts.shape,
            opts.format,
            opts.encoding,
            opts.changes,
            opts.mix.insert,
            opts.mix.delete,
            opts.mix.late,
            opts.mix.duplicate,
            opts.table_option.as_deref().map(|o| format!(", layout {{{o}}}")).unwrap_or_default()
        );
        let title = format!(
            "{} keys, {} events per run, {} keys, {} columns, updates change {}, layout: {}",
            opts.keys,
            opts.batch,
            format!("{:?}", opts.distribution).to_lowercase(),
            format!("{:?}", opts.shape).to_lowercase(),
            opts.changes,
            opts.table_option.as_deref().unwrap_or("default (copy-on-write)")
        );
        Output {
            json: serde_json::Map::new(),
            md,
            title,
            io: None,
            layouts: vec![],
            deltars_mean: None,
        }
    }

    /// A table's section (its runs, mean, load and memory); returns its JSON entry.
    pub fn table(&mut self, name: &str, t: &TableResult, opts: &BenchOpts) -> serde_json::Value {
        let rates = self.io;
        let md = &mut self.md;
        let (mean, per_key, load_s) = (t.mean(), t.per_key, t.load_seconds);
        let eps = opts.batch as f64 / mean;
        let _ = writeln!(md, "### {name}\n");
        if t.stats.is_empty() {
            let _ = writeln!(
                md,
                "load {load_s:.1}s; resident after a restart {:.0} B/key for the table, {:.0} B/key for the whole process (no timed runs)\n",
                per_key.table, per_key.process
            );
            return json!({"runs": [], "load_seconds": load_s, "resident_bytes_per_key": per_key.table, "process_resident_bytes_per_key": per_key.process});
        }
        let _ = writeln!(
            md,
            "| run | seconds | events/s | decode s | decode events/s per core | files rewritten | files masked (DV) | files added | MB read | MB written | storage floor s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        let floor = |s: &RunStat| rates.map(|io| io.floor_seconds(s.bytes_read, s.bytes_written));
        for s in &t.stats {
            let _ = writeln!(
                md,
                "| {} | {:.3} | {:.0} | {:.3} | {:.0} | {} | {} | {} | {:.1} | {:.1} | {} |",
                s.run,
                s.seconds,
                s.events_per_second,
                s.decode_seconds,
                s.decode_events_per_cpu_second,
                s.files_removed,
                s.files_masked,
                s.files_added,
                s.bytes_read as f64 / 1e6,
                s.bytes_written as f64 / 1e6,
                floor(s).map_or("-".into(), |f| format!("{f:.3}"))
            );
        }
        phase_table(md, &t.stats);
        let floors: Vec<f64> = t.stats.iter().filter_map(floor).collect();
        if let (Some(io), false) = (rates, floors.is_empty()) {
            let f = floors.iter().sum::<f64>() / floors.len() as f64;
            let _ = writeln!(
                md,
                "\nstorage floor (the MB read and written, from the table's store and its row companions; this machine reads files at {:.0} MB/s and writes them at {:.0} MB/s, page cache, no fsync): {f:.3}s per run; the runs take {:.0}x that",
                io.read_bytes_per_second / 1e6,
                io.write_bytes_per_second / 1e6,
                mean / f.max(1e-9)
            );
        }
        let _ = writeln!(
            md,
            "\nmean {mean:.3}s per run, {eps:.0} events/s; load {load_s:.1}s; resident after a restart {:.0} B/key for the table, {:.0} B/key for the whole process; \
             restart {:.2}s from the saved key index ({:.2}s rebuilding it from the data files); \
             peak RSS {:.0} MiB during the runs ({:.0} MiB while loading in chunks of {} events)\n",
            per_key.table,
            per_key.process,
            t.restart.snapshot_seconds,
            t.restart.rebuild_seconds,
            t.peak as f64 / 1048576.0,
            t.load_peak as f64 / 1048576.0,
            opts.load_chunk
        );
        json!({
            "runs": t.stats, "mean_seconds": mean, "events_per_second": eps, "load_seconds": load_s,
            "resident_bytes_per_key": per_key.table, "process_resident_bytes_per_key": per_key.process, "peak_rss_bytes": t.peak, "load_peak_rss_bytes": t.load_peak,
            "restart": t.restart, "io_rates": rates,
        })
    }

    /// The runs on an object store beside the local ones: seconds and
    /// requests per run, and the ratio SPEC 13 bounds (at most 1.5x local
    /// plus the store's round trips).
    pub fn remote(
        &mut self,
        name: &str,
        root: &str,
        t: &TableResult,
        local: &TableResult,
    ) -> serde_json::Value {
        let md = &mut self.md;
        let _ = writeln!(md, "### {name} on {root}\n");
        let _ = writeln!(
            md,
            "| run | seconds | local seconds | requests | local requests |\n| --- | --- | --- | --- | --- |"
        );
        for (i, s) in t.stats.iter().enumerate() {
            let l = local.stats.get(i);
            let _ = writeln!(
                md,
                "| {} | {:.3} | {:.3} | {} | {} |",
                s.run,
                s.seconds,
                l.map_or(f64::NAN, |l| l.seconds),
                s.requests,
                l.map_or(0, |l| l.requests)
            );
        }
        let (mean, lmean) = (t.mean(), local.mean());
        let ratio = mean / lmean;
        let _ = writeln!(
            md,
            "\nmean {mean:.3}s per run on the store, {lmean:.3}s local ({ratio:.2}x); {:.0} requests per run ({:.0} local); load {:.1}s\n",
            t.mean_requests(),
            local.mean_requests(),
            t.load_seconds
        );
        json!({
            "root": root, "runs": t.stats, "mean_seconds": mean, "local_mean_seconds": lmean,
            "ratio_to_local": ratio, "mean_requests": t.mean_requests(),
            "local_mean_requests": local.mean_requests(), "load_seconds": t.load_seconds,
        })
    }

    /// delta-rs' runs on the same batches next to ours (`mean` seconds per
    /// run), added to the table's `entry`; returns whether both tables agree.
    pub fn deltars(
        &mut self,
        entry: &mut serde_json::Value,
        d: &serde_json::Value,
        mean: f64,
    ) -> bool {
        let md = &mut self.md;
        let merge_mean = mean_of(d, "total_seconds");
        self.deltars_mean = Some(merge_mean);
        let merge_only = mean_of(d, "merge_seconds");
        // delta-rs handed the batch already parsed into Arrow: dedupe + MERGE.
        let given_arrow = merge_only + mean_of(d, "dedupe_seconds");
        let _ =
            writeln!(md, "delta-rs MERGE on the same batches (parse + dedupe + MERGE, per run):\n");
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
            "\n**speed-up vs delta-rs: {:.2}x** (end to end per batch; {:.2}x vs delta-rs given the batch as Arrow, dedupe + MERGE; {:.2}x vs the MERGE call alone). Same (key, sequence) pairs in both tables: {}\n",
            merge_mean / mean,
            given_arrow / mean,
            merge_only / mean,
            if same { "yes" } else { "**NO**" }
        );
        entry["deltars"] = d.clone();
        entry["speedup_vs_deltars"] = json!(merge_mean / mean);
        entry["speedup_vs_deltars_merge_only"] = json!(merge_only / mean);
        entry["speedup_vs_deltars_given_arrow"] = json!(given_arrow / mean);
        same
    }

    /// scd2's throughput relative to scd1's, added to the scd2 table's `entry`.
    pub fn ratio_to_scd1(&mut self, entry: &mut serde_json::Value, ratio: f64) {
        let _ = writeln!(self.md, "scd2 / scd1 throughput: {ratio:.2}\n");
        entry["ratio_to_scd1"] = json!(ratio);
    }

    /// Writes `bench.json`, `bench.md` and the chart `bench.svg` into `dir`.
    /// Notes a strategy's figures for the side-by-side table.
    pub fn layouts(&mut self, strategy: &str, t: &TableResult) {
        if t.stats.is_empty() {
            return;
        }
        let figures = LayoutFigures { mean: t.mean(), restart: t.restart.snapshot_seconds };
        self.layouts.push((strategy.to_string(), figures));
    }

    /// The default layout (copy-on-write) and deletion vectors side by side,
    /// per strategy, with delta-rs MERGE on the same batches.
    pub fn side_by_side(&mut self) {
        let find = |name: &str| self.layouts.iter().find(|(s, _)| s == name).map(|(_, f)| *f);
        let secs = |v: Option<LayoutFigures>, pick: fn(LayoutFigures) -> f64| {
            v.map_or("-".to_string(), |v| format!("{:.3}", pick(v)))
        };
        let mut rows = vec![];
        let mut json = serde_json::Map::new();
        for base in ["scd1", "scd2"] {
            let (cow, dv) = (find(base), find(&format!("{base}-dv")));
            if cow.is_none() && dv.is_none() {
                continue;
            }
            let deltars = if base == "scd1" { self.deltars_mean } else { None };
            let vs = |v: Option<LayoutFigures>| match (v, deltars) {
                (Some(v), Some(d)) => format!("{:.1}x", d / v.mean),
                _ => "-".into(),
            };
            rows.push(format!(
                "| {base} | {} | {} | {} | {} | {} | {} | {} |",
                secs(cow, |v| v.mean),
                vs(cow),
                secs(dv, |v| v.mean),
                vs(dv),
                deltars.map_or("-".into(), |d| format!("{d:.3}")),
                secs(cow, |v| v.restart),
                secs(dv, |v| v.restart),
            ));
            json.insert(
                base.into(),
                json!({
                    "copy_on_write_seconds": cow.map(|v| v.mean), "deletion_vectors_seconds": dv.map(|v| v.mean),
                    "deltars_seconds": deltars,
                    "copy_on_write_restart_seconds": cow.map(|v| v.restart), "deletion_vectors_restart_seconds": dv.map(|v| v.restart),
                }),
            );
        }
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(
            self.md,
            "### Layouts side by side\n\n| strategy | copy-on-write s/run | vs delta-rs | deletion vectors s/run | vs delta-rs | delta-rs MERGE s/run | restart s (copy-on-write) | restart s (deletion vectors) |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n{}\n",
            rows.join("\n")
        );
        self.json.insert("layouts".into(), serde_json::Value::Object(json));
    }

    pub fn write(&self, dir: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(&serde_json::Value::Object(self.json.clone()))
            .expect("json");
        std::fs::write(dir.join("bench.json"), text).map_err(|e| Error::Input(e.to_string()))?;
        std::fs::write(dir.join("bench.md"), &self.md).map_err(|e| Error::Input(e.to_string()))?;
        let svg = super::chart::svg(&super::chart::series(&self.json), &self.title)
            .map_err(|e| Error::Input(format!("bench.svg: {e}")))?;
        std::fs::write(dir.join("bench.svg"), svg).map_err(|e| Error::Input(e.to_string()))?;
        Ok(())
    }
}

fn mean_of(d: &serde_json::Value, k: &str) -> f64 {
    let v: Vec<f64> =
        d["runs"].as_array().into_iter().flatten().filter_map(|r| r[k].as_f64()).collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Where each run's time went: decoding, then the engine's phases (ms).
fn phase_table(md: &mut String, stats: &[RunStat]) {
    let Some(names) = stats.iter().map(|s| &s.phases_ms).find(|p| !p.is_empty()) else {
        return;
    };
    let names: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    let _ = writeln!(
        md,
        "\nphases (ms):\n\n| run | decode | {} |\n| --- | --- |{}",
        names.join(" | "),
        " --- |".repeat(names.len())
    );
    for s in stats {
        let cells: Vec<String> = names
            .iter()
            .map(|n| {
                let ms = s.phases_ms.iter().find(|(m, _)| m == n).map(|(_, ms)| *ms);
                ms.map_or("-".into(), |ms| format!("{ms:.0}"))
            })
            .collect();
        let _ =
            writeln!(md, "| {} | {:.0} | {} |", s.run, s.decode_seconds * 1e3, cells.join(" | "));
    }
}
