"""What a publish records in the Iceberg table: ONE snapshot per publish, whose summary
records onceflow.pipeline, onceflow.txid, onceflow.seq, onceflow.attempt and
onceflow.records (the records published: an upsert or merge snapshot rewrites rows, so its
added-records says something else). The current
snapshot's ancestry is the sink's own record of what it published, which step 1 of a commit
reads ("is this seq already published?") and the audit checks against the ledger.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from onceflow.sinks.base import Publication, PublishTarget

SUMMARY_PREFIX = "onceflow."


def snapshot_summary(t: PublishTarget, records: int) -> dict[str, str]:
    """What the snapshot publishing t's `records` records of it."""
    return {
        f"{SUMMARY_PREFIX}pipeline": t.pipeline,
        f"{SUMMARY_PREFIX}txid": t.txid,
        f"{SUMMARY_PREFIX}seq": str(t.seq),
        f"{SUMMARY_PREFIX}attempt": str(t.attempt),
        f"{SUMMARY_PREFIX}records": str(records),
    }


def publications(table: Any, pipeline: str) -> Iterator[Publication]:
    """The pipeline's publications in the current snapshot's ancestry, newest first."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is None or summary[f"{SUMMARY_PREFIX}pipeline"] != pipeline:
            continue
        yield Publication(
            pipeline,
            summary[f"{SUMMARY_PREFIX}txid"],
            int(summary[f"{SUMMARY_PREFIX}seq"]),
            int(summary[f"{SUMMARY_PREFIX}attempt"]),
            # a snapshot of an earlier version records no onceflow.records: an append's
            # added-records are its records
            int(summary[f"{SUMMARY_PREFIX}records"] or summary["added-records"] or 0),
            str(snapshot.snapshot_id),
        )


def newest(table: Any, pipeline: str, seq: int) -> Publication | None:
    """The newest publication of the pipeline's seq in the table, or None."""
    return next((p for p in publications(table, pipeline) if p.seq == seq), None)
