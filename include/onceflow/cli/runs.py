"""`onceflow trigger`: DAG runs through the Airflow REST API, waited for, and for each run that
did not succeed the reason, read from the ledger and the failed task's log, so that the
command (and `onceflow-dev demo`) ends with it instead of a pointer to the task logs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from onceflow.cli.output import indented
from onceflow.cli.selection import select_pipeline
from onceflow.config.pipeline import PipelineConfig
from onceflow.settings import Settings

if TYPE_CHECKING:
    from onceflow.cli.airflow_api import AirflowClient


def new_run_ids(prefix: str, count: int) -> list[str]:
    """`count` run ids (txids) that sort in the order they are triggered. The stamp holds
    milliseconds: `onceflow trigger` run again as soon as its run ended (a second or less
    for a small batch) gave the same id within a second, which Airflow refused."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%f")[:-3]
    return [f"{prefix}__{stamp}__{i:03d}" for i in range(1, count + 1)]


def cmd_trigger(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.cli import airflow_api

    cfg = select_pipeline(settings, args.pipeline)
    run_ids = [airflow_api.validate_run_id(r) for r in args.run_id or ()] or new_run_ids(
        args.prefix, args.runs
    )
    client = airflow_api.airflow_client(settings)
    client.wait_for_dag(cfg.dag_id, timeout=args.timeout)
    client.unpause(cfg.dag_id)
    for run_id in run_ids:
        client.trigger(cfg.dag_id, run_id)
        print(f"triggered {cfg.dag_id} run {run_id}", flush=True)
    if args.no_wait:
        return 0
    states = client.wait_for_runs(cfg.dag_id, run_ids, timeout=args.timeout)
    failed = [r for r, s in states.items() if s != "success"]
    for r, s in states.items():
        print(f"  {r}: {s}")
    if failed:
        print(f"{len(failed)} run(s) did not succeed:", file=sys.stderr)
        for r in failed:
            print(f"  {r}: {indented(run_error(client, settings, cfg, r))}", file=sys.stderr)
        return 1
    return 0


def run_error(client: AirflowClient, settings: Settings, cfg: PipelineConfig, run_id: str) -> str:
    """Why a run did not succeed, read from the ledger and the Airflow API."""
    from onceflow.cli.airflow_api import AirflowError, failed_task
    from onceflow.ledger import views

    ledger_error = views.last_error(settings.ledger, cfg.name, run_id)
    try:
        ti = failed_task(client.task_instances(cfg.dag_id, run_id))
        return why_run_failed(
            ti,
            ledger_error,
            lambda t: client.task_error(cfg.dag_id, run_id, t["task_id"], t["try_number"]),
        )
    except AirflowError as e:
        return ledger_error or f"its task logs could not be read ({e}); see the Airflow UI"


def why_run_failed(
    ti: dict | None, ledger_error: str | None, task_error: Callable[[dict], str]
) -> str:
    """The error of the task a run failed on (`ti`): for process, the reason process recorded
    in the ledger (its task log holds only spark-submit's exit code); for the others, what
    `task_error` reads at the end of its log."""
    if ti is None:
        return ledger_error or (
            "no task of it failed: the run was marked failed from outside (by hand, or by "
            "`onceflow reset-offsets` for an abandoned txid)"
        )
    if ti["task_id"] == "process" and ledger_error:
        return f"process: {ledger_error}"
    error = task_error(ti) or "its log records no error"
    return f"{ti['task_id']} (try {ti.get('try_number')}): {error}"
