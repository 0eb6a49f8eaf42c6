//! A fleet sharing one config: `--shard I/N` and `--tables A,B` give each
//! process whole tables, every table to exactly one process, and every
//! command accepts the same selection (docs/object-storage.md, fleets).

mod common;

use std::collections::BTreeSet;

use common::{cli, ok, stdout_of, write};

const TABLES: usize = 8;

fn config(dir: &std::path::Path) -> std::path::PathBuf {
    write(dir, "data/account/1.csv", "id,name,seq\n1,a,1\n2,b,1\n");
    let mut yaml = String::from(
        "storage: {root: ./lake}\nsystems:\n  crm: {type: csv, path: 'data/{object}/*.csv'}\nbronze:\n  tables:\n",
    );
    for i in 0..TABLES {
        yaml.push_str(&format!(
            "    t{i}:\n      source: {{system: crm, object: account}}\n      business_key: [id]\n      strategy: scd1\n      merge: {{sequence_by: [seq]}}\n"
        ));
    }
    write(dir, "changelake.yaml", &yaml)
}

/// Table names a `tables --format json` lists (without the dead letters).
fn listed(out: &str) -> BTreeSet<String> {
    let v: serde_json::Value = serde_json::from_str(out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t["table"].as_str().unwrap().to_string())
        .filter(|t| !t.starts_with('_'))
        .collect()
}

#[test]
fn shards_split_the_tables_between_processes_and_every_command_accepts_them() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mut owned: Vec<BTreeSet<String>> = vec![];
    for i in 0..3 {
        let shard = format!("{i}/3");
        ok(cli(&["run", "--once", "--shard", &shard], &cfg));
        owned.push(listed(&stdout_of(cli(
            &["tables", "--format", "json", "--shard", &shard],
            &cfg,
        ))));
    }
    let all: BTreeSet<String> = owned.iter().flatten().cloned().collect();
    assert_eq!(all.len(), TABLES, "every table has an owner: {owned:?}");
    assert_eq!(
        owned.iter().map(BTreeSet::len).sum::<usize>(),
        TABLES,
        "no table has two: {owned:?}"
    );
    assert!(owned.iter().filter(|o| !o.is_empty()).count() >= 2, "the work is shared: {owned:?}");
    for i in 0..TABLES {
        assert!(dir.path().join(format!("lake/bronze/t{i}/_delta_log")).exists(), "t{i} written");
    }
    // `--tables` picks by name; `check` counts the selection; an unknown name is exit 2.
    let only = listed(&stdout_of(cli(&["tables", "--format", "json", "--tables", "t1,t3"], &cfg)));
    assert_eq!(only, ["t1", "t3"].iter().map(|s| s.to_string()).collect());
    let checked = stdout_of(cli(&["check", "--tables", "t1,t3"], &cfg));
    assert!(checked.contains("(2 tables"), "{checked}");
    let out = cli(&["check", "--tables", "t1,nope"], &cfg);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no table `nope`"));
    let out = cli(&["check", "--shard", "3/3"], &cfg);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
