"""One commit's transactional producer (KIP-98): ONE per commit, whose `transactional.id` is
stable per pipeline (`onceflow-<pipeline>`), so that the broker's epoch fences every earlier
committer of the pipeline when it starts (sinks.kafka: KafkaSink.read), and the output
records and the marker it produces commit together or not at all.

Its settings: idempotent, acks from every replica, keys partitioned as Java clients do, and
the topics' size limit, so that a record too large fails at produce, naming its source,
rather than a batch the broker refuses.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from onceflow.kafka.client import KafkaCluster
from onceflow.ledger.attempt import Attempt
from onceflow.sinks.kafka import limits
from onceflow.sinks.kafka.failures import too_large
from onceflow.sinks.kafka.output_records import record_headers
from onceflow.sinks.kafka.reading import committed_consumer, committed_end

log = logging.getLogger("onceflow.sinks.kafka")


def transactional_id(pipeline: str) -> str:
    """The pipeline's stable transactional.id: one per pipeline, so the broker's epoch
    fences an earlier committer of it."""
    return f"onceflow-{pipeline}"


@dataclass
class Session:
    """Step 1's producer: fenced in (init_transactions) before the marker was read."""

    producer: Any
    partitions: int  # the output topic's


def transactional_producer(cluster: KafkaCluster, pipeline: str, limit: int) -> Any:
    """The pipeline's transactional producer (not yet initialised); `limit`: the smaller
    max.message.bytes of the output topic and the commit log."""
    from confluent_kafka import Producer

    return Producer(
        cluster.librdkafka_conf(
            {
                "transactional.id": transactional_id(pipeline),
                "enable.idempotence": True,
                "acks": "all",
                "partitioner": "murmur2_random",  # a key's partition as Java clients pick it
                "transaction.timeout.ms": limits.TRANSACTION_TIMEOUT_MS,
                "message.timeout.ms": int(limits.TIMEOUT_S * 1000),
                "linger.ms": 5,
                # the topics' limit: a record above it fails at produce, naming it, and no
                # batch of smaller ones exceeds it (the broker would refuse the batch)
                "message.max.bytes": limit,
                "batch.size": max(1, min(1_000_000, limit - limits.BATCH_OVERHEAD)),
                "client.id": f"onceflow-commit-{pipeline}",
            }
        )
    )


def produce(
    producer: Any, topic: str, delivered: Any, record: tuple, t: Attempt, where: str
) -> None:
    """Produce one output record (sinks.kafka.output_records.staged_records), waiting for
    room in the producer's queue; a record too large is SinkRejectedError naming its source.
    `where`: the sink, as errors name it."""
    from confluent_kafka import KafkaError, KafkaException

    source, key, value, partition = record
    headers = record_headers(source, t)
    kwargs = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(
                topic,
                value=value,
                key=key,
                headers=headers,
                on_delivery=delivered,
                **kwargs,
            )
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.5)
        except KafkaException as e:
            if e.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise too_large(where, source, len(value), t) from e
            raise


def await_visible(cluster: KafkaCluster, where: str, last: dict[tuple[str, int], int]) -> None:
    """Wait until read_committed consumers see the transaction's records (`last`: the last
    offset written per (topic, partition)): the broker writes the commit markers after
    commit_transaction returns, so the last stable offsets trail it for a moment. The commit
    happened either way; past TIMEOUT_S this only logs."""
    deadline = time.monotonic() + limits.TIMEOUT_S
    consumer = committed_consumer(cluster, "onceflow-commit-visible")
    try:
        for (topic, partition), offset in sorted(last.items()):
            while committed_end(consumer, topic, partition)[1] <= offset:
                if time.monotonic() > deadline:
                    log.warning(
                        "%s: %s[%d]@%d not yet visible to read_committed consumers after "
                        "%.0f s (committed all the same)",
                        where,
                        topic,
                        partition,
                        offset,
                        limits.TIMEOUT_S,
                    )
                    return
                time.sleep(0.02)
    except Exception as e:  # noqa: BLE001 - the commit stands; only the wait failed
        log.warning("%s: could not check that the commit is visible: %s", where, e)
    finally:
        consumer.close()
