"""Broker anomalies that only a real Apache Kafka can show (the embedded tansu broker cannot:
see ENVIRONMENT.md). Run with ONCEFLOW_TEST_REAL_KAFKA=host:port pointing at a disposable Kafka.

The same rules are tested without a broker in test_ranges.py (plan) and test_reader_unit.py
(reader, through a consumer that replays real Kafka's behaviour).
"""

from __future__ import annotations

import os
import uuid

import pytest
from onceflow import broker, ledger
from onceflow.config import parse_pipeline
from onceflow.errors import DataLossError, PartitionRemovedError
from onceflow.ranges import OffsetRange

BOOTSTRAP = os.environ.get("ONCEFLOW_TEST_REAL_KAFKA")
pytestmark = [
    pytest.mark.real_kafka,
    pytest.mark.skipif(
        not BOOTSTRAP,
        reason="needs an Apache Kafka: set ONCEFLOW_TEST_REAL_KAFKA=host:port (the embedded tansu "
        "broker cannot delete records, add partitions or hide aborted records)",
    ),
]


@pytest.fixture
def topic():
    name = f"onceflow-real-{uuid.uuid4().hex[:8]}"
    broker.create_topic(BOOTSTRAP, name, 1)
    yield name
    broker.delete_topic(BOOTSTRAP, name)


def _produce(topic: str, n: int, partition: int = 0) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": BOOTSTRAP})
    for i in range(n):
        p.produce(topic, value=b'{"i": %d}' % i, partition=partition)
    p.flush(30)


def _snapshot(cfg):
    return lambda: broker.snapshot(BOOTSTRAP, cfg.name, cfg.topics)


def test_retention_deleted_records_fail_plan_or_become_a_loss_event(ledger_dsn, topic, unique_name):
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition

    cfg = parse_pipeline(unique_name, {"topics": [topic]})
    _produce(topic, 10)
    ledger.plan(ledger_dsn, cfg, "a", _snapshot(cfg))
    _produce(topic, 10)
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    admin.delete_records({TopicPartition(topic, 0): 15})  # 10..14 never processed
    admin.close()
    with pytest.raises(DataLossError, match=r"\[10, 15\)"):
        ledger.plan(ledger_dsn, cfg, "b", _snapshot(cfg))
    skip = parse_pipeline(unique_name, {"topics": [topic], "on_data_loss": "skip"})
    b = ledger.plan(ledger_dsn, skip, "b", _snapshot(skip))
    assert [(lo.from_offset, lo.until_offset) for lo in b.losses] == [(10, 15)]
    assert (b.ranges[0].from_offset, b.ranges[0].until_offset) == (15, 20)


def test_added_partition_joins_and_removed_partition_stops(ledger_dsn, topic, unique_name):
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions

    cfg = parse_pipeline(unique_name, {"topics": [topic]})
    _produce(topic, 5)
    ledger.plan(ledger_dsn, cfg, "a", _snapshot(cfg))
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    admin.create_partitions({topic: NewPartitions(total_count=2)})
    admin.close()
    _produce(topic, 3, partition=1)
    b = ledger.plan(ledger_dsn, cfg, "b", _snapshot(cfg))
    assert [(r.partition, r.from_offset, r.until_offset) for r in b.ranges] == [
        (0, 5, 5),
        (1, 0, 3),
    ]
    broker.delete_topic(BOOTSTRAP, topic)
    broker.create_topic(BOOTSTRAP, topic, 1)
    with pytest.raises(PartitionRemovedError):
        ledger.plan(ledger_dsn, cfg, "c", _snapshot(cfg))


def test_aborted_transactions_make_ranges_sparse_and_the_read_stops_at_until(topic):
    from confluent_kafka import Producer
    from onceflow.reader import read_range

    p = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": f"t-{topic}"})
    p.init_transactions()
    for commit, n in ((True, 3), (False, 4), (True, 2)):
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, value=b"%d" % i, partition=0)
        p.commit_transaction() if commit else p.abort_transaction()
    snap = broker.snapshot(BOOTSTRAP, "real", (topic,))
    end = snap.ends[(topic, 0)]
    assert end == 3 + 1 + 4 + 1 + 2 + 1  # records plus one control record per transaction
    rows = [
        o
        for b in read_range(OffsetRange(topic, 0, 0, end), BOOTSTRAP)
        for o in b.column("offset").to_pylist()
    ]
    assert len(rows) == 5  # the aborted records and control records are not read
    assert max(rows) < end
