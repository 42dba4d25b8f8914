"""The Iceberg table's live data files (where staged files live: onceflow.sinks.lake.files),
read from the current snapshot's manifests: a publish that removes files (a re-run, a
rewrite) deletes them by their DataFile entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def live_data_files(table: Any) -> Iterator[Any]:
    """The DataFile entries of the current snapshot."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return
    for manifest in snapshot.manifests(table.io):
        yield from (
            e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
        )
