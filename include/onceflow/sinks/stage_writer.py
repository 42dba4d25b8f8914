"""What process stages an attempt's output into: a StageWriter, made by Sink.stage_writer from
the transform's output once the sink's tables fit it (created, or checked and evolved:
onceflow.sinks.schema_evolution). It is complete when made: a sink itself never waits for an
output, and nothing can stage without one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from onceflow.ledger.attempt import Attempt
from onceflow.transforms import COORDINATES, RECORDS

if TYPE_CHECKING:
    from onceflow.sinks.base import Sink


# What a stage row holds after the user's columns, whatever the sink (dead letters' error, key
# and value; an upsert's tombstone; the row hash)
STAGE_ROW_END = ("error", "key", "value", "tombstone", "row_hash")


def stage_columns(users: Iterable[str], aggregating: bool = False) -> tuple[str, ...]:
    """The data columns of a stage row (besides the TAG_COLUMNS) for an output of the user's
    columns `users`; an aggregating transform's rows also say how many `records` each sums."""
    return (*COORDINATES, *users, *STAGE_ROW_END, *((RECORDS,) if aggregating else ()))


@dataclass(frozen=True)
class FileStage:
    """Where process writes an attempt's parts as data files (onceflow.staging.file_stage): in
    `directory` (a URI or absolute path), as Parquet files of `schema` (a pyarrow.Schema
    carrying the table's field ids), each recorded as a row of `files_table` (in the stage
    target's schema); with a `partitioner`, a part's rows as one file per partition."""

    directory: str
    schema: Any
    files_table: str
    # a partitioned table's (sinks.lake.partitions.Partitioner): one file per partition
    partitioner: Any = None
    # how the files are reached (sinks.lake.storage.Storage; None: pyarrow's defaults)
    storage: Any = None


@dataclass(frozen=True)
class StageWriter:
    """The stage of `sink` for one output: the stage table's data columns (besides the
    TAG_COLUMNS) and, per attempt, where its valid rows go when not to the stage table."""

    sink: Sink  # as it fits the output (a PostgreSQL sink's: made for the output's columns)
    columns: tuple[str, ...]

    def file_stage(self, t: Attempt) -> FileStage | None:
        """Where the attempt's valid rows go as data files (a sink outside the database);
        None: to the stage table, or to the attempt's own table."""
        return None

    def attempt_table(self, t: Attempt) -> str | None:
        """The attempt's own table its valid rows are copied into (Sink.attempt_table)."""
        return self.sink.attempt_table(t.seq, t.attempt)

    def create(self, cur, t: Attempt) -> None:
        """Before any part: what the attempt stages into besides the stage table."""
        self.sink.create_stage(cur, t)

    def seal(self, cur, t: Attempt) -> None:
        """Once every part is staged: the attempt's stage made ready for publish."""
        self.sink.seal_stage(cur, t)
