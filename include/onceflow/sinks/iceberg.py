"""An Apache Iceberg table as a pipeline's sink, outside the ledger's database (`append`:
one row per source record), published in two steps (onceflow.outside_commit).

The catalog is pyiceberg's SQL catalog in the ledger's PostgreSQL, in a schema of its own
(CATALOG_SCHEMA: pyiceberg's tables iceberg_tables and iceberg_namespace_properties),
reached with the ledger connection's own parameters and `search_path` set to that schema
(pyiceberg names its tables unqualified). The warehouse, where new tables go, is
[pipelines.NAME.sink] `warehouse` or a folder under ONCEFLOW_HOME; any URI pyiceberg's file
IO and pyarrow's file systems open.

In PostgreSQL, in the pipeline's sink schema, for an Iceberg table T:

- `stage_T`: the dead letters process staged, tagged (txid, attempt, part), which commit
  publishes into onceflow.dead_letters (the ledger's, whatever the sink);
- `stage_T_files`: the data files process staged, one per part with valid rows, each
  recorded with its part's claim (onceflow.file_stage), with its row count and checksum.

Both are small (dead letters and one row per part), so unlike the other stage tables they
are logged: the rows naming staged files survive a database crash like the files do.

The Iceberg table holds topic, partition, epoch, offset (the record's coordinates), txid,
then the transform's columns; process creates it from the transform's output schema, or
checks an existing one and evolves it (`bind_output`, onceflow.schema_evolution): a column
the output adds is added, optional, by pyiceberg's update_schema (data files written before
it read null there, none is rewritten); a column the output no longer gives, or gives with
another type, is refused. The table property `onceflow.output-columns` keeps the output's
columns, so that a removed column is told from an optional column someone else added. Data
files are written under the table's location with the table's schema as bound (field ids
included), `data/onceflow/<pipeline>/txid=<txid, path-safe>-<hash>/attempt=<n>/`.

Publishing (step 1 of the two-step commit) adds exactly the staged attempt's files in ONE
snapshot whose summary records onceflow.pipeline, onceflow.txid, onceflow.seq and
onceflow.attempt: an append, or for a re-run (or a txid an earlier attempt already
published) an overwrite that also removes the txid's live files. The read before it (`read`)
looks for the seq in the snapshots (the current snapshot's ancestry), and the snapshot is
committed on top of the one that read saw, or not at all (SinkMovedError: commit reads
again). So the table's `commit.retry.num-retries` is 0: pyiceberg would otherwise re-apply
a commit that lost a race on top of the winner, without the summaries being read again.
A catalog or warehouse that cannot be reached (or a staged file gone) makes the read or the
publish fail with SinkUnavailableError naming the table and the warehouse; the commit's
retry reads the table again.

The audit scans the table (txid and coordinates) into a temporary table of the audit's
transaction, so the rules shared with the other sinks (counts per txid, placement inside
the ranges, no record both published and dead-lettered) run as SQL; its own truth: no
coordinates twice, and per committed seq one snapshot per attempt, the newest with the
ledger's txid, attempt and record count.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from onceflow import schema_evolution
from onceflow.config import SinkConfig
from onceflow.errors import OnceflowError, SinkMovedError, SinkSchemaError, SinkUnavailableError
from onceflow.schema_evolution import Evolution
from onceflow.sinks.base import (
    FileStage,
    OutsideSink,
    Publication,
    PublishTarget,
    SinkReading,
    StagedCounts,
    StagedFiles,
    check_output_column,
    sink_type,
)
from onceflow.transforms import COORDINATES, PASSED_THROUGH

log = logging.getLogger("onceflow.sinks.iceberg")

CATALOG_SCHEMA = "onceflow_iceberg"
CATALOG_NAME = "onceflow"
SUMMARY_PREFIX = "onceflow."
# The table property naming the user's columns of the output the table was last bound to
# (comma-separated): a column listed there that the output no longer gives is a removed
# column (onceflow.schema_evolution); an optional column the table has besides them is
# someone else's and left alone.
OUTPUT_COLUMNS = "onceflow.output-columns"
# Commits of a schema change tried before giving up to the commits that keep winning.
EVOLVE_TRIES = 5
# The columns Onceflow writes before the transform's: (name, Iceberg type name).
FIXED_COLUMNS = (
    ("topic", "string"),
    ("partition", "int"),
    ("epoch", "int"),
    ("offset", "long"),
    ("txid", "string"),
)
# Spark SQL types (DataType.simpleString(), or typeName() spellings) -> Iceberg types.
_SPARK_TO_ICEBERG = {
    "string": "string",
    "bigint": "long",
    "long": "long",
    "int": "int",
    "integer": "int",
    "double": "double",
    "float": "float",
    "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp",
    "date": "date",
    "boolean": "boolean",
    "binary": "binary",
}


def iceberg_type(column: str, spark_type: str) -> str:
    """The Iceberg type (as pyiceberg prints it) of an output column, or SinkSchemaError."""
    return sink_type(column, spark_type, _SPARK_TO_ICEBERG, "decimal({p}, {s})", "an Iceberg sink")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # an Iceberg primitive type as pyiceberg prints it ("long", "decimal(10, 2)")
    required: bool = False


def table_columns(fields: Iterable[tuple[str, str]]) -> tuple[Column, ...]:
    """The Iceberg table's columns for a transform's output ((name, Spark type) pairs):
    the fixed ones (required), then the user's (optional)."""
    columns = [Column(n, t, required=True) for n, t in FIXED_COLUMNS]
    for name, spark_type in fields:
        if name in PASSED_THROUGH:
            continue
        check_output_column(name)
        columns.append(Column(name, iceberg_type(name, spark_type)))
    return tuple(columns)


