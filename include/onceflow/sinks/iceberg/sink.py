"""An Apache Iceberg table as a pipeline's sink, outside the ledger's database, in any mode
(append, upsert, merge: sinks.lake.layout), published in two steps (onceflow.commit); what
every lake sink does (the stage, the publish by mode, clean-up) is sinks.lake.sink's.

The table lives in pyiceberg's SQL catalog in the ledger's PostgreSQL (sinks.iceberg.catalog)
and holds the mode's columns (sinks.iceberg.table_schema); process creates it from the
transform's output schema, or checks an existing one and evolves it (`stage_writer`,
sinks.iceberg.evolution), then writes the valid rows as data files.

A publish is ONE snapshot whose summary records the pipeline, txid, seq, attempt and the
records published (sinks.iceberg.snapshots): an append of the staged files (a fast append),
or an overwrite that also removes files (a re-run's, a rewrite's). The read before it looks
for the seq in the current snapshot's ancestry, and the snapshot is committed on top of the
one that read saw, or not at all (SinkMovedError: commit reads again); pyiceberg's own
commit retries are off for that (sinks.iceberg.catalog.fence_retries).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from onceflow.config.sink import SinkConfig
from onceflow.errors import SinkMovedError, SinkSchemaError
from onceflow.ledger.attempt import Attempt
from onceflow.sinks.iceberg.catalog import fence_retries, load_table, open_catalog
from onceflow.sinks.iceberg.data_files import data_file, live_data_files, referenced_files
from onceflow.sinks.iceberg.evolution import OUTPUT_COLUMNS, evolve
from onceflow.sinks.iceberg.partitioning import partition_spec, partitioner, spec_fields
from onceflow.sinks.iceberg.snapshots import LAST_SEQ, last_seq, newest, publications
from onceflow.sinks.iceberg.table_schema import iceberg_schema, table_layout
from onceflow.sinks.lake.compaction import LiveFile
from onceflow.sinks.lake.partitions import Partitioner, refuse_other
from onceflow.sinks.lake.sink import LakeSink
from onceflow.sinks.lake.stage_tables import LakeStageWriter
from onceflow.sinks.lake.storage import Storage
from onceflow.sinks.lake.table_format import TableFormat
from onceflow.sinks.outside import Publication
from onceflow.sinks.schema_evolution import Evolution

if TYPE_CHECKING:
    from onceflow.config.pipeline import PipelineConfig


class IcebergFormat(TableFormat):
    """Iceberg table `namespace.table` of a lake sink."""

    commit_name = "snapshot"
    table_kind = "Iceberg table"

    @property
    def lost_race(self) -> tuple[type[BaseException], ...]:
        from pyiceberg.exceptions import CommitFailedException

        return (CommitFailedException,)

    @property
    def identifier(self) -> tuple[str, str]:
        return self.sink.identifier

    def asset_uri(self, pipeline: PipelineConfig) -> str:
        """x-onceflow-iceberg://<ledger connection id>/<namespace>/<table>: the table in the
        catalog in the ledger's database (sinks.base.Sink.asset_uri)."""
        return (
            f"x-onceflow-iceberg://{pipeline.ledger_conn}/{self.sink.namespace}/{self.sink.table}"
        )

    # -- the tables -----------------------------------------------------------------------

    def stage_writer(
        self, cur, fields: Iterable[tuple[str, str]], evolution: Evolution | None = None
    ) -> LakeStageWriter:
        """process, before staging: the Iceberg table created from the transform's output,
        or an existing one checked and evolved to it (onceflow.sinks.schema_evolution: with
        `evolution`, the columns the output adds, by pyiceberg's update_schema, recorded as
        its txid's; without it nothing is added). SinkSchemaError names each column that
        does not fit; the table is not changed then."""
        from pyiceberg.exceptions import TableAlreadyExistsError
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        shape = table_layout(f"Iceberg table {self.sink.name}", self.sink.mode, fields)
        users = ",".join(shape.users)
        self.sink.lock_tables(cur)
        self.sink.ensure(cur)
        with open_catalog(
            cur, self.sink.warehouse, self.sink.storage.iceberg_properties()
        ) as catalog:
            try:
                catalog.create_namespace_if_not_exists(self.sink.namespace)
                if catalog.table_exists(self.identifier):
                    table = catalog.load_table(self.identifier)
                    table = evolve(self, cur, catalog, table, shape, evolution)
                else:
                    schema = iceberg_schema(shape.table)
                    what = f"Iceberg table {self.sink.name}"
                    try:
                        table = catalog.create_table(
                            self.identifier,
                            schema,
                            partition_spec=partition_spec(
                                what, self.sink.cfg.partition_by, shape, schema
                            ),
                            properties={"commit.retry.num-retries": "0", OUTPUT_COLUMNS: users},
                        )
                    except TableAlreadyExistsError:  # created meanwhile by someone else
                        table = catalog.load_table(self.identifier)
                        table = evolve(self, cur, catalog, table, shape, evolution)
                table = fence_retries(catalog, table)
                refuse_other(
                    f"Iceberg table {self.sink.name}",
                    spec_fields(table),
                    self.sink.cfg.partition_by,
                )
            except SinkSchemaError:
                raise
            except Exception as e:
                raise SinkSchemaError(
                    f"Iceberg table {self.sink.name} (warehouse {self.sink.warehouse}): could not create "
                    f"or read it: {type(e).__name__}: {e}"
                ) from e
        append = not self.sink.mode.keeps_versions  # the staged files are the table's
        files_schema = schema_to_pyarrow(table.schema() if append else iceberg_schema(shape.files))
        return self.sink.writer(
            shape.output,
            files_schema,
            partitioner(table, self.sink.cfg.partition_by) if append else None,
            table.location(),
        )

    # -- what sinks.lake.sink asks of a table format (sinks.lake.table_format) ----------

    def open_table(self, cur) -> Any:
        with open_catalog(
            cur, self.sink.warehouse, self.sink.storage.iceberg_properties()
        ) as catalog:
            table = load_table(catalog, self.identifier)
            return None if table is None else fence_retries(catalog, table)

    def release_table(self, table: Any) -> None:
        table.catalog.engine.dispose()

    def table_location(self, table: Any) -> str:
        return table.location()

    def newest(self, table: Any, t: Attempt) -> Publication | None:
        return newest(table, t.pipeline, t.seq)

    def live_files(self, table: Any) -> list[str]:
        return [f.file_path for f in live_data_files(table)]

    def partitioner(self, table: Any) -> Partitioner | None:
        return partitioner(table, self.sink.cfg.partition_by)

    def data_files(self, table: Any) -> list[LiveFile]:
        return [
            LiveFile(f.file_path, f.file_size_in_bytes, (f.spec_id, tuple(f.partition)))
            for f in live_data_files(table)
        ]

    def expire(
        self, table: Any, pipeline: str, before_ms: int, dry_run: bool
    ) -> tuple[int, list[str]]:
        """Iceberg's snapshot expiry of the snapshots older than `before_ms` (never the
        current one, nor a branch's or tag's); the data files only they referenced."""
        refs = {ref.snapshot_id for ref in table.metadata.refs.values()}
        snapshots = table.metadata.snapshots
        doomed = [
            s.snapshot_id
            for s in snapshots
            if s.timestamp_ms < before_ms and s.snapshot_id not in refs
        ]
        if not doomed:
            return 0, []
        before = referenced_files(table, snapshots)
        kept = [s for s in snapshots if s.snapshot_id not in set(doomed)]
        if not dry_run:
            table.maintenance.expire_snapshots().by_ids(doomed).commit()
        return len(doomed), sorted(before - referenced_files(table, kept))

    def table_schema(self, table: Any) -> Any:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        return schema_to_pyarrow(table.schema())

    def prepare_commit(
        self,
        table: Any,
        summary: dict[str, str],
        adds: list[tuple[str, int]],
        removes: list[str],
        seq: int | None,
    ) -> Callable[[], str]:
        """ONE snapshot with the summary: a fast append, or an overwrite when files are
        removed (the seq is in the summary already)."""
        split = self.partitioner(table)
        data_files = [
            data_file(table, p, split.of_file(p, self.sink.storage) if split else ())
            for p, _ in adds
        ]
        gone = set(removes)
        tx = table.transaction()
        last = max(last_seq(table) or 0, seq or 0)
        update = tx.update_snapshot(snapshot_properties={**summary, LAST_SEQ: str(last)})
        producer = update.overwrite() if gone else update.fast_append()
        with producer:
            for f in live_data_files(table) if gone else ():
                if f.file_path in gone:
                    producer.delete_data_file(f)
            for f in data_files:
                producer.append_data_file(f)
        return lambda: self._commit(tx, producer.snapshot_id)

    def _commit(self, tx: Any, snapshot_id: int) -> str:
        from pyiceberg.exceptions import CommitFailedException

        try:
            tx.commit_transaction()
        except CommitFailedException as e:
            raise SinkMovedError(
                f"Iceberg table {self.sink.name} changed since it was read ({e})"
            ) from None
        return str(snapshot_id)

    def publications(self, table: Any, pipeline: str) -> Iterator[Publication]:
        return publications(table, pipeline)

    def history_start_ms(self, table: Any) -> int:
        return min(s.timestamp_ms for s in table.metadata.snapshots)

    def scan(self, table: Any, columns: Iterable[str]) -> Any:
        return table.scan(selected_fields=tuple(columns)).to_arrow()


def iceberg_sink(
    schema: str,
    cfg: SinkConfig,
    warehouse: str,
    storage: Storage | Callable[[], Storage] | None = None,
) -> LakeSink:
    """A lake sink whose table is Iceberg table `namespace.table`."""
    return LakeSink(schema, cfg, warehouse, IcebergFormat, storage=storage)
