"""Failpoints: named places where the chaos harness can crash or stall a real process.

Inert unless both switches are on: ONCEFLOW_FAILPOINTS_DIR is set (only the tests and the
chaos stack set it), and the Python running is a checkout's, the one that holds onceflow_dev
(which the wheel never ships). So a production install never crashes on a failpoint,
whatever its environment holds. To arm a point, write a file `<dir>/<name>@<txid>` (or
`<name>@*` for any txid) whose text is the action:

  kill        SIGKILL this process (a crash: no cleanup, no rollback message)
  raise       raise FailpointError (an ordinary failure)
  sleep:S     stall S seconds (lets the harness kill or restart something meanwhile)
  until:F     stall until a file F appears in the folder (a test releases the process once
              what it does meanwhile is done), UNTIL_S seconds at most, then raise

A file fires once: the first process to rename it away owns it, so concurrent hits (two task
attempts, a zombie) cannot both fire. `sticky:<action>` fires every time until removed.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("onceflow.failpoints")

ENV = "ONCEFLOW_FAILPOINTS_DIR"
NAMES = (
    "process.before_stage_job",  # driver: the attempt claimed, the stage job not started
    "process.before_mark_staged",  # driver: output staged, ledger not yet told
    "stage.before_part_commit",  # Spark task: rows copied, PostgreSQL transaction still open
    "stage.after_part_commit",  # Spark task: part committed, task not yet reported success
    "commit.before_sink_commit",  # commit to a Kafka topic: records produced, transaction open
    "commit.after_sink_publish",  # commit to a sink outside the database: published, ledger not told
    "commit.before_db_commit",  # commit: publish + offsets done inside the open transaction
    "commit.after_db_commit",  # commit: database committed, Airflow not yet told
    "process.fail",  # process fails (use sticky: to fail for good until removed)
)


UNTIL_S = 600


class FailpointError(RuntimeError):
    pass


def hit(name: str, txid: str) -> None:
    directory = os.environ.get(ENV)
    if not directory or not in_checkout():
        return
    for candidate in (f"{name}@{txid}", f"{name}@*"):
        path = Path(directory) / candidate
        try:
            action = path.read_text().strip()
        except (FileNotFoundError, IsADirectoryError):
            continue
        if action.startswith("sticky:"):
            action = action.removeprefix("sticky:")
        else:
            claimed = path.with_name(f".fired.{candidate}.{os.getpid()}.{time.monotonic_ns()}")
            try:
                os.rename(path, claimed)  # atomic: exactly one process fires a one-shot point
            except FileNotFoundError:
                continue
        _record(directory, name, txid, action)
        _act(Path(directory), name, txid, action)


@functools.cache
def in_checkout() -> bool:
    """Whether this Python is a checkout's (onceflow_dev importable): the failpoints' second
    switch. Said once when the first is on and this one is not."""
    found = importlib.util.find_spec("onceflow_dev") is not None
    if not found and os.environ.get(ENV):
        log.warning("%s is set, but failpoints are a checkout's test tool: ignored here", ENV)
    return found


def _record(directory: str, name: str, txid: str, action: str) -> None:
    with open(Path(directory) / "fired.log", "a") as f:
        f.write(f"{time.time():.3f}\t{os.getpid()}\t{name}\t{txid}\t{action}\n")
        f.flush()
        os.fsync(f.fileno())


def _act(directory: Path, name: str, txid: str, action: str) -> None:
    log.warning("failpoint %s fired for txid %s: %s", name, txid, action)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise FailpointError(f"failpoint {name} fired for txid {txid}")
    elif action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))
    elif action.startswith("until:"):
        release = directory / action.split(":", 1)[1]
        deadline = time.monotonic() + UNTIL_S
        while not release.exists():
            if time.monotonic() > deadline:
                raise FailpointError(f"failpoint {name}: {release} never appeared")
            time.sleep(0.1)
    else:
        raise FailpointError(f"failpoint {name}: unknown action {action!r}")
