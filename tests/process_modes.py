"""The process job as a DAG's process task runs it, in either process mode: spark-submitted
(process_mode = "spark-submit"), or with python in a session of a Spark Connect server
(process_mode = "connect": `--connect` with the server's URL in ONCEFLOW_SPARK_CONNECT_URL,
what the task does in its own process).

A module runs its tests in both by taking the `process_mode` fixture (conftest.py) into its
`env`, which then names the server in ONCEFLOW_TEST_CONNECT.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from onceflow.process.entry import CONNECT_URL_ENV
from onceflow.spark import driver_jit, jvm_archive
from onceflow.spark.applications import PROCESS_APPLICATION

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
CONNECT_ENV = "ONCEFLOW_TEST_CONNECT"
ROOT = Path(__file__).resolve().parents[1]


def job_env(
    home: Path,
    pipelines: str,
    dsn: str,
    bootstrap: str,
    connect_url: str | None = None,
    **more: str,
) -> dict[str, str]:
    """The process job's environment on a module's own services: the pipelines file's text
    `pipelines` written into `home` (made here), the ledger at `dsn`, the Kafka cluster at
    `bootstrap`, the variables `more`; in a session of the Spark Connect server at
    `connect_url`, else spark-submitted."""
    home.mkdir()
    (home / "pipelines.toml").write_text(pipelines)
    env = {
        **os.environ,
        "ONCEFLOW_POSTGRES_DSN": dsn,
        "ONCEFLOW_KAFKA_BOOTSTRAP": bootstrap,
        "ONCEFLOW_PIPELINES": str(home / "pipelines.toml"),
        "ONCEFLOW_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": str(ROOT / "include"),
        **more,
    }
    env.pop(CONNECT_ENV, None)
    if connect_url:
        env[CONNECT_ENV] = connect_url
    return env


def connect_url(env: dict) -> str | None:
    return env.get(CONNECT_ENV) or None


def process_command(
    env: dict, *args: str, master: str = "local[2]", conf: dict | None = None
) -> list[str]:
    """The command of one process attempt (`args`: the job's, --pipeline and --txid at
    least); `master` and `conf` are spark-submit's (a Connect server has its own). The
    driver JVM starts as the DAG's process task starts it for a small batch: with the class
    archive when this host has one, C1 only (onceflow.spark)."""
    url = connect_url(env)
    if url:
        return [sys.executable, PROCESS_APPLICATION, *args, "--connect"]
    settings = driver_jit.for_job(
        jvm_archive.with_archive({"spark.ui.enabled": "false", **(conf or {})}),
        offsets=0,
        fast_form=False,
    )
    cmd = [str(SPARK_SUBMIT), "--master", master, "--driver-memory", "512m"]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, PROCESS_APPLICATION, *args]


def run_process(
    env: dict, *args: str, timeout: float = 400, **spark: object
) -> subprocess.CompletedProcess:
    url = connect_url(env)
    return subprocess.run(
        process_command(env, *args, **spark),  # type: ignore[arg-type]
        env={**env, CONNECT_URL_ENV: url} if url else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
