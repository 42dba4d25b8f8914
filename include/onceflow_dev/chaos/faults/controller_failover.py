"""Fault 14, on three brokers with three KRaft controllers (ONCEFLOW_KAFKA_CONTROLLERS=3): a
controller failover. The quorum's leader, the active controller (it fences dead brokers,
elects partition leaders, creates topics), is killed -9 while runs go on; the other two
elect a new one; the killed one is started again and rejoins as a follower. Nothing may
stop: plans, processes and commits go on, no plan refuses a log, and a batch planned after
the failover commits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from onceflow_dev.chaos.faults.schedule import Fault
from onceflow_dev.chaos.faults.steps import (
    INJECT_TIMEOUT,
    FaultSkipped,
    newest_seq,
    runs_go_on,
    wait,
)

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness


def controller_failover(h: Harness, f: Fault) -> Iterator[None]:
    from onceflow_dev import stack

    if len(stack.controller_services(h.settings)) < 3:
        raise FaultSkipped(
            "a controller failover needs three KRaft controllers (ONCEFLOW_KAFKA_CONTROLLERS=3)"
        )
    active = stack.active_controller(h.settings)
    if active is None:
        raise FaultSkipped("no KRaft controller leads the quorum now (an election going on)")
    name, epoch, _ = active
    proc = stack.service_process(h.settings, name)
    if proc is None:
        raise FaultSkipped(f"the quorum's leader {name} is not running")
    max_seq = newest_seq(h)
    h.log(f"controller failover: kill -9 of {name} (pid {proc.pid}), the leader of epoch {epoch}")
    wall = time.time()
    proc.kill()
    f.injected = True
    f.detail.update(killed=name, epoch=epoch)

    def elected() -> bool:
        now = stack.active_controller(h.settings)
        if now is None or now[0] == name or now[1] <= epoch:
            return False
        # when the new leader recorded its election: the harness may have been busy then
        f.detail.update(elected=now[0], new_epoch=now[1], failover_s=round(now[2] - wall, 1))
        return True

    yield from wait(h, elected, INJECT_TIMEOUT, f"a controller other than {name} elected")
    h.log(f"controller failover: {f.detail['elected']} leads after {f.detail['failover_s']} s")
    h.supervisor.up()  # the killed controller rejoins, a follower now

    refusals = yield from runs_go_on(h, max_seq, wall)
    f.detail["plan_refusals"] = refusals  # must stay empty: no log changed
    f.recovered = not refusals
    if refusals:
        f.error = f"plan refused a log during the controller failover: {refusals}"
