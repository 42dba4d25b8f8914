"""Range reads with librdkafka (confluent_kafka): the reader's default client.

librdkafka fetches ahead in its own threads and hands over records in bulk, so per call of
consume() the work here is one list comprehension per column, never per-record Python
beyond that. The rules of a complete range are onceflow.reader.range_end's, kept per range
by a _Cursor: `read_confluent` reads one range with a consumer of its own, streaming its
batches; `read_together` reads the small ranges of one input partition, each of its own
partition, with one consumer assigned all of them at once (a consumer each, one after the
other, took 12-20 ms per range: about 1.3 s for 100 partitions of 10 records, 0.12-0.14 s
together).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from onceflow.kafka.client import KafkaCluster
from onceflow.kafka.options import range_consumer_conf
from onceflow.kafka.patience import EOF_GRACE_S
from onceflow.ledger.range_digest import RangeRead
from onceflow.ranges import OffsetRange
from onceflow.reader.range_end import range_failure
from onceflow.reader.record_batches import BATCH_BYTES, RecordBatcher


def _consumer_conf(bootstrap: KafkaCluster | str, client_conf: Mapping[str, str]) -> dict:
    conf: dict[str, Any] = {
        **range_consumer_conf(bootstrap, "onceflow-process"),
        "fetch.wait.max.ms": 100,
        "fetch.max.bytes": 64 << 20,
        "max.partition.fetch.bytes": 16 << 20,
        "receive.message.max.bytes": (64 << 20) + 4096,
        "queued.max.messages.kbytes": 65536,
    }
    conf.update(client_conf)
    return conf


def _fatal_codes() -> set[int]:
    """The broker errors no retry of librdkafka's mends: they fail the range."""
    from confluent_kafka import KafkaError

    return {
        KafkaError.OFFSET_OUT_OF_RANGE,
        KafkaError._AUTO_OFFSET_RESET,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }


class _Cursor:
    """How far the read of range `r` got: its records so far (an Arrow batch in the making),
    the next offset it waits for, and the partition end it met below until, if any."""

    def __init__(
        self, r: OffsetRange, batch_records: int, timeout_s: float, seen: RangeRead | None
    ) -> None:
        from confluent_kafka import KafkaError

        self.r = r
        self.until = r.until_offset
        self.batch_records = batch_records
        self.timeout_s = timeout_s
        self.seen = seen
        self.batch = RecordBatcher(r)
        self.next_offset = r.from_offset  # every offset below it was delivered or skipped
        self.last: int | None = None
        self.progress_at = time.monotonic()
        self.eof_below: int | None = None  # EOF offset seen below until, if any
        self.eof_at = 0.0
        self.done = False
        self.eof_code = KafkaError._PARTITION_EOF

    def wanted(self) -> int:
        """How many records the range can still hold: consume() returns once it has as many
        as asked, or after its timeout, so a dense range returns as soon as its last record
        arrives (asking for batch_records waited out 0.1 s per call)."""
        return max(0, self.until - self.next_offset)

    def event(self, err: Any, offset: int, fatal_codes: set[int]) -> None:
        """An error event of the range's partition: its end, or a broker error."""
        code = err.code()
        if code == self.eof_code:
            if offset >= self.until:  # the rest of the range were control records
                self.done = True
            elif self.eof_below != offset:
                self.eof_below, self.eof_at = offset, time.monotonic()
        elif code in fatal_codes or err.fatal():
            raise range_failure(self.r, self.last, f"broker error {err.name()}: {err.str()}")
        # else transient (transport, leader change): librdkafka retries

    def take(self, msgs: list[Any]) -> None:
        """Records of the range's partition, as the client delivered them."""
        offsets = [m.offset() for m in msgs]
        if offsets:
            # One partition's records arrive in offset order; cut what lies outside
            # [next_offset, until): the head of a compressed batch before from, and
            # everything from until on (read ahead, never emitted).
            lo = bisect.bisect_left(offsets, self.next_offset)
            hi = bisect.bisect_left(offsets, self.until)
            if hi < len(offsets):
                self.done = True
            if lo or hi < len(offsets):
                msgs, offsets = msgs[lo:hi], offsets[lo:hi]
        if not offsets:
            return
        if any([a >= b for a, b in zip(offsets, offsets[1:], strict=False)]):
            raise range_failure(self.r, self.last, "the client delivered offsets out of order")
        keys = [m.key() for m in msgs]
        values = [m.value() for m in msgs]
        stamps = [m.timestamp()[1] for m in msgs]
        self.batch.add(offsets, keys, values, stamps, sum(map(len, msgs)))  # value sizes
        if self.seen is not None:
            self.seen.add(offsets, keys, values, [m.headers() for m in msgs], stamps)
        self.last = offsets[-1]
        self.next_offset = self.last + 1
        self.done = self.done or self.next_offset >= self.until
        self.progress_at = time.monotonic()
        if self.eof_below is not None and self.next_offset > self.eof_below:
            self.eof_below = None  # records arrived past that partition end

    def full(self) -> bool:
        """Whether the batch in the making is to be handed on now."""
        n = len(self.batch)
        return bool(n) and (
            self.done or n >= self.batch_records or self.batch.nbytes >= BATCH_BYTES
        )

    def flush(self) -> Any:
        batch = self.batch.flush()
        self.progress_at = time.monotonic()  # time spent downstream is not a stall
        return batch

    def check(self, now: float) -> None:
        """Fail the range that cannot reach its until (range_end's rule)."""
        if self.eof_below is not None and (
            now - self.eof_at > min(EOF_GRACE_S, self.timeout_s)
            or now - self.progress_at > self.timeout_s
        ):
            raise range_failure(
                self.r,
                self.last,
                f"partition end (high watermark / last stable offset) is {self.eof_below}, "
                "below until: records were lost or the range was planned past the log end",
            )
        if now - self.progress_at > self.timeout_s:
            raise range_failure(self.r, self.last, f"no progress for {self.timeout_s:g} s")


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
    from confluent_kafka import Consumer, TopicPartition

    consumer = (consumer_factory or Consumer)(_consumer_conf(bootstrap, client_conf))
    fatal_codes = _fatal_codes()
    cursor = _Cursor(r, batch_records, timeout_s, seen)
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.from_offset)])
        while True:
            msgs = consumer.consume(max(1, min(batch_records, cursor.wanted())), 0.1)
            # Bulk work per call, not per record: one list comprehension per column.
            if any([m.error() is not None for m in msgs]):
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        cursor.event(err, m.offset(), fatal_codes)
                msgs = [m for m in msgs if m.error() is None]
            cursor.take(msgs)
            if cursor.full():
                yield cursor.flush()
            if cursor.done:
                break
            cursor.check(time.monotonic())
    finally:
        consumer.close()


