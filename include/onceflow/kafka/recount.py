"""Count the records the broker holds in committed ranges, and digest them, for `audit --reread`.

Deliberately independent of onceflow.reader (the code it checks): a plain consumer per partition
that counts delivered records with from_offset <= offset < until_offset. Each range's records
are also digested as process digested what it read (onceflow.ledger.range_digest), so the audit
compares their content, not only their number: a log replaced by another of the same length
(a topic re-created and refilled) is found.

Records of committed ranges that retention has deleted since (the partition's first offset is
now past the range's start) cannot be counted again: their txids are reported as `gone`, and
the audit keeps the ledger's count for them and says how many it could not re-read.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, TopicPartition

from onceflow.errors import RangeReadError
from onceflow.kafka.client import KafkaCluster, cluster_of, watermarks
from onceflow.ledger.range_digest import RangeRead


class _Range(Protocol):
    txid: str
    topic: str
    partition: int
    from_offset: int
    until_offset: int


@dataclass
class Recount:
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # records per txid
    gone: set[str] = field(default_factory=set)  # txids with records deleted by retention
    # per (txid, topic, partition): the range's records as the broker holds them now
    reads: dict[tuple[str, str, int], RangeRead] = field(default_factory=dict)


def count_records(
    bootstrap: KafkaCluster | str,
    ranges: Iterable[_Range],
    timeout_s: float = 60.0,
    on_records: Callable[[str, list[Any]], None] | None = None,
) -> Recount:
    """Records per txid. Ranges of one partition are read in one sequential pass;
    `on_records(txid, messages)`, when given, sees each range's records as they are read (the
    audit decodes a registry format's: onceflow.formats.reread_check)."""
    by_tp: dict[tuple[str, int], list[_Range]] = defaultdict(list)
    for r in ranges:
        if r.until_offset > r.from_offset:
            by_tp[(r.topic, r.partition)].append(r)
    result = Recount()
    counts = result.counts
    if not by_tp:
        return result
    conf = cluster_of(bootstrap).librdkafka_conf(
        {
            "group.id": "onceflow-audit",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
            "auto.offset.reset": "error",
        }
    )
    # A consumer per partition, never one re-assigned from partition to partition: librdkafka
    # before 2.16 can abort the process (assertion `rktp->rktp_started`, a duplicate FETCH_STOP
    # on an assignment's removal, confluentinc/librdkafka#5573), which the compatibility
    # matrix's floor and behind cells met here.
    for (topic, partition), rs in sorted(by_tp.items()):
        consumer = Consumer(conf)
        try:
            first, _ = watermarks(consumer, topic, partition, timeout_s)
            result.gone.update(r.txid for r in rs if r.from_offset < first)
            rs = [r for r in rs if r.from_offset >= first]
            if not rs:
                continue
            rs.sort(key=lambda r: r.from_offset)
            lo, hi = rs[0].from_offset, max(r.until_offset for r in rs)
            starts = [r.from_offset for r in rs]
            seen = [RangeRead(topic, partition) for _ in rs]
            consumer.assign([TopicPartition(topic, partition, lo)])
            deadline = time.monotonic() + timeout_s
            position = lo
            while position < hi:
                msgs = consumer.consume(10_000, 1.0)
                found: dict[int, list] = defaultdict(list)
                if not msgs and time.monotonic() > deadline:
                    raise RangeReadError(
                        f"audit re-read of {topic}[{partition}] stalled at offset {position}, "
                        f"before {hi}: the broker no longer holds the committed ranges"
                    )
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            _, high = consumer.get_watermark_offsets(
                                TopicPartition(topic, partition), cached=True
                            )
                            if high >= hi:
                                position = hi  # the rest are control or aborted records
                                break
                            raise RangeReadError(
                                f"audit re-read of {topic}[{partition}]: the broker ends at {high}, "
                                f"below the committed offset {hi}"
                            )
                        raise RangeReadError(f"audit re-read of {topic}[{partition}]: {err}")
                    off = m.offset()
                    if off >= hi:
                        position = hi
                        break
                    position = off + 1
                    i = _find(starts, off)
                    if i is not None and off < rs[i].until_offset:
                        counts[rs[i].txid] += 1
                        found[i].append(m)
                for i, ms in found.items():
                    if on_records is not None:
                        on_records(rs[i].txid, ms)
                    seen[i].add(
                        [m.offset() for m in ms],
                        [m.key() for m in ms],
                        [m.value() for m in ms],
                        [m.headers() for m in ms],
                        [m.timestamp()[1] for m in ms],
                    )
                deadline = time.monotonic() + timeout_s if msgs else deadline
            for r, read in zip(rs, seen, strict=True):
                result.reads[(r.txid, topic, partition)] = read
        finally:
            consumer.close()
    for txid in result.gone:  # partly re-read: the ledger's count stands for the whole txid
        counts.pop(txid, None)
        for key in [k for k in result.reads if k[0] == txid]:
            del result.reads[key]
    return result


def _find(starts: list[int], offset: int) -> int | None:
    """Index of the last range starting at or before offset (bisect)."""
    import bisect

    i = bisect.bisect_right(starts, offset) - 1
    return i if i >= 0 else None
