"""The stage job of an attempt, and again around the records the user's code raised on.

When the stage job fails because the user's code raised (onceflow.poison), process probes
the input partitions to find the records it raised on, then by the pipeline's
on_transform_error refuses the attempt naming the first one, or stages the batch again in
the same attempt with them set aside as dead letters.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from onceflow.errors import TransformRaisedError
from onceflow.ledger.stage_jobs import set_fast_stage, stage_job_rows
from onceflow.poison import PoisonRecord, RaisedFailure, isolate, raised_by_user_code, raised_on
from onceflow.process.failures import job_refusals
from onceflow.process.stage_job import StageInputs, StageJob, stage_job
from onceflow.process.staged_output import staged_frame, staged_output
from onceflow.ranges import OffsetRange
from onceflow.staging.fast_stage import FastStage, fast_form_columns, fast_stage_frame
from onceflow.transforms import load_transform

log = logging.getLogger("onceflow.process")


def stage_attempt(
    spark: Any, pieces: list[OffsetRange], inputs: StageInputs, timings: dict[str, float]
) -> StageJob:
    """stage_job(spark, pieces, inputs), and when the user's code raised on records of the
    batch (onceflow.poison): find them, then by the pipeline's on_transform_error either
    refuse the attempt naming the first ("fail": TransformRaisedError, not retried) or stage
    the batch again with them as dead letters ("dead_letter"), in the same attempt. The
    parts the failed job committed are found claimed and kept (the part fence): each is the
    output of an input partition without such a record, which the reader hands on unchanged
    (an aggregating transform raising per record before its shuffle staged no output part;
    a part that counted such a record would make mark_staged's count check refuse)."""
    cfg = inputs.cfg
    t0 = time.monotonic()
    try:
        return stage_job(spark, pieces, inputs, timings=timings)
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

    def probe(piece: OffsetRange) -> RaisedFailure | None:
        nonlocal probes
        probes += 1
        return _probe(spark, piece, inputs)

    found = isolate(pieces, probe, failure, first_only=not dead_letter)
    timings["isolate"] = time.monotonic() - t0
    log.info(
        "%d record(s) isolated by %d probe(s) in %.1f s", len(found), probes, timings["isolate"]
    )
    if not dead_letter:
        where, raised = found[0]
        raise TransformRaisedError(raised_on(cfg.transform, cfg.name, where, raised))
    poison = [
        PoisonRecord(r.topic, r.partition, r.from_offset, raised.reason) for r, raised in found
    ]
    for p in poison:
        log.warning("dead letter: %s: %s", p, p.reason)
    return stage_job(spark, pieces, inputs, timings=timings, poison=poison)


def _probe(spark: Any, piece: OffsetRange, inputs: StageInputs) -> RaisedFailure | None:
    """What the user's code raises on the records of `piece` alone, or None: the
    transform's output over them, computed in full as the stage job computes it (with the
    fast form when the job uses it) and thrown away (Spark's noop sink). Any other failure
    is raised."""
    attempt, cfg, kafka = inputs.attempt, inputs.cfg, inputs.kafka
    read = inputs.reader_args()
    with stage_job_rows(inputs.ledger, attempt.pipeline, attempt.txid, attempt.attempt) as job:
        if inputs.uses_fast_form:
            declined = fast_stage_frame(spark, [piece], kafka, cfg.transform, job=job, **read)
            with job_refusals(cfg.aggregating):
                out = load_transform(cfg.transform)(declined)
            frame = staged_output(out, cfg)
            set_fast_stage(job, FastStage(None, fast_form_columns(out)))
        else:
            frame = staged_frame(spark, [piece], bootstrap=kafka, cfg=cfg, **read)
        try:
            with job_refusals(cfg.aggregating):
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
