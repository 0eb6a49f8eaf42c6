//! From Kafka into the loop: one task per partition queue (plus the main
//! queue for client errors) receives, decodes and stamps each message, and
//! sends it into the loop's channel (docs/events.md for the decoding;
//! docs/operations.md, the daemon, for `max_age`).

use std::sync::Arc;
use std::time::Instant;

use rdkafka::consumer::StreamConsumer;
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::Format;
use crate::decode::{decode, Decoded, Rejected};
use crate::source::kafka::Ctx;

/// What the loop's channel carries.
pub(super) enum Ev {
    Msg(Received),
    /// A partition reached its end (for now).
    Eof {
        topic: String,
        partition: i32,
    },
    Err(String),
    /// The partition's next offset is no longer on the broker (retention
    /// deleted events before they were read, or the topic was recreated).
    OutOfRange {
        topic: String,
        partition: i32,
    },
    /// Current partitions of a topic (periodic metadata refresh).
    Partitions {
        topic: String,
        partitions: Vec<i32>,
    },
}

/// A message's place, its decoding (envelope paths not yet stored as
/// columns), its payload and when it was received: a batch's `max_age`
/// counts from its first message's arrival, not from when the loop got to it
/// (it may have waited out a commit).
pub(super) struct Received {
    pub(super) topic: Arc<str>,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) decoded: std::result::Result<Decoded, Rejected>,
    pub(super) payload: Payload,
    pub(super) at: Instant,
}

/// A message's payload, copied out of the client's buffer once.
#[derive(Clone)]
pub(super) enum Payload {
    /// As text, kept with a decoded row for the dead letter a later step
    /// may make of it (shared by every table reading the topic).
    Text(crate::source::RawText),
    /// The bytes exactly as received: the dead letter of a message that did
    /// not decode.
    Bytes(Vec<u8>),
}

/// Decodes a message as it arrives. Decoding is the costliest per-event
/// step: done here, one task per partition, so it runs on every core instead
/// of in the single consume loop. Table-specific stored envelope columns are
/// added by `route`.
fn receive(m: BorrowedMessage<'_>, topic: Arc<str>, format: Format) -> Ev {
    let at = Instant::now();
    let bytes = m.payload();
    let decoded = decode(format, m.key(), bytes, &[]);
    let payload = match (&decoded, bytes) {
        // A message that decoded is UTF-8 (both JSON parsers check); lossy only as a guard.
        (Ok(_), Some(b)) => Payload::Text(String::from_utf8_lossy(b).into_owned().into()),
        (Ok(_), None) => Payload::Text("".into()),
        (Err(_), b) => Payload::Bytes(b.unwrap_or_default().to_vec()),
    };
    Ev::Msg(Received { topic, partition: m.partition(), offset: m.offset(), decoded, payload, at })
}

/// Forwards one partition queue into the loop's channel.
pub(super) fn forward(
    consumer: &Arc<StreamConsumer<Ctx>>,
    topic: &str,
    p: i32,
    format: Format,
    tx: &mpsc::Sender<Ev>,
) -> Option<JoinHandle<()>> {
    let q = consumer.split_partition_queue(topic, p)?;
    let tx = tx.clone();
    let topic: Arc<str> = topic.into();
    Some(tokio::spawn(async move {
        loop {
            let ev = match q.recv().await {
                Ok(m) => receive(m, topic.clone(), format),
                Err(RdError::PartitionEOF(_)) => Ev::Eof { topic: topic.to_string(), partition: p },
                Err(RdError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset)) => {
                    Ev::OutOfRange { topic: topic.to_string(), partition: p }
                }
                Err(e) => Ev::Err(e.to_string()),
            };
            if tx.send(ev).await.is_err() {
                return;
            }
        }
    }))
}

/// Forwards the consumer's main queue, which only carries client-level
/// errors once partitions are split.
pub(super) fn forward_main_queue(
    consumer: &Arc<StreamConsumer<Ctx>>,
    format: Format,
    tx: &mpsc::Sender<Ev>,
) -> JoinHandle<()> {
    let c = consumer.clone();
    let tx = tx.clone();
    tokio::spawn(async move {
        loop {
            let ev = match c.recv().await {
                Ok(m) => {
                    let topic = m.topic().into();
                    receive(m, topic, format)
                }
                Err(e) => Ev::Err(e.to_string()),
            };
            if tx.send(ev).await.is_err() {
                return;
            }
        }
    })
}
