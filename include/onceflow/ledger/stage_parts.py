"""The part fence's rows (onceflow.staging.fence states the rule): one row per part an
attempt staged, claimed in the transaction that stages the part, then holding what the part
staged. mark_staged (ledger.fencing) sums them; a sink that keeps no hash of its valid rows
takes their checksum from here, one whose published rows come from an attempt's own table
their valid count.
"""

from __future__ import annotations

from onceflow.ledger.attempt import Attempt


def claim_part(cur, pipeline: str, txid: str, attempt: int, part: int) -> bool:
    """Claim the part for the attempt; False when another task of it claimed the part first
    (blocks while that task's transaction is open, then sees its outcome)."""
    cur.execute(
        "insert into onceflow.stage_parts (pipeline, txid, attempt, part, rows)"
        " values (%s, %s, %s, %s, 0) on conflict do nothing",
        (pipeline, txid, attempt, part),
    )
    return cur.rowcount == 1


def record_part(
    cur,
    pipeline: str,
    txid: str,
    attempt: int,
    part: int,
    *,
    rows: int,
    valid: int,
    dead: int,
    checksum: int | None,
) -> None:
    """What the claimed part staged: rows, the records its valid rows account for, dead
    letters and the checksum of its rows."""
    cur.execute(
        "update onceflow.stage_parts set rows = %s, valid = %s, dead = %s, checksum = %s"
        " where pipeline = %s and txid = %s and attempt = %s and part = %s",
        (rows, valid, dead, checksum, pipeline, txid, attempt, part),
    )


def parts_checksum(cur, t: Attempt) -> str:
    """The sum of the attempt's part checksums, as text (exact, order-independent)."""
    cur.execute(
        "select coalesce(sum(checksum), 0)::text from onceflow.stage_parts"
        " where pipeline = %s and txid = %s and attempt = %s",
        (t.pipeline, t.txid, t.attempt),
    )
    return cur.fetchone()[0]


def parts_valid(cur, t: Attempt) -> int | None:
    """The records the attempt's valid rows account for, summed over its parts; None when a
    part holds no count (an attempt staged before the parts counted: count its rows)."""
    cur.execute(
        "select sum(valid), count(*) = 0 or bool_or(valid is null)"
        " from onceflow.stage_parts where pipeline = %s and txid = %s and attempt = %s",
        (t.pipeline, t.txid, t.attempt),
    )
    valid, uncounted = cur.fetchone()
    return None if uncounted else int(valid)
