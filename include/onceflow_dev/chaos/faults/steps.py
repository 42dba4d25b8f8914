"""The steps a fault is made of, each fault a generator the harness advances once per loop
(Harness.step_fault): wait for a condition (a failed check is "not yet"), for runs to commit,
for a failpoint armed in a new run to fire; and how a fault ends early: timed out, or skipped
this time (no candidate yet: it is tried again later)."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING

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
