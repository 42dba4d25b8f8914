"""One DAG per configured pipeline: plan -> process (spark-submit) -> commit.

A declaration only: reading the pipelines file (and whether the driver JVM's class archive
exists, see onceflow.jvm_archive) is the sole I/O, and nothing touches the ledger, the broker
or Spark until a task runs. txid is `{{ run_id }}` everywhere; no
logical-date macro is used (NULL for runs triggered through the API).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Asset

from onceflow import jvm_archive
from onceflow.airflow.tasks import CommitOperator, ProcessOperator, plan_task
from onceflow.config import PipelineConfig, load_pipelines
from onceflow.settings import PROJECT_ROOT, Settings, spark_jobs_dir, transform_path
from onceflow.sinks import sink_for

# Passed to spark-submit so the job finds the same ledger, broker and pipelines file.
_PASSTHROUGH = (
    "ONCEFLOW_POSTGRES_DSN",
    "ONCEFLOW_KAFKA_BOOTSTRAP",
    "ONCEFLOW_PIPELINES",
    "ONCEFLOW_HOME",
    "ONCEFLOW_PG_PORT",
    "ONCEFLOW_KAFKA_PORT",
    "ONCEFLOW_SPARK_JOBS",  # where the driver imports user transforms from,
    "ONCEFLOW_PYTHONPATH",  # and the user's own folders (settings.transform_path)
    "SPARK_LOCAL_IP",
    "JAVA_HOME",
    "PATH",
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
)


def process_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASSTHROUGH if k in os.environ}
    include = str(PROJECT_ROOT / "include")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (include, os.environ.get("PYTHONPATH", "")) if p)
    return env


def build_dag(cfg: PipelineConfig) -> DAG:
    python = os.environ.get("ONCEFLOW_SPARK_PYTHON", sys.executable)
    conf = jvm_archive.with_archive(
        {
            "spark.pyspark.python": python,
            "spark.pyspark.driver.python": python,
            # executors import onceflow, and a user transform's module when its Python UDFs
            # are unpickled there (a shared filesystem: local or single-host deployments;
            # on other masters process ships the module itself, onceflow.shipping)
            "spark.executorEnv.PYTHONPATH": os.pathsep.join(
                str(p) for p in (PROJECT_ROOT / "include", *transform_path())
            ),
            **cfg.spark_conf,
        }
    )
    with DAG(
        dag_id=cfg.dag_id,
        description=cfg.description or f"Onceflow pipeline {cfg.name}: {', '.join(cfg.topics)}",
        schedule=cfg.schedule,
        catchup=False,
        max_active_runs=cfg.max_active_runs,
        tags=["onceflow"],
        doc_md=(
            f"Exactly-once pipeline **{cfg.name}** (topics {', '.join(cfg.topics)}). Each run is one "
            "transaction whose txid is the run id: plan records its offset ranges in the ledger, "
            "process stages the output with Spark, commit publishes it in seq order. Clearing or "
            "retrying a run replays the same ranges."
        ),
        default_args={"owner": "onceflow"},
    ) as dag:
        plan = PythonOperator(
            task_id="plan",
            python_callable=plan_task,
            op_kwargs={"pipeline": cfg.name, "run_id": "{{ run_id }}"},
            retries=2,
            retry_delay=timedelta(seconds=5),
        )
        process = ProcessOperator(
            task_id="process",
            conn_id="spark_default",
            application=str(spark_jobs_dir() / "process.py"),
            application_args=["--pipeline", cfg.name, "--txid", "{{ run_id }}"],
            name=f"onceflow-{cfg.name}",
            conf=conf,
            env_vars=process_env(),
            driver_memory=cfg.driver_memory,
            executor_memory=cfg.executor_memory,
            retries=2,
            retry_delay=timedelta(seconds=5),
        )
        commit = CommitOperator(
            task_id="commit",
            pipeline=cfg.name,
            # Each committed txid is an event of the sink's Asset (txid, seq and counts in its
            # extra): downstream DAGs can be scheduled on new data.
            outlets=[
                Asset(
                    name=f"onceflow_{cfg.name}",
                    uri=sink_for(cfg).asset_uri(Settings.from_env().postgres_dsn),
                )
            ],
            poll_interval=cfg.commit_poke_interval,
            # Commit is idempotent, so retries are free (a lost ledger connection, say).
            retries=3,
            retry_delay=timedelta(seconds=5),
        )
        plan >> process >> commit
    return dag


def build_dags(path: Path | None = None) -> dict[str, DAG]:
    path = path or Settings.from_env().pipelines_file
    return {cfg.dag_id: build_dag(cfg) for cfg in load_pipelines(path).values()}
