"""The input partitions of a txid: its planned ranges, sorted, each split into pieces, and
small pieces packed together.

Each input partition becomes a stage part (onceflow.staging.fence numbers them), and a part's
fence holds only if the same part holds the same records in every attempt: the split and the
packing depend on nothing but the ranges and the piece size, never on the broker or the
cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from onceflow.ranges import OffsetRange

DEFAULT_RECORDS_PER_INPUT_PARTITION = 250_000
# Pieces share an input partition up to this many offsets: a Spark task costs about what
# reading this many records does (a Python worker's turn, a Kafka consumer, a part's
# transaction; four 250-record ranges took 0.85-0.95 s as four tasks, 0.47 s from one
# partition, on local[2])
PACK_OFFSETS = 10_000


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
    """The pieces of a batch in their fixed order: sorted ranges, each split (piece k is
    the same records in every attempt, as long as the ranges and max_offsets are the same).
    input_partitions packs them."""
    out: list[OffsetRange] = []
    for r in sorted(ranges):
        out.extend(split_range(r, max_offsets))
    return out


def input_partitions(pieces: Sequence[OffsetRange], max_offsets: int) -> list[range]:
    """Which of `pieces` (input_ranges') each input partition reads, in order: consecutive
    pieces packed while their offsets together stay at most min(PACK_OFFSETS, max_offsets),
    so a batch of many small ranges runs few tasks and a piece of `max_offsets` runs alone.

    Input partition j (the Spark partition id, the stage `part`) is element j, in every
    attempt, as long as the pieces and max_offsets are the same.
    """
    limit = min(PACK_OFFSETS, max_offsets)
    out: list[range] = []
    start = total = 0
    for k, piece in enumerate(pieces):
        if k > start and total + piece.size > limit:
            out.append(range(start, k))
            start, total = k, 0
        total += piece.size
    if pieces:
        out.append(range(start, len(pieces)))
    return out
