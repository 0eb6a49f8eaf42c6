//! Kafka plumbing: client settings, partition discovery, watermarks, stored
//! offsets. The consume loop itself lives in `daemon`.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::ClientConfig;

/// Routes librdkafka's client-level errors into our logs; end-of-partition is
/// an expected event (it drives `--once`), not an error.
#[derive(Clone, Default)]
pub struct Ctx;

impl ClientContext for Ctx {
    fn error(&self, error: RdError, reason: &str) {
        let eof = matches!(error, RdError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF);
        if eof {
            return;
        }
        let text = error.to_string();
        if let Some(repeated) = crate::telemetry::CLIENT_ERRORS.admit(&text) {
            tracing::warn!(error = %text, reason, repeated, "kafka client error (librdkafka retries)");
        }
    }
}

impl ConsumerContext for Ctx {}

/// A failed Kafka client call, with whether librdkafka's error code says
/// it is worth retrying (see [`is_transient`]).
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("kafka ({brokers}): {msg}")]
    Client { brokers: String, msg: String, transient: bool },
}

impl KafkaError {
    /// A failed call to the cluster at `brokers`, doing `what`.
    pub fn client(brokers: &str, what: impl std::fmt::Display, e: &RdError) -> KafkaError {
        KafkaError::Client {
            brokers: brokers.into(),
            msg: format!("{what}: {e}"),
            transient: is_transient(e),
        }
    }

    /// Brokers down, timeouts, leader moves: the call may succeed later.
    pub fn retryable(&self) -> bool {
        match self {
            KafkaError::Client { transient, .. } => *transient,
        }
    }
}

/// Whether librdkafka reports a condition that passes on its own (no broker
/// reachable, a timeout, a partition leader or group coordinator moving),
/// as opposed to a refusal (authorisation, configuration, unknown topic).
pub fn is_transient(e: &RdError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::AllBrokersDown
                | C::BrokerTransportFailure
                | C::Resolve
                | C::OperationTimedOut
                | C::RequestTimedOut
                | C::LeaderNotAvailable
                | C::NotLeaderForPartition
                | C::BrokerNotAvailable
                | C::NetworkException
                | C::CoordinatorLoadInProgress
                | C::CoordinatorNotAvailable
                | C::NotCoordinator
                | C::NotEnoughReplicas
        )
    )
}

pub const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// librdkafka settings: user pass-through first, then the settings
/// exactly-once depends on, which a user cannot override.
pub fn client_config(
    brokers: &str,
    group_id: &str,
    user: &BTreeMap<String, String>,
) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers).set("group.id", group_id);
    for (k, v) in user {
        c.set(k, v);
    }
    c.set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        // Never silently: a fetch position that retention deleted (or that a
        // recreated topic no longer has) comes back as an error, and the
        // daemon stops or skips as `on_offset_out_of_range` says.
        .set("auto.offset.reset", "error");
    c
}

/// Partition ids of `topic`, or an empty list if the topic does not exist.
pub fn partitions(
    consumer: &BaseConsumer<Ctx>,
    topic: &str,
    brokers: &str,
) -> Result<Vec<i32>, KafkaError> {
    let md = consumer
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .map_err(|e| KafkaError::client(brokers, format_args!("metadata for {topic}"), &e))?;
    Ok(md
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect())
}

/// The offsets a partition holds: `low` is its first, `high` the next one
/// to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermarks {
    pub low: i64,
    pub high: i64,
}

/// The watermarks of one partition.
pub fn watermarks(
    consumer: &BaseConsumer<Ctx>,
    topic: &str,
    partition: i32,
    brokers: &str,
) -> Result<Watermarks, KafkaError> {
    let (low, high) =
        consumer.fetch_watermarks(topic, partition, METADATA_TIMEOUT).map_err(|e| {
            KafkaError::client(brokers, format_args!("watermarks of {topic}/{partition}"), &e)
        })?;
    Ok(Watermarks { low, high })
}

/// The `txn` app id recording a table's next offset in one partition (built
/// by the progress module, the one home of progress markers).
pub use crate::progress::partition_app_id as app_id;

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaErrorCode;

    #[test]
    fn kafka_errors_are_retryable_when_librdkafka_says_they_pass() {
        let down = RdError::MetadataFetch(RDKafkaErrorCode::AllBrokersDown);
        assert!(KafkaError::client("b:9092", "metadata", &down).retryable());
        let timeout = RdError::MetadataFetch(RDKafkaErrorCode::OperationTimedOut);
        assert!(KafkaError::client("b:9092", "metadata", &timeout).retryable());
        let denied = RdError::MetadataFetch(RDKafkaErrorCode::TopicAuthorizationFailed);
        assert!(!KafkaError::client("b:9092", "metadata", &denied).retryable());
        assert!(!KafkaError::client("b:9092", "x", &RdError::NoMessageReceived).retryable());
    }
}
