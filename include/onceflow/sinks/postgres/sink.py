"""A pipeline's sink in PostgreSQL, in the ledger's database: `append`, `upsert` or
`merge` (PROTOCOL.md "Sinks"), with tables created from the transform's output schema.

It publishes inside the commit's own transaction, so the output, the batch's state and the
offsets' compare-and-set commit together. Its parts, one idea each:

- columns: the output's columns typed for PostgreSQL, and the SQL column lists;
- tables: the sink's tables, their names and layout, and the stage every mode reads;
- binding: process creating, checking and evolving the tables to the output;
- seq_partitions: a published table partitioned by seq, whose partitions process fills and
  commit attaches (append's table, upsert's versions);
- append, upsert, merge: how each mode publishes, un-publishes and what the audit checks;
- append_migration, versions_migration: an append table, an upsert table's versions, of an
  earlier version partitioned by seq;
- partition_rollup: the one-batch partitions rolled up (maintenance);
- stage_table: the stage table alone, for a sink outside the database (a Kafka topic).
"""

from __future__ import annotations

from psycopg2 import sql

from onceflow.ledger import published
from onceflow.ledger.attempt import Attempt
from onceflow.sinks.postgres.append import AppendMode
from onceflow.sinks.postgres.binding import OutputBinding
from onceflow.sinks.postgres.merge import MergeMode
from onceflow.sinks.postgres.upsert import UpsertMode


class PostgresSink(OutputBinding, AppendMode, UpsertMode, MergeMode):
    """A sink table T of mode append, upsert or merge (PostgresTables holds what it is
    made of); publish, unpublish and the audit's truth go to the mode's own."""

    def publish(self, cur, t: Attempt, replacing: bool) -> tuple[int, int]:
        if self._stored_columns(cur) is None:
            return 0, 0  # no process ever staged a record of this pipeline (empty batches)
        # each mode's publish takes `replacing`; upsert alone needs it
        rows = {"append": self._publish_append, "upsert": self._publish_upsert}.get(
            self.cfg.mode, self._publish_merge
        )(cur, t, replacing)
        return rows, self.publish_dead_letters(cur, t)

    def seal_stage(self, cur, t: Attempt) -> None:
        if self._stored_columns(cur) is None:
            return
        {"append": self._seal_append, "upsert": self._seal_upsert}.get(
            self.cfg.mode, self._seal_merge
        )(cur, t)

    def unpublish(self, cur, t: Attempt) -> None:
        if self._stored_columns(cur) is not None:
            {"append": self._unpublish_append, "upsert": self._unpublish_upsert}.get(
                self.cfg.mode, self._unpublish_merge
            )(cur, t)
        self.unpublish_dead_letters(cur, t)

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
        return published.published_and_dead(cur, pipeline, self._t(self._record_table), limit)

    def outside_ranges(self, cur, pipeline: str) -> int:
        # a merge sink's state and partials carry no coordinates (see published_and_dead)
        records = None if self.cfg.mode == "merge" else self._t(self._record_table)
        return published.count_outside_ranges(cur, pipeline, records)

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """append: no source record in the table twice (its key holds per partition only);
        upsert: each key's row is the last record for it among committed versions (none if
        that is a tombstone); merge: the state is the sum of the committed txids' partials,
        last_seq their newest seq."""
        if self._attaches:
            return [
                f"table {self.schema}.{self.table}: record {topic}[{partition}]@{offset} "
                f"(epoch {epoch}) is in the table {n} times"
                for topic, partition, epoch, offset, n in self.duplicated_coordinates(cur, limit)
            ]
        if self.cfg.mode == "upsert":
            return self._upsert_truth(cur, pipeline, limit)
        if self.cfg.mode == "merge":
            return self._merge_truth(cur, pipeline, limit)
        return []
