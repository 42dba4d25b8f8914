"""A Delta Lake table as a pipeline's sink, outside the ledger's database (`append`: one row
per source record), published in two steps (onceflow.commit), with the `deltalake` package
(delta-rs): no Spark jar, no JVM on the committing side.

The table lives at `<warehouse>/<namespace>/<table>` and holds the coordinates, the txid and
the transform's columns (sinks.delta.table_schema); process creates it from the transform's
output schema, or checks an existing one and evolves it (`bind_output`,
sinks.delta.evolution), then writes the valid rows as Parquet data files under the table's
location (onceflow.staging.file_stage, sinks.lake_files). In PostgreSQL, in the pipeline's
sink schema, `stage_T` holds the dead letters and `stage_T_files` the staged files, as for
an Iceberg table (sinks.iceberg).

Publishing (step 1 of the two-step commit) adds exactly the staged attempt's files in ONE
Delta commit (`create_write_transaction`: add actions, and for a re-run the remove actions
of the txid's live files) carrying the app transaction (the pipeline, the seq) and the
txid, seq and attempt in its commit info (sinks.delta.commits). The read before it asks the
app transaction for the seq, and the history for the attempt that published it. The commit
is made on top of the version the read saw or not at all (no retries: a commit that lost
the race raises SinkMovedError and commit reads again); two committers that set the same
app id conflict in Delta's own conflict check. Storage or log errors become
SinkUnavailableError naming the table; the commit's retry reads the table again.

The table is read with pyarrow's own file systems (`file_uris` and pyarrow.dataset), not
deltalake's pyarrow bridge, whose threads abort the interpreter at exit (delta-rs #2184).
"""

from __future__ import annotations

import contextlib
import json
import time
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
from onceflow.sinks.delta.commits import commit_metadata, last_seq, newest, publications
from onceflow.sinks.delta.evolution import OUTPUT_COLUMNS, evolve
from onceflow.sinks.delta.table_schema import FIXED_COLUMNS, delta_schema, table_columns
from onceflow.sinks.lake_audit import AUDIT_COLUMNS, LakeAudit
from onceflow.sinks.lake_files import attempt_dir, delete_files, files_on_storage, txid_prefix
from onceflow.transforms import COORDINATES


@dataclass(frozen=True)
class _Bound:
    """What process learns when it binds the sink to the transform's output."""

    users: tuple[str, ...]  # the user's output columns
    schema: Any  # pyarrow.Schema of the data files: the table's


