"""What the alerts read of the ledger, and the incidents they keep there
(onceflow.airflow.alert_rules says when an alert fires and clears)."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.ledger.contracts import AlertChange
from onceflow.ledger.states import CLOSED, BatchState
from onceflow.ranges import TopicPartition


@dataclass(frozen=True)
class LedgerFacts:
    committed: dict[TopicPartition, int]  # per partition the ledger knows
    commit_blocked_minutes: float  # how long the oldest staged batch behind a blocker waited
    no_commit_minutes: float | None  # since the last commit, or the first plan; None: never
    open_alerts: set[str]


def ledger_facts(cur, pipeline: str) -> LedgerFacts:
    """The pipeline's committed offsets, how long commits have been blocked and gone, and its
    open incidents, in the caller's transaction."""
    cur.execute(
        "select topic, partition, committed_offset from onceflow.offsets where pipeline = %s",
        (pipeline,),
    )
    committed = {(t, p): o for t, p, o in cur.fetchall()}
    closed = [s.value for s in CLOSED]
    cur.execute(
        "select coalesce(extract(epoch from now() - min(w.staged_at)) / 60, 0)"
        " from onceflow.batches w where w.pipeline = %(p)s and w.state = %(state)s"
        " and w.seq > (select min(b.seq) from onceflow.batches b where b.pipeline = %(p)s"
        "  and b.state <> all(%(closed)s))",
        {"p": pipeline, "state": BatchState.STAGED, "closed": closed},
    )
    blocked = float(cur.fetchone()[0])
    cur.execute(
        "select extract(epoch from now() - coalesce(max(committed_at), min(planned_at))) / 60"
        " from onceflow.batches where pipeline = %s",
        (pipeline,),
    )
    since = cur.fetchone()[0]
    cur.execute(
        "select alert from onceflow.alert_incidents where pipeline = %s and cleared_at is null",
        (pipeline,),
    )
    return LedgerFacts(
        committed, blocked, None if since is None else float(since), {r[0] for r in cur.fetchall()}
    )


def record(cur, pipeline: str, change: AlertChange) -> bool:
    """Open or close the incident of `change`; False if another watcher already did (its
    notification is that one's)."""
    if change.state == "firing":
        cur.execute(
            "insert into onceflow.alert_incidents (pipeline, alert, fired_value, threshold)"
            " values (%s, %s, %s, %s) on conflict do nothing",
            (pipeline, change.alert, change.value, change.threshold),
        )
    else:
        cur.execute(
            "update onceflow.alert_incidents set cleared_at = now(), cleared_value = %s"
            " where pipeline = %s and alert = %s and cleared_at is null",
            (change.value, pipeline, change.alert),
        )
    return cur.rowcount == 1
