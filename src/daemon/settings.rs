//! A Kafka system as the daemon uses it: its settings resolved from the
//! config, and the blocking metadata calls made at start-up. Shared by the
//! loop (`system.rs`), the slots it opens and the start positions.

use std::collections::BTreeMap;

use rdkafka::consumer::BaseConsumer;

use crate::config::{Config, Format, OutOfRange, SchemaRegistry, SystemKind};
use crate::error::{Error, Result};
use crate::source::kafka::{Ctx, KafkaError};

/// A Kafka system's settings, as the loop uses them.
#[derive(Clone, Copy)]
pub(super) struct KafkaSystem<'a> {
    pub(super) name: &'a str,
    pub(super) brokers: &'a str,
    pub(super) group_id: &'a str,
    topic_template: &'a str,
    pub(super) format: Format,
    pub(super) kafka: &'a BTreeMap<String, String>,
    pub(super) on_out_of_range: OutOfRange,
    /// Avro messages: the registry their writer schemas come from.
    pub(super) avro: Option<&'a SchemaRegistry>,
}

impl<'a> KafkaSystem<'a> {
    pub(super) fn of(config: &'a Config, name: &'a str) -> Self {
        let SystemKind::Kafka { brokers, group_id, topic, format, kafka, on_out_of_range, avro } =
            &config.systems[name].kind
        else {
            unreachable!()
        };
        KafkaSystem {
            name,
            brokers,
            group_id,
            topic_template: topic,
            format: *format,
            kafka,
            on_out_of_range: *on_out_of_range,
            avro: avro.as_deref(),
        }
    }

    /// The topic a table's object is read from.
    pub(super) fn topic(&self, object: &str) -> String {
        self.topic_template.replace("{object}", object)
    }
}

/// A metadata call on the loop's task (start-up only).
pub(super) async fn meta_call<T: Send + 'static>(
    meta: &BaseConsumer<Ctx>,
    f: impl FnOnce(&BaseConsumer<Ctx>) -> std::result::Result<T, KafkaError>,
) -> Result<T> {
    // Metadata calls block; they are short and rare (start-up only).
    tokio::task::block_in_place(|| f(meta)).map_err(Error::from)
}
