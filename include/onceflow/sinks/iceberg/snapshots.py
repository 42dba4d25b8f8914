"""The Iceberg table's record of its publications: ONE snapshot per publish, whose summary
holds the `onceflow.*` properties (sinks.lake.records); the current snapshot's ancestry is
what step 1 of a commit and the audit read.

Every snapshot Onceflow makes also carries `onceflow.last-seq`, the highest seq the table
holds (as a Delta table's app transaction does): a first commit of a seq above it reads
nothing more, whatever the length of the history, and the table says its last seq after
maintenance expired the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from onceflow.sinks.lake.records import publication
from onceflow.sinks.outside import Publication


def publications(table: Any, pipeline: str) -> Iterator[Publication]:
    """The pipeline's publications in the current snapshot's ancestry, newest first."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is None:
            continue
        props = summary.additional_properties
        # a snapshot of an earlier version records no onceflow.records: an append's
        # added-records are its records
        ref, at = str(snapshot.snapshot_id), snapshot.timestamp_ms
        found = publication(props, pipeline, ref, at, props.get("added-records"))
        if found is not None:
            yield found


LAST_SEQ = "onceflow.last-seq"


def last_seq(table: Any) -> int | None:
    """The highest seq the table holds, as its current snapshot says (None: no snapshot,
    or one Onceflow did not make)."""
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    value = summary.additional_properties.get(LAST_SEQ) if summary is not None else None
    return int(value) if value is not None else None


def newest(table: Any, pipeline: str, seq: int) -> Publication | None:
    """The newest publication of the pipeline's seq in the table, or None."""
    last = last_seq(table)
    if last is not None and last < seq:
        return None
    return next((p for p in publications(table, pipeline) if p.seq == seq), None)
