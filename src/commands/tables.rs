//! `tables`: one look at every table's health (docs/cli.md, `tables`):
//! version, rows, files and small files, rows masked by deletion vectors,
//! the log's size and checkpoint, and the positions stored with each table.
//! Read from the Delta logs only, never from a broker or a data file.

use changelake::config::Config;
use changelake::error::Result;
use changelake::progress::{parse, Marker, SourceKind};
use changelake::table::{table_stats, TableStats};
use changelake::value::Value;

use super::show::{render, OutFormat};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum TablesFormat {
    /// Aligned columns, one line per table.
    Table,
    /// One JSON document: a list of tables with every number and each stored position.
    Json,
}

/// One table's report.
#[derive(Debug, serde::Serialize)]
struct Report {
    table: String,
    strategy: &'static str,
    uri: String,
    /// None: nothing committed yet.
    stats: Option<TableStats>,
    positions: Positions,
}

/// Stored progress, by kind of source.
#[derive(Debug, Default, serde::Serialize)]
struct Positions {
    kafka: Vec<KafkaPosition>,
    files: Vec<FilePosition>,
    last_execution_id: Option<i64>,
    /// Positions whose dead letters are written (dead-letter table only).
    dead_letter_positions: usize,
}

#[derive(Debug, serde::Serialize)]
struct KafkaPosition {
    topic: String,
    partition: i32,
    next_offset: i64,
}

#[derive(Debug, serde::Serialize)]
struct FilePosition {
    path: String,
    content_version: i64,
}

pub async fn tables(c: &Config, format: TablesFormat) -> Result<String> {
    let mut reports = vec![];
    for t in &c.tables {
        let loc = c.table_location(&t.name);
        let stats = table_stats(&loc, &t.layout).await?;
        let uri = changelake::storage::redact_url(loc.uri());
        let mut positions = Positions::default();
        let kind = if c.reads_kafka(t) { SourceKind::Kafka } else { SourceKind::Files };
        for (app, &version) in stats.iter().flat_map(|s| &s.markers) {
            match parse(&t.name, kind, app) {
                Some(Marker::Partition { topic, partition }) => {
                    positions.kafka.push(KafkaPosition {
                        topic: topic.to_string(),
                        partition,
                        next_offset: version,
                    })
                }
                Some(Marker::File { path }) => positions
                    .files
                    .push(FilePosition { path: path.to_string(), content_version: version }),
                Some(Marker::Execution) => positions.last_execution_id = Some(version),
                None => {}
            }
        }
        positions.kafka.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        let strategy = t.strategy.as_str();
        reports.push(Report { table: t.name.clone(), strategy, uri, stats, positions });
    }
    let loc = c.dead_letter_location();
    let stats = table_stats(&loc, &Default::default()).await?;
    let uri = changelake::storage::redact_url(loc.uri());
    let positions = Positions {
        dead_letter_positions: stats.as_ref().map_or(0, |s| s.markers.len()),
        ..Default::default()
    };
    reports.push(Report {
        table: c.dead_letters.table.clone(),
        strategy: "dead letters",
        uri,
        stats,
        positions,
    });
    Ok(match format {
        TablesFormat::Json => {
            serde_json::to_string_pretty(&reports).unwrap_or_else(|_| "[]".into()) + "\n"
        }
        TablesFormat::Table => as_text(&reports),
    })
}

fn as_text(reports: &[Report]) -> String {
    let header = [
        "table",
        "strategy",
        "version",
        "live_rows",
        "files",
        "size",
        "small_files",
        "masked_rows",
        "last_commit",
        "checkpoint",
        "log_files",
        "stored positions",
    ]
    .map(String::from);
    let int = |v: i64| Value::Int(v);
    let rows: Vec<Vec<Value>> = reports
        .iter()
        .map(|r| {
            let mut row = vec![Value::Str(r.table.as_str().into()), Value::Str(r.strategy.into())];
            match &r.stats {
                None => {
                    row.push(Value::Str("no data yet".into()));
                    row.extend(std::iter::repeat_n(Value::Null, header.len() - 3));
                }
                Some(s) => {
                    row.extend([
                        int(s.version),
                        int(s.live_rows as i64),
                        int(s.files as i64),
                        Value::Str(human_bytes(s.bytes).into()),
                        int(s.small_files as i64),
                        int(s.masked_rows as i64),
                        s.last_commit.as_deref().map_or(Value::Null, |c| Value::Str(c.into())),
                        s.last_checkpoint.map_or(Value::Null, int),
                        int(s.log_files as i64),
                        Value::Str(positions_text(&r.positions).into()),
                    ]);
                }
            }
            row
        })
        .collect();
    render(&header, &rows, OutFormat::Table)
}

/// Stored positions in a line: Kafka partitions with their next offsets,
/// else how many files were applied.
fn positions_text(p: &Positions) -> String {
    let mut parts: Vec<String> =
        p.kafka.iter().map(|k| format!("{}/{}={}", k.topic, k.partition, k.next_offset)).collect();
    if !p.files.is_empty() {
        parts.push(format!("{} file{}", p.files.len(), if p.files.len() == 1 { "" } else { "s" }));
    }
    if p.dead_letter_positions > 0 {
        let n = p.dead_letter_positions;
        parts.push(format!("dead letters of {n} position{}", if n == 1 { "" } else { "s" }));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }

    #[test]
    fn positions_list_partitions_then_file_counts() {
        let p = Positions {
            kafka: vec![KafkaPosition {
                topic: "crm.account".into(),
                partition: 0,
                next_offset: 7,
            }],
            files: vec![FilePosition { path: "a.csv".into(), content_version: 1 }],
            ..Default::default()
        };
        assert_eq!(positions_text(&p), "crm.account/0=7, 1 file");
        assert_eq!(positions_text(&Positions::default()), "-");
    }
}
