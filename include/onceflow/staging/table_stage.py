"""The table backend: a part's rows COPYed into its sink's stage table (Sink.stage_table).

Inside the part's fenced transaction (onceflow.staging.fence.claimed_part), the part's
Arrow batches are streamed to PostgreSQL's COPY, tagged (txid, attempt, part), in its binary
format where onceflow.staging.copy_binary has an encoder of their columns, else as CSV, and
counted on the way (rows, dead letters, the records the valid rows account for, the
checksum) for the part's fence row. The file backend (onceflow.staging.file_stage) COPYs a
part's dead letters here too.

Rows: the sink's stage columns (StageWriter.columns: the transform's columns, binary
key/value, error), and optionally HASH_COLUMN (staged as row_hash).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

from onceflow.errors.transform import StageColumnsError
from onceflow.sinks.base import TAG_COLUMNS
from onceflow.spark.arrow_columns import fixed_array, string_repeat, valid_mask
from onceflow.staging.checksum import HASH_COLUMN, exact_sum, staged_name
from onceflow.staging.copy_binary import (
    BinaryEncoder,
    Const,
    binary_stream,
    copy_statement,
    table_encoder,
)
from onceflow.staging.fence import StageCommitMessage, claimed_part, record_part
from onceflow.staging.target import StageTarget
from onceflow.transforms import RECORDS


def stage_table_part(target: StageTarget, part: int, batches: Iterable[Any]) -> StageCommitMessage:
    """Stage one part under the task fence, in one transaction: its rows COPYed into the
    stage table, its counts on its fence row."""
    with claimed_part(target, part) as cur:
        if cur is None:
            return StageCommitMessage(part, 0, skipped=True)
        stream = copy_rows(cur, target, part, batches)
        record_part(
            cur,
            target,
            part,
            stream.rows,
            stream.dead,
            stream.checksum,
            valid=stream.valid,
        )
    return StageCommitMessage(part, stream.rows, skipped=False)


def copy_rows(cur: Any, target: StageTarget, part: int, batches: Iterable[Any]) -> _StagedRows:
    """COPY the batches' rows into the stage table, tagged; returns the rows, which counted
    them on the way."""
    rows = _StagedRows(batches, target, part)
    encoder = None
    if rows.arrow_types:
        encoder = table_encoder(cur, target.schema, target.table, rows.columns, rows.arrow_types)
    copy = copy_statement(target.schema, target.table, rows.columns, encoder is not None)
    cur.copy_expert(copy, ChunkStream(rows.chunks(encoder)), size=1 << 20)
    return rows


class _StagedRows:
    """A part's Arrow batches as PostgreSQL's COPY input, one batch in memory at a time
    (chunks), counted on the way: rows in the binary format by an encoder (copy_binary), or,
    without one, CSV, which Arrow's C++ CSV writer formats (only non-null binary values, dead
    letters, are turned into PostgreSQL bytea hex text in Python).
    """

    def __init__(self, batches: Iterable[Any], target: StageTarget, part: int) -> None:
        self._batches = iter(batches)
        self._tags = (target.attempt.txid, target.attempt.attempt, part)
        self.rows = 0
        self.dead = 0  # rows with an error (dead letters)
        self.valid = 0  # records the valid rows account for (`records` when there is one)
        self.checksum: int | None = None  # exact sum of HASH_COLUMN, None without it
        self.columns: tuple[str, ...] = TAG_COLUMNS + target.columns
        # the Arrow types of the columns (None: a tag, the same in every row), if any batch
        self.arrow_types: list[Any] = []
        self._first: Any = next(self._batches, None)
        if self._first is not None:
            names = tuple(self._first.schema.names)
            unknown = target.unknown_columns(names)
            if unknown:
                raise StageColumnsError(
                    target.attempt.pipeline,
                    f"{target.schema}.{target.table}",
                    part,
                    unknown,
                    list(target.columns),
                )
            self.columns = TAG_COLUMNS + tuple(staged_name(n) for n in names)
            self.arrow_types = [None] * len(TAG_COLUMNS) + list(self._first.schema.types)

    def chunks(self, encoder: BinaryEncoder | None) -> Iterator[bytes]:
        """The COPY input: binary by `encoder`, or CSV without one."""
        if encoder is None:
            return (_to_csv(batch, self._tags) for batch in self._counted())
        tags = [Const(t) for t in self._tags]
        return binary_stream(encoder, ([*tags, *batch.columns] for batch in self._counted()))

    def _counted(self) -> Iterator[Any]:
        """The non-empty batches, each counted as it is handed on."""
        first, self._first = self._first, None
        for batch in self._batches if first is None else chain((first,), self._batches):
            if batch.num_rows:
                self._count(batch)
                yield batch

    def _count(self, batch: Any) -> None:
        import pyarrow.compute as pc

        names = batch.schema.names
        self.rows += batch.num_rows
        dead = 0
        error = batch.column(names.index("error")) if "error" in names else None
        if error is not None:
            dead = len(error) - error.null_count
        self.dead += dead
        if RECORDS in names:  # an aggregating transform's row sums up `records` records
            records = batch.column(names.index(RECORDS))
            if error is not None:
                records = pc.filter(records, pc.is_null(error))
            self.valid += pc.sum(records).as_py() or 0
        else:
            self.valid += batch.num_rows - dead
        if HASH_COLUMN in names:
            self.checksum = (self.checksum or 0) + exact_sum(batch.column(names.index(HASH_COLUMN)))


def _to_csv(batch: Any, tags: tuple[str, int, int]) -> bytes:
    import numpy as np
    import pyarrow as pa

    n = batch.num_rows
    txid, attempt, part = tags
    # From buffers, not pa.scalar/pa.array: those import pandas (seconds per Python worker).
    arrays = [
        string_repeat(txid, n),
        fixed_array(pa.int32(), np.full(n, attempt, dtype="int32")),
        fixed_array(pa.int32(), np.full(n, part, dtype="int32")),
    ]
    names = [staged_name(name) for name in batch.schema.names]
    return csv_rows([*TAG_COLUMNS, *names], [*arrays, *batch.columns])


def csv_rows(names: list[str], columns: list[Any]) -> bytes:
    """Arrow columns as PostgreSQL COPY CSV rows (no header): binary as bytea hex, a zoned
    timestamp as its UTC wall time (COPY runs with time zone UTC)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    arrays = []
    for col in columns:
        if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
            col = _bytea_hex(col)
        elif pa.types.is_timestamp(col.type) and col.type.tz is not None:
            # Arrow stores zoned timestamps as UTC, so dropping the zone keeps the instant
            col = col.cast(pa.timestamp(col.type.unit))
        arrays.append(col)
    out = io.BytesIO()
    pcsv.write_csv(
        pa.Table.from_arrays(arrays, names=names),
        out,
        pcsv.WriteOptions(include_header=False, quoting_style="needed"),
    )
    return out.getvalue()


