"""Protobuf records through the real scheduler into an Iceberg table (pipeline it_protobuf,
no transform, in a session of the stack's Spark Connect server): a producer using
confluent-kafka's own ProtobufSerializer through the stack's schema registry, a second
version of the .proto adding a field midway, three hostile records.

The registry is the stand-in (onceflow_dev.registry: no registry server installs here from a
package registry; its docstring lists what was tried), speaking the Confluent REST API the
serializer and Onceflow use.
"""

from __future__ import annotations

import datetime as dt

import pytest
from onceflow.cli.main import main
from onceflow.config.pipelines_file import get_pipeline
from onceflow.formats.confluent_wire import frame
from onceflow.hooks.sink import sink_for
from onceflow.kafka import broker
from onceflow.ledger.db import transaction
from onceflow.sinks.iceberg.catalog import open_catalog
from onceflow_dev.stack import registry_url
from registry_support import payment, payment_class, protobuf_serializer

pytestmark = pytest.mark.integration

PIPELINE = TOPIC = "it_protobuf"
PARTITIONS = 2
HALF = 5000


def produce(bootstrap: str, values: list[bytes]) -> list[tuple[int, int]]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    acked = []
    for i, value in enumerate(values):
        p.produce(
            TOPIC,
            value,
            partition=i % PARTITIONS,
            on_delivery=lambda err, msg: acked.append((err, msg.partition(), msg.offset())),
        )
    assert p.flush(30) == 0
    assert all(err is None for err, _, _ in acked)
    return [(part, off) for _, part, off in acked]


def test_protobuf_records_with_a_new_version_midway_land_in_a_lake_table_exactly_once(
    stack, airflow, capsys
):
    bootstrap, registry = stack.kafka_bootstrap, registry_url(stack)
    broker.create_topic(bootstrap, TOPIC, PARTITIONS)
    cfg = get_pipeline(stack.pipelines_file, PIPELINE)
    v1, v2 = payment_class(1), payment_class(2)
    serialize_v1 = protobuf_serializer(registry, v1, TOPIC)
    produce(bootstrap, [serialize_v1(payment(v1, i)) for i in range(HALF)])
    airflow.trigger(cfg.dag_id, "pb-1")
    assert airflow.wait_for_runs(cfg.dag_id, ["pb-1"], timeout=600, echo=None) == {
        "pb-1": "success"
    }

    serialize_v2 = protobuf_serializer(registry, v2, TOPIC)  # a new producer version: v2
    later = [serialize_v2(payment(v2, i)) for i in range(HALF, 2 * HALF)]
    hostile = [b"\x08\x01\x12\x03abc", frame(4321, later[0][5:]), later[1][:-3]]
    produce(bootstrap, later)
    bad = produce(bootstrap, hostile)
    airflow.trigger(cfg.dag_id, "pb-2")
    assert airflow.wait_for_runs(cfg.dag_id, ["pb-2"], timeout=600, echo=None) == {
        "pb-2": "success"
    }

    sink = sink_for(cfg)
    with transaction(stack.postgres_dsn) as cur:
        with open_catalog(cur, sink.warehouse) as catalog:
            table = catalog.load_table(sink.identifier)
        cur.execute(
            "select distinct txid, column_name from onceflow.schema_changes where pipeline = %s",
            (PIPELINE,),
        )
        changes = cur.fetchall()
        cur.execute(
            'select partition, "offset", reason from onceflow.dead_letters where pipeline = %s',
            (PIPELINE,),
        )
        dead = cur.fetchall()
    fields = ("id", "account", "amount_cents", "paid_at", "status", "tags", "coupon", "note")
    rows = {r["id"]: r for r in table.scan(selected_fields=fields).to_arrow().to_pylist()}
    assert sorted(rows) == list(range(2 * HALF))
    for i in (0, 1, HALF - 1, HALF, 2 * HALF - 1):
        m = payment(v2 if i >= HALF else v1, i)
        row = rows[i]
        assert (row["account"], row["amount_cents"], row["status"]) == (
            m.account,
            m.amount_cents,
            "LATE" if i % 2 else "OK",
        )
        assert row["paid_at"] == dt.datetime.fromtimestamp(
            m.paid_at.seconds, dt.timezone.utc
        ) + dt.timedelta(microseconds=m.paid_at.nanos // 1000)
        assert row["tags"] == f'["t{i % 3}"]'
        assert row["coupon"] == (f"C{i}" if i % 3 else None)
        assert row["note"] == (f"n{i}" if i >= HALF else None)  # the column v2 added
    assert changes == [("pb-2", "note")]
    assert sorted((p, o) for p, o, _ in dead) == sorted(bad)
    reasons = " | ".join(r for _, _, r in dead)
    assert "not the magic byte" in reasons
    assert "schema id 4321 is unknown" in reasons
    assert "does not parse as shop.Payment" in reasons

    capsys.readouterr()
    assert main(["audit", "--pipeline", PIPELINE, "--reread"]) == 0
    said = capsys.readouterr().out
    assert f"audit of pipeline {PIPELINE}: exactly-once" in said, said
