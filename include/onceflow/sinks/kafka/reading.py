"""Reading the sink's topics back as a read_committed consumer sees them: records of
aborted transactions and the transactions' control records skipped, nothing past the last
stable offset. Step 1 of a commit reads the commit log so (sinks.kafka.markers), the audit
reads both topics so (sinks.kafka.audit).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from onceflow.errors import SinkUnavailableError
from onceflow.kafka.client import KafkaCluster, watermarks
from onceflow.sinks.kafka import limits


def committed_consumer(bootstrap: KafkaCluster | str, client_id: str) -> Any:
    """A read_committed consumer that joins no group (partitions are assigned)."""
    from confluent_kafka import Consumer

    from onceflow.kafka.options import range_consumer_conf

    return Consumer(range_consumer_conf(bootstrap, client_id))


def read_partition(
    consumer: Any, topic: str, partition: int, start: int, end: int
) -> Iterator[Any]:
    """The committed records of topic[partition] at offsets [start, end) (read_committed:
    aborted records and control records are skipped; `end` is at most the last stable
    offset)."""
    from confluent_kafka import KafkaError, TopicPartition

    if start >= end:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    try:
        while True:
            msg = consumer.poll(limits.TIMEOUT_S)
            if msg is None:
                raise SinkUnavailableError(
                    f"Kafka topic {topic!r}[{partition}]: no record nor end of partition within "
                    f"{limits.TIMEOUT_S:.0f} s while reading offsets [{start}, {end})"
                )
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return
                raise SinkUnavailableError(f"Kafka topic {topic!r}[{partition}]: {err.str()}")
            if msg.offset() >= end:
                return
            yield msg
            if msg.offset() >= end - 1:
                return
    finally:
        consumer.unassign()


def committed_end(consumer: Any, topic: str, partition: int) -> tuple[int, int]:
    """(first offset, last stable offset) of a partition, as a read_committed consumer
    sees it."""
    return watermarks(consumer, topic, partition, limits.TIMEOUT_S)
