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
  partition, offset) and one per source record (topic, partition, epoch, offset, seq);
  partitioned by seq like append's T, each committed txid's versions one partition that
  process filled and commit attached; `T`, each key's current row (sinks.postgres.upsert).
- merge: `T_partials`, each txid's partial aggregates per key, primary key (txid, key...);
  `T`, the state (key..., aggregates..., last_seq), the fold of the partials
  (sinks.postgres.merge).

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
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.published import with_ranges
from onceflow.sinks.base import TAG_COLUMNS
from onceflow.sinks.postgres.columns import STAGE_FIXED, SUM_TYPES, Column, defs, ids
from onceflow.sinks.postgres.sealed_tables import SealedTables
from onceflow.transforms import COORDINATES, RECORDS


class PostgresTables(SealedTables):
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
            *(n for n, _ in STAGE_FIXED[3:]),
            *((RECORDS,) if self.aggregating else ()),
        )

    @property
    def _attaches(self) -> bool:
        """Whether commit publishes by attaching the attempt's own table as a partition of the
        published table (an append sink: sinks.postgres.append)."""
        return self.cfg.mode == "append" and self._publishes_tables

    @property
    def partitioned_table(self) -> str | None:
        """The published table partitioned by seq, whose partitions process fills and commit
        attaches: append's T (sinks.postgres.append), upsert's T_versions
        (sinks.postgres.upsert); None for merge."""
        if not self._publishes_tables:
            return None
        return {"append": self.table, "upsert": self.versions_table}.get(self.cfg.mode)

    def published_part(self, seq: int, attempt: int) -> str:
        """The table process fills with an attempt's rows of the partitioned table, which
        commit attaches as the seq's partition: append's attempt table, upsert's versions."""
        if self.cfg.mode == "upsert":
            return self.part_name(
                f"v{seq}_a{attempt}", f"of the versions of seq {seq} attempt {attempt}"
            )
        return self.sealed_table(seq, attempt)

    @property
    def _part_prefix(self) -> str:
        """How the names of the partitioned table's partitions begin, after `<table>__`."""
        return "v" if self.cfg.mode == "upsert" else "s"

    @property
    def _publishes_tables(self) -> bool:
        """Whether the sink has published tables of its own (new ones are a way out)."""
        return True

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
        fixed = set(TAG_COLUMNS) | {n for n, _ in STAGE_FIXED} | {RECORDS}
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
            *(Column(n, t) for n, t in STAGE_FIXED[:3]),
            *self._columns,
            *(Column(n, t) for n, t in STAGE_FIXED[3:]),
            *((Column(RECORDS, "bigint"),) if self.aggregating else ()),
        )
        tables = {self.stage_table: (stage, ())}
        key = self.cfg.key
        if self.cfg.mode == "append":
            tables[self.table] = (
                (*coords, Column("seq", "bigint"), txid, *self._columns),
                # seq: a partitioned table's key holds its partition key (sinks.postgres.append)
                ("topic", "partition", "epoch", "offset", "seq"),
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

    def _create(self, cur, name: str, columns: tuple[Column, ...], pk: tuple[str, ...]) -> None:
        """Create one table of the sink; the stage table UNLOGGED (transient: commit's count
        check catches rows a crash loses), the published ones with the time of publishing,
        except the partitioned table (append's T, upsert's T_versions): partitioned by seq,
        its rows written by process."""
        stage = name == self.stage_table
        nullable = {"error", "key", "value", "tombstone", "row_hash", RECORDS} | {
            c.name for c in self._columns
        }
        if self.aggregating:  # only dead letters carry coordinates
            nullable |= set(COORDINATES)
        body = defs(columns, not_null=[c.name for c in columns if c.name not in nullable])
        attached = name == self.partitioned_table
        if not stage and not attached:
            # an attached partition's rows were written by process: no time of publishing
            body = sql.SQL("{}, published_at timestamptz not null default now()").format(body)
        if pk:
            body = sql.SQL("{}, primary key ({})").format(body, ids(pk))
        cur.execute(
            sql.SQL("create {}table {} ({}){}").format(
                sql.SQL("unlogged " if stage else ""),
                self._t(name),
                body,
                sql.SQL(" partition by range (seq)" if attached else ""),
            )
        )
        if name == self.versions_table:
            self.create_versions_indexes(cur, name)

    def create_versions_indexes(self, cur, name: str) -> None:
        """A versions table's indexes besides its primary key."""
        # unpublish, the audit and re-runs find a txid's records by it (the partials'
        # primary key starts with txid; an append table's partitions are by seq)
        cur.execute(sql.SQL("create index on {} (txid)").format(self._t(name)))
        # one version per source record within a txid's partition; across txids the ranges
        # keep it, and the audit checks it (duplicated_coordinates)
        cur.execute(
            sql.SQL('create unique index on {} (topic, partition, epoch, "offset", seq)').format(
                self._t(name)
            )
        )

    # -- what every mode does with the stage ----------------------------------------------

    def ensure(self, cur) -> None:
        # The tables need the output schema, which only process knows (bind_output).
        cur.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(self.schema)))

    def has_staged(self, cur, t: Attempt) -> bool:
        return self._stored_columns(cur) is not None and super().has_staged(cur, t)

    def drop_staged(self, cur, t: Attempt) -> None:
        if self._stored_columns(cur) is not None:
            super().drop_staged(cur, t)
        if self._publishes_tables:
            self._drop_sealed(cur, t)

    def check_layout(self, cur) -> None:
        """Refuse an append or versions table of an earlier version (not partitioned by seq:
        sinks.postgres.append, sinks.postgres.upsert), naming the command that migrates it."""
        name = self.partitioned_table
        if name is None:
            return
        if self.relkind(cur, name) not in (None, "p"):
            raise SinkLayoutError(
                f"sink table {self.schema}.{name} is an {self.cfg.mode} table of an earlier "
                "Onceflow version (not partitioned by seq); migrate it first: `onceflow "
                "migrate --sinks` (every pipeline's) or `onceflow migrate --sinks --pipeline "
                "NAME`. Nothing was staged or published."
            )

    def _staged_valid(self, names: sql.Composable) -> sql.Composed:
        """The attempt's valid staged rows with their range's epoch: select `names` from
        them (s: the stage, r: the range); params (pipeline, txid, attempt)."""
        return sql.SQL(
            "select {names} from {source} where s.txid = %s and s.attempt = %s and s.error is null"
        ).format(names=names, source=with_ranges(self._t(self.stage_table)))

    def _touch(self, cur, keys: sql.Composable, params: tuple) -> None:
        """Collect the keys a publish or unpublish touches into a temporary table (gone at
        the commit): upsert re-derives their rows, merge deletes or refreshes their state."""
        cur.execute("drop table if exists pg_temp.onceflow_touched")
        cur.execute(
            sql.SQL(
                "create temp table onceflow_touched on commit drop as select distinct * from ({}) k"
            ).format(keys),
            params,
        )
