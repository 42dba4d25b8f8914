"""The process job's spark-submit entry: its arguments, and its exit codes.

`main` runs one process attempt of a planned txid (onceflow.process) and says how it ended
by its exit code (errors.ProcessExit), which the DAG's process task reads to retry or not.
onceflow/spark_app/process.py is the application file that calls it.

How the DAG submits it (onceflow.airflow.dag_factory.build_dag, through
onceflow.airflow.tasks.ProcessOperator, a SparkSubmitOperator):

    application       onceflow.spark.applications.PROCESS_APPLICATION (a file of the installed package)
    application_args  ["--pipeline=NAME", "--txid=TXID"], set when the task runs from
                      its rendered `txid` (the run id, TxidOperator): every other option of
                      the job keeps its default
    conn_id           the pipeline's spark_conn_id (default spark_default): the master
    name              onceflow-NAME
    driver_memory,    the pipeline's (default 512m and 1g)
    executor_memory
    conf              spark.pyspark.python and spark.pyspark.driver.python
                      ($ONCEFLOW_SPARK_PYTHON, else the Airflow worker's interpreter),
                      spark.executorEnv.PYTHONPATH (where user transforms are imported
                      from: config.transform_path, then the pipelines file's folder), the
                      pipeline's spark_conf over those, and the driver JVM's class archive
                      in spark.driver.extraJavaOptions when the worker has one
                      (onceflow.spark.jvm_archive); all of it read on the worker when
                      the task runs (onceflow.airflow.worker_env)
    env_vars          ONCEFLOW_PIPELINES (the pipelines file), ONCEFLOW_SPARK_JOBS,
                      ONCEFLOW_PYTHONPATH (the user's folders besides spark_jobs), and those
                      of ONCEFLOW_HOME, ONCEFLOW_PG_PORT, ONCEFLOW_KAFKA_PORT,
                      SPARK_LOCAL_IP, JAVA_HOME, PATH, PYSPARK_PYTHON and
                      PYSPARK_DRIVER_PYTHON that the Airflow worker has
                      (worker_env.process_env, likewise on the worker)
    environment       ONCEFLOW_POSTGRES_DSN, ONCEFLOW_KAFKA_BOOTSTRAP and
                      ONCEFLOW_KAFKA_CONFIG from the pipeline's Airflow connections, set by
                      the task in its own process (spark-submit inherits them; they are
                      secrets, so never env_vars)

The DAG passes no py_files and no --ship-package: local mode needs neither (workers import
onceflow like the driver does), and on any master that is not local the job ships a user
transform's module itself (onceflow.spark.shipping). Executors on hosts without onceflow installed
need --ship-package (the job then zips the package it imported) or a py_files zip with
`onceflow/` at its root, in a submission of one's own.

Imports are lazy: a no-op spark-submit already costs ~6 s, and a bad argument should fail
before the JVM work starts.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import ProcessExit
from onceflow.process.attempt_spec import CLIENTS, JobOptions, ReadOptions

if TYPE_CHECKING:  # imported when the attempt runs (the docstring: imports are lazy)
    from onceflow.kafka.client import KafkaCluster
    from onceflow.ledger.db import Ledger
    from onceflow.process.session import SparkSource

log = logging.getLogger("onceflow.process")

CONNECT_URL_ENV = "ONCEFLOW_SPARK_CONNECT_URL"

EPILOG = """\
example:
  spark-submit --master 'local[2]' --driver-memory 512m \\
      --conf spark.pyspark.python=/opt/onceflow/.venv/bin/python \\
      "$(python -c 'from onceflow.spark.applications import PROCESS_APPLICATION as a; print(a)')" \\
      --pipeline my_pipeline --txid manual__2024-05-01T12:00:00+00:00