def txid_dir(txid: str) -> str:
    """The folder of a txid's data files: path-safe, and unique by a hash of the txid."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", txid)[:80]
    return f"txid={slug}-{hashlib.sha256(txid.encode()).hexdigest()[:12]}"


# -- the catalog ----------------------------------------------------------------------------


def _connection_params(conn: Any) -> dict[str, str]:
    """The libpq parameters of a psycopg2 connection (password included), with search_path
    set to the catalog's schema: the catalog lives in that connection's database."""
    params = {k: v for k, v in conn.get_dsn_parameters().items() if v}
    if conn.info.password:
        params["password"] = conn.info.password
    params["options"] = f"{params.get('options', '')} -csearch_path={CATALOG_SCHEMA}".strip()
    params["application_name"] = "onceflow-catalog"
    return params


def _prepare_catalog(params: dict[str, str], open_: Any) -> Any:
    """Open the catalog; the first opener creates its schema and tables, under an advisory
    lock so that concurrent first openers do not race on the DDL."""
    import psycopg2

    conn = psycopg2.connect(**params)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "select to_regclass(%s) is not null and to_regclass(%s) is not null",
                (
                    f"{CATALOG_SCHEMA}.iceberg_tables",
                    f"{CATALOG_SCHEMA}.iceberg_namespace_properties",
                ),
            )
            if cur.fetchone()[0]:
                return open_()
            cur.execute("select pg_advisory_lock(hashtextextended('onceflow.iceberg_catalog', 0))")
            cur.execute(
                sql.SQL("create schema if not exists {}").format(sql.Identifier(CATALOG_SCHEMA))
            )
        return open_()  # creates the tables if still missing, in its own transaction
    finally:
        conn.close()  # releases the session lock


@contextlib.contextmanager
def open_catalog(cur: Any, warehouse: str) -> Iterator[Any]:
    """pyiceberg's SqlCatalog in the database of `cur`'s connection (CATALOG_SCHEMA)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.engine import URL

    params = _connection_params(cur.connection)
    uri = URL.create("postgresql+psycopg2", query=params).render_as_string(hide_password=False)
    catalog = _prepare_catalog(
        params, lambda: SqlCatalog(CATALOG_NAME, uri=uri, warehouse=warehouse)
    )
    try:
        yield catalog
    finally:
        catalog.engine.dispose()


