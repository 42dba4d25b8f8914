"""The attempt's bookkeeping in the ledger: claim it, prove the log it read, mark it staged.

Around its stage job, a process task (one attempt of its txid):

- claims a new attempt of the txid (`claim_new_attempt`), which fences every earlier one;
- checks the topics' ids against plan's once the job ran (`stage_and_mark`): only ids
  unchanged since plan prove that the job read plan's log (a topic re-created later gets
  another id; none ever gets an old one back), and a job that failed is checked too, so
  that a re-created topic is named as the cause;
- marks the attempt staged with what the job counted (mark_staged refuses rows +
  dead letters that are not the records read, and a fenced attempt);
- or records why it failed as the txid's last_error (`record_failure`).
"""

from __future__ import annotations

import json
import logging
import time

from onceflow import failpoints
from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import LogIdentityError
from onceflow.kafka import broker
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.batches import record_error
from onceflow.ledger.db import Ledger
from onceflow.ledger.fencing import StagedMark, claim_attempt, mark_staged
from onceflow.ledger.log_checks import verify_topic_ids
from onceflow.ledger.states import BatchState
from onceflow.process.decoding import keep_writer_schemas
from onceflow.process.session import SparkSource, run_stage_attempt
from onceflow.process.stage_job import StageInputs
from onceflow.ranges import OffsetRange

log = logging.getLogger("onceflow.process")


def claim_new_attempt(
    ledger: Ledger, cfg: PipelineConfig, txid: str
) -> tuple[Attempt, list[OffsetRange]]:
    """Claim a new attempt of `txid` (the ledger's Claim), and log it with its ranges: the
    attempt, and the ranges it reads."""
    claim = claim_attempt(ledger, cfg.name, txid)
    log.info(
        "onceflow process claimed pipeline=%s txid=%s seq=%s attempt=%s state=%s ranges=%d",
        cfg.name,
        txid,
        claim.seq,
        claim.attempt,
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
    return Attempt(cfg.name, txid, claim.seq, claim.attempt), claim.ranges


def stage_and_mark(
    inputs: StageInputs,
    ranges: list[OffsetRange],
    source: SparkSource,
    claimed_at: float,
    timings: dict[str, float],
) -> StagedMark:
    """Stage the claimed attempt's `ranges` into its sink in a Spark session from `source`
    and mark it staged; the ledger's StagedMark counts."""
    attempt = inputs.attempt
    failpoints.hit("process.fail", attempt.txid)
    topics = tuple(sorted({r.topic for r in ranges}))
    failpoints.hit("process.before_stage_job", attempt.txid)
    try:
        job = run_stage_attempt(inputs, source, ranges, timings)
    except Exception as e:
        _explain_by_topic_ids(inputs, topics, e)
        raise
    # once read: only ids unchanged since plan prove the job read plan's log (the reader of
    # a topic re-created since reads the new log's records at the ranges' offsets)
    t0 = time.monotonic()
    _verify_topic_ids(inputs, topics)
    timings["log_checks"] = time.monotonic() - t0
    if inputs.decoder is not None and inputs.decoder.decoders:  # a registry's
        keep_writer_schemas(inputs.ledger, attempt.pipeline, inputs.decoder, job.reads)
    failpoints.hit("process.before_mark_staged", attempt.txid)
    t0 = time.monotonic()
    staged = mark_staged(
        inputs.ledger,
        inputs.cfg,
        attempt.txid,
        attempt.attempt,
        process_seconds=time.monotonic() - claimed_at,
        parts=job.parts,
        records_read=job.records_read,
        bytes_read=job.bytes_read,
        reads=job.reads,
        sink=inputs.sink,
    )
    timings["mark_staged"] = time.monotonic() - t0
    return staged


def _verify_topic_ids(inputs: StageInputs, topics: tuple[str, ...]) -> None:
    """The topics' ids, as the broker reports them now, are the ones plan recorded."""
    attempt = inputs.attempt
    ids = broker.topic_ids(inputs.kafka, attempt.pipeline, topics)
    verify_topic_ids(inputs.ledger, attempt.pipeline, attempt.txid, ids)


def _explain_by_topic_ids(inputs: StageInputs, topics: tuple[str, ...], e: Exception) -> None:
    """A failed job's cause when a topic was re-created since plan (its reader met another
    log: offsets out of range, records missing): LogIdentityError, raised from `e`. Nothing
    if the ids are plan's, or cannot be asked now (the job's own error stands)."""
    try:
        _verify_topic_ids(inputs, topics)
    except LogIdentityError as changed:
        raise changed from e
    except Exception as ask:  # noqa: BLE001
        log.info("could not check the topics' ids after the failed job: %s", ask)


def record_failure(ledger: Ledger, attempt: Attempt, reason: str) -> None:
    """Record why the attempt failed as the txid's last_error (logged if even that fails)."""
    try:
        record_error(
            ledger, attempt.pipeline, attempt.txid, f"process attempt {attempt.attempt}: {reason}"
        )
    except Exception as e2:  # noqa: BLE001
        log.error("could not record the error in the ledger: %s", e2)


def log_staged(
    attempt: Attempt, staged: StagedMark, started: float, timings: dict[str, float]
) -> None:
    """The attempt's summary line, and where its seconds went (machine-readable, for bench/)."""
    log.info(
        "onceflow process pipeline=%s txid=%s seq=%s attempt=%s records=%d valid=%d dead=%d "
        "seconds=%.2f",
        attempt.pipeline,
        attempt.txid,
        attempt.seq,
        attempt.attempt,
        staged.records_read,
        staged.valid,
        staged.dead,
        time.monotonic() - started,
    )
    timings["total"] = time.monotonic() - started
    log.info(
        "onceflow process timings %s", json.dumps({k: round(v, 3) for k, v in timings.items()})
    )
