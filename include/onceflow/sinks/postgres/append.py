"""`append`: one row per valid source record, published by attaching the attempt's own table.

The published table T is partitioned by seq (sinks.postgres.seq_partitions says how the
rules hold). process COPYs an attempt's valid rows into the attempt's own table
(`attempt_table`: LOGGED, of T's columns, with a CHECK constraint that its seq is the txid's;
onceflow.staging.attempt_table) and, once every part is staged, builds on it the indexes T
has, T's primary key (tables.RECORD_KEY) among them (`seal_stage`).
Commit attaches it as T's partition. The dead letters are staged and published as before,
from the stage table.
"""

from __future__ import annotations

from psycopg2 import sql

from onceflow.ledger.attempt import Attempt, StagedCounts
from onceflow.ledger.stage_parts import parts_checksum
from onceflow.sinks.postgres.columns import Column
from onceflow.sinks.postgres.mode import TableLayout
from onceflow.sinks.postgres.seq_partitions import SeqPartitioned
from onceflow.sinks.postgres.tables import COORDINATE_COLUMNS, RECORD_KEY


class AppendMode(SeqPartitioned):
    """Staging into, and publishing and un-publishing, an append sink's attempt tables."""

    name = "append"

    @property
    def record_table(self) -> str:
        return self.tables.table

    @property
    def partitioned_table(self) -> str:
        return self.tables.table

    def published_part(self, seq: int, attempt: int) -> str:
        return self.tables.sealed_table(seq, attempt)

    def published_tables(self) -> dict[str, TableLayout]:
        t = self.tables
        columns = (*COORDINATE_COLUMNS, Column("seq", "bigint"), Column("txid", "text"))
        # seq, the partition key, is in the key: PostgreSQL requires it of a partitioned
        # table's unique indexes
        return {t.table: ((*columns, *t.columns), RECORD_KEY)}

    def takes_fast_form(self) -> bool:
        # an append row is its record's coordinates and columns
        return not self.tables.aggregating

    # -- process: the attempt's own table --------------------------------------------------

    def attempt_table(self, seq: int, attempt: int) -> str | None:
        return self.tables.sealed_table(seq, attempt)

    def create_stage(self, cur, t: Attempt) -> None:
        name = self.attempt_table(t.seq, t.attempt)
        # an earlier version's table was refused by stage_writer, in the same transaction;
        # if not exists: a stage job run again around poison records keeps the parts
        # its first run staged (onceflow.process.poison_records)
        cur.execute(
            sql.SQL(
                "create table if not exists {part} (like {table} including defaults,"
                " check (seq >= %s and seq < %s))"
            ).format(part=self.tables.ident(name), table=self.tables.ident(self.tables.table)),
            (t.seq, t.seq + 1),
        )

    def seal(self, cur, t: Attempt) -> None:
        """Build on the attempt's table every index T has, so that attaching it builds none;
        a row the transform output twice for one record fails T's primary key here, in
        process, with the record named."""
        name = self.attempt_table(t.seq, t.attempt)
        if not self.tables.has_table(cur, name):
            return
        self.seal_part(cur, t, name)

    # -- the stage of one attempt ----------------------------------------------------------

    def has_staged(self, cur, t: Attempt) -> bool:
        name = self.attempt_table(t.seq, t.attempt)
        if not self.tables.has_table(cur, name):
            return False
        cur.execute(sql.SQL("select exists (select 1 from {})").format(self.tables.ident(name)))
        return cur.fetchone()[0]

    def staged_counts(self, cur, t: Attempt, stage: StagedCounts) -> StagedCounts:
        # `stage`: the dead letters, in the stage table
        name = self.attempt_table(t.seq, t.attempt)
        if not self.tables.has_table(cur, name):
            return stage
        cur.execute(sql.SQL("select count(*) from {}").format(self.tables.ident(name)))
        rows = cur.fetchone()[0]
        # the valid rows' hashes are not kept: the checksum is the part fence's
        return StagedCounts(stage.rows + rows, rows, stage.dead, parts_checksum(cur, t))

    # -- commit -------------------------------------------------------------------------

    def publish(self, cur, t: Attempt, replacing: bool) -> int:
        self.check_layout(cur)
        name = self.attempt_table(t.seq, t.attempt)
        if not self.tables.has_table(cur, name):
            return 0  # an empty batch: no stage job ran, nothing to attach
        return self.attach_part(cur, t, name)

    def unpublish(self, cur, t: Attempt) -> None:
        self.check_layout(cur)
        self.detach_seq(cur, t)
