//! From Kafka into the loop: one task per partition queue (plus the main
//! queue for client errors) receives, decodes and stamps each message, and
//! sends it into the loop's channel (docs/events.md for the decoding;
//! docs/operations.md, the daemon, for `max_age`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use rdkafka::consumer::StreamConsumer;
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::slots::TopicPartitions;
use crate::config::Format;
use crate::decode::{avro, decode_keeping, within_width, Decoded, Rejected};
use crate::source::kafka::Ctx;
use crate::source::registry::Registry;
use crate::source::RawText;
use crate::telemetry;

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

/// How a system's messages are decoded: their envelope, and for Avro the
/// registry their writer schemas come from.
#[derive(Clone)]
pub(super) struct Decoding {
    pub(super) system: Arc<str>,
    pub(super) format: Format,
    pub(super) registry: Option<Arc<Registry>>,
    /// The envelope fields the system's tables read, all of them together
    /// (`decode::env_paths`): the rest of an envelope (most of `source`)
    /// is passed over, not built into values for every message, as file
    /// sources do. Building all of it cost a quarter of a Debezium decode.
    pub(super) keep: Arc<[String]>,
}

/// Decodes a message as it arrives. Decoding is the costliest per-event
/// step: done here, one task per partition, so it runs on every core instead
/// of in the single consume loop. Table-specific stored envelope columns are
/// added by `route`.
fn receive<M: Message>(m: &M, topic: Arc<str>, how: &Decoding) -> Ev {
    let at = Instant::now();
    let bytes = m.payload();
    // Decoded without stored envelope columns (`route` adds them per table).
    let decoded = within_width(
        match &how.registry {
            Some(registry) => {
                avro::decode_keeping(how.format, m.key(), bytes, &**registry, Some(&how.keep))
            }
            None => decode_keeping(how.format, m.key(), bytes, &[], Some(&how.keep)),
        },
        0,
    );
    let payload = payload(&decoded, bytes, how);
    Ev::Msg(Received { topic, partition: m.partition(), offset: m.offset(), decoded, payload, at })
}

/// What a message keeps of its bytes: the text of a row (a later step may
/// dead-letter it), the bytes exactly as received when it did not decode.
fn payload(
    decoded: &std::result::Result<Decoded, Rejected>,
    bytes: Option<&[u8]>,
    how: &Decoding,
) -> Payload {
    match (decoded, bytes) {
        // JSON that decoded is UTF-8 (both JSON parsers check); lossy only
        // as a guard. Avro stays binary (dead letters keep its bytes).
        (Ok(_), Some(b)) if how.registry.is_none() => {
            Payload::Text(String::from_utf8_lossy(b).into_owned().into())
        }
        (Ok(_), Some(b)) => Payload::Text(RawText::binary(b)),
        (Ok(_), None) => Payload::Text("".into()),
        (Err(_), b) => Payload::Bytes(b.unwrap_or_default().to_vec()),
    }
}

/// Avro messages that were waiting together in the partition queue,
/// decoded together: runs of one writer schema decode into columns
/// (`avro::decode_run`), several times cheaper per message than one by
/// one. Returns the events of the messages up to the first whose writer
/// schemas are not yet settled, and the messages from that one on, which
/// go one at a time (settling may wait for the registry: what was decoded
/// is sent first).
fn received_run<'q>(
    mut run: Vec<BorrowedMessage<'q>>,
    topic: &Arc<str>,
    how: &Decoding,
) -> (Vec<Ev>, Vec<BorrowedMessage<'q>>) {
    let Some(registry) = &how.registry else { unreachable!("runs are Avro") };
    let at = Instant::now();
    let settled = run
        .iter()
        .take_while(|m| avro::schema_ids(m.key(), m.payload()).all(|id| registry.settled(id)))
        .count();
    let unsettled = run.split_off(settled);
    let messages: Vec<avro::Message<'_>> =
        run.iter().map(|m| avro::Message { key: m.key(), value: m.payload() }).collect();
    let decoded = avro::decode_run(how.format, &messages, &**registry, Some(&how.keep));
    let evs = run
        .iter()
        .zip(decoded)
        .map(|(m, decoded)| {
            let decoded = within_width(decoded, 0);
            let payload = payload(&decoded, m.payload(), how);
            let (partition, offset) = (m.partition(), m.offset());
            Ev::Msg(Received { topic: topic.clone(), partition, offset, decoded, payload, at })
        })
        .collect();
    (evs, unsettled)
}

/// A partition queue's error as the loop's event.
fn queue_error(e: RdError, topic: &str, partition: i32) -> Ev {
    match e {
        RdError::PartitionEOF(_) => Ev::Eof { topic: topic.to_string(), partition },
        RdError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset) => {
            Ev::OutOfRange { topic: topic.to_string(), partition }
        }
        e => Ev::Err(e.to_string()),
    }
}

