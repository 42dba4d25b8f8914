"""One range read with kafka-python: the pure-Python fallback (~30x slower than librdkafka).

Same rules as onceflow.reader.librdkafka_fetch (onceflow.reader.range_end), through
kafka-python's API: it reports no partition EOF, so the end of a range that ends in control
records is seen from the consumer's position, and a partition that ends below until from
its high watermark.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from onceflow.kafka.client import KafkaCluster, cluster_of
from onceflow.kafka.patience import EOF_GRACE_S
from onceflow.ledger.range_digest import RangeRead
from onceflow.ranges import OffsetRange
from onceflow.reader.range_end import range_failure
from onceflow.reader.record_batches import BATCH_BYTES, RecordBatcher


def read_kafka_python(
    r: OffsetRange,
    bootstrap: KafkaCluster | str,
    timeout_s: float,
    batch_records: int,
    client_conf: Mapping[str, str],
    consumer_factory: Callable[..., Any] | None,
    seen: RangeRead | None,
) -> Iterator[Any]:
    """The Arrow batches of the non-empty range `r` (onceflow.reader.range_fetch.read_range)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka import errors as kerrors

    conf: dict[str, Any] = {
        **cluster_of(bootstrap).kafka_python(),
        "group_id": None,
        "enable_auto_commit": False,
        "isolation_level": "read_committed",
        "auto_offset_reset": "none",
        "fetch_max_wait_ms": 100,
        "max_partition_fetch_bytes": 16 << 20,
        "fetch_max_bytes": 64 << 20,
        "client_id": "onceflow-process",
    }
    conf.update({k.replace(".", "_"): v for k, v in client_conf.items()})
    consumer = (consumer_factory or KafkaConsumer)(**conf)
    tp = TopicPartition(r.topic, r.partition)
    until = r.until_offset
    batch = RecordBatcher(r)
    next_offset = r.from_offset
    last: int | None = None
    progress_at = time.monotonic()
    eof_at: float | None = None
    try:
        consumer.assign([tp])
        consumer.seek(tp, r.from_offset)
        done = False
        while not done:
            try:
                recs = consumer.poll(timeout_ms=500, max_records=batch_records).get(tp, [])
            except (kerrors.OffsetOutOfRangeError, kerrors.NoOffsetForPartitionError) as e:
                raise range_failure(r, last, f"offset out of range: {e}") from None
            except kerrors.KafkaError as e:
                if getattr(e, "retriable", False):
                    continue
                raise range_failure(r, last, f"broker error {type(e).__name__}: {e}") from None
            for rec in recs:
                o = rec.offset
                if o >= until:
                    done = True
                    break
                if o < next_offset:
                    continue
                stamp = -1 if rec.timestamp is None else rec.timestamp
                batch.add([o], [rec.key], [rec.value], [stamp], len(rec.value or b""))
                if seen is not None:
                    seen.add([o], [rec.key], [rec.value], [rec.headers], [stamp])
                next_offset = o + 1
                last = o
            done = done or next_offset >= until
            now = time.monotonic()
            if recs:
                progress_at, eof_at = now, None
            elif not done:
                # No record: at the partition end the position has moved past any control
                # records, so position >= until means the range is complete.
                position = consumer.position(tp)
                if position is not None and position >= until:
                    done = True
                else:
                    hw = consumer.highwater(tp)
                    if hw is not None and hw < until and (position is None or position >= hw):
                        eof_at = eof_at or now
                        if now - eof_at > min(EOF_GRACE_S, timeout_s):
                            raise range_failure(
                                r, last, f"partition end (high watermark) is {hw}, below until"
                            )
            if len(batch) and (done or len(batch) >= batch_records or batch.nbytes >= BATCH_BYTES):
                yield batch.flush()
            if not done and now - progress_at > timeout_s:
                raise range_failure(r, last, f"no progress for {timeout_s:g} s")
        if len(batch):
            yield batch.flush()
    finally:
        consumer.close()
