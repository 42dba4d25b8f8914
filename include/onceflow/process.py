"""Onceflow process phase: stage the output of one planned txid; `main` is the spark-submit
job (onceflow/spark_app/process.py is the application file that calls it).

Claims a new attempt of the txid in the ledger (fencing every earlier attempt), reads
exactly the txid's recorded ranges from Kafka, transforms them in Spark and stages the rows
tagged (txid, attempt, part), then records the staged counts and checksum in the ledger,
with the records the reader counted: the ledger refuses an attempt whose rows + dead
letters are not the records read (a transform that filtered or added rows). Commit
publishes them later, in seq order.

Input partition i of n is staged as part i, or, when the transform has a fast form and its
sink takes one (the pipeline's `fast_form`, default true; onceflow.transforms), as two
parts: i, the records the fast form accepted, parsed and COPYed by the Python worker that
read them; and n + i, the records it declined, through the transform in the JVM
(onceflow.fast_stage).

How the DAG runs it (SparkSubmitOperator):
    application   onceflow.spark_app.PROCESS_APPLICATION (a file of the installed package)
    application_args  ["--pipeline", NAME, "--txid", "{{ run_id }}"]
    conf          {"spark.pyspark.python": VENV_PYTHON} (or env PYSPARK_PYTHON), plus the
                  pipeline's spark_conf, plus the driver JVM's class archive in
                  spark.driver.extraJavaOptions when this host has one (onceflow.jvm_archive);
                  master local[2] (or the cluster's), driver_memory from the pipeline (>= 512m)
    env_vars      ONCEFLOW_PIPELINES, ONCEFLOW_SPARK_JOBS and ONCEFLOW_PYTHONPATH (where a
                  user transform's module is imported from: also the pipelines file's
                  folder, and on spark.executorEnv.PYTHONPATH), SPARK_LOCAL_IP=127.0.0.1
                  on a single host
    environment   ONCEFLOW_POSTGRES_DSN, ONCEFLOW_KAFKA_BOOTSTRAP and ONCEFLOW_KAFKA_CONFIG
                  from the pipeline's Airflow connections, set by the task in its own
                  process (spark-submit inherits them; they are secrets, so never env_vars)
    py_files      a zip with `onceflow/` at its root when executors do not have the package
                  installed (cd include && zip -qr /tmp/onceflow.zip onceflow), or pass
                  --ship-package and the job zips the package it imported itself.
                  Local mode needs neither: workers import onceflow like the driver does.
                  A user transform's module is shipped by the job itself on any master that
                  is not local, or with --ship-package (onceflow.shipping).

Imports are lazy: a no-op spark-submit already costs ~6 s, and a bad argument should fail
before the JVM work starts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onceflow.errors import ProcessExit

log = logging.getLogger("onceflow.process")

DEAD_VALUE_BYTES = 64 << 10  # a dead letter keeps the value's first 64 KiB

# Applied unless spark-submit --conf or the pipeline's spark_conf sets them.
SPARK_DEFAULTS = {
    "spark.sql.shuffle.partitions": "2",  # nothing shuffles; keep any stray shuffle small
    "spark.ui.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    "spark.sql.adaptive.enabled": "false",  # a narrow plan gains nothing from AQE
    "spark.speculation": "false",  # safe either way (the task fence), but wasteful here
}

EPILOG = """\
example:
  spark-submit --master 'local[2]' --driver-memory 512m \\
      --conf spark.pyspark.python=/opt/onceflow/.venv/bin/python \\
      "$(python -c 'from onceflow.spark_app import PROCESS_APPLICATION as a; print(a)')" \\
      --pipeline orders --txid manual__2024-05-01T12:00:00+00:00

environment (onceflow.settings; the DAG's process task sets them from its Airflow
connections): ONCEFLOW_POSTGRES_DSN (ledger and sink), ONCEFLOW_KAFKA_BOOTSTRAP,
ONCEFLOW_KAFKA_CONFIG (librdkafka client settings as JSON: TLS, SASL), ONCEFLOW_PIPELINES
(or --pipelines-file).

