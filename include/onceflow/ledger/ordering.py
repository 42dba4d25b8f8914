"""Commit order: a txid commits only after every lower seq of its pipeline is closed.

A closed batch (committed, or abandoned by a reset) never reopens, so the lowest seq that
is not closed is the one batch every commit above it waits for (`lowest_open`, the one
query behind the commit, its trigger, the CLI, the UI and the metrics). Commits of a
pipeline, and reset-offsets, also hold the pipeline's commit lock for their whole
transaction, so that no two of them interleave.

The transaction that closes a batch announces it (`announce_closed`, PostgreSQL's NOTIFY,
delivered when that transaction commits), so that a commit waiting in its task for seq−1
(`await_predecessor`) looks again the moment it may go instead of polling.
"""

from __future__ import annotations

import select
import time
from dataclasses import dataclass

import psycopg2

from onceflow.errors import AbandonedTxidError, CommitOrderError, NotStagedError, UnknownTxidError
from onceflow.ledger.db import LedgerLike, connect, transaction
from onceflow.ledger.states import CLOSED, BatchState

# The advisory lock key of a pipeline's commits (one parameter: the pipeline's name).
COMMIT_LOCK_KEY = "hashtextextended('onceflow.commit:' || %s, 0)"


# The NOTIFY channel of batches closing; the payload is the pipeline's name.
CLOSED_CHANNEL = "onceflow_batch_closed"


def lock_commits(cur, pipeline: str) -> None:
    """Hold the pipeline's commit lock until the caller's transaction ends."""
    cur.execute(f"select pg_advisory_xact_lock({COMMIT_LOCK_KEY})", (pipeline,))


@dataclass(frozen=True)
class Blocker:
    """The batch that commits wait for: the lowest seq whose batch is not closed."""

    txid: str
    seq: int
    state: BatchState
    attempt: int
    last_error: str | None
    waiting: int  # batches above it, less abandoned ones (they never commit)


def lowest_open(cur, pipeline: str) -> Blocker | None:
    cur.execute(
        """
        select b.txid, b.seq, b.state, b.attempt, b.last_error,
               (select count(*) from onceflow.batches w
                 where w.pipeline = b.pipeline and w.seq > b.seq and w.state <> %s)
        from onceflow.batches b
        where b.pipeline = %s and b.state not in %s
        order by b.seq limit 1
        """,
        (BatchState.ABANDONED, pipeline, CLOSED),
    )
    row = cur.fetchone()
    return None if row is None else Blocker(row[0], row[1], BatchState(row[2]), *row[3:])


def blocking_predecessor(dsn: LedgerLike, pipeline: str, txid: str) -> Blocker | None:
    """The batch txid's commit waits for, or None if its commit may go."""
    with transaction(dsn) as cur:
        cur.execute(
            "select seq from onceflow.batches where pipeline = %s and txid = %s", (pipeline, txid)
        )
        row = cur.fetchone()
        if not row:
            raise UnknownTxidError(pipeline, txid)
        blocker = lowest_open(cur, pipeline)
    return blocker if blocker is not None and blocker.seq < row[0] else None


def announce_closed(cur, pipeline: str) -> None:
    """Tell the pipeline's waiting commits that a batch closes, once the caller's
    transaction commits (nothing is said if it rolls back)."""
    cur.execute("select pg_notify(%s, %s)", (CLOSED_CHANNEL, pipeline))


def await_predecessor(
    dsn: LedgerLike, pipeline: str, txid: str, seconds: float, wait: Blocker
) -> Blocker | None:
    """`blocking_predecessor` (which found `wait`), looked at again each time a batch of the
    pipeline closes, for up to `seconds`: None as soon as txid's commit may go, else the
    batch it still waits for. The first look follows LISTEN, so a close between the two is
    not missed. A ledger that cannot be reached ends the wait with the batch last seen: the
    caller defers, and its trigger keeps looking while the ledger is away."""
    deadline = time.monotonic() + seconds
    try:
        conn = connect(dsn)
    except psycopg2.OperationalError:
        return wait
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"listen {CLOSED_CHANNEL}")
        while True:
            wait = blocking_predecessor(dsn, pipeline, txid)
            if wait is None or deadline <= time.monotonic():
                return wait
            woken = False
            while not woken and (left := deadline - time.monotonic()) > 0:
                if select.select([conn], [], [], left)[0]:
                    conn.poll()
                    woken = any(n.payload == pipeline for n in conn.notifies)
                    conn.notifies.clear()
    except (psycopg2.OperationalError, psycopg2.InterfaceError):
        return wait
    finally:
        conn.close()


def commit_blocker(dsn: LedgerLike, pipeline: str) -> Blocker | None:
    """The batch the pipeline's commits wait for, if any batch waits for it."""
    with transaction(dsn) as cur:
        blocker = lowest_open(cur, pipeline)
    return blocker if blocker is not None and blocker.waiting else None


@dataclass(frozen=True)
class CommitRow:
    """A batch as its commit finds it (commit_row)."""

    seq: int
    state: BatchState
    staged_attempt: int
    published_attempt: int | None
    records_out: int | None
    records_dead: int | None

    @property
    def done(self) -> bool:
        """Committed with the staged attempt's output: committing again changes nothing."""
        return self.state == BatchState.COMMITTED and self.staged_attempt == self.published_attempt

    @property
    def republish(self) -> bool:
        """Committed, and a newer attempt was staged since (a re-run): it replaces the
        published output; the offsets, already past it, stay."""
        return self.state == BatchState.COMMITTED and self.staged_attempt != self.published_attempt


def commit_row(cur, pipeline: str, txid: str) -> CommitRow:
    """The txid's batch row, locked for the caller's transaction, if the rules let it commit:
    committed already (CommitRow.done, .republish), or staged with every lower seq closed;
    otherwise the error saying why not (unknown, abandoned, not staged, CommitOrderError
    naming the batch it waits for)."""
    cur.execute(
        "select seq, state, staged_attempt, published_attempt, records_out, records_dead"
        " from onceflow.batches where pipeline = %s and txid = %s for update",
        (pipeline, txid),
    )
    found = cur.fetchone()
    if not found:
        raise UnknownTxidError(pipeline, txid)
    row = CommitRow(found[0], BatchState(found[1]), *found[2:])
    if row.state == BatchState.COMMITTED:
        return row
    if row.state == BatchState.ABANDONED:
        raise AbandonedTxidError(pipeline, txid)
    if row.state != BatchState.STAGED:
        raise NotStagedError(pipeline, txid, row.seq, row.state)
    blocker = lowest_open(cur, pipeline)
    if blocker is not None and blocker.seq < row.seq:
        raise CommitOrderError(pipeline, txid, row.seq, blocker.txid, blocker.seq, blocker.state)
    return row