def read_together(
    ranges: list[OffsetRange],
    bootstrap: KafkaCluster | str,
    timeout_s: float,
    batch_records: int,
    client_conf: Mapping[str, str],
    seen: list[RangeRead | None],
    consumer_factory: Callable[[dict], Any] | None = None,
) -> list[list[Any]]:
    """The Arrow batches of each of the non-empty `ranges`, each of a partition of its own,
    read at once by one consumer assigned all of them; `seen[i]` takes in what the read of
    ranges[i] handed on, as read_range's `seen`. Each range ends by its own rules; a range
    done is paused, so nothing past it is fetched. The batches are kept until every range is
    read: for the ranges of one input partition, which together hold a bounded number of
    offsets (onceflow.reader.input_ranges.PACK_OFFSETS)."""
    from confluent_kafka import Consumer, TopicPartition

    if len({r.tp for r in ranges}) < len(ranges):
        raise ValueError("ranges read together must each be of a partition of its own")
    consumer = (consumer_factory or Consumer)(_consumer_conf(bootstrap, client_conf))
    fatal_codes = _fatal_codes()
    cursors = {
        r.tp: _Cursor(r, batch_records, timeout_s, s) for r, s in zip(ranges, seen, strict=True)
    }
    out: dict[tuple[str, int], list[Any]] = {r.tp: [] for r in ranges}
    reading = dict(cursors)
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.from_offset) for r in ranges])
        while reading:
            wanted = sum(c.wanted() for c in reading.values())
            msgs = consumer.consume(max(1, min(batch_records, wanted)), 0.1)
            by_tp: dict[tuple[str, int], list[Any]] = {}
            for m, tp in zip(msgs, [(m.topic(), m.partition()) for m in msgs], strict=True):
                cursor = reading.get(tp)
                err = m.error()
                if err is None:
                    if cursor is not None:  # else the rest of a range done: never emitted
                        by_tp.setdefault(tp, []).append(m)
                elif cursor is not None:
                    cursor.event(err, m.offset(), fatal_codes)
                elif tp not in cursors and (err.code() in fatal_codes or err.fatal()):
                    # not of one partition (a topic's, the client's): the first range it
                    # stops, of that topic if any
                    first = next((c for c in reading.values() if c.r.topic == tp[0]), None)
                    first = first or next(iter(reading.values()))
                    first.event(err, m.offset(), fatal_codes)
            for tp, partition_msgs in by_tp.items():
                reading[tp].take(partition_msgs)
            now = time.monotonic()
            for tp, cursor in list(reading.items()):
                if cursor.full():
                    out[tp].append(cursor.flush())
                if cursor.done:
                    del reading[tp]
                    consumer.pause([TopicPartition(*tp)])
                else:
                    cursor.check(now)
    finally:
        consumer.close()
    return [out[r.tp] for r in ranges]
