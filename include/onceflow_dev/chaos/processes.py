"""Finding and killing the chaos stack's processes: a run's spark-submit driver, the Airflow
task process running a task, a process tree killed -9. A process is the stack's when its
environment carries the stack's marker (onceflow_dev.stack.MARKER_ENV), or, for an Airflow
task process, by its title."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def task_runner_of(jvm: Any) -> Any:
    """The Airflow task process that started this spark-submit JVM, or None.

    The JVM was found as ours by its environment; its parent is the task runner if that is a
    process-group leader titled `airflow worker -- <id>`. The parent's own environment cannot
    be checked: Airflow sets the process title, which overwrites the environment block that
    /proc/PID/environ shows (it reads as blanks).
    """
    import psutil

    try:
        runner = jvm.parent()
        if runner is None or os.getpgid(runner.pid) != runner.pid:
            return None
        title = " ".join(runner.cmdline())
    except (psutil.Error, OSError):
        return None
    return runner if title.startswith("airflow worker") else None


def ours(proc: Any, home: Path) -> bool:
    """Whether `proc` is a process of the stack whose home is `home`."""
    import psutil

    from onceflow_dev import stack

    try:
        marker = proc.environ().get(stack.MARKER_ENV, "")
    except (psutil.Error, OSError):
        return False
    return marker.startswith(f"{home}:")


def spark_drivers(home: Path, txid: str) -> list:
    """spark-submit JVM and the Python driver of process.py for txid, on the stack at `home`."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        # the process task hands the job `--txid=TXID` (onceflow.airflow.tasks.process_args)
        named = f"--txid={txid}" in cmd or txid in cmd
        if named and any(a.endswith("process.py") for a in cmd) and ours(proc, home):
            found.append(proc)
    return found


def process_task_runner(query: Callable[..., list[tuple]], dag_id: str, txid: str) -> Any:
    """The Airflow task process running txid's process task now (its try's id is in
    the process title, `airflow worker -- <id>`), or None. `query` reads Airflow's database
    (snapshots.Databases.query)."""
    import psutil

    rows = query(
        "airflow",
        "select id from task_instance where dag_id = %s and run_id = %s and task_id = 'process'",
        (dag_id, txid),
    )
    ids = {str(r[0]) for r in rows}
    for proc in psutil.process_iter(["cmdline"]):
        title = " ".join(proc.info["cmdline"] or [])
        if title.startswith("airflow worker") and any(i in title for i in ids):
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == proc.pid:
                    return proc
    return None


def kill_tree(procs: Iterable) -> list[int]:
    """kill -9 of `procs` and all their children; their PIDs."""
    import psutil

    victims = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            victims[proc.pid] = proc
            for child in proc.children(recursive=True):
                victims[child.pid] = child
    for proc in victims.values():
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(list(victims.values()), timeout=10)
    return sorted(victims)
