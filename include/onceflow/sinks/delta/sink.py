"""A Delta Lake table as a pipeline's sink, outside the ledger's database, in any mode
(append, upsert, merge: sinks.lake.layout), published in two steps (onceflow.commit) with
the `deltalake` package (delta-rs): no Spark jar, no JVM on the committing side. What
every lake sink does (the stage, the publish by mode, clean-up) is sinks.lake.sink's.

The table lives at `<warehouse>/<namespace>/<table>` and holds the mode's columns
(sinks.delta.table_schema); process creates it from the transform's output schema, or
checks an existing one and evolves it (`stage_writer`, sinks.delta.evolution), then writes
the valid rows as Parquet data files under the table's location.

A publish is ONE Delta commit (`create_write_transaction`: add actions, and remove actions
for a re-run's or a rewrite's files) carrying the app transaction (the pipeline, the seq)
and the txid, seq, attempt and records in its commit info (sinks.delta.commits). The read
before it asks the app transaction for the seq, and the history for the attempt that
published it. The commit is made on top of the version the read saw or not at all (no
retries: a commit that lost the race raises SinkMovedError and commit reads again); two
committers that set the same app id conflict in Delta's own conflict check.

The table is read with pyarrow's own file systems (`file_uris` and pyarrow.dataset), not
deltalake's pyarrow bridge, whose threads abort the interpreter at exit (delta-rs #2184).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from onceflow.config.sink import SinkConfig
from onceflow.errors import LakeFileOutsideTableError, SinkMovedError, SinkSchemaError
from onceflow.ledger.attempt import Attempt
from onceflow.sinks.delta.commits import last_seq, newest, publications
from onceflow.sinks.delta.evolution import OUTPUT_COLUMNS, evolve
from onceflow.sinks.delta.table_schema import (
    TAKES,
    arrow_schema,
    delta_schema,
    partition_value,
    table_layout,
)
from onceflow.sinks.lake.compaction import LiveFile
from onceflow.sinks.lake.partitions import Partitioner, check, refuse_other
from onceflow.sinks.lake.records import PREFIX, maintenance_summary
from onceflow.sinks.lake.sink import LakeSink
from onceflow.sinks.lake.stage_tables import LakeStageWriter
from onceflow.sinks.lake.storage import Storage
from onceflow.sinks.lake.table_format import TableFormat
from onceflow.sinks.outside import Publication
from onceflow.sinks.schema_evolution import Evolution

if TYPE_CHECKING:
    from onceflow.config.pipeline import PipelineConfig


class DeltaFormat(TableFormat):
    """Delta table `<warehouse>/<namespace>/<table>` of a lake sink."""

    commit_name = "version"
    table_kind = "Delta table"

    @property
    def lost_race(self) -> tuple[type[BaseException], ...]:
        from deltalake.exceptions import CommitFailedError

        return (CommitFailedError,)

    @property
    def location(self) -> str:
        """The table's URI (a local warehouse path as file://)."""
        base = self.sink.warehouse.rstrip("/")
        if base.startswith("/"):
            base = f"file://{base}"
        return f"{base}/{self.sink.namespace}/{self.sink.table}"

    def describe(self) -> str:
        return f"the Delta table {self.sink.name} at {self.location}"

    def describe_briefly(self) -> str:
        return f"Delta table {self.sink.name} ({self.location})"

    def asset_uri(self, pipeline: PipelineConfig) -> str:
        """The table's location (no credentials): the Airflow Asset of what it publishes."""
        return self.location

    def stage_writer(
        self, cur, fields: Iterable[tuple[str, str]], evolution: Evolution | None = None
    ) -> LakeStageWriter:
        """process, before staging: the Delta table created from the transform's output,
        or an existing one checked and evolved to it (sinks.delta.evolution). SinkSchemaError
        names each column that does not fit; the table is not changed then."""
        from deltalake import DeltaTable

        shape = table_layout(f"Delta table {self.sink.name}", self.sink.mode, fields)
        self.sink.lock_tables(cur)
        self.sink.ensure(cur)
        try:
            table = self.open_table(cur)
            if table is None:
                fields = self.sink.cfg.partition_by
                check(self.describe_briefly(), fields, {c.name: c.type for c in shape.table}, TAKES)
                table = DeltaTable.create(
                    self.location,
                    storage_options=self.sink.storage.delta_options(),
                    schema=delta_schema(shape.table),
                    partition_by=[f.column for f in fields] or None,
                    mode="ignore",  # made meanwhile by someone else: evolved below
                    name=self.sink.table,
                    configuration={OUTPUT_COLUMNS: ",".join(shape.users)},
                    raise_if_key_not_exists=False,
                )
            table = evolve(self, cur, table, shape, evolution)
            have = tuple(table.metadata().partition_columns)
            refuse_other(self.describe_briefly(), have, self.sink.cfg.partition_by)
            files = None if self.sink.mode.keeps_versions else self.table_schema(table)
        except SinkSchemaError:
            raise
        except Exception as e:
            raise SinkSchemaError(
                f"{self.describe_briefly()}: could not create or read it: {type(e).__name__}: {e}"
            ) from e
        append = files is not None  # the staged files are the table's
        files = files or arrow_schema(shape.files)
        split = self.partitioner(table) if append else None
        return self.sink.writer(shape.output, files, split, self.location)

    # -- what sinks.lake.sink asks of a table format (sinks.lake.table_format) ----------

    def open_table(self, cur=None) -> Any:
        from deltalake import DeltaTable

        options = self.sink.storage.delta_options()
        if not DeltaTable.is_deltatable(self.location, storage_options=options):
            return None
        return DeltaTable(self.location, storage_options=options)

    def table_location(self, table: Any) -> str:
        return self.location

    def newest(self, table: Any, t: Attempt) -> Publication | None:
        return newest(table, t.pipeline, t.seq, t.txid)

    def partitioner(self, table: Any) -> Partitioner | None:
        return Partitioner(self.sink.cfg.partition_by) if self.sink.cfg.partition_by else None

    def data_files(self, table: Any) -> list[LiveFile]:
        import pyarrow as pa

        files = pa.table(table.get_add_actions(flatten=True))
        columns = [files.column(c).to_pylist() for c in ("path", "size_bytes")]
        parts = table.metadata().partition_columns
        values = [files.column(f"partition.{c}").to_pylist() for c in parts]
        return [
            LiveFile(f"{self.location}/{path}", size, tuple(v[i] for v in values))
            for i, (path, size) in enumerate(zip(*columns, strict=True))
        ]

    def expire(
        self, table: Any, pipeline: str, before_ms: int, dry_run: bool
    ) -> tuple[int, list[str]]:
        """The log: a checkpoint, then the log entries older than the retention removed
        (Delta's own log clean-up; the app transaction lives on in the checkpoint); the
        files removed from the table before then (vacuum's list)."""
        from deltalake import CommitProperties

        age_ms = max(0, int(time.time() * 1000) - before_ms)
        unneeded = table.vacuum(
            retention_hours=age_ms // 3_600_000, dry_run=True, enforce_retention_duration=False
        )
        if dry_run:
            return 0, [f"{self.location}/{p}" for p in unneeded]
        # a log entry made at `before_ms` stays (the clean-up goes by whole seconds)
        retention = f"interval {age_ms // 1000 + 1} seconds"
        versions = self._log_versions()
        # the checkpoint first: delta-rs cleans up to a checkpoint made before the
        # retention's commit (whose post-commit hook already cleans up; deltalake 1.6.6)
        table.create_checkpoint()
        if table.metadata().configuration.get("delta.logRetentionDuration") != retention:
            versions += 1  # this commit's
            table.alter.set_table_properties(
                {"delta.logRetentionDuration": retention},
                raise_if_not_exists=False,
                commit_properties=CommitProperties(
                    custom_metadata=maintenance_summary(pipeline, "expiry")
                ),
            )
        table.cleanup_metadata()
        return versions - self._log_versions(), [f"{self.location}/{p}" for p in unneeded]

    def _log_versions(self) -> int:
        """How many commits the table's log holds (its JSON files; history() only reads
        back to the last checkpoint)."""
        from pyarrow import fs

        filesystem, path = self.sink.storage.filesystem(f"{self.location}/_delta_log")
        files = filesystem.get_file_info(fs.FileSelector(path))
        return sum(1 for f in files if f.path.endswith(".json"))

    def live_files(self, table: Any) -> list[str]:
        """As URIs under `location` (file_uris() names local files by bare path)."""
        import pyarrow as pa

        paths = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
        return [f"{self.location}/{p}" for p in paths]

    def table_schema(self, table: Any) -> Any:
        import pyarrow as pa

        return pa.schema(table.schema().to_arrow())

    def prepare_commit(
        self,
        table: Any,
        summary: dict[str, str],
        adds: list[tuple[str, int]],
        removes: list[str],
        seq: int | None,
    ) -> Callable[[], str]:
        """ONE version on top of the one read: the files added and removed, the summary in
        its commit info and, for a publish, the app transaction (the pipeline, the highest
        seq published)."""
        from deltalake import CommitProperties, Transaction

        actions = [*self._adds(adds, self.partitioner(table)), *self._removes(table, removes)]
        pipeline = summary[f"{PREFIX}pipeline"]
        apps = []
        if seq is not None:
            apps = [Transaction(pipeline, max(last_seq(table, pipeline) or 0, seq))]
        properties = CommitProperties(
            custom_metadata=summary, app_transactions=apps, max_commit_retries=0
        )
        return lambda: self._commit(table, actions, properties)

    def _commit(self, table: Any, actions: list[Any], properties: Any) -> str:
        from deltalake.exceptions import CommitFailedError

        try:
            table.create_write_transaction(
                actions,
                "append",
                table.schema(),
                partition_by=table.metadata().partition_columns,
                commit_properties=properties,
            )
        except CommitFailedError as e:
            raise SinkMovedError(
                f"Delta table {self.sink.name} changed since it was read ({e})"
            ) from None
        # without retries the commit is the version right after the one read, or none
        return str(table.version() + 1)

    def _relative(self, uri: str) -> str:
        """A data file's path as the Delta log names it: relative to the table's root."""
        root = self.location.rstrip("/") + "/"
        if not uri.startswith(root):
            raise LakeFileOutsideTableError(f"Delta table {self.location}", uri, root)
        return uri[len(root) :]

    def _adds(self, files: list[tuple[str, int]], split: Partitioner | None) -> Iterator[Any]:
        from deltalake.transaction import AddAction

        now = int(time.time() * 1000)
        for uri, records in files:
            filesystem, path = self.sink.storage.filesystem(uri)
            size = filesystem.get_file_info(path).size
            if size is None:
                raise FileNotFoundError(f"staged data file {uri} is gone")
            stats = json.dumps({"numRecords": records})
            values = {}
            if split is not None:
                columns = (f.column for f in split.fields)
                found = split.of_file(uri, self.sink.storage)
                values = dict(zip(columns, map(partition_value, found), strict=True))
            yield AddAction(self._relative(uri), size, values, now, True, stats)

    def _removes(self, table: Any, uris: list[str]) -> Iterator[Any]:
        import pyarrow as pa
        from deltalake.transaction import RemoveAction

        if not uris:
            return
        gone = {self._relative(u) for u in uris}
        files = pa.table(table.get_add_actions(flatten=True))
        parts = table.metadata().partition_columns
        now = int(time.time() * 1000)
        rows = files.select(["path", "size_bytes", *(f"partition.{c}" for c in parts)])
        for row in rows.to_pylist():
            if row["path"] in gone:
                values = {c: partition_value(row[f"partition.{c}"]) for c in parts}
                yield RemoveAction(row["path"], True, now, row["size_bytes"], values)

    def publications(self, table: Any, pipeline: str) -> Iterator[Publication]:
        return publications(table, pipeline)

    def history_start_ms(self, table: Any) -> int:
        return min(int(info["timestamp"]) for info in table.history())

    def scan(self, table: Any, columns: Iterable[str]) -> Any:
        """The table's rows (these columns), read from its live files."""
        files = self.sink.storage.dataset(self.live_files(table), self.table_schema(table))
        return files.to_table(columns=list(columns))


def delta_sink(
    schema: str,
    cfg: SinkConfig,
    warehouse: str,
    storage: Storage | Callable[[], Storage] | None = None,
) -> LakeSink:
    """A lake sink whose table is Delta table `<warehouse>/<namespace>/<table>`."""
    return LakeSink(schema, cfg, warehouse, DeltaFormat, storage=storage)
