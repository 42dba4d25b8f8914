"""Copy-on-write for a lake upsert or merge table: the data files holding a key a txid
touches are read whole, their rows decided again (sinks.lake.upsert, sinks.lake.merge),
written as one new data file, and ONE table commit removes the old files and adds the new
one. The commit's cost is the touched files' size, not the table's: a table partitioned so
that a batch's keys fall into few files rewrites little.

Why copy-on-write rather than Iceberg's position deletes or delta-rs's own MERGE: readers
of a copy-on-write table need nothing beyond plain Parquet (every engine reads it, and
pyiceberg 0.12 cannot write delete files); one rule, in Arrow, serves both formats, so
Iceberg and Delta agree with the PostgreSQL modes row for row; and the files and the
commit are Onceflow's own, so the commit records the seq and attempt in the same atomic
commit as for append (measured: `make bench`, lake section).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from onceflow.sinks.lake.partitions import Partitioner
from onceflow.sinks.lake.storage import Storage


def touched_files(
    live: Sequence[str], schema: Any, keys: Any, key: Sequence[str], storage: Storage
) -> list[str]:
    """The live data files (URIs) holding a row of one of the keys (a table of the key
    columns)."""
    import pyarrow.compute as pc

    if not live or keys.num_rows == 0:
        return []
    by_path = {storage.filesystem(uri)[1]: uri for uri in live}
    first = key[0]
    files = storage.dataset(list(live), schema)
    scanned = files.to_table(
        columns=[*key, "__filename"], filter=pc.field(first).isin(keys.column(first))
    )
    distinct = keys.group_by(list(key), use_threads=False).aggregate([])
    distinct = distinct.select(list(key)).cast(scanned.select(list(key)).schema)
    hit = scanned.join(distinct, list(key), join_type="left semi", use_threads=False)
    return sorted(by_path[p] for p in set(hit.column("__filename").to_pylist()))


def write_files(
    directory: str, rows: Any, schema: Any, partitioner: Partitioner | None, storage: Storage
) -> list[tuple[str, int]]:
    """The rows as Parquet data files of the table's `schema` in `directory` (a URI), one
    per partition: (URI, rows) of each."""
    out = []
    for _, mine in partitioner.split(rows) if partitioner else [((), rows)]:
        if mine.num_rows:
            uri = f"{directory.rstrip('/')}/rewrite-{uuid.uuid4().hex}.parquet"
            out.append(write_path(uri, mine, schema, storage))
    return out


def write_path(uri: str, rows: Any, schema: Any, storage: Storage) -> tuple[str, int]:
    """The rows as the Parquet data file `uri` of the table's `schema`: (uri, rows)."""
    import pyarrow.parquet as pq

    filesystem, path = storage.filesystem(uri)
    filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with filesystem.open_output_stream(path) as out:
        pq.write_table(rows.select(schema.names).cast(schema), out, compression="zstd")
    return uri, rows.num_rows


def rewrite_keys(new: Any, old: Any, key: list[str]) -> Any:
    """The keys a txid touches: its new versions' and its old ones'."""
    import pyarrow as pa

    both = pa.concat_tables([new.select(key), old.select(key)])
    return both.group_by(key, use_threads=False).aggregate([])