# -- the sink -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bound:
    """What process learns when it binds the sink to the transform's output."""

    users: tuple[str, ...]  # the user's output columns
    location: str  # the table's location
    schema: Any  # pyarrow.Schema of the data files: the table's, with its field ids


class IcebergSink(OutsideSink):
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
        self._audit_cur: int | None = None  # the audit cursor whose scan is loaded
        self._audit_table: Any = None

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
            f"{self._data_root(self._bound.location, pipeline)}/{txid_dir(txid)}/attempt={attempt}",
            self._bound.schema,
            self.files_table,
        )

    @staticmethod
    def _data_root(location: str, pipeline: str) -> str:
        return f"{location.rstrip('/')}/data/onceflow/{pipeline}"

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
                    table = self._evolve(cur, catalog, table, columns, evolution)
                else:
                    try:
                        table = catalog.create_table(
                            self.identifier,
                            _schema(columns),
                            properties={"commit.retry.num-retries": "0", OUTPUT_COLUMNS: users},
                        )
                    except TableAlreadyExistsError:  # created meanwhile by someone else
                        table = catalog.load_table(self.identifier)
                        table = self._evolve(cur, catalog, table, columns, evolution)
                table = _fence_retries(catalog, table)
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

    def _evolve(
        self,
        cur,
        catalog: Any,
        table: Any,
        columns: tuple[Column, ...],
        evolution: Evolution | None,
    ) -> Any:
        """The existing table fitted to the output: the columns it adds added (optional) and
        the output's columns kept in the table property OUTPUT_COLUMNS, in ONE commit of the
        table, recorded in the ledger in the caller's transaction. A publish committing
        meanwhile (a commit's snapshot) makes the commit fail: read the table and decide
        again. A crash between the table's commit and the ledger's leaves the columns added
        without their event (the next bind finds them there)."""
        from pyiceberg.exceptions import CommitFailedException

        users = ",".join(c.name for c in columns[len(FIXED_COLUMNS) :])
        for _ in range(EVOLVE_TRIES):
            added, problems = schema_evolution.decide(
                [self._fit(table, columns)], evolution.policy if evolution else "fail"
            )
            if problems:
                raise schema_evolution.refusal(
                    f"the Iceberg table {self.name}", problems, self._fixes(problems, evolution)
                )
            if not added and table.properties.get(OUTPUT_COLUMNS) == users:
                return table
            try:
                with table.transaction() as tx:
                    if added:
                        with tx.update_schema() as update:
                            for a in added:
                                update.add_column(a.column, _primitive(a.type))
                    tx.set_properties(**{OUTPUT_COLUMNS: users})
            except CommitFailedException:
                table = catalog.load_table(self.identifier)
                continue
            schema_evolution.record(cur, evolution, "iceberg", added)
            return catalog.load_table(self.identifier)
        raise SinkUnavailableError(
            f"Iceberg table {self.name} (warehouse {self.warehouse}): its schema could not be "
            f"evolved in {EVOLVE_TRIES} tries, other commits of the table won each time; "
            "nothing was staged, the retry tries again"
        )

    def _fit(self, table: Any, columns: tuple[Column, ...]) -> schema_evolution.TableFit:
        """The table as the evolution rule sees it: a required column of the table that the
        output makes optional counts as another type; the table's OUTPUT_COLUMNS are the
        columns an earlier output gave (a table made by something else has none)."""
        wanted = {c.name: c for c in columns}
        have = []
        for f in table.schema().fields:
            c = wanted.get(f.name)
            loosened = f.required and c is not None and not c.required
            have.append(
                (f.name, f"{'required ' if loosened else ''}{f.field_type}", not f.required)
            )
        previous = table.properties.get(OUTPUT_COLUMNS)
        return schema_evolution.TableFit(
            name=self.name,
            wanted=tuple((c.name, c.type) for c in columns),
            have=tuple(have),
            user=frozenset(c.name for c in columns[len(FIXED_COLUMNS) :]),
            previous=frozenset(previous.split(",")) if previous else frozenset(),
        )

    def _fixes(
        self, problems: list[schema_evolution.Problem], evolution: Evolution | None
    ) -> list[str]:
        """What to do about a refusal of the table."""
        if schema_evolution.only_added(problems):
            return [
                schema_evolution.ALLOW,
                "add them yourself with Iceberg's schema evolution (pyiceberg's "
                f"update_schema(), Spark SQL `ALTER TABLE {self.name} ADD COLUMNS ...`)",
            ]
        return [
            schema_evolution.CHANGE_BACK,
            schema_evolution.new_tables("a new table", evolution),
            "evolve the table yourself with Iceberg's schema evolution (pyiceberg's "
            f"update_schema(), Spark SQL `ALTER TABLE {self.name} ...`): drop a column the "
            "output no longer gives, make a required one optional, or widen a type where "
            "Iceberg allows it (int to long, float to double, a decimal's precision)",
        ]

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

    # -- publishing (step 1 of onceflow.outside_commit) -----------------------------------

    def _load(self, catalog: Any) -> Any:
        """The table, or None if it does not exist (no batch with output ran yet)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return catalog.load_table(self.identifier)
        except NoSuchTableError:
            return None

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
            table = self._load(catalog)
            if table is None:
                return SinkReading(None, None)
            table = _fence_retries(catalog, table)
            return SinkReading(_newest(table, t.pipeline, t.seq), table)

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
                raise OnceflowError(
                    f"Iceberg table {self.name} does not exist, but txid {t.txid!r} attempt "
                    f"{t.attempt} staged {len(paths)} data file(s) for it: was it dropped?"
                )
            return Publication(t.pipeline, t.txid, t.seq, t.attempt, 0, "")
        doing = f"publish txid {t.txid!r} (seq {t.seq}) attempt {t.attempt}"
        try:
            with self._reaching(f"{doing}'s {len(paths)} data file(s); nothing was published"):
                data_files = [parquet_file_to_data_file(table.io, table.metadata, p) for p in paths]
                tx = table.transaction()
                update = tx.update_snapshot(snapshot_properties=_summary(t))
                producer = update.overwrite() if replace else update.fast_append()
                with producer:
                    if replace:
                        for f in self._live_files(table, t.pipeline, t.txid):
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

    def _live_files(self, table: Any, pipeline: str, txid: str) -> Iterator[Any]:
        """The txid's data files in the current snapshot (by their folder)."""
        snapshot = table.current_snapshot()
        if snapshot is None:
            return
        prefix = f"{self._data_root(table.location(), pipeline)}/{txid_dir(txid)}/"
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.data_file.file_path.startswith(prefix):
                    yield entry.data_file

    # -- files of attempts that never publish (onceflow.file_cleanup) ---------------------

    def staged_files(self, cur, pipeline: str, txids: set[str]) -> StagedFiles:
        """The Parquet files under the txids' folders (`<txid>/attempt=<n>/`), and the
        (txid, attempt) pairs a snapshot in the table's history records."""
        with self._reaching("list the data files of its attempts"):
            return self._files_on_storage(cur, pipeline, txids)

    def _files_on_storage(self, cur, pipeline: str, txids: set[str]) -> StagedFiles:
        from pyarrow import fs

        with open_catalog(cur, self.warehouse) as catalog:
            table = self._load(catalog)
        if table is None or not txids:
            return StagedFiles({}, set())
        root = self._data_root(table.location(), pipeline)
        by_dir = {txid_dir(t): t for t in txids}
        # one txid (a commit's): its own folder; more (the cleanup command): the whole root
        top = f"{root}/{txid_dir(next(iter(txids)))}" if len(txids) == 1 else root
        filesystem, path = fs.FileSystem.from_uri(top)
        base = fs.FileSystem.from_uri(root)[1]  # the root as the file system names it
        files: dict[tuple[str, int], list[str]] = {}
        selector = fs.FileSelector(path, recursive=True, allow_not_found=True)
        for info in filesystem.get_file_info(selector):
            parts = info.path[len(base) :].strip("/").split("/")
            if info.type != fs.FileType.File or len(parts) != 3 or parts[0] not in by_dir:
                continue
            m = re.fullmatch(r"attempt=(\d+)", parts[1])
            if m:
                key = (by_dir[parts[0]], int(m.group(1)))
                files.setdefault(key, []).append(f"{root}/{'/'.join(parts)}")
        published = {(p.txid, p.attempt) for p in _publications(table, pipeline)}
        return StagedFiles(files, published)

    def remove_files(self, paths: list[str]) -> None:
        """Delete the files, then their attempt folders if left empty."""
        from pyarrow import fs

        for uri in paths:
            filesystem, path = fs.FileSystem.from_uri(uri)
            with contextlib.suppress(FileNotFoundError):
                filesystem.delete_file(path)
        for uri in {p.rsplit("/", 1)[0] for p in paths}:
            filesystem, folder = fs.FileSystem.from_uri(uri)
            selector = fs.FileSelector(folder, allow_not_found=True)
            if not filesystem.get_file_info(selector):  # a zombie's later file stays
                with contextlib.suppress(OSError):
                    filesystem.delete_dir(folder)

    # -- the audit ------------------------------------------------------------------------

    _ROWS = "onceflow_iceberg_rows"  # temporary table of the audit's transaction

    def _table_for_audit(self, cur) -> Any:
        """The table (None if missing) and its rows loaded into a temporary table, once per
        audit transaction."""
        cur.execute("select to_regclass(%s) is not null", (f"pg_temp.{self._ROWS}",))
        loaded = cur.fetchone()[0]  # another transaction's cursor may reuse a dead one's id
        if self._audit_cur != id(cur) or not loaded:
            with open_catalog(cur, self.warehouse) as catalog:
                self._audit_table = self._load(catalog)
                self._audit_cur = id(cur)
                if self._audit_table is not None:
                    self._load_rows(cur, self._audit_table)
        return self._audit_table

    def _load_rows(self, cur, table: Any) -> None:
        import pyarrow.csv as pcsv

        names = ["txid", "topic", "partition", "epoch", "offset"]
        rows = table.scan(selected_fields=tuple(names)).to_arrow().select(names)
        cur.execute(f"drop table if exists pg_temp.{self._ROWS}")
        cur.execute(
            f"create temp table {self._ROWS} (txid text, topic text, partition integer,"
            ' epoch integer, "offset" bigint) on commit drop'
        )
        out = io.BytesIO()
        pcsv.write_csv(rows, out, pcsv.WriteOptions(include_header=False))
        out.seek(0)
        cur.copy_expert(
            f'copy {self._ROWS} (txid, topic, partition, epoch, "offset") from stdin with (format csv)',
            out,
        )

    def load_audit_rows(self, cur) -> bool:
        return self._table_for_audit(cur) is not None

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """No coordinates twice in the table; per committed seq one snapshot per attempt,
        the newest recording the ledger's txid and published attempt and adding as many
        records as the ledger counted; no snapshot of a seq the ledger has not committed."""
        table = self._table_for_audit(cur)
        if table is None:
            return []
        out = []
        for topic, partition, epoch, offset, n in self.duplicated_coordinates(cur, limit):
            out.append(
                f"Iceberg table {self.name}: record {topic}[{partition}]@{offset} (epoch {epoch}) "
                f"is in the table {n} times"
            )
        cur.execute(
            "select seq, txid, published_attempt, records_out from onceflow.batches"
            " where pipeline = %s and state = 'committed'",
            (pipeline,),
        )
        committed = {seq: (txid, attempt, n) for seq, txid, attempt, n in cur.fetchall()}
        newest: dict[int, Publication] = {}
        times: dict[tuple[int, int], list[str]] = {}
        for p in _publications(table, pipeline):
            newest.setdefault(p.seq, p)
            times.setdefault((p.seq, p.attempt), []).append(p.ref)
        for (seq, attempt), refs in sorted(times.items()):
            if len(refs) > 1:
                out.append(
                    f"Iceberg table {self.name}: seq {seq} attempt {attempt} is published by "
                    f"{len(refs)} snapshots {refs}"
                )
        for seq, (txid, attempt, n) in sorted(committed.items()):
            p = newest.get(seq)
            if p is None:
                if n:
                    out.append(
                        f"Iceberg table {self.name}: committed seq {seq} (txid {txid!r}, {n} "
                        "records) has no snapshot"
                    )
            elif (p.txid, p.attempt, p.records) != (txid, attempt, n or 0):
                out.append(
                    f"Iceberg table {self.name}: snapshot {p.ref} of seq {seq} records txid "
                    f"{p.txid!r} attempt {p.attempt} adding {p.records} records; the ledger "
                    f"committed txid {txid!r} attempt {attempt} with {n} records"
                )
        for seq, p in sorted(newest.items()):
            if seq not in committed:
                out.append(
                    f"Iceberg table {self.name}: snapshot {p.ref} publishes seq {seq} (txid "
                    f"{p.txid!r}), which the ledger has not committed"
                )
        return out[:limit]


