"""The Iceberg table's data files (where they live: onceflow.sinks.lake_files): Parquet
files of the table's schema as bound (field ids included), one per part with valid rows.
A re-run's publish removes the txid's live files, found here by their folder in the
current snapshot; file cleanup asks which attempts a snapshot recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from onceflow.sinks import lake_files
from onceflow.sinks.base import StagedFiles
from onceflow.sinks.iceberg.snapshots import publications


def live_files(table: Any, pipeline: str, txid: str) -> Iterator[Any]:
    """The txid's data files in the current snapshot (by their folder)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return
    prefix = lake_files.txid_prefix(table.location(), pipeline, txid)
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.data_file.file_path.startswith(prefix):
                yield entry.data_file


def files_on_storage(table: Any, pipeline: str, txids: set[str]) -> StagedFiles:
    """The Parquet files under the txids' folders, and the (txid, attempt) pairs a snapshot
    in the table's history records."""
    published = {(p.txid, p.attempt) for p in publications(table, pipeline)}
    return lake_files.files_on_storage(table.location(), pipeline, txids, published)
