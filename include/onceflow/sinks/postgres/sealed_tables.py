"""The tables process seals for commit in a PostgreSQL sink (`<table>__s<seq>_a<attempt>`,
and upsert's `__v` versions): named, found and dropped. Which mode fills them and how commit
uses them: sinks.postgres.append, upsert and merge."""

from __future__ import annotations

from psycopg2 import sql

from onceflow.errors import SinkLayoutError
from onceflow.ledger.attempt import Attempt
from onceflow.sinks.base import Sink


class SealedTables(Sink):
    """What process seals for commit; PostgresTables names the sink's tables (_t)."""

    def sealed_table(self, seq: int, attempt: int) -> str:
        """The table, in `schema`, that process fills for an attempt so that commit copies
        little or nothing: append's attempt table, which commit attaches (sinks.postgres.append);
        upsert's newest version per key (sinks.postgres.upsert); merge's partial aggregates
        (sinks.postgres.merge)."""
        return self.part_name(f"s{seq}_a{attempt}", f"of seq {seq} attempt {attempt}")

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

    def _sealed_pattern(self, seq: int, prefix: str = "s") -> str:
        """A LIKE pattern of the sealed tables of every attempt of `seq` (`prefix` "v":
        upsert's versions of each attempt)."""
        escaped = self.table.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%")
        return f"{escaped}\\_\\_{prefix}{seq}\\_a%"

    def relkind(self, cur, name: str) -> str | None:
        """pg_class.relkind of the table `name` (p: partitioned), None if there is none."""
        cur.execute(
            "select relkind from pg_class where oid = to_regclass(format('%%I.%%I', %s::text,"
            " %s::text))",
            (self.schema, name),
        )
        row = cur.fetchone()
        return row[0] if row else None

    def _exists(self, cur, name: str | None) -> bool:
        if name is None:
            return False
        cur.execute(
            "select to_regclass(format('%%I.%%I', %s::text, %s::text)) is not null",
            (self.schema, name),
        )
        return cur.fetchone()[0]

    def _sealed_tables(self, cur, seq: int, attached: bool, prefix: str = "s") -> list[str]:
        """The sealed tables of every attempt of `seq`: the ones attached as a partition (the
        published output), or the others."""
        cur.execute(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = %s and c.relkind = 'r' and c.relispartition = %s"
            " and c.relname like %s",
            (self.schema, attached, self._sealed_pattern(seq, prefix)),
        )
        return [name for (name,) in cur.fetchall()]

    def _drop_sealed(self, cur, t: Attempt) -> None:
        """Drop the sealed tables of the txid's attempts up to t.attempt that are no partition
        (an attached one is the published output)."""
        for prefix in ("s", "v") if self.cfg.mode == "upsert" else ("s",):
            for name in self._sealed_tables(cur, t.seq, attached=False, prefix=prefix):
                if int(name.rsplit("_a", 1)[1]) <= t.attempt:
                    cur.execute(sql.SQL("drop table {}").format(self._t(name)))
