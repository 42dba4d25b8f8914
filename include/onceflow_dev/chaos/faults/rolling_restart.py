"""Fault 13, on three brokers (ONCEFLOW_KAFKA_BROKERS=3): a rolling restart. Each broker in
turn is stopped with SIGTERM (a controlled shutdown: the controller moves its partitions'
leadership to the other in-sync replicas first) and started again on its log, the next one
once every partition of the source is back to all its replicas in sync, while runs go on
and the producer writes. Nothing may be lost: every acknowledged record is still in the
log, no plan refuses it, and the runs planned during the restart and after it commit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from onceflow.ledger.states import BatchState

from onceflow_dev.chaos.faults.schedule import Fault
from onceflow_dev.chaos.faults.steps import INJECT_TIMEOUT, RECOVER_TIMEOUT, FaultSkipped, wait

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness

# how long a broker has for its controlled shutdown before it is killed
SHUTDOWN_TIMEOUT_S = 60.0


def rolling_restart(h: Harness, f: Fault) -> Iterator[None]:
    from onceflow_dev import stack

    names = [n for n in stack.broker_services(h.settings) if n.startswith("broker")]
    if len(names) < 2:
        raise FaultSkipped("a rolling restart needs a cluster (ONCEFLOW_KAFKA_BROKERS=3)")
    max_seq = max((b["seq"] for b in h.batches.values()), default=0)
    wall = time.time()
    t0 = time.monotonic()
    f.injected = True
    f.detail["order"] = names
    f.detail["each_s"] = {}
    for name in names:
        proc = stack.service_process(h.settings, name)
        if proc is None:
            raise FaultSkipped(f"the stack's {name} is not running")
        began = time.monotonic()
        h.log(f"rolling restart: SIGTERM to {name} (pid {proc.pid}), a controlled shutdown")
        proc.terminate()
        yield from wait(  # gone, or a zombie: its pid file names no live broker
            h,
            lambda name=name: stack.service_process(h.settings, name) is None,
            SHUTDOWN_TIMEOUT_S,
            f"{name} stopped",
        )
        h.supervisor.up()
        yield from wait(h, lambda: _all_in_sync(h), INJECT_TIMEOUT, f"{name} back in sync")
        f.detail["each_s"][name] = round(time.monotonic() - began, 1)
    f.detail["restart_s"] = round(time.monotonic() - t0, 1)
    h.log(f"rolling restart done in {f.detail['restart_s']} s: {f.detail['each_s']}")

    def later_committed() -> bool:
        return any(
            b["seq"] > max_seq and b["state"] == BatchState.COMMITTED for b in h.batches.values()
        )

    yield from wait(h, later_committed, RECOVER_TIMEOUT, "a batch planned after it commits")
    refusals = {r: how for r in h.runs if (how := h.task_logs.plan_refused_log(r, wall))}
    f.detail["plan_refusals"] = refusals  # must stay empty: every log was kept
    f.recovered = not refusals
    if refusals:
        f.error = f"plan refused a log during the rolling restart: {refusals}"


def _all_in_sync(h: Harness) -> bool:
    """Whether every partition of the source has all its replicas in sync."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(
        bootstrap_servers=h.settings.kafka_bootstrap, client_id="onceflow-chaos"
    )
    try:
        described = admin.describe_topics(list(h.topics))
    finally:
        admin.close()
    return all(
        p["leader_id"] >= 0 and set(p["isr_nodes"]) == set(p["replica_nodes"])
        for t in described
        for p in t["partitions"]
    )