def _schema(columns: tuple[Column, ...]) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    return Schema(
        *(
            NestedField(i, c.name, _primitive(c.type), required=c.required)
            for i, c in enumerate(columns, start=1)
        )
    )


def _primitive(name: str) -> Any:
    """The pyiceberg type a type name of _SPARK_TO_ICEBERG or "decimal(p, s)" stands for."""
    from pyiceberg import types

    m = re.match(r"^decimal\((\d+), (\d+)\)$", name)
    if m:
        return types.DecimalType(int(m.group(1)), int(m.group(2)))
    return {
        "string": types.StringType,
        "long": types.LongType,
        "int": types.IntegerType,
        "double": types.DoubleType,
        "float": types.FloatType,
        "timestamptz": types.TimestamptzType,
        "timestamp": types.TimestampType,
        "date": types.DateType,
        "boolean": types.BooleanType,
        "binary": types.BinaryType,
    }[name]()


def _fence_retries(catalog: Any, table: Any) -> Any:
    """The table with pyiceberg's own commit retries off (see the module docstring)."""
    if table.properties.get("commit.retry.num-retries") == "0":
        return table
    with table.transaction() as tx:
        tx.set_properties(**{"commit.retry.num-retries": "0"})
    return catalog.load_table(table.name())


def _summary(t: PublishTarget) -> dict[str, str]:
    return {
        f"{SUMMARY_PREFIX}pipeline": t.pipeline,
        f"{SUMMARY_PREFIX}txid": t.txid,
        f"{SUMMARY_PREFIX}seq": str(t.seq),
        f"{SUMMARY_PREFIX}attempt": str(t.attempt),
    }


def _publications(table: Any, pipeline: str) -> Iterator[Publication]:
    """The pipeline's publications in the current snapshot's ancestry, newest first."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is None or summary[f"{SUMMARY_PREFIX}pipeline"] != pipeline:
            continue
        yield Publication(
            pipeline,
            summary[f"{SUMMARY_PREFIX}txid"],
            int(summary[f"{SUMMARY_PREFIX}seq"]),
            int(summary[f"{SUMMARY_PREFIX}attempt"]),
            int(summary["added-records"] or 0),
            str(snapshot.snapshot_id),
        )


def _newest(table: Any, pipeline: str, seq: int) -> Publication | None:
    return next((p for p in _publications(table, pipeline) if p.seq == seq), None)
