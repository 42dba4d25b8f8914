"""Committed offsets: each partition's moves forward by exactly one range per commit.

The compare-and-set below is the rule that makes a range impossible to apply twice or out
of order, whatever retries, zombies or crashes do around it: a partition's committed
offset moves from the range's from_offset to its until_offset, or the commit fails.
"""

from __future__ import annotations

from onceflow.errors import OffsetConflictError


def advance_offsets(cur, pipeline: str, txid: str, seq: int) -> None:
    """Move each partition's committed offset from the range's from_offset (or its loss
    event's start) to its until_offset by compare-and-set, in the commit's transaction;
    OffsetConflictError if it is not there. The print of the last data record the staged
    attempt read in the range (if it read one) becomes the partition's, for the next plan's
    log_identity check."""
    cur.execute(
        "select r.topic, r.partition, r.from_offset, r.until_offset, l.from_offset,"
        " rr.last_offset, rr.last_hash"
        " from onceflow.ranges r"
        " join onceflow.batches b using (pipeline, txid)"
        " left join onceflow.loss_events l using (pipeline, txid, topic, partition)"
        " left join onceflow.range_reads rr on rr.pipeline = r.pipeline and rr.txid = r.txid"
        "  and rr.attempt = b.staged_attempt and rr.topic = r.topic and rr.partition = r.partition"
        " where r.pipeline = %s and r.txid = %s order by r.topic, r.partition",
        (pipeline, txid),
    )
    for topic, partition, from_offset, until_offset, loss_from, p_off, p_hash in cur.fetchall():
        expected = from_offset if loss_from is None else loss_from
        cur.execute(
            "update onceflow.offsets set committed_offset = %s, updated_at = now(),"
            " print_offset = coalesce(%s, print_offset), print_hash = coalesce(%s, print_hash)"
            " where pipeline = %s and topic = %s and partition = %s and committed_offset = %s",
            (until_offset, p_off, p_hash, pipeline, topic, partition, expected),
        )
        if cur.rowcount != 1:
            cur.execute(
                "select committed_offset from onceflow.offsets"
                " where pipeline = %s and topic = %s and partition = %s",
                (pipeline, topic, partition),
            )
            actual = cur.fetchone()
            raise OffsetConflictError(
                pipeline, txid, seq, topic, partition, expected, actual[0] if actual else None
            )
