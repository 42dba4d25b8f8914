"""The control plane's view of the broker (kafka-python): offsets for plan, topics for setup.

The hot path (reading ranges inside Spark) lives in reader.py and uses librdkafka; this module
only asks the broker for metadata and offsets.
"""

from __future__ import annotations

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from onceflow.errors import TopicMissingError
from onceflow.ledger import BrokerSnapshot


def _consumer(bootstrap: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        request_timeout_ms=30_000,
        client_id="onceflow-plan",
    )


def partitions(
    consumer: KafkaConsumer, pipeline: str, topics: tuple[str, ...], bootstrap: str
) -> list[TopicPartition]:
    known = consumer.topics()  # forces a metadata refresh
    tps = []
    for topic in topics:
        parts = consumer.partitions_for_topic(topic) if topic in known else None
        if not parts:
            raise TopicMissingError(pipeline, topic, bootstrap)
        tps.extend(TopicPartition(topic, p) for p in sorted(parts))
    return tps


def snapshot(bootstrap: str, pipeline: str, topics: tuple[str, ...]) -> BrokerSnapshot:
    """First and end offsets (LATEST under read_committed: the last stable offset) now."""
    consumer = _consumer(bootstrap)
    try:
        tps = partitions(consumer, pipeline, topics, bootstrap)
        ends = consumer.end_offsets(tps)
        beginnings = consumer.beginning_offsets(tps)
    finally:
        consumer.close()
    return BrokerSnapshot(
        beginnings={(tp.topic, tp.partition): int(o) for tp, o in beginnings.items()},
        ends={(tp.topic, tp.partition): int(o) for tp, o in ends.items()},
    )


def create_topic(bootstrap: str, topic: str, partitions: int) -> bool:
    """Create topic with an explicit partition count; False when it already exists."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="onceflow-admin")
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        return True
    except TopicAlreadyExistsError:
        return False
    finally:
        admin.close()


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="onceflow-admin")
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
