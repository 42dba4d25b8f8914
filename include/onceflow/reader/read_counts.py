"""The records a stage job read, counted apart from the transform: what the ledger checks.

Process records per attempt the records its reader handed on, their key and value bytes,
and what it read of each input range (onceflow.range_digest.RangeRead), and the ledger
refuses an attempt whose rows + dead letters do not account for the records read
(ledger.fencing.mark_staged). The counts go through Spark accumulators, added in the reader's
Python worker as batches pass: Spark applies a result task's accumulator updates once per
partition, from its first successful attempt, so a batch's count is exact as long as every
task reads its range to the end (the stage writer drains a part it skips).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.accumulators import AccumulatorParam

from onceflow.arrow_columns import value_lengths
from onceflow.range_digest import RangeRead


class ReadsParam(AccumulatorParam):
    """A Spark accumulator of {input range k: RangeRead}. Range k is read whole by one task,
    and reading it again (a retried task, a recomputed cache) gives the same value, so
    merging by key is exact however often Spark applies a task's update."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, value1: dict, value2: dict) -> dict:
        value1.update(value2)
        return value1


def counted(
    batches: Iterator[Any],
    k: int,
    seen: RangeRead | None,
    *,
    counter: Any,
    bytes_counter: Any,
    reads: Any,
) -> Iterator[Any]:
    """`batches` (input range k's, as the reader hands them on) unchanged, each one added to
    `counter` (records) and `bytes_counter` (key and value bytes) if given; once the last
    one is handed on, `seen` (what the read of range k saw) added to `reads` as {k: seen}."""
    for batch in batches:
        if counter is not None:
            counter.add(batch.num_rows)
        if bytes_counter is not None:
            names = batch.schema.names
            nbytes = value_lengths(batch.column(names.index("key"))).sum()
            nbytes += value_lengths(batch.column(names.index("value"))).sum()
            bytes_counter.add(int(nbytes))
        yield batch
    if seen is not None:  # only a range read to its end is recorded
        reads.add({k: seen})
