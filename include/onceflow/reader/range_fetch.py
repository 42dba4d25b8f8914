"""One range read from Kafka, with the client chosen: what every reading path calls.

Usable without Spark (tests, audits, benchmarks): it yields the range's records as Arrow
batches and knows nothing of partitions, counts or stages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from onceflow.kafka.client import KafkaCluster
from onceflow.kafka.patience import RANGE_TIMEOUT_S
from onceflow.ledger.range_digest import RangeRead
from onceflow.ranges import OffsetRange
from onceflow.reader.kafka_python_fetch import read_kafka_python
from onceflow.reader.librdkafka_fetch import read_confluent
from onceflow.reader.record_batches import DEFAULT_BATCH_RECORDS

CLIENTS = ("confluent", "kafka-python")


def read_range(
    r: OffsetRange,
    bootstrap: KafkaCluster | str,
    *,
    client: str = "confluent",
    timeout_s: float = RANGE_TIMEOUT_S,
    batch_records: int = DEFAULT_BATCH_RECORDS,
    client_conf: Mapping[str, str] | None = None,
    consumer_factory: Callable[[dict], Any] | None = None,
    seen: RangeRead | None = None,
) -> Iterator[Any]:
    """Yield the range's records as pyarrow.RecordBatch objects (record_batches.SCHEMA), in
    offset order.

    `consumer_factory` replaces the client's consumer class, so tests can replay what only a
    real Kafka does (aborted records, truncation). `seen`, if given, takes in every record
    handed on (RangeRead.add: headers included). An empty range opens no consumer.
    """
    if r.size == 0:
        return iter(())
    if client == "confluent":
        return read_confluent(
            r, bootstrap, timeout_s, batch_records, client_conf or {}, consumer_factory, seen
        )
    if client == "kafka-python":
        return read_kafka_python(
            r, bootstrap, timeout_s, batch_records, client_conf or {}, consumer_factory, seen
        )
    raise ValueError(f"client {client!r} is not one of {CLIENTS}")
