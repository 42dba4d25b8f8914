"""The input partitions of a txid: its planned ranges, sorted, each split into pieces.

Each input partition becomes a stage part (onceflow.staging.fence numbers them), and a part's
fence holds only if the same part holds the same records in every attempt: the split depends on nothing but the ranges and
the piece size, never on the broker or the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable

from onceflow.ranges import OffsetRange

DEFAULT_RECORDS_PER_INPUT_PARTITION = 250_000


def split_range(r: OffsetRange, max_offsets: int) -> list[OffsetRange]:
    """Split a range into consecutive sub-ranges of at most `max_offsets` offsets.

    Like Spark's minPartitions for Kafka, but by offsets: sparse offsets make some pieces hold
    fewer records. An empty range gives no piece (it must open no consumer).
    """
    if max_offsets <= 0:
        raise ValueError(f"max_offsets must be positive, got {max_offsets}")
    return [
        OffsetRange(r.topic, r.partition, start, min(start + max_offsets, r.until_offset))
        for start in range(r.from_offset, r.until_offset, max_offsets)
    ]


def input_ranges(ranges: Iterable[OffsetRange], max_offsets: int) -> list[OffsetRange]:
    """The input partitions of a batch in their fixed order: sorted ranges, each split.

    Input partition k (the Spark partition id, the stage `part`) is element k, in every
    attempt, as long as the ranges and max_offsets are the same.
    """
    out: list[OffsetRange] = []
    for r in sorted(ranges):
        out.extend(split_range(r, max_offsets))
    return out
