"""The stage job: one Spark job that reads a txid's input partitions, transforms and stages.

The reader counts the records it hands on itself, apart from the transform, and records the
counts in the ledger (onceflow.reader.read_counts), so that the ledger can refuse an attempt
whose rows + dead letters are not the records read. The driver and the job's tasks hand each
other what they must through the job's rows in the ledger (onceflow.ledger.stage_jobs), so
the job runs the same in a Spark Connect session. The sink's tables are fitted to the
transform's output before anything is staged (its StageWriter). The parts the job stages
follow the part numbering of onceflow.staging.fence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import RangeReadError
from onceflow.kafka.client import KafkaCluster
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import Ledger, transaction
from onceflow.ledger.range_digest import RangeRead, merge_pieces
from onceflow.ledger.stage_jobs import range_reads, set_fast_stage, stage_job_rows
from onceflow.poison import PoisonRecord
from onceflow.process.attempt_spec import JobOptions
from onceflow.process.dead_letters import dead_letter_frame
from onceflow.process.failures import job_refusals
from onceflow.process.staged_output import output_fields, staged_output
from onceflow.ranges import OffsetRange
from onceflow.reader.frame import ranges_frame
from onceflow.reader.input_ranges import input_partitions
from onceflow.reader.read_counts import LedgerTally
from onceflow.sinks.base import Sink
from onceflow.sinks.schema_evolution import Evolution
from onceflow.spark import driver_jit
from onceflow.staging.fast_stage import FastStage, fast_form_columns, fast_stage_frame
from onceflow.staging.fence import PartNumbers
from onceflow.staging.target import StageTarget
from onceflow.staging.writer import stage_frame
from onceflow.transforms import load_fast_form, load_transform

log = logging.getLogger("onceflow.process")


def takes_fast_form(cfg: PipelineConfig, sink: Sink, decodes: bool) -> bool:
    """Whether a stage job of `cfg` stages a fast form (onceflow.staging.fast_stage): the
    pipeline allows it, the sink takes one and the transform has one (a pipeline without a
    transform: when its frame has a decoder, `decodes`, whose records land as they are)."""
    if not (cfg.fast_form and sink.takes_fast_form):
        return False
    return decodes if not cfg.transform else load_fast_form(cfg.transform) is not None


def driver_conf(conf: dict[str, str], cfg: PipelineConfig, offsets: int | None) -> dict[str, str]:
    """`conf` for the spark-submit driver of a batch of `offsets` planned offsets of `cfg`:
    its JIT follows whether the stage job takes the fast form (onceflow.spark.driver_jit; a
    pipeline without a transform: no). A transform module that cannot be imported here: no
    fast form; the process step names the error."""
    from onceflow.hooks.sink import sink_for

    try:
        fast_form = takes_fast_form(cfg, sink_for(cfg), decodes=False)
    except Exception as e:  # noqa: BLE001 - only the JIT's choice depends on it
        log.info("onceflow process: the driver's JIT left as it is (no fast form found: %s)", e)
        fast_form = False
    return driver_jit.for_job(conf, offsets, fast_form)


@dataclass(frozen=True)
class StageInputs:
    """What every stage job of an attempt works with (the first one, each probe, the one
    around poison records): the attempt, its pipeline and sink, the ledger's DSN, the
    source cluster and the job's options."""

    attempt: Attempt
    cfg: PipelineConfig
    sink: Sink
    ledger: Ledger
    kafka: KafkaCluster
    options: JobOptions
    # the txid's decoder of values and keys in a registry format
    # (onceflow.formats.frame_decoder), None when both are bytes
    decoder: Any = None

    @property
    def uses_fast_form(self) -> bool:
        """Whether the job stages the transform's fast form (onceflow.staging.fast_stage):
        the job's options and the pipeline allow it, the sink takes one and the transform
        has one (a pipeline landing its decoded records without one: the decoder's)."""
        return self.options.fast_form and takes_fast_form(
            self.cfg, self.sink, self.decoder is not None
        )

    def reader_args(self) -> dict[str, Any]:
        """The reader's keyword arguments of the job's frames (RangeReadFn's)."""
        return {**self.options.read.reader_args(), "decoder": self.decoder}


@dataclass(frozen=True)
class StageJob:
    """What one stage job did: the parts it staged, the records its reader handed on and
    their bytes (key + value)."""

    parts: int
    records_read: int
    bytes_read: int
    reads: list[RangeRead]  # per partition: what the reader saw


