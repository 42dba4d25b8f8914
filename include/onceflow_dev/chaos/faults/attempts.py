"""Faults 1 to 4: one run's attempt hit while it works, at a failpoint armed for that run: its
driver killed -9 while its Spark tasks stage (1), Spark task attempts failing before and
after committing their part (2), its Airflow task process killed while the driver runs on
as a zombie the retry must fence (3), its commit task killed at each step of the commit (4)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING

from onceflow_dev.chaos.faults.schedule import COMMIT_KILL_POINTS, Fault
from onceflow_dev.chaos.faults.steps import (
    INJECT_TIMEOUT,
    FaultSkipped,
    trigger_until_fired,
    wait,
    wait_recovered,
)
from onceflow_dev.chaos.processes import (
    kill_tree,
    process_task_runner,
    spark_drivers,
    task_runner_of,
)

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness


def driver_processes(h: Harness, txid: str) -> list:
    """spark-submit JVM and the Python driver of process.py for txid, on this stack; in
    connect mode the Airflow task process of txid's process task, which runs the
    attempt itself (its stage job runs on the stack's Spark Connect server)."""
    if h.connect:
        runner = process_task_runner(h.db.query, h.dag_id, txid)
        return [] if runner is None else [runner]
    return spark_drivers(h.home, txid)


def driver_kill(h: Harness, f: Fault) -> Iterator[None]:
    txid = yield from trigger_until_fired(
        h, f, "stage.after_part_commit", "sleep:60", "a Spark task of {txid} committed its part"
    )
    procs = driver_processes(h, txid)
    if not procs:
        raise FaultSkipped(f"no driver process of {txid} found")
    pids = kill_tree(procs)
    f.injected = True
    f.detail["killed_pids"] = pids
    h.log(f"kill -9 spark-submit driver of {txid} while staging: pids {pids}")
    yield from wait_recovered(h, f, [txid])
    f.detail["attempt"] = h.batches[txid]["published_attempt"]


def task_retry(h: Harness, f: Fault) -> Iterator[None]:
    txid = yield from trigger_until_fired(
        h,
        f,
        "stage.after_part_commit",
        "raise",
        "a Spark task of {txid} failed after committing its part",
        also={"stage.before_part_commit": "raise"},
    )
    f.injected = True
    yield from wait_recovered(h, f, [txid])
    f.detail["before_part_commit_fired"] = h.failpoints.has_fired("stage.before_part_commit", txid)
    f.detail["process_attempts"] = h.batches[txid]["attempt"]
    f.detail["airflow_process_tries"] = h.ti.get((txid, "process"), (None, 0))[1]


def zombie(h: Harness, f: Fault) -> Iterator[None]:
    import psutil

    txid = yield from trigger_until_fired(
        h,
        f,
        "process.before_mark_staged",
        "sleep:60",
        "process of {txid} staged its output (then stalls)",
    )
    procs = driver_processes(h, txid)
    if h.connect:
        # the task process is the driver: its supervisor (the executor's worker) is
        # killed, and the task process runs on, orphaned, as the zombie
        if not procs:
            raise FaultSkipped(f"the Airflow task process of {txid} was not found")
        runner = procs[0].parent()
        if runner is None or not " ".join(runner.cmdline()).startswith("airflow worker"):
            raise FaultSkipped(f"the supervisor of {txid}'s task process was not found")
    else:
        jvm = [p for p in procs if any("SparkSubmit" in a for a in p.cmdline())]
        if not jvm:
            raise FaultSkipped(f"no spark-submit JVM of {txid} found")
        runner = task_runner_of(jvm[0])
        if runner is None:
            raise FaultSkipped(f"the Airflow task process of {txid} was not found")
    first_attempt = h.batches[txid]["attempt"]
    runner.send_signal(signal.SIGKILL)
    h.log(
        f"killed the Airflow task process {runner.pid} of {txid} (attempt {first_attempt});"
        f" its driver {[p.pid for p in procs]} keeps running as a zombie"
    )
    f.detail["zombie_pids"] = [p.pid for p in procs]
    f.detail["zombie_attempt"] = first_attempt
    yield from wait(
        h,
        lambda: h.batches[txid]["attempt"] > first_attempt,
        INJECT_TIMEOUT,
        f"the retry of {txid} claims a new attempt",
    )
    alive = [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    f.detail["zombie_alive_when_retry_started"] = alive
    if not alive:
        raise FaultSkipped("the zombie ended before the retry started")
    f.injected = True
    yield from wait_recovered(h, f, [txid])
    # the zombie wakes up, its mark_staged is fenced (exit 3): it never becomes published
    yield from wait(
        h,
        lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs),
        120,
        f"the zombie driver of {txid} exits",
    )
    b = h.batches[txid]
    f.detail["published_attempt"] = b["published_attempt"]
    if b["published_attempt"] == first_attempt or b["staged_attempt"] == first_attempt:
        f.recovered = False
        f.error = f"the zombie's attempt {first_attempt} was staged or published"


def commit_kill(h: Harness, f: Fault) -> Iterator[None]:
    point = COMMIT_KILL_POINTS[f.variant]
    txid = yield from trigger_until_fired(h, f, point, "kill", point + " of {txid}")
    f.injected = True
    yield from wait_recovered(h, f, [txid])
    f.detail["commit_tries"] = h.ti.get((txid, "commit"), (None, 0))[1]
