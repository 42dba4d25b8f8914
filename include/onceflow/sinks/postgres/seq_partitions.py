"""A published table partitioned by seq (append's T, upsert's T_versions): process fills an
attempt's own table with its rows and, once every part is staged, builds on it the indexes
the published table has; commit attaches it as the seq's partition FOR VALUES FROM (seq) TO
(seq + 1). PostgreSQL then validates no row (a CHECK constraint on the attempt's table
implies the bound, the indexes exist), so publishing 2,000,000 rows costs what publishing
1,000 does.

- only the staged attempt's table is attached; every other attempt's stays unattached,
  never seen by readers, and is dropped once the txid commits (drop_staged);
- ATTACH is transactional: the partition appears in the commit's transaction, with the
  dead letters, the batch's state and the offsets' compare-and-set;
- no record published twice: PostgreSQL enforces a partitioned table's unique indexes within
  each partition only, so the table's keys keep a txid's rows apart, and across txids the
  ranges do (disjoint, each committed once by the offsets' compare-and-set); the audit
  checks it (`duplicated_coordinates`);
- a re-run by run id: unpublish drops the txid's partition, then publish attaches the new
  attempt's table; a seq inside a wider partition (an earlier version's table that
  `onceflow migrate --sinks` made one partition, or partitions rolled up by
  sinks.postgres.partition_rollup) has its rows deleted there and the new ones inserted
  instead: a copy, as re-runs are rare.

What readers see: a statement sees a batch wholly or not at all. PostgreSQL's catalog is not
versioned like rows: a REPEATABLE READ or SERIALIZABLE transaction that began before a
commit sees that batch's rows in its statements after the commit.
"""

from __future__ import annotations

import re
from abc import abstractmethod

from psycopg2 import errors as pg_errors
from psycopg2 import sql

from onceflow.errors import SinkLayoutError, TransformError
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.stage_parts import parts_valid
from onceflow.sinks.postgres.mode import PublishMode

_INDEX = re.compile(r"^CREATE (UNIQUE )?INDEX \S+ ON ONLY \S+ (USING \S+ \((.*)\).*)$")


