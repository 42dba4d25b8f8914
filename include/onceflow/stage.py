"""The stage writer: stages a txid's rows into its sink's stage table (Sink.stage_table).

Each Spark task stages its partition as one `part` (the Spark partition id, plus
`first_part`; onceflow.fast_stage calls `stage_part` itself for the fast form's part) in ONE
PostgreSQL transaction that first claims the part in onceflow.stage_parts (the task fence)
and then COPYs the rows, tagged (txid, attempt, part):

- a task that dies before its commit leaves nothing (the claim rolls back with the rows);
- a retried or speculative task of the same attempt finds the part claimed and stages
  nothing: output is a deterministic function of the part's records, so the first copy is
  as good as its own (the reader's input partitions are fixed, and nothing shuffles between
  read and write, so part k always holds the same records). It still consumes its input, so
  that the reader's count of records read (onceflow.reader.RangeReadFn) is complete;
- a task of a fenced attempt (a newer process attempt claimed the txid, or a reset abandoned
  it) fails before writing, by the ledger's attempt fence (ledger.check_attempt) run in the
  part's transaction; rows it staged earlier carry its attempt number, which commit never
  publishes (ledger.mark_staged runs the same fence).

Per part, the fence row in onceflow.stage_parts also records what the part staged: rows,
the records its valid rows account for (one per valid row; an aggregating transform's rows
the sum of their `records` column), dead letters and a checksum (the exact sum of column
`_meta_hash`, a 64-bit hash per row that is also staged as `row_hash`). process sums the
parts instead of scanning the staged rows again.

A sink outside the database with a file stage (Sink.file_stage: an Iceberg table) has each
part's valid rows written as one data file instead, recorded in the same transaction as the
claim, and only its dead letters COPYed (onceflow.file_stage).

Rows: the sink's stage columns (Sink.stage_columns: the transform's columns, binary
key/value, error), and optionally `_meta_hash` (staged as row_hash). process stages through `stage_frame` (a mapInArrow: no data source workers to
start on the driver).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from onceflow import failpoints
from onceflow.reader import _fixed_array, _fixed_values, _string_repeat, _valid_mask
from onceflow.sinks.base import TAG_COLUMNS, FileStage, Sink
from onceflow.transforms import RECORDS

HASH_COLUMN = "_meta_hash"  # per row: 64-bit hash; summed into the checksum, staged as row_hash
MESSAGE_SCHEMA = "part int, rows bigint, skipped boolean"


def _staged_name(name: str) -> str:
    """The stage column an input column is written to."""
    return "row_hash" if name == HASH_COLUMN else name


@dataclass(frozen=True)
class StageCommitMessage:
    part: int
    rows: int
    skipped: bool  # the part was already staged by another task attempt


@dataclass(frozen=True)
class StageTarget:
    """Where and under which tags a part is staged: the sink's stage table in `schema`,
    which holds `columns` besides the tags."""

    dsn: str
    schema: str
    table: str
    columns: tuple[str, ...]
    pipeline: str
    txid: str
    attempt: int
    files: FileStage | None = None  # valid rows go to data files (Sink.file_stage)

    @classmethod
    def for_sink(cls, dsn: str, sink: Sink, pipeline: str, txid: str, attempt: int) -> StageTarget:
        return cls(
            dsn,
            sink.schema,
            sink.stage_table,
            sink.stage_columns,
            pipeline,
            txid,
            attempt,
            sink.file_stage(pipeline, txid, attempt),
        )

    def unknown_columns(self, names: Iterable[str]) -> list[str]:
        """Input column names the writer does not know (neither stage nor hash columns)."""
        return [n for n in names if n not in (*self.columns, HASH_COLUMN)]


class StagePartFn:
    """mapInArrow function of `stage_frame`: stages Spark partition k as part first_part + k."""

    def __init__(self, target: StageTarget, first_part: int = 0) -> None:
        self.target = target
        self.first_part = first_part

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("onceflow_stage: stage_frame must run in a Spark task")
        msg = stage_part(self.target, self.first_part + ctx.partitionId(), batches)
        if msg.skipped:
            # Read the input to its end all the same: the reader counts the records it hands
            # on (process's records-read check), and this task's count is the one Spark keeps.
            for _ in batches:
                pass
        # from buffers: pa.array / from_pylist would import pandas into the worker
        yield pa.RecordBatch.from_arrays(
            [
                _fixed_array(pa.int32(), np.array([msg.part], dtype=np.int32)),
                _fixed_array(pa.int64(), np.array([msg.rows], dtype=np.int64)),
                pa.Array.from_buffers(
                    pa.bool_(), 1, [None, pa.py_buffer(np.array([int(msg.skipped)], np.uint8))]
                ),
            ],
            names=["part", "rows", "skipped"],
        )


def stage_frame(df: Any, target: StageTarget, first_part: int = 0) -> Any:
    """A DataFrame that, when collected, stages each Spark partition k of `df` as part
    first_part + k (under the task fence) and gives one row (part, rows, skipped) per
    partition."""
    unknown = target.unknown_columns(df.columns)
    if unknown:
        raise ValueError(
            f"stage of pipeline {target.pipeline!r}: column(s) {unknown} are not columns of "
            f"the stage table {target.schema}.{target.table} {list(target.columns)}"
        )
    return df.mapInArrow(StagePartFn(target, first_part), MESSAGE_SCHEMA)


def stage_part(target: StageTarget, part: int, batches: Iterable[Any]) -> StageCommitMessage:
    """Stage one part (Arrow record batches) under the task fence, in one transaction: its
    rows COPYed into the stage table, or for a sink with a file stage (target.files) its
    valid rows as a data file (onceflow.file_stage)."""
    if target.files is not None:
        from onceflow.file_stage import stage_file_part

        return stage_file_part(target, part, batches)
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


@contextlib.contextmanager
def claimed_part(target: StageTarget, part: int) -> Iterator[Any]:
    """The part's PostgreSQL transaction under the task fence: yields its cursor once the
    attempt fence passed and the part is claimed in onceflow.stage_parts, or None when another
    task attempt already staged it (then nothing is written). Commits when the body returns,
    rolls back (claim included) when it raises."""
    import psycopg2

    from onceflow import ledger

    t = target
    conn = psycopg2.connect(t.dsn, connect_timeout=10, application_name=f"onceflow-stage-{part}")
    try:
        with conn.cursor() as cur:
            ledger.check_attempt(
                cur, t.pipeline, t.txid, t.attempt, context=f"stage of part {part}: "
            )
            # Blocks while another task attempt holds the claim, then sees its outcome.
            cur.execute(
                "insert into onceflow.stage_parts (pipeline, txid, attempt, part, rows)"
                " values (%s, %s, %s, %s, 0) on conflict do nothing",
                (t.pipeline, t.txid, t.attempt, part),
            )
            if cur.rowcount == 0:
                conn.rollback()
                yield None
                return
            # Timestamps are written as UTC wall times without a zone (Arrow formats a
            # zoned timestamp ~20x slower): the session reads them in UTC.
            cur.execute("set local time zone 'UTC'")
            yield cur
        failpoints.hit("stage.before_part_commit", t.txid)
        conn.commit()
        failpoints.hit("stage.after_part_commit", t.txid)
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


def copy_rows(cur: Any, target: StageTarget, part: int, batches: Iterable[Any]) -> _CsvStream:
    """COPY the batches' rows into the stage table, tagged; returns the stream, which
    counted them."""
    from psycopg2 import sql

    stream = _CsvStream(batches, target, part)
    copy = sql.SQL("copy {}.{} ({}) from stdin with (format csv)").format(
        sql.Identifier(target.schema),
        sql.Identifier(target.table),
        sql.SQL(", ").join(sql.Identifier(c) for c in stream.columns),
    )
    cur.copy_expert(copy, stream, size=1 << 20)
    return stream


def record_part(
    cur: Any,
    target: StageTarget,
    part: int,
    rows: int,
    dead: int,
    checksum: int | None,
    valid: int | None = None,
) -> None:
    """What the claimed part staged, on its fence row (ledger.mark_staged sums them);
    `valid`: the records its valid rows account for, one per valid row by default. (The
    fence row's `bytes` stays NULL: process counts the bytes read in the reader.)"""
    t = target
    cur.execute(
        "update onceflow.stage_parts set rows = %s, valid = %s, dead = %s, checksum = %s"
        " where pipeline = %s and txid = %s and attempt = %s and part = %s",
        (
            rows,
            rows - dead if valid is None else valid,
            dead,
            checksum,
            t.pipeline,
            t.txid,
            t.attempt,
            part,
        ),
    )


class _CsvStream(io.RawIOBase):
    """A file-like view of Arrow batches as PostgreSQL CSV, for COPY: one batch in memory at a time.

    Arrow's C++ CSV writer does the formatting; only non-null binary values (dead letters)
    are turned into PostgreSQL bytea hex text in Python.
    """

    def __init__(self, batches: Iterable[Any], target: StageTarget, part: int) -> None:
        self._batches = iter(batches)
        self._tags = (target.txid, target.attempt, part)
        self._buf = b""
        self._pos = 0
        self.rows = 0
        self.dead = 0  # rows with an error (dead letters)
        self.valid = 0  # records the valid rows account for (`records` when there is one)
        self.checksum: int | None = None  # exact sum of _meta_hash, None without it
        self.columns: tuple[str, ...] = TAG_COLUMNS + target.columns
        self._first: Any = next(self._batches, None)
        if self._first is not None:
            names = tuple(self._first.schema.names)
            unknown = target.unknown_columns(names)
            if unknown:
                raise ValueError(
                    f"stage of {target.schema}.{target.table} part {part}: unexpected "
                    f"column(s) {unknown}"
                )
            self.columns = TAG_COLUMNS + tuple(_staged_name(n) for n in names)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while self._pos >= len(self._buf):
            batch = self._next_batch()
            if batch is None:
                return b""
            self._buf, self._pos = _to_csv(batch, self._tags), 0
        end = len(self._buf) if size is None or size < 0 else self._pos + size
        chunk = self._buf[self._pos : end]
        self._pos += len(chunk)
        return chunk

    def _next_batch(self) -> Any:
        if self._first is not None:
            batch, self._first = self._first, None
        else:
            batch = next(self._batches, None)
        while batch is not None and batch.num_rows == 0:
            batch = next(self._batches, None)
        if batch is not None:
            self._count(batch)
        return batch

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
            self.checksum = (self.checksum or 0) + _exact_sum(
                batch.column(names.index(HASH_COLUMN))
            )


def _to_csv(batch: Any, tags: tuple[str, int, int]) -> bytes:
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv

    n = batch.num_rows
    txid, attempt, part = tags
    # From buffers, not pa.scalar/pa.array: those import pandas (seconds per Python worker).
    arrays = [
        _string_repeat(txid, n),
        _fixed_array(pa.int32(), np.full(n, attempt, dtype="int32")),
        _fixed_array(pa.int32(), np.full(n, part, dtype="int32")),
    ]
    names = []
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        names.append(_staged_name(name))
        if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
            col = _bytea_hex(col)
        elif pa.types.is_timestamp(col.type) and col.type.tz is not None:
            # the instant's UTC wall time, without a zone (COPY runs with time zone UTC);
            # Arrow stores zoned timestamps as UTC, so dropping the zone keeps the instant
            col = col.cast(pa.timestamp(col.type.unit))
        arrays.append(col)
    table = pa.Table.from_arrays(arrays, names=list(TAG_COLUMNS) + names)
    out = io.BytesIO()
    pcsv.write_csv(table, out, pcsv.WriteOptions(include_header=False, quoting_style="needed"))
    return out.getvalue()


def _exact_sum(col: Any) -> int:
    """The exact sum of an integer column without NULLs, however large: 64-bit values are
    summed as 32-bit halves, which cannot overflow for any batch Spark hands over."""
    import numpy as np
    import pyarrow as pa

    if col.null_count:
        raise ValueError(f"onceflow_stage: {HASH_COLUMN} must not be NULL")
    if isinstance(col, pa.ChunkedArray):
        return sum(_exact_sum(c) for c in col.chunks)
    if col.type != pa.int64():
        col = col.cast(pa.int64())
    values = _fixed_values(col, np.int64)  # to_numpy() would import pandas
    low = int((values & 0xFFFFFFFF).sum())
    high = int((values >> 32).sum())
    return high * (1 << 32) + low


def _bytea_hex(col: Any) -> Any:
    """Binary -> PostgreSQL bytea hex input ('\\x0aff'); NULL stays NULL (unquoted empty).

    Only dead letters carry bytes: Python touches just those values, the rest is numpy.
    """
    import numpy as np
    import pyarrow as pa

    n = len(col)
    if col.null_count == n:
        return _null_strings(n)
    valid = _valid_mask(col)
    where = np.flatnonzero(valid)
    hexed = [
        b"\\x" + b.hex().encode()
        for b in col.take(_fixed_array(pa.int64(), where.astype(np.int64))).to_pylist()
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
