"""A pipeline's sink in PostgreSQL, in the ledger's database: `append`, `upsert` or
`merge` (PROTOCOL.md "Sinks"), with tables created from the transform's output schema.

It publishes inside the commit's own transaction, so the output, the batch's state and the
offsets' compare-and-set commit together. It is made of a table target and a publish
mode, one idea per module:

- columns: the output's columns typed for PostgreSQL, and the SQL column lists;
- tables: the table target: the sink's tables, their names and columns, how one is
  created, and the stage every mode reads;
- mode: what a publish mode is; append, upsert, merge: each mode's object, how it
  publishes, un-publishes and what the audit checks;
- seq_partitions: a mode whose published table is partitioned by seq, whose partitions
  process fills and commit attaches (append's table, upsert's versions);
- binding: process creating, checking and evolving the tables to the output (its
  StageWriter);
- append_migration, versions_migration: an append table, an upsert table's versions, of an
  earlier version partitioned by seq;
- partition_rollup: the one-batch partitions rolled up (maintenance);
- stage_table: the stage table alone (a mode that publishes nothing here), for a sink outside
  the database (a Kafka topic).
"""

from __future__ import annotations

from collections.abc import Iterable

from psycopg2 import sql

from onceflow.config.sink import SinkConfig
from onceflow.ledger import published
from onceflow.ledger.attempt import Attempt, StagedCounts
from onceflow.sinks.base import Sink
from onceflow.sinks.postgres import binding
from onceflow.sinks.postgres.append import AppendMode
from onceflow.sinks.postgres.columns import Column
from onceflow.sinks.postgres.merge import MergeMode
from onceflow.sinks.postgres.mode import PublishMode, TableLayout
from onceflow.sinks.postgres.tables import PostgresTables
from onceflow.sinks.postgres.upsert import UpsertMode
from onceflow.sinks.schema_evolution import Evolution
from onceflow.sinks.stage_writer import StageWriter

# The mode of each `mode` a pipelines file may name.
MODES: dict[str, type[PublishMode]] = {m.name: m for m in (AppendMode, UpsertMode, MergeMode)}


class PostgresSink(Sink):
    """A sink table T: its tables (PostgresTables) published by its mode (the pipeline's
    `mode`, or `mode` given)."""

    def __init__(
        self,
        schema: str,
        cfg: SinkConfig,
        columns: tuple[Column, ...] | None = None,
        aggregating: bool = False,
        mode: type[PublishMode] | None = None,
        shared_attempt: bool = False,
    ) -> None:
        super().__init__(schema, cfg.table)
        self.cfg = cfg
        self.aggregating = aggregating
        self.tables = PostgresTables(schema, cfg, columns, aggregating, shared_attempt)
        self.mode = (mode or MODES[cfg.mode])(self.tables)

    def for_columns(self, columns: tuple[Column, ...]) -> PostgresSink:
        """The same sink for an output of `columns`."""
        return PostgresSink(
            self.schema,
            self.cfg,
            columns,
            self.aggregating,
            type(self.mode),
            self.tables.shared_attempt,
        )

    @property
    def partitioned_table(self) -> str | None:
        """The published table partitioned by seq (maintenance rolls its partitions up)."""
        return self.mode.partitioned_table

    # -- the tables ---------------------------------------------------------------------

    def expected_tables(self) -> dict[str, TableLayout]:
        """Each table of the sink: its columns and its primary key."""
        stage = {self.stage_table: (self.tables.stage_definition(), ())}
        return {**stage, **self.mode.published_tables()}

    def create_table(
        self, cur, name: str, columns: tuple[Column, ...], pk: tuple[str, ...]
    ) -> None:
        self.tables.create(cur, name, columns, pk, partitioned=name == self.partitioned_table)
        self.mode.after_create(cur, name)

    def ensure(self, cur) -> None:
        # The tables need the output schema, which only process knows (stage_writer).
        cur.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(self.schema)))

    def stage_writer(
        self, cur, fields: Iterable[tuple[str, str]], evolution: Evolution | None = None
    ) -> StageWriter:
        return binding.stage_writer(self, cur, fields, evolution)

    # -- process --------------------------------------------------------------------------

    @property
    def takes_fast_form(self) -> bool:
        # upsert and merge rows need what the fast stage does not do (a null key is a dead
        # letter, tombstones)
        return self.mode.takes_fast_form()

    @property
    def _valid_records(self) -> sql.Composable:
        if self.aggregating:  # each valid row sums up `records` source records
            return sql.SQL("coalesce(sum(s.records) filter (where s.error is null), 0)")
        return super()._valid_records

    def attempt_table(self, seq: int, attempt: int) -> str | None:
        return self.mode.attempt_table(seq, attempt)

    def create_stage(self, cur, t: Attempt) -> None:
        self.mode.create_stage(cur, t)

    def seal_stage(self, cur, t: Attempt) -> None:
        if self.tables.stored_columns(cur) is not None:
            self.mode.seal(cur, t)

    def has_staged(self, cur, t: Attempt) -> bool:
        if self.tables.stored_columns(cur) is None:
            return False
        return self.mode.has_staged(cur, t) or super().has_staged(cur, t)

    def staged_counts(self, cur, t: Attempt) -> StagedCounts:
        return self.mode.staged_counts(cur, t, super().staged_counts(cur, t))

    def drop_staged(self, cur, t: Attempt) -> None:
        if self.tables.stored_columns(cur) is not None:
            super().drop_staged(cur, t)
        if self.mode.publishes_tables:
            self.tables.drop_unattached(cur, t.seq, t.attempt, self.mode.sealed_prefixes)

    # -- commit ---------------------------------------------------------------------------

    def publish(self, cur, t: Attempt, replacing: bool) -> tuple[int, int]:
        if self.tables.stored_columns(cur) is None:
            return 0, 0  # no process ever staged a record of this pipeline (empty batches)
        rows = self.mode.publish(cur, t, replacing)
        return rows, self.publish_dead_letters(cur, t)

    def unpublish(self, cur, t: Attempt) -> None:
        if self.tables.stored_columns(cur) is not None:
            self.mode.unpublish(cur, t)
        self.unpublish_dead_letters(cur, t)

    # -- the audit ------------------------------------------------------------------------

    def exists(self, cur) -> bool:
        return (
            self.tables.has_table(cur, self.mode.record_table)
            and self.tables.stored_columns(cur) is not None
        )

    def published_per_txid(self, cur) -> dict[str, int]:
        cur.execute(
            sql.SQL("select txid, {}::bigint from {} group by txid").format(
                self.mode.published_count(), self.tables.ident(self.mode.record_table)
            )
        )
        return dict(cur.fetchall())

    def published_and_dead(self, cur, pipeline: str, limit: int = 100) -> list[tuple]:
        if not self.mode.keeps_coordinates:
            return []
        records = self.tables.ident(self.mode.record_table)
        return published.published_and_dead(cur, pipeline, records, limit)

    def outside_ranges(self, cur, pipeline: str) -> int:
        records = self.tables.ident(self.mode.record_table) if self.mode.keeps_coordinates else None
        return published.count_outside_ranges(cur, pipeline, records)

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """append: no source record in the table twice (its key holds per partition only);
        upsert: each key's row is the last record for it among committed versions (none if
        that is a tombstone); merge: the state is the sum of the committed txids' partials,
        last_seq their newest seq."""
        return self.mode.truth(cur, pipeline, limit)