def stage_job(
    spark: Any,
    pieces: list[OffsetRange],
    inputs: StageInputs,
    *,
    timings: dict[str, float] | None = None,
    poison: Sequence[PoisonRecord] = (),
    first_part: int = 0,
) -> StageJob:
    """Read `pieces`, transform and stage them into the sink as the parts of the attempt in
    one job (the parts: onceflow.staging.fence; with the fast form when
    `inputs.uses_fast_form`). The records read: what the reader handed on, counted by the
    reader itself, apart from the transform (onceflow.reader.read_counts). The sink's tables
    are created, or checked and evolved (onceflow.sinks.schema_evolution: columns the output
    adds, recorded as this txid's), from the transform's output schema before anything is
    staged.

    An aggregating transform may use its records more than once (aggregates, dead letters)
    and shuffles them: the records are persisted and counted first (the records read), so
    Kafka is read once.

    `poison`: records the transform raised on, which the reader reads but does not hand on
    (neither the fast form nor the transform sees them); they are staged as dead letters in
    a part of their own and count as records read.

    `first_part`: the number of the job's first part, after the parts of the attempt's
    earlier jobs (one per table: onceflow.process.table_stages); the fast form's parts are
    the first job's."""
    timings = {} if timings is None else timings
    attempt, cfg, ledger, kafka = inputs.attempt, inputs.cfg, inputs.ledger, inputs.kafka
    read = inputs.options.read.reader_args()  # the dead letters' (they are not decoded)
    with stage_job_rows(ledger, attempt.pipeline, attempt.txid, attempt.attempt) as job:
        t0 = time.monotonic()
        n = len(pieces)
        partitions = input_partitions(pieces, cfg.records_per_input_partition)
        m = len(partitions)
        skip = [p.coordinates for p in poison]
        options = {
            **inputs.reader_args(),
            "partitions": partitions,
            "tally": LedgerTally(job),
            "skip": skip,
        }
        numbers = PartNumbers(m, inputs.uses_fast_form and not first_part, bool(poison))
        if numbers.fast:  # the transform's input: the records the fast form declines
            source = fast_stage_frame(spark, pieces, kafka, cfg.transform, job=job, **options)
        else:
            source = ranges_frame(spark, pieces, kafka, **options)
            if cfg.aggregating:
                from pyspark import StorageLevel

                source = source.persist(StorageLevel.MEMORY_AND_DISK)
                source.count()  # the records read once, counted apart from the transform
        with job_refusals(cfg.aggregating):  # a job the transform runs while it plans
            out = load_transform(cfg.transform)(source)
        df = staged_output(out, cfg)
        with transaction(ledger) as cur:  # the sink's tables follow the transform's output
            evolution = Evolution(
                attempt.pipeline,
                attempt.txid,
                attempt.attempt,
                cfg.schema_evolution,
                keep_absent=cfg.envelope != "none",
            )
            writer = inputs.sink.stage_writer(cur, output_fields(df), evolution)
            writer.create(cur, attempt)
        if poison:  # one more Spark partition: the dead letters' part
            dead = dead_letter_frame(spark, poison, df, kafka, **read)
            df = df.union(dead)
        target = StageTarget.of(ledger, writer, attempt)
        staging = stage_frame(df, target, first_part=first_part + numbers.first_transformed)
        parts = numbers.count
        if numbers.fast:
            set_fast_stage(job, FastStage(target, fast_form_columns(out)))
        timings["plan"] = time.monotonic() - t0
        t0 = time.monotonic()
        try:
            with job_refusals(cfg.aggregating):
                messages = staging.collect()
        finally:
            if cfg.aggregating:
                source.unpersist()
        timings["job"] = time.monotonic() - t0
        t0 = time.monotonic()
        with transaction(ledger) as cur:  # e.g. the attempt table's indexes, so commit builds none
            writer.seal(cur, attempt)
        timings["seal"] = time.monotonic() - t0
        if cfg.aggregating:
            # each output partition staged one part; with adaptive execution on (a pipeline's
            # spark_conf), only the executed job knows how many the shuffle kept
            parts = len(messages)
        reads = range_reads(job)
        unread = [k for k in range(n) if k not in reads]
        if unread:
            raise RangeReadError(
                f"piece(s) {unread} of the {n} input ranges did not record their read in the "
                "ledger: the records read cannot be counted (retry)"
            )
        records_read = sum(r.records for r in reads.values()) + len(poison)  # poison: read,
        bytes_read = sum(r.bytes for r in reads.values())  # and set aside as dead letters
        log.info(
            "read, transform and stage of %d range piece(s) in %d input partition(s) as %d "
            "part(s) took %.1f s",
            n,
            m,
            parts,
            timings["job"],
        )
        if numbers.fast:
            declined_parts = range(numbers.first_transformed, numbers.first_transformed + m)
            log.info(
                "fast form: parts 0..%d staged by the readers' Python workers; %d declined "
                "record(s) through %s in the JVM, parts %d..%d",
                m - 1,
                sum(m.rows for m in messages if m.part in declined_parts),
                f"transform {cfg.transform}" if cfg.transform else "the stage (no transform)",
                declined_parts.start,
                declined_parts.stop - 1,
            )
        return StageJob(
            parts=parts,
            records_read=records_read,
            bytes_read=bytes_read,
            reads=whole_reads(pieces, {k: r.seen for k, r in reads.items()}),
        )


def whole_reads(pieces: list[OffsetRange], reads: dict[int, RangeRead]) -> list[RangeRead]:
    """What the reader saw of each partition whose every piece reported (RangeReadFn adds a
    piece once it read it to its end); a partition with a piece missing is left out, and
    the ledger then keeps no digest or print for its range (the next plan verifies the log
    by the print of an earlier range)."""
    incomplete = {(p.topic, p.partition) for k, p in enumerate(pieces) if k not in reads}
    for topic, partition in sorted(incomplete):
        log.warning("no digest of %s[%d]: a piece of its range did not report", topic, partition)
    merged = merge_pieces(reads[k] for k in sorted(reads) if k < len(pieces))
    return [r for tp, r in sorted(merged.items()) if tp not in incomplete]
