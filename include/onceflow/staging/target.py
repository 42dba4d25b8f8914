"""Where and under which tags a part is staged: the stage target of one attempt.

A StageTarget is all a Spark task needs to stage a part (it is pickled into the task): the
ledger's database, the sink's stage table and its columns, the tags (the attempt: pipeline,
txid, seq, attempt) and where the valid rows go when not to the stage table: a sink outside the
database's data files, or a PostgreSQL append sink's attempt table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import Ledger
from onceflow.sinks.stage_writer import FileStage, StageWriter
from onceflow.staging.checksum import HASH_COLUMN


@dataclass(frozen=True)
class StageTarget:
    """Where and under which tags a part is staged: the sink's stage table in `schema`,
    which holds `columns` besides the tags, in the ledger's database; the tags are the
    attempt's."""

    # None only while the target is kept in the ledger (onceflow.ledger.stage_jobs), which
    # never holds the DSN
    ledger: Ledger | None
    attempt: Attempt
    schema: str
    table: str
    columns: tuple[str, ...]
    files: FileStage | None = None  # valid rows go to data files (StageWriter.file_stage)
    # valid rows go to the attempt's own table, in `schema` (StageWriter.attempt_table)
    attempt_table: str | None = None

    @classmethod
    def of(cls, ledger: Ledger, writer: StageWriter, attempt: Attempt) -> StageTarget:
        """The target of `attempt`, staged by `writer` (Sink.stage_writer)."""
        return cls(
            ledger,
            attempt,
            writer.sink.schema,
            writer.sink.stage_table,
            writer.columns,
            writer.file_stage(attempt),
            writer.attempt_table(attempt),
        )

    def unknown_columns(self, names: Iterable[str]) -> list[str]:
        """Input column names the writer does not know (neither stage nor hash columns)."""
        return [n for n in names if n not in (*self.columns, HASH_COLUMN)]
