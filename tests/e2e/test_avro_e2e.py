"""Avro records through the real scheduler into PostgreSQL (pipeline it_avro, no transform):
a producer using confluent-kafka's own AvroSerializer through the stack's schema registry,
a second schema version adding a field midway, three hostile records.

The registry is the stand-in (onceflow_dev.registry: no registry server installs here from a
registry client; its docstring lists what was tried); it speaks the Confluent REST API the
serializer and Onceflow use, so both talk to it as to a real one.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest
from onceflow.cli.main import main
from onceflow.config.pipelines_file import get_pipeline
from onceflow.formats.confluent_wire import frame
from onceflow.kafka import broker
from onceflow.ledger.db import transaction
from onceflow_dev.stack import registry_url
from registry_support import AVRO_PAYMENT_FIELDS

pytestmark = pytest.mark.integration

PIPELINE = TOPIC = "it_avro"
PARTITIONS = 2
V1 = {"type": "record", "name": "Payment", "namespace": "acme", "fields": AVRO_PAYMENT_FIELDS}
V2 = {
    **V1,
    "fields": [*V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}],
}
T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def payment(i: int, v2: bool) -> dict:
    p = {
        "id": i,
        "account": f"acct-{i % 97}",
        "amount": decimal.Decimal(i * 7 % 100000) / 100,
        "paid_at": T0 + dt.timedelta(seconds=i),
        "status": "LATE" if i % 5 == 0 else "OK",
        "tags": [f"t{i % 3}"],
    }
    if v2:
        p["coupon"] = f"C{i}" if i % 2 else None
    return p


def produce(bootstrap: str, registry: str, first: int, n: int, v2: bool, raw=()) -> list:
    """n payments from id `first` (with the schema v2 if `v2`), then the raw values `raw`;
    the (partition, offset, value) of each record."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(
        SchemaRegistryClient({"url": registry}), json.dumps(V2 if v2 else V1)
    )
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    acked = []
    values = [serialize(payment(i, v2), ctx) for i in range(first, first + n)] + list(raw)
    for i, value in enumerate(values):
        p.produce(
            TOPIC,
            value,
            key=str(i).encode(),
            partition=i % PARTITIONS,
            on_delivery=lambda err, msg: acked.append((err, msg.partition(), msg.offset())),
        )
    assert p.flush(30) == 0
    assert all(err is None for err, _, _ in acked)
    return [(part, off) for _, part, off in acked]


def test_avro_records_with_a_new_schema_version_midway_land_exactly_once(stack, airflow, capsys):
    bootstrap, registry = stack.kafka_bootstrap, registry_url(stack)
    broker.create_topic(bootstrap, TOPIC, PARTITIONS)
    cfg = get_pipeline(stack.pipelines_file, PIPELINE)
    produce(bootstrap, registry, 0, 5000, v2=False)
    airflow.trigger(cfg.dag_id, "avro-1")
    assert airflow.wait_for_runs(cfg.dag_id, ["avro-1"], timeout=600, echo=None) == {
        "avro-1": "success"
    }

    # a new producer version registers v2 (a field added); three hostile records with it
    good_v2 = produce(bootstrap, registry, 5000, 1, v2=True)
    from confluent_kafka.schema_registry import SchemaRegistryClient

    v2_id = SchemaRegistryClient({"url": registry}).get_latest_version(f"{TOPIC}-value").schema_id
    hostile = [b'{"id": 1}', frame(v2_id + 1000, b"\x02"), frame(v2_id, b"\x02\x08")]
    produce(bootstrap, registry, 5001, 4999, v2=True)
    bad = produce(bootstrap, registry, 10000, 0, v2=True, raw=hostile)
    assert len(good_v2) == 1 and len(bad) == 3
    airflow.trigger(cfg.dag_id, "avro-2")
    assert airflow.wait_for_runs(cfg.dag_id, ["avro-2"], timeout=600, echo=None) == {
        "avro-2": "success"
    }

    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            f"select id, account, amount, paid_at, status, tags, coupon from {PIPELINE}.payments"
        )
        rows = {r[0]: r[1:] for r in cur.fetchall()}
        cur.execute(
            "select txid, column_name, column_type from onceflow.schema_changes"
            " where pipeline = %s",
            (PIPELINE,),
        )
        changes = cur.fetchall()
        cur.execute(
            'select partition, "offset", reason from onceflow.dead_letters where pipeline = %s'
            ' order by "offset"',
            (PIPELINE,),
        )
        dead = cur.fetchall()
        cur.execute(
            "select txid, version from onceflow.reader_schemas where pipeline = %s order by txid",
            (PIPELINE,),
        )
        readers = cur.fetchall()
    assert sorted(rows) == list(range(10000))
    for i in (0, 1, 4999, 5000, 5001, 9998, 9999):
        p = payment(i, v2=i >= 5000)
        assert rows[i] == (
            p["account"],
            p["amount"],
            p["paid_at"],
            p["status"],
            json.dumps(p["tags"], separators=(",", ":")),
            p.get("coupon"),
        ), i
    # the column v2 added, recorded with the txid that first read with v2
    assert set(changes) == {("avro-2", "coupon", "text")}  # the table and its stage
    assert readers == [("avro-1", 1), ("avro-2", 2)]
    # the hostile records are dead letters with their coordinates, saying why
    assert sorted((p, o) for p, o, _ in dead) == sorted(bad)
    reasons = " | ".join(r for _, _, r in dead)
    assert "not the magic byte" in reasons
    assert f"schema id {v2_id + 1000} is unknown" in reasons
    assert "truncated" in reasons

    capsys.readouterr()
    assert main(["audit", "--pipeline", PIPELINE, "--reread"]) == 0
    said = capsys.readouterr().out
    assert f"audit of pipeline {PIPELINE}: exactly-once" in said, said
    assert "decoded" in said and "with the ledger's schemas" in said

    # a record that does not decode must be a dead letter of the decoding: with one of them
    # gone from the ledger, the re-read (decoding with the ledger's schemas) names it
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            "delete from onceflow.dead_letters where pipeline = %s and partition = %s"
            ' and "offset" = %s',
            (PIPELINE, *bad[0]),
        )
    assert main(["audit", "--pipeline", PIPELINE, "--reread"]) == 1
    said = capsys.readouterr().out
    p, o = bad[0]
    assert f"it_avro[{p}]@{o} does not decode with the ledger's schemas" in said, said
    assert "but is not a dead letter of the decoding" in said
