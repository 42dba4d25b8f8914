"""The steps a fault is made of, each fault a generator the harness advances once per loop
(Harness.step_fault): wait for a condition (a failed check is "not yet"), for runs to commit,
for a failpoint armed in a new run to fire; and how a fault ends early: timed out, or skipped
this time (no candidate yet: it is tried again later)."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING

from onceflow.ledger.states import BatchState

from onceflow_dev.chaos.faults.schedule import Fault

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness

# generous: on a loaded 2-core machine one process job can take minutes
INJECT_TIMEOUT = 900.0
RECOVER_TIMEOUT = 1500.0


class FaultTimeout(RuntimeError):
    """A fault waited longer than its timeout for what it needs."""


class FaultSkipped(RuntimeError):
    """The fault could not be set up this time (e.g. no candidate run); try again later."""


def wait(h: Harness, cond: Callable[[], bool], timeout: float, what: str) -> Iterator[None]:
    """Yield until `cond()` holds (`what` says what is awaited), at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except Exception as e:  # noqa: BLE001 - a check that fails is "not yet"
            h.log(f"check '{what}' failed: {e!r}")
        if time.monotonic() > deadline:
            raise FaultTimeout(f"timed out after {timeout:.0f}s waiting for: {what}")
        yield


def newest_seq(h: Harness) -> int:
    """The newest seq the harness has seen planned (0 before any)."""
    return max((b["seq"] for b in h.batches.values()), default=0)


def runs_go_on(h: Harness, after_seq: int, since: float) -> Generator[None, None, dict[str, str]]:
    """Yield until a batch planned after seq `after_seq` commits; then the runs whose plan
    refused a log since `since` (time.time()) and how (task_logs.plan_refused_log): none,
    for a fault that kept every log (`refusals = yield from runs_go_on(...)`)."""

    def later_committed() -> bool:
        return any(
            b["seq"] > after_seq and b["state"] == BatchState.COMMITTED for b in h.batches.values()
        )

    yield from wait(h, later_committed, RECOVER_TIMEOUT, "a batch planned after it commits")
    return {r: how for r in h.runs if (how := h.task_logs.plan_refused_log(r, since))}


def wait_recovered(h: Harness, fault: Fault, run_ids: list[str]) -> Iterator[None]:
    """Yield until every run of `run_ids` committed (or was abandoned): `fault` recovered."""
    yield from wait(
        h,
        lambda: all(h.run_ok(r) or h.runs[r].abandoned for r in run_ids),
        RECOVER_TIMEOUT,
        f"runs {', '.join(run_ids)} committed",
    )
    fault.recovered = True


def trigger_until_fired(
    h: Harness, f: Fault, point: str, action: str, what: str, also: dict[str, str] | None = None
) -> Generator[None, None, str]:
    """Trigger a run with fail point `point` armed to `action` (and the points of `also`),
    count it as `f`'s, and wait until `point` fired in it; `what` (with {txid} for the
    run) says what is awaited. Returns the run's txid (`txid = yield from ...`)."""
    txid = h.trigger({**(also or {}), point: action})
    f.txids.append(txid)
    yield from wait(
        h, lambda: h.failpoints.has_fired(point, txid), INJECT_TIMEOUT, what.format(txid=txid)
    )
    return txid
