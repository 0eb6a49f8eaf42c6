//! Operations against a running daemon and a real Kafka-protocol broker
//! (tansu): a live Prometheus scrape whose values move with the stream,
//! checked by `promtool`; the dashboard and alert rules name only exported
//! metrics; `/readyz` flips while the broker is down; SIGHUP is survived;
//! JSON logs carry the batch and commit spans.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `name{labels} value` lines of a scrape: (name, sorted labels) -> value.
fn samples(scrape: &str) -> BTreeMap<(String, String), f64> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n.to_string(), rest.trim_end_matches('}').to_string()),
                None => (series.to_string(), String::new()),
            };
            Some(((name, labels), value.parse().ok()?))
        })
        .collect()
}

/// Sum of a metric's samples whose labels contain every `want` pair.
fn sum(s: &BTreeMap<(String, String), f64>, name: &str, want: &[(&str, &str)]) -> f64 {
    s.iter()
        .filter(|((n, l), _)| {
            n == name
                && want.iter().all(|(k, v)| l.split(',').any(|kv| kv == format!("{k}=\"{v}\"")))
        })
        .map(|(_, v)| v)
        .sum()
}

/// Metric family names (`# TYPE` lines) of a scrape.
fn families(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

/// Every `changelake_*` name in a text (PromQL), histogram suffixes stripped.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("changelake_") {
        let name: String =
            rest[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        rest = &rest[i + name.len()..];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(&name)
            .to_string();
        out.insert(base);
    }
    out
}

/// Every PromQL expression in the dashboard (panels, nested rows, variables).
fn dashboard_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_exprs(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| dashboard_exprs(x, out)),
        _ => {}
    }
}

