"""Offset ranges and the pure planning rules that compute them.

No I/O here: ledger.planning.plan gathers the broker's offsets and the ledger's last ranges and
calls `plan_ranges`, so every rule of the protocol's plan phase is testable without a broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from onceflow.errors import DataLossError, OffsetRegressionError, PartitionRemovedError

TopicPartition = tuple[str, int]


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records of one partition in [from_offset, until_offset).

    `size` is an upper bound, not a count: offsets may be sparse (transaction markers,
    aborted records, compaction), so a reader stops at until_offset, never after `size` records.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        if self.until_offset < self.from_offset:
            raise ValueError(f"range {self} ends before it starts")

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    def to_json(self) -> dict:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from_offset": self.from_offset,
            "until_offset": self.until_offset,
        }

    @classmethod
    def from_json(cls, d: Mapping) -> OffsetRange:
        return cls(
            str(d["topic"]), int(d["partition"]), int(d["from_offset"]), int(d["until_offset"])
        )


@dataclass(frozen=True)
class LossEvent:
    """An interval of a partition that was deleted before it was processed, skipped by policy."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int


@dataclass(frozen=True)
class RangePlan:
    ranges: list[OffsetRange]
    losses: list[LossEvent]
    new_partitions: list[TopicPartition]  # partitions that join the ledger with this batch


def starting_offset(
    position: Literal["earliest", "latest", "time"], beginning: int, end: int, at_time: int | None
) -> int:
    """Where a partition starts at `position`: its first offset, its end, or ("time") the
    first record at or after the time (`at_time`, from ListOffsets by time; None when no
    record is that late: the end), never before its first offset. A new partition's start
    in plan, and a reset's new offset (ledger.resets)."""
    if position == "time":
        return max(beginning, min(end, end if at_time is None else at_time))
    return beginning if position == "earliest" else end


def plan_ranges(
    pipeline: str,
    previous: Mapping[TopicPartition, int],
    beginnings: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    *,
    starting_position: Literal["earliest", "latest", "time"] = "earliest",
    max_records_per_partition: int | None = None,
    on_data_loss: Literal["fail", "skip"] = "fail",
    at_time: Mapping[TopicPartition, int] | None = None,
) -> RangePlan:
    """The next batch's ranges, one per partition the broker has.

    previous: per partition, the until_offset of the pipeline's last planned range (where the
      next range must start); partitions the ledger has never seen are absent.
    beginnings/ends: the broker's first offset and end offset (LATEST, read_committed) now.
    starting_position: where a partition the ledger has never seen starts: its first offset,
      its end, or ("time") its offset in `at_time`, the first record at or after the
      pipeline's starting time (its end when it has none), resolved once, like the others.
    """
    missing = sorted(set(previous) - set(ends))
    if missing:
        topic, partition = missing[0]
        raise PartitionRemovedError(pipeline, topic, partition)

    ranges: list[OffsetRange] = []
    losses: list[LossEvent] = []
    new: list[TopicPartition] = []
    for tp in sorted(ends):
        topic, partition = tp
        end = ends[tp]
        beginning = beginnings.get(tp, 0)
        if tp in previous:
            start = previous[tp]
        else:
            new.append(tp)
            start = starting_offset(starting_position, beginning, end, (at_time or {}).get(tp))
        if end < start:
            raise OffsetRegressionError(pipeline, topic, partition, start, end)
        if start < beginning:
            if on_data_loss != "skip":
                raise DataLossError(pipeline, topic, partition, start, beginning)
            losses.append(LossEvent(topic, partition, start, beginning))
            start = beginning
        until = end
        if max_records_per_partition is not None:
            until = min(end, start + max_records_per_partition)
        ranges.append(OffsetRange(topic, partition, start, until))
    return RangePlan(ranges, losses, new)