/// Longest wait between two attempts to reach the schema registry.
const REGISTRY_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Makes sure the writer schemas `m` names are settled before it is
/// decoded. While the registry cannot answer, this partition waits and
/// retries with backoff (its message kept, nothing dead-lettered, the
/// partition's later messages behind it); an answer either way settles it.
async fn settle_schemas<M: Message>(registry: &Registry, system: &str, topic: &str, m: &M) {
    for id in avro::schema_ids(m.key(), m.payload()) {
        let mut backoff = Duration::from_millis(200);
        let mut waiting = false;
        loop {
            match registry.fetch(id).await {
                Err(e) if e.retryable() => {
                    let error = e.to_string();
                    telemetry::schema_registry_failure(system, topic, m.partition(), &error);
                    if !waiting {
                        waiting = true;
                        telemetry::registry_waiting(system, true, Some(&error));
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(REGISTRY_MAX_BACKOFF);
                }
                _ => break,
            }
        }
        if waiting {
            telemetry::registry_waiting(system, false, None);
        }
    }
}

/// A message received and decoded, its writer schemas fetched first when
/// the cache does not settle them (the message is copied out of the
/// client's buffer only then).
async fn received(m: BorrowedMessage<'_>, topic: Arc<str>, how: &Decoding) -> Ev {
    let Some(registry) = &how.registry else { return receive(&m, topic, how) };
    if avro::schema_ids(m.key(), m.payload()).all(|id| registry.settled(id)) {
        return receive(&m, topic, how);
    }
    let owned = m.detach();
    drop(m);
    settle_schemas(registry, &how.system, &topic, &owned).await;
    receive(&owned, topic, how)
}

/// Forwards one partition queue into the loop's channel.
pub(super) fn forward(
    consumer: &Arc<StreamConsumer<Ctx>>,
    topic: &str,
    p: i32,
    how: &Decoding,
    tx: &mpsc::Sender<Ev>,
) -> Option<JoinHandle<()>> {
    let q = consumer.split_partition_queue(topic, p)?;
    let tx = tx.clone();
    let topic: Arc<str> = topic.into();
    let how = how.clone();
    Some(tokio::spawn(async move {
        loop {
            let evs = match q.recv().await {
                // Avro: with the messages already waiting behind this one.
                Ok(m) if how.registry.is_some() => {
                    let (mut run, mut ended) = (vec![m], None);
                    while run.len() < avro::MAX_RUN {
                        match q.recv().now_or_never() {
                            Some(Ok(m)) => run.push(m),
                            Some(Err(e)) => {
                                ended = Some(queue_error(e, &topic, p));
                                break;
                            }
                            None => break,
                        }
                    }
                    let (evs, unsettled) = received_run(run, &topic, &how);
                    for ev in evs {
                        if tx.send(ev).await.is_err() {
                            return;
                        }
                    }
                    for m in unsettled {
                        if tx.send(received(m, topic.clone(), &how).await).await.is_err() {
                            return;
                        }
                    }
                    ended.into_iter().collect()
                }
                Ok(m) => vec![received(m, topic.clone(), &how).await],
                Err(e) => vec![queue_error(e, &topic, p)],
            };
            for ev in evs {
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
        }
    }))
}

/// Forwards the consumer's main queue, which only carries client-level
/// errors once partitions are split — and what was fetched between
/// assigning and splitting: messages, and the end of a partition, which
/// `--once` waits for (named by partition only: its topic is the one
/// topic with that partition, when there is one).
pub(super) fn forward_main_queue(
    consumer: &Arc<StreamConsumer<Ctx>>,
    topic_parts: &TopicPartitions,
    how: &Decoding,
    tx: &mpsc::Sender<Ev>,
) -> JoinHandle<()> {
    let c = consumer.clone();
    let tx = tx.clone();
    let how = how.clone();
    let topic_parts = topic_parts.clone();
    tokio::spawn(async move {
        loop {
            let ev = match c.recv().await {
                Ok(m) => {
                    let topic = m.topic().into();
                    received(m, topic, &how).await
                }
                Err(RdError::PartitionEOF(p)) => {
                    let mut with_p = topic_parts.iter().filter(|(_, ps)| ps.contains(&p));
                    match (with_p.next(), with_p.next()) {
                        (Some((topic, _)), None) => Ev::Eof { topic: topic.clone(), partition: p },
                        _ => Ev::Err(RdError::PartitionEOF(p).to_string()),
                    }
                }
                Err(e) => Ev::Err(e.to_string()),
            };
            if tx.send(ev).await.is_err() {
                return;
            }
        }
    })
}