class DeltaSink(LakeAudit):
    """Delta table `<warehouse>/<namespace>/<table>` of mode append, fed through the file
    stage."""

    commit_name = "version"
    table_kind = "Delta table"

    def __init__(
        self, schema: str, cfg: SinkConfig, warehouse: str, bound: _Bound | None = None
    ) -> None:
        super().__init__(schema, cfg.table)
        self.cfg = cfg
        self.namespace = cfg.namespace or schema
        self.warehouse = warehouse
        self._bound = bound

    @property
    def name(self) -> str:
        return f"{self.namespace}.{self.table}"

    @property
    def location(self) -> str:
        """The table's URI (a local warehouse path as file://)."""
        base = self.warehouse.rstrip("/")
        if base.startswith("/"):
            base = f"file://{base}"
        return f"{base}/{self.namespace}/{self.table}"

    @property
    def files_table(self) -> str:
        return f"stage_{self.table}_files"

    def describe(self) -> str:
        return f"the Delta table {self.name} at {self.location}"

    def asset_uri(self, dsn: str) -> str:
        """The table's location (no credentials): the Airflow Asset of what it publishes."""
        return self.location

    def _t(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    @property
    def stage_columns(self) -> tuple[str, ...]:
        if self._bound is None:
            raise RuntimeError("DeltaSink.stage_columns: bind_output first (process only)")
        return (*COORDINATES, *self._bound.users, "error", "key", "value", "tombstone", "row_hash")

    def file_stage(self, pipeline: str, txid: str, attempt: int) -> FileStage:
        if self._bound is None:
            raise RuntimeError("DeltaSink.file_stage: bind_output first (process only)")
        return FileStage(
            attempt_dir(self.location, pipeline, txid, attempt),
            self._bound.schema,
            self.files_table,
        )

    # -- the tables -----------------------------------------------------------------------

    def open_table(self) -> Any:
        """The table as it is now, or None if there is none at its location."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.location):
            return None
        return DeltaTable(self.location)

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
    ) -> DeltaSink:
        """process, before staging: the Delta table created from the transform's output,
        or an existing one checked and evolved to it (sinks.delta.evolution). SinkSchemaError
        names each column that does not fit; the table is not changed then."""
        import pyarrow as pa
        from deltalake import DeltaTable

        columns = table_columns(fields)
        users = ",".join(c.name for c in columns[len(FIXED_COLUMNS) :])
        cur.execute(
            "select pg_advisory_xact_lock(hashtextextended('onceflow.sink:' || %s, 0))",
            (f"{self.schema}.{self.table}",),
        )
        self.ensure(cur)
        try:
            table = self.open_table()
            if table is None:
                table = DeltaTable.create(
                    self.location,
                    schema=delta_schema(columns),
                    mode="ignore",  # made meanwhile by someone else: evolved below
                    name=self.table,
                    configuration={OUTPUT_COLUMNS: users},
                    raise_if_key_not_exists=False,
                )
            table = evolve(self, cur, table, columns, evolution)
            schema = pa.schema(table.schema().to_arrow())
        except SinkSchemaError:
            raise
        except Exception as e:
            raise SinkSchemaError(
                f"Delta table {self.name} ({self.location}): could not create or read it: "
                f"{type(e).__name__}: {e}"
            ) from e
        bound = _Bound(tuple(c.name for c in columns[len(FIXED_COLUMNS) :]), schema)
        return DeltaSink(self.schema, self.cfg, self.warehouse, bound)

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

    def _staged_files(self, cur, txid: str, attempt: int) -> list[tuple[str, int]]:
        """(path, records) of the attempt's staged data files."""
        cur.execute(
            sql.SQL(
                "select path, records from {} where txid = %s and attempt = %s order by part"
            ).format(self._t(self.files_table)),
            (txid, attempt),
        )
        return [(p, int(n)) for p, n in cur.fetchall()]

    # -- publishing (step 1 of onceflow.commit) --------------------------------------------

    @contextlib.contextmanager
    def _reaching(self, doing: str) -> Iterator[None]:
        """Errors of the table's log or storage while `doing` become SinkUnavailableError
        naming the table; Onceflow's own errors and a lost commit race pass through."""
        from deltalake.exceptions import CommitFailedError

        try:
            yield
        except (OnceflowError, CommitFailedError):
            raise
        except Exception as e:
            raise SinkUnavailableError(
                f"Delta table {self.name} ({self.location}): could not {doing}: "
                f"{type(e).__name__}: {e}"
            ) from e

    def read(self, cur, t: PublishTarget) -> SinkReading:
        """The newest version recording t's pipeline and seq, and the table it was read
        at (None: the table does not exist yet)."""
        with self._reaching(f"read its log for seq {t.seq}; nothing was published"):
            table = self.open_table()
            if table is None:
                return SinkReading(None, None)
            return SinkReading(newest(table, t.pipeline, t.seq, t.txid), table)

    def publish_outside(
        self, cur, t: PublishTarget, reading: SinkReading, replace: bool
    ) -> Publication:
        """ONE version on top of the one `reading` saw: the attempt's files added, and with
        `replace` the txid's live files removed."""
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError

        staged = self._staged_files(cur, t.txid, t.attempt)
        table = reading.state
        if table is None:
            if staged:
                raise LakeTableMissingError(
                    t.pipeline, t.txid, t.seq, t.attempt, f"Delta table {self.name}", len(staged)
                )
            return Publication(t.pipeline, t.txid, t.seq, t.attempt, 0, "")
        records = sum(n for _, n in staged)
        doing = f"publish txid {t.txid!r} (seq {t.seq}) attempt {t.attempt}"
        with self._reaching(f"{doing}'s {len(staged)} data file(s); nothing was published"):
            actions = [*self._adds(staged), *(self._removes(table, t) if replace else ())]
            last = last_seq(table, t.pipeline)
            properties = CommitProperties(
                custom_metadata=commit_metadata(t, records),
                app_transactions=[Transaction(t.pipeline, max(last or 0, t.seq))],
                max_commit_retries=0,
            )
        # a failure here may come after the log took the version: the commit's retry reads
        # the table again and publishes only if the seq is not there
        with self._reaching(f"commit the version to {doing}; the retry reads it again"):
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
                    f"Delta table {self.name} changed since it was read ({e})"
                ) from None
        # without retries the commit is the version right after the one read, or none
        version = table.version() + 1
        return Publication(t.pipeline, t.txid, t.seq, t.attempt, records, str(version))

    def _relative(self, uri: str) -> str:
        """A data file's path as the Delta log names it: relative to the table's root."""
        root = self.location.rstrip("/") + "/"
        if not uri.startswith(root):
            raise SinkUnavailableError(
                f"Delta table {self.name}: staged file {uri} is not under its location {root}"
            )
        return uri[len(root) :]

    def _adds(self, staged: list[tuple[str, int]]) -> Iterator[Any]:
        from deltalake.transaction import AddAction
        from pyarrow import fs

        now = int(time.time() * 1000)
        for uri, records in staged:
            filesystem, path = fs.FileSystem.from_uri(uri)
            size = filesystem.get_file_info(path).size
            if size is None:
                raise FileNotFoundError(f"staged data file {uri} is gone")
            stats = json.dumps({"numRecords": records})
            yield AddAction(self._relative(uri), size, {}, now, True, stats)

    def _removes(self, table: Any, t: PublishTarget) -> Iterator[Any]:
        """Remove actions for the txid's live files (by their folder)."""
        import pyarrow as pa
        from deltalake.transaction import RemoveAction

        prefix = self._relative(txid_prefix(self.location, t.pipeline, t.txid))
        files = pa.table(table.get_add_actions(flatten=True))
        now = int(time.time() * 1000)
        for path, size in zip(
            files.column("path").to_pylist(), files.column("size_bytes").to_pylist(), strict=True
        ):
            if path.startswith(prefix):
                yield RemoveAction(path, True, now, size, {})

    # -- files of attempts that never publish (onceflow.file_cleanup) ---------------------

    def staged_files(self, cur, pipeline: str, txids: set[str]) -> StagedFiles:
        """The Parquet files under the txids' folders, and the (txid, attempt) pairs a
        version in the table's history records."""
        with self._reaching("list the data files of its attempts"):
            table = self.open_table()
            if table is None or not txids:
                return StagedFiles({}, set())
            published = {(p.txid, p.attempt) for p in publications(table, pipeline)}
            return files_on_storage(self.location, pipeline, txids, published)

    def remove_files(self, paths: list[str]) -> None:
        """Delete the files, then their attempt folders if left empty."""
        delete_files(paths)

    # -- audit (sinks.lake_audit) ----------------------------------------------------------

    def _load_table(self, cur) -> Any:
        return self.open_table()

    def _scan_coordinates(self, table: Any) -> Any:
        return self.scan(table, AUDIT_COLUMNS)

    def _publications(self, table: Any, pipeline: str) -> Iterator[Publication]:
        return publications(table, pipeline)

    @staticmethod
    def scan(table: Any, columns: Iterable[str]) -> Any:
        """The table's rows (these columns) as a pyarrow.Table, read from its live files."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        schema = pa.schema(table.schema().to_arrow())
        files = ds.dataset(table.file_uris(), schema=schema, format="parquet")
        return files.to_table(columns=list(columns))
