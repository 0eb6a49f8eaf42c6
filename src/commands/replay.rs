//! `replay`: re-read one table's topic from a position (docs/replay.md): the
//! beginning, given offsets or a timestamp.

use changelake::config::Config;
use changelake::daemon::{self, RunOpts, StartAt, StartOffset};
use changelake::error::{Error, Result};
use changelake::value::parse_ts;

/// Runs the daemon once for `table` from the one start position given.
pub async fn replay(
    c: &Config,
    table: String,
    from_beginning: bool,
    from_offsets: Option<String>,
    from_timestamp: Option<String>,
    reapply: bool,
) -> Result<()> {
    let Some(t) = c.table(&table) else {
        return Err(Error::Usage(format!("no table `{table}` in the config")));
    };
    if !c.reads_kafka(t) {
        // It would read nothing and say "0 commit(s)", as if done.
        return Err(Error::Usage(format!(
            "table `{table}` reads files (system `{}`), and replay re-reads a Kafka topic: `changelake run --once` loads its files, each new or changed one once (docs/replay.md)",
            t.system
        )));
    }
    let start = start_at(from_beginning, from_offsets, from_timestamp)?;
    let opts = RunOpts { once: true, only_table: Some(table), start: Some(start), reapply };
    crate::commands::run::probe_store(c).await?;
    let reports = daemon::run(c, opts, daemon::signals()).await?;
    let committed = reports.iter().filter(|r| r.version.is_some()).count();
    println!("replay done: {committed} commit(s)");
    Ok(())
}

/// The start position, from exactly one of the three options.
fn start_at(
    from_beginning: bool,
    from_offsets: Option<String>,
    from_timestamp: Option<String>,
) -> Result<StartAt> {
    Ok(match (from_beginning, from_offsets, from_timestamp) {
        (true, None, None) => StartAt::Beginning,
        (false, Some(o), None) => StartAt::Offsets(parse_offsets(&o)?),
        (false, None, Some(ts)) => {
            let t = parse_ts(&ts)
                .ok_or_else(|| Error::Usage(format!("--from-timestamp {ts}: expected RFC 3339")))?;
            StartAt::Timestamp(t / 1000)
        }
        _ => {
            return Err(Error::Usage(
                "give exactly one of --from-beginning, --from-offsets, --from-timestamp".into(),
            ))
        }
    })
}

fn parse_offsets(s: &str) -> Result<Vec<StartOffset>> {
    s.split(',')
        .map(|part| {
            let bad =
                || Error::Usage(format!("--from-offsets: `{part}` is not topic:PARTITION=OFFSET"));
            let (topic, rest) = part.trim().rsplit_once(':').ok_or_else(bad)?;
            let (p, o) = rest.split_once('=').ok_or_else(bad)?;
            Ok(StartOffset {
                topic: topic.to_string(),
                partition: p.parse().map_err(|_| bad())?,
                offset: o.parse().ok().filter(|o: &i64| *o >= 0).ok_or_else(bad)?,
            })
        })
        .collect()
}
