"""The Iceberg table's data files (where staged files live: onceflow.sinks.lake.files), read
from the snapshots' manifests: a publish that removes files (a re-run, a rewrite) deletes
them by their DataFile entries; expiry deletes the files no remaining snapshot references.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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


def referenced_files(table: Any, snapshots: Iterable[Any]) -> set[str]:
    """The data files any of the snapshots reads."""
    out: set[str] = set()
    seen: set[str] = set()
    for snapshot in snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            entries = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            out.update(e.data_file.file_path for e in entries)
    return out
