//! Telemetry's tests: series at zero after registration, counters from a
//! run report, lag from watermarks.

use std::collections::BTreeMap;

use super::*;
use crate::config::Strategy;
use crate::merge::Stats;
use crate::report::RunReport;

fn line<'a>(out: &'a str, prefix: &str) -> Option<&'a str> {
    out.lines().find(|l| l.starts_with(prefix))
}

#[test]
fn registered_table_exports_every_reason_at_zero_with_help() {
    register_table("zero_t", "scd1");
    let out = render();
    for r in DROP_REASONS {
        assert!(
            line(
                &out,
                &format!("changelake_rows_dropped_total{{reason=\"{r}\",table=\"zero_t\"}} 0")
            )
            .is_some(),
            "{r}\n{out}"
        );
    }
    for r in DEAD_REASONS {
        assert!(
            line(
                &out,
                &format!("changelake_dead_letters_total{{reason=\"{r}\",table=\"zero_t\"}} 0")
            )
            .is_some(),
            "{r}"
        );
    }
    // Every family has HELP and TYPE, and every name is changelake_*.
    for l in out.lines().filter(|l| !l.starts_with('#')) {
        let name = l.split(['{', ' ']).next().unwrap();
        assert!(name.starts_with("changelake_"), "{name}");
        let family =
            name.trim_end_matches("_bucket").trim_end_matches("_sum").trim_end_matches("_count");
        assert!(
            out.contains(&format!("# HELP {family} ")) || out.contains(&format!("# HELP {name} ")),
            "no HELP for {name}"
        );
    }
    assert!(line(&out, "changelake_build_info{version=").is_some());
}

#[test]
fn run_committed_counts_drops_versions_and_dead_letters_by_reason() {
    let stats = Stats {
        rows_in: 10,
        null_keys: 2,
        duplicates: 3,
        older_ignored: 1,
        inserted: 2,
        updated: 1,
        versions_closed: 1,
        ..Default::default()
    };
    let mut dead = BTreeMap::new();
    dead.insert("type", 1u64);
    dead.insert("malformed", 2u64);
    let r = RunReport {
        table: "rc_t".into(),
        strategy: Strategy::Scd2,
        stats,
        filtered: 4,
        dead_by_reason: dead,
        dead_letters: 3,
        version: Some(7),
        bytes: 5000,
        ..Default::default()
    };
    register_table("rc_t", "scd2");
    run_committed(&r);
    let out = render();
    let has = |s: &str| assert!(out.lines().any(|l| l == s), "missing `{s}`");
    has("changelake_rows_read_total{table=\"rc_t\"} 17");
    has("changelake_rows_decoded_total{table=\"rc_t\"} 14");
    has("changelake_rows_dropped_total{reason=\"null_key\",table=\"rc_t\"} 2");
    has("changelake_rows_dropped_total{reason=\"duplicate\",table=\"rc_t\"} 3");
    has("changelake_rows_dropped_total{reason=\"late\",table=\"rc_t\"} 1");
    has("changelake_rows_dropped_total{reason=\"filtered\",table=\"rc_t\"} 4");
    has("changelake_dead_letters_total{reason=\"type\",table=\"rc_t\"} 1");
    has("changelake_dead_letters_total{reason=\"malformed\",table=\"rc_t\"} 2");
    has("changelake_versions_inserted_total{strategy=\"scd2\",table=\"rc_t\"} 3");
    has("changelake_versions_closed_total{strategy=\"scd2\",table=\"rc_t\"} 1");
    has("changelake_commits_total{outcome=\"ok\",table=\"rc_t\"} 1");
    has("changelake_table_version{table=\"rc_t\"} 7");
    has("changelake_batch_bytes_bucket{table=\"rc_t\",le=\"10000\"} 1");
}

#[test]
fn lag_uses_the_latest_watermark_and_never_goes_negative() {
    register_partition("lag_t", "lag.topic", 0, Some(5));
    high_watermark("lag.topic", 0, 12);
    offsets_committed("lag_t", "lag.topic", &[(0, 9)]);
    let out = render();
    assert!(out.contains("changelake_consumer_lag_messages{partition=\"0\",table=\"lag_t\",topic=\"lag.topic\"} 3"), "{out}");
    offsets_committed("lag_t", "lag.topic", &[(0, 15)]);
    assert!(render().contains(
        "changelake_consumer_lag_messages{partition=\"0\",table=\"lag_t\",topic=\"lag.topic\"} 0"
    ));
}
