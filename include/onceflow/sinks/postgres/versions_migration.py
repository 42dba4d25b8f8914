"""`onceflow migrate --sinks`: an upsert table's versions of an earlier version, made one
partitioned by seq.

Earlier versions published an upsert batch by copying its versions into an ordinary table
`T_versions`. This version's is partitioned by seq (sinks.postgres.upsert). The versions
already carry their seq, so the migration, in one transaction under the pipeline's commit
lock and the sink's binding lock (no commit or process of the pipeline interleaves), only:

1. renames `T_versions` to `T__vlegacy` and drops its column `published_at` (an attached
   partition's rows were written by process; the batch's commit time is
   onceflow.batches.committed_at);
2. creates `T_versions` partitioned by seq, with its primary key and indexes, and attaches
   `T__vlegacy` as the one partition of every seq it holds (PostgreSQL checks its rows
   against the bound and builds the index it lacks once: the step that takes time);
3. leaves the batches staged but not yet committed as they are: their commit seals their
   versions from the stage table (sinks.postgres.upsert).

The current table `T` is not touched.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg2 import sql

from onceflow.ledger.ordering import lock_commits
from onceflow.sinks.postgres.columns import ids
from onceflow.sinks.postgres.sink import PostgresSink
from onceflow.sinks.postgres.upsert import UpsertMode


@dataclass(frozen=True)
class VersionsMigration:
    """What migrating one upsert sink's versions did."""

    table: str
    rows: int  # versions moved into the legacy partition
    seqs: tuple[int, int] | None  # the seqs its partition holds, None: it was empty

    def __str__(self) -> str:
        held = f"seq {self.seqs[0]}..{self.seqs[1]}" if self.seqs else "no rows"
        return f"{self.table}: partitioned by seq; {self.rows} version(s) ({held}) in one partition"


def migrate_versions(cur, pipeline: str, sink: PostgresSink) -> VersionsMigration | None:
    """Migrate `sink`'s versions table if it is one of an earlier version; None if there is
    nothing to migrate (not an upsert sink, no table yet, or already partitioned)."""
    if not isinstance(sink.mode, UpsertMode):
        return None
    lock_commits(cur, pipeline)
    sink.lock_tables(cur)
    if (
        sink.tables.relkind(cur, sink.tables.versions_table) in (None, "p")
        or sink.tables.stored_columns(cur) is None
    ):
        return None
    legacy_name = sink.tables.part_name("vlegacy", "holding the versions of an earlier version")
    versions, legacy = sink.tables.ident(sink.tables.versions_table), sink.tables.ident(legacy_name)
    cur.execute(sql.SQL("lock table {} in access exclusive mode").format(versions))
    cur.execute(
        sql.SQL("alter table {} rename to {}").format(versions, sql.Identifier(legacy_name))
    )
    cur.execute(sql.SQL("alter table {} drop column if exists published_at").format(legacy))
    cur.execute(sql.SQL("select count(*), min(seq), max(seq) from {}").format(legacy))
    total, low, high = cur.fetchone()
    # the versions table's layout as the legacy one now has it (its columns, evolved ones
    # too), partitioned by seq, with its key and indexes
    key = (*sink.cfg.key, "seq", "topic", "partition", "offset")
    cur.execute(
        sql.SQL(
            "create table {} (like {} including defaults, primary key ({}))"
            " partition by range (seq)"
        ).format(versions, legacy, ids(key))
    )
    sink.mode.create_versions_indexes(cur, sink.tables.versions_table)
    if total:
        cur.execute(
            sql.SQL("alter table {} attach partition {} for values from (%s) to (%s)").format(
                versions, legacy
            ),
            (low, high + 1),
        )
    else:
        cur.execute(sql.SQL("drop table {}").format(legacy))
    return VersionsMigration(
        f"{sink.schema}.{sink.tables.versions_table}", total, (low, high) if total else None
    )
