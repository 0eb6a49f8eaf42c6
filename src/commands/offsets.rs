//! `offsets`: per table, topic and partition, the next offset stored with the
//! table, the partition's high watermark and the lag between them.

use changelake::config::{Config, SystemKind};
use changelake::engine::open_for_reading;
use changelake::error::{Error, Result};
use changelake::source::kafka;
use changelake::value::Value;

use super::show::{render, OutFormat};

/// `offsets`: stored next offset, high watermark and lag per table/topic/partition.
pub async fn offsets(c: &Config) -> Result<String> {
    let mut rows = vec![];
    for t in &c.tables {
        let Some(SystemKind::Kafka { brokers, group_id, topic, kafka, .. }) =
            c.systems.get(&t.system).map(|s| &s.kind)
        else {
            continue;
        };
        let topic = topic.replace("{object}", &t.object);
        let consumer: rdkafka::consumer::BaseConsumer<kafka::Ctx> =
            kafka::client_config(brokers, group_id, kafka)
                .create_with_context(kafka::Ctx)
                .map_err(|e| Error::Input(format!("kafka: {e}")))?;
        let store = open_for_reading(c, t).await?;
        let parts = tokio::task::block_in_place(|| kafka::partitions(&consumer, &topic, brokers))
            .map_err(|e| Error::Input(e.to_string()))?;
        for p in parts {
            let stored = store
                .txn_version(&changelake::progress::partition_app_id(&t.name, &topic, p))
                .await?;
            let kafka::Watermarks { low, high } =
                tokio::task::block_in_place(|| kafka::watermarks(&consumer, &topic, p, brokers))?;
            let lag = high - stored.unwrap_or(low).max(low);
            rows.push(vec![
                Value::Str(t.name.as_str().into()),
                Value::Str(topic.as_str().into()),
                Value::Int(p as i64),
                stored.map(Value::Int).unwrap_or(Value::Null),
                Value::Int(high),
                Value::Int(lag.max(0)),
            ]);
        }
    }
    let header = ["table", "topic", "partition", "stored_next_offset", "high_watermark", "lag"]
        .map(String::from);
    Ok(render(&header, &rows, OutFormat::Table))
}