fn wait_for<T>(what: &str, secs: u64, child: &mut Child, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("daemon exited ({st}) while waiting for {what}");
        }
        assert!(t0.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn scrape(port: u16) -> Option<String> {
    http_get(port, "/metrics").filter(|(st, _)| st.contains("200")).map(|(_, b)| b)
}

fn debezium(id: &str, lsn: u64, city: &str) -> String {
    format!(
        "{{\"before\":null,\"after\":{{\"id\":{id},\"name\":\"A\",\"city\":\"{city}\"}},\"source\":{{\"connector\":\"postgresql\",\"table\":\"account\",\"lsn\":{lsn}}},\"op\":\"u\",\"ts_ms\":1700000000000}}"
    )
}

#[test]
fn live_scrape_moves_with_the_stream_and_readyz_follows_the_broker() {
    let mut broker = Broker::start();
    broker.create_topic("crm.public.account", 2);
    let mut events = debezium_stream(300, 30, 2);
    // Three NULL business keys, one duplicate pair (same key and batch, older
    // sequence loses), one event that is not JSON.
    for i in 0..3 {
        events.push((
            0,
            format!("{{\"id\":null,\"n\":{i}}}"),
            Some(debezium("null", 90_000 + i, "Nowhere")),
        ));
    }
    events.push((1, "{\"id\":9001}".into(), Some(debezium("9001", 90_010, "first"))));
    events.push((1, "{\"id\":9001}".into(), Some(debezium("9001", 90_005, "older"))));
    events.push((0, "{\"id\":1}".into(), Some("this is not json".into())));
    broker.produce("crm.public.account", &events);

    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(
        tmp.path(),
        "c.yaml",
        &format!(
            "{}metrics: {{listen: \"127.0.0.1:{port}\"}}\n",
            debezium_config(&broker.brokers(), 100_000, "500ms")
        ),
    );
    let log = tmp.path().join("daemon.log");
    let mut child = Command::new(BIN)
        .args(["--log-format", "json", "run", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "changelake=debug,warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();

    // Caught up: every event read, committed, lag zero on both partitions.
    let first = wait_for("the stream to be committed with zero lag", 90, &mut child, || {
        let body = scrape(port)?;
        let s = samples(&body);
        // Both tables (they commit one after the other) read everything, lag zero on both partitions.
        let tables = ["account", "account_history"];
        // (The undecodable message counts for the first table only: it is dead-lettered once.)
        let read = sum(&s, "changelake_rows_read_total", &[("table", "account")]);
        let committed = tables.map(|t| sum(&s, "changelake_committed_offset", &[("table", t)]));
        let lag: Vec<f64> = tables
            .iter()
            .flat_map(|t| {
                (0..2).map(|p| {
                    sum(
                        &s,
                        "changelake_consumer_lag_messages",
                        &[("table", t), ("partition", &p.to_string())],
                    )
                })
            })
            .collect();
        let hw = sum(&s, "changelake_high_watermark", &[]);
        let n = events.len() as f64;
        (read >= n && committed.iter().all(|c| *c >= n) && hw >= n && lag.iter().all(|l| *l == 0.0))
            .then_some(body)
    });
    let s = samples(&first);
    let a = [("table", "account")];
    assert_eq!(sum(&s, "changelake_rows_read_total", &a), events.len() as f64);
    assert!(sum(&s, "changelake_commits_total", &[("table", "account"), ("outcome", "ok")]) >= 1.0);
    assert_eq!(
        sum(&s, "changelake_rows_dropped_total", &[("table", "account"), ("reason", "null_key")]),
        3.0
    );
    assert_eq!(sum(&s, "changelake_rows_null_key_total", &a), 3.0);
    // Freshness: the stream's newest `source.ts_ms` is about 1,699,999,999.3 s.
    let lag = sum(&s, "changelake_source_lag_seconds", &a);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let behind = now - 1_699_999_999.0;
    assert!(lag > behind - 5.0 && lag <= behind + 1.0, "source lag {lag}, expected about {behind}");
    assert!(
        sum(&s, "changelake_rows_dropped_total", &[("table", "account"), ("reason", "duplicate")])
            >= 1.0
    );
    assert_eq!(
        sum(&s, "changelake_dead_letters_total", &[("table", "account"), ("reason", "malformed")]),
        1.0
    );
    let inserted = sum(
        &s,
        "changelake_versions_inserted_total",
        &[("table", "account_history"), ("strategy", "scd2")],
    );
    assert!(inserted >= 10.0, "{inserted}");
    assert_eq!(
        sum(&s, "changelake_committed_offset", &a),
        events.len() as f64,
        "next offsets of both partitions"
    );
    assert_eq!(sum(&s, "changelake_ready", &[]), 1.0);
    assert_eq!(sum(&s, "changelake_buffered_bytes", &a), 0.0);
    assert_eq!(sum(&s, "changelake_build_info", &[]), 1.0);

    // An independent parser of the text format.
    promtool(&["check", "metrics"], Some(&first));

    // The dashboard and the alert rules query only what this scrape exports.
    let exported = families(&first);
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(manifest().join("dashboards/changelake.json")).unwrap(),
    )
    .unwrap();
    let mut exprs = vec![];
    dashboard_exprs(&dash, &mut exprs);
    assert!(exprs.len() > 20, "{exprs:?}");
    let shown: BTreeSet<String> = exprs.iter().flat_map(|e| names_in(e)).collect();
    for n in &shown {
        assert!(
            exported.contains(n),
            "the dashboard queries {n}, which the daemon does not export"
        );
    }
    let alerts = std::fs::read_to_string(manifest().join("dashboards/alerts.yml")).unwrap();
    for n in names_in(&alerts) {
        assert!(exported.contains(&n), "an alert queries {n}, which the daemon does not export");
    }
    for n in &exported {
        assert!(shown.contains(n), "no dashboard panel shows {n}");
    }
    promtool(&["check", "rules", manifest().join("dashboards/alerts.yml").to_str().unwrap()], None);

    // SIGHUP is logged and ignored (no reload), the daemon keeps serving.
    assert!(Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    std::thread::sleep(Duration::from_millis(700));
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP killed the daemon");
    assert!(http_get(port, "/healthz").unwrap().0.contains("200"));
    assert!(http_get(port, "/readyz").unwrap().0.contains("200"));
    let probe = |path: &str| {
        Command::new(BIN)
            .args(["probe", &format!("http://127.0.0.1:{port}{path}")])
            .output()
            .unwrap()
    };
    assert!(probe("/readyz").status.success(), "the container health check passes while ready");

    // More events: the counters move again and lag returns to zero.
    broker.produce(
        "crm.public.account",
        &[(0, "{\"id\":7}".into(), Some(debezium("7", 95_000, "Hamburg")))],
    );
    let table_version = sum(&s, "changelake_table_version", &a);
    let commits_before =
        sum(&s, "changelake_commits_total", &[("table", "account"), ("outcome", "ok")]);
    wait_for("the new event to be committed", 60, &mut child, || {
        let s = samples(&scrape(port)?);
        (sum(&s, "changelake_rows_read_total", &a) == events.len() as f64 + 1.0
            && sum(&s, "changelake_commits_total", &[("table", "account"), ("outcome", "ok")])
                > commits_before
            && sum(&s, "changelake_table_version", &a) > table_version
            && sum(&s, "changelake_consumer_lag_messages", &a) == 0.0)
            .then_some(())
    });

    // Broker down: /readyz fails and says why; the process stays alive.
    broker.stop();
    let why = wait_for("/readyz to fail while the broker is down", 60, &mut child, || {
        http_get(port, "/readyz").filter(|(st, _)| st.contains("503")).map(|(_, b)| b)
    });
    assert!(why.contains("broker unreachable"), "{why}");
    let failed = probe("/readyz");
    assert_eq!(failed.status.code(), Some(1), "the health check fails while not ready");
    assert!(String::from_utf8_lossy(&failed.stderr).contains("broker unreachable"));
    assert!(http_get(port, "/healthz").unwrap().0.contains("200"), "alive while not ready");
    assert_eq!(sum(&samples(&scrape(port).unwrap()), "changelake_broker_up", &[]), 0.0);

    // Broker back: ready again.
    broker.restart();
    wait_for("/readyz to recover after the broker is back", 90, &mut child, || {
        http_get(port, "/readyz").filter(|(st, _)| st.contains("200")).map(|_| ())
    });

    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let st = child.wait().unwrap();
    assert!(st.success(), "SIGTERM exits 0");

    // JSON logs: one object per line; batch events carry the batch span, commits their own span.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let committed = lines
        .iter()
        .find(|l| l["fields"]["message"] == "batch committed" && l["fields"]["table"] == "account")
        .unwrap_or_else(|| panic!("no `batch committed` event:\n{text}"));
    assert_eq!(committed["span"]["name"], "batch", "{committed}");
    assert_eq!(committed["span"]["table"], "account");
    assert!(committed["span"]["rows"].as_u64().unwrap() > 0);
    assert!(
        committed["fields"]["version"].is_string() || committed["fields"]["version"].is_number(),
        "{committed}"
    );
    assert!(committed["fields"]["duration_ms"].is_number(), "{committed}");
    let commit = lines
        .iter()
        .find(|l| l["fields"]["message"] == "delta commit written")
        .expect("commit span event");
    assert_eq!(commit["span"]["name"], "commit");
    assert!(
        commit["span"]["version"].is_number() && commit["span"]["duration_ms"].is_number(),
        "{commit}"
    );
    assert!(text.contains("SIGHUP ignored"), "SIGHUP is logged");
    assert!(
        text.contains("broker unreachable") && text.contains("broker reachable again"),
        "readiness transitions are logged"
    );
}

/// The compose stack's config and sample events (docker/) through a real
/// broker: what `docker compose up` would show, minus Docker.
#[test]
fn compose_config_loads_the_sample_crm_events() {
    let broker = Broker::start();
    for t in ["account", "contact"] {
        broker.create_topic(&format!("crm.dbo.{t}"), 3);
        let text =
            std::fs::read_to_string(manifest().join(format!("docker/sample/{t}.jsonl"))).unwrap();
        let records: Vec<(i32, String, Option<String>)> = text
            .lines()
            .map(|l| {
                let (k, v) = l.split_once('|').unwrap();
                let key: serde_json::Value = serde_json::from_str(k).unwrap();
                let id = key.as_object().unwrap().values().next().unwrap().as_i64().unwrap_or(0);
                ((id % 3) as i32, k.to_string(), Some(v.to_string()))
            })
            .collect();
        broker.produce(&format!("crm.dbo.{t}"), &records);
    }
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(manifest().join("docker/changelake.yaml")).unwrap();
    assert!(text.contains("root: /data/lake"));
    let cfg = write(
        tmp.path(),
        "c.yaml",
        &text
            .replace("/data/lake", &tmp.path().join("lake").display().to_string())
            .replace("0.0.0.0:9464", &format!("127.0.0.1:{}", free_port()))
            .replace("${CHANGELAKE_BROKERS}", &broker.brokers()),
    );
    let out = Command::new(BIN).args(["run", "--once", "--config"]).arg(&cfg).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{log}");
    assert!(log.contains("dropped rows with a NULL business key"), "{log}");
    let account = show(&cfg, "account", &["_execution_id"]);
    // Account 5 is created and deleted within the one batch: its latest event is
    // a delete of a key the table never held, which is ignored (docs/scd1.md, deletes).
    assert_eq!(account.len(), 5, "{account:?}");
    assert!(account.iter().all(|r| r["accountid"] != 5 && r["_is_deleted"] == false));
    let by_id = |rows: &[serde_json::Value], col: &str, id: i64| {
        rows.iter().find(|r| r[col] == id).cloned().unwrap()
    };
    assert_eq!(by_id(&account, "accountid", 2)["address1_city"], "Dresden");
    assert_eq!(by_id(&account, "accountid", 2)["statecode"], 1);
    assert_eq!(by_id(&account, "accountid", 1)["address1_city"], "Potsdam");
    let history = show(&cfg, "account_history", &["_execution_id"]);
    // One batch, intra_batch latest: one version per key, equal to the scd1 row.
    assert_eq!(history.len(), 5, "{history:?}");
    assert_eq!(by_id(&history, "accountid", 2)["address1_city"], "Dresden");
    assert!(history.iter().all(|r| r["_is_current"] == true));
    let contact = show(&cfg, "contact", &["_execution_id"]);
    assert_eq!(contact.len(), 4);
    assert_eq!(by_id(&contact, "contactid", 102)["emailaddress1"], "c2@example.org");
}
