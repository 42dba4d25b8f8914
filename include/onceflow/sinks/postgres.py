"""A pipeline's sink in PostgreSQL, in the ledger's database: `append`, `upsert` or
`merge` (PROTOCOL.md "Sinks"), with tables created from the transform's output schema.

Tables, in the pipeline's sink schema, for a sink table T:

- `stage_T` (UNLOGGED): what process stages, tagged (txid, attempt, part): the coordinates
  topic, partition, offset; the user's columns; error, key, value (dead letters);
  tombstone (upsert: the output's value is null); row_hash; for an aggregating transform
  (merge only) also `records`, how many source records the row sums up, and the
  coordinates are null except on dead letters.
- append: `T`, one row per source record, primary key (topic, partition, epoch, offset),
  plus txid and the user's columns.
- upsert: `T_versions` keeps every published version, primary key (key..., seq, topic,
  partition, offset) and one per source record (topic, partition, epoch, offset); `T` holds
  each key's current row, derived from the versions: the version with the highest (seq,
  partition, offset, topic) wins, and if it is a tombstone the key has no row. publish adds
  the attempt's versions and re-derives the keys it touches; unpublish deletes the txid's
  versions and re-derives those keys. So a replay or a re-run of an older txid can never
  overwrite a newer value: the newer version is still there and still wins.
- merge: `T_partials` holds each txid's partial aggregates (sum of the aggregates per key,
  with the txid's seq and how many records went in: the staged rows of a record-wise
  transform, the sum of their `records` for an aggregating one), computed at publish from
  the staged rows; `T` is the state (key..., aggregates..., last_seq), the fold of the partials.
  unpublish subtracts the txid's partials from the state and deletes them (a key no partial
  contributes to any more is deleted), so a re-run replaces its contribution.

Where the output schema lives: in the catalog, as the stage table's columns. process knows
the schema (Spark) and creates or checks the tables before it stages anything (`bind_output`,
under an advisory lock, so concurrent process runs of one pipeline do not race on DDL);
commit runs in Airflow without Spark and reads the user's columns from the stage table
(pg_attribute) in the same transaction that publishes. One place, no copy that could
disagree with what was staged.

When the output changes (onceflow.schema_evolution): a column it adds is added to every table
of the sink that holds the user's columns (the stage; append's table; upsert's versions and
current table; merge's partials and state if it is a key or an aggregate), nullable, in
bind_output's transaction, and recorded as the txid's. Rows staged or published before read
null in it; a batch staged before and committed after publishes null there. A merge state
row folds a later-added aggregate from null as from 0. A removed column (the stage table
holds one the output no longer gives) or a changed type is refused, with the SQL that
would migrate the tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from psycopg2 import sql

from onceflow import schema_evolution
from onceflow.config import SinkConfig
from onceflow.errors import SinkSchemaError
from onceflow.schema_evolution import Evolution
from onceflow.sinks.base import TAG_COLUMNS, PublishTarget, Sink, check_output_column, sink_type
from onceflow.transforms import COORDINATES, RECORDS, passed_through

# Spark SQL types (DataType.simpleString(), or typeName() spellings) -> PostgreSQL types,
# spelled as format_type() prints them, so a table's columns compare as text.
_SPARK_TO_PG = {
    "string": "text",
    "bigint": "bigint",
    "long": "bigint",
    "int": "integer",
    "integer": "integer",
    "double": "double precision",
    "timestamp": "timestamp with time zone",
    "date": "date",
    "boolean": "boolean",
    "binary": "bytea",
}
# Columns the stage table holds besides the tags and the user's columns, and their types.
_STAGE_FIXED = (
    ("topic", "text"),
    ("partition", "integer"),
    ("offset", "bigint"),
    ("error", "text"),
    ("key", "bytea"),
    ("value", "bytea"),
    ("tombstone", "boolean"),
    ("row_hash", "bigint"),
)
# A sum of integers can leave the integer range; numerics keep their scale.
_SUM_TYPES = {"integer": "bigint", "bigint": "bigint", "double precision": "double precision"}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # a PostgreSQL type as format_type() prints it


def pg_type(column: str, spark_type: str) -> str:
    """The PostgreSQL type of an output column, or SinkSchemaError naming column and type."""
    return sink_type(column, spark_type, _SPARK_TO_PG, "numeric({p},{s})", "a PostgreSQL sink")


def output_columns(
    fields: Iterable[tuple[str, str]], aggregating: bool = False
) -> tuple[Column, ...]:
    """The user's columns of a transform's output ((name, Spark type) pairs), typed for
    PostgreSQL; the coordinates, error, key and value (and an aggregating transform's
    records) are the stage's own."""
    own = passed_through(aggregating)
    columns = []
    for name, spark_type in fields:
        if name in own:
            continue
        check_output_column(name)
        columns.append(Column(name, pg_type(name, spark_type)))
    return tuple(columns)


