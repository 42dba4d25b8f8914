"""A txid's batch as the ledger records it: its seq, state and ranges, read back."""

from __future__ import annotations

from dataclasses import dataclass, field

from onceflow.errors import UnknownTxidError
from onceflow.ledger.contracts import Pipeline, StagedOutput
from onceflow.ledger.db import LedgerLike, transaction
from onceflow.ledger.states import BatchState
from onceflow.ranges import LossEvent, OffsetRange


@dataclass(frozen=True)
class Batch:
    txid: str
    seq: int
    state: BatchState
    ranges: list[OffsetRange]
    losses: list[LossEvent] = field(default_factory=list)
    replayed: bool = False  # True when plan found the txid already in the ledger


def ensure_pipeline(dsn: LedgerLike, cfg: Pipeline, sink: StagedOutput) -> None:
    """The pipeline's ledger row and its sink's tables, created if missing."""
    with transaction(dsn) as cur:
        cur.execute(
            "insert into onceflow.pipelines (name) values (%s) on conflict do nothing", (cfg.name,)
        )
        sink.ensure(cur)


def read_ranges(cur, pipeline: str, txid: str) -> list[OffsetRange]:
    cur.execute(
        "select topic, partition, from_offset, until_offset from onceflow.ranges"
        " where pipeline = %s and txid = %s order by topic, partition",
        (pipeline, txid),
    )
    return [OffsetRange(*r) for r in cur.fetchall()]


def range_epochs(cur, pipeline: str, txid: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> epoch of the txid's ranges."""
    cur.execute(
        "select topic, partition, epoch from onceflow.ranges where pipeline = %s and txid = %s",
        (pipeline, txid),
    )
    return {(t, p): e for t, p, e in cur.fetchall()}


def read_losses(cur, pipeline: str, txid: str) -> list[LossEvent]:
    cur.execute(
        "select topic, partition, from_offset, until_offset from onceflow.loss_events"
        " where pipeline = %s and txid = %s order by topic, partition",
        (pipeline, txid),
    )
    return [LossEvent(*r) for r in cur.fetchall()]


def read_batch(cur, pipeline: str, txid: str, *, replayed: bool = False) -> Batch | None:
    cur.execute(
        "select seq, state from onceflow.batches where pipeline = %s and txid = %s",
        (pipeline, txid),
    )
    row = cur.fetchone()
    if not row:
        return None
    return Batch(
        txid,
        row[0],
        BatchState(row[1]),
        read_ranges(cur, pipeline, txid),
        read_losses(cur, pipeline, txid),
        replayed=replayed,
    )


def get_batch(dsn: LedgerLike, pipeline: str, txid: str) -> Batch:
    with transaction(dsn) as cur:
        batch = read_batch(cur, pipeline, txid)
    if batch is None:
        raise UnknownTxidError(pipeline, txid, "plan has not run for it")
    return batch


def record_error(dsn: LedgerLike, pipeline: str, txid: str, error: str) -> None:
    """Keep the last failure of a txid's task, for the operator (UI, CLI, metrics)."""
    with transaction(dsn) as cur:
        cur.execute(
            "update onceflow.batches set last_error = %s where pipeline = %s and txid = %s",
            (error[:4000], pipeline, txid),
        )
