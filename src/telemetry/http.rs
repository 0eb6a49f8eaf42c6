//! The registry in the Prometheus text format, and the small HTTP server on
//! `metrics.listen` that answers `/metrics`, `/healthz` and `/readyz`.

use std::sync::Mutex;
use std::time::Duration;

use prometheus::{Encoder, TextEncoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::health::readiness;
use super::registry::metrics;
use super::LOG_TARGET;

/// The whole registry in the Prometheus text exposition format.
pub fn render() -> String {
    let m = metrics();
    m.ready.set(readiness().is_ok() as i64);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    m.refresh_source_lag(now.map_or(0, |d| d.as_millis() as i64));
    let mut out = vec![];
    TextEncoder::new().encode(&m.registry.gather(), &mut out).expect("text encoding");
    String::from_utf8(out).expect("utf-8 metrics")
}

/// Serves `/metrics`, `/healthz` and `/readyz` until the process ends (once per address).
pub async fn serve(addr: &str) -> std::io::Result<()> {
    static SERVING: Mutex<Vec<String>> = Mutex::new(Vec::new());
    if SERVING.lock().unwrap_or_else(|e| e.into_inner()).contains(&addr.to_string()) {
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    SERVING.lock().unwrap_or_else(|e| e.into_inner()).push(addr.to_string());
    tracing::info!(target: LOG_TARGET, %addr, "metrics on http://{addr}/metrics");
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                // Read the request head (a client may send it in several writes).
                let mut buf = Vec::with_capacity(1024);
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
                    match tokio::time::timeout(Duration::from_secs(5), sock.read(&mut chunk)).await
                    {
                        Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                        _ => break,
                    }
                }
                let req = String::from_utf8_lossy(&buf);
                let path = req.split_whitespace().nth(1).unwrap_or("/");
                let (status, ctype, body) = match path {
                    "/metrics" => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render()),
                    "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
                    "/readyz" => match readiness() {
                        Ok(()) => ("200 OK", "text/plain", "ready\n".to_string()),
                        Err(why) => (
                            "503 Service Unavailable",
                            "text/plain",
                            format!("not ready: {}\n", why.join("; ")),
                        ),
                    },
                    _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    Ok(())
}
