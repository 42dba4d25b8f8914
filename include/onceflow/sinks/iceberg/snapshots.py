"""The Iceberg table's record of its publications: ONE snapshot per publish, whose summary
holds the `onceflow.*` properties (sinks.lake.records); the current snapshot's ancestry is
what step 1 of a commit and the audit read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from onceflow.sinks.base import Publication
from onceflow.sinks.lake.records import publication


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


def newest(table: Any, pipeline: str, seq: int) -> Publication | None:
    """The newest publication of the pipeline's seq in the table, or None."""
    return next((p for p in publications(table, pipeline) if p.seq == seq), None)
