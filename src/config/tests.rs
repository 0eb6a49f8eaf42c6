//! The config loader's tests: defaults, every rejection with the YAML path
//! it is reported under, `${VAR}` substitution and path resolution
//! (docs/config.md).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use crate::expr;

fn parse(y: &str) -> Result<Config, ConfigErrors> {
    Config::parse(y, Path::new("/cfg"))
}

fn errors(y: &str) -> Vec<String> {
    parse(y).expect_err("config should be rejected").0
}

const SEED: &str = r#"
systems:
  crm: {type: csv, path: data/customer.csv}
bronze:
  tables:
    customer:
      source: { system: crm, object: account }
      business_key: [id]
      strategy: scd2
      merge:
        sequence_by: [seq]
        delete_when: "op = 'D'"
        ignore_columns: [modified_on]
"#;

#[test]
fn seed_config_loads_with_defaults() {
    let c = parse(SEED).unwrap();
    assert_eq!(c.storage_root, "/cfg/lake");
    let t = c.table("customer").unwrap();
    assert_eq!(t.strategy, Strategy::Scd2);
    assert_eq!(t.delete_mode, DeleteMode::Soft);
    assert_eq!(t.sequence_by, vec!["seq"]);
    assert_eq!(c.table_uri("customer"), "/cfg/lake/bronze/customer");
    assert_eq!(c.batching.max_rows, 100_000);
    assert_eq!(c.batching.max_bytes, 64 << 20);
}

#[test]
fn config_rejects_unknown_keys_with_their_path() {
    let e = errors(&SEED.replace("ignore_columns", "ignore_colums"));
    assert!(
        e.iter().any(|m| m.starts_with("bronze.tables.customer.merge.ignore_colums:")),
        "{e:?}"
    );
    let e = errors(&format!("{SEED}\nextra: 1\n"));
    assert!(e.iter().any(|m| m.starts_with("extra:")), "{e:?}");
}

#[test]
fn config_reports_every_error_at_once() {
    let y = SEED
        .replace("strategy: scd2", "strategy: scd2\n      schema_policy: loose")
        .replace(
            "delete_when: \"op = 'D'\"",
            "delete_when: \"op = \"\n        delete_mode: hard\n        track_columns: [city]",
        )
        .replace("system: crm", "system: nope");
    let e = errors(&y);
    for needle in ["schema_policy", "delete_when", "delete_mode", "track_columns", "source.system"]
    {
        assert!(e.iter().any(|m| m.contains(needle)), "missing {needle} in {e:?}");
    }
}

#[test]
fn config_rejects_missing_business_key() {
    let e = errors(&SEED.replace("business_key: [id]", ""));
    assert!(e.iter().any(|m| m.starts_with("bronze.tables.customer.business_key")), "{e:?}");
}

#[test]
fn config_rejects_reserved_business_key() {
    let e = errors(&SEED.replace("business_key: [id]", "business_key: [id, _is_current]"));
    assert!(e.iter().any(|m| m.contains("business_key") && m.contains("_is_current")), "{e:?}");
    let renamed = SEED.replace(
        "business_key: [id]",
        "business_key: [is_current]\n      columns: {_is_current: is_current}",
    );
    assert!(errors(&renamed).iter().any(|m| m.contains("is_current")));
}

#[test]
fn config_rejects_hard_delete_with_scd2() {
    let e = errors(&SEED.replace("ignore_columns", "delete_mode: hard\n        ignore_columns"));
    assert!(
        e.iter().any(
            |m| m.starts_with("bronze.tables.customer.merge.delete_mode") && m.contains("scd2")
        ),
        "{e:?}"
    );
    assert!(parse(
        &SEED
            .replace("scd2", "scd1")
            .replace("ignore_columns", "delete_mode: hard\n        ignore_columns")
    )
    .is_ok());
}

