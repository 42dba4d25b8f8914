"""One DAG per configured pipeline: plan -> process (spark-submit, or in a Spark Connect
session: process_mode) -> commit.

A declaration only: reading the pipelines file is the sole I/O, and nothing of the parsing
host is kept (its Python, JAVA_HOME or PATH: the process task finds those on its worker,
onceflow.airflow.worker_env); the sink's Asset is named by connection id
and table, no connection is looked up, and nothing touches the ledger, the broker or Spark
until a task runs. Every task is a TxidOperator whose txid is its DAG run's id, read when it
runs; no logical-date macro is used (NULL for runs triggered through the API).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, get_parsing_context

from onceflow.airflow.records_trigger import RecordsArrivedTrigger
from onceflow.airflow.tasks import (
    CommitOperator,
    ConnectProcessOperator,
    MaintainOperator,
    PlanOperator,
    ProcessOperator,
)
from onceflow.airflow.watcher import watching
from onceflow.config.pipeline import PipelineConfig
from onceflow.config.pipelines_file import load_pipelines
from onceflow.config.schedule import CONTINUOUS
from onceflow.errors import PipelineKeyError
from onceflow.hooks.sink import sink_for
from onceflow.settings import Settings
from onceflow.spark.applications import PROCESS_APPLICATION

CONTINUOUS_SINCE = datetime(2024, 1, 1, tzinfo=timezone.utc)


def build_dag(cfg: PipelineConfig, pipelines_file: Path) -> DAG:
    with DAG(
        dag_id=cfg.dag_id,
        description=cfg.description or f"Onceflow pipeline {cfg.name}: {cfg.topics_label}",
        schedule=dag_schedule(cfg),
        # Airflow's @continuous gives a DAG without a start date a first run of zero length,
        # and then the same logical date again for every next run, which already exists: it
        # never runs twice (3.3). From a start date in the past each run begins where the last
        # ended. The other schedules run from their first parse, catchup off, as without one.
        start_date=CONTINUOUS_SINCE if cfg.schedule == CONTINUOUS else None,
        catchup=False,
        # back to back from the moment it is parsed, failing while its topics are missing:
        # a continuous DAG waits for someone to unpause it; the others as Airflow's config says
        is_paused_upon_creation=True if cfg.schedule == CONTINUOUS else None,
        max_active_runs=cfg.max_active_runs,
        tags=["onceflow"],
        doc_md=(
            f"Exactly-once pipeline **{cfg.name}** (topics: {cfg.topics_label}). Each run is one "
            "transaction whose txid is the run id: plan records its offset ranges in the ledger, "
            "process stages the output with Spark, commit publishes it in seq order. Clearing or "
            "retrying a run replays the same ranges."
        ),
        default_args={"owner": "onceflow"},
    ) as dag:
        plan = PlanOperator(
            task_id="plan",
            pipeline=cfg.name,
            pipelines_file=str(pipelines_file),
            # its result is spark-submit's to read (ProcessOperator); a connect-mode process
            # reads the ledger alone, and each XCom is an Execution API call of 10-15 ms
            do_xcom_push=cfg.process_mode != "connect",
            retries=2,
            retry_delay=timedelta(seconds=5),
        )
        process = process_task(cfg, pipelines_file)
        commit = CommitOperator(
            task_id="commit",
            pipeline=cfg.name,
            pipelines_file=str(pipelines_file),
            # Each committed txid is an event of the sink's Asset (txid, seq and counts in its
            # extra): downstream DAGs can be scheduled on new data.
            outlets=[
                Asset(
                    name=f"onceflow_{cfg.name}",
                    uri=sink_for(cfg).asset_uri(cfg),
                )
            ],
            poll_interval=cfg.commit_poke_interval,
            do_xcom_push=False,  # its summary is the Asset event's extra (and its log line)
            # Commit is idempotent, so retries are free (a lost ledger connection, say).
            retries=3,
            retry_delay=timedelta(seconds=5),
        )
        plan >> process >> commit
        if cfg.sink.maintain_every:
            commit >> MaintainOperator(
                task_id="maintain",
                pipeline=cfg.name,
                pipelines_file=str(pipelines_file),
                doc_md=f"Maintenance of the sink's table every {cfg.sink.maintain_every} "
                "committed batches (onceflow.maintenance: a lake table's compaction and "
                "expiry, an append or upsert table's partitions rolled up); the other runs "
                "skip it.",
                retries=2,
                retry_delay=timedelta(seconds=10),
            )
    if cfg.openlineage:
        _enable_lineage(cfg, dag)
    return dag


def _enable_lineage(cfg: PipelineConfig, dag: Any) -> None:
    """Mark the DAG and its tasks for OpenLineage under the provider's `selective_enable`
    (without it, every DAG reports and the mark changes nothing)."""
    try:
        from airflow.providers.openlineage.utils.selective_enable import enable_lineage
    except ImportError:
        raise PipelineKeyError(
            cfg.source,
            cfg.name,
            "openlineage",
            "true needs Airflow's OpenLineage provider: pip install 'onceflow[openlineage]'",
        ) from None
    enable_lineage(dag)


def dag_schedule(cfg: PipelineConfig) -> Any:
    """Airflow's schedule for the pipeline's (onceflow.config.schedule): "continuous" is
    `@continuous`; "on_records" an Asset of the pipeline's records whose watcher is the
    pipeline's RecordsArrivedTrigger; anything else Airflow's own."""
    if cfg.schedule == CONTINUOUS:
        return "@continuous"
    if cfg.on_records is None:
        return cfg.schedule
    rule = cfg.on_records
    return [
        Asset(
            name=f"onceflow_{cfg.name}_records",
            uri=f"x-onceflow://{cfg.name}/records",
            watchers=[
                AssetWatcher(
                    name=f"onceflow_{cfg.name}_watcher",
                    trigger=RecordsArrivedTrigger(
                        **watching(cfg),
                        min_records=rule.min_records,
                        max_wait_seconds=rule.max_wait_seconds,
                        watch_interval_seconds=rule.watch_interval_seconds,
                    ),
                )
            ],
        )
    ]


def process_task(cfg: PipelineConfig, pipelines_file: Path) -> Any:
    """The process task of the pipeline's process_mode: a spark-submit of the package's job,
    or the attempt run by the task itself in a Spark Connect session."""
    if cfg.process_mode == "connect":
        return ConnectProcessOperator(
            task_id="process",
            pipeline=cfg.name,
            pipelines_file=str(pipelines_file),
            retries=2,
            retry_delay=timedelta(seconds=5),
        )
    return ProcessOperator(
        task_id="process",
        pipeline=cfg.name,
        pipelines_file=str(pipelines_file),
        conn_id=cfg.spark_conn_id,
        application=PROCESS_APPLICATION,
        name=f"onceflow-{cfg.name}",
        driver_memory=cfg.driver_memory,
        executor_memory=cfg.executor_memory,
        retries=2,
        retry_delay=timedelta(seconds=5),
    )


def build_dags(path: Path | None = None) -> dict[str, DAG]:
    """The DAGs of a pipelines file (default: ONCEFLOW_PIPELINES, settings): each pipeline's,
    and the alerts DAG of each pipeline with alerts (airflow.alerts_dag).

    A task process parses the DAG file for its own DAG only (Airflow's parsing context names
    it): then only that pipeline's DAGs are built. Building them all took 0.5 s of every
    task's start with 500 pipelines (the whole file is still read and validated, as a
    task reads it: load_pipelines)."""
    path = Path(path or Settings.from_env().pipelines_file).resolve()
    wanted = get_parsing_context().dag_id
    pipelines = load_pipelines(path, check_references=wanted is None).values()
    own = [c for c in pipelines if wanted in (c.dag_id, c.alerts_dag_id)]
    dags = {}
    for cfg in own or pipelines:  # not one of this file's: all of them, as the processor
        dags[cfg.dag_id] = build_dag(cfg, path)
        if cfg.alerts is not None:
            from onceflow.airflow.alerts_dag import build_alerts_dag

            alerts = build_alerts_dag(cfg, str(path))
            dags[alerts.dag_id] = alerts
    return dags


def pipelines_dags(dag_file: str) -> dict[str, DAG]:
    """The DAGs of the pipelines.toml next to a DAG file (ONCEFLOW_PIPELINES wins when set):
    the whole of a user's DAG file is

        from onceflow.airflow import pipelines_dags
        globals().update(pipelines_dags(__file__))
    """
    raw = os.environ.get("ONCEFLOW_PIPELINES")
    return build_dags(Path(raw) if raw else Path(dag_file).resolve().parent / "pipelines.toml")
