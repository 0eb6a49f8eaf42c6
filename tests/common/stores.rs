//! Object-store test servers on loopback ports: moto (S3, honours
//! conditional PUT), Azurite (Azure Blob), s3rver (S3 that ignores
//! conditional PUT: the probe's negative control) and a fault-injecting
//! proxy. Every config and reader gets explicit test credentials, and cloud
//! metadata lookups are disabled: nothing leaves 127.0.0.1.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, BIN};

/// The S3 test secret (moto accepts any): distinctive, so tests can prove
/// it never reaches a log line.
pub const S3_SECRET: &str = "not-a-real-secret-7f3a9c";

/// The published Azurite development account key.
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

pub fn support(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support").join(name)
}

/// A test tool installed by .ci/run: `$VAR`, else the tools directory, else PATH.
fn tool(var: &str, name: &str) -> PathBuf {
    if let Ok(p) = std::env::var(var) {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let dir = std::env::var("CHANGELAKE_TOOLS")
        .unwrap_or_else(|_| format!("{home}/.cache/changelake-tools"));
    let p = Path::new(&dir).join("node_modules/.bin").join(name);
    if p.exists() {
        p
    } else {
        PathBuf::from(name)
    }
}

fn wait_port(port: u16, what: &str, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("{what} exited early: {st}");
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A server process, killed when dropped.
pub struct Server {
    pub port: u16,
    child: Child,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One raw HTTP/1.1 request on loopback; returns the status code. A
/// server that has just started listening can still reset a connection
/// (moto did once in CI, on creating a bucket): the request is sent again
/// for up to 10 s. Only for requests that may be repeated (a bucket's
/// creation answers 409 the second time).
pub fn http(port: u16, method: &str, path: &str) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match http_once(port, method, path) {
            Ok(code) => return code,
            Err(e) if Instant::now() >= deadline => {
                panic!("{method} {path} on 127.0.0.1:{port}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn http_once(port: u16, method: &str, path: &str) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0))
}

/// Starts `cmd` (its output discarded) and waits until it listens on `port`.
fn serve(mut cmd: Command, port: u16, what: &str, dir: Option<tempfile::TempDir>) -> Server {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{what} runs (.ci/run installs it): {e}"));
    wait_port(port, what, &mut child);
    Server { port, child, _dir: dir }
}

/// moto's S3 server.
pub fn moto() -> Server {
    let port = free_port();
    let mut cmd = Command::new(tool("MOTO_SERVER", "moto_server"));
    cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
    serve(cmd, port, "moto_server (pip install 'moto[server]')", None)
}

/// s3rver: an S3 server that ignores conditional PUT.
pub fn s3rver() -> Server {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(tool("S3RVER", "s3rver"));
    cmd.args(["-a", "127.0.0.1", "-p", &port.to_string(), "--silent", "-d"]).arg(dir.path());
    serve(cmd, port, "s3rver (npm install s3rver)", Some(dir))
}

/// Azurite's blob service (telemetry off: it would call out otherwise).
pub fn azurite() -> Server {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(tool("AZURITE_BLOB", "azurite-blob"));
    cmd.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string(), "--location"])
        .arg(dir.path())
        .args(["--skipApiVersionCheck", "--loose", "--disableTelemetry", "--silent"]);
    serve(cmd, port, "azurite-blob (npm install azurite)", Some(dir))
}

/// The fault-injecting proxy in front of `upstream`; faults go to `log`.
pub fn faulty_proxy(upstream: u16, rate: f64, seed: u64, strip: bool, log: &Path) -> Server {
    let port = free_port();
    let mut cmd = Command::new("python3");
    cmd.arg(support("faulty_proxy.py")).args([
        port.to_string(),
        upstream.to_string(),
        rate.to_string(),
        seed.to_string(),
    ]);
    if strip {
        cmd.arg("--strip-if-none-match");
    }
    let mut child =
        cmd.stdout(std::fs::File::create(log).unwrap()).stderr(Stdio::null()).spawn().unwrap();
    wait_port(port, "faulty proxy", &mut child);
    Server { port, child, _dir: None }
}

pub fn create_bucket(port: u16, bucket: &str) {
    let code = http(port, "PUT", &format!("/{bucket}"));
    assert!(code == 200 || code == 409, "create bucket {bucket}: HTTP {code}");
}

pub fn create_container(port: u16, name: &str) {
    let out = Command::new("python3")
        .arg(support("azure_container.py"))
        .arg(format!("http://127.0.0.1:{port}"))
        .arg(name)
        .output()
        .unwrap();
    assert!(out.status.success(), "create container: {}", String::from_utf8_lossy(&out.stderr));
}

/// `storage:` for an S3 server on `port` (keys from the environment: `${S3_TEST_SECRET}`).
pub fn s3_storage(port: u16, root: &str) -> String {
    format!(
        "storage:\n  root: {root}\n  options:\n    AWS_ENDPOINT_URL: http://127.0.0.1:{port}\n    AWS_REGION: us-east-1\n    AWS_ACCESS_KEY_ID: ${{S3_TEST_KEY_ID}}\n    AWS_SECRET_ACCESS_KEY: ${{S3_TEST_SECRET}}\n    AWS_ALLOW_HTTP: \"true\"\n"
    )
}

/// `storage:` for Azurite (emulator mode; its URL comes from AZURITE_BLOB_STORAGE_URL).
pub fn azure_storage(root: &str) -> String {
    format!(
        "storage:\n  root: {root}\n  options:\n    AZURE_STORAGE_USE_EMULATOR: \"true\"\n    AZURE_STORAGE_ACCOUNT_NAME: devstoreaccount1\n    AZURE_STORAGE_ACCOUNT_KEY: ${{AZURE_TEST_KEY}}\n"
    )
}

/// The reader's options for the same servers.
pub fn s3_reader_options(port: u16) -> String {
    format!(
        r#"{{"AWS_ENDPOINT_URL": "http://127.0.0.1:{port}", "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "{S3_SECRET}", "AWS_ALLOW_HTTP": "true"}}"#
    )
}

pub fn azure_reader_options() -> String {
    format!(
        r#"{{"AZURE_STORAGE_USE_EMULATOR": "true", "AZURE_STORAGE_ACCOUNT_NAME": "devstoreaccount1", "AZURE_STORAGE_ACCOUNT_KEY": "{AZURITE_KEY}"}}"#
    )
}

/// The changelake binary with test credentials and no cloud metadata lookups.
pub fn changelake(azurite_port: Option<u16>) -> Command {
    let mut c = Command::new(BIN);
    c.env("AWS_EC2_METADATA_DISABLED", "true")
        .env("S3_TEST_KEY_ID", "testing")
        .env("S3_TEST_SECRET", S3_SECRET)
        .env("AZURE_TEST_KEY", AZURITE_KEY)
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY");
    if let Some(p) = azurite_port {
        c.env("AZURITE_BLOB_STORAGE_URL", format!("http://127.0.0.1:{p}"));
    }
    c
}

pub fn run_cmd(cmd: &mut Command, args: &[&str], cfg: &Path) -> Output {
    cmd.args(args).arg("--config").arg(cfg).output().unwrap()
}

/// The rows of a Delta table, read by Python `deltalake`, as sorted JSON lines.
pub fn read_rows(
    uri: &str,
    options: &str,
    azurite_port: Option<u16>,
    drop: &[&str],
) -> Vec<String> {
    let mut c = Command::new("python3");
    c.arg(support("read_delta.py")).arg(uri).arg(options).args(drop);
    c.env("AWS_EC2_METADATA_DISABLED", "true");
    if let Some(p) = azurite_port {
        c.env("AZURITE_BLOB_STORAGE_URL", format!("http://127.0.0.1:{p}"));
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "read {uri}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}