#[test]
fn config_rejects_track_columns_with_ignore_columns() {
    let e =
        errors(&SEED.replace("ignore_columns", "track_columns: [city]\n        ignore_columns"));
    assert!(e.iter().any(|m| m.contains("track_columns") && m.contains("ignore_columns")), "{e:?}");
}

#[test]
fn config_rejects_unparsable_delete_when() {
    let e = errors(&SEED.replace("op = 'D'", "op = = 'D'"));
    assert!(e.iter().any(|m| m.starts_with("bronze.tables.customer.merge.delete_when")), "{e:?}");
}

#[test]
fn config_rejects_unknown_system() {
    let e = errors(&SEED.replace("system: crm", "system: erp"));
    assert!(
        e.iter()
            .any(|m| m.starts_with("bronze.tables.customer.source.system") && m.contains("erp")),
        "{e:?}"
    );
    let e = errors(&SEED.replace("type: csv", "type: ftp"));
    assert!(e.iter().any(|m| m.starts_with("systems.crm.type")), "{e:?}");
}

#[test]
fn config_rejects_malformed_valid_time() {
    for bad in
        ["valid_time: business", "valid_time: \"date:2024-13-01\"", "valid_time: \"column:\""]
    {
        let e = errors(&SEED.replace("ignore_columns", &format!("{bad}\n        ignore_columns")));
        assert!(
            e.iter().any(|m| m.starts_with("bronze.tables.customer.merge.valid_time")),
            "{bad}: {e:?}"
        );
    }
    let ok = parse(
        &SEED.replace("ignore_columns", "valid_time: \"date:2026-01-01\"\n        ignore_columns"),
    )
    .unwrap();
    assert!(matches!(ok.tables[0].valid_time, ValidTime::Date(_)));
}

#[test]
fn config_rejects_float_business_key_when_declared() {
    let y =
        SEED.replace("path: data/customer.csv}", "path: data/customer.csv, columns: {id: float}}");
    let e = errors(&y);
    assert!(e.iter().any(|m| m.contains("business_key") && m.contains("float")), "{e:?}");
}

#[test]
fn config_substitutes_environment_variables() {
    std::env::set_var("CHANGELAKE_TEST_ROOT", "/data/lake");
    let c = parse(&format!("storage: {{root: \"${{CHANGELAKE_TEST_ROOT}}\"}}\n{SEED}")).unwrap();
    assert_eq!(c.storage_root, "/data/lake");
    let e = errors(&format!("storage: {{root: \"${{CHANGELAKE_TEST_UNSET_VAR}}\"}}\n{SEED}"));
    assert!(
        e.iter().any(|m| m.starts_with("storage.root") && m.contains("CHANGELAKE_TEST_UNSET_VAR")),
        "{e:?}"
    );
}

#[test]
fn config_resolves_relative_paths_against_the_config_dir() {
    let c = parse(&format!("storage: {{root: ../lake}}\n{SEED}")).unwrap();
    assert_eq!(c.storage_root, "/lake");
    assert_eq!(c.resolve("data/x.csv"), PathBuf::from("/cfg/data/x.csv"));
    let c = parse(&format!("storage: {{root: \"s3://bucket/lake\"}}\n{SEED}")).unwrap();
    assert_eq!(c.table_uri("customer"), "s3://bucket/lake/bronze/customer");
}

#[test]
fn config_debezium_default_delete_when_is_op_d() {
    let y = r#"
systems:
  crm: {type: kafka, brokers: "localhost:9092", topic: "crm.dbo.{object}"}
bronze:
  tables:
    account:
      source: {system: crm, object: account}
      business_key: [accountid]
      strategy: scd1
"#;
    let c = parse(y).unwrap();
    assert_eq!(c.tables[0].delete_when, expr::parse("op = 'd'").ok());
    match &c.systems["crm"].kind {
        SystemKind::Kafka { group_id, format, .. } => {
            assert_eq!(group_id, "changelake-crm");
            assert_eq!(*format, Format::Debezium);
        }
        _ => panic!(),
    }
}

