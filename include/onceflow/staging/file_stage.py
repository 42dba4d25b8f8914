"""The file backend: a part's valid rows as ONE Parquet data file (one per partition of a
partitioned table), under the part fence.

For a sink outside the ledger's database that publishes data files (a lake table,
Sink.file_stage), process does not COPY the valid rows into a stage table: each Spark task
writes its part's valid rows as Parquet files with pyarrow, in the stage writer's Python
worker (onceflow.staging.writer), inside the part's fenced PostgreSQL transaction
(onceflow.staging.fence.claimed_part), and records the file's path in the sink's files table
in that same transaction, together with the claim and the part's counts. The fence's rules
(onceflow.staging.fence) then hold for files too:

- a task that dies, or whose transaction rolls back, leaves at most files that no row
  names: never published (publish takes the paths from the files table only);
- a retried or speculative task of the same attempt finds the part claimed and writes no
  file at all;
- a task of a fenced attempt fails the attempt fence before it writes; a file it wrote
  earlier is recorded under its attempt number, which commit never publishes.

The files of attempts that never publish are removed later (onceflow.staging.file_cleanup).

Why pyarrow in the stage worker rather than Spark's own Parquet writer: Spark's writer
commits files through its output committer at job end, outside any PostgreSQL transaction,
so a part's files could not be recorded atomically with its claim (a task retried after the
committer moved its files, or a zombie driver's job commit, would leave files that the
ledger cannot tell apart from the real ones). Here a file exists in the ledger exactly when
its part's claim committed. The files carry the table's field ids, so the sink reads them
back as they are.

Dead letters still go to the sink's stage table (onceflow.staging.table_stage.copy_rows),
since the ledger publishes them. Paths: `<directory>/part-<part>-<uuid>-<n>.parquet`, the
directory naming the pipeline, txid and attempt (Sink.file_stage), n the part's n-th
partition; the uuid keeps a rolled-back task's file from being overwritten by the task
that retries it. Any URI pyarrow's file systems open (a local
path, file://, s3://, gs://, hdfs://, abfs://) works, as it does for pyiceberg's file IO.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from onceflow.ledger.batches import range_epochs
from onceflow.sinks.lake.storage import Storage
from onceflow.sinks.stage_writer import FileStage
from onceflow.spark.arrow_columns import bool_array, string_repeat, valid_mask
from onceflow.staging.checksum import HASH_COLUMN, exact_sum
from onceflow.staging.epochs import epoch_column
from onceflow.staging.fence import StageCommitMessage, claimed_part, record_part
from onceflow.staging.table_stage import copy_rows
from onceflow.staging.target import StageTarget

# What the stage table keeps of a dead letter (besides the tags); its hash is staged too.
DEAD_COLUMNS = ("topic", "partition", "offset", "error", "key", "value", "row_hash")
_DEAD_INPUT = (*DEAD_COLUMNS[:-1], HASH_COLUMN)
# Data file columns the writer fills itself: the txid, and the epoch of the record's range.
WRITER_COLUMNS = ("txid", "epoch")


def stage_file_part(target: StageTarget, part: int, batches: Iterable[Any]) -> StageCommitMessage:
    """Stage one part: its valid rows as a data file, its dead letters into the stage table,
    the file's row and the part's counts on the fence, all in one transaction."""
    from psycopg2 import sql

    files = target.files
    if files is None:
        raise ValueError(f"stage of part {part}: {target.schema}.{target.table} has no file stage")
    with claimed_part(target, part) as cur:
        if cur is None:
            return StageCommitMessage(part, 0, skipped=True)
        a = target.attempt
        epochs = range_epochs(cur, a.pipeline, a.txid)
        split = _Split(batches, files, a.txid, epochs, f"{files.directory}/part-{part:05d}")
        dead_target = dataclasses.replace(target, columns=DEAD_COLUMNS, files=None)
        copy_rows(cur, dead_target, part, split.dead_batches())
        for file in split.close():
            cur.execute(
                sql.SQL(
                    "insert into {}.{} (txid, attempt, part, path, records, checksum)"
                    " values (%s, %s, %s, %s, %s, %s)"
                ).format(sql.Identifier(target.schema), sql.Identifier(files.files_table)),
                (a.txid, a.attempt, part, file.path, file.rows, file.checksum),
            )
        record_part(cur, target, part, split.rows, split.dead, split.checksum)
    return StageCommitMessage(part, split.rows, skipped=False)


class PartCounts:
    """A part's rows, dead letters and checksum, counted batch by batch by a backend that
    sends the valid rows and the dead letters to different places."""

    def __init__(self) -> None:
        self.rows = 0
        self.dead = 0
        self.checksum: int | None = None  # every row's hash summed (None: no hash column)

    def count(self, batch: Any) -> Any:
        """Count the batch; returns which of its rows are dead letters (a numpy bool array:
        an error that is not null makes one)."""
        import numpy as np

        names = batch.schema.names
        dead = (
            valid_mask(batch.column(names.index("error")))
            if "error" in names
            else np.zeros(batch.num_rows, dtype=bool)
        )
        self.rows += batch.num_rows
        self.dead += int(dead.sum())
        if HASH_COLUMN in names:
            self.checksum = (self.checksum or 0) + exact_sum(batch.column(HASH_COLUMN))
        return dead


class _Split(PartCounts):
    """Walks a part's batches once: valid rows into the data file (opened on the first one),
    dead letters yielded for COPY, every row counted and hashed."""

    def __init__(
        self,
        batches: Iterable[Any],
        files: FileStage,
        txid: str,
        epochs: dict[tuple[str, int], int],
        stem: str,
    ) -> None:
        self._batches = batches
        self._files = files
        self._txid = txid
        self._epochs = epochs
        self._stem = f"{stem}-{uuid.uuid4().hex}"
        self._open: dict[tuple, _File] = {}  # one data file per partition
        super().__init__()

    def dead_batches(self) -> Iterator[Any]:
        for batch in self._batches:
            if batch.num_rows == 0:
                continue
            dead = self.count(batch)
            valid = ~dead
            hashed = HASH_COLUMN in batch.schema.names
            if valid.any():
                self._write(batch if valid.all() else batch.filter(bool_array(valid)), hashed)
            if dead.any():
                yield dead_letters(batch, dead)

    def _write(self, rows: Any, hashed: bool) -> None:
        """Valid rows in the table's schema, into their partition's file."""
        import pyarrow as pa

        schema = self._files.schema
        names = rows.schema.names
        arrays = []
        for field in schema:
            if field.name == "txid":
                arrays.append(string_repeat(self._txid, rows.num_rows))
            elif field.name == "epoch":
                arrays.append(epoch_column(rows, self._epochs))
            elif field.name in names:
                arrays.append(rows.column(field.name).cast(field.type))
            else:  # an optional column of an existing table that the output lacks
                arrays.append(pa.nulls(rows.num_rows, field.type))
        table_rows = pa.RecordBatch.from_arrays(arrays, schema=schema)
        partitioner = self._files.partitioner
        groups = partitioner.groups(table_rows) if partitioner else [((), None)]
        for key, indices in groups:
            mine = table_rows if indices is None else table_rows.take(indices)
            file = self._open.get(key)
            if file is None:
                path = f"{self._stem}-{len(self._open)}.parquet"
                storage = self._files.storage or Storage()
                file = self._open[key] = _File(path, schema, storage)
            file.write(mine)
            if hashed:
                hashes = rows.column(HASH_COLUMN)
                file.checksum += exact_sum(hashes if indices is None else hashes.take(indices))

    def close(self) -> list[_File]:
        """Finish the data files (one per partition; none when the part had no valid row)."""
        for file in self._open.values():
            file.close()
        return list(self._open.values())


class _File:
    """One data file being written: its path, rows and the exact sum of their hashes."""

    def __init__(self, path: str, schema: Any, storage: Storage) -> None:
        import pyarrow.parquet as pq

        filesystem, local = storage.filesystem(path)
        filesystem.create_dir(local.rsplit("/", 1)[0], recursive=True)
        self.path = path
        self._stream = filesystem.open_output_stream(local)
        self._writer = pq.ParquetWriter(self._stream, schema, compression="zstd")
        self.rows = 0
        self.checksum = 0

    def write(self, rows: Any) -> None:
        self._writer.write_batch(rows)
        self.rows += rows.num_rows

    def close(self) -> None:
        self._writer.close()
        self._stream.close()


def dead_letters(batch: Any, dead: Any) -> Any:
    """The rows of `batch` that `dead` (a numpy bool array) marks, in the columns the stage
    table keeps of a dead letter (DEAD_COLUMNS, with the row hash as HASH_COLUMN)."""
    import pyarrow as pa

    rows = batch.filter(bool_array(dead))
    kept = [c for c in _DEAD_INPUT if c in batch.schema.names]
    return pa.RecordBatch.from_arrays([rows.column(c) for c in kept], names=kept)
