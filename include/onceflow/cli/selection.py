"""What a command works on: the pipeline it names (or the only one configured), and the ledger
and Kafka cluster it reads, from ONCEFLOW_* variables or from the Airflow connections
--ledger-conn and --kafka-conn name."""

from __future__ import annotations

import contextlib
import os
import sys

from onceflow.config.pipeline import PipelineConfig
from onceflow.config.pipelines_file import get_pipeline, load_pipelines
from onceflow.errors import PipelineNotChosenError
from onceflow.settings import Settings


def select_pipeline(settings: Settings, name: str | None) -> PipelineConfig:
    """The pipeline --pipeline names; without it, the pipelines file's only one."""
    if name:
        return get_pipeline(settings.pipelines_file, name)
    pipelines = load_pipelines(settings.pipelines_file)
    if len(pipelines) != 1:
        raise PipelineNotChosenError(tuple(sorted(pipelines)))
    return next(iter(pipelines.values()))


def use_connections(ledger_conn: str | None, kafka_conn: str | None) -> None:
    """--ledger-conn / --kafka-conn: this process's ONCEFLOW_* variables from Airflow
    connections, so every command (and the clients it makes) reads them as usual. Airflow's
    own log lines while it reads them go to stderr: stdout stays the command's (--json)."""
    from onceflow.hooks.kafka import kafka_cluster
    from onceflow.hooks.ledger import ledger_dsn

    with contextlib.redirect_stdout(sys.stderr):
        if ledger_conn:
            dsn, _ = ledger_dsn(ledger_conn, "--ledger-conn", key="")
            os.environ["ONCEFLOW_POSTGRES_DSN"] = dsn
        if kafka_conn:
            cluster = kafka_cluster(kafka_conn, "--kafka-conn", key="")
            os.environ.update(cluster.to_env())
