"""What the audit reads of the ledger: one pipeline's batches, ranges, offsets, loss events,
resets, range digests and dead letters, as plain rows, read in the caller's transaction
(the audit's one repeatable-read snapshot). The rules over them live in `onceflow.audit`."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.ledger.states import BatchState


@dataclass(frozen=True)
class BatchRow:
    txid: str
    seq: int
    state: str
    records_read: int | None
    records_out: int | None = None
    # onceflow.ledger.retention: its ranges were pruned; its dead letters were
    pruned: bool = False
    dead_pruned: bool = False


@dataclass(frozen=True)
class RangeRow:
    txid: str
    seq: int
    topic: str
    partition: int
    from_offset: int
    until_offset: int
    epoch: int = 0


@dataclass(frozen=True)
class LossRow:
    topic: str
    partition: int
    from_offset: int
    until_offset: int


@dataclass(frozen=True)
class ResetRow:
    after_seq: int
    topic: str
    partition: int
    new_offset: int


@dataclass(frozen=True)
class LedgerRows:
    batches: list[BatchRow]
    ranges: list[RangeRow]  # in seq order, then topic and partition
    # (topic, partition) -> (start_offset, committed_offset), and -> the log's epoch
    offsets: dict[tuple[str, int], tuple[int, int | None]]
    epochs: dict[tuple[str, int], int]
    losses: list[LossRow]
    resets: list[ResetRow]  # in the order they were made
    # (txid, topic, partition) -> {chunk: digest} of what the published attempt read
    recorded: dict[tuple[str, str, int], dict[int, int]]
    dead: dict[str, int]  # txid -> dead letters


def _rows(cur, query: str, params: tuple) -> list[tuple]:
    cur.execute(query, params)
    return cur.fetchall()


def read_ledger_rows(cur, pipeline: str) -> LedgerRows:
    p = (pipeline,)
    offset_rows = _rows(
        cur,
        "select topic, partition, start_offset, committed_offset, epoch from onceflow.offsets"
        " where pipeline = %s",
        p,
    )
    return LedgerRows(
        batches=[
            BatchRow(*r)
            for r in _rows(
                cur,
                "select txid, seq, state, records_read, records_out, pruned_at is not null,"
                " dead_letters_pruned_at is not null from onceflow.batches"
                " where pipeline = %s order by seq",
                p,
            )
        ],
        ranges=[
            RangeRow(*r)
            for r in _rows(
                cur,
                "select r.txid, b.seq, r.topic, r.partition, r.from_offset, r.until_offset, r.epoch"
                " from onceflow.ranges r join onceflow.batches b using (pipeline, txid)"
                " where r.pipeline = %s order by b.seq, r.topic, r.partition",
                p,
            )
        ],
        offsets={(t, q): (s, c) for t, q, s, c, _ in offset_rows},
        epochs={(t, q): e for t, q, _, _, e in offset_rows},
        losses=[
            LossRow(*r)
            for r in _rows(
                cur,
                "select topic, partition, from_offset, until_offset from onceflow.loss_events"
                " where pipeline = %s",
                p,
            )
        ],
        resets=[
            ResetRow(*r)
            for r in _rows(
                cur,
                "select after_seq, topic, partition, new_offset from onceflow.resets"
                " where pipeline = %s order by id",
                p,
            )
        ],
        recorded={
            (txid, topic, partition): {int(c): int(v) for c, v in chunks}
            for txid, topic, partition, chunks in _rows(
                cur,
                "select rr.txid, rr.topic, rr.partition, rr.chunks from onceflow.range_reads rr"
                " join onceflow.batches b on b.pipeline = rr.pipeline and b.txid = rr.txid"
                "  and b.published_attempt = rr.attempt"
                " where rr.pipeline = %s and b.state = %s",
                (pipeline, BatchState.COMMITTED),
            )
        },
        dead=dict(
            _rows(
                cur,
                "select txid, count(*) from onceflow.dead_letters where pipeline = %s"
                " group by txid",
                p,
            )
        ),
    )
