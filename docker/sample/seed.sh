#!/usr/bin/env bash
# Creates the CRM topics and produces a few sample Debezium (SQL Server
# connector) events, key|value per line, so the dashboard has something to show.
set -euo pipefail
bin=/opt/kafka/bin
for t in account contact; do
  if "$bin/kafka-topics.sh" --bootstrap-server kafka:9092 --describe --topic "crm.dbo.$t" >/dev/null 2>&1; then
    echo "crm.dbo.$t exists: not seeding it again"
    continue
  fi
  "$bin/kafka-topics.sh" --bootstrap-server kafka:9092 --create --if-not-exists --topic "crm.dbo.$t" --partitions 3 --replication-factor 1
  "$bin/kafka-console-producer.sh" --bootstrap-server kafka:9092 --topic "crm.dbo.$t" \
    --property parse.key=true --property 'key.separator=|' < "/sample/$t.jsonl"
done
echo "seeded crm.dbo.account and crm.dbo.contact"
