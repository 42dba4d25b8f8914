"""An Apache Iceberg table as a pipeline's sink, outside the ledger's database (`append`:
one row per source record), published in two steps (onceflow.commit).

The table lives in pyiceberg's SQL catalog in the ledger's PostgreSQL (sinks.iceberg.catalog)
and holds the coordinates, the txid and the transform's columns (sinks.iceberg.table_schema);
process creates it from the transform's output schema, or checks an existing one and
evolves it (`bind_output`, sinks.iceberg.evolution), then writes the valid rows as data
files (sinks.iceberg.data_files).

In PostgreSQL, in the pipeline's sink schema, for an Iceberg table T:

- `stage_T`: the dead letters process staged, tagged (txid, attempt, part), which commit
  publishes into onceflow.dead_letters (the ledger's, whatever the sink);
- `stage_T_files`: the data files process staged, one per part with valid rows, each
  recorded with its part's claim (onceflow.staging.file_stage), with its row count and
  checksum.

Both are small (dead letters and one row per part), so unlike the other stage tables they
are logged: the rows naming staged files survive a database crash like the files do.

Publishing (step 1 of the two-step commit) adds exactly the staged attempt's files in ONE
snapshot recording the pipeline, txid, seq and attempt (sinks.iceberg.snapshots): an
append, or for a re-run (or a txid an earlier attempt already published) an overwrite that
also removes the txid's live files. The read before it (`read`) looks for the seq in the
snapshots (the current snapshot's ancestry), and the snapshot is committed on top of the one
that read saw, or not at all (SinkMovedError: commit reads again); pyiceberg's own commit
retries are off for that (sinks.iceberg.catalog.fence_retries). A catalog or warehouse that
cannot be reached (or a staged file gone) makes the read or the publish fail with
SinkUnavailableError naming the table and the warehouse; the commit's retry reads the table
again. The audit's rules: sinks.iceberg.audit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from onceflow.config.sink import SinkConfig
from onceflow.errors import (
    LakeTableMissingError,
    OnceflowError,
    SinkMovedError,
    SinkSchemaError,
    SinkUnavailableError,
)
from onceflow.schema_evolution import Evolution
from onceflow.sinks.base import (
    FileStage,
    Publication,
    PublishTarget,
    SinkReading,
    StagedCounts,
    StagedFiles,
)
from onceflow.sinks.iceberg.audit import TableAudit
from onceflow.sinks.iceberg.catalog import fence_retries, load_table, open_catalog
from onceflow.sinks.iceberg.data_files import files_on_storage, live_files
from onceflow.sinks.iceberg.evolution import OUTPUT_COLUMNS, evolve
from onceflow.sinks.iceberg.snapshots import newest, snapshot_summary
from onceflow.sinks.iceberg.table_schema import FIXED_COLUMNS, iceberg_schema, table_columns
from onceflow.sinks.lake_files import attempt_dir, delete_files
from onceflow.transforms import COORDINATES


@dataclass(frozen=True)
class _Bound:
    """What process learns when it binds the sink to the transform's output."""

    users: tuple[str, ...]  # the user's output columns
    location: str  # the table's location
    schema: Any  # pyarrow.Schema of the data files: the table's, with its field ids