def _ids(names: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


def _prefixed(prefix: str, names: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.SQL(prefix + ".") + sql.Identifier(n) for n in names)


def _more(names: Iterable[str], prefix: str = "") -> sql.Composed:
    """ ", a, b" (each name prefixed "s." with prefix "s"), or nothing for no names: the
    user's columns after fixed ones, where there may be none."""
    p = sql.SQL(f"{prefix}." if prefix else "")
    return sql.SQL("").join(sql.SQL(", ") + p + sql.Identifier(n) for n in names)


def _defs(columns: Iterable[Column], not_null: Iterable[str] = ()) -> sql.Composed:
    required = set(not_null)
    return sql.SQL(", ").join(
        sql.SQL("{} {}{}").format(
            sql.Identifier(c.name),
            sql.SQL(c.type),  # from _SPARK_TO_PG / sink_type / _STAGE_FIXED only
            sql.SQL(" not null" if c.name in required else ""),
        )
        for c in columns
    )


def _migration(p: schema_evolution.Problem) -> str | None:
    """The SQL that makes a table fit where the output does not (None: none does, a key).
    Names are validated identifiers, printed unquoted for the reader to copy."""
    c, t = p.column, p.table
    return {
        "retyped": f"alter table {t} alter column {c} type {p.new} using {c}::{p.new}",
        # the published tables keep the column (nullable): later rows hold null there
        "removed": f"alter table {t} drop column {c}",
        "required": f"alter table {t} alter column {c} drop not null",
        "added": f"alter table {t} add column {c} {p.new}",
        "key": None,
        "own": None,
    }[p.why]


class PostgresSink(Sink):
    """A sink table T of mode append, upsert or merge. `columns` are the user's columns of
    the transform's output: given by process (bind_output), read from the stage table by
    everyone else. `aggregating`: the pipeline's transform is aggregating (merge only): each
    staged row sums up `records` source records and carries no coordinates."""

    def __init__(
        self,
        schema: str,
        cfg: SinkConfig,
        columns: tuple[Column, ...] | None = None,
        aggregating: bool = False,
    ) -> None:
        super().__init__(schema, cfg.table)
        self.cfg = cfg
        self._columns = columns
        self.aggregating = aggregating

    # -- names --------------------------------------------------------------------------

    def _t(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    @property
    def versions_table(self) -> str:
        return f"{self.table}_versions"

    @property
    def partials_table(self) -> str:
        return f"{self.table}_partials"

    @property
    def _record_table(self) -> str:
        """The table holding one row per published record (append, upsert), or the partials."""
        return {
            "append": self.table,
            "upsert": self.versions_table,
            "merge": self.partials_table,
        }[self.cfg.mode]

    @property
    def stage_columns(self) -> tuple[str, ...]:
        if self._columns is None:
            raise RuntimeError("PostgresSink.stage_columns: bind_output first (process only)")
        return (
            *COORDINATES,
            *(c.name for c in self._columns),
            *(n for n, _ in _STAGE_FIXED[3:]),
            *((RECORDS,) if self.aggregating else ()),
        )

    @property
    def takes_fast_form(self) -> bool:
        # an append row is its record's coordinates and columns; upsert and merge rows need
        # what the fast stage does not do (a null key is a dead letter, tombstones)
        return self.cfg.mode == "append" and not self.aggregating

    @property
    def _valid_records(self) -> sql.Composable:
        if self.aggregating:  # each valid row sums up `records` source records
            return sql.SQL("coalesce(sum(s.records) filter (where s.error is null), 0)")
        return super()._valid_records

    # -- the output schema ----------------------------------------------------------------

    def _table_columns(self, cur, table: str) -> list[tuple[str, str, bool]] | None:
        """(name, type, optional) of an existing table's columns, None if there is no table;
        optional: nullable or with a default (an extra column the sink can leave alone)."""
        cur.execute(
            "select a.attname, format_type(a.atttypid, a.atttypmod),"
            " not a.attnotnull or a.atthasdef"
            " from pg_attribute a"
            " where a.attrelid = to_regclass(format('%%I.%%I', %s::text, %s::text))"
            " and a.attnum > 0 and not a.attisdropped order by a.attnum",
            (self.schema, table),
        )
        rows = cur.fetchall()
        return rows or None

    def _stored_columns(self, cur) -> tuple[Column, ...] | None:
        """The user's columns as the stage table holds them; None before process created it."""
        if self._columns is not None:
            return self._columns
        rows = self._table_columns(cur, self.stage_table)
        if rows is None:
            return None
        fixed = set(TAG_COLUMNS) | {n for n, _ in _STAGE_FIXED} | {RECORDS}
        self._columns = tuple(Column(n, t) for n, t, _ in rows if n not in fixed)
        return self._columns

    def _value_columns(self) -> tuple[Column, ...]:
        """The user's columns that are not the key."""
        return tuple(c for c in self._columns if c.name not in self.cfg.key)

    def _key_columns(self) -> tuple[Column, ...]:
        by_name = {c.name: c for c in self._columns}
        return tuple(by_name[k] for k in self.cfg.key)

    def _aggregate_columns(self) -> tuple[Column, ...]:
        by_name = {c.name: c for c in self._columns}
        out = []
        for a in self.cfg.aggregates:
            t = by_name[a].type
            summed = _SUM_TYPES.get(t) or (
                f"numeric(38,{t.split(',')[1]}" if t.startswith("numeric(") else None
            )
            if summed is None:
                raise SinkSchemaError(
                    f"sink {self.schema}.{self.table}: aggregate column {a!r} is {t}; merge "
                    "sums it, so give it a number type (int, bigint, double, decimal)"
                )
            out.append(Column(a, summed))
        return tuple(out)

    def _expected_tables(self) -> dict[str, tuple[tuple[Column, ...], tuple[str, ...]]]:
        """Each table of the sink: its columns and its primary key."""
        coords = (
            Column("topic", "text"),
            Column("partition", "integer"),
            Column("epoch", "integer"),
            Column("offset", "bigint"),
        )
        txid = Column("txid", "text")
        stage = (
            *(Column(n, t) for n, t in (("txid", "text"), ("attempt", "integer"))),
            Column("part", "integer"),
            *(Column(n, t) for n, t in _STAGE_FIXED[:3]),
            *self._columns,
            *(Column(n, t) for n, t in _STAGE_FIXED[3:]),
            *((Column(RECORDS, "bigint"),) if self.aggregating else ()),
        )
        tables = {self.stage_table: (stage, ())}
        key = self.cfg.key
        if self.cfg.mode == "append":
            tables[self.table] = (
                (*coords, txid, *self._columns),
                ("topic", "partition", "epoch", "offset"),
            )
        elif self.cfg.mode == "upsert":
            version = (
                *self._key_columns(),
                Column("seq", "bigint"),
                *coords,
                txid,
                Column("tombstone", "boolean"),
                *self._value_columns(),
            )
            tables[self.versions_table] = (
                version,
                (*key, "seq", "topic", "partition", "offset"),
            )
            current = (
                *self._key_columns(),
                *self._value_columns(),
                Column("seq", "bigint"),
                *coords,
                txid,
            )
            tables[self.table] = (current, key)
        else:
            aggregates = self._aggregate_columns()
            tables[self.partials_table] = (
                (
                    txid,
                    Column("seq", "bigint"),
                    *self._key_columns(),
                    *aggregates,
                    Column("records", "bigint"),
                ),
                ("txid", *key),
            )
            tables[self.table] = (
                (*self._key_columns(), *aggregates, Column("last_seq", "bigint")),
                key,
            )
        return tables

    def bind_output(
        self, cur, fields: Iterable[tuple[str, str]], evolution: Evolution | None = None
    ) -> PostgresSink:
        """process, before staging: this sink for the transform's output (name, Spark type),
        with its tables created, or checked and evolved if they exist (onceflow.schema_evolution:
        with `evolution`, columns the output adds go to every table and are recorded as its
        txid's; without it nothing is added). SinkSchemaError names each column that does not
        fit, and nothing is created or altered then (the caller's transaction rolls back)."""
        bound = type(self)(
            self.schema, self.cfg, output_columns(fields, self.aggregating), self.aggregating
        )
        cur.execute(
            "select pg_advisory_xact_lock(hashtextextended('onceflow.sink:' || %s, 0))",
            (f"{self.schema}.{self.table}",),
        )
        cur.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(self.schema)))
        fits = []
        for name, (columns, pk) in bound._expected_tables().items():
            existing = bound._table_columns(cur, name)
            if existing is None:
                bound._create(cur, name, columns, pk)
                continue
            if name == bound.stage_table:
                existing = bound._add_own_stage_columns(cur, existing)
            fits.append(bound._fit(name, columns, pk, existing))
        added, problems = schema_evolution.decide(fits, evolution.policy if evolution else "fail")
        if problems:
            raise schema_evolution.refusal(
                bound._label, problems, bound._fixes(problems, evolution)
            )
        for a in added:
            cur.execute(
                sql.SQL("alter table {} add column {} {}").format(
                    self._t(a.table.removeprefix(f"{self.schema}.")),
                    sql.Identifier(a.column),
                    sql.SQL(a.type),  # from _SPARK_TO_PG / sink_type / _SUM_TYPES only
                )
            )
        schema_evolution.record(cur, evolution, "postgres", added)
        return bound

    def _fit(
        self,
        name: str,
        columns: tuple[Column, ...],
        pk: tuple[str, ...],
        existing: list[tuple[str, str, bool]],
    ) -> schema_evolution.TableFit:
        """An existing table as the evolution rule sees it; the stage table holds exactly
        the columns of the last output, so any other column there is one the output no
        longer gives."""
        return schema_evolution.TableFit(
            name=f"{self.schema}.{name}",
            wanted=tuple((c.name, c.type) for c in columns),
            have=tuple(existing),
            user=frozenset(c.name for c in self._columns),
            key=frozenset(pk),
            previous=frozenset(n for n, _, _ in existing)
            if name == self.stage_table
            else frozenset(),
        )

    @property
    def _label(self) -> str:
        """The sink's tables, as a refusal names them."""
        return f"the tables of sink {self.schema}.{self.table}"

    @property
    def _publishes_tables(self) -> bool:
        """Whether the sink has published tables of its own (new ones are a way out)."""
        return True

    def _fixes(
        self, problems: list[schema_evolution.Problem], evolution: Evolution | None
    ) -> list[str]:
        """What to do about a refusal: allow additions, or change the transform back or go
        into new tables; and the SQL that migrates the tables, where there is one."""
        if schema_evolution.only_added(problems):
            fixes = [schema_evolution.ALLOW]
        else:
            fixes = [schema_evolution.CHANGE_BACK]
            if self._publishes_tables:
                fixes.append(schema_evolution.new_tables("new tables", evolution))
        statements = [_migration(p) for p in problems]
        if None not in statements:
            kept = any(p.why == "removed" for p in problems)
            fixes.append(
                "migrate the tables yourself, in one transaction: `"
                + "; ".join(statements)
                + "`"
                + (
                    " (the published tables keep a column dropped from the stage table, later "
                    "rows hold null there; drop it once the batches staged with it committed)"
                    if kept
                    else ""
                )
            )
        return fixes

    def _add_own_stage_columns(
        self, cur, existing: list[tuple[str, str, bool]]
    ) -> list[tuple[str, str, bool]]:
        """Add the stage columns of Onceflow's own (not the user's) an existing stage table
        lacks: one an earlier version created (the built-in orders stage had no
        `tombstone`). They are nullable and a stage row without them means what it did."""
        have = {n for n, _, _ in existing}
        missing = [(n, t) for n, t in _STAGE_FIXED[3:] if n not in have]
        for n, t in missing:
            cur.execute(
                sql.SQL("alter table {} add column {} {}").format(
                    self._t(self.stage_table), sql.Identifier(n), sql.SQL(t)
                )
            )
        return self._table_columns(cur, self.stage_table) if missing else existing

    def _create(self, cur, name: str, columns: tuple[Column, ...], pk: tuple[str, ...]) -> None:
        stage = name == self.stage_table
        nullable = {"error", "key", "value", "tombstone", "row_hash", RECORDS} | {
            c.name for c in self._columns
        }
        if self.aggregating:  # only dead letters carry coordinates
            nullable |= set(COORDINATES)
        body = _defs(columns, not_null=[c.name for c in columns if c.name not in nullable])
        if not stage:
            body = sql.SQL("{}, published_at timestamptz not null default now()").format(body)
        if pk:
            body = sql.SQL("{}, primary key ({})").format(body, _ids(pk))
        cur.execute(
            sql.SQL("create {}table {} ({})").format(
                sql.SQL("unlogged " if stage else ""), self._t(name), body
            )
        )
        if (
            name in (self.table, self.versions_table)
            and self.cfg.mode != "merge"
            and not (self.cfg.mode == "upsert" and name == self.table)
        ):
            # unpublish, the audit and re-runs find a txid's records by it (the partials'
            # primary key starts with txid)
            cur.execute(sql.SQL("create index on {} (txid)").format(self._t(name)))
        if name == self.versions_table:
            # one version per source record: no record is published twice
            cur.execute(
                sql.SQL('create unique index on {} (topic, partition, epoch, "offset")').format(
                    self._t(name)
                )
            )

    # -- plan, process, commit ------------------------------------------------------------

    def ensure(self, cur) -> None:
        # The tables need the output schema, which only process knows (bind_output).
        cur.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(self.schema)))

    def has_staged(self, cur, txid: str, attempt: int) -> bool:
        return self._stored_columns(cur) is not None and super().has_staged(cur, txid, attempt)

    def drop_staged(self, cur, txid: str, up_to_attempt: int) -> None:
        if self._stored_columns(cur) is not None:
            super().drop_staged(cur, txid, up_to_attempt)

    def publish(self, cur, t: PublishTarget) -> tuple[int, int]:
        if self._stored_columns(cur) is None:
            return 0, 0  # no process ever staged a record of this pipeline (empty batches)
        published = {"append": self._publish_append, "upsert": self._publish_upsert}.get(
            self.cfg.mode, self._publish_merge
        )(cur, t)
        return published, self.publish_dead_letters(cur, t)

    def unpublish(self, cur, t: PublishTarget) -> None:
        if self._stored_columns(cur) is not None:
            {"append": self._unpublish_append, "upsert": self._unpublish_upsert}.get(
                self.cfg.mode, self._unpublish_merge
            )(cur, t)
        self.unpublish_dead_letters(cur, t)

    def _staged_valid(self, names: sql.Composable) -> sql.Composed:
        """The attempt's valid staged rows with their range's epoch: select `names` from
        them (s: the stage, r: the range); params (pipeline, txid, attempt)."""
        return sql.SQL(
            "select {names} from {stage} s join onceflow.ranges r on r.pipeline = %s"
            " and r.txid = s.txid and r.topic = s.topic and r.partition = s.partition"
            " where s.txid = %s and s.attempt = %s and s.error is null"
        ).format(names=names, stage=self._t(self.stage_table))

    # append

    def _publish_append(self, cur, t: PublishTarget) -> int:
        users = [c.name for c in self._columns]
        cur.execute(
            sql.SQL(
                'insert into {table} (topic, partition, epoch, "offset", txid{cols}) {q}'
            ).format(
                table=self._t(self.table),
                cols=_more(users),
                q=self._staged_valid(
                    sql.SQL('s.topic, s.partition, r.epoch, s."offset", s.txid{}').format(
                        _more(users, "s")
                    )
                ),
            ),
            (t.pipeline, t.txid, t.attempt),
        )
        return cur.rowcount

    def _unpublish_append(self, cur, t: PublishTarget) -> None:
        cur.execute(
            sql.SQL("delete from {} where txid = %s").format(self._t(self.table)), (t.txid,)
        )

    # upsert

    def _publish_upsert(self, cur, t: PublishTarget) -> int:
        key = list(self.cfg.key)
        values = [c.name for c in self._value_columns()]
        cur.execute(
            sql.SQL(
                'insert into {versions} ({key}, seq, topic, partition, epoch, "offset", txid,'
                " tombstone{values}) {q}"
            ).format(
                versions=self._t(self.versions_table),
                key=_ids(key),
                values=_more(values),
                q=self._staged_valid(
                    sql.SQL(
                        '{key}, %s, s.topic, s.partition, r.epoch, s."offset", s.txid,'
                        " coalesce(s.tombstone, false){values}"
                    ).format(
                        key=_prefixed("s", key),
                        values=_more(values, "s"),
                    )
                ),
            ),
            (t.seq, t.pipeline, t.txid, t.attempt),
        )
        published = cur.rowcount
        self._rederive(
            cur,
            sql.SQL("select {} from {} where txid = %s").format(
                _ids(key), self._t(self.versions_table)
            ),
            (t.txid,),
        )
        return published

    def _unpublish_upsert(self, cur, t: PublishTarget) -> None:
        key = _ids(self.cfg.key)
        self._touch(
            cur,
            sql.SQL("select {} from {} where txid = %s").format(key, self._t(self.versions_table)),
            (t.txid,),
        )
        cur.execute(
            sql.SQL("delete from {} where txid = %s").format(self._t(self.versions_table)),
            (t.txid,),
        )
        self._rederive_touched(cur)

    def _touch(self, cur, keys: sql.Composable, params: tuple) -> None:
        """Collect the keys to re-derive into a temporary table (gone at the commit)."""
        cur.execute("drop table if exists pg_temp.onceflow_touched")
        cur.execute(
            sql.SQL(
                "create temp table onceflow_touched on commit drop as select distinct * from ({}) k"
            ).format(keys),
            params,
        )

    def _rederive(self, cur, keys: sql.Composable, params: tuple) -> None:
        self._touch(cur, keys, params)
        self._rederive_touched(cur)

    def _rederive_touched(self, cur) -> None:
        """Each touched key's current row from its versions: the newest (seq, partition,
        offset, topic) wins; a tombstone there means no row."""
        key = list(self.cfg.key)
        current = [*key, *(c.name for c in self._value_columns())]
        current += ["seq", "topic", "partition", "epoch", "offset", "txid"]
        cur.execute(
            sql.SQL(
                "delete from {table} where ({key}) in (select {key} from onceflow_touched)"
            ).format(table=self._t(self.table), key=_ids(key))
        )
        cur.execute(
            sql.SQL(
                "insert into {table} ({cols}) select {cols} from ("
                " select distinct on ({key}) * from {versions}"
                " where ({key}) in (select {key} from onceflow_touched)"
                ' order by {key}, seq desc, partition desc, "offset" desc, topic desc) v'
                " where not v.tombstone"
            ).format(
                table=self._t(self.table),
                cols=_ids(current),
                key=_ids(key),
                versions=self._t(self.versions_table),
            )
        )
        cur.execute("drop table onceflow_touched")

    # merge

    def _publish_merge(self, cur, t: PublishTarget) -> int:
        key = list(self.cfg.key)
        aggs = [c.name for c in self._aggregate_columns()]
        if self.aggregating:
            # rows of the txid, not of a record: no range (epoch) to join; each sums up
            # `records` records
            staged = sql.SQL(
                "select {names} from {stage} s"
                " where s.txid = %s and s.attempt = %s and s.error is null"
            ).format(names=_prefixed("s", [*key, *aggs, RECORDS]), stage=self._t(self.stage_table))
            params = (t.txid, t.attempt)
            records = sql.SQL("sum(records)")
        else:
            staged = self._staged_valid(_prefixed("s", [*key, *aggs]))
            params = (t.pipeline, t.txid, t.attempt)
            records = sql.SQL("count(*)")
        cur.execute(
            sql.SQL(
                "insert into {partials} (txid, seq, {key}, {aggs}, records)"
                " select %s, %s, {key}, {sums}, {records} from ({q}) s group by {key}"
            ).format(
                partials=self._t(self.partials_table),
                key=_ids(key),
                aggs=_ids(aggs),
                sums=sql.SQL(", ").join(
                    sql.SQL("coalesce(sum({}), 0)").format(sql.Identifier(a)) for a in aggs
                ),
                records=records,
                q=staged,
            ),
            (t.txid, t.seq, *params),
        )
        cur.execute(
            sql.SQL("select coalesce(sum(records), 0) from {} where txid = %s").format(
                self._t(self.partials_table)
            ),
            (t.txid,),
        )
        published = int(cur.fetchone()[0])
        cur.execute(
            sql.SQL(
                "insert into {state} as s ({key}, {aggs}, last_seq)"
                " select {key}, {aggs}, seq from {partials} where txid = %s"
                " on conflict ({key}) do update set {adds},"
                " last_seq = greatest(s.last_seq, excluded.last_seq)"
            ).format(
                state=self._t(self.table),
                partials=self._t(self.partials_table),
                key=_ids(key),
                aggs=_ids(aggs),
                adds=sql.SQL(", ").join(
                    # an aggregate added later (schema_evolution) is null in older state
                    sql.SQL("{a} = coalesce(s.{a}, 0) + excluded.{a}").format(a=sql.Identifier(a))
                    for a in aggs
                ),
            ),
            (t.txid,),
        )
        return published

    def _unpublish_merge(self, cur, t: PublishTarget) -> None:
        key = list(self.cfg.key)
        aggs = [c.name for c in self._aggregate_columns()]
        match = sql.SQL(" and ").join(
            sql.SQL("s.{k} = p.{k}").format(k=sql.Identifier(k)) for k in key
        )
        cur.execute(
            sql.SQL(
                "update {state} s set {subs} from {partials} p where p.txid = %s and {match}"
            ).format(
                state=self._t(self.table),
                partials=self._t(self.partials_table),
                subs=sql.SQL(", ").join(
                    # a partial from before an aggregate was added holds null in it
                    sql.SQL("{a} = s.{a} - coalesce(p.{a}, 0)").format(a=sql.Identifier(a))
                    for a in aggs
                ),
                match=match,
            ),
            (t.txid,),
        )
        self._touch(
            cur,
            sql.SQL("select {} from {} where txid = %s").format(
                _ids(key), self._t(self.partials_table)
            ),
            (t.txid,),
        )
        cur.execute(
            sql.SQL("delete from {} where txid = %s").format(self._t(self.partials_table)),
            (t.txid,),
        )
        # a key no txid contributes to any more has no state row; the others' last_seq is
        # the newest txid still contributing
        touched = sql.SQL("({key}) in (select {key} from onceflow_touched)").format(key=_ids(key))
        cur.execute(
            sql.SQL(
                "delete from {state} s where {touched}"
                " and not exists (select 1 from {partials} p where {match})"
            ).format(
                state=self._t(self.table),
                partials=self._t(self.partials_table),
                touched=touched,
                match=match,
            )
        )
        cur.execute(
            sql.SQL(
                "update {state} s set last_seq = (select max(p.seq) from {partials} p where {match})"
                " where {touched}"
            ).format(
                state=self._t(self.table),
                partials=self._t(self.partials_table),
                match=match,
                touched=touched,
            )
        )
        cur.execute("drop table onceflow_touched")

    # -- the audit ------------------------------------------------------------------------

    def exists(self, cur) -> bool:
        cur.execute(
            "select to_regclass(format('%%I.%%I', %s::text, %s::text))",
            (self.schema, self._record_table),
        )
        return cur.fetchone()[0] is not None and self._stored_columns(cur) is not None

    def published_per_txid(self, cur) -> dict[str, int]:
        count = "sum(records)" if self.cfg.mode == "merge" else "count(*)"
        cur.execute(
            sql.SQL("select txid, {}::bigint from {} group by txid").format(
                sql.SQL(count), self._t(self._record_table)
            )
        )
        return dict(cur.fetchall())

    def published_and_dead(self, cur, pipeline: str, limit: int = 100) -> list[tuple]:
        if self.cfg.mode == "merge":
            # partials keep no coordinates: a staged row is either valid or a dead letter,
            # and each txid's partial records + dead letters = its records (check_counts)
            return []
        cur.execute(
            sql.SQL(
                'select o.topic, o.partition, o."offset" from {} o'
                " join onceflow.dead_letters d on d.pipeline = %s and d.topic = o.topic"
                ' and d.partition = o.partition and d.epoch = o.epoch and d."offset" = o."offset"'
                " limit %s"
            ).format(self._t(self._record_table)),
            (pipeline, limit),
        )
        return cur.fetchall()

    def outside_ranges(self, cur, pipeline: str) -> int:
        # a merge sink's state and partials carry no coordinates (see published_and_dead)
        records = None if self.cfg.mode == "merge" else self._t(self._record_table)
        return self.count_outside_ranges(cur, pipeline, records)

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """upsert: each key's row is the last record for it among committed versions (none if
        that is a tombstone); merge: the state is the sum of the committed txids' partials,
        last_seq their newest seq."""
        if self.cfg.mode == "upsert":
            return self._upsert_truth(cur, pipeline, limit)
        if self.cfg.mode == "merge":
            return self._merge_truth(cur, pipeline, limit)
        return []

    def _upsert_truth(self, cur, pipeline: str, limit: int) -> list[str]:
        key = list(self.cfg.key)
        compared = [*(c.name for c in self._value_columns()), "seq", "topic", "partition", "offset"]
        cur.execute(
            sql.SQL(
                """
                with last as (
                    select distinct on ({key}) v.* from {versions} v
                    join onceflow.batches b on b.pipeline = %s and b.txid = v.txid
                     and b.state = 'committed'
                    order by {key}, v.seq desc, v.partition desc, v."offset" desc, v.topic desc),
                expected as (select * from last where not tombstone)
                select {ekey}, {ckey} from expected e full join {current} c using ({key})
                where e.seq is null or c.seq is null or ({ecols}) is distinct from ({ccols})
                limit %s
                """
            ).format(
                key=_ids(key),
                versions=self._t(self.versions_table),
                current=self._t(self.table),
                ekey=sql.SQL("e.seq"),
                ckey=sql.SQL("c.seq, {}").format(_ids(key)),
                ecols=_prefixed("e", compared),
                ccols=_prefixed("c", compared),
            ),
            (pipeline, limit),
        )
        out = []
        for row in cur.fetchall():
            expected_seq, current_seq, *k = row
            out.append(
                f"{self.schema}.{self.table} key {tuple(k)}: the current row (seq {current_seq}) "
                f"is not the last committed record for it (seq {expected_seq}; None: no row)"
            )
        return out

    def _merge_truth(self, cur, pipeline: str, limit: int) -> list[str]:
        key = list(self.cfg.key)
        aggs = [c.name for c in self._aggregate_columns()]
        cur.execute(
            sql.SQL(
                """
                with fold as (
                    select {key}, {sums}, max(p.seq) as last_seq from {partials} p
                    join onceflow.batches b on b.pipeline = %s and b.txid = p.txid
                     and b.state = 'committed'
                    group by {key})
                select {key} from fold f full join {state} s using ({key})
                where f.last_seq is null or s.last_seq is null or f.last_seq <> s.last_seq
                   or {differ}
                limit %s
                """
            ).format(
                key=_ids(key),
                sums=sql.SQL(", ").join(
                    sql.SQL("sum(p.{a}) as {a}").format(a=sql.Identifier(a)) for a in aggs
                ),
                partials=self._t(self.partials_table),
                state=self._t(self.table),
                # float sums depend on the order of addition: equal up to rounding
                differ=sql.SQL(" or ").join(
                    sql.SQL("abs(f.{a} - s.{a}) > 1e-9 * greatest(abs(f.{a}), 1)").format(
                        a=sql.Identifier(a)
                    )
                    for a in aggs
                ),
            ),
            (pipeline, limit),
        )
        return [
            f"{self.schema}.{self.table} key {tuple(row)}: the state is not the fold of the "
            "committed txids' partial aggregates"
            for row in cur.fetchall()
        ]


class StageTable(PostgresSink):
    """Only the stage table of an append sink, without a published table: the stage of a
    sink outside the database whose commit reads the valid rows back and publishes them
    itself (onceflow.sinks.kafka). Created and checked from the output schema like every
    stage table (bind_output), under the name `stage_<table>`."""

    def _expected_tables(self) -> dict[str, tuple[tuple[Column, ...], tuple[str, ...]]]:
        return {self.stage_table: super()._expected_tables()[self.stage_table]}

    @property
    def _label(self) -> str:
        return f"the stage table {self.schema}.{self.stage_table}"

    @property
    def _publishes_tables(self) -> bool:
        return False  # what it stages is published elsewhere (a Kafka topic)
