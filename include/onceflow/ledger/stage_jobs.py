"""A stage job's hand-offs between process's driver and its Spark tasks, kept in the ledger.

The driver opens a job (`stage_job_rows`) before it runs it. Its tasks then find there what
the driver decided after it built the job's plan (the fast form's stage: `fast_stage_of`),
and record what their reader handed on of each input range they read to its end
(`record_range_read`); the driver reads those once the job is done (`range_reads`). The
job's rows go when its block ends.

Why the ledger rather than Spark's accumulators and local properties: a Spark Connect session
(process_mode = "connect") has neither, and the same code serves both process modes. The
counts stay exact: input range k is read whole by one task, and reading it again (a retried
task, a recomputed cache) records the same row, so the last write is as good as the first.
A job's rows are keyed by the job, not the attempt: a job of the attempt that failed (before
its records were set aside as dead letters, onceflow.process.poison_records) or a task of it
that outlived it cannot change what a later job counts.

A job's rows go when its driver's block ends. What a killed driver left, and a read recorded
by a task that outlived its job, go at the next claim of the pipeline (`drop_fenced_jobs`):
by then no one reads them.

The DSN never goes into the ledger: the fast form's stage target is stored without its
ledger and given back the one the task reached the ledger with.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from onceflow.ledger.db import LedgerLike, transaction
from onceflow.ledger.range_digest import RangeRead
from onceflow.ledger.states import BatchState


@dataclass(frozen=True)
class StageJobRef:
    """How a task reaches its stage job's rows (pickled into the task)."""

    ledger: LedgerLike
    job: str  # a uuid

    def __repr__(self) -> str:  # never the DSN
        return f"StageJobRef(job={self.job})"


@dataclass(frozen=True)
class InputRangeRead:
    """What the reader handed on of one input range: records, their key and value bytes, and
    what it saw (records set aside as dead letters included: onceflow.poison)."""

    records: int
    bytes: int
    seen: RangeRead


def open_stage_job(dsn: LedgerLike, pipeline: str, txid: str, attempt: int) -> StageJobRef:
    """A new stage job of the attempt."""
    job = str(uuid.uuid4())
    with transaction(dsn) as cur:
        cur.execute(
            "insert into onceflow.stage_jobs (job, pipeline, txid, attempt) values (%s, %s, %s, %s)",
            (job, pipeline, txid, attempt),
        )
    return StageJobRef(dsn, job)


def set_fast_stage(ref: StageJobRef, stage: Any) -> None:
    """Where the job's fast form stages (onceflow.staging.fast_stage.FastStage)."""
    if stage.target is not None:
        stage = dataclasses.replace(stage, target=dataclasses.replace(stage.target, ledger=None))
    with transaction(ref.ledger) as cur:
        cur.execute(
            "update onceflow.stage_jobs set fast_stage = %s where job = %s",
            (pickle.dumps(stage), ref.job),
        )


def fast_stage_of(ref: StageJobRef) -> Any:
    """The job's fast-form stage, or None when the driver has not set one (yet)."""
    with transaction(ref.ledger) as cur:
        cur.execute("select fast_stage from onceflow.stage_jobs where job = %s", (ref.job,))
        row = cur.fetchone()
    if row is None or row[0] is None:
        return None
    stage = pickle.loads(bytes(row[0]))  # noqa: S301 - written by this job's driver
    if stage.target is not None:
        stage = dataclasses.replace(
            stage, target=dataclasses.replace(stage.target, ledger=ref.ledger)
        )
    return stage


def record_range_read(ref: StageJobRef, k: int, read: InputRangeRead) -> None:
    """Input range k was read to its end (from a task of the job)."""
    with transaction(ref.ledger) as cur:
        cur.execute(
            "insert into onceflow.job_reads (job, input_range, records, bytes, seen)"
            " values (%s, %s, %s, %s, %s) on conflict (job, input_range) do update"
            " set records = excluded.records, bytes = excluded.bytes, seen = excluded.seen",
            (ref.job, k, read.records, read.bytes, json.dumps(read.seen.to_json())),
        )


def range_reads(ref: StageJobRef) -> dict[int, InputRangeRead]:
    """The input ranges the job's tasks read to their end."""
    with transaction(ref.ledger) as cur:
        cur.execute(
            "select input_range, records, bytes, seen from onceflow.job_reads where job = %s",
            (ref.job,),
        )
        rows = cur.fetchall()
    return {k: InputRangeRead(int(n), int(b), RangeRead.from_json(seen)) for k, n, b, seen in rows}


@contextmanager
def stage_job_rows(
    dsn: LedgerLike, pipeline: str, txid: str, attempt: int
) -> Iterator[StageJobRef]:
    """A new stage job of the attempt (`open_stage_job`), whose rows are deleted from the
    ledger when the block ends, however it ends (a task of it that is still running can only
    leave rows that no one reads)."""
    ref = open_stage_job(dsn, pipeline, txid, attempt)
    try:
        yield ref
    finally:
        with transaction(dsn) as cur:  # in drop_fenced_jobs' order: no deadlock with a claim
            cur.execute("delete from onceflow.stage_jobs where job = %s", (ref.job,))
            cur.execute("delete from onceflow.job_reads where job = %s", (ref.job,))


def drop_fenced_jobs(cur: Any, pipeline: str) -> None:
    """Inside a claim's transaction: delete the pipeline's jobs of fenced attempts (a newer
    attempt claimed the txid) and of abandoned txids, left by drivers that died before
    their block ended, and every read whose job is gone (a task that outlived its job).
    A live job's rows stay: its attempt is its txid's newest, and its reads are recorded
    only after its row was (open_stage_job)."""
    cur.execute(
        "delete from onceflow.stage_jobs j using onceflow.batches b"
        " where j.pipeline = %s and b.pipeline = j.pipeline and b.txid = j.txid"
        " and (b.attempt > j.attempt or b.state = %s)",
        (pipeline, BatchState.ABANDONED),
    )
    cur.execute(
        "delete from onceflow.job_reads r"
        " where not exists (select 1 from onceflow.stage_jobs j where j.job = r.job)"
    )
