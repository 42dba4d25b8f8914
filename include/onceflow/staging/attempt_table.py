"""The attempt-table backend: a part's valid rows COPYed into its attempt's own table, its
dead letters into the stage table, in the part's fenced transaction.

For a PostgreSQL append sink (Sink.attempt_table), whose commit attaches the attempt's table
as a partition of the published table (sinks.postgres.append), process writes the rows as
they will be published: the coordinates with their range's epoch (onceflow.staging.epochs),
seq, txid and the user's columns. Not the tags' attempt and part (the table is the
attempt's own, the part fence row counts each part), nor the row hash (summed into the
part's checksum). The fence's rules (onceflow.staging.fence) hold as for the stage table: a
task that dies leaves nothing (its rows roll back with its claim), a retried or speculative
one finds the part claimed and writes nothing, a fenced one fails before it writes.

A connection runs one COPY at a time: the part's dead letters wait in memory until the valid
rows' COPY ends (a part of the stage writer holds few; every record dead is the worst case,
one part's records).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from onceflow.errors.transform import StageColumnsError
from onceflow.ledger.batches import range_epochs
from onceflow.spark.arrow_columns import bool_array, fixed_array, string_repeat
from onceflow.staging.checksum import HASH_COLUMN
from onceflow.staging.copy_binary import (
    BinaryEncoder,
    Const,
    binary_stream,
    copy_statement,
    table_encoder,
)
from onceflow.staging.epochs import epoch_column
from onceflow.staging.fence import StageCommitMessage, claimed_part, record_part
from onceflow.staging.file_stage import DEAD_COLUMNS, PartCounts, dead_letters
from onceflow.staging.table_stage import ChunkStream, copy_rows, csv_rows
from onceflow.staging.target import StageTarget

# Input columns a dead letter holds, which the published rows do not.
_DEAD_ONLY = ("error", "key", "value", "tombstone", HASH_COLUMN)
# Columns the writer fills itself, from the target and the ranges.
WRITER_COLUMNS = ("txid", "seq", "epoch")


def stage_attempt_part(
    target: StageTarget, part: int, batches: Iterable[Any]
) -> StageCommitMessage:
    """Stage one part: its valid rows into the attempt's table, its dead letters into the
    stage table, its counts on the fence, all in one transaction."""
    table = target.attempt_table
    if table is None:
        raise ValueError(
            f"stage of part {part}: {target.schema}.{target.table} has no attempt table"
        )
    with claimed_part(target, part) as cur:
        if cur is None:
            return StageCommitMessage(part, 0, skipped=True)
        epochs = range_epochs(cur, target.attempt.pipeline, target.attempt.txid)
        rows = _ValidRows(batches, target, part, epochs)
        if rows.columns:
            encoder = table_encoder(cur, target.schema, table, rows.columns, rows.arrow_types())
            copy = copy_statement(target.schema, table, rows.columns, encoder is not None)
            chunks = rows.csv() if encoder is None else rows.binary(encoder)
            cur.copy_expert(copy, ChunkStream(chunks), size=1 << 20)
        dead_target = dataclasses.replace(target, columns=DEAD_COLUMNS, attempt_table=None)
        copy_rows(cur, dead_target, part, rows.dead_batches)
        record_part(cur, target, part, rows.rows, rows.dead, rows.checksum)
    return StageCommitMessage(part, rows.rows, skipped=False)


class _ValidRows(PartCounts):
    """Walks a part's batches once: the valid rows for the attempt's table (in PostgreSQL's
    binary COPY format where onceflow.staging.copy_binary has an encoder of their columns,
    else as CSV), the dead letters kept for the stage table, every row counted and hashed."""

    def __init__(
        self,
        batches: Iterable[Any],
        target: StageTarget,
        part: int,
        epochs: dict[tuple[str, int], int],
    ) -> None:
        self._batches = iter(batches)
        self._target = target
        self._epochs = epochs
        self._first = next(self._batches, None)
        self.columns: tuple[str, ...] = ()
        if self._first is not None:
            names = self._first.schema.names
            unknown = target.unknown_columns(names)
            if unknown:
                raise StageColumnsError(
                    target.attempt.pipeline,
                    f"{target.schema}.{target.attempt_table}",
                    part,
                    unknown,
                    list(target.columns),
                )
            self._kept = [n for n in names if n not in _DEAD_ONLY]
            self.columns = (*WRITER_COLUMNS, *self._kept)
        super().__init__()
        self.dead_batches: list[Any] = []

    def arrow_types(self) -> list[Any]:
        """The Arrow types of the columns written (None: the same value in every row)."""
        import pyarrow as pa

        schema = self._first.schema
        return [None, None, pa.int32(), *(schema.field(c).type for c in self._kept)]

    def csv(self) -> Iterator[bytes]:
        """The valid rows as PostgreSQL's CSV."""
        import numpy as np
        import pyarrow as pa

        for txid, seq, rest in self._written():
            m = len(rest[0])
            yield csv_rows(
                list(self.columns),
                [
                    string_repeat(txid.value, m),
                    fixed_array(pa.int64(), np.full(m, seq.value, dtype=np.int64)),
                    *rest,
                ],
            )

    def binary(self, encoder: BinaryEncoder) -> Iterator[bytes]:
        """The valid rows in PostgreSQL's binary COPY format (copy_binary)."""
        return binary_stream(encoder, ([txid, seq, *rest] for txid, seq, rest in self._written()))

    def _written(self) -> Iterator[tuple[Const, Const, list[Any]]]:
        """Per batch of valid rows: the txid and seq of every row, then the epoch and the
        kept columns (arrays)."""
        batches = self._batches if self._first is None else _chain(self._first, self._batches)
        self._first = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            dead = self.count(batch)
            if dead.any():
                self.dead_batches.append(dead_letters(batch, dead))
                batch = batch.filter(bool_array(~dead))
                if batch.num_rows == 0:
                    continue
            attempt = self._target.attempt
            yield (
                Const(attempt.txid),
                Const(attempt.seq),
                [epoch_column(batch, self._epochs), *(batch.column(c) for c in self._kept)],
            )


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest
