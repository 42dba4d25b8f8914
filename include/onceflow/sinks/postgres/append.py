"""`append`: one row per valid source record, published by attaching the attempt's own table.

The published table T is partitioned by seq. process COPYs an attempt's valid rows into the
attempt's own table (`attempt_table`: LOGGED, of T's columns, with a CHECK constraint that
its seq is the txid's; onceflow.staging.attempt_table) and, once every part is staged,
builds on it the indexes T has, T's primary key among them (`seal_stage`). Commit attaches
it as T's partition FOR VALUES FROM (seq) TO (seq + 1): PostgreSQL validates no row (the
CHECK constraint implies the bound, the indexes exist), so publishing 2,000,000 rows costs
what publishing 1,000 does. The dead letters are staged and published as before, from the
stage table.

How the rules hold:

- only the staged attempt's table is attached; every other attempt's stays unattached,
  never seen by readers, and is dropped once the txid commits (drop_staged);
- ATTACH is transactional: the partition appears in the commit's transaction, with the
  dead letters, the batch's state and the offsets' compare-and-set;
- no record published twice: PostgreSQL enforces a partitioned table's primary key within
  each partition only, so T's key (topic, partition, epoch, offset, seq) keeps a txid's
  rows apart, and across txids the ranges do (disjoint, each committed once by the
  offsets' compare-and-set); the audit checks it (`duplicated_coordinates`);
- a re-run by run id: unpublish drops the txid's partition, then publish attaches the new
  attempt's table; a seq inside a wider partition (an earlier version's table that
  `onceflow migrate --sinks` made one partition) has its rows deleted there and the new
  ones inserted instead: a copy, as re-runs are rare.

What readers see: a statement sees a batch wholly or not at all. PostgreSQL's catalog is not
versioned like rows: a REPEATABLE READ or SERIALIZABLE transaction that began before a
commit sees that batch's rows in its statements after the commit.
"""

from __future__ import annotations

import re

from psycopg2 import errors as pg_errors
from psycopg2 import sql

from onceflow.errors import TransformError
from onceflow.sinks.base import PublishTarget, StagedCounts
from onceflow.sinks.postgres.columns import ids
from onceflow.sinks.postgres.tables import PostgresTables

# An append table's primary key; seq, the partition key, is part of it (PostgreSQL requires
# it of a partitioned table's unique indexes).
APPEND_KEY = ("topic", "partition", "epoch", "offset", "seq")
_PLAIN_INDEX = re.compile(r"^CREATE (UNIQUE )?INDEX \S+ ON ONLY \S+ (USING .*)$")


class AppendMode(PostgresTables):
    """Staging into, and publishing and un-publishing, an append sink's attempt tables
    (PostgresSink dispatches by mode)."""

    # -- process: the attempt's own table --------------------------------------------------

    def attempt_table(self, seq: int, attempt: int) -> str | None:
        return self.sealed_table(seq, attempt) if self._attaches else None

    def create_stage(self, cur, t: PublishTarget) -> None:
        name = self.attempt_table(t.seq, t.attempt)
        if name is None:
            return
        # an earlier version's table was refused by bind_output, in the same transaction;
        # if not exists: a stage job run again around poison records keeps the parts
        # its first run staged (onceflow.process.poison_records)
        cur.execute(
            sql.SQL(
                "create table if not exists {part} (like {table} including defaults,"
                " check (seq >= %s and seq < %s))"
            ).format(part=self._t(name), table=self._t(self.table)),
            (t.seq, t.seq + 1),
        )

    def _seal_append(self, cur, t: PublishTarget) -> None:
        """Build on the attempt's table every index T has, so that attaching it builds none;
        a row the transform output twice for one record fails T's primary key here, in
        process, with the record named."""
        name = self.attempt_table(t.seq, t.attempt)
        if name is None or not self._exists(cur, name):
            return
        try:
            self.build_indexes(cur, name)
        except pg_errors.UniqueViolation as e:
            raise TransformError(
                f"transform output of txid {t.txid!r} (pipeline {t.pipeline!r}, attempt "
                f"{t.attempt}) holds two rows of one source record ({e.diag.message_detail}): "
                "a record-wise transform keeps one row per record. Nothing was marked staged."
            ) from None

    def build_indexes(self, cur, name: str) -> None:
        """Build T's indexes on table `name` (T's primary key, and the user's own plain
        indexes), as attaching it as a partition needs them: then the attach builds none."""
        cur.execute(
            "select i.indisprimary, pg_get_indexdef(i.indexrelid) from pg_index i"
            " where i.indrelid = to_regclass(format('%%I.%%I', %s::text, %s::text))",
            (self.schema, self.table),
        )
        for primary, definition in cur.fetchall():
            if primary:
                cur.execute(
                    sql.SQL("alter table {} add primary key ({})").format(
                        self._t(name), ids(APPEND_KEY)
                    )
                )
                continue
            plain = _PLAIN_INDEX.match(definition)
            if plain:  # an index of the user's: built here rather than inside commit
                cur.execute(
                    sql.SQL("create {}index on {} {}").format(
                        sql.SQL(plain.group(1) or ""), self._t(name), sql.SQL(plain.group(2))
                    )
                )

    # -- the stage of one attempt ----------------------------------------------------------

    def has_staged(self, cur, t: PublishTarget) -> bool:
        name = self.attempt_table(t.seq, t.attempt)
        if name is not None and self._exists(cur, name):
            cur.execute(sql.SQL("select exists (select 1 from {})").format(self._t(name)))
            if cur.fetchone()[0]:
                return True
        return super().has_staged(cur, t)

    def staged_counts(self, cur, t: PublishTarget) -> StagedCounts:
        counts = super().staged_counts(cur, t)  # the dead letters, in the stage table
        name = self.attempt_table(t.seq, t.attempt)
        if name is None or not self._exists(cur, name):
            return counts
        cur.execute(sql.SQL("select count(*) from {}").format(self._t(name)))
        rows = cur.fetchone()[0]
        # the valid rows' hashes are not kept: the checksum is the part fence's
        cur.execute(
            "select coalesce(sum(checksum), 0)::text from onceflow.stage_parts"
            " where pipeline = %s and txid = %s and attempt = %s",
            (t.pipeline, t.txid, t.attempt),
        )
        return StagedCounts(counts.records + rows, rows, counts.dead, cur.fetchone()[0])

    # -- commit -------------------------------------------------------------------------

    def _publish_append(self, cur, t: PublishTarget) -> int:
        self.check_layout(cur)
        name = self.attempt_table(t.seq, t.attempt)
        if not self._exists(cur, name):
            return 0  # an empty batch: no stage job ran, nothing to attach
        self._add_missing_columns(cur, name)
        cur.execute("savepoint onceflow_attach")
        try:
            cur.execute(
                sql.SQL(
                    "alter table {table} attach partition {part} for values from (%s) to (%s)"
                ).format(table=self._t(self.table), part=self._t(name)),
                (t.seq, t.seq + 1),
            )
        except pg_errors.InvalidObjectDefinition:  # the seq lies in a wider partition
            cur.execute("rollback to savepoint onceflow_attach")
            return self._insert_into_wider(cur, name)
        cur.execute("release savepoint onceflow_attach")
        # the attached table holds exactly what its parts' transactions wrote and counted;
        # an attempt staged without part counts (mark_staged counted its rows) is counted
        cur.execute(
            "select sum(valid), count(*) = 0 or bool_or(valid is null)"
            " from onceflow.stage_parts where pipeline = %s and txid = %s and attempt = %s",
            (t.pipeline, t.txid, t.attempt),
        )
        valid, uncounted = cur.fetchone()
        if uncounted:
            cur.execute(sql.SQL("select count(*) from {}").format(self._t(name)))
            valid = cur.fetchone()[0]
        return int(valid)

    def _insert_into_wider(self, cur, name: str) -> int:
        columns = ids(n for n, _, _ in self._table_columns(cur, name))
        cur.execute(
            sql.SQL("insert into {table} ({cols}) select {cols} from {part}").format(
                table=self._t(self.table), cols=columns, part=self._t(name)
            )
        )
        published = cur.rowcount
        cur.execute(sql.SQL("drop table {}").format(self._t(name)))
        return published

    def _unpublish_append(self, cur, t: PublishTarget) -> None:
        self.check_layout(cur)
        own = self._sealed_tables(cur, t.seq, attached=True)
        for name in own:
            cur.execute(sql.SQL("drop table {}").format(self._t(name)))
        if not own:  # in a wider partition, or an empty batch's (none)
            cur.execute(
                sql.SQL("delete from {} where seq = %s").format(self._t(self.table)), (t.seq,)
            )

    def _add_missing_columns(self, cur, name: str) -> None:
        """Columns a later txid's schema evolution added to T since this attempt's table was
        made (they are nullable: its rows hold null there, as for every earlier batch)."""
        have = {n for n, _, _ in self._table_columns(cur, name)}
        for column, type_, _ in self._table_columns(cur, self.table):
            if column not in have:
                cur.execute(
                    sql.SQL("alter table {} add column {} {}").format(
                        self._t(name), sql.Identifier(column), sql.SQL(type_)
                    )
                )

    def duplicated_coordinates(self, cur, limit: int) -> list[tuple]:
        """(topic, partition, epoch, offset, copies) of source records published more than
        once: the audit's check of what T's per-partition key cannot enforce."""
        cur.execute(
            sql.SQL(
                'select topic, partition, epoch, "offset", count(*) from {} group by topic,'
                ' partition, epoch, "offset" having count(*) > 1 limit %s'
            ).format(self._t(self.table)),
            (limit,),
        )
        return cur.fetchall()