exit codes: 0 staged; 1 failed (the reason is in the ledger's last_error; retry);
2 bad arguments, unknown pipeline or txid (plan must run first), or the transform must
change (it does not fit its sink, or it raised on a record under on_transform_error =
"fail": the ledger's last_error names the record); 3 fenced: a newer
attempt of the txid took over (do not retry this one); 4 the txid was abandoned by
`onceflow reset-offsets` (it never processes again).
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
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
        choices=("confluent", "kafka-python"),
        default="confluent",
        help="Kafka client of the reader (default: confluent, i.e. librdkafka)",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="fail a range after this long without progress (default: 60)",
    )
    p.add_argument(
        "--no-fast-form",
        action="store_true",
        help="send every record through the transform in the JVM, as the pipeline's "
        "`fast_form = false` does (by default, a transform with a fast form has the records "
        "it accepts parsed and staged by the reader's Python worker as parts 0..n-1, and "
        "the rest transformed in the JVM as parts n..2n-1)",
    )
    p.add_argument(
        "--ship-package",
        action="store_true",
        help="zip the imported onceflow package and add it, and a user transform's module, "
        "to the executors' Python path (for clusters whose executors do not have onceflow; "
        "local mode does not need it; the module is shipped to a master that is not local "
        "anyway)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    started = time.monotonic()

    from onceflow import broker, failpoints, ledger
    from onceflow.config import get_pipeline
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
    from onceflow.settings import Settings
    from onceflow.states import BatchState

    settings = Settings.from_env()
    try:
        cfg = get_pipeline(args.pipelines_file or settings.pipelines_file, args.pipeline)
        kafka = settings.kafka_cluster()  # the process task put its connection's settings there
    except ConfigError as e:
        log.error("onceflow process: %s", e)
        return ProcessExit.USAGE
    dsn, txid = settings.postgres_dsn, args.txid

    try:
        claim = ledger.claim_attempt(dsn, cfg.name, txid)
    except UnknownTxidError as e:
        log.error("onceflow process: %s", e)
        return ProcessExit.USAGE
    except AbandonedTxidError as e:
        log.error("onceflow process: %s", e)
        return ProcessExit.ABANDONED
    attempt = claim.attempt
    log.info(
        "onceflow process claimed pipeline=%s txid=%s seq=%s attempt=%s state=%s ranges=%d",
        cfg.name,
        txid,
        claim.seq,
        attempt,
        claim.state,
        len(claim.ranges),
    )
    if claim.state == BatchState.COMMITTED:
        log.info("txid %s is committed: this attempt re-processes it (commit republishes)", txid)
    for r in claim.ranges:
        log.info(
            "onceflow process range txid=%s topic=%s partition=%d from=%d until=%d offsets=%d",
            txid,
            r.topic,
            r.partition,
            r.from_offset,
            r.until_offset,
            r.size,
        )

    claimed_at = time.monotonic()
    timings: dict[str, float] = {"claim": claimed_at - started}
    try:
        failpoints.hit("process.fail", txid)
        topics = tuple(sorted({r.topic for r in claim.ranges}))
        ids = broker.topic_ids(kafka, cfg.name, topics)
        ledger.verify_topic_ids(dsn, cfg.name, txid, ids)
        job = _run_spark(args, kafka, dsn, cfg, txid, attempt, claim.ranges, timings)
        # and once read: only ids unchanged since plan prove the job read plan's log (a topic
        # re-created while it ran passed the check above, and its reader read the new log's
        # records at the ranges' offsets)
        ids = broker.topic_ids(kafka, cfg.name, topics)
        ledger.verify_topic_ids(dsn, cfg.name, txid, ids)
        failpoints.hit("process.before_mark_staged", txid)
        t0 = time.monotonic()
        staged = ledger.mark_staged(
            dsn,
            cfg,
            txid,
            attempt,
            process_seconds=time.monotonic() - claimed_at,
            parts=job.parts,
            records_read=job.records_read,
            bytes_read=job.bytes_read,
            reads=job.reads,
        )
        timings["mark_staged"] = time.monotonic() - t0
    except (TransformError, SinkSchemaError, LogIdentityError, KafkaAccessError) as e:
        # the transform, its sink tables, the broker's log or the Kafka connection's settings
        # must change first: a retry would fail the same way (a transform that filters or adds
        # rows: mark_staged's records-read check; a topic re-created since plan: reset-offsets)
        log.error("onceflow process: txid=%s: %s", txid, e)
        try:
            ledger.record_error(
                dsn, cfg.name, txid, f"process attempt {attempt}: {_short_error(e)}"
            )
        except Exception as e2:  # noqa: BLE001
            log.error("could not record the error in the ledger: %s", e2)
        return ProcessExit.USAGE
    except Exception as e:  # noqa: BLE001 - every failure is reported and recorded
        reason = _short_error(e)
        if isinstance(e, FencedAttemptError) or reason.startswith("FencedAttemptError"):
            log.error("onceflow process fenced: txid=%s attempt=%s: %s", txid, attempt, reason)
            return ProcessExit.FENCED
        if isinstance(e, AbandonedTxidError) or reason.startswith("AbandonedTxidError"):
            log.error("onceflow process: txid=%s: %s", txid, reason)
            return ProcessExit.ABANDONED
        log.error("onceflow process failed: txid=%s attempt=%s: %s", txid, attempt, reason)
        try:
            ledger.record_error(dsn, cfg.name, txid, f"process attempt {attempt}: {reason}")
        except Exception as e2:  # noqa: BLE001
            log.error("could not record the error in the ledger: %s", e2)
        return ProcessExit.FAILED

    log.info(
        "onceflow process pipeline=%s txid=%s seq=%s attempt=%s records=%d valid=%d dead=%d "
        "seconds=%.2f",
        cfg.name,
        txid,
        claim.seq,
        attempt,
        staged.records,
        staged.valid,
        staged.dead,
        time.monotonic() - started,
    )
    timings["total"] = time.monotonic() - started
    # machine-readable, for bench/: where the seconds of this attempt went
    log.info(
        "onceflow process timings %s", json.dumps({k: round(v, 3) for k, v in timings.items()})
    )
    return ProcessExit.OK


@dataclass(frozen=True)
class StageJob:
    """What one stage job did: the parts it staged, the records its reader handed on and
    their bytes (key + value)."""

    parts: int
    records_read: int
    bytes_read: int
    reads: list[Any]  # onceflow.range_digest.RangeRead per partition: what the reader saw


def _run_spark(
    args: argparse.Namespace,
    bootstrap: str,
    dsn: str,
    cfg: Any,
    txid: str,
    attempt: int,
    ranges: list[Any],
    timings: dict[str, float],
) -> StageJob:
    """Read, transform and stage in one Spark job; returns the parts staged and the records
    read.

    Input partition k (Spark partition k, stage part k) is input_ranges(...)[k]; with the
    transform's fast form its declined records are part n + k (onceflow.fast_stage), so there
    are 2n parts. An empty batch (no offsets in any range) has no input partition: no Spark
    session is started.
    """
    import tempfile

    from onceflow.reader import input_ranges
    from onceflow.shipping import py_files

    pieces = input_ranges(ranges, cfg.records_per_input_partition)
    if not pieces:
        log.info("no offsets to read: nothing to stage, no Spark session needed")
        return StageJob(parts=0, records_read=0, bytes_read=0, reads=[])
    t0 = time.monotonic()
    spark = _session(cfg)
    timings["session"] = time.monotonic() - t0
    log.info("spark session ready in %.1f s", timings["session"])
    try:
        # the zips must outlive the job: the driver serves them to the executors from there
        with tempfile.TemporaryDirectory(prefix="onceflow-py-files-") as folder:
            sc = spark.sparkContext
            for path in py_files(cfg.transform, sc.master, args.ship_package, Path(folder)):
                sc.addPyFile(path)
                log.info("shipped to the executors' Python path: %s", path)
            return stage_attempt(
                spark,
                pieces,
                bootstrap=bootstrap,
                dsn=dsn,
                cfg=cfg,
                txid=txid,
                attempt=attempt,
                client=args.client,
                read_timeout=args.read_timeout,
                fast_form=cfg.fast_form and not args.no_fast_form,
                timings=timings,
            )
    finally:
        t0 = time.monotonic()
        spark.stop()
        timings["stop"] = time.monotonic() - t0


def _session(cfg: Any) -> Any:
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


def staged_frame(spark: Any, pieces: list[Any], *, bootstrap: str, cfg: Any, **read: Any) -> Any:
    """The transform's output for `pieces` (Spark partition k = pieces[k]) as the stage
    writer takes it (stage_columns)."""
    from onceflow.reader import ranges_frame

    return stage_columns(ranges_frame(spark, pieces, bootstrap, **read), cfg)


def stage_columns(src: Any, cfg: Any) -> Any:
    """Records (the reader's schema) -> the pipeline's transform's output as its sink stages
    it: the coordinates, the user's columns, error (a null key column of a record-wise
    transform's upsert or merge sink is one), key and value (kept for dead letters only, value
    cut to 64 KiB), tombstone (the output's value is null), an aggregating transform's
    `records`, and the row hash (HASH_COLUMN): staged_output of the transform's output."""
    from onceflow.transforms import load_transform

    return staged_output(load_transform(cfg.transform)(src), cfg)


def staged_output(out: Any, cfg: Any) -> Any:
    """The transform's output frame `out` as the sink stages it (stage_columns).

    An aggregating transform's rows carry coordinates only as dead letters; a row that
    breaks its contract (transforms.aggregate_row_violation) fails the Spark task that
    stages it, before its part commits, and the job with it (stage_job raises it as a
    TransformError): the attempt is never marked staged."""
    from pyspark.sql import functions as F

    from onceflow.stage import HASH_COLUMN
    from onceflow.transforms import (
        RECORDS,
        aggregate_row_violation,
        check_aggregate_output,
        check_output,
        user_columns,
    )

    columns = out.columns
    error = F.col("error").cast("string") if "error" in columns else F.lit(None).cast("string")
    if cfg.aggregating:
        check_aggregate_output(cfg.transform, cfg.name, columns, cfg.sink)
        violation = aggregate_row_violation(cfg.transform, cfg.name, columns, cfg.sink)
        error = F.coalesce(
            F.when(violation.isNotNull(), F.raise_error(violation)).cast("string"), error
        )
    else:
        check_output(cfg.transform, cfg.name, columns, cfg.sink)
        # a row's identity in upsert and merge; a Kafka record key may be null
        for k in cfg.sink.key if cfg.sink.mode in ("upsert", "merge") else ():
            error = F.coalesce(error, F.when(F.col(k).isNull(), F.lit(f"key column '{k}' is null")))
    dead = error.isNotNull()
    key = F.col("key").cast("binary") if "key" in columns else F.lit(None).cast("binary")
    if "value" in columns and not cfg.aggregating:
        value = F.col("value").cast("binary")
        tombstone = error.isNull() & value.isNull()
    else:  # a transform that drops value, or an aggregating one, marks no tombstone
        value = F.col("value").cast("binary") if "value" in columns else F.lit(None)
        tombstone = F.lit(False)
    coordinates = []
    for name, spark_type in (("topic", "string"), ("partition", "int"), ("offset", "bigint")):
        c = F.col(name).cast(spark_type) if name in columns else F.lit(None).cast(spark_type)
        coordinates.append((F.when(dead, c) if cfg.aggregating else c).alias(name))
    records = (
        [F.when(~dead, F.col(RECORDS).cast("bigint")).alias(RECORDS)] if cfg.aggregating else []
    )
    staged = out.select(
        *coordinates,
        *user_columns(columns, cfg.aggregating),
        error.alias("error"),
        F.when(dead, key).alias("key"),
        F.when(dead, F.substring(value.cast("binary"), 1, DEAD_VALUE_BYTES)).alias("value"),
        tombstone.alias("tombstone"),
        *records,
    )
    hashed = [c for c in staged.columns if c not in ("key", "value")]
    return staged.withColumn(HASH_COLUMN, F.xxhash64(*hashed))


def output_fields(df: Any) -> list[tuple[str, str]]:
    """(name, Spark type) of a staged frame's columns, for Sink.bind_output: what the stage
    adds itself (tombstone, the meta columns) left out."""
    return [
        (f.name, f.dataType.simpleString())
        for f in df.schema.fields
        if f.name != "tombstone" and not f.name.startswith("_meta_")
    ]


def stage_job(
    spark: Any,
    pieces: list[Any],
    *,
    bootstrap: str,
    dsn: str,
    cfg: Any,
    txid: str,
    attempt: int,
    client: str = "confluent",
    read_timeout: float = 60.0,
    fast_form: bool = True,
    timings: dict[str, float] | None = None,
    poison: Sequence[Any] = (),
) -> StageJob:
    """Read `pieces`, transform and stage them as parts of (txid, attempt) in one job.
    The parts: n (parts 0..n-1), or 2n when the transform has a fast form and `fast_form`
    is on (accepted records part k, declined ones part n + k). The records read: what the
    reader handed on, counted by the reader itself (an accumulator), apart from the
    transform. The sink's tables are created, or checked and evolved (onceflow.schema_evolution:
    columns the output adds, recorded as this txid's), from the transform's output schema
    before anything is staged.

    An aggregating transform may use its records more than once (aggregates, dead letters)
    and shuffles them: the records are persisted and counted first (the records read), so
    Kafka is read once, and its output partition k is part k (n = the output's partitions).

    `poison` (onceflow.poison.Poison): records the transform raised on, which the reader
    reads but does not hand on (neither the fast form nor the transform sees them); they are
    staged as dead letters in one more part, after all the others, and count as records
    read."""
    from onceflow.db import transaction
    from onceflow.fast_stage import FastStage, fast_form_columns, fast_stage_frame, for_job
    from onceflow.reader import ReadsParam, ranges_frame
    from onceflow.schema_evolution import Evolution
    from onceflow.sinks import sink_for
    from onceflow.stage import StageTarget, stage_frame
    from onceflow.transforms import load_fast_form, load_transform

    timings = {} if timings is None else timings
    t0 = time.monotonic()
    n = len(pieces)
    sink = sink_for(cfg)
    read, nbytes = spark.sparkContext.accumulator(0), spark.sparkContext.accumulator(0)
    seen = spark.sparkContext.accumulator({}, ReadsParam())
    options = {
        "client": client,
        "timeout_s": read_timeout,
        "counter": read,
        "bytes_counter": nbytes,
        "reads": seen,
        "skip": [p.coordinates for p in poison],
    }
    fast = fast_form and sink.takes_fast_form and load_fast_form(cfg.transform) is not None
    if fast:
        declined = fast_stage_frame(spark, pieces, bootstrap, cfg.transform, **options)
        with _refusals(cfg.aggregating):  # a job the transform runs while it plans
            out = load_transform(cfg.transform)(declined)
        df = staged_output(out, cfg)
    else:
        source = ranges_frame(spark, pieces, bootstrap, **options)
        if cfg.aggregating:
            from pyspark import StorageLevel

            source = source.persist(StorageLevel.MEMORY_AND_DISK)
            records_read = source.count()  # the reader's records, apart from the transform
            bytes_read, reads = nbytes.value, dict(seen.value)
        df = stage_columns(source, cfg)
    with transaction(dsn) as cur:  # the sink's tables follow the transform's output
        evolution = Evolution(cfg.name, txid, attempt, cfg.schema_evolution)
        sink = sink.bind_output(cur, output_fields(df), evolution)
    if poison:  # one more Spark partition: the part after all the others
        from onceflow.poison import dead_letter_frame

        dead = dead_letter_frame(
            spark, poison, df, bootstrap, client=client, timeout_s=read_timeout
        )
        df = df.union(dead)
    target = StageTarget.for_sink(dsn, sink, cfg.name, txid, attempt)
    first_part = n if fast else 0  # the fast form's own parts come first
    job = stage_frame(df, target, first_part=first_part)
    parts = first_part + n + (1 if poison else 0)
    job_context: Any = (
        for_job(spark.sparkContext, FastStage(target, fast_form_columns(out)))
        if fast
        else nullcontext()
    )
    timings["plan"] = time.monotonic() - t0
    t0 = time.monotonic()
    # only this job's reads count (a transform may have run jobs of its own)
    read.value = nbytes.value = 0
    seen.value = {}
    try:
        with _refusals(cfg.aggregating), job_context:
            messages = job.collect()
    finally:
        if cfg.aggregating:
            source.unpersist()
    timings["job"] = time.monotonic() - t0
    if cfg.aggregating:
        # each output partition staged one part; with adaptive execution on (a pipeline's
        # spark_conf), only the executed job knows how many the shuffle kept
        parts = len(messages)
    else:
        records_read, bytes_read, reads = read.value, nbytes.value, dict(seen.value)
    records_read += len(poison)  # read, and set aside as dead letters
    log.info(
        "read, transform and stage of %d input partition(s) as %d part(s) took %.1f s",
        n,
        parts,
        timings["job"],
    )
    if fast:
        log.info(
            "fast form: parts 0..%d staged by the readers' Python workers; %d declined "
            "record(s) through transform %s in the JVM, parts %d..%d",
            n - 1,
            sum(m.rows for m in messages if m.part < 2 * n),
            cfg.transform,
            n,
            2 * n - 1,
        )
    return StageJob(
        parts=parts,
        records_read=records_read,
        bytes_read=bytes_read,
        reads=whole_reads(pieces, reads),
    )


def stage_attempt(spark: Any, pieces: list[Any], **job: Any) -> StageJob:
    """stage_job(spark, pieces, **job), and when the user's code raised on records of the
    batch (onceflow.poison): find them, then by the pipeline's on_transform_error either
    refuse the attempt naming the first ("fail": TransformRaisedError, not retried) or stage
    the batch again with them as dead letters ("dead_letter"), in the same attempt. The
    parts the failed job committed are found claimed and kept (the part fence): each is the
    output of an input partition without such a record, which the reader hands on unchanged
    (an aggregating transform raising per record before its shuffle staged no output part;
    a part that counted such a record would make mark_staged's count check refuse)."""
    from onceflow.errors import TransformRaisedError
    from onceflow.poison import Poison, isolate, raised_by_user_code, raised_on

    cfg, timings = job["cfg"], job.setdefault("timings", {})
    t0 = time.monotonic()
    try:
        return stage_job(spark, pieces, **job)
    except Exception as e:
        failure = raised_by_user_code(e)
        if failure is None:
            raise
    timings["raised_job"] = time.monotonic() - t0
    dead_letter = cfg.on_transform_error == "dead_letter"
    log.warning(
        "transform %s raised %s; looking for the records it raised on (on_transform_error=%s)",
        cfg.transform,
        failure,
        cfg.on_transform_error,
    )
    t0 = time.monotonic()
    probes = 0

    def probe(piece: Any) -> Any:
        nonlocal probes
        probes += 1
        return _probe(spark, piece, **job)

    found = isolate(pieces, probe, failure, first_only=not dead_letter)
    timings["isolate"] = time.monotonic() - t0
    log.info(
        "%d record(s) isolated by %d probe(s) in %.1f s", len(found), probes, timings["isolate"]
    )
    if not dead_letter:
        where, raised = found[0]
        raise TransformRaisedError(raised_on(cfg.transform, cfg.name, where, raised))
    poison = [Poison(r.topic, r.partition, r.from_offset, raised.reason) for r, raised in found]
    for p in poison:
        log.warning("dead letter: %s: %s", p, p.reason)
    return stage_job(spark, pieces, **job, poison=poison)


def _probe(
    spark: Any,
    piece: Any,
    *,
    bootstrap: str,
    cfg: Any,
    client: str = "confluent",
    read_timeout: float = 60.0,
    fast_form: bool = True,
    **_: Any,
) -> Any:
    """What the user's code raises on the records of `piece` alone (onceflow.poison.
    RaisedFailure), or None: the transform's output over them, computed in full as the stage
    job computes it (with the fast form when the job uses it) and thrown away (Spark's noop
    sink). Any other failure is raised."""
    from onceflow.fast_stage import FastStage, fast_form_columns, fast_stage_frame, for_job
    from onceflow.poison import raised_by_user_code
    from onceflow.sinks import sink_for
    from onceflow.transforms import load_fast_form, load_transform

    read = {"client": client, "timeout_s": read_timeout}
    context: Any = nullcontext()
    if fast_form and sink_for(cfg).takes_fast_form and load_fast_form(cfg.transform) is not None:
        declined = fast_stage_frame(spark, [piece], bootstrap, cfg.transform, **read)
        with _refusals(cfg.aggregating):
            out = load_transform(cfg.transform)(declined)
        frame = staged_output(out, cfg)
        context = for_job(spark.sparkContext, FastStage(None, fast_form_columns(out)))
    else:
        frame = staged_frame(spark, [piece], bootstrap=bootstrap, cfg=cfg, **read)
    try:
        with _refusals(cfg.aggregating), context:
            frame.write.format("noop").mode("overwrite").save()
    except Exception as e:
        failure = raised_by_user_code(e)
        if failure is None:
            raise
        log.info(
            "probe %s[%d] [%d, %d): raises",
            piece.topic,
            piece.partition,
            piece.from_offset,
            piece.until_offset,
        )
        return failure
    return None


def whole_reads(pieces: list[Any], reads: dict[int, Any]) -> list[Any]:
    """What the reader saw of each partition whose every piece reported (RangeReadFn adds a
    piece once it read it to its end); a partition with a piece missing is left out, and
    the ledger then keeps no digest or print for its range (the next plan verifies the log
    by the print of an earlier range)."""
    from onceflow.range_digest import merge_pieces

    incomplete = {(p.topic, p.partition) for k, p in enumerate(pieces) if k not in reads}
    for topic, partition in sorted(incomplete):
        log.warning("no digest of %s[%d]: a piece of its range did not report", topic, partition)
    merged = merge_pieces(reads[k] for k in sorted(reads) if k < len(pieces))
    return [r for tp, r in sorted(merged.items()) if tp not in incomplete]


# A row breaking an aggregating transform's contract, as Spark reports the raise_error of
# transforms.aggregate_row_violation.
_ROW_VIOLATION = re.compile(r"\[USER_RAISED_EXCEPTION\] (aggregating transform .+?) SQLSTATE")
# A TransformError raised in a Python worker (a fast form whose rows do not fit: fast_stage).
_WORKER_REFUSAL = re.compile(r"^onceflow\.errors\.TransformError: (.+)$", re.MULTILINE)


@contextmanager
def _refusals(aggregating: bool) -> Iterator[None]:
    """A Spark job failed by the transform's breach of its contract raises TransformError:
    the transform must change, a retry would fail the same way."""
    from onceflow.errors import TransformError

    try:
        yield
    except Exception as e:
        refused = transform_refusal(str(e), aggregating)
        if refused:
            raise TransformError(refused) from None
        raise


def transform_refusal(failure: str, aggregating: bool) -> str | None:
    """Why a failed stage job's transform broke its contract (a Spark task's failure text),
    or None when it failed for another reason, which a retry may not meet again."""
    found = (_ROW_VIOLATION.search(failure) if aggregating else None) or _WORKER_REFUSAL.search(
        failure
    )
    return found.group(1) if found else None


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$", re.MULTILINE)
_ONCEFLOW_ERRORS = {
    "RangeReadError",
    "FencedAttemptError",
    "AbandonedTxidError",
    "UnknownTxidError",
    "ConfigError",
    "FailpointError",
}


def _short_error(e: BaseException) -> str:
    """One line for the ledger: the onceflow error raised in a Spark task, not a stack trace."""
    if type(e).__module__.startswith("onceflow") or not str(e).strip():
        return f"{type(e).__name__}: {e}"[:2000]
    text = str(e)
    found = _ERROR_LINE.findall(text)
    ours = [f for f in found if f[0] in _ONCEFLOW_ERRORS]
    if ours:
        name, msg = ours[-1]
        return f"{name}: {msg}"[:2000]
    # a Python worker's exception: its first line is generic, the raised error ends the
    # last traceback (e.g. a user transform's module missing on the executors)
    _, header, traceback = text.rpartition("Traceback (most recent call last):")
    raised = _ERROR_LINE.findall(traceback) if header else []
    if raised:
        name, msg = raised[0]
        return f"{type(e).__name__}: {name}: {msg}"[:2000]
    first = text.strip().splitlines()[0]
    return f"{type(e).__name__}: {first}"[:2000]
