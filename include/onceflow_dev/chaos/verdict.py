"""The verdict of a chaos run: exactly-once when the audit agrees, nothing is lost,
duplicated or mismatched and every check of the sink's truth holds (a check: its name, ok
and its violations); the check on the re-created topics; the faults injected and recovered
per kind, and whether the run is complete."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from onceflow_dev.chaos.faults.schedule import (
    CDC_KINDS,
    CLUSTER_KINDS,
    CONNECT_KINDS,
    KINDS,
    QUORUM_KINDS,
    Fault,
)


def verdict_of(
    audit_verdict: str, counts: dict[str, int], checks: Iterable[dict[str, Any]] = ()
) -> str:
    """exactly-once when the audit agrees, nothing is lost, duplicated or mismatched and
    every truth check of the sink's mode holds (checks: {"check", "ok", ...})."""
    # None: not a count of this run (a pipeline of change events: chaos.cdc.cdc_counts)
    clean = not counts["lost"] and not counts["duplicated"] and not counts["mismatched"]
    if audit_verdict != "exactly-once" or not clean or not all(c["ok"] for c in checks):
        return "violated"
    return "exactly-once" if not counts.get("unprocessed") else "exactly-once-so-far"


def recreated_topic_checks(faults: Iterable[Fault]) -> list[dict[str, Any]]:
    """The verdict's check of the topic re-creations (10_topic_recreated): the first plan
    after each refused the new log. One that planned instead read on from the old committed
    offset, skipping the new log's records below it; the reset-offsets that follows abandons
    that batch, so the sink would not show it."""
    ran = [f for f in faults if f.kind == "10_topic_recreated" and f.injected]
    if not ran:
        return []
    accepted = [
        f"fault #{f.index}: plan accepted the new log, planned {f.detail['planned_on_new_log']}"
        for f in ran
        if f.detail.get("planned_on_new_log")
    ]
    return [
        check(
            "plan refused each re-created topic's log (refilled past the committed offset) "
            "until reset-offsets",
            accepted,
            recreations=len(ran),
        )
    ]


def fault_counts(
    faults: Iterable[Fault],
    connect: bool = False,
    cdc: bool = False,
    cluster: bool = False,
    quorum: bool = False,
) -> dict[str, dict[str, int]]:
    """Per fault kind of the run (CONNECT_KINDS too with `connect`; with `cdc` CDC_KINDS,
    without the topic re-creation, schedule.NOT_CDC; with `cluster`, three brokers,
    CLUSTER_KINDS; with `quorum`, three controllers, QUORUM_KINDS): injected, recovered."""
    kinds = {
        **KINDS,
        **(CONNECT_KINDS if connect else {}),
        **(CDC_KINDS if cdc else {}),
        **(CLUSTER_KINDS if cluster else {}),
        **(QUORUM_KINDS if quorum else {}),
    }
    if cdc:
        kinds.pop("10_topic_recreated")
    out = {kind: {"injected": 0, "recovered": 0} for kind in kinds}
    for f in faults:
        out[f.kind]["injected"] += f.injected
        out[f.kind]["recovered"] += f.injected and f.recovered
    return out


def is_complete(
    faults: dict[str, dict[str, int]],
    batches_committed: int,
    target: int,
    *,
    ended_by: str,
    only: bool,
) -> bool:
    """A full run: every fault kind injected, the target reached, and the lag drained.

    `ended_by` says what started the drain: "target" (enough batches and every scheduled fault
    done), "clock" (80% of the budget: no more faults, the lag still drains, so the batches
    committed while draining count) or "hard-deadline" (stopped with the lag undrained).
    A development run of some kinds only (`only`) is never complete.
    """
    return (
        ended_by != "hard-deadline"
        and not only
        and all(v["injected"] >= 1 for v in faults.values())
        and batches_committed >= target
    )


def count_violations(counts: dict[str, int]) -> list[str]:
    """The accounting's counts that break exactly-once, as a check's violations."""
    return [f"{counts[k]} {k}" for k in ("lost", "duplicated", "mismatched") if counts[k]]


def check(name: str, violations: list[str], **detail: Any) -> dict[str, Any]:
    """A check of the verdict: it holds when it has no violation (the first 20 kept)."""
    return {"check": name, "ok": not violations, "violations": violations[:20], **detail}
