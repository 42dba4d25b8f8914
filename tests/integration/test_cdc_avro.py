"""Change events in Avro through a schema registry, end to end (`format = "avro"`,
`envelope = "debezium"`, onceflow.formats.debezium_avro): a pipeline reads the topics a
pattern matches, each table's events keyed and valued in the Confluent wire format, and the
REAL `spark-submit onceflow/spark_app/process.py` decodes them with the schemas they were
written with into a PostgreSQL upsert table per topic; commit publishes. Deletes delete, a
change sent again changes nothing, a record that is no Avro event is the one dead letter,
and the audit says exactly-once.

The events have the shape Kafka Connect's AvroConverter gives Debezium's PostgreSQL
connector's (tests/unit/test_debezium_avro.py says which); Confluent's AvroConverter is not
on Maven Central, so confluent-kafka's AvroSerializer writes them, through the stand-in
registry (onceflow_dev.registry), into the session's own Apache Kafka."""

from __future__ import annotations

import json
from decimal import Decimal

import cdc_support
import pytest
from cdc_support import sql
from debezium_avro_support import ENVELOPE, KEY, change, row
from process_modes import job_env
from registry_support import standin_registry

pytestmark = pytest.mark.integration


def producer_for(server, bootstrap: str):
    """send(topic, key, value): each as the AvroConverter frames it (None: a tombstone)."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": server.url})
    key, value = (
        AvroSerializer(client, json.dumps(KEY)),
        AvroSerializer(client, json.dumps(ENVELOPE)),
    )
    producer = Producer({"bootstrap.servers": bootstrap})

    def send(topic: str, k: dict, v: dict | None | bytes) -> None:
        raw = (
            v
            if isinstance(v, bytes | None)
            else value(v, SerializationContext(topic, MessageField.VALUE))
        )
        producer.produce(topic, raw, key(k, SerializationContext(topic, MessageField.KEY)))

    return send, producer


def test_avro_change_events_of_a_patterns_topics_land_in_a_table_each(
    tmp_path, ledger_dsn, real_kafka, unique_name
):
    from onceflow.audit import run_audit
    from onceflow.kafka import broker

    server_name = f"av_{unique_name}"
    topics = [f"{server_name}.public.items", f"{server_name}.public.parts"]
    for t in topics:
        broker.create_topic(real_kafka.bootstrap, t, 1)
    pipelines = f"""
[pipelines.{unique_name}]
topics = {{ pattern = "{server_name}[.]public[.].*" }}
envelope = "debezium"
format = "avro"
[pipelines.{unique_name}.sink]
mode = "upsert"
tables = "{{table}}"
"""
    with standin_registry() as server:
        env = job_env(
            tmp_path / "home",
            pipelines,
            ledger_dsn,
            real_kafka.bootstrap,
            ONCEFLOW_REGISTRY=server.url,
        )
        send, producer = producer_for(server, real_kafka.bootstrap)
        items, parts = topics
        send(items, {"id": 1}, change("c", after=row(1), lsn=10))
        send(items, {"id": 2}, change("c", after=row(2, name="bo"), lsn=11))
        send(parts, {"id": 7}, change("c", after=row(7, price=Decimal("3.50")), lsn=12))
        send(items, {"id": 1}, change("u", before=row(1), after=row(1, name="ada2"), lsn=13))
        send(items, {"id": 2}, change("d", before=row(2), lsn=14))
        send(items, {"id": 2}, None)
        send(parts, {"id": 8}, b"not avro")  # the one dead letter
        producer.flush(10)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("ONCEFLOW_REGISTRY", server.url)
            cdc_support.run_txid(env, "run-1", (unique_name,))
            # sent again, as a restarted connector does: older positions change nothing
            send(items, {"id": 1}, change("c", after=row(1), lsn=10))
            send(items, {"id": 2}, change("c", after=row(2, name="bo"), lsn=11))
            producer.flush(10)
            cdc_support.run_txid(env, "run-2", (unique_name,))
            rows = {
                t: sql(ledger_dsn, f"select id, name, price from {unique_name}.{t} order by id")
                for t in ("items", "parts")
            }
            assert rows == {
                "items": [(1, "ada2", Decimal("19.99"))],
                "parts": [(7, "ada", Decimal("3.50"))],
            }
            dead = sql(
                ledger_dsn,
                f"select topic, reason from onceflow.dead_letters where pipeline = '{unique_name}'",
            )
            assert [(t, e.split(":")[0]) for t, e in dead] == [
                (parts, "the record's value is not Avro in the wire format")
            ]
            report = run_audit(ledger_dsn, cdc_support.pipeline(env, unique_name))
            assert report.violations == [] and report.verdict == "exactly-once"
