//! The benchmark itself, small: every shape and layout runs end to end, the
//! delta-rs MERGE side (Python `deltalake`) runs on the same batches, and the
//! two tables must agree (the bench fails otherwise). Speed is not asserted
//! here; the numbers come from full-size runs (README, docs/bench-*.md).

use std::process::Command;

fn bench(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_changelake"))
        .arg("bench")
        .arg("--dir")
        .arg(dir)
        .args(args)
        // Outside the checkout: the bench brings its delta-rs script along.
        .current_dir(dir)
        .output()
        .expect("run changelake bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(dir.join("bench.json")).expect("bench.json"))
        .expect("bench.json is JSON")
}

#[test]
fn bench_runs_both_engines_on_every_shape_and_they_agree() {
    for (cols, dist, layout) in [
        ("crm", "uniform", "deletion_vectors: true"),
        ("wide", "skewed", "file_rows: 500"),
        ("narrow", "recent", "deletion_vectors: true"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let j = bench(
            dir.path(),
            &[
                "--keys",
                "3000",
                "--batch",
                "1000",
                "--runs",
                "2",
                "--columns",
                cols,
                "--distribution",
                dist,
                "--layout",
                layout,
            ],
        );
        let text = std::fs::read_to_string(dir.path().join("bench.md")).unwrap();
        assert!(
            text.contains("Same (key, sequence) pairs in both tables: yes"),
            "{cols}/{dist}: {text}"
        );
        for strategy in ["account_scd1", "account_scd2"] {
            let t = &j[strategy];
            assert_eq!(t["runs"].as_array().map(|r| r.len()), Some(2), "{strategy}: {t}");
            assert!(t["events_per_second"].as_f64().unwrap() > 0.0);
            assert!(t["resident_bytes_per_key"].as_f64().is_some());
            assert!(t["process_resident_bytes_per_key"].as_f64().is_some_and(|b| b > 0.0));
            // Every run writes files and reports their bytes against this machine's rates.
            for r in t["runs"].as_array().unwrap() {
                assert!(r["bytes_written"].as_u64().unwrap() > 0, "{strategy}: {r}");
                // The decode's rate per core (events per CPU second) is reported.
                assert!(r["decode_events_per_cpu_second"].as_f64().unwrap() > 0.0, "{r}");
            }
            assert!(t["io_rates"]["write_bytes_per_second"].as_f64().unwrap() > 0.0, "{t}");
        }
        if layout == "file_rows: 500" {
            // Copy-on-write rewrites stored files: it reads them.
            let runs = j["account_scd1"]["runs"].as_array().unwrap();
            assert!(runs.iter().all(|r| r["bytes_read"].as_u64().unwrap() > 0), "{runs:?}");
            // The default layout and deletion vectors side by side.
            assert!(text.contains("### Layouts side by side"), "{text}");
            for base in ["scd1", "scd2"] {
                let l = &j["layouts"][base];
                for k in ["copy_on_write_seconds", "deletion_vectors_seconds"] {
                    assert!(l[k].as_f64().is_some_and(|s| s > 0.0), "{base} {k}: {j}");
                }
            }
            assert!(j["layouts"]["scd1"]["deltars_seconds"].as_f64().is_some(), "{j}");
        }
        assert!(
            j["account_scd1"]["deltars"]["runs"].as_array().is_some_and(|r| r.len() == 2),
            "{j}"
        );
        assert_eq!(j["account_scd1"]["deltars"]["same_result"], serde_json::json!(true), "{j}");
    }
}

#[test]
fn bench_runs_flat_json_rows_through_both_engines_and_they_agree() {
    // Flat rows with `op` and `lsn` columns (`format: json`), deletes by
    // `delete_when`; delta-rs reads the same files with pyarrow.
    let dir = tempfile::tempdir().unwrap();
    let j = bench(
        dir.path(),
        &[
            "--keys",
            "3000",
            "--batch",
            "1000",
            "--runs",
            "2",
            "--columns",
            "narrow",
            "--format",
            "json",
            "--strategies",
            "scd1,scd2",
            "--layout",
            "file_rows: 500",
        ],
    );
    let text = std::fs::read_to_string(dir.path().join("bench.md")).unwrap();
    assert!(text.contains("Same (key, sequence) pairs in both tables: yes"), "{text}");
    assert!(text.contains("Json events"), "{text}");
    let scd1 = &j["account_scd1"];
    assert!(scd1["speedup_vs_deltars_given_arrow"].as_f64().is_some_and(|s| s > 0.0), "{j}");
    for strategy in ["account_scd1", "account_scd2"] {
        let runs = j[strategy]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{strategy}: {j}");
        // Copy-on-write at 500 rows per file: every run rewrites stored files.
        assert!(runs.iter().all(|r| r["files_removed"].as_u64().unwrap() > 0), "{runs:?}");
    }
}

/// Every decode path the bench times (`--encoding`): the same events as a
/// CSV extract, as Debezium envelopes with the JSON converter's schema
/// wrapper, and as Avro frames each merge exactly what delta-rs merges
/// from the plain JSON batches, and each reports its decode rate.
#[test]
fn bench_times_every_decode_path_and_each_merges_what_delta_rs_merges() {
    for (format, encoding) in [("json", "csv"), ("debezium", "json-schema"), ("debezium", "avro")] {
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "--keys",
            "2000",
            "--batch",
            "1000",
            "--runs",
            "2",
            "--columns",
            "narrow",
            "--format",
            format,
            "--encoding",
            encoding,
            "--strategies",
            "scd1,scd2",
        ];
        let j = bench(dir.path(), &args);
        let text = std::fs::read_to_string(dir.path().join("bench.md")).unwrap();
        assert!(
            text.contains("Same (key, sequence) pairs in both tables: yes"),
            "{encoding}: {text}"
        );
        for strategy in ["account_scd1", "account_scd2"] {
            let runs = j[strategy]["runs"].as_array().unwrap();
            assert_eq!(runs.len(), 2, "{encoding} {strategy}: {j}");
            for r in runs {
                assert!(r["decode_events_per_cpu_second"].as_f64().unwrap() > 0.0, "{r}");
            }
        }
        assert_eq!(j["account_scd1"]["deltars"]["same_result"], serde_json::json!(true), "{j}");
    }
    // An encoding that does not fit the format is refused up front.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_changelake"))
        .args(["bench", "--dir"])
        .arg(dir.path())
        .args(["--keys", "100", "--batch", "10", "--runs", "1", "--format", "debezium"])
        .args(["--encoding", "csv", "--no-deltars"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--encoding csv needs --format json"));
}

#[test]
fn bench_streams_through_the_in_process_broker() {
    let dir = tempfile::tempdir().unwrap();
    let j = bench(
        dir.path(),
        &[
            "--keys",
            "1000",
            "--runs",
            "0",
            "--strategies",
            "",
            "--no-deltars",
            "--broker-rate",
            "2000",
            "--broker-secs",
            "2",
        ],
    );
    let b = &j["broker"];
    assert_eq!(b["events"].as_u64(), Some(4000), "{j}");
    assert!(b["commits"].as_u64().unwrap() >= 1);
    assert!(b["latency_max_seconds"].as_f64().unwrap() > 0.0);
}

/// Without Python's `deltalake` the delta-rs side cannot run: the bench
/// says so before it loads anything, and names `--no-deltars`.
#[test]
fn bench_without_python_deltalake_stops_before_loading_and_names_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_changelake"))
        .args(["bench", "--dir"])
        .arg(dir.path())
        .args(["--keys", "100", "--batch", "10", "--runs", "1"])
        // No python3 to be found.
        .env("PATH", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs python3 with `deltalake`") && err.contains("--no-deltars"),
        "{err}"
    );
    assert!(!dir.path().join("lake").exists(), "nothing is loaded");
}
