"""One range read with librdkafka (confluent_kafka): the reader's default client.

librdkafka fetches ahead in its own threads and hands over records in bulk, so per call of
consume() the work here is one list comprehension per column, never per-record Python
beyond that. The rules of a complete range are onceflow.reader.range_end's.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from onceflow.kafka.client import KafkaCluster
from onceflow.kafka.options import range_consumer_conf
from onceflow.kafka.range_digest import RangeRead
from onceflow.ranges import OffsetRange
from onceflow.reader.range_end import EOF_GRACE_S, range_failure
from onceflow.reader.record_batches import BATCH_BYTES, RecordBatcher


def read_confluent(
    r: OffsetRange,
    bootstrap: KafkaCluster | str,
    timeout_s: float,
    batch_records: int,
    client_conf: Mapping[str, str],
    consumer_factory: Callable[[dict], Any] | None,
    seen: RangeRead | None,
) -> Iterator[Any]:
    """The Arrow batches of the non-empty range `r` (onceflow.reader.range_fetch.read_range)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    conf: dict[str, Any] = {
        **range_consumer_conf(bootstrap, "onceflow-process"),
        "fetch.wait.max.ms": 100,
        "fetch.max.bytes": 64 << 20,
        "max.partition.fetch.bytes": 16 << 20,
        "receive.message.max.bytes": (64 << 20) + 4096,
        "queued.max.messages.kbytes": 65536,
    }
    conf.update(client_conf)
    consumer = (consumer_factory or Consumer)(conf)
    eof_code = KafkaError._PARTITION_EOF
    fatal_codes = {
        KafkaError.OFFSET_OUT_OF_RANGE,
        KafkaError._AUTO_OFFSET_RESET,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }
    until = r.until_offset
    batch = RecordBatcher(r)
    next_offset = r.from_offset  # every offset below it was delivered or skipped
    last: int | None = None
    progress_at = time.monotonic()
    eof_below: int | None = None  # EOF offset seen below until, if any
    eof_at = 0.0
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.from_offset)])
        done = False
        while not done:
            # consume() returns once it has this many messages, or after its timeout: ask for
            # no more than the range can still hold, so a dense range returns as soon as its
            # last record arrives (asking for batch_records waited out 0.1 s per call)
            msgs = consumer.consume(max(1, min(batch_records, until - next_offset)), 0.1)
            # Bulk work per call, not per record: one list comprehension per column.
            if any([m.error() is not None for m in msgs]):
                for m in msgs:
                    err = m.error()
                    if err is None:
                        continue
                    code = err.code()
                    if code == eof_code:
                        end = m.offset()
                        if end >= until:  # the rest of the range were control records
                            done = True
                        elif eof_below != end:
                            eof_below, eof_at = end, time.monotonic()
                    elif code in fatal_codes or err.fatal():
                        raise range_failure(r, last, f"broker error {err.name()}: {err.str()}")
                    # else transient (transport, leader change): librdkafka retries
                msgs = [m for m in msgs if m.error() is None]
            offsets = [m.offset() for m in msgs]
            if offsets:
                # One partition's records arrive in offset order; cut what lies outside
                # [next_offset, until): the head of a compressed batch before from, and
                # everything from until on (read ahead, never emitted).
                lo = bisect.bisect_left(offsets, next_offset)
                hi = bisect.bisect_left(offsets, until)
                if hi < len(offsets):
                    done = True
                if lo or hi < len(offsets):
                    msgs, offsets = msgs[lo:hi], offsets[lo:hi]
            if offsets:
                if any([a >= b for a, b in zip(offsets, offsets[1:], strict=False)]):
                    raise range_failure(r, last, "the client delivered offsets out of order")
                keys = [m.key() for m in msgs]
                values = [m.value() for m in msgs]
                stamps = [m.timestamp()[1] for m in msgs]
                batch.add(offsets, keys, values, stamps, sum(map(len, msgs)))  # value sizes
                if seen is not None:
                    seen.add(offsets, keys, values, [m.headers() for m in msgs], stamps)
                last = offsets[-1]
                next_offset = last + 1
                done = done or next_offset >= until
                progress_at = time.monotonic()
                if eof_below is not None and next_offset > eof_below:
                    eof_below = None  # records arrived past that partition end
            if len(batch) and (done or len(batch) >= batch_records or batch.nbytes >= BATCH_BYTES):
                yield batch.flush()
                progress_at = time.monotonic()  # time spent downstream is not a stall
            if done:
                break
            now = time.monotonic()
            if eof_below is not None and (
                now - eof_at > min(EOF_GRACE_S, timeout_s) or now - progress_at > timeout_s
            ):
                raise range_failure(
                    r,
                    last,
                    f"partition end (high watermark / last stable offset) is {eof_below}, "
                    "below until: records were lost or the range was planned past the log end",
                )
            if now - progress_at > timeout_s:
                raise range_failure(r, last, f"no progress for {timeout_s:g} s")
        if len(batch):
            yield batch.flush()
    finally:
        consumer.close()
