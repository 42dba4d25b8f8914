"""Committed offsets: each partition's moves forward by exactly one range per commit.

The compare-and-set below is the rule that makes a range impossible to apply twice or out
of order, whatever retries, zombies or crashes do around it: a partition's committed
offset moves from the range's from_offset to its until_offset, or the commit fails.
"""

from __future__ import annotations

from onceflow.errors import OffsetConflictError

# The ranges of a txid as its commit moves them: each partition from where the range starts
# (or its loss event does) to its until_offset, with the print of the last data record the
# staged attempt read in it, if it read one. Planned to stay linear in the ranges whatever
# the statistics say: a fresh pipeline's value is in no statistics, so the planner takes its
# rows for one. Each range's loss event and read are looked up by their whole primary key,
# in subqueries the planner keeps apart (the read's `limit`; a join costed on stale
# statistics scanned every read of the txid for each range: 3.7-4.7 s at 10,000
# partitions); the staged attempt is looked up once, not per range; and the update
# below finds each range's partition by its whole key from the range's row, never by the
# pipeline alone (with both sides taken for one row, it scanned every range for each
# partition of the pipeline: 14.3-17.9 s at 10,000 partitions, bench/NOTES.md session 57).
_MOVES = (
    "select r.pipeline, r.topic, r.partition,"
    " coalesce((select l.from_offset from onceflow.loss_events l where l.pipeline = r.pipeline"
    "  and l.txid = r.txid and l.topic = r.topic and l.partition = r.partition),"
    "  r.from_offset) as expected,"
    " r.until_offset, rr.last_offset, rr.last_hash"
    " from onceflow.ranges r"
    " left join lateral (select x.last_offset, x.last_hash from onceflow.range_reads x"
    "  where x.pipeline = r.pipeline and x.txid = r.txid and x.topic = r.topic"
    "  and x.partition = r.partition and x.attempt = (select b.staged_attempt"
    "  from onceflow.batches b where b.pipeline = %(pipeline)s and b.txid = %(txid)s)"
    "  limit 1) rr on true"
    " where r.pipeline = %(pipeline)s and r.txid = %(txid)s"
)


def advance_offsets(cur, pipeline: str, txid: str, seq: int) -> None:
    """Move each partition's committed offset from the range's from_offset (or its loss
    event's start) to its until_offset by compare-and-set, in the commit's transaction and
    in one statement, whatever the number of partitions. Unless the statement moved as many
    partitions as the txid has ranges, it is undone and OffsetConflictError names the first
    partition that was not where its range starts. The print of the last data record the
    staged attempt read in the range (if it read one) becomes the partition's, for the next
    plan's log_identity check."""
    args = {"pipeline": pipeline, "txid": txid}
    cur.execute("savepoint advance_offsets")
    cur.execute(
        f"with moves as ({_MOVES}),"
        " moved as ("
        "  update onceflow.offsets o set committed_offset = m.until_offset, updated_at = now(),"
        "   print_offset = coalesce(m.last_offset, o.print_offset),"
        "   print_hash = coalesce(m.last_hash, o.print_hash)"
        "  from moves m where o.pipeline = m.pipeline and o.topic = m.topic"
        "   and o.partition = m.partition and o.committed_offset = m.expected"
        "  returning 1)"
        " select (select count(*) from moves), (select count(*) from moved)",
        args,
    )
    ranges, moved = cur.fetchone()
    if moved == ranges:
        cur.execute("release savepoint advance_offsets")
        return
    cur.execute("rollback to savepoint advance_offsets")
    cur.execute(
        f"with moves as ({_MOVES}) select m.topic, m.partition, m.expected, o.committed_offset"
        " from moves m left join onceflow.offsets o on o.pipeline = %(pipeline)s"
        "  and o.topic = m.topic and o.partition = m.partition"
        " where o.committed_offset is distinct from m.expected"
        " order by m.topic, m.partition limit 1",
        args,
    )
    topic, partition, expected, actual = cur.fetchone()
    raise OffsetConflictError(pipeline, txid, seq, topic, partition, expected, actual)
