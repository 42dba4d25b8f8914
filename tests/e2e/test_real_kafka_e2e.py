"""End to end on Apache Kafka: DAG runs through the real scheduler of the shared test stack,
on the broker behaviours a Kafka-compatible broker may lack: aborted transactions, records
deleted by retention, partitions added.
Every test ends with the audit, re-reading the broker where the records still exist.
"""

from __future__ import annotations

import time

import pytest
from onceflow.audit import run_audit
from onceflow.config.pipelines_file import get_pipeline
from onceflow.errors import UnknownTxidError
from onceflow.kafka import broker
from onceflow.kafka.recount import count_records
from onceflow.ledger.batches import get_batch
from onceflow.ledger.db import transaction
from onceflow.transforms import load_module
from onceflow_dev import producer

pytestmark = [pytest.mark.integration, pytest.mark.real_kafka]


def orders_sample(malformed_rate: float):
    """The orders example's sample (spark_jobs/orders.py) with this share malformed."""
    return load_module("orders:transform").sample_with(malformed_rate)


def audit(stack, name):
    cfg = get_pipeline(stack.pipelines_file, name)
    report = run_audit(stack.postgres_dsn, cfg, lambda rs: count_records(stack.kafka_bootstrap, rs))
    assert report.verdict == "exactly-once", report.violations
    return report


def run_and_wait(client, dag_id, run_ids, timeout=600):
    for run_id in run_ids:
        client.trigger(dag_id, run_id)
    return client.wait_for_runs(dag_id, run_ids, timeout=timeout, echo=None)


def produce(stack, topic, count, start, partitions):
    return producer.produce(
        stack.kafka_bootstrap, topic, partitions, count, sample=orders_sample(0.0), start=start,
        seed=3,
    )  # fmt: skip


def published_order_ids(stack, schema):
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(f"select order_id from {schema}.orders")
        return [r[0] for r in cur.fetchall()]


def settled_ends(bootstrap, topic, expected, timeout=30.0):
    """The read_committed end offsets once every commit/abort marker is written (they lag
    commit_transaction() for a moment on Apache Kafka)."""
    deadline = time.monotonic() + timeout
    while True:
        ends = broker.snapshot(bootstrap, "test", (topic,)).ends
        if ends == expected or time.monotonic() > deadline:
            return ends
        time.sleep(0.1)


def test_runs_on_apache_kafka_publish_exactly_the_produced_records(stack, airflow):
    broker.create_topic(stack.kafka_bootstrap, "rk_basic", 2)
    produced = producer.produce(
        stack.kafka_bootstrap, "rk_basic", 2, 2000, sample=orders_sample(0.05), seed=7
    )
    # cap 700/partition over 2 partitions: 2000 records need two batches, the third is empty
    states = run_and_wait(airflow, "onceflow_rk_basic", ["rk-basic-1", "rk-basic-2", "rk-basic-3"])
    assert set(states.values()) == {"success"}, states
    report = audit(stack, "rk_basic")
    assert report.batches_committed == 3
    assert report.records_in_ranges == produced == report.records_in_sink + report.dead_lettered
    assert report.dead_lettered > 0


def test_aborted_transactions_in_the_source_are_never_published(stack, airflow):
    from confluent_kafka import Producer

    bootstrap, topic = stack.kafka_bootstrap, "rk_txn"
    broker.create_topic(bootstrap, topic, 2)
    txp = Producer({"bootstrap.servers": bootstrap, "transactional.id": "onceflow-test-rk-txn"})
    txp.init_transactions()
    committed, aborted = set(), set()
    records = {0: 0, 1: 0}  # offsets taken per partition: records and control records
    start = 0

    def transaction_of(count, commit):
        nonlocal start
        txp.begin_transaction()
        events = producer.records(orders_sample(0.0), count, start=start)
        for i, (key, value) in enumerate(events):
            partition = i % 2
            txp.produce(topic, key=key, value=value, partition=partition)
            records[partition] += 1
            (committed if commit else aborted).add(f"o-{start + i:09d}")
        txp.flush(30)  # librdkafka's abort purges unsent records: make them reach the log
        txp.commit_transaction() if commit else txp.abort_transaction()
        for p in records:  # one commit or abort marker in each partition it wrote to
            records[p] += 1
        start += count

    for count, commit in ((50, True), (30, False), (40, True), (20, False)):
        transaction_of(count, commit)
    ends = settled_ends(bootstrap, topic, {(topic, p): n for p, n in records.items()})
    assert ends == {(topic, p): n for p, n in records.items()}
    assert run_and_wait(airflow, "onceflow_rk_txn", ["rk-txn-1"]) == {"rk-txn-1": "success"}
    for count, commit in ((25, False), (35, True), (10, False)):
        transaction_of(count, commit)
    settled_ends(bootstrap, topic, {(topic, p): n for p, n in records.items()})
    assert run_and_wait(airflow, "onceflow_rk_txn", ["rk-txn-2"]) == {"rk-txn-2": "success"}

    published = published_order_ids(stack, "rk_txn")
    assert sorted(published) == sorted(committed)  # each committed record once, no aborted one
    report = audit(stack, "rk_txn")
    assert report.records_in_ranges == len(committed) == report.records_in_sink
    assert report.dead_lettered == 0
    # the ranges cover the offsets of aborted records and markers too: sparse, not counted
    offsets = sum(
        r.until_offset - r.from_offset
        for txid in ("rk-txn-1", "rk-txn-2")
        for r in get_batch(stack.postgres_dsn, "rk_txn", txid).ranges
    )
    assert offsets == sum(records.values()) > len(committed)


