"""Faults 5, 6 and 11: a service of the stack killed or restarted under every run in flight:
the scheduler and its running tasks killed -9 and restarted (5), PostgreSQL restarted while
a run plans, stages or commits (6), the Spark Connect server killed -9 while a job stages
(11, process_mode = connect)."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from onceflow_dev.chaos.faults.schedule import Fault
from onceflow_dev.chaos.faults.steps import (
    INJECT_TIMEOUT,
    FaultSkipped,
    trigger_until_fired,
    wait,
    wait_recovered,
)
from onceflow_dev.chaos.processes import kill_tree

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness


def scheduler_kill(h: Harness, f: Fault) -> Iterator[None]:
    import psutil

    from onceflow_dev import stack

    yield from wait(
        h,
        lambda: any(s == "running" and t == "process" for (_, t), (s, _) in h.ti.items()),
        INJECT_TIMEOUT,
        "a process task running",
    )
    running = sorted(
        {
            r
            for (r, _), (s, _) in h.ti.items()
            if s == "running" and r in h.runs and not h.runs[r].abandoned
        }
    )
    sched = stack.service_process(h.settings, "scheduler")
    if sched is None:
        raise FaultSkipped("scheduler not running")
    victims = {sched.pid: sched}
    for child in sched.children(recursive=True):
        victims[child.pid] = child
    marker = f"{h.home}:scheduler"
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(stack.MARKER_ENV) == marker:
                victims[proc.pid] = proc
    for proc in victims.values():
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(list(victims.values()), timeout=10)
    f.injected = True
    f.txids.extend(running)
    f.detail["killed_processes"] = len(victims)
    h.log(f"kill -9 scheduler + {len(victims) - 1} task processes; runs hit: {running}")
    t0 = time.monotonic()
    h.supervisor.up()
    f.detail["scheduler_back_after_s"] = round(time.monotonic() - t0, 1)
    yield from wait_recovered(h, f, running)


def restart_postgres(h: Harness) -> float:
    import psutil

    from onceflow_dev import stack

    t0 = time.monotonic()
    proc = stack.service_process(h.settings, "postgres")
    if proc is None:
        raise RuntimeError("postgres is not running")
    proc.send_signal(signal.SIGINT)  # fast shutdown: every session is terminated
    psutil.wait_procs([proc], timeout=60)
    h.log(f"postgres stopped (pid {proc.pid}); starting it again")
    h.supervisor.up()
    return time.monotonic() - t0


def postgres_restart(h: Harness, f: Fault) -> Iterator[None]:
    if f.variant == "plan":
        cand: list[str] = []

        def plan_running() -> bool:
            cand[:] = [
                r
                for (r, t), (s, _) in h.ti.items()
                if t == "plan" and s == "running" and r in h.runs and not h.runs[r].abandoned
            ]
            return bool(cand)

        yield from wait(h, plan_running, INJECT_TIMEOUT, "a plan task running")
        f.txids.extend(cand)
    else:
        point = "stage.before_part_commit" if f.variant == "process" else "commit.before_db_commit"
        yield from trigger_until_fired(
            h, f, point, "sleep:8", point + " of {txid} (transaction open)"
        )
    took = restart_postgres(h)
    f.injected = True
    f.detail["restart_s"] = round(took, 1)
    h.log(f"postgres restarted during {f.variant} of {f.txids} ({took:.1f}s)")
    yield from wait_recovered(h, f, list(f.txids))


def connect_server_killed(h: Harness, f: Fault) -> Iterator[None]:
    """kill -9 of the stack's Spark Connect server while a task of the job stages (it
    sleeps after committing its part); restarted at once. The attempt fails within
    seconds (connect_session's short retries) and a retry replays the range."""
    from onceflow_dev import stack

    txid = yield from trigger_until_fired(
        h, f, "stage.after_part_commit", "sleep:30", "a Spark task of {txid} committed its part"
    )
    server = stack.service_process(h.settings, "spark-connect")
    if server is None:
        raise FaultSkipped("the Spark Connect server is not running")
    pids = kill_tree([server])
    f.injected = True
    f.detail["killed_pids"] = pids
    h.log(f"kill -9 of the Spark Connect server {pids} while {txid} stages; restarting")
    h.supervisor.up()
    yield from wait_recovered(h, f, [txid])
    f.detail["attempt"] = h.batches[txid]["published_attempt"]
