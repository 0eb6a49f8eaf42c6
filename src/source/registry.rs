//! The schema registry: writer schemas by id over the Confluent REST API
//! (`GET /schemas/ids/{id}`; Apicurio serves it under its `ccompat` path),
//! cached for the life of the process (docs/avro.md).
//!
//! Why its failures are typed by kind: a registry that is away (refused
//! connection, timeout, 5xx, 429, an authentication it refuses) says
//! nothing about the data, so the partition waits and retries and nothing
//! is dead-lettered; a registry that answers "no such schema" (404), a
//! schema that is not Avro, or an answer too large to hold (over 16 MiB)
//! condemns the message.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::SchemaRegistry;
use crate::decode::avro::{Schemas, WriterSchema};

/// How long an id the registry did not know stays unknown before it is
/// asked again (a burst of messages with it asks once).
const UNKNOWN_FOR: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registry could not answer: retried, the partition waiting.
    #[error("schema registry {url}: {msg}")]
    Unavailable { url: String, msg: String },
    /// The registry answered and the id cannot be used: the message is a
    /// dead letter with this reason.
    #[error("{0}")]
    Refused(String),
}

impl RegistryError {
    pub fn retryable(&self) -> bool {
        matches!(self, RegistryError::Unavailable { .. })
    }
}

#[derive(Clone)]
enum Known {
    Schema(Arc<WriterSchema>),
    Refused { why: String, at: Instant },
}

/// One Kafka system's registry client and schema cache.
pub struct Registry {
    http: reqwest::Client,
    base: String,
    auth: Option<(String, Option<String>)>,
    known: Mutex<HashMap<u32, Known>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("url", &self.base).finish_non_exhaustive()
    }
}

impl Registry {
    /// A client for `cfg` (TLS files are read now: a missing one is an
    /// error at start, not at the first message).
    pub fn new(cfg: &SchemaRegistry) -> Result<Registry, String> {
        let mut b = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            .user_agent(concat!("changelake/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &cfg.ca_location {
            let pem =
                std::fs::read(ca).map_err(|e| format!("schema_registry.ca_location {ca}: {e}"))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| format!("schema_registry.ca_location {ca}: {e}"))?;
            b = b.add_root_certificate(cert);
        }
        if let (Some(cert), Some(key)) = (&cfg.certificate_location, &cfg.key_location) {
            let mut pem = std::fs::read(cert)
                .map_err(|e| format!("schema_registry.certificate_location {cert}: {e}"))?;
            pem.extend(
                std::fs::read(key)
                    .map_err(|e| format!("schema_registry.key_location {key}: {e}"))?,
            );
            let id = reqwest::Identity::from_pem(&pem)
                .map_err(|e| format!("schema_registry client certificate: {e}"))?;
            b = b.identity(id);
        }
        let http = b.build().map_err(|e| format!("schema_registry: {e}"))?;
        Ok(Registry {
            http,
            base: cfg.url.trim_end_matches('/').to_string(),
            auth: cfg.username.clone().map(|u| (u, cfg.password.clone())),
            known: Mutex::new(HashMap::new()),
        })
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Known>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `id` is settled without asking the registry (cached, or
    /// recently refused).
    pub fn settled(&self, id: u32) -> bool {
        match self.known().get(&id) {
            Some(Known::Schema(_)) => true,
            Some(Known::Refused { at, .. }) => at.elapsed() < UNKNOWN_FOR,
            None => false,
        }
    }

    /// The writer schema `id`, from the cache or the registry.
    pub async fn fetch(&self, id: u32) -> Result<Arc<WriterSchema>, RegistryError> {
        match self.known().get(&id) {
            Some(Known::Schema(s)) => return Ok(s.clone()),
            Some(Known::Refused { why, at }) if at.elapsed() < UNKNOWN_FOR => {
                return Err(RegistryError::Refused(why.clone()))
            }
            _ => {}
        }
        let result = self.ask(id).await;
        let mut known = self.known();
        match &result {
            Ok(s) => {
                known.insert(id, Known::Schema(s.clone()));
            }
            Err(RegistryError::Refused(why)) => {
                known.insert(id, Known::Refused { why: why.clone(), at: Instant::now() });
            }
            Err(RegistryError::Unavailable { .. }) => {}
        }
        result
    }

    async fn ask(&self, id: u32) -> Result<Arc<WriterSchema>, RegistryError> {
        /// The largest answer read: Avro schemas of the widest tables are
        /// a few hundred kilobytes.
        const MAX_ANSWER_BYTES: usize = 16 << 20;
        let url = format!("{}/schemas/ids/{id}", self.base);
        let unavailable = |msg: String| RegistryError::Unavailable { url: self.base.clone(), msg };
        let mut req = self
            .http
            .get(&url)
            .header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
        if let Some((user, password)) = &self.auth {
            req = req.basic_auth(user, password.as_deref());
        }
        let mut resp = req.send().await.map_err(|e| unavailable(error_chain(&e)))?;
        let status = resp.status();
        // Read up to a bound: the whole answer is held (and the schema in
        // it parsed) in memory.
        let mut body = vec![];
        while let Some(chunk) = resp.chunk().await.map_err(|e| unavailable(error_chain(&e)))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                if !status.is_success() {
                    // Only the start of an error answer is shown anyway.
                    break;
                }
                return Err(RegistryError::Refused(format!(
                    "schema id {id}: the schema registry's answer is larger than {} MiB",
                    MAX_ANSWER_BYTES >> 20
                )));
            }
            body.extend_from_slice(&chunk);
        }
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(RegistryError::Refused(format!(
                "schema id {id} is unknown to the schema registry (404: {})",
                String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
            )));
        }
        if !status.is_success() {
            // 5xx, 429, 401/403 (credentials being rotated), anything else:
            // the registry, not the message, is the problem.
            return Err(unavailable(format!(
                "GET /schemas/ids/{id} answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
            )));
        }
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| unavailable(format!("GET /schemas/ids/{id}: not JSON: {e}")))?;
        let Some(text) = answer.get("schema").and_then(|s| s.as_str()) else {
            return Err(unavailable(format!("GET /schemas/ids/{id}: no `schema` in the answer")));
        };
        match answer.get("schemaType").and_then(|t| t.as_str()) {
            None | Some("AVRO") => {}
            Some(other) => {
                return Err(RegistryError::Refused(format!(
                    "schema id {id} is a {other} schema, not Avro"
                )))
            }
        }
        if answer.get("references").and_then(|r| r.as_array()).is_some_and(|r| !r.is_empty()) {
            return Err(RegistryError::Refused(format!(
                "schema id {id} uses schema references, which are not supported"
            )));
        }
        WriterSchema::parse(id, text).map(Arc::new).map_err(RegistryError::Refused)
    }
}

