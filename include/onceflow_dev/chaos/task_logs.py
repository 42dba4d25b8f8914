"""What the tasks' logs of the chaos stack say (Airflow's log folder, one file per try): a
task's last error line, a plan refusing the broker's log, a commit waiting for an earlier
txid."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

# how plan refuses a log that is not the one the ledger read (its task log says): one whose
# topic id or last committed record is not the ledger's (log_identity: a broker with topic ids
# shows this first), or one ending below the committed offset (plan_ranges)
NOT_THE_LEDGERS_LOG = "is not the one pipeline"
PLAN_REFUSALS = (NOT_THE_LEDGERS_LOG, "offset regression")


class TaskLogs:
    """The logs of the tasks of DAG `dag_id` on the stack of `settings`."""

    def __init__(self, settings: Any, dag_id: str) -> None:
        self.settings = settings
        self.dag_id = dag_id

    def folder(self, run_id: str, task: str) -> Path:
        """Where the tries of task `task` of run `run_id` log (attempt=N.log)."""
        from onceflow_dev import stack

        return (
            stack.airflow_home(self.settings)
            / "logs"
            / f"dag_id={self.dag_id}"
            / f"run_id={run_id}"
            / f"task_id={task}"
        )

    def task_error(self, run_id: str, task: str) -> str:
        """The last error line of a task's newest log file (for the report)."""
        folder = self.folder(run_id, task)
        logs = sorted(folder.glob("attempt=*.log"), key=lambda p: p.stat().st_mtime)
        if not logs:
            return "no log"
        last = "no error line"
        with contextlib.suppress(OSError):
            for line in logs[-1].read_text(errors="replace").splitlines():
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if d.get("level") in ("error", "critical"):
                    last = str(d.get("event"))[:300]
                    detail = d.get("error_detail")
                    if isinstance(detail, list) and detail:
                        last += f" [{detail[0].get('exc_type')}: {str(detail[0].get('exc_value'))[:200]}]"
        return last

    def plan_log_matches(self, run_id: str, needle: str, since: float) -> bool:
        """Whether a log of run_id's plan written since `since` (wall clock) says `needle`."""
        for path in self.folder(run_id, "plan").glob("attempt=*.log"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime >= since and needle in path.read_text(errors="replace"):
                    return True
        return False

    def plan_refused_log(self, run_id: str, since: float) -> str | None:
        """How the plan of run_id refused the broker's log since `since` (PLAN_REFUSALS)."""
        return next((n for n in PLAN_REFUSALS if self.plan_log_matches(run_id, n, since)), None)

    def commit_log_line(self, run_id: str, blocker: str) -> str | None:
        """The line of run_id's commit log saying it waits for txid `blocker`, or None."""
        needle = f"waits for txid {blocker}"
        for path in sorted(self.folder(run_id, "commit").glob("attempt=*.log")):
            with contextlib.suppress(OSError):
                for line in path.read_text(errors="replace").splitlines():
                    if needle in line:
                        try:
                            return json.loads(line).get("event")
                        except ValueError:
                            return line[:300]
        return None

    def commit_log_says_waits(self, run_id: str, blocker: str) -> bool:
        return self.commit_log_line(run_id, blocker) is not None
