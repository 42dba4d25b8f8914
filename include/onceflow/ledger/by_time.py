"""Which committed batches hold records at or after a point in time: what `onceflow backfill
--since T` re-runs.

Per partition, Kafka's ListOffsets by time gives the first offset whose record's time is at
or after T; every record before it is older. A committed range of the partition's current
epoch holds such records when it reaches past that offset. Ranges of an earlier epoch (before
a reset) are offsets of a log the broker no longer serves, and are never chosen.
"""

from __future__ import annotations

from collections.abc import Mapping

from onceflow.ledger.db import LedgerLike, transaction
from onceflow.ledger.states import BatchState
from onceflow.ranges import TopicPartition


def committed_from(
    dsn: LedgerLike, pipeline: str, first_offsets: Mapping[TopicPartition, int]
) -> list[tuple[int, str]]:
    """(seq, txid) of each committed batch, in seq order, with a non-empty range of the
    current epoch that reaches `first_offsets` of its partition."""
    tps = sorted(first_offsets)
    with transaction(dsn) as cur:
        cur.execute(
            "select distinct b.seq, b.txid from onceflow.batches b"
            " join onceflow.ranges r on r.pipeline = b.pipeline and r.txid = b.txid"
            " join onceflow.offsets o on o.pipeline = r.pipeline and o.topic = r.topic"
            "  and o.partition = r.partition and o.epoch = r.epoch"
            " join unnest(%s::text[], %s::int[], %s::bigint[]) f(topic, partition, first_offset)"
            "  on f.topic = r.topic and f.partition = r.partition"
            " where b.pipeline = %s and b.state = %s"
            "  and r.until_offset > greatest(r.from_offset, f.first_offset)"
            " order by b.seq",
            (
                [t for t, _ in tps],
                [p for _, p in tps],
                [first_offsets[tp] for tp in tps],
                pipeline,
                BatchState.COMMITTED,
            ),
        )
        return [(seq, txid) for seq, txid in cur.fetchall()]
