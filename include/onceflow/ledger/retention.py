"""Retention: a pipeline's ledger keeps the per-partition rows of its newest batches only
(docs/PROTOCOL.md "Retention"; the pipeline's keys: onceflow.config.retention).

The rule, stated here once:

- The boundary is the lowest of: the seq of the `ledger_retain_batches`-th newest committed
  batch; the lowest seq committed within `ledger_retain_hours`, if set; the lowest seq not
  closed (committed batches form a prefix of seq order, so every batch below the boundary
  is committed or abandoned). Every batch from the boundary on is kept whole.
- A batch below it is pruned: its ranges, range reads, loss events, stage parts and reader
  schemas are deleted, which are what grows with partitions x batches. Its batches row
  stays, marked `pruned_at` (seq, state, counts, times: a few hundred bytes), so that the
  audit still counts what the sink holds of it, and plan and process refuse it by name
  (`refuse_pruned`: PrunedTxidError). A pruned txid is never re-run: its ranges are gone.
- Dead letters have their own retention: those of batches committed more than
  `dead_letters_retain_days` ago are deleted, and the batch is marked
  `dead_letters_pruned_at` (the audit then counts only its published rows).

Pruning runs in one transaction holding the pipeline's commit lock (ledger.ordering), so no
commit or reset of the pipeline interleaves: from the commit task every `ledger_prune_every`
committed batches, from the maintain task, and as `onceflow prune`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

from onceflow.errors import PrunedTxidError
from onceflow.ledger.contracts import Pipeline
from onceflow.ledger.db import LedgerLike, transaction
from onceflow.ledger.ordering import lock_commits
from onceflow.ledger.states import BatchState

log = logging.getLogger("onceflow.ledger")

# The ledger's rows per partition (or part) of a batch: what pruning deletes.
PER_BATCH_TABLES = ("range_reads", "ranges", "loss_events", "stage_parts", "reader_schemas")


@dataclass(frozen=True)
class PruneReport:
    pipeline: str
    kept_from_seq: int | None  # the lowest seq whose rows are kept (None: no batch yet)
    batches_pruned: int
    rows_deleted: dict[str, int]  # per table
    dead_letters_deleted: int
    dry_run: bool
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)


def boundary(cur, cfg: Pipeline) -> int | None:
    """The lowest seq retention keeps (the module's rule), None for a pipeline with no batch."""
    cur.execute("select min(seq), max(seq) from onceflow.batches where pipeline = %s", (cfg.name,))
    lowest, highest = cur.fetchone()
    if lowest is None:
        return None
    keep = cfg.retention
    if not keep.batches:
        return lowest
    cur.execute(
        "select seq from onceflow.batches where pipeline = %s and state = %s"
        " order by seq desc offset %s limit 1",
        (cfg.name, BatchState.COMMITTED, keep.batches - 1),
    )
    row = cur.fetchone()
    bound = row[0] if row else lowest
    if keep.hours is not None:
        cur.execute(
            "select min(seq) from onceflow.batches where pipeline = %s and state = %s"
            " and committed_at >= now() - make_interval(secs => %s)",
            (cfg.name, BatchState.COMMITTED, keep.hours * 3600),
        )
        recent = cur.fetchone()[0]
        bound = min(bound, highest + 1 if recent is None else recent)
    cur.execute(
        "select min(seq) from onceflow.batches where pipeline = %s and state <> all(%s)",
        (cfg.name, [BatchState.COMMITTED.value, BatchState.ABANDONED.value]),
    )
    open_seq = cur.fetchone()[0]
    return bound if open_seq is None else min(bound, open_seq)


def prune(dsn: LedgerLike, cfg: Pipeline, dry_run: bool = False) -> PruneReport:
    """Prune the pipeline's ledger by its retention (the module's rule), under its commit
    lock; with `dry_run`, count what it would delete and delete nothing."""
    started = time.monotonic()
    with transaction(dsn) as cur:
        lock_commits(cur, cfg.name)
        cur.execute("savepoint prune")
        kept_from = boundary(cur, cfg)
        deleted: dict[str, int] = {}
        pruned = 0
        if kept_from is not None:
            gone = (
                "select txid from onceflow.batches where pipeline = %(p)s and seq < %(b)s"
                " and pruned_at is null"
            )
            args = {"p": cfg.name, "b": kept_from}
            for table in PER_BATCH_TABLES:
                cur.execute(
                    f"delete from onceflow.{table} where pipeline = %(p)s and txid in ({gone})",
                    args,
                )
                deleted[table] = cur.rowcount
            cur.execute(
                "update onceflow.batches set pruned_at = now() where pipeline = %(p)s"
                " and seq < %(b)s and pruned_at is null",
                args,
            )
            pruned = cur.rowcount
        dead = _prune_dead_letters(cur, cfg)
        cur.execute("rollback to savepoint prune" if dry_run else "release savepoint prune")
    report = PruneReport(
        cfg.name, kept_from, pruned, deleted, dead, dry_run, time.monotonic() - started
    )
    log.info(
        "onceflow prune pipeline=%s%s: %d batch(es) below seq %s pruned (%s), %d dead "
        "letter(s) deleted, %.2f s",
        cfg.name,
        " (dry run: nothing deleted)" if dry_run else "",
        pruned,
        kept_from,
        ", ".join(f"{n} {table}" for table, n in deleted.items()) or "nothing",
        dead,
        report.seconds,
    )
    return report


def _prune_dead_letters(cur, cfg: Pipeline) -> int:
    """Delete the published dead letters of batches committed more than the pipeline's
    `dead_letters_retain_days` ago, marking those batches; how many were deleted."""
    days = cfg.retention.dead_letter_days
    if days is None:
        return 0
    old = (
        "select txid from onceflow.batches where pipeline = %(p)s and state = %(state)s"
        " and dead_letters_pruned_at is null"
        " and committed_at < now() - make_interval(secs => %(secs)s)"
    )
    args = {"p": cfg.name, "state": BatchState.COMMITTED, "secs": days * 86400}
    cur.execute(
        f"delete from onceflow.dead_letters where pipeline = %(p)s and txid in ({old})", args
    )
    deleted = cur.rowcount
    cur.execute(
        f"update onceflow.batches set dead_letters_pruned_at = now() where pipeline = %(p)s"
        f" and txid in ({old})",
        args,
    )
    return deleted


def refuse_pruned(cur, pipeline: str, txid: str) -> None:
    """PrunedTxidError if the txid's rows were pruned: it can never be planned or processed
    again (a replay of its ranges would read none)."""
    cur.execute(
        "select seq, pruned_at is not null from onceflow.batches where pipeline = %s and txid = %s",
        (pipeline, txid),
    )
    row = cur.fetchone()
    if row is None or not row[1]:
        return
    cur.execute(
        "select min(seq) from onceflow.batches where pipeline = %s and pruned_at is null",
        (pipeline,),
    )
    raise PrunedTxidError(pipeline, txid, row[0], cur.fetchone()[0])


def require_kept(dsn: LedgerLike, pipeline: str, txid: str) -> None:
    """refuse_pruned in a transaction of its own: for a re-run's command, before it clears
    anything."""
    with transaction(dsn) as cur:
        refuse_pruned(cur, pipeline, txid)
