"""The Delta table's record of its publications: ONE commit (a table version) per publish,
carrying

- the app transaction (app id = the pipeline, version = the highest seq published), which
  Delta keeps in every snapshot of the table, checkpoints and log clean-up included: the
  table always says the last seq it holds (`last_seq`);
- in its commit info, the `onceflow.*` properties (sinks.lake.records): the table's history
  is what step 1 of a commit and the audit read.

A re-run of an older txid republishes its seq in a newer version; the app transaction keeps
the highest seq, so it never moves back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from onceflow.sinks.lake.records import publication
from onceflow.sinks.outside import Publication


def last_seq(table: Any, pipeline: str) -> int | None:
    """The highest seq of the pipeline the table holds (its app transaction), or None."""
    return table.transaction_version(pipeline)


def publications(table: Any, pipeline: str) -> Iterator[Publication]:
    """The pipeline's publications in the table's history, newest first."""
    for info in table.history():
        found = publication(info, pipeline, str(info["version"]), int(info["timestamp"]))
        if found is not None:
            yield found


def newest(table: Any, pipeline: str, seq: int, txid: str) -> Publication | None:
    """The newest publication of the pipeline's seq (txid's) in the table, or None. The
    history is read only when the app transaction says the seq is there (a commit's retry,
    a re-run): a first commit finds the last seq below its own and reads nothing more.

    A seq the app transaction holds but the history no longer shows (its log entries
    cleaned up) comes back as published by attempt 0, records unknown (-1): no attempt is
    that one, so the commit publishes its attempt again, replacing the txid's files, which
    is what a publication of any attempt holds."""
    last = last_seq(table, pipeline)
    if last is None or last < seq:
        return None
    found = next((p for p in publications(table, pipeline) if p.seq == seq), None)
    return found or Publication(pipeline, txid, seq, 0, -1, "")
