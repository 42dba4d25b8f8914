"""Fault 13, on three brokers (ONCEFLOW_KAFKA_BROKERS=3): a rolling restart
(onceflow_dev.rolling_restart) of the source's brokers while runs go on and the producer
writes. Nothing may be lost: every acknowledged record is still in the log, no plan refuses
it, and the runs planned during the restart and after it commit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from onceflow_dev import rolling_restart as rolling
from onceflow_dev.chaos.faults.schedule import Fault
from onceflow_dev.chaos.faults.steps import FaultSkipped, newest_seq, runs_go_on, wait

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness


def rolling_restart(h: Harness, f: Fault) -> Iterator[None]:
    from onceflow_dev import stack

    names = rolling.brokers(h.settings)
    if len(names) < 2:
        raise FaultSkipped("a rolling restart needs a cluster (ONCEFLOW_KAFKA_BROKERS=3)")
    if down := [n for n in names if stack.service_process(h.settings, n) is None]:
        raise FaultSkipped(f"not every broker runs: {', '.join(down)}")
    max_seq = newest_seq(h)
    wall = time.time()
    f.injected = True
    f.detail["order"] = names
    f.detail["each_s"] = yield from rolling.roll(
        h.settings,
        h.topics,
        h.supervisor.up,
        lambda cond, timeout, what: wait(h, cond, timeout, what),
        h.log,
    )
    f.detail["restart_s"] = round(sum(f.detail["each_s"].values()), 1)

    refusals = yield from runs_go_on(h, max_seq, wall)
    f.detail["plan_refusals"] = refusals  # must stay empty: every log was kept
    f.recovered = not refusals
    if refusals:
        f.error = f"plan refused a log during the rolling restart: {refusals}"
