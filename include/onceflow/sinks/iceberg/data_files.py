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
        if _only_deletes(manifest):
            continue
        yield from (
            e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
        )


def _only_deletes(manifest: Any) -> bool:
    """Whether a manifest lists deleted files only (nothing to read). pyiceberg 0.12 carries
    an overwrite's manifest of deleted entries into every later snapshot, so a table
    rewritten every batch holds one more of them per commit."""
    added, existing = manifest.added_files_count, manifest.existing_files_count
    return added == 0 and existing == 0


def referenced_files(table: Any, snapshots: Iterable[Any]) -> set[str]:
    """The data files any of the snapshots reads."""
    out: set[str] = set()
    seen: set[str] = set()
    for snapshot in snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen or _only_deletes(manifest):
                continue
            seen.add(manifest.manifest_path)
            entries = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            out.update(e.data_file.file_path for e in entries)
    return out


def data_file(table: Any, uri: str, partition: tuple) -> Any:
    """The DataFile entry of a Parquet file of the table's schema holding the rows of ONE
    partition (pyiceberg's parquet_file_to_data_file infers a partition from the column
    statistics, which a bucket cannot be inferred from)."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    input_file = table.io.new_input(uri)
    with input_file.open() as stream:
        metadata = pq.read_metadata(stream)
    schema = table.metadata.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata,
        stats_columns=compute_statistics_plan(schema, table.metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=uri,
        file_format=FileFormat.PARQUET,
        partition=Record(*partition),
        file_size_in_bytes=len(input_file),
        sort_order_id=None,
        spec_id=table.metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
