"""The records a stage job read, counted apart from the transform: what the ledger checks.

Process records per attempt the records its reader handed on, their key and value bytes,
and what it read of each input range (onceflow.ledger.range_digest.RangeRead), and the ledger
refuses an attempt whose rows + dead letters do not account for the records read
(ledger.fencing.mark_staged). The reader's Python worker counts input range k as its batches
pass, and records the counts in the ledger once it handed on the range's last batch
(onceflow.ledger.stage_jobs, whose docstring says why they are exact); a range it did not
read to its end is not recorded, so its records cannot count (the stage writer drains a part
it skips).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from onceflow.ledger.range_digest import RangeRead
from onceflow.ledger.stage_jobs import InputRangeRead, StageJobRef, record_range_read
from onceflow.spark.arrow_columns import value_lengths


class RangeTally(Protocol):
    """Where a reader records input range k once read to its end."""

    def record(self, k: int, read: InputRangeRead) -> None: ...


class LedgerTally:
    """RangeTally of a stage job's rows in the ledger (picklable: pickled into the tasks)."""

    def __init__(self, ref: StageJobRef) -> None:
        self.ref = ref

    def record(self, k: int, read: InputRangeRead) -> None:
        record_range_read(self.ref, k, read)


def counted(batches: Iterator[Any], k: int, seen: RangeRead, tally: RangeTally) -> Iterator[Any]:
    """`batches` (input range k's, as the reader hands them on) unchanged; once the last one
    is handed on, their records and key and value bytes, and `seen` (what the read of range k
    saw), recorded in `tally`."""
    records = nbytes = 0
    for batch in batches:
        records += batch.num_rows
        names = batch.schema.names
        nbytes += int(value_lengths(batch.column(names.index("key"))).sum())
        nbytes += int(value_lengths(batch.column(names.index("value"))).sum())
        yield batch
    tally.record(k, InputRangeRead(records, nbytes, seen))
