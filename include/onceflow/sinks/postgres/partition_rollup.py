"""Maintenance of a table partitioned by seq (`onceflow maintain`, the DAG's `maintain` task):
an append table's or an upsert table's versions' one-batch partitions rolled up into
partitions of a range of seqs.

Each committed batch is one partition of the table (sinks.postgres.seq_partitions): a pipeline
that runs every minute adds 1,440 a day, and PostgreSQL plans slower the more partitions a
query cannot prune. The roll-up, in the caller's transaction, which holds the pipeline's
commit lock (no commit or re-run of the pipeline interleaves), copies each run of
consecutive one-batch partitions (up to ROLLUP_ROWS rows each, the newest KEEP_NEWEST
left alone, so that a re-run of a recent batch still swaps its partition) into one table
over their seqs, builds the table's indexes on it, drops them and attaches it in their
place. Readers see the same rows before and after; the detach and attach wait for the
queries reading the table and hold new ones back until the transaction ends.

A re-run of a batch inside a rolled-up range replaces its rows there
(sinks.postgres.seq_partitions: a copy, as re-runs are rare).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from psycopg2 import sql

from onceflow.ledger.published import committed_batches
from onceflow.sinks.postgres.columns import ids

# a rolled-up partition's rows at most, and how many of the newest one-batch partitions stay
ROLLUP_ROWS = 10_000_000
KEEP_NEWEST = 10
_BOUND = re.compile(r"FOR VALUES FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)")


@dataclass(frozen=True)
class Partition:
    name: str
    low: int  # the first seq it holds
    high: int  # the seq after its last
    rows: int


@dataclass(frozen=True)
class Rollup:
    before: int  # partitions
    after: int
    merged: int  # one-batch partitions rolled up...
    written: int  # ...into this many


def partitions(cur, sink, pipeline: str) -> list[Partition]:
    """The partitioned table's partitions by seq, with the rows of the committed batch a
    one-batch partition holds (the ledger's count: nothing is scanned; 0 for a wider one,
    which is never rolled up again)."""
    cur.execute(
        "select c.relname, pg_get_expr(c.relpartbound, c.oid) from pg_inherits i"
        " join pg_class c on c.oid = i.inhrelid"
        " where i.inhparent = to_regclass(format('%%I.%%I', %s::text, %s::text))",
        (sink.schema, sink.partitioned_table),
    )
    bounds = cur.fetchall()
    rows = {seq: n or 0 for seq, (_, _, n) in committed_batches(cur, pipeline).items()}
    out = []
    for name, bound in bounds:
        match = _BOUND.search(bound or "")
        if match is None:  # not a range of seqs (someone else's): never rolled up
            continue
        low, high = int(match.group(1)), int(match.group(2))
        out.append(Partition(name, low, high, rows.get(low, 0) if high - low == 1 else 0))
    return sorted(out, key=lambda p: p.low)


def runs(parts: list[Partition], keep: int, limit: int) -> list[list[Partition]]:
    """The runs of consecutive one-batch partitions to roll up (each of two or more, at
    most `limit` rows), the newest `keep` one-batch partitions left alone. A wider partition
    ends a run: it is rolled up already."""
    single = [p for p in parts if p.high - p.low == 1]
    kept = {p.name for p in single[len(single) - keep :]} if keep else set()
    out: list[list[Partition]] = []
    run: list[Partition] = []
    for p in parts:
        if p.high - p.low != 1 or p.name in kept or sum(q.rows for q in run) + p.rows > limit:
            if len(run) > 1:
                out.append(run)
            run = []
            if p.high - p.low != 1 or p.name in kept:
                continue
        run.append(p)
    if len(run) > 1:
        out.append(run)
    return out


def roll_up(
    cur,
    sink,
    pipeline: str,
    keep: int | None = None,
    limit: int | None = None,
    dry_run: bool = False,
) -> Rollup:
    """Roll up the partitioned table's one-batch partitions (the module says how); `keep` and
    `limit` default to KEEP_NEWEST and ROLLUP_ROWS."""
    parts = partitions(cur, sink, pipeline)
    todo = runs(
        parts, KEEP_NEWEST if keep is None else keep, ROLLUP_ROWS if limit is None else limit
    )
    merged = sum(len(r) for r in todo)
    if not dry_run:
        columns = ids(n for n, _, _ in sink.tables.table_columns(cur, sink.partitioned_table))
        for run in todo:
            _roll_up_run(cur, sink, run, columns)
    return Rollup(len(parts), len(parts) - merged + len(todo), merged, len(todo))


def _roll_up_run(cur, sink, run: list[Partition], columns: sql.Composable) -> None:
    low, high = run[0].low, run[-1].high
    prefix = sink.mode.part_prefix
    name = sink.tables.part_name(f"{prefix}{low}_to_{high - 1}", f"of seqs {low} to {high - 1}")
    table, new = sink.tables.ident(sink.partitioned_table), sink.tables.ident(name)
    cur.execute(
        sql.SQL(
            "create table {new} (like {table} including defaults, check (seq >= %s and seq < %s))"
        ).format(new=new, table=table),
        (low, high),
    )
    for p in run:
        cur.execute(
            sql.SQL("insert into {new} ({cols}) select {cols} from {old}").format(
                new=new, cols=columns, old=sink.tables.ident(p.name)
            )
        )
    sink.mode.build_indexes(cur, name)
    for p in run:
        cur.execute(sql.SQL("drop table {}").format(sink.tables.ident(p.name)))
    cur.execute(
        sql.SQL("alter table {} attach partition {} for values from (%s) to (%s)").format(
            table, new
        ),
        (low, high),
    )
