"""Broker anomalies of Apache Kafka (retention, partitions added, topics re-created, aborted
transactions), on the disposable broker of the `real_kafka` fixture. End to end through the
scheduler: test_real_kafka_e2e.py.

The same rules are tested without a broker in test_ranges.py (plan) and test_reader_unit.py
(reader, through a consumer that replays real Kafka's behaviour).
"""

from __future__ import annotations

import uuid

import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import DataLossError, LogIdentityError
from onceflow.hooks.sink import sink_for
from onceflow.kafka import broker
from onceflow.ledger.planning import plan
from onceflow.ranges import OffsetRange

pytestmark = pytest.mark.integration
ORDERS = {"transform": "orders:transform", "sink": {"table": "orders"}}  # spark_jobs/orders.py


@pytest.fixture
def bootstrap(real_kafka):
    return real_kafka.bootstrap


@pytest.fixture
def topic(bootstrap):
    name = f"onceflow-real-{uuid.uuid4().hex[:8]}"
    broker.create_topic(bootstrap, name, 1)
    yield name
    broker.delete_topic(bootstrap, name)


def _produce(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, value=b'{"i": %d}' % i, partition=partition)
    p.flush(30)


def _snapshot(bootstrap, cfg):
    return lambda at: broker.snapshot(bootstrap, cfg.name, cfg.topics, at)


def test_retention_deleted_records_fail_plan_or_become_a_loss_event(
    ledger_dsn, bootstrap, topic, unique_name
):
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition

    cfg = parse_pipeline(unique_name, {"topics": [topic], **ORDERS})
    _produce(bootstrap, topic, 10)
    plan(ledger_dsn, cfg, "a", _snapshot(bootstrap, cfg), sink=sink_for(cfg))
    _produce(bootstrap, topic, 10)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.delete_records({TopicPartition(topic, 0): 15})  # 10..14 never processed
    admin.close()
    with pytest.raises(DataLossError, match=r"\[10, 15\)"):
        plan(ledger_dsn, cfg, "b", _snapshot(bootstrap, cfg), sink=sink_for(cfg))
    skip = parse_pipeline(unique_name, {"topics": [topic], **ORDERS, "on_data_loss": "skip"})
    b = plan(ledger_dsn, skip, "b", _snapshot(bootstrap, skip), sink=sink_for(skip))
    assert [(lo.from_offset, lo.until_offset) for lo in b.losses] == [(10, 15)]
    assert (b.ranges[0].from_offset, b.ranges[0].until_offset) == (15, 20)


def test_added_partition_joins_and_a_topic_recreated_with_fewer_partitions_is_a_new_log(
    ledger_dsn, bootstrap, topic, unique_name
):
    """Kafka cannot take partitions away: fewer partitions means the topic was deleted and
    re-created, and its surviving partition's new topic id stops plan (PROTOCOL: the log is
    the ledger's) before the missing partition would (PartitionRemovedError)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions

    cfg = parse_pipeline(unique_name, {"topics": [topic], **ORDERS})
    _produce(bootstrap, topic, 5)
    plan(ledger_dsn, cfg, "a", _snapshot(bootstrap, cfg), sink=sink_for(cfg))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_partitions({topic: NewPartitions(total_count=2)})
    admin.close()
    _produce(bootstrap, topic, 3, partition=1)
    b = plan(ledger_dsn, cfg, "b", _snapshot(bootstrap, cfg), sink=sink_for(cfg))
    assert [(r.partition, r.from_offset, r.until_offset) for r in b.ranges] == [
        (0, 5, 5),
        (1, 0, 3),
    ]
    broker.delete_topic(bootstrap, topic)
    _wait_topic_gone(bootstrap, topic)
    broker.create_topic(bootstrap, topic, 1)
    with pytest.raises(LogIdentityError, match=rf"{topic}\[0\].*deleted and re-created"):
        plan(ledger_dsn, cfg, "c", _snapshot(bootstrap, cfg), sink=sink_for(cfg))


def test_aborted_transactions_make_ranges_sparse_and_the_read_stops_at_until(bootstrap, topic):
    from onceflow.reader.range_fetch import read_range

    end = _three_transactions(bootstrap, topic, 0)
    rows = [
        o
        for b in read_range(OffsetRange(topic, 0, 0, end), bootstrap)
        for o in b.column("offset").to_pylist()
    ]
    # the committed records only: 4-7 were aborted; 3, 8 and 11 are control records
    assert rows == [0, 1, 2, 9, 10]


def _three_transactions(bootstrap: str, topic: str, partition: int) -> int:
    """Three transactions into the partition: 3 records committed (offsets 0-2, marker 3),
    4 aborted (4-7, marker 8), 2 committed (9-10, marker 11); the partition's end (12),
    asserted."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{topic}"})
    p.init_transactions()
    for commit, n in ((True, 3), (False, 4), (True, 2)):
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, value=b"%d" % i, partition=partition)
        # librdkafka's abort purges records not yet sent: flush so they reach the log
        p.flush(30)
        p.commit_transaction() if commit else p.abort_transaction()
    expected_end = 3 + 1 + 4 + 1 + 2 + 1  # records plus one control record per transaction
    end = _settled_end(bootstrap, topic, expected_end, partition)
    assert end == expected_end
    return end


