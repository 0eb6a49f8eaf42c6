//! From Kafka into the loop: one task per partition queue (plus the main
//! queue for client errors) receives, decodes and stamps each message, and
//! sends it into the loop's channel (docs/events.md for the decoding;
//! docs/operations.md, the daemon, for `max_age`).

use std::sync::Arc;
use std::time::Instant;

use rdkafka::consumer::StreamConsumer;
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::{BorrowedMessage, Message, OwnedMessage};
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

/// A message, its decoding (envelope paths not yet stored as columns), its
/// payload as text (kept with the row for dead letters) and when it was
/// received: a batch's `max_age` counts from its first message's arrival,
/// not from when the loop got to it (it may have waited out a commit).
pub(super) struct Received {
    pub(super) msg: OwnedMessage,
    pub(super) decoded: std::result::Result<Decoded, Rejected>,
    pub(super) raw: String,
    pub(super) at: Instant,
}

/// Decodes a message as it arrives. Decoding is the costliest per-event
/// step: done here, one task per partition, so it runs on every core instead
/// of in the single consume loop. Table-specific stored envelope columns are
/// added by `route`.
fn receive(m: BorrowedMessage<'_>, format: Format) -> Ev {
    let at = Instant::now();
    let decoded = decode(format, m.key(), m.payload(), &[]);
    let raw = m.payload().map(|x| String::from_utf8_lossy(x).into_owned()).unwrap_or_default();
    Ev::Msg(Received { msg: m.detach(), decoded, raw, at })
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
    let topic = topic.to_string();
    Some(tokio::spawn(async move {
        loop {
            let ev = match q.recv().await {
                Ok(m) => receive(m, format),
                Err(RdError::PartitionEOF(_)) => Ev::Eof { topic: topic.clone(), partition: p },
                Err(RdError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset)) => {
                    Ev::OutOfRange { topic: topic.clone(), partition: p }
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
                Ok(m) => receive(m, format),
                Err(e) => Ev::Err(e.to_string()),
            };
            if tx.send(ev).await.is_err() {
                return;
            }
        }
    })
}