class ChunkStream(io.RawIOBase):
    """A file-like view of an iterator of bytes chunks, for COPY: one chunk in memory at a
    time."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buf = b""
        self._pos = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while self._pos >= len(self._buf):
            chunk = next(self._chunks, None)
            if chunk is None:
                return b""
            self._buf, self._pos = chunk, 0
        end = len(self._buf) if size is None or size < 0 else self._pos + size
        out = self._buf[self._pos : end]
        self._pos += len(out)
        return out


def _bytea_hex(col: Any) -> Any:
    """Binary -> PostgreSQL bytea hex input ('\\x0aff'); NULL stays NULL (unquoted empty).

    Only dead letters carry bytes: Python touches just those values, the rest is numpy.
    """
    import numpy as np
    import pyarrow as pa

    n = len(col)
    if col.null_count == n:
        return _null_strings(n)
    valid = valid_mask(col)
    where = np.flatnonzero(valid)
    hexed = [
        b"\\x" + b.hex().encode()
        for b in col.take(fixed_array(pa.int64(), where.astype(np.int64))).to_pylist()
    ]
    lengths = np.zeros(n, dtype=np.int64)
    lengths[where] = np.fromiter(map(len, hexed), dtype=np.int64, count=len(hexed))
    offsets = np.zeros(n + 1, dtype=np.int64)  # 64-bit: hex doubles up to 64 KiB per value
    np.cumsum(lengths, out=offsets[1:])
    bitmap = None if col.null_count == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.large_string(),
        n,
        [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(hexed))],
        col.null_count,
    )


def _null_strings(n: int) -> Any:
    import numpy as np
    import pyarrow as pa

    bitmap = pa.py_buffer(np.zeros((n + 7) // 8, dtype=np.uint8))
    offsets = pa.py_buffer(np.zeros(n + 1, dtype=np.int32))
    return pa.Array.from_buffers(pa.string(), n, [bitmap, offsets, pa.py_buffer(b"")], n)
