"""The values a chaos run's truth is computed over: the records the broker acknowledged
(Acked, by epoch and coordinates in an AckedMap), the records read back from the sink by
their coordinates (SinkRecord), and the ledger's committed ranges (CommittedRange) with the
index that finds the one holding a coordinate (RangeIndex)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Coord = tuple[int, int, int]  # (epoch, partition, offset)


@dataclass(frozen=True)
class Acked:
    """A record the broker acknowledged: the producer's record number, its key and value."""

    i: int
    key: bytes | None
    value: bytes | None


# epoch -> (partition, offset) -> the record acknowledged there
AckedMap = dict[int, dict[tuple[int, int], Acked]]


@dataclass(frozen=True)
class SinkRecord:
    epoch: int
    partition: int
    offset: int
    kind: str  # "row" (a published row: append, upsert version) or "dead"
    ident: Any  # row: what the content check compares (RowCheck); dead: the stored value


@dataclass(frozen=True)
class CommittedRange:
    txid: str
    seq: int
    epoch: int
    partition: int
    from_offset: int
    until_offset: int


class RangeIndex:
    """The committed range holding a coordinate (ranges of one partition and epoch never
    overlap: the audit's contiguity rule)."""

    def __init__(self, ranges: Iterable[CommittedRange]) -> None:
        by_part: dict[tuple[int, int], list[CommittedRange]] = defaultdict(list)
        for r in ranges:
            if r.until_offset > r.from_offset:
                by_part[(r.epoch, r.partition)].append(r)
        self._ranges = {k: sorted(v, key=lambda r: r.from_offset) for k, v in by_part.items()}
        self._starts = {k: [r.from_offset for r in v] for k, v in self._ranges.items()}

    def locate(self, epoch: int, partition: int, offset: int) -> CommittedRange | None:
        starts = self._starts.get((epoch, partition))
        if not starts:
            return None
        r = self._ranges[(epoch, partition)][bisect.bisect_right(starts, offset) - 1]
        return r if r.from_offset <= offset < r.until_offset else None
