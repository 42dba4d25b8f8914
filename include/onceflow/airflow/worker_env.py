"""What the process task takes from the worker it runs on, when it runs: the Python that
Spark's driver and executors start, the folders user transforms are imported from, the
driver JVM's class archive and the variables spark-submit inherits.

None of it is read when the DAG file is parsed: a DAG processor on another host (another
Python, JAVA_HOME, PATH or no archive at all) would otherwise hand its own to every worker.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from onceflow.config.pipeline import PipelineConfig
from onceflow.config.transform_path import spark_jobs_dir, transform_path
from onceflow.spark import jvm_archive

# Passed to spark-submit (as env_vars, which Airflow renders into its UI: nothing secret; the
# ledger's DSN and the Kafka settings are the process task's own, ProcessOperator.execute).
_PASSTHROUGH = (
    "ONCEFLOW_HOME",
    "ONCEFLOW_PG_PORT",
    "ONCEFLOW_KAFKA_PORT",
    "SPARK_LOCAL_IP",
    "JAVA_HOME",
    "PATH",
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
)


def user_folders(pipelines_file: Path) -> tuple[Path, ...]:
    """Where the job imports user transforms from: config.transform_path, then the
    pipelines file's folder (a user's transform package lives next to it)."""
    folder, path = pipelines_file.resolve().parent, transform_path()
    return (*path, *(() if folder in path else (folder,)))


def process_env(pipelines_file: Path) -> dict[str, str]:
    """The job's variables: the pipelines file, the folders of user transforms
    (ONCEFLOW_SPARK_JOBS, ONCEFLOW_PYTHONPATH) and those of _PASSTHROUGH this worker has."""
    env = {k: os.environ[k] for k in _PASSTHROUGH if k in os.environ}
    env["ONCEFLOW_PIPELINES"] = str(pipelines_file.resolve())
    env["ONCEFLOW_SPARK_JOBS"] = str(spark_jobs_dir())
    env["ONCEFLOW_PYTHONPATH"] = os.pathsep.join(str(p) for p in user_folders(pipelines_file)[1:])
    return env


def process_conf(cfg: PipelineConfig, pipelines_file: Path) -> dict[str, str]:
    """spark-submit's conf: this worker's Python ($ONCEFLOW_SPARK_PYTHON, else its own) for
    the driver and the executors, the executors' PYTHONPATH, the pipeline's spark_conf over
    those, and the driver JVM's class archive when this worker has one."""
    python = os.environ.get("ONCEFLOW_SPARK_PYTHON", sys.executable)
    return jvm_archive.with_archive(
        {
            "spark.pyspark.python": python,
            "spark.pyspark.driver.python": python,
            # executors import onceflow, and a user transform's module when its Python UDFs
            # are unpickled there (a shared filesystem: local or single-host deployments;
            # on other masters process ships the module itself, onceflow.spark.shipping)
            "spark.executorEnv.PYTHONPATH": os.pathsep.join(
                str(p) for p in user_folders(pipelines_file)
            ),
            **cfg.spark_conf,
        }
    )
