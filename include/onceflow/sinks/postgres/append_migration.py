"""`onceflow migrate --sinks`: an append table of an earlier version, made one of seq.

Earlier versions published an append batch by copying its rows into an ordinary table T
keyed by the record's coordinates. This version's T is partitioned by seq
(sinks.postgres.append). The migration, in one transaction under the pipeline's commit lock
and the sink's binding lock (no commit or process of the pipeline interleaves):

1. renames T to `T__legacy` and gives its rows their txid's seq (a rewrite: the one step
   that takes time, about what publishing them once did);
2. creates T partitioned by seq, with the key of its records (tables.RECORD_KEY), and
   attaches `T__legacy` as the one partition of every seq it holds (a re-run of one of
   them replaces its rows there: sinks.postgres.append);
3. gives each batch staged but not yet committed its attempt table, from the stage table's
   valid rows, so that its commit attaches it like any other.

The column `published_at` goes: an attached partition's rows were written by process, and
the batch's commit time is onceflow.batches.committed_at. The old key's uniqueness across
txids is kept by the ranges and the offsets' compare-and-set; the audit checks it.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg2 import sql

from onceflow.errors import SinkLayoutError
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.ordering import lock_commits
from onceflow.ledger.published import set_seqs, staged_batches
from onceflow.sinks.postgres.append import AppendMode
from onceflow.sinks.postgres.columns import ids, more
from onceflow.sinks.postgres.sink import PostgresSink
from onceflow.sinks.postgres.tables import RECORD_KEY


@dataclass(frozen=True)
class AppendMigration:
    """What migrating one append sink did."""

    table: str
    rows: int  # published rows moved into the legacy partition
    seqs: tuple[int, int] | None  # the seqs its partition holds, None: it was empty
    staged: int  # staged batches given an attempt table

    def __str__(self) -> str:
        held = f"seq {self.seqs[0]}..{self.seqs[1]}" if self.seqs else "no rows"
        return (
            f"{self.table}: partitioned by seq; {self.rows} published row(s) ({held}) in "
            f"{self.table}__legacy; {self.staged} staged batch(es) given their attempt table"
        )


def migrate_append(cur, pipeline: str, sink: PostgresSink) -> AppendMigration | None:
    """Migrate `sink`'s table if it is an append table of an earlier version; None if there
    is nothing to migrate (not an append sink, no table yet, or already partitioned)."""
    if not isinstance(sink.mode, AppendMode) or sink.aggregating:
        return None
    lock_commits(cur, pipeline)
    sink.lock_tables(cur)
    if (
        sink.tables.relkind(cur, sink.table) in (None, "p")
        or sink.tables.stored_columns(cur) is None
    ):
        return None
    table, legacy = sink.tables.ident(sink.table), sink.tables.ident(f"{sink.table}__legacy")
    cur.execute(sql.SQL("lock table {} in access exclusive mode").format(table))
    cur.execute(
        sql.SQL("alter table {} rename to {}").format(
            table, sql.Identifier(f"{sink.table}__legacy")
        )
    )
    cur.execute(
        "select conname from pg_constraint where contype = 'p'"
        " and conrelid = to_regclass(format('%%I.%%I', %s::text, %s::text))",
        (sink.schema, f"{sink.table}__legacy"),
    )
    for (key,) in cur.fetchall():  # the coordinates' key: T's own now has seq in it
        cur.execute(
            sql.SQL("alter table {} drop constraint {}").format(legacy, sql.Identifier(key))
        )
    cur.execute(
        sql.SQL("alter table {} drop column if exists published_at, add column seq bigint").format(
            legacy
        )
    )
    rows = set_seqs(cur, pipeline, legacy)
    cur.execute(sql.SQL("select count(*), min(seq), max(seq) from {}").format(legacy))
    total, low, high = cur.fetchone()
    if rows != total:
        raise SinkLayoutError(
            f"sink table {sink.schema}.{sink.table}: {total - rows} of its {total} rows name a "
            f"txid the ledger has no batch of for pipeline {pipeline!r}; nothing was migrated"
        )
    # T's columns as the legacy table now has them, seq among them, partitioned by it
    cur.execute(
        sql.SQL(
            "create table {} (like {} including defaults, primary key ({}))"
            " partition by range (seq)"
        ).format(table, legacy, ids(RECORD_KEY))
    )
    if total:
        cur.execute(sql.SQL("alter table {} alter column seq set not null").format(legacy))
        cur.execute(sql.SQL("alter table {} add primary key ({})").format(legacy, ids(RECORD_KEY)))
        cur.execute(
            sql.SQL("alter table {} attach partition {} for values from (%s) to (%s)").format(
                table, legacy
            ),
            (low, high + 1),
        )
    else:
        cur.execute(sql.SQL("drop table {}").format(legacy))
    staged = _staged_batches(cur, pipeline, sink)
    return AppendMigration(
        f"{sink.schema}.{sink.table}", total, (low, high) if total else None, staged
    )


def _staged_batches(cur, pipeline: str, sink: PostgresSink) -> int:
    """Give each staged, uncommitted batch its attempt table from the stage table's valid rows
    (what its commit would have copied), indexed as process seals one."""
    batches = staged_batches(cur, pipeline)
    users = [c.name for c in sink.tables.stored_columns(cur)]
    for txid, seq, attempt in batches:
        t = Attempt(pipeline, txid, seq, attempt)
        sink.create_stage(cur, t)
        cur.execute(
            sql.SQL(
                'insert into {part} (topic, partition, epoch, "offset", seq, txid{cols}) {q}'
            ).format(
                part=sink.tables.ident(sink.attempt_table(seq, attempt)),
                cols=more(users),
                q=sink.tables.staged_valid(
                    sql.SQL('s.topic, s.partition, r.epoch, s."offset", %s, s.txid{}').format(
                        more(users, "s")
                    )
                ),
            ),
            (seq, pipeline, txid, attempt),
        )
        cur.execute(
            sql.SQL("delete from {} where txid = %s and attempt = %s and error is null").format(
                sink.tables.ident(sink.stage_table)
            ),
            (txid, attempt),
        )
        sink.seal_stage(cur, t)
    return len(batches)