#[test]
fn sizes_and_durations_parse() {
    assert_eq!(parse_size("64MiB"), Some(64 << 20));
    assert_eq!(parse_size("10kb"), Some(10_000));
    assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
    assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_size("lots"), None);
}

#[test]
fn unset_source_variables_fail_every_command_but_those_that_only_read_the_lake() {
    let y = r#"
storage: { root: /lake }
systems:
  crm: { type: kafka, brokers: "${CHANGELAKE_TEST_UNSET_BROKERS}", topic: "t.{object}" }
bronze:
  tables:
    account:
      source: { system: crm, object: account }
      business_key: [id]
      strategy: scd1
"#;
    let e = errors(y);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("systems.crm.brokers: environment variable"), "{e:?}");
    let c = Config::parse_for(y, Path::new("/cfg"), Needs::TablesOnly).expect("tables only");
    assert_eq!(c.tables[0].name, "account");
    // Anything outside the systems still has to resolve.
    let lake = y.replace("/lake", r#""${CHANGELAKE_TEST_UNSET_ROOT}""#);
    let e = Config::parse_for(&lake, Path::new("/cfg"), Needs::TablesOnly).unwrap_err().0;
    assert!(e.iter().any(|m| m.starts_with("storage.root")), "{e:?}");
    assert!(!e.iter().any(|m| m.starts_with("systems.")), "{e:?}");
}

#[test]
fn a_command_about_one_table_needs_only_that_tables_system() {
    let y = r#"
storage: { root: /lake }
systems:
  crm: { type: kafka, brokers: "${CHANGELAKE_TEST_UNSET_CRM}", topic: "t.{object}" }
  erp: { type: csv, path: "data/{object}.csv" }
bronze:
  tables:
    account:
      source: { system: crm, object: account }
      business_key: [id]
      strategy: scd1
    invoice:
      source: { system: erp, object: invoice }
      business_key: [id]
      strategy: scd1
"#;
    let need = |t: &str| Config::parse_for(y, Path::new("/cfg"), Needs::Table(t.into()));
    assert!(need("invoice").is_ok(), "the erp table does not need crm's brokers");
    let e = need("account").unwrap_err().0;
    assert!(e.len() == 1 && e[0].starts_with("systems.crm.brokers"), "{e:?}");
    let e = need("nope").unwrap_err().0;
    assert!(e.iter().any(|m| m.contains("no table `nope`")), "{e:?}");
}

/// Names become paths and progress-marker parts: only identifiers pass.
#[test]
fn bad_input_table_and_system_names_are_identifiers() {
    let y = |table: &str, system: &str| {
        format!(
            r#"
storage: {{ root: /lake }}
systems:
  "{system}": {{ type: csv, path: "data/{{object}}.csv" }}
bronze:
  tables:
    "{table}":
      source: {{ system: "{system}", object: account }}
      business_key: [id]
      strategy: scd1
"#
        )
    };
    assert!(Config::parse(&y("account_v2", "crm-eu"), Path::new("/cfg")).is_ok());
    assert!(Config::parse(&y("_staging", "_crm"), Path::new("/cfg")).is_ok());
    for bad in ["../../escaped", "a/b", "", "9lives", "sp ace", "dot.ted", "ünï"] {
        let e = errors(&y(bad, "crm"));
        assert!(
            e.iter().any(|m| m.starts_with(&format!("bronze.tables.{bad}:"))
                && m.contains("not a valid table name")),
            "{bad:?}: {e:?}"
        );
        let e = errors(&y("account", bad));
        assert!(
            e.iter().any(|m| m.starts_with(&format!("systems.{bad}:"))
                && m.contains("not a valid system name")),
            "{bad:?}: {e:?}"
        );
    }
    let e = errors(&format!("{}dead_letters: {{ table: ../dl }}\n", y("account", "crm")));
    assert!(e.iter().any(|m| m.starts_with("dead_letters.table:")), "{e:?}");
}

