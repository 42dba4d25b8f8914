"""`append`: one row per valid source record in the sink table, keyed by its coordinates
(topic, partition, epoch, offset); publish inserts the attempt's valid rows, unpublish
deletes the txid's.
"""

from __future__ import annotations

from psycopg2 import sql

from onceflow.sinks.base import PublishTarget
from onceflow.sinks.postgres.columns import more
from onceflow.sinks.postgres.tables import PostgresTables


class AppendMode(PostgresTables):
    """Publishing and un-publishing an append sink's rows (PostgresSink dispatches by mode)."""

    def _publish_append(self, cur, t: PublishTarget) -> int:
        users = [c.name for c in self._columns]
        cur.execute(
            sql.SQL(
                'insert into {table} (topic, partition, epoch, "offset", txid{cols}) {q}'
            ).format(
                table=self._t(self.table),
                cols=more(users),
                q=self._staged_valid(
                    sql.SQL('s.topic, s.partition, r.epoch, s."offset", s.txid{}').format(
                        more(users, "s")
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
