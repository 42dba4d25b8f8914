"""Where and under which tags a part is staged: the stage target of one attempt.

A StageTarget is all a Spark task needs to stage a part (it is pickled into the task): the
ledger's database, the sink's stage table and its columns, the tags (pipeline, txid, seq,
attempt) and where the valid rows go when not to the stage table: a sink outside the
database's data files, or a PostgreSQL append sink's attempt table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from onceflow.sinks.base import FileStage, Sink
from onceflow.staging.checksum import HASH_COLUMN


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
    seq: int = 0
    # valid rows go to the attempt's own table, in `schema` (Sink.attempt_table)
    attempt_table: str | None = None

    @classmethod
    def for_sink(
        cls, dsn: str, sink: Sink, pipeline: str, txid: str, seq: int, attempt: int
    ) -> StageTarget:
        return cls(
            dsn,
            sink.schema,
            sink.stage_table,
            sink.stage_columns,
            pipeline,
            txid,
            attempt,
            sink.file_stage(pipeline, txid, attempt),
            seq,
            sink.attempt_table(seq, attempt),
        )

    def unknown_columns(self, names: Iterable[str]) -> list[str]:
        """Input column names the writer does not know (neither stage nor hash columns)."""
        return [n for n in names if n not in (*self.columns, HASH_COLUMN)]
