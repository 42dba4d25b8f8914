"""The tables of a PostgreSQL sink, in the pipeline's sink schema, for a sink table T: their
names, their columns (from the transform's output, or read back from the stage table) and
how they are created; and what every mode does with the stage.

- `stage_T` (UNLOGGED, keyed by nothing: COPY speed, the part fence and the published
  tables' keys keep duplicates out): what process stages, tagged (txid, attempt, part): the
  coordinates topic, partition, offset; the user's columns; error, key, value (dead
  letters); tombstone (upsert: the output's value is null); row_hash; for an aggregating
  transform (merge only) also `records`, how many source records the row sums up, and the
  coordinates are null except on dead letters.
- append: `T`, one row per source record: its coordinates (topic, partition, epoch,
  offset), seq, txid and the user's columns; partitioned by seq, each committed txid's rows
  one partition, the attempt's own table that process filled and commit attached
  (sinks.postgres.append).
- upsert: `T_versions`, every published version, primary key (key..., seq, topic,
  partition, offset) and one per source record (RECORD_KEY);
  partitioned by seq like append's T, each committed txid's versions one partition that
  process filled and commit attached; `T`, each key's current row (sinks.postgres.upsert).
- merge: `T_partials`, each txid's partial aggregates per key, primary key (txid, key...);
  `T`, the state (key..., aggregates..., last_seq), the fold of the partials
  (sinks.postgres.merge).

This module is the table target, what every mode shares: names, columns, how a table is
created; which tables a mode publishes and how is the mode's (sinks.postgres.mode).

Where the output schema lives: in the catalog, as the stage table's columns. process knows
the schema (Spark) and creates the tables from it (sinks.postgres.binding); commit runs in
Airflow without Spark and reads the user's columns from the stage table (pg_attribute) in
the same transaction that publishes. One place, no copy that could disagree with what was
staged.
"""

from __future__ import annotations

from psycopg2 import sql

from onceflow.config.sink import SinkConfig
from onceflow.errors import SinkLayoutError, SinkSchemaError
from onceflow.ledger.published import with_ranges
from onceflow.sinks.base import TAG_COLUMNS
from onceflow.sinks.postgres.columns import STAGE_FIXED, SUM_TYPES, Column, defs, ids
from onceflow.sinks.stage_writer import STAGE_ROW_END
from onceflow.transforms import COORDINATES, RECORDS

# The columns every published row of a source record carries.
COORDINATE_COLUMNS = (
    Column("topic", "text"),
    Column("partition", "integer"),
    Column("epoch", "integer"),
    Column("offset", "bigint"),
)

# One row per source record within a seq's partition (append's T, upsert's T_versions).
# Integers first: process builds it on each attempt's table (`seal`), and a sort that
# compares the topic first compares the one name every row of a topic repeats: 1.87 s
# against 0.95 s for 2M rows (bench/NOTES.md, session 47). A table created by an earlier
# version keeps its (topic, partition, epoch, offset, seq): the same columns, and process
# builds each attempt's key as the table's own (seq_partitions.build_indexes).
RECORD_KEY = ("partition", "epoch", "offset", "topic", "seq")


