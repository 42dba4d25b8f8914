"""Topics' end offsets, read again and again by one long-lived client: the `on_records`
watcher's view of the broker (onceflow.airflow.records_trigger).

One ListOffsets request per look, read_committed (the last stable offset: records of an
open transaction are not counted yet); the partitions come from the client's metadata,
refreshed every WATCH_METADATA_EVERY_S (when a pattern's new topics appear) or while a topic
is missing. Plan does not trust these
ends (kafka.broker.fetchable_ends): the watcher only decides when to start a run, and plan
decides what it reads.
"""

from __future__ import annotations

import time

from kafka import KafkaConsumer, TopicPartition

from onceflow.config.topic_pattern import TopicPattern
from onceflow.kafka.broker import topic_partitions
from onceflow.kafka.client import KafkaCluster
from onceflow.kafka.patience import WATCH_METADATA_EVERY_S, WATCH_REQUEST_TIMEOUT_MS
from onceflow.ranges import TopicPartition as Tp


class EndOffsets:
    def __init__(self, cluster: KafkaCluster, topics: tuple[str | TopicPattern, ...]) -> None:
        self.cluster = cluster
        self.topics = topics  # a pattern's: those on the broker at each metadata refresh
        self._consumer: KafkaConsumer | None = None
        self._parts: list[TopicPartition] = []
        self._missing: list[str] = [str(t) for t in topics]
        self._refreshed = float("-inf")

    def _client(self) -> KafkaConsumer:
        if self._consumer is None:
            self._consumer = KafkaConsumer(
                **self.cluster.kafka_python(
                    group_id=None,
                    enable_auto_commit=False,
                    isolation_level="read_committed",
                    request_timeout_ms=WATCH_REQUEST_TIMEOUT_MS,
                    client_id="onceflow-watch",
                )
            )
        return self._consumer

    def read(self) -> tuple[dict[Tp, int], list[str]]:
        """(end offset per partition, topics the broker does not have)."""
        consumer = self._client()
        if self._missing or time.monotonic() - self._refreshed > WATCH_METADATA_EVERY_S:
            parts = topic_partitions(consumer, self.topics)  # a metadata request
            self._parts = [tp for tps in parts.values() for tp in tps]
            self._missing = [topic for topic, tps in parts.items() if not tps]
            self._refreshed = time.monotonic()
        ends = consumer.end_offsets(self._parts) if self._parts else {}
        return {(tp.topic, tp.partition): int(o) for tp, o in ends.items()}, list(self._missing)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
