"""The shipped inventory example (spark_jobs/inventory.py, an upsert sink by sku) end to end
on the shared test stack: two batches through the scheduler, processed in a session of the
stack's Spark Connect server (it_inventory_connect: the upsert is commit's, whichever way
the job reached Spark; the demo runs the example with spark-submit); the table holds each
sku's last update, tombstoned skus are gone, and the audit, re-reading the broker, says
exactly-once."""

from __future__ import annotations

import json

import pytest
from onceflow.audit import run_audit
from onceflow.config.pipelines_file import get_pipeline
from onceflow.kafka import broker
from onceflow.kafka.recount import count_records
from onceflow.ledger.db import transaction

pytestmark = pytest.mark.integration

PARTITIONS = 2


def update(sku: str, quantity: int) -> bytes:
    return json.dumps(
        {
            "sku": sku,
            "warehouse": f"w{quantity % 3}",
            "quantity": quantity,
            "unit_price": quantity / 4,
            "ts": f"2026-11-21T08:{quantity % 60:02d}:00Z",
        }
    ).encode()


def produce(bootstrap: str, topic: str, records: list[tuple[str, bytes | None]]) -> None:
    """Keyed as a Kafka producer keys them: each sku on one partition, in order. One record
    per produce request: the embedded broker reports a partition's end offset as its last
    batch's base offset + 1 (onceflow_dev.producer.produce)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors = []
    for sku, value in records:
        p.produce(
            topic,
            value,
            key=sku.encode(),
            partition=int(sku[1:]) % PARTITIONS,
            on_delivery=lambda err, _msg: err and errors.append(err),
        )
        p.flush(30)
    assert not errors, errors


def expected(records: list[tuple[str, bytes | None]]) -> list[tuple]:
    """Each sku's last record in production order, without tombstoned or refused skus' rows."""
    last: dict[str, dict | None] = {}
    for sku, value in records:
        if value is None:
            last[sku] = None
            continue
        u = json.loads(value)
        if u["quantity"] >= 0:  # a negative quantity is refused: the sku keeps its row
            last[sku] = u
    return sorted(
        (sku, u["warehouse"], u["quantity"], round(u["unit_price"], 2))
        for sku, u in last.items()
        if u is not None
    )


def table(stack, pipeline: str) -> list[tuple]:
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            f"select sku, warehouse, quantity, unit_price::float8 from {pipeline}.inventory"
            " order by sku"
        )
        return cur.fetchall()


def run(airflow, pipeline: str, run_id: str) -> None:
    airflow.trigger(f"onceflow_{pipeline}", run_id)
    states = airflow.wait_for_runs(f"onceflow_{pipeline}", [run_id], timeout=600, echo=None)
    assert states == {run_id: "success"}


def test_inventory_keeps_each_skus_last_update_and_deletes_tombstoned_skus(stack, airflow):
    pipeline = topic = "it_inventory_connect"
    broker.create_topic(stack.kafka_bootstrap, topic, PARTITIONS)
    # batch 1: ten skus updated three times each; s3 and s7 deleted; s4's last update refused
    first = [(f"s{i}", update(f"s{i}", 10 * r + i)) for r in range(3) for i in range(10)]
    first += [("s3", None), ("s7", None), ("s4", update("s4", -1))]
    produce(stack.kafka_bootstrap, topic, first)
    run(airflow, pipeline, "inventory-1")
    assert table(stack, pipeline) == expected(first)
    assert {"s3", "s7"}.isdisjoint(sku for sku, *_ in table(stack, pipeline))

    # batch 2: s3 comes back, s5 deleted, s9 deleted and re-created, s8 updated again, a
    # tombstone for a sku never seen
    second = [("s3", update("s3", 103)), ("s5", None), ("s9", None), ("s9", update("s9", 109))]
    second += [("s8", update("s8", 108)), ("s42", None)]
    produce(stack.kafka_bootstrap, topic, second)
    run(airflow, pipeline, "inventory-2")
    rows = table(stack, pipeline)
    assert rows == expected(first + second)
    assert {"s3", "s9"} <= {sku for sku, *_ in rows} and "s5" not in {sku for sku, *_ in rows}

    cfg = get_pipeline(stack.pipelines_file, pipeline)
    assert cfg.process_mode == "connect"
    report = run_audit(stack.postgres_dsn, cfg, lambda rs: count_records(stack.kafka_bootstrap, rs))
    assert report.verdict == "exactly-once", report.violations
    assert report.batches_committed == 2
    assert report.records_in_ranges == len(first) + len(second)
    assert report.dead_lettered == 1
    with transaction(stack.postgres_dsn) as cur:
        cur.execute("select reason from onceflow.dead_letters where pipeline = %s", (pipeline,))
        assert cur.fetchall() == [("field 'quantity' is negative",)]
