"""Produces Avro messages exactly as Kafka Connect users' producers do:
confluent-kafka's own AvroSerializer (Confluent wire format, schemas
registered in the registry under `<topic>-value` / `<topic>-key`).

Reads one JSON object per line on stdin:
  {"partition": 0, "key": {...} | null, "value": {...} | null,
   "value_schema": "<Avro schema JSON>", "key_schema": "<Avro schema JSON>" | null}
or {"partition": 0, "raw": "<base64>", "raw_key": "<base64>" | null} for
bytes sent as they are (malformed frames, or messages serialised earlier).
Fields named by --decimals are Avro decimals given as text. With
--serialize-only nothing is produced: each message is printed as a raw line
instead (so a test can produce it later, while the registry is down).

Usage: avro_produce.py BROKERS REGISTRY_URL TOPIC [--decimals a,b] [--serialize-only]
"""

import base64
import decimal
import json
import os
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

brokers, registry_url, topic = sys.argv[1:4]
decimals = set()
if "--decimals" in sys.argv:
    decimals = set(sys.argv[sys.argv.index("--decimals") + 1].split(","))
serialize_only = "--serialize-only" in sys.argv

registry = SchemaRegistryClient({"url": registry_url})
serializers = {}


def serializer(schema):
    if schema not in serializers:
        serializers[schema] = AvroSerializer(registry, schema, conf={"auto.register.schemas": True})
    return serializers[schema]


def with_decimals(v):
    if isinstance(v, dict):
        return {k: (decimal.Decimal(x) if k in decimals and isinstance(x, str) else with_decimals(x)) for k, x in v.items()}
    return v


producer = Producer({
    "bootstrap.servers": brokers,
    "batch.num.messages": 1,
    "linger.ms": 0,
    "enable.idempotence": False,
})
count = 0
for line in sys.stdin:
    if not line.strip():
        continue
    m = json.loads(line)
    if "raw" in m:
        key = base64.b64decode(m["raw_key"]) if m.get("raw_key") else None
        value = base64.b64decode(m["raw"])
    else:
        key = None
        if m.get("key") is not None:
            key = serializer(m["key_schema"])(m["key"], SerializationContext(topic, MessageField.KEY))
        value = None
        if m.get("value") is not None:
            value = serializer(m["value_schema"])(with_decimals(m["value"]), SerializationContext(topic, MessageField.VALUE))
    if serialize_only:
        b64 = lambda b: base64.b64encode(b).decode() if b is not None else None
        print(json.dumps({"partition": m["partition"], "raw": b64(value), "raw_key": b64(key)}))
        count += 1
        continue
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=m["partition"])
            break
        except BufferError:
            producer.poll(0.1)
    producer.poll(0)
    count += 1
left = producer.flush(60)
print(json.dumps({"produced": count, "unflushed": left}), flush=True)
# Leave without the interpreter's teardown (native threads of the client).
os._exit(0 if left == 0 else 1)
