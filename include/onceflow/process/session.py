"""The process job's Spark session, the code shipped to its executors, and the stage
attempt run in it.

One session per process task, opened only when the batch has records to read and given the
user's transform module (and onceflow, on request) on the executors' Python path
(onceflow.spark.shipping), by the pipeline's process mode:

- spark-submit (`SubmittedSpark`): the session of the job's own driver, which spark-submit
  started; it ends with the driver;
- connect (`onceflow.process.connect_session.ConnectSpark`): a session of a long-lived
  Spark Connect server, left open for the pipeline's next batch.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from onceflow.config.pipeline import PipelineConfig
from onceflow.process.poison_records import stage_attempt
from onceflow.process.stage_job import StageInputs, StageJob
from onceflow.process.table_stages import stage_tables
from onceflow.ranges import OffsetRange
from onceflow.reader.input_ranges import input_ranges
from onceflow.spark.shipping import py_files, ships_user_code

log = logging.getLogger("onceflow.process")

# Applied unless spark-submit --conf or the pipeline's spark_conf sets them.
SPARK_DEFAULTS = {
    # a record-wise transform shuffles nothing; an aggregating one's output partitions
    # (its parts) are this many
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    "spark.sql.adaptive.enabled": "false",  # a narrow plan gains nothing from AQE
    "spark.speculation": "false",  # safe either way (the part fence), but wasteful here
}
# In local mode (the executors are this host's Python, which has onceflow): workers forked
# with the reader's and the stage writer's modules imported. Elsewhere the executors may not
# have onceflow at all (the job ships it), and a daemon module they cannot import would
# fail every task.
LOCAL_DEFAULTS = {"spark.python.daemon.module": "onceflow.spark.spark_daemon"}


class SparkSource(Protocol):
    """Where a process attempt gets its Spark session."""

    def session(self, cfg: PipelineConfig, ship_package: bool) -> AbstractContextManager[Any]:
        """A session for the pipeline `cfg`'s stage job, with the user transform's module
        (and onceflow, with `ship_package`) on the executors' Python path as
        onceflow.spark.shipping says."""
        ...


class SubmittedSpark:
    """The session of the driver that spark-submit started (process_mode = "spark-submit").

    It is not stopped: the driver ends with the attempt, and the JVM's shutdown hook stops
    the context. pyspark's own stop() spent 0.9 s of every small batch waiting for its
    accumulator server to shut down (the JVM's part of it: 0.07 s; measured here)."""

    @contextmanager
    def session(self, cfg: PipelineConfig, ship_package: bool) -> Iterator[Any]:
        spark = spark_session(cfg)
        # the zips must outlive the job: the driver serves them to the executors from there
        with tempfile.TemporaryDirectory(prefix="onceflow-py-files-") as folder:
            sc = spark.sparkContext
            for path in py_files(cfg.transform, sc.master, ship_package, Path(folder)):
                sc.addPyFile(path)
                log.info("shipped to the executors' Python path: %s", path)
            yield spark


def run_stage_attempt(
    inputs: StageInputs,
    source: SparkSource,
    ranges: list[OffsetRange],
    timings: dict[str, float],
) -> StageJob:
    """Read, transform and stage the txid's `ranges` into the sink in a Spark session from
    `source` (onceflow.process.poison_records.stage_attempt); returns what the job staged
    and read. An empty batch (no offsets in any range) has no input partition: no Spark
    session is opened."""
    cfg = inputs.cfg
    pieces = input_ranges(ranges, cfg.records_per_input_partition)
    if not pieces:
        log.info("no offsets to read: nothing to stage, no Spark session needed")
        return StageJob(parts=0, records_read=0, bytes_read=0, reads=[])
    t0 = time.monotonic()
    _without_ipython()
    with source.session(cfg, inputs.options.ship_package) as spark:
        timings["session"] = time.monotonic() - t0
        log.info("spark session ready in %.1f s", timings["session"])
        if cfg.sink.tables is not None:  # a stage job per table
            job = stage_tables(spark, ranges, inputs, timings)
        else:
            job = stage_attempt(spark, pieces, inputs, timings)
        t0 = time.monotonic()
    timings["stop"] = time.monotonic() - t0
    return job


def spark_session(cfg: PipelineConfig) -> Any:
    """The Spark session: spark-submit's settings win, then the pipeline's, then SPARK_DEFAULTS."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    # Connect to spark-submit's JVM first: before that, SparkConf() is an empty Python dict
    # and would not see --master / --conf (the job then silently ran in local mode).
    SparkContext._ensure_initialized()
    submitted = SparkConf()  # what spark-submit --conf and spark-defaults.conf set
    builder = SparkSession.builder.appName(f"onceflow-process-{cfg.name}")
    if not submitted.contains("spark.master"):
        builder = builder.master("local[2]")
    defaults = dict(SPARK_DEFAULTS)
    if not ships_user_code(submitted.get("spark.master", "local[2]"), False):
        defaults.update(LOCAL_DEFAULTS)
    if not os.environ.get("PYSPARK_PYTHON"):
        # Workers must run an interpreter with pyarrow, confluent-kafka, psycopg2 and onceflow:
        # this one has them (the default, `python3` on PATH, often has not).
        defaults["spark.pyspark.python"] = sys.executable
    for key, value in {**defaults, **cfg.spark_conf}.items():
        if not submitted.contains(key):
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _without_ipython() -> None:
    """Where IPython is not installed, make `import IPython` fail at once: pyspark records
    the call site of each DataFrame and Column call for its error messages, and tries that
    import each time (pyspark.errors.utils._capture_call_site), searching sys.path anew for
    a module that is not there: 84 us a call against 8 us, some 0.04 s of building each
    stage job here. A None in sys.modules is Python's own "no such module"."""
    import importlib.util

    if "IPython" not in sys.modules and importlib.util.find_spec("IPython") is None:
        sys.modules["IPython"] = None  # type: ignore[assignment]