class SeqPartitioned(PublishMode):
    """A mode that publishes by attaching the attempt's table as a partition of its
    partitioned table: attaching, detaching and indexing those partitions."""

    # how the names of the partitioned table's partitions begin, after `<table>__`
    part_prefix = "s"

    @property
    @abstractmethod
    def partitioned_table(self) -> str: ...

    @abstractmethod
    def published_part(self, seq: int, attempt: int) -> str:
        """The table process fills with an attempt's rows of the partitioned table, which
        commit attaches as the seq's partition."""

    def check_layout(self, cur) -> None:
        """Refuse a partitioned table of an earlier version (not partitioned by seq),
        naming the command that migrates it."""
        self.check_relkind(self.tables.relkind(cur, self.partitioned_table))

    def check_relkind(self, relkind: str | None) -> None:
        """check_layout, for a caller that has read the partitioned table's relkind."""
        name = self.partitioned_table
        if relkind not in (None, "p"):
            raise SinkLayoutError(
                f"sink table {self.tables.schema}.{name} is an {self.name} table of an "
                "earlier Onceflow version (not partitioned by seq); migrate it first: "
                "`onceflow migrate --sinks` (every pipeline's) or `onceflow migrate --sinks "
                "--pipeline NAME`. Nothing was staged or published."
            )

    def truth(self, cur, pipeline: str, limit: int) -> list[str]:
        return [
            f"table {self.tables.schema}.{self.partitioned_table}: record "
            f"{topic}[{partition}]@{offset} (epoch {epoch}) is in the table {n} times"
            for topic, partition, epoch, offset, n in self.duplicated_coordinates(cur, limit)
        ]

    def seal_part(self, cur, t: Attempt, name: str) -> None:
        """process, once every part is staged: build the partitioned table's indexes on the
        attempt's table `name`, so that attaching it builds none; a row the transform output
        twice for one record fails a unique index here, in process, with the record named."""
        try:
            self.build_indexes(cur, name)
        except pg_errors.UniqueViolation as e:
            raise TransformError(
                f"transform output of txid {t.txid!r} (pipeline {t.pipeline!r}, attempt "
                f"{t.attempt}) holds two rows of one source record ({e.diag.message_detail}): "
                "a record-wise transform keeps one row per record. Nothing was marked staged."
            ) from None

    def build_indexes(self, cur, name: str, parent: str | None = None) -> None:
        """Build on table `name` every index of the partitioned table `parent` (default: the
        sink's), its primary key among them, as attaching `name` as a partition needs them:
        then the attach builds none."""
        cur.execute(
            "select i.indisprimary, pg_get_indexdef(i.indexrelid) from pg_index i"
            " where i.indrelid = to_regclass(format('%%I.%%I', %s::text, %s::text))",
            (self.tables.schema, parent or self.partitioned_table),
        )
        for primary, definition in cur.fetchall():
            index = _INDEX.match(definition)
            if index is None:  # not a plain index of columns: PostgreSQL builds it at attach
                continue
            if primary:
                cur.execute(
                    sql.SQL("alter table {} add primary key ({})").format(
                        self.tables.ident(name), sql.SQL(index.group(3))
                    )
                )
            else:
                cur.execute(
                    sql.SQL("create {}index on {} {}").format(
                        sql.SQL(index.group(1) or ""),
                        self.tables.ident(name),
                        sql.SQL(index.group(2)),
                    )
                )

    def attach_part(self, cur, t: Attempt, name: str) -> int:
        """Attach the attempt's table `name` as the seq's partition (or, if the seq lies in a
        wider partition, insert its rows there); the rows it published."""
        parent = self.partitioned_table
        self._add_missing_columns(cur, name, parent)
        cur.execute("savepoint onceflow_attach")
        try:
            cur.execute(
                sql.SQL(
                    "alter table {table} attach partition {part} for values from (%s) to (%s)"
                ).format(table=self.tables.ident(parent), part=self.tables.ident(name)),
                (t.seq, t.seq + 1),
            )
        except pg_errors.InvalidObjectDefinition:  # the seq lies in a wider partition
            cur.execute("rollback to savepoint onceflow_attach")
            return self._insert_into_wider(cur, name, parent)
        cur.execute("release savepoint onceflow_attach")
        # the attached table holds exactly the valid rows its parts' transactions counted;
        # an attempt staged without part counts (mark_staged counted its rows), or whose
        # parts staged other tables too, is counted
        valid = None if self.tables.shared_attempt else parts_valid(cur, t)
        if valid is None:
            cur.execute(sql.SQL("select count(*) from {}").format(self.tables.ident(name)))
            valid = cur.fetchone()[0]
        return int(valid)

    def _insert_into_wider(self, cur, name: str, parent: str) -> int:
        columns = sql.SQL(", ").join(
            sql.Identifier(n) for n, _, _ in self.tables.table_columns(cur, name)
        )
        cur.execute(
            sql.SQL("insert into {table} ({cols}) select {cols} from {part}").format(
                table=self.tables.ident(parent), cols=columns, part=self.tables.ident(name)
            )
        )
        published = cur.rowcount
        cur.execute(sql.SQL("drop table {}").format(self.tables.ident(name)))
        return published

    def detach_seq(self, cur, t: Attempt) -> None:
        """Un-publish the txid's rows: drop its own partition, or delete its rows from a wider
        one."""
        own = self.tables.sealed_tables(cur, t.seq, attached=True, prefix=self.part_prefix)
        for name in own:
            cur.execute(sql.SQL("drop table {}").format(self.tables.ident(name)))
        if not own:  # in a wider partition, or an empty batch's (none)
            cur.execute(
                sql.SQL("delete from {} where seq = %s").format(
                    self.tables.ident(self.partitioned_table)
                ),
                (t.seq,),
            )

    def _add_missing_columns(self, cur, name: str, parent: str) -> None:
        """Columns a later txid's schema evolution added to `parent` since the attempt's table
        `name` was made (they are nullable: its rows hold null there, as for every earlier
        batch)."""
        cur.execute(
            "select p.attname, format_type(p.atttypid, p.atttypmod) from pg_attribute p"
            " where p.attrelid = to_regclass(format('%%I.%%I', %s::text, %s::text))"
            " and p.attnum > 0 and not p.attisdropped and not exists ("
            "  select from pg_attribute a"
            "  where a.attrelid = to_regclass(format('%%I.%%I', %s::text, %s::text))"
            "  and a.attname = p.attname and not a.attisdropped)"
            " order by p.attnum",
            (self.tables.schema, parent, self.tables.schema, name),
        )
        for column, type_ in cur.fetchall():
            cur.execute(
                sql.SQL("alter table {} add column {} {}").format(
                    self.tables.ident(name), sql.Identifier(column), sql.SQL(type_)
                )
            )

    def duplicated_coordinates(self, cur, limit: int) -> list[tuple]:
        """(topic, partition, epoch, offset, copies) of source records published more than
        once: the audit's check of what the per-partition unique indexes cannot enforce."""
        cur.execute(
            sql.SQL(
                'select topic, partition, epoch, "offset", count(*) from {} group by topic,'
                ' partition, epoch, "offset" having count(*) > 1 limit %s'
            ).format(self.tables.ident(self.partitioned_table)),
            (limit,),
        )
        return cur.fetchall()