def _settled_end(
    bootstrap: str, topic: str, expected: int, partition: int = 0, timeout: float = 30.0
) -> int:
    """The read_committed end offset once the last commit marker is written.

    commit_transaction() returns before the markers reach the partitions: the last stable
    offset can lag for a moment.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        end = broker.snapshot(bootstrap, "real", (topic,)).ends[(topic, partition)]
        if end >= expected or time.monotonic() > deadline:
            return end
        time.sleep(0.1)


def _wait_topic_gone(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    import time

    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        deadline = time.monotonic() + timeout
        while topic in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        admin.close()


def test_the_audit_recount_names_txids_whose_records_retention_deleted(bootstrap, topic):
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition
    from onceflow.audit import RangeRow
    from onceflow.kafka.recount import count_records

    _produce(bootstrap, topic, 12)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.delete_records({TopicPartition(topic, 0): 5})
    admin.close()
    ranges = [
        RangeRow("a", 1, topic, 0, 0, 4),  # deleted
        RangeRow("b", 2, topic, 0, 4, 8),  # half deleted
        RangeRow("c", 3, topic, 0, 8, 12),
    ]
    recount = count_records(bootstrap, ranges)
    assert recount.gone == {"a", "b"}
    assert dict(recount.counts) == {"c": 4}


def test_the_pieces_of_one_input_partition_are_read_together_as_each_alone(bootstrap):
    """A packed input partition's pieces go to one consumer at once (read_together): each
    hands on, and counts as read, exactly what its read alone gives, on a partition with
    aborted transactions and control records, one read past its until, one of plain
    records."""
    from onceflow.ledger.range_digest import RangeRead
    from onceflow.reader import frame
    from onceflow.reader.range_fetch import read_range

    topic = f"onceflow-real-{uuid.uuid4().hex[:8]}"
    broker.create_topic(bootstrap, topic, 3)
    _three_transactions(bootstrap, topic, 1)
    _produce(bootstrap, topic, 5, partition=0)
    _produce(bootstrap, topic, 6, partition=2)
    ends = broker.snapshot(bootstrap, "real", (topic,)).ends
    pieces = [
        OffsetRange(topic, 0, 0, ends[(topic, 0)]),
        OffsetRange(topic, 1, 0, ends[(topic, 1)]),  # ends with a commit marker
        OffsetRange(topic, 2, 1, 4),  # records past its until are there: never handed on
    ]
    alone = []
    for piece in pieces:
        seen = RangeRead(*piece.tp)
        offsets = [
            o for b in read_range(piece, bootstrap, seen=seen) for o in b["offset"].to_pylist()
        ]
        alone.append((offsets, seen.to_json()))

    class Tally:
        reads: dict = {}

        def record(self, k, read):
            self.reads[k] = read

    calls = []
    read_together = frame.read_together

    def counted_calls(ranges, *args):
        calls.append(len(ranges))
        return read_together(ranges, *args)

    fn = frame.RangeReadFn(pieces, bootstrap, partitions=[range(0, 3)], tally=Tally())
    try:
        frame.read_together = counted_calls
        batches = list(fn.partition_records(0))
    finally:
        frame.read_together = read_together
    assert calls == [3]  # one consumer for the three
    handed = [o for b in batches for o in b["offset"].to_pylist()]
    assert handed == [o for offsets, _ in alone for o in offsets]  # piece after piece
    assert alone[1][0] == [0, 1, 2, 9, 10] and alone[2][0] == [1, 2, 3]
    assert [fn.tally.reads[k].seen.to_json() for k in range(3)] == [s for _, s in alone]
    assert [fn.tally.reads[k].records for k in range(3)] == [5, 5, 3]
    broker.delete_topic(bootstrap, topic)
