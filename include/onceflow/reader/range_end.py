"""When a range read is complete, and how it fails when it cannot be: rules every client keeps.

A range ends when the reader reaches until_offset, not after `until - from` records: offsets
may be sparse (transaction markers, aborted records, compaction). Reaching it is proven by the
record at until - 1, by a record beyond until (not emitted), or by partition EOF at an offset
>= until (the range ended with control records). If the broker cannot deliver up to until (the partition ends
below it past kafka.patience.EOF_GRACE_S (a new leader may for a moment report a lower
high watermark than its predecessor did), a broker error no retry mends, no progress for kafka.patience.RANGE_TIMEOUT_S), the
read fails with RangeReadError naming the range and the last offset reached; a range is
never silently cut short.
"""

from __future__ import annotations

from onceflow.errors import RangeReadError
from onceflow.ranges import OffsetRange


def range_failure(r: OffsetRange, last: int | None, why: str) -> RangeReadError:
    """The error of a read of `r` that cannot reach its until_offset; `last`: the last offset
    it handed on, if any."""
    reached = "no record" if last is None else f"last offset reached {last}"
    return RangeReadError(
        f"cannot read range {r.topic}[{r.partition}] from {r.from_offset} until {r.until_offset}: "
        f"{why}; {reached}"
    )