def committed_then_deleted(stack, airflow, topic, first_run):
    """Run 1 commits offsets 0..9 of a one-partition topic; then 10 more records are
    produced and retention deletes everything before offset 15: 10..14 were never planned."""
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition

    broker.create_topic(stack.kafka_bootstrap, topic, 1)
    produce(stack, topic, 10, 0, 1)
    dag_id = f"onceflow_{topic}"
    assert run_and_wait(airflow, dag_id, [first_run]) == {first_run: "success"}
    produce(stack, topic, 10, 10, 1)
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
    try:
        admin.delete_records({TopicPartition(topic, 0): 15})
    finally:
        admin.close()
    return dag_id


def test_records_deleted_before_plan_fail_the_run_with_a_data_loss_error(stack, airflow):
    dag_id = committed_then_deleted(stack, airflow, "rk_loss", "rk-loss-1")
    assert run_and_wait(airflow, dag_id, ["rk-loss-2"]) == {"rk-loss-2": "failed"}
    plan = {t["task_id"]: t for t in airflow.task_instances(dag_id, "rk-loss-2")}["plan"]
    assert plan["state"] == "failed"
    assert plan["try_number"] == 1  # not retried: replanning cannot bring the records back
    text = airflow.task_log(dag_id, "rk-loss-2", "plan", 1)
    assert "data loss in pipeline 'rk_loss' at rk_loss[0]" in text
    assert "records [10, 15) were deleted before they were processed" in text
    with pytest.raises(UnknownTxidError):  # nothing was planned
        get_batch(stack.postgres_dsn, "rk_loss", "rk-loss-2")
    report = audit(stack, "rk_loss")
    assert report.loss_events == []
    assert report.reread_skipped == 1  # seq 1's records are deleted too: the ledger counts them


def test_records_deleted_before_plan_become_a_loss_event_the_audit_lists(stack, airflow):
    dag_id = committed_then_deleted(stack, airflow, "rk_loss_skip", "rk-skip-1")
    assert run_and_wait(airflow, dag_id, ["rk-skip-2"]) == {"rk-skip-2": "success"}
    batch = get_batch(stack.postgres_dsn, "rk_loss_skip", "rk-skip-2")
    assert [(r.from_offset, r.until_offset) for r in batch.ranges] == [(15, 20)]
    report = audit(stack, "rk_loss_skip")
    assert report.reread_skipped == 1  # seq 1's records are gone from the broker too
    assert [(e["from_offset"], e["until_offset"]) for e in report.loss_events] == [(10, 15)]
    assert report.records_in_sink == 15  # 10 from seq 1, offsets 15..19 from seq 2
    assert sorted(published_order_ids(stack, "rk_loss_skip")) == [
        f"o-{i:09d}" for i in [*range(10), *range(15, 20)]
    ]


def test_a_partition_added_between_runs_joins_at_its_first_offset(stack, airflow):
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions

    bootstrap, dag_id = stack.kafka_bootstrap, "onceflow_rk_parts"
    broker.create_topic(bootstrap, "rk_parts", 1)
    produce(stack, "rk_parts", 20, 0, 1)
    assert run_and_wait(airflow, dag_id, ["rk-parts-1"]) == {"rk-parts-1": "success"}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_partitions({"rk_parts": NewPartitions(total_count=2)})
    finally:
        admin.close()
    produce(stack, "rk_parts", 30, 20, 2)  # 15 into each partition

    assert run_and_wait(airflow, dag_id, ["rk-parts-2"]) == {"rk-parts-2": "success"}
    batch = get_batch(stack.postgres_dsn, "rk_parts", "rk-parts-2")
    assert [(r.partition, r.from_offset, r.until_offset) for r in batch.ranges] == [
        (0, 20, 35),
        (1, 0, 15),
    ]
    report = audit(stack, "rk_parts")
    assert report.records_in_ranges == report.records_in_sink == 50
