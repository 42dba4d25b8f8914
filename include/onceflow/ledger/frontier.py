"""Where a pipeline's next plan starts: each partition's offset after the last planned batch.

Plan starts each known partition where the batch of the highest seq ended, or where a reset
recorded after that batch moved it (ledger.resets). Plan reads it under the pipeline's lock;
the `on_records` watcher reads it to count the records no batch has planned yet.
"""

from __future__ import annotations

from onceflow.ledger.batches import read_ranges
from onceflow.ranges import TopicPartition


def last_batch(cur, pipeline: str) -> tuple[str, int] | None:
    """(txid, seq) of the pipeline's highest seq, None before its first plan."""
    cur.execute(
        "select txid, seq from onceflow.batches where pipeline = %s order by seq desc limit 1",
        (pipeline,),
    )
    row = cur.fetchone()
    return (row[0], row[1]) if row else None


def next_plan_starts(cur, pipeline: str, last: tuple[str, int] | None) -> dict[TopicPartition, int]:
    """Per partition the ledger knows: where the next plan after `last` (last_batch) starts."""
    starts: dict[TopicPartition, int] = {}
    if last:
        starts = {r.tp: r.until_offset for r in read_ranges(cur, pipeline, last[0])}
    cur.execute(
        "select distinct on (topic, partition) topic, partition, new_offset from onceflow.resets"
        " where pipeline = %s and after_seq >= %s order by topic, partition, id desc",
        (pipeline, last[1] if last else 0),
    )
    for topic, partition, new_offset in cur.fetchall():
        starts[(topic, partition)] = new_offset
    return starts
