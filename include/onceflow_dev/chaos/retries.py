"""What the harness does as the stack's operator between faults: a run that failed (and
that no fault holds) is cleared, an operator's retry, with why it failed; and a cleared run
that cannot start because every active slot is held by later runs waiting in commit for it
gets a slot (the newest of them is failed, and cleared again once the retried run is
running). Both are counted in the report."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from onceflow.ledger.states import BatchState

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness


def handle_failed(h: Harness) -> None:
    """Clear every run that failed and that nothing holds (an operator's retry)."""
    if h.hold_clears:
        return
    for run in list(h.runs.values()):
        if run.state != "failed" or run.held or run.abandoned or run.refused:
            continue
        b = h.batches.get(run.run_id)
        if b and b["state"] == BatchState.ABANDONED:
            run.abandoned = True
            continue
        h.harness_clears += 1
        failed = [t for (r, t), (state, _) in h.ti.items() if r == run.run_id and state == "failed"]
        why = "; ".join(f"{t}: {h.task_logs.task_error(run.run_id, t)}" for t in sorted(failed))
        h.failures.append(
            {"run_id": run.run_id, "at_s": round(time.monotonic() - h.started), "why": why}
        )
        h.clear(run.run_id, f"failed ({why[:300]}): operator retry")


def resolve_deadlock(h: Harness) -> None:
    """Free an active slot for a cleared run that cannot start.

    A cleared run goes back to `queued`, and Airflow starts queued runs only below
    max_active_runs. When every active run is a later batch waiting in commit for it, it
    never starts and they never commit. An operator has to fail the newest waiting run
    (and clear it once the retried run is running); the harness does that and reports it.
    """
    for run_id, waited_for in list(h.freed.items()):
        if h.runs[waited_for].state != "queued":
            h.runs[run_id].held = False  # cleared by handle_failed from now on
            del h.freed[run_id]
    if h.freed:
        return
    seq = {t: b["seq"] for t, b in h.batches.items()}
    stuck = [
        r
        for r in h.runs.values()
        if r.state == "queued"
        and r.clears
        and time.monotonic() - r.cleared_s > 30
        and r.run_id in seq
        and not r.refused  # committed: no later run waits for it
    ]
    running = [r for r in h.runs.values() if r.state == "running"]
    if not stuck or len(running) < h.cfg.max_active_runs:
        return
    first = min(stuck, key=lambda r: seq[r.run_id])
    if not all(seq.get(r.run_id, 0) > seq[first.run_id] for r in running):
        return
    victim = max(running, key=lambda r: seq[r.run_id])
    victim.held = True
    h.client.request(
        "PATCH", f"/api/v2/dags/{h.dag_id}/dagRuns/{victim.run_id}", json={"state": "failed"}
    )
    victim.state = "failed"
    h.freed[victim.run_id] = first.run_id
    entry = {
        "cleared_run": first.run_id,
        "seq": seq[first.run_id],
        "active_runs_waiting_for_it": sorted(r.run_id for r in running),
        "failed_to_free_a_slot": victim.run_id,
        "at_s": round(time.monotonic() - h.started),
    }
    h.deadlocks.append(entry)
    h.log(
        f"deadlock: cleared {first.run_id} (seq {seq[first.run_id]}) stays queued while"
        f" {len(running)} later runs hold every active slot waiting in commit for it;"
        f" marked {victim.run_id} failed to free a slot"
    )