#[test]
fn layout_row_companions_are_auto_off_or_an_absolute_local_directory() {
    let with = |v: &str| {
        SEED.replace(
            "      strategy: scd2\n",
            &format!("      strategy: scd2\n      layout: {{deletion_vectors: true, row_companions: {v}}}\n"),
        )
    };
    let layout = |y: &str| parse(y).unwrap().table("customer").unwrap().layout.clone();
    assert_eq!(
        parse(SEED).unwrap().table("customer").unwrap().layout.row_companions,
        RowCompanions::Auto
    );
    assert_eq!(layout(&with("auto")).row_companions, RowCompanions::Auto);
    assert_eq!(layout(&with("off")).row_companions, RowCompanions::Off);
    assert_eq!(
        layout(&with("/var/cache/changelake")).row_companions,
        RowCompanions::Dir("/var/cache/changelake".into())
    );
    let e = errors(&with("relative/dir"));
    assert!(
        e.iter().any(|m| m.starts_with("bronze.tables.customer.layout.row_companions:")),
        "{e:?}"
    );
}

#[test]
fn avro_formats_need_a_schema_registry_and_read_its_settings() {
    let kafka = |system: &str| {
        format!(
            r#"
systems:
  crm: {{type: kafka, brokers: "localhost:9092", {system}}}
bronze:
  tables:
    account:
      source: {{system: crm, object: account}}
      business_key: [accountid]
      strategy: scd1
"#
        )
    };
    std::env::set_var("CHANGELAKE_TEST_REGISTRY_SECRET", "s3cret");
    let c = parse(&kafka(
        "format: debezium-avro, schema_registry: {url: \"https://reg:8081\", username: u, password: \"${CHANGELAKE_TEST_REGISTRY_SECRET}\", timeout: 3s}",
    ))
    .unwrap();
    let SystemKind::Kafka { format, avro: Some(r), .. } = &c.systems["crm"].kind else {
        panic!("an Avro Kafka system")
    };
    assert_eq!(*format, Format::Debezium);
    assert_eq!(r.url, "https://reg:8081");
    assert_eq!(r.password.as_deref(), Some("s3cret"));
    assert_eq!(r.timeout, Duration::from_secs(3));
    // Deletes are `op = 'd'` as for Debezium JSON.
    assert_eq!(c.tables[0].delete_when, expr::parse("op = 'd'").ok());
    let c = parse(&kafka("format: avro, schema_registry: {url: \"http://reg\"}")).unwrap();
    let SystemKind::Kafka { format, avro: Some(_), .. } = &c.systems["crm"].kind else {
        panic!("an Avro Kafka system")
    };
    assert_eq!(*format, Format::Json);
    let c = parse(&kafka("format: debezium")).unwrap();
    assert!(matches!(&c.systems["crm"].kind, SystemKind::Kafka { avro: None, .. }));

    let e = errors(&kafka("format: avro"));
    assert!(e.iter().any(|m| m.starts_with("systems.crm.schema_registry: missing")), "{e:?}");
    let e = errors(&kafka("format: json, schema_registry: {url: \"http://reg\"}"));
    assert!(e.iter().any(|m| m.contains("only the Avro formats")), "{e:?}");
    let e = errors(&kafka("format: avro, schema_registry: {url: \"reg:8081\"}"));
    assert!(e.iter().any(|m| m.starts_with("systems.crm.schema_registry.url:")), "{e:?}");
    let e = errors(&kafka(
        "format: avro, schema_registry: {url: \"http://reg\", certificate_location: c.pem}",
    ));
    assert!(e.iter().any(|m| m.contains("go together")), "{e:?}");
    let e = errors(&kafka("format: protobuf"));
    assert!(e.iter().any(|m| m.contains("debezium-avro or avro")), "{e:?}");
}
