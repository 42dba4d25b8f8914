"""Spark's Python worker daemon, with what Onceflow's tasks import already imported.

Spark forks every Python worker of an executor from one daemon process
(`spark.python.daemon.module`, pyspark.daemon by default). Started as this module, the
daemon imports the reader's, the fast form's and the stage writer's modules first (pyarrow,
numpy, librdkafka's client, psycopg2, onceflow), so each worker it forks has them in memory
instead of importing them itself: a second or two of a small batch's job, when a new JVM's
first job starts its workers (process sets it in local mode, onceflow.process.session; the
embedded stack's Spark Connect server too). A module that does not import here is left to
the worker, as without this daemon. It first takes the zips that repeat an installed pyspark
off the workers' path (onceflow.spark.python_path), before it imports pyspark.
"""

from __future__ import annotations

import contextlib
import importlib

PRELOADED = (
    "pyarrow",
    # RecordBatch.filter and the fast forms' column work import it on first use: 25 ms of
    # each new worker's first task here (Spark stops a worker idle for a minute, so a
    # pipeline whose batches are further apart meets new workers every batch)
    "pyarrow.compute",
    "pyarrow.csv",
    "numpy",
    "confluent_kafka",
    "psycopg2",
    "pyspark.worker",
    "onceflow.reader.frame",
    "onceflow.staging.fast_stage",
    "onceflow.staging.writer",
    "onceflow.ledger.fencing",  # the part fence's check, imported where it is used
    "onceflow.spark.rowhash",
)


def preload() -> None:
    for module in PRELOADED:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


if __name__ == "__main__":
    # before anything is imported from Spark's zips (onceflow.spark.python_path)
    from onceflow.spark.python_path import drop_bundled_copies

    drop_bundled_copies()
    preload()
    from pyspark.daemon import manager

    manager()