environment (onceflow.settings; the DAG's process task sets them from its Airflow
connections): ONCEFLOW_POSTGRES_DSN (ledger and sink), ONCEFLOW_KAFKA_BOOTSTRAP,
ONCEFLOW_KAFKA_CONFIG (librdkafka client settings as JSON: TLS, SASL), ONCEFLOW_PIPELINES
(or --pipelines-file); with --connect, ONCEFLOW_SPARK_CONNECT_URL.

exit codes: 0 staged; 1 failed (the reason is in the ledger's last_error; retry);
2 bad arguments, unknown pipeline or txid (plan must run first), or the transform must
change (it does not fit its sink, or it raised on a record under on_transform_error =
"fail": the ledger's last_error names the record); 3 fenced: a newer
attempt of the txid took over (do not retry this one); 4 the txid was abandoned by
`onceflow reset-offsets` (it never processes again).
"""


@dataclass(frozen=True)
class Command:
    """The command line, parsed: which txid of which pipeline (from which pipelines file),
    whether the stage job runs on a Spark Connect server, and the job's options."""

    pipeline: str
    txid: str
    pipelines_file: Path | None
    connect: bool
    options: JobOptions


def parse_args(argv: list[str] | None = None) -> Command:
    p = argparse.ArgumentParser(
        prog="process.py",
        description="Stage the output of one planned Onceflow transaction (txid): read its "
        "recorded Kafka ranges, transform, stage tagged with a new attempt, record counts.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--pipeline", required=True, help="pipeline name (a [pipelines.NAME] table)")
    p.add_argument(
        "--txid", required=True, help="the DAG run's run_id, exactly as plan recorded it"
    )
    p.add_argument(
        "--pipelines-file",
        type=Path,
        help="pipelines TOML file (default: $ONCEFLOW_PIPELINES or dags/pipelines.toml)",
    )
    p.add_argument(
        "--client",
        choices=CLIENTS,
        default=ReadOptions.client,
        help="Kafka client of the reader (default: confluent, i.e. librdkafka)",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=ReadOptions.timeout_s,
        metavar="SECONDS",
        help="fail a range after this long without progress (default: 60)",
    )
    p.add_argument(
        "--no-fast-form",
        action="store_true",
        help="send every record through the transform in the JVM, as the pipeline's "
        "`fast_form = false` does (by default, a transform with a fast form has the records "
        "it accepts parsed and staged by the reader's Python worker, and only the rest "
        "transformed in the JVM: onceflow.staging.fast_stage)",
    )
    p.add_argument(
        "--ship-package",
        action="store_true",
        help="zip the imported onceflow package and add it, and a user transform's module, "
        "to the executors' Python path (for clusters whose executors do not have onceflow; "
        "local mode does not need it; the module is shipped to a master that is not local "
        "anyway)",
    )
    p.add_argument(
        "--connect",
        action="store_true",
        help=f"run the stage job in a session of the Spark Connect server whose URL "
        f"(sc://host:port/;params) is in {CONNECT_URL_ENV}, instead of a Spark of its own: "
        "run this file with python, not spark-submit (what a process task of process_mode = "
        '"connect" does in its own process; onceflow.process.connect_session). The URL is '
        "read from the environment because it may hold a token, which a command line shows "
        "to every user of the host",
    )
    args = p.parse_args(argv)
    return Command(
        pipeline=args.pipeline,
        txid=args.txid,
        pipelines_file=args.pipelines_file,
        connect=args.connect,
        options=JobOptions(
            read=ReadOptions(client=args.client, timeout_s=args.read_timeout),
            fast_form=not args.no_fast_form,
            ship_package=args.ship_package,
        ),
    )


def main(argv: list[str] | None = None) -> int:
    command = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    from onceflow.config.pipelines_file import get_pipeline
    from onceflow.errors import ConfigError
    from onceflow.kafka.client import cluster_from_env
    from onceflow.process.connect_session import ConnectSpark
    from onceflow.process.session import SubmittedSpark
    from onceflow.settings import Settings

    source: SparkSource = SubmittedSpark()
    if command.connect:
        url = os.environ.get(CONNECT_URL_ENV, "")
        if not url:
            log.error("onceflow process: --connect needs the server's URL in %s", CONNECT_URL_ENV)
            return ProcessExit.USAGE
        source = ConnectSpark(url)
    settings = Settings.from_env()
    try:
        cfg = get_pipeline(  # the attempt imports the transform: load_pipelines
            command.pipelines_file or settings.pipelines_file,
            command.pipeline,
            check_references=False,
        )
        # the process task put its connection's settings there
        kafka = cluster_from_env(settings.kafka_bootstrap)
    except ConfigError as e:
        log.error("onceflow process: %s", e)
        return ProcessExit.USAGE
    return run_attempt(cfg, command.txid, command.options, settings.ledger, kafka, source)


def run_attempt(
    cfg: PipelineConfig,
    txid: str,
    options: JobOptions,
    ledger: Ledger,
    kafka: KafkaCluster,
    source: SparkSource,
) -> ProcessExit:
    """One process attempt of `txid` of the pipeline `cfg`, its stage job run with
    `options` in a Spark session from `source`: claim, stage, mark staged; how it ended as
    its ProcessExit (a failure is recorded in the ledger first). The ledger and the
    source cluster: `ledger`, `kafka`."""
    started = time.monotonic()
    from onceflow.errors import (
        AbandonedTxidError,
        ConfigError,
        FencedAttemptError,
        KafkaAccessError,
        LogIdentityError,
        SinkSchemaError,
        TransformError,
        UnknownTxidError,
    )
    from onceflow.hooks.sink import sink_for
    from onceflow.process.attempt import (
        claim_new_attempt,
        log_staged,
        record_failure,
        stage_and_mark,
    )
    from onceflow.process.decoding import txid_decoder
    from onceflow.process.failures import short_error
    from onceflow.process.stage_job import StageInputs

    try:
        attempt, ranges = claim_new_attempt(ledger, cfg, txid)
    except UnknownTxidError as e:
        log.error("onceflow process: %s", e)
        return ProcessExit.USAGE
    except AbandonedTxidError as e:
        log.error("onceflow process: %s", e)
        return ProcessExit.ABANDONED

    claimed_at = time.monotonic()
    timings: dict[str, float] = {"claim": claimed_at - started}
    try:
        # once per process task: every stage job and probe of the attempt stages into it
        sink = sink_for(cfg)
        decoder = txid_decoder(ledger, cfg, attempt, ranges, kafka, options.read.reader_args())
        inputs = StageInputs(attempt, cfg, sink, ledger, kafka, options, decoder)
        staged = stage_and_mark(inputs, ranges, source, claimed_at, timings)
    except (TransformError, SinkSchemaError, LogIdentityError, KafkaAccessError, ConfigError) as e:
        # the transform, its sink tables, the broker's log, the Kafka connection's settings or
        # the pipeline's (a spark_conf key a Connect session refuses) must change first: a
        # retry would fail the same way (a transform that filters or adds
        # rows: mark_staged's records-read check; a topic re-created since plan: reset-offsets)
        log.error("onceflow process: txid=%s: %s", txid, e)
        record_failure(ledger, attempt, short_error(e))
        return ProcessExit.USAGE
    except FencedAttemptError as e:  # from a stage task too: onceflow.staging.task_errors
        log.error(
            "onceflow process fenced: txid=%s attempt=%s: %s",
            txid,
            attempt.attempt,
            short_error(e),
        )
        return ProcessExit.FENCED
    except AbandonedTxidError as e:
        log.error("onceflow process: txid=%s: %s", txid, short_error(e))
        return ProcessExit.ABANDONED
    except Exception as e:  # noqa: BLE001 - every failure is reported and recorded
        reason = short_error(e)
        log.error("onceflow process failed: txid=%s attempt=%s: %s", txid, attempt.attempt, reason)
        record_failure(ledger, attempt, reason)
        return ProcessExit.FAILED

    log_staged(attempt, staged, started, timings)
    return ProcessExit.OK
