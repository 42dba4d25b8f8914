"""Reset-offsets: the operator's new epoch after the broker lost the log the ledger read, or
to reprocess from a point in time.

Batches not yet committed are abandoned: their ranges point at records the broker no
longer has, so they can never be processed; they stay in the ledger (seq stays dense) and
in the audit. Each partition's committed offset moves to the broker's first or end offset,
or to its first record at or after a time (`to="time"`: reprocessing from a point in time,
which publishes again what the earlier epoch published from there), recorded with its old
value in onceflow.resets, so the audit shows the break instead of a gap; plan starts the
next batch there (ledger.planning).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from onceflow.errors import ResetRefusedError
from onceflow.ledger.batches import read_ranges
from onceflow.ledger.contracts import Pipeline
from onceflow.ledger.db import LedgerLike, transaction
from onceflow.ledger.log_checks import (
    BrokerSnapshot,
    Snapshot,
    ledger_logs,
    log_lost,
    prints_at,
)
from onceflow.ledger.log_identity import LedgerLog
from onceflow.ledger.ordering import lock_commits
from onceflow.ledger.states import CLOSED, BatchState, Step
from onceflow.ledger.transitions import move
from onceflow.ranges import TopicPartition, starting_offset


@dataclass(frozen=True)
class Reset:
    after_seq: int
    abandoned: list[str]
    partitions: list[dict]


def reset_offsets(
    dsn: LedgerLike,
    cfg: Pipeline,
    snapshot: Snapshot,
    *,
    to: str = "earliest",
    reason: str,
    at_time: str | None = None,
) -> Reset:
    """Restart every partition of the pipeline at the broker's first (`to="earliest"`) or
    end (`"latest"`) offset, or (`"time"`) its first record at or after `at_time` (the
    snapshot's `at_time` offsets), abandoning the batches not committed (see above)."""
    if to not in ("earliest", "latest", "time") or (to == "time") != (at_time is not None):
        raise ResetRefusedError(
            cfg.name, f"the target must be 'earliest', 'latest' or a time, not {to!r}"
        )
    if not reason.strip():
        raise ResetRefusedError(cfg.name, "give a reason for the reset; it is kept in the ledger")
    with transaction(dsn) as cur:
        cur.execute("select name from onceflow.pipelines where name = %s for update", (cfg.name,))
        if cur.fetchone() is None:
            raise ResetRefusedError(cfg.name, "the pipeline has no ledger yet")
        lock_commits(cur, cfg.name)
        cur.execute(
            "select txid from onceflow.batches where pipeline = %s and state not in %s"
            " order by seq",
            (cfg.name, CLOSED),
        )
        abandoned = sorted(r[0] for r in cur.fetchall())
        for txid in abandoned:
            move(
                cur,
                cfg.name,
                txid,
                Step.ABANDON,
                {"last_error": f"abandoned by reset-offsets: {reason}"[:4000]},
            )
        cur.execute(
            "select coalesce(max(seq), 0) from onceflow.batches where pipeline = %s", (cfg.name,)
        )
        after_seq = cur.fetchone()[0]
        cur.execute(
            "select txid from onceflow.batches where pipeline = %s and seq = %s",
            (cfg.name, after_seq),
        )
        last = cur.fetchone()
        planned = (
            {r.tp: r.until_offset for r in read_ranges(cur, cfg.name, last[0])} if last else {}
        )
        logs = ledger_logs(cur, cfg.name)
        snap = snapshot(prints_at(logs))
        cur.execute(
            "select topic, partition, committed_offset from onceflow.offsets where pipeline = %s",
            (cfg.name,),
        )
        partitions = []
        for topic, partition, committed in cur.fetchall():
            tp = (topic, partition)
            if tp not in snap.ends:
                raise ResetRefusedError(
                    cfg.name,
                    f"partition {topic}[{partition}] is in the ledger but not on the broker; "
                    "re-create the topic with at least as many partitions before resetting",
                )
            new = starting_offset(
                to,  # type: ignore[arg-type]
                snap.beginnings.get(tp, 0),
                snap.ends[tp],
                (snap.at_time or {}).get(tp),
            )
            cur.execute(
                "insert into onceflow.resets (pipeline, after_seq, topic, partition, old_offset,"
                " committed_before, new_offset, reason) values (%s, %s, %s, %s, %s, %s, %s, %s)",
                (cfg.name, after_seq, topic, partition, planned.get(tp), committed, new, reason),
            )
            # the new epoch reads the broker's log as it is now: its topic id, no print yet
            cur.execute(
                "update onceflow.offsets set committed_offset = %s, epoch = epoch + 1,"
                " topic_id = %s, print_offset = null, print_hash = null, updated_at = now()"
                " where pipeline = %s and topic = %s and partition = %s",
                (new, snap.topic_ids.get(topic), cfg.name, topic, partition),
            )
            partitions.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "old_offset": planned.get(tp),
                    "committed_before": committed,
                    "new_offset": new,
                    "log": _log_before_reset(cfg.name, tp, logs.get(tp), snap),
                }
            )
        detail = {
            "to": at_time or to,
            "reason": reason,
            "after_seq": after_seq,
            BatchState.ABANDONED: abandoned,  # the txids
            "partitions": partitions,
        }
        cur.execute(
            "insert into onceflow.operator_log (pipeline, action, detail)"
            " values (%s, 'reset-offsets', %s)",
            (cfg.name, json.dumps(detail)),
        )
        return Reset(after_seq, abandoned, partitions)


def _log_before_reset(
    pipeline: str, tp: TopicPartition, known: LedgerLog | None, snap: BrokerSnapshot
) -> str:
    """What reset-offsets found of a partition's log, in the operator's words."""
    if known is None:
        return "not read by the ledger yet"
    lost = log_lost(pipeline, tp, known, snap)
    return lost or f"the broker's log for {tp[0]}[{tp[1]}] is the one the ledger read"
