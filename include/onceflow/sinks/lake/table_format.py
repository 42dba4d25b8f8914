"""What a lake sink asks of its table format (Iceberg: sinks.iceberg, Delta: sinks.delta):
create or evolve the table to the output, open it, read its commits, and commit files to it.
A LakeSink holds one, made for it (`sink`); everything else a lake sink does, whatever the
format (the stage, the publish by mode, clean-up, the audit), is sinks.lake.sink's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from onceflow.ledger.attempt import Attempt
from onceflow.sinks.lake.compaction import LiveFile
from onceflow.sinks.lake.partitions import Partitioner
from onceflow.sinks.outside import Publication
from onceflow.sinks.schema_evolution import Evolution

if TYPE_CHECKING:
    from onceflow.config.pipeline import PipelineConfig
    from onceflow.sinks.lake.sink import LakeSink
    from onceflow.sinks.lake.stage_tables import LakeStageWriter


class TableFormat(ABC):
    """One lake sink's table, in its format."""

    # what the format calls a commit of the table ("snapshot", "version"), and the table
    commit_name: str
    table_kind: str

    def __init__(self, sink: LakeSink) -> None:
        self.sink = sink

    @property
    def name(self) -> str:
        return self.sink.name

    @property
    def warehouse(self) -> str:
        return self.sink.warehouse

    @property
    def lost_race(self) -> tuple[type[BaseException], ...]:
        """The exceptions of a lost commit race, which pass through LakeSink's `_reaching`."""
        return ()

    def describe(self) -> str:
        """The table in a sentence (Sink.describe)."""
        return f"the {self.table_kind} {self.sink.name}"

    def describe_briefly(self) -> str:
        """The table as errors name it: its kind, name and where it is."""
        return f"{self.table_kind} {self.sink.name} (warehouse {self.sink.warehouse})"

    @abstractmethod
    def asset_uri(self, pipeline: PipelineConfig) -> str:
        """The URI of the Airflow Asset of the table (Sink.asset_uri)."""

    @abstractmethod
    def stage_writer(
        self, cur, fields: Iterable[tuple[str, str]], evolution: Evolution | None
    ) -> LakeStageWriter:
        """process, before staging: the table created from the transform's output, or an
        existing one checked and evolved to it; the stage for that output
        (Sink.stage_writer, made by LakeSink.writer)."""

    @abstractmethod
    def open_table(self, cur) -> Any:
        """The table as it is now, or None if it does not exist."""

    def release_table(self, table: Any) -> None:  # noqa: B027 (a hook)
        """Let go of what the table holds open (a catalog's connections)."""

    @abstractmethod
    def table_location(self, table: Any) -> str:
        """Where the table's files are."""

    @abstractmethod
    def newest(self, table: Any, t: Attempt) -> Publication | None:
        """The newest publication of t's pipeline and seq the table records."""

    @abstractmethod
    def publications(self, table: Any, pipeline: str) -> Iterator[Publication]:
        """The pipeline's publications recorded by the table, newest first."""

    @abstractmethod
    def history_start_ms(self, table: Any) -> int:
        """When the oldest commit the table's history still holds was made (epoch ms)."""

    @abstractmethod
    def live_files(self, table: Any) -> list[str]:
        """The URIs of the table's live data files."""

    @abstractmethod
    def data_files(self, table: Any) -> list[LiveFile]:
        """The table's live data files with their sizes (and partitions)."""

    @abstractmethod
    def partitioner(self, table: Any) -> Partitioner | None:
        """How the table's rows split into its partitions (None: unpartitioned)."""

    @abstractmethod
    def table_schema(self, table: Any) -> Any:
        """The pyarrow schema the table's data files are written in."""

    @abstractmethod
    def scan(self, table: Any, columns: Iterable[str]) -> Any:
        """The table's rows (these columns) as a pyarrow.Table."""

    @abstractmethod
    def prepare_commit(
        self,
        table: Any,
        summary: dict[str, str],
        adds: list[tuple[str, int]],
        removes: list[str],
        seq: int | None,
    ) -> Callable[[], str]:
        """ONE commit on top of the version `table` was read at, prepared (the files added,
        URI and rows, looked at; a missing one fails here, before anything is committed):
        calling it commits the files added and removed, recording `summary`
        (sinks.lake.records) and, for a publish, its `seq`, and returns its ref;
        SinkMovedError if the table moved."""

    @abstractmethod
    def expire(
        self, table: Any, pipeline: str, before_ms: int, dry_run: bool
    ) -> tuple[int, list[str]]:
        """Expire the table's history (snapshots, log versions) older than `before_ms`:
        how many it expired (or would) and the data files no remaining one needs."""