class IcebergSink(TableAudit):
    """Iceberg table `namespace.table` of mode append, fed through the file stage."""

    commit_name = "snapshot"

    def __init__(
        self,
        schema: str,
        cfg: SinkConfig,
        warehouse: str,
        bound: _Bound | None = None,
    ) -> None:
        super().__init__(schema, cfg.table)
        self.cfg = cfg
        self.namespace = cfg.namespace or schema
        self.warehouse = warehouse
        self._bound = bound

    @property
    def identifier(self) -> tuple[str, str]:
        return (self.namespace, self.table)

    @property
    def name(self) -> str:
        return f"{self.namespace}.{self.table}"

    @property
    def files_table(self) -> str:
        return f"stage_{self.table}_files"

    def _t(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    @property
    def stage_columns(self) -> tuple[str, ...]:
        if self._bound is None:
            raise RuntimeError("IcebergSink.stage_columns: bind_output first (process only)")
        return (*COORDINATES, *self._bound.users, "error", "key", "value", "tombstone", "row_hash")

    def file_stage(self, pipeline: str, txid: str, attempt: int) -> FileStage:
        if self._bound is None:
            raise RuntimeError("IcebergSink.file_stage: bind_output first (process only)")
        return FileStage(
            attempt_dir(self._bound.location, pipeline, txid, attempt),
            self._bound.schema,
            self.files_table,
        )

    def asset_uri(self, dsn: str) -> str:
        """iceberg://host:port/database/namespace/table: the table in the ledger's catalog."""
        return f"iceberg://{self.database_address(dsn)}/{self.namespace}/{self.table}"

    # -- the tables -----------------------------------------------------------------------

    def ensure(self, cur) -> None:
        cur.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(self.schema)))
        cur.execute(
            sql.SQL(
                "create table if not exists {} (txid text not null, attempt integer not null,"
                " part integer not null, topic text not null, partition integer not null,"
                ' "offset" bigint not null, error text, key bytea, value bytea, row_hash bigint)'
            ).format(self._t(self.stage_table))
        )
        cur.execute(
            sql.SQL(
                "create table if not exists {} (txid text not null, attempt integer not null,"
                " part integer not null, path text not null, records bigint not null,"
                " checksum numeric not null, primary key (txid, attempt, part))"
            ).format(self._t(self.files_table))
        )

    def bind_output(
        self, cur, fields: Iterable[tuple[str, str]], evolution: Evolution | None = None
    ) -> IcebergSink:
        """process, before staging: the Iceberg table created from the transform's output,
        or an existing one checked and evolved to it (onceflow.schema_evolution: with
        `evolution`, the columns the output adds, by pyiceberg's update_schema, recorded as
        its txid's; without it nothing is added). SinkSchemaError names each column that
        does not fit; the table is not changed then."""
        from pyiceberg.exceptions import TableAlreadyExistsError
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        columns = table_columns(fields)
        users = ",".join(c.name for c in columns[len(FIXED_COLUMNS) :])
        cur.execute(
            "select pg_advisory_xact_lock(hashtextextended('onceflow.sink:' || %s, 0))",
            (f"{self.schema}.{self.table}",),
        )
        self.ensure(cur)
        with open_catalog(cur, self.warehouse) as catalog:
            try:
                catalog.create_namespace_if_not_exists(self.namespace)
                if catalog.table_exists(self.identifier):
                    table = catalog.load_table(self.identifier)
                    table = evolve(self, cur, catalog, table, columns, evolution)
                else:
                    try:
                        table = catalog.create_table(
                            self.identifier,
                            iceberg_schema(columns),
                            properties={"commit.retry.num-retries": "0", OUTPUT_COLUMNS: users},
                        )
                    except TableAlreadyExistsError:  # created meanwhile by someone else
                        table = catalog.load_table(self.identifier)
                        table = evolve(self, cur, catalog, table, columns, evolution)
                table = fence_retries(catalog, table)
            except SinkSchemaError:
                raise
            except Exception as e:
                raise SinkSchemaError(
                    f"Iceberg table {self.name} (warehouse {self.warehouse}): could not create "
                    f"or read it: {type(e).__name__}: {e}"
                ) from e
        bound = _Bound(
            tuple(c.name for c in columns[len(FIXED_COLUMNS) :]),
            table.location(),
            schema_to_pyarrow(table.schema()),
        )
        return IcebergSink(self.schema, self.cfg, self.warehouse, bound)

    # -- staging --------------------------------------------------------------------------

    def has_staged(self, cur, txid: str, attempt: int) -> bool:
        cur.execute(
            sql.SQL(
                "select exists (select 1 from {} where txid = %s and attempt = %s)"
                " or exists (select 1 from {} where txid = %s and attempt = %s)"
            ).format(self._t(self.files_table), self._t(self.stage_table)),
            (txid, attempt, txid, attempt),
        )
        return cur.fetchone()[0]

    def staged_counts(self, cur, txid: str, attempt: int) -> StagedCounts:
        cur.execute(
            sql.SQL(
                "select (select coalesce(sum(records), 0) from {files} where txid = %s and attempt = %s),"
                " (select count(*) from {stage} where txid = %s and attempt = %s),"
                " ((select coalesce(sum(checksum), 0) from {files} where txid = %s and attempt = %s)"
                " + (select coalesce(sum(row_hash::numeric), 0) from {stage}"
                "    where txid = %s and attempt = %s))::text"
            ).format(files=self._t(self.files_table), stage=self._t(self.stage_table)),
            (txid, attempt) * 4,
        )
        valid, dead, checksum = cur.fetchone()
        return StagedCounts(int(valid) + int(dead), int(valid), int(dead), checksum)

    def drop_staged(self, cur, txid: str, up_to_attempt: int) -> None:
        for table in (self.stage_table, self.files_table):
            cur.execute(
                sql.SQL("delete from {} where txid = %s and attempt <= %s").format(self._t(table)),
                (txid, up_to_attempt),
            )

    def _staged_files(self, cur, txid: str, attempt: int) -> list[str]:
        cur.execute(
            sql.SQL("select path from {} where txid = %s and attempt = %s order by part").format(
                self._t(self.files_table)
            ),
            (txid, attempt),
        )
        return [r[0] for r in cur.fetchall()]

    # -- publishing (step 1 of onceflow.commit) --------------------------------------------

    @contextlib.contextmanager
    def _reaching(self, doing: str) -> Iterator[None]:
        """Errors of the catalog or the warehouse's storage (pyiceberg's, pyarrow's, the
        OS's) while `doing` become SinkUnavailableError naming the table and the warehouse;
        Onceflow's own errors and a lost commit race pass through."""
        from pyiceberg.exceptions import CommitFailedException

        try:
            yield
        except (OnceflowError, CommitFailedException):
            raise
        except Exception as e:
            raise SinkUnavailableError(
                f"Iceberg table {self.name} (warehouse {self.warehouse}): could not {doing}: "
                f"{type(e).__name__}: {e}"
            ) from e

    def read(self, cur, t: PublishTarget) -> SinkReading:
        """The newest snapshot recording t's pipeline and seq, and the table it was read
        from (None: the table does not exist yet)."""
        with (
            self._reaching(f"read its snapshots for seq {t.seq}; nothing was published"),
            open_catalog(cur, self.warehouse) as catalog,
        ):
            table = load_table(catalog, self.identifier)
            if table is None:
                return SinkReading(None, None)
            table = fence_retries(catalog, table)
            return SinkReading(newest(table, t.pipeline, t.seq), table)

    def publish_outside(
        self, cur, t: PublishTarget, reading: SinkReading, replace: bool
    ) -> Publication:
        """ONE snapshot on top of the one `reading` saw: an append of the attempt's files,
        or with `replace` an overwrite that also deletes the txid's live files."""
        from pyiceberg.exceptions import CommitFailedException
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        paths = self._staged_files(cur, t.txid, t.attempt)
        table = reading.state
        if table is None:
            if paths:
                raise LakeTableMissingError(
                    t.pipeline, t.txid, t.seq, t.attempt, f"Iceberg table {self.name}", len(paths)
                )
            return Publication(t.pipeline, t.txid, t.seq, t.attempt, 0, "")
        doing = f"publish txid {t.txid!r} (seq {t.seq}) attempt {t.attempt}"
        try:
            with self._reaching(f"{doing}'s {len(paths)} data file(s); nothing was published"):
                data_files = [parquet_file_to_data_file(table.io, table.metadata, p) for p in paths]
                tx = table.transaction()
                update = tx.update_snapshot(snapshot_properties=snapshot_summary(t))
                producer = update.overwrite() if replace else update.fast_append()
                with producer:
                    if replace:
                        for f in live_files(table, t.pipeline, t.txid):
                            producer.delete_data_file(f)
                    for f in data_files:
                        producer.append_data_file(f)
            # a failure here may come after the catalog took the snapshot: the commit's
            # retry reads the table again and publishes only if the seq is not there
            with self._reaching(f"commit the snapshot to {doing}; the retry reads it again"):
                try:
                    tx.commit_transaction()
                except CommitFailedException as e:
                    raise SinkMovedError(
                        f"Iceberg table {self.name} changed since it was read ({e})"
                    ) from None
        finally:
            table.catalog.engine.dispose()
        records = sum(f.record_count for f in data_files)
        return Publication(t.pipeline, t.txid, t.seq, t.attempt, records, str(producer.snapshot_id))

    # -- files of attempts that never publish (onceflow.file_cleanup) ---------------------

    def staged_files(self, cur, pipeline: str, txids: set[str]) -> StagedFiles:
        """The Parquet files under the txids' folders (`<txid>/attempt=<n>/`), and the
        (txid, attempt) pairs a snapshot in the table's history records."""
        with self._reaching("list the data files of its attempts"):
            with open_catalog(cur, self.warehouse) as catalog:
                table = load_table(catalog, self.identifier)
            if table is None or not txids:
                return StagedFiles({}, set())
            return files_on_storage(table, pipeline, txids)

    def remove_files(self, paths: list[str]) -> None:
        """Delete the files, then their attempt folders if left empty."""
        delete_files(paths)