class PostgresTables:
    """The tables of a sink table T in `schema`. `columns` are the user's columns of the
    transform's output: given by process (sinks.postgres.binding), read from the stage table by
    everyone else. `aggregating`: the pipeline's transform is aggregating (merge only): each
    staged row sums up `records` source records and carries no coordinates."""

    def __init__(
        self,
        schema: str,
        cfg: SinkConfig,
        columns: tuple[Column, ...] | None = None,
        aggregating: bool = False,
        shared_attempt: bool = False,
    ) -> None:
        self.schema = schema
        self.cfg = cfg
        self.table = cfg.table
        self.columns = columns
        self.aggregating = aggregating
        # an attempt's parts stage other tables too (a table per topic: sinks.tables), so
        # their counts are not this table's
        self.shared_attempt = shared_attempt

    # -- names --------------------------------------------------------------------------

    def ident(self, name: str) -> sql.Composed:
        """The table `name` of the sink's schema, quoted."""
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    @property
    def stage_table(self) -> str:
        return f"stage_{self.table}"

    @property
    def versions_table(self) -> str:
        return f"{self.table}_versions"

    @property
    def partials_table(self) -> str:
        return f"{self.table}_partials"

    def part_name(self, suffix: str, what: str) -> str:
        """`<table>__<suffix>`, the name of a table that holds part of the sink's rows
        (`what` says which, in the refusal of a name PostgreSQL would cut, and two tables
        could then share)."""
        name = f"{self.table}__{suffix}"
        if len(name.encode()) > 63:
            raise SinkLayoutError(
                f"sink {self.schema}.{self.table}: the table {what} would be named {name!r}, "
                "longer than PostgreSQL's 63 bytes; give the sink a shorter table name"
            )
        return name

    def sealed_table(self, seq: int, attempt: int) -> str:
        """The table, in `schema`, that process fills for an attempt so that commit copies
        little or nothing: append's attempt table, which commit attaches (sinks.postgres.append);
        upsert's newest version per key (sinks.postgres.upsert); merge's partial aggregates
        (sinks.postgres.merge)."""
        return self.part_name(f"s{seq}_a{attempt}", f"of seq {seq} attempt {attempt}")

    def sealed_tables(self, cur, seq: int, attached: bool, prefix: str = "s") -> list[str]:
        """The sealed tables of every attempt of `seq` (`prefix` "v": upsert's versions of
        each attempt): the ones attached as a partition (the published output), or the
        others."""
        escaped = self.table.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%")
        cur.execute(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = %s and c.relkind = 'r' and c.relispartition = %s"
            " and c.relname like %s",
            (self.schema, attached, f"{escaped}\\_\\_{prefix}{seq}\\_a%"),
        )
        return [name for (name,) in cur.fetchall()]

    def drop_unattached(self, cur, seq: int, attempt: int, prefixes: tuple[str, ...]) -> None:
        """Drop the sealed tables of seq's attempts up to `attempt` that are no partition (an
        attached one is the published output)."""
        for prefix in prefixes:
            for name in self.sealed_tables(cur, seq, attached=False, prefix=prefix):
                if int(name.rsplit("_a", 1)[1]) <= attempt:
                    cur.execute(sql.SQL("drop table {}").format(self.ident(name)))

    def relkind(self, cur, name: str) -> str | None:
        """pg_class.relkind of the table `name` (p: partitioned), None if there is none."""
        return self.relkinds(cur, [name])[name]

    def relkinds(self, cur, names: list[str]) -> dict[str, str | None]:
        """relkind of each of the tables `names`, in one query (a commit of many tables asks
        for several of each)."""
        cur.execute(
            "select n, c.relkind from unnest(%s::text[]) n left join pg_class c"
            " on c.oid = to_regclass(format('%%I.%%I', %s::text, n))",
            (names, self.schema),
        )
        return dict(cur.fetchall())

    def has_table(self, cur, name: str | None) -> bool:
        if name is None:
            return False
        cur.execute(
            "select to_regclass(format('%%I.%%I', %s::text, %s::text)) is not null",
            (self.schema, name),
        )
        return cur.fetchone()[0]

    # -- the output schema ----------------------------------------------------------------

    def table_columns(self, cur, table: str) -> list[tuple[str, str, bool]] | None:
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

    def stored_columns(self, cur) -> tuple[Column, ...] | None:
        """The user's columns as the stage table holds them; None before process created it."""
        if self.columns is not None:
            return self.columns
        rows = self.table_columns(cur, self.stage_table)
        if rows is None:
            return None
        fixed = set(TAG_COLUMNS) | {n for n, _ in STAGE_FIXED} | {RECORDS}
        self.columns = tuple(Column(n, t) for n, t, _ in rows if n not in fixed)
        return self.columns

    def value_columns(self) -> tuple[Column, ...]:
        """The user's columns that are not the key."""
        return tuple(c for c in self.columns if c.name not in self.cfg.key)

    def key_columns(self) -> tuple[Column, ...]:
        by_name = {c.name: c for c in self.columns}
        return tuple(by_name[k] for k in self.cfg.key)

    def aggregate_columns(self) -> tuple[Column, ...]:
        by_name = {c.name: c for c in self.columns}
        out = []
        for a in self.cfg.aggregates:
            t = by_name[a].type
            summed = SUM_TYPES.get(t) or (
                f"numeric(38,{t.split(',')[1]}" if t.startswith("numeric(") else None
            )
            if summed is None:
                raise SinkSchemaError(
                    f"sink {self.schema}.{self.table}: aggregate column {a!r} is {t}; merge "
                    "sums it, so give it a number type (int, bigint, double, decimal)"
                )
            out.append(Column(a, summed))
        return tuple(out)

    def stage_definition(self) -> tuple[Column, ...]:
        """The stage table's columns."""
        return (
            *(Column(n, t) for n, t in (("txid", "text"), ("attempt", "integer"))),
            Column("part", "integer"),
            *(Column(n, t) for n, t in STAGE_FIXED[:3]),
            *self.columns,
            *(Column(n, t) for n, t in STAGE_FIXED[3:]),
            *((Column(RECORDS, "bigint"),) if self.aggregating else ()),
        )

    def create(
        self,
        cur,
        name: str,
        columns: tuple[Column, ...],
        pk: tuple[str, ...],
        partitioned: bool = False,
    ) -> None:
        """Create one table of the sink; the stage table UNLOGGED (transient: commit's count
        check catches rows a crash loses), the published ones with the time of publishing,
        except a `partitioned` one (append's T, upsert's T_versions): partitioned by seq,
        its rows written by process."""
        stage = name == self.stage_table
        nullable = {*STAGE_ROW_END, RECORDS} | {c.name for c in self.columns}
        if self.aggregating:  # only dead letters carry coordinates
            nullable |= set(COORDINATES)
        body = defs(columns, not_null=[c.name for c in columns if c.name not in nullable])
        if not stage and not partitioned:
            # an attached partition's rows were written by process: no time of publishing
            body = sql.SQL("{}, published_at timestamptz not null default now()").format(body)
        if pk:
            body = sql.SQL("{}, primary key ({})").format(body, ids(pk))
        cur.execute(
            sql.SQL("create {}table {} ({}){}").format(
                sql.SQL("unlogged " if stage else ""),
                self.ident(name),
                body,
                sql.SQL(" partition by range (seq)" if partitioned else ""),
            )
        )

    def add_own_stage_columns(
        self, cur, existing: list[tuple[str, str, bool]]
    ) -> list[tuple[str, str, bool]]:
        """Add the stage columns of Onceflow's own (not the user's) an existing stage table
        lacks: one an earlier version created (the built-in orders stage had no
        `tombstone`). They are nullable and a stage row without them means what it did."""
        have = {n for n, _, _ in existing}
        missing = [(n, t) for n, t in STAGE_FIXED[3:] if n not in have]
        for n, t in missing:
            cur.execute(
                sql.SQL("alter table {} add column {} {}").format(
                    self.ident(self.stage_table), sql.Identifier(n), sql.SQL(t)
                )
            )
        return self.table_columns(cur, self.stage_table) if missing else existing

    # -- what every mode reads of the stage -----------------------------------------------

    def staged_valid(self, names: sql.Composable) -> sql.Composed:
        """The attempt's valid staged rows with their range's epoch: select `names` from
        them (s: the stage, r: the range); params (pipeline, txid, attempt)."""
        return sql.SQL(
            "select {names} from {source} where s.txid = %s and s.attempt = %s and s.error is null"
        ).format(names=names, source=with_ranges(self.ident(self.stage_table)))

    def touch(self, cur, keys: sql.Composable, params: tuple) -> None:
        """Collect the keys a publish or unpublish touches into a temporary table (gone at
        the commit): upsert re-derives their rows, merge deletes or refreshes their state."""
        cur.execute("drop table if exists pg_temp.onceflow_touched")
        cur.execute(
            sql.SQL(
                "create temp table onceflow_touched on commit drop as select distinct * from ({}) k"
            ).format(keys),
            params,
        )