/// The decoder's view: what the cache settled (an id not asked yet is
/// reported as unknown; the daemon asks before it decodes).
impl Schemas for Registry {
    fn schema(&self, id: u32) -> Result<Arc<WriterSchema>, String> {
        match self.known().get(&id) {
            Some(Known::Schema(s)) => Ok(s.clone()),
            Some(Known::Refused { why, .. }) => Err(why.clone()),
            None => Err(format!("schema id {id} was not fetched from the schema registry")),
        }
    }
}

/// An HTTP error with its causes (reqwest's own text omits them: "error
/// sending request" without "connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A registry on a loopback port answering every request with `body`.
    fn answering(body: Vec<u8>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let mut req = [0u8; 4096];
                let _ = s.read(&mut req);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).and_then(|()| s.write_all(&body));
            }
        });
        url
    }

    fn registry(url: String) -> Registry {
        let timeout = std::time::Duration::from_secs(10);
        let cfg = SchemaRegistry {
            url,
            username: None,
            password: None,
            ca_location: None,
            certificate_location: None,
            key_location: None,
            timeout,
        };
        Registry::new(&cfg).unwrap()
    }

    #[tokio::test]
    async fn an_answer_beyond_16_mib_is_refused_not_held() {
        let schema =
            r#"{"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}"#;
        let small = serde_json::json!({ "schema": schema }).to_string().into_bytes();
        let ok = registry(answering(small)).fetch(1).await;
        assert!(ok.is_ok(), "{:?}", ok.err());
        // The same schema with 17 MiB of padding in its text.
        let padded = format!("{}{schema}", " ".repeat(17 << 20));
        let large = serde_json::json!({ "schema": padded }).to_string().into_bytes();
        match registry(answering(large)).fetch(2).await {
            Err(RegistryError::Refused(why)) => {
                assert!(why.contains("answer is larger than 16 MiB"), "{why}")
            }
            other => panic!("refused for its size: {:?}", other.err()),
        }
    }
}
