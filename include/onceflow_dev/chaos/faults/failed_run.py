"""Fault 9: a run failing for good (every retry of its process fails) while later runs wait in
commit for it, saying so in their logs and in the ledger's view; then retried by clearing it,
after which it and every run waiting for it commit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from onceflow.ledger.states import BatchState

from onceflow_dev.chaos.faults.schedule import Fault
from onceflow_dev.chaos.faults.steps import INJECT_TIMEOUT, RECOVER_TIMEOUT, wait, wait_recovered

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness


def failed_run_blocks(h: Harness, f: Fault) -> Iterator[None]:
    from onceflow.ledger import views
    from onceflow.ledger.ordering import blocking_predecessor

    txid = h.trigger({"process.fail": "sticky:raise"})
    h.runs[txid].held = True
    f.txids.append(txid)
    try:
        yield from wait(
            h,
            lambda: h.runs[txid].state == "failed",
            INJECT_TIMEOUT,
            f"{txid} failed for good (every retry of process failed)",
        )
        f.injected = True
        f.detail["process_tries"] = h.ti.get((txid, "process"), (None, 0))[1]
        seq = h.batches[txid]["seq"]
        waiting: list[str] = []

        def successors_blocked() -> bool:
            later = [
                t
                for t, b in h.batches.items()
                if b["seq"] > seq and b["state"] == BatchState.STAGED and t in h.runs
            ]
            waiting[:] = [
                t
                for t in later
                if (w := blocking_predecessor(h.settings.ledger, h.pipeline, t))
                and w.txid == txid
                and h.task_logs.commit_log_says_waits(t, txid)
            ]
            return len(waiting) >= 2

        yield from wait(
            h, successors_blocked, INJECT_TIMEOUT, f"later runs wait in commit for {txid}"
        )
        block = views.commit_block(h.settings.ledger, h.pipeline)
        f.detail["waiting"] = sorted(waiting)
        f.detail["blocked_view"] = (
            {k: block.get(k) for k in ("txid", "state", "waiting", "last_error")} if block else None
        )
        f.detail["commit_log"] = h.task_logs.commit_log_line(waiting[0], txid)
        if not block or block["txid"] != txid:
            f.error = f"views.commit_block names {block and block['txid']}, not {txid}"
        h.log(f"{len(waiting)} later run(s) wait for {txid}: {f.detail['commit_log']}")
        committed_later = [
            t for t, b in h.batches.items() if b["seq"] > seq and b["state"] == BatchState.COMMITTED
        ]
        if committed_later:
            f.error = f"commits bypassed the failed run: {committed_later}"
    finally:
        h.failpoints.disarm("process.fail", txid)
        h.runs[txid].held = False
    h.clear(txid, "retry of the run that failed on purpose")
    successors = sorted(waiting)
    yield from wait(
        h, lambda: h.runs[txid].state != "queued", RECOVER_TIMEOUT, f"{txid} starts again"
    )
    freed = [d for d in h.deadlocks if d["cleared_run"] == txid]
    if freed:
        f.detail["deadlock"] = freed
    yield from wait_recovered(h, f, [txid, *successors])
    if f.error:
        f.recovered = False
