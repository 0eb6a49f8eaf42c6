//! Avro end to end: Debezium events serialised by confluent-kafka's own
//! AvroSerializer (the bytes Kafka Connect users produce) into a real
//! Kafka-protocol broker (tansu), with the registry stand-in of
//! tests/support/registry.py (no schema-registry server can be installed
//! here; it serves the Confluent REST subset the serializer and changelake
//! use). Compared with the same events as JSON with the Kafka Connect
//! schema wrapper (docs/avro.md).

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use common::*;
use serde_json::{json, Value as J};

/// The registry stand-in, on a loopback port, its schemas kept in a file
/// so that a restart answers with the same ids.
struct Registry {
    child: Option<Child>,
    port: u16,
    state: PathBuf,
}

impl Registry {
    fn start(dir: &Path) -> Registry {
        let mut r = Registry { child: None, port: free_port(), state: dir.join("registry.json") };
        r.restart();
        r
    }

    fn restart(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/registry.py");
        let child = Command::new("python3")
            .arg(script)
            .arg(self.port.to_string())
            .arg(&self.state)
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 runs the registry stand-in");
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(20), "registry did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = Some(child);
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Produces with confluent-kafka's AvroSerializer (tests/support/avro_produce.py).
fn produce_avro(broker: &Broker, registry: &Registry, topic: &str, messages: &[J]) {
    avro_producer(broker, registry, topic, messages, false);
}

/// The messages as the AvroSerializer serialises them (registering their
/// schemas), as raw lines to produce later without the registry.
fn serialize_avro(broker: &Broker, registry: &Registry, topic: &str, messages: &[J]) -> Vec<J> {
    let out = avro_producer(broker, registry, topic, messages, true);
    out.lines()
        .filter(|l| l.contains("\"raw\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn avro_producer(
    broker: &Broker,
    registry: &Registry,
    topic: &str,
    messages: &[J],
    serialize_only: bool,
) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/avro_produce.py");
    let mut child = Command::new("python3")
        .arg(script)
        .args([&broker.brokers(), &registry.url(), topic, "--decimals", "balance"])
        .args(serialize_only.then_some("--serialize-only"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with confluent-kafka[avro] (.ci/run installs it)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        for m in messages {
            writeln!(stdin, "{m}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(&format!("\"produced\": {}", messages.len())),
        "avro producer failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.into_owned()
}

const MICRO_TIMESTAMP: &str = "io.debezium.time.MicroTimestamp";

/// The row schema Debezium's Avro converter registers; `v2` adds an
/// optional column (a producer upgraded mid-stream).
fn value_schema(v2: bool) -> J {
    let opt = |name: &str, t: J| json!({"name": name, "type": ["null", t], "default": null});
    let mut fields = vec![
        json!({"name": "id", "type": "long"}),
        opt("name", json!("string")),
        opt("city", json!("string")),
        opt("score", json!("long")),
        opt(
            "balance",
            json!({"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
                   "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                   "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}),
        ),
        opt(
            "modified",
            json!({"type": "long", "connect.version": 1, "connect.name": MICRO_TIMESTAMP}),
        ),
        opt(
            "opened",
            json!({"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}),
        ),
    ];
    if v2 {
        fields.push(opt("tier", json!("string")));
    }
    json!({"type": "record", "name": "Value", "namespace": "crm.public.account", "fields": fields,
           "connect.name": "crm.public.account.Value"})
}

fn envelope_schema(v2: bool) -> String {
    json!({
        "type": "record", "name": "Envelope", "namespace": "crm.public.account",
        "fields": [
            {"name": "before", "type": ["null", value_schema(v2)], "default": null},
            {"name": "after", "type": ["null", "Value"], "default": null},
            {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
              "fields": [{"name": "connector", "type": "string"}, {"name": "table", "type": "string"},
                         {"name": "lsn", "type": ["null", "long"], "default": null}, {"name": "txId", "type": ["null", "long"], "default": null}]}},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": null}
        ],
        "connect.name": "crm.public.account.Envelope"
    })
    .to_string()
}

const KEY_SCHEMA: &str = r#"{"type": "record", "name": "Key", "namespace": "crm.public.account", "fields": [{"name": "id", "type": "long"}]}"#;

/// The Kafka Connect schema the JSON converter attaches to the same envelope.
fn connect_schema(v2: bool) -> J {
    let mut row = vec![
        json!({"field": "id", "type": "int64", "optional": false}),
        json!({"field": "name", "type": "string", "optional": true}),
        json!({"field": "city", "type": "string", "optional": true}),
        json!({"field": "score", "type": "int64", "optional": true}),
        json!({"field": "balance", "type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal",
               "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"}}),
        json!({"field": "modified", "type": "int64", "optional": true, "name": MICRO_TIMESTAMP, "version": 1}),
        json!({"field": "opened", "type": "int32", "optional": true, "name": "io.debezium.time.Date", "version": 1}),
    ];
    if v2 {
        row.push(json!({"field": "tier", "type": "string", "optional": true}));
    }
    json!({"type": "struct", "name": "crm.public.account.Envelope", "fields": [
        {"field": "before", "type": "struct", "optional": true, "fields": row},
        {"field": "after", "type": "struct", "optional": true, "fields": row},
        {"field": "source", "type": "struct", "fields": [
            {"field": "connector", "type": "string"}, {"field": "table", "type": "string"},
            {"field": "lsn", "type": "int64", "optional": true}, {"field": "txId", "type": "int64", "optional": true}]},
        {"field": "op", "type": "string"},
        {"field": "ts_ms", "type": "int64", "optional": true}
    ]})
}

/// One change event in both encodings.
struct Event {
    partition: i32,
    id: u64,
    /// The envelope with decimals as text (the Avro producer makes them decimals).
    value: J,
    v2: bool,
}

impl Event {
    fn avro(&self) -> J {
        json!({"partition": self.partition, "key": {"id": self.id}, "key_schema": KEY_SCHEMA,
               "value": self.value, "value_schema": envelope_schema(self.v2)})
    }

    /// (partition, key, value) as the JSON converter with schemas writes it:
    /// decimals as base64 of their unscaled big-endian bytes.
    fn json(&self) -> (i32, String, Option<String>) {
        let mut payload = self.value.clone();
        for section in ["before", "after"] {
            if let Some(b) = payload[section].get_mut("balance") {
                if let Some(text) = b.as_str() {
                    let unscaled: i128 = text.replace('.', "").parse().unwrap();
                    *b = J::String(
                        base64::engine::general_purpose::STANDARD.encode(be_bytes(unscaled)),
                    );
                }
            }
        }
        let value = json!({"schema": connect_schema(self.v2), "payload": payload});
        (self.partition, json!({"id": self.id}).to_string(), Some(value.to_string()))
    }
}

fn be_bytes(v: i128) -> Vec<u8> {
    let b = v.to_be_bytes();
    let mut i = 0;
    while i < 15 && ((b[i] == 0 && b[i + 1] & 0x80 == 0) || (b[i] == 0xff && b[i + 1] & 0x80 != 0))
    {
        i += 1;
    }
    b[i..].to_vec()
}

/// Inserts, updates, deletes with a full `before` and deletes carrying only
/// the key (the message key supplies it), the last third with schema v2.
fn events(n: usize, keys: u64, partitions: i32) -> Vec<Event> {
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let mut alive = std::collections::HashSet::new();
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = x % keys;
            let v2 = i >= n * 2 / 3;
            let source = json!({"connector": "postgresql", "table": "account", "lsn": 1000 + i * 8, "txId": i});
            let city = ["Berlin", "Köln", "", "Zürich"][(x >> 8) as usize % 4];
            let mut row = json!({
                "id": id, "name": format!("Account {id}"), "city": city,
                "score": (x >> 12) % 100, "balance": format!("{}.{:02}", (x >> 16) % 100_000, (x >> 40) % 100),
                "modified": -86_400_000_000i64 + (i as i64) * 1_000_001, "opened": 19_000 + (x >> 24) as i64 % 400,
            });
            if (x >> 30).is_multiple_of(7) {
                row["balance"] = J::Null;
            }
            if v2 {
                let tier = ["gold", "silver"][(x >> 34) as usize % 2];
                row["tier"] = if (x >> 33).is_multiple_of(3) { J::Null } else { json!(tier) };
            }
            let delete = alive.contains(&id) && (x >> 20).is_multiple_of(8);
            let value = if delete {
                alive.remove(&id);
                let before = if (x >> 23).is_multiple_of(2) { row } else { J::Null };
                json!({"before": before, "after": null, "source": source, "op": "d", "ts_ms": 1_700_000_000_000u64 + i as u64})
            } else {
                let op = if alive.insert(id) { if i % 11 == 0 { "r" } else { "c" } } else { "u" };
                json!({"before": null, "after": row, "source": source, "op": op, "ts_ms": 1_700_000_000_000u64 + i as u64})
            };
            Event { partition: (id % partitions as u64) as i32, id, value, v2 }
        })
        .collect()
}

fn config(brokers: &str, topic: &str, format: &str, extra: &str, max_rows: usize) -> String {
    format!(
        r#"storage: {{root: ./lake}}
systems:
  crm:
    type: kafka
    brokers: "{brokers}"
    group_id: changelake-avro-test
    topic: "{topic}"
    format: {format}
    {extra}
bronze:
  tables:
    account:
      source: {{system: crm, object: account}}
      business_key: [id]
      strategy: scd1
      merge: {{sequence_by: [source.lsn]}}
    account_history:
      source: {{system: crm, object: account}}
      business_key: [id]
      strategy: scd2
      merge: {{sequence_by: [source.lsn]}}
batching: {{max_rows: {max_rows}, max_age: 100ms}}
shutdown_timeout: 10s
"#
    )
}

fn avro_config(brokers: &str, registry: &Registry, max_rows: usize) -> String {
    config(
        brokers,
        "crm.avro.account",
        "debezium-avro",
        &format!("schema_registry: {{url: \"{}\", timeout: 2s}}", registry.url()),
        max_rows,
    )
}

fn dead_letters(dir: &Path) -> Vec<J> {
    let py = "import sys, json, os; from deltalake import DeltaTable; print(json.dumps(DeltaTable(sys.argv[1]).to_pyarrow_table().to_pylist(), default=str), flush=True); os._exit(0)";
    let out = ok(Command::new("python3")
        .args(["-c", py])
        .arg(dir.join("lake/_dead_letters"))
        .output()
        .unwrap());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Column types as the Delta log declares them, read by Python `deltalake`.
fn delta_types(table: &Path) -> std::collections::BTreeMap<String, String> {
    let py = "import sys, json, os; from deltalake import DeltaTable; print(json.dumps({f.name: str(f.type.type) if hasattr(f.type, 'type') else str(f.type) for f in DeltaTable(sys.argv[1]).schema().fields}), flush=True); os._exit(0)";
    let out = ok(Command::new("python3").args(["-c", py]).arg(table).output().unwrap());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tables(cfg: &Path) -> Vec<Vec<J>> {
    ["account", "account_history"].iter().map(|t| show(cfg, t, &["_execution_id"])).collect()
}

#[test]
fn avro_stream_equals_the_same_events_as_json() {
    let broker = Broker::start();
    let tmp = tempfile::tempdir().unwrap();
    let registry = Registry::start(tmp.path());
    broker.create_topic("crm.avro.account", 2);
    broker.create_topic("crm.json.account", 2);
    let evs = events(400, 40, 2);
    let mut avro: Vec<J> = evs.iter().map(Event::avro).collect();
    // Three malformed frames: JSON where Avro is expected, a schema id the
    // registry does not know, and a linked list of a registered recursive
    // schema nested 100,000 deep (read by recursion, it would overflow the
    // stack and end the process). Each is one dead letter; nothing else
    // stops.
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    avro.insert(50, json!({"partition": 0, "raw": b64(b"{\"op\":\"c\"}")}));
    avro.insert(120, json!({"partition": 1, "raw": b64(&[0, 0, 0, 0x10, 0x92, 2, 4, 6])}));
    avro.insert(200, json!({"partition": 0, "raw": b64(&deep_list(&broker, &registry))}));
    produce_avro(&broker, &registry, "crm.avro.account", &avro);
    broker.produce("crm.json.account", &evs.iter().map(Event::json).collect::<Vec<_>>());

    let a = tempfile::tempdir().unwrap();
    let acfg = write(a.path(), "c.yaml", &avro_config(&broker.brokers(), &registry, 100_000));
    let j = tempfile::tempdir().unwrap();
    let jcfg = write(
        j.path(),
        "c.yaml",
        &config(&broker.brokers(), "crm.json.account", "debezium", "", 100_000),
    );
    ok(cli(&["run", "--once"], &acfg));
    ok(cli(&["run", "--once"], &jcfg));
    let (at, jt) = (tables(&acfg), tables(&jcfg));
    assert!(at[0].len() > 10, "{:?}", at[0]);
    assert_eq!(at, jt, "the Avro stream and its JSON twin give the same tables");
    // Exact types: the decimal, the pre-1970 timestamp, the date, and the
    // column the second schema added.
    let row =
        at[0].iter().find(|r| r["balance"].is_string() && r["tier"].is_string()).expect("a v2 row");
    assert!(row["balance"].as_str().unwrap().contains('.'), "decimal kept as text: {row}");
    let types = delta_types(&a.path().join("lake/bronze/account"));
    for (col, ty) in [
        ("balance", "decimal(10,2)"),
        ("modified", "timestamp"),
        ("opened", "date"),
        ("tier", "string"),
    ] {
        assert_eq!(types.get(col).map(String::as_str), Some(ty), "{types:?}");
    }
    let dead = dead_letters(a.path());
    let errors: Vec<&str> = dead.iter().map(|d| d["error"].as_str().unwrap()).collect();
    assert_eq!(dead.len(), 3, "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("first byte 0x7b")), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("nests records, arrays or maps more than 128 levels")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("schema id 4242 is unknown to the schema registry")),
        "{errors:?}"
    );
}

/// A frame of a recursive schema (a linked list, registered on the
/// topic's subject by the AvroSerializer) whose body nests 100,000 deep.
fn deep_list(broker: &Broker, registry: &Registry) -> Vec<u8> {
    let schema = json!({"type": "record", "name": "Node", "fields": [
        {"name": "id", "type": "long"}, {"name": "next", "type": ["null", "Node"]}]});
    let one = json!({"partition": 0, "value": {"id": 1, "next": null},
        "value_schema": schema.to_string()});
    let raw = &serialize_avro(broker, registry, "crm.avro.account", &[one])[0]["raw"];
    let frame = base64::engine::general_purpose::STANDARD.decode(raw.as_str().unwrap()).unwrap();
    let mut deep = frame[..5].to_vec();
    for _ in 0..100_000 {
        deep.extend([0x02, 0x02]); // id 1, then `next`'s record branch
    }
    deep.extend([0x02, 0x00]); // the last id, then null
    deep
}

/// Live rows: whether a key created and deleted shows as a soft-deleted row
/// depends on the batch cuts (docs/batch.md), so runs cut differently
/// compare live rows.
fn live(rows: Vec<J>) -> Vec<J> {
    rows.into_iter().filter(|r| r["_is_deleted"] == false).collect()
}

fn current(rows: Vec<J>) -> Vec<J> {
    rows.into_iter().filter(|r| r["_is_current"] == true).collect()
}

fn metric(port: u16, name: &str) -> f64 {
    http_get(port, "/metrics")
        .and_then(|(_, body)| {
            body.lines()
                .filter(|l| l.starts_with(name) && !l.starts_with('#'))
                .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
                .reduce(|a, b| a + b)
        })
        .unwrap_or(0.0)
}

fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The registry stops mid-stream, while messages of a schema the daemon has
/// not fetched yet arrive: their partitions wait (not ready, failures
/// counted, nothing dead-lettered); when the registry is back the stream
/// resumes and the tables equal the JSON twin's.
#[test]
fn avro_registry_outage_waits_and_loses_nothing() {
    let broker = Broker::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut registry = Registry::start(tmp.path());
    broker.create_topic("crm.avro.account", 2);
    broker.create_topic("crm.json.account", 2);
    let evs = events(300, 30, 2);
    let first_v2 = evs.iter().position(|e| e.v2).unwrap();
    let raw = serialize_avro(
        &broker,
        &registry,
        "crm.avro.account",
        &evs.iter().map(Event::avro).collect::<Vec<_>>(),
    );
    produce_avro(&broker, &registry, "crm.avro.account", &raw[..first_v2]);

    let a = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = avro_config(&broker.brokers(), &registry, 100_000)
        + &format!("metrics: {{listen: \"127.0.0.1:{port}\"}}\n");
    let acfg = write(a.path(), "c.yaml", &text);
    let mut daemon = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&acfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the first schema's events committed", 60, || {
        metric(port, "changelake_consumer_lag_messages") == 0.0
            && metric(port, "changelake_batches_total") > 0.0
            && http_get(port, "/readyz").is_some_and(|(s, _)| s.contains("200"))
    });

    let scrape = http_get(port, "/metrics").unwrap().1;
    assert!(
        scrape.contains("changelake_schema_registry_failures_total{system=\"crm\"} 0"),
        "the failure counter exists at zero before any failure: {scrape}"
    );
    registry.stop();
    produce_avro(&broker, &registry, "crm.avro.account", &raw[first_v2..]);
    wait_until("readyz to report the registry", 30, || {
        http_get(port, "/readyz")
            .is_some_and(|(s, b)| !s.contains("200") && b.contains("schema registry unreachable"))
    });
    assert!(metric(port, "changelake_schema_registry_failures_total") > 0.0);
    assert!(metric(port, "changelake_schema_registry_waiting_partitions") >= 1.0);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        metric(port, "changelake_dead_letters_total"),
        0.0,
        "nothing dead-lettered while the registry is away"
    );

    registry.restart();
    wait_until("the stream to resume", 60, || {
        http_get(port, "/readyz").is_some_and(|(s, _)| s.contains("200"))
            && metric(port, "changelake_schema_registry_waiting_partitions") == 0.0
            && metric(port, "changelake_consumer_lag_messages") == 0.0
    });
    assert!(Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status()
        .unwrap()
        .success());
    let st = daemon.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(daemon.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(st.success(), "{err}");
    assert!(
        err.contains("schema registry unreachable")
            && err.contains("schema registry answers again"),
        "{err}"
    );

    broker.produce("crm.json.account", &evs.iter().map(Event::json).collect::<Vec<_>>());
    let j = tempfile::tempdir().unwrap();
    let jcfg = write(
        j.path(),
        "c.yaml",
        &config(&broker.brokers(), "crm.json.account", "debezium", "", 100_000),
    );
    ok(cli(&["run", "--once"], &jcfg));
    let (at, jt) = (tables(&acfg), tables(&jcfg));
    assert_eq!(
        live(at[0].clone()),
        live(jt[0].clone()),
        "scd1 after the outage equals the JSON twin"
    );
    assert_eq!(current(at[1].clone()), current(jt[1].clone()), "scd2 current versions equal");
    assert!(!a.path().join("lake/_dead_letters").exists(), "no dead letters");
}

/// SIGKILL at random moments of an Avro stream (small batches, two schema
/// versions): the tables end equal to an uninterrupted run.
#[test]
fn avro_sigkill_mid_stream_loses_and_repeats_nothing() {
    let broker = Broker::start();
    let tmp = tempfile::tempdir().unwrap();
    let registry = Registry::start(tmp.path());
    broker.create_topic("crm.avro.account", 2);
    let evs = events(500, 40, 2);
    produce_avro(
        &broker,
        &registry,
        "crm.avro.account",
        &evs.iter().map(Event::avro).collect::<Vec<_>>(),
    );
    let r = tempfile::tempdir().unwrap();
    let rcfg = write(r.path(), "c.yaml", &avro_config(&broker.brokers(), &registry, 100_000));
    ok(cli(&["run", "--once"], &rcfg));
    let want = tables(&rcfg);

    let c = tempfile::tempdir().unwrap();
    let cfg = write(c.path(), "c.yaml", &avro_config(&broker.brokers(), &registry, 30));
    let mut x: u64 = 17;
    for round in 0..6 {
        let mut child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let wait = Duration::from_millis(300 + (x >> 33) % 900);
        std::thread::sleep(wait);
        let _ = child.kill();
        let _ = child.wait();
        eprintln!(
            "round {round}: killed after {wait:?}, versions {}",
            versions(&c.path().join("lake/bronze/account"))
        );
    }
    ok(cli(&["run", "--once"], &cfg));
    let got = tables(&cfg);
    assert_eq!(live(got[0].clone()), live(want[0].clone()), "scd1 equals an uninterrupted run");
    assert_eq!(current(got[1].clone()), current(want[1].clone()), "scd2 current versions equal");
    let mut seen = std::collections::HashSet::new();
    for r in &got[1] {
        let v = (r["id"].to_string(), r["source_lsn"].to_string(), r["_is_deleted"].to_string());
        assert!(seen.insert(v), "a version applied twice: {r}");
    }
}
