"""The part fence: which parts an attempt stages, and how each is staged exactly once.

Part numbering (stated here once; the rest of Onceflow refers to it). A stage job of one
process attempt reads the txid's n input partitions (onceflow.reader.input_ranges; input
partition k is Spark partition k of the reader's frame) and stages:

- part k, 0 <= k < n: the output of input partition k, through the transform and the stage
  writer (onceflow.staging.writer): n parts;
- with the transform's fast form (onceflow.staging.fast_stage), two parts per input
  partition: part k, the records of input partition k the fast form accepts, staged by the
  reader's own Python worker, and part n + k, the ones it declines, through the transform
  (the writer's first part is then n, PartNumbers.first_transformed): 2n parts;
- with an aggregating transform, which shuffles: part k is its output partition k, and the
  job counts its parts once it has staged them (adaptive execution may change how many);
- with records the user's code raised on set aside as dead letters (onceflow.poison), one
  more part after all the others, holding them.

ledger.fencing.mark_staged then expects exactly that many parts (PartNumbers.count).

The task fence. Each part is staged in ONE PostgreSQL transaction (`claimed_part`) that
first claims it in onceflow.stage_parts and then writes it, tagged (txid, attempt, part):

- a task that dies before its commit leaves nothing (the claim rolls back with the rows);
- a retried or speculative task of the same attempt finds the part claimed and stages
  nothing: a part is a deterministic function of its records, so the first copy is as good
  as its own (the input partitions are fixed, and nothing shuffles between the read and a
  record-wise transform's write, so part k always holds the same records). It still
  consumes its input, so that the reader's count of records read
  (onceflow.reader.frame.RangeReadFn) is complete;
- a task of a fenced attempt (a newer process attempt claimed the txid, or a reset abandoned
  it) fails before writing, by the ledger's attempt fence (ledger.fencing.check_attempt) run in the
  part's transaction; rows it staged earlier carry its attempt number, which commit never
  publishes (ledger.fencing.mark_staged runs the same fence). Its refusal reaches the driver typed
  (onceflow.staging.task_errors), so that process ends FENCED or ABANDONED, not FAILED.

Per part, the fence row also records what the part staged (`record_part`): rows, the
records its valid rows account for (one per valid row; an aggregating transform's rows the
sum of their `records` column), dead letters and a checksum (onceflow.staging.checksum).
process sums the parts instead of scanning the staged rows again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from onceflow import failpoints
from onceflow.errors import AbandonedTxidError, FencedAttemptError
from onceflow.ledger import stage_parts
from onceflow.ledger.db import kept_connection
from onceflow.staging.target import StageTarget
from onceflow.staging.task_errors import for_driver


@dataclass(frozen=True)
class PartNumbers:
    """The parts of one stage job (see the module's docstring): `inputs` input partitions,
    staged with the fast form or not, with a part of dead letters or not. An aggregating
    transform's job counts its own parts."""

    inputs: int
    fast: bool = False
    dead_letters: bool = False

    @property
    def first_transformed(self) -> int:
        """The first part the stage writer stages (the transform's output): after the fast
        form's own parts."""
        return self.inputs if self.fast else 0

    @property
    def count(self) -> int:
        """How many parts the job stages."""
        return self.first_transformed + self.inputs + (1 if self.dead_letters else 0)


@dataclass(frozen=True)
class StageCommitMessage:
    """What staging one part did, as the stage writer's Spark task reports it."""

    part: int
    rows: int
    skipped: bool  # the part was already staged by another task attempt


@contextlib.contextmanager
def claimed_part(target: StageTarget, part: int) -> Iterator[Any]:
    """The part's PostgreSQL transaction under the task fence: yields its cursor once the
    attempt fence passed and the part is claimed in onceflow.stage_parts, or None when another
    task attempt already staged it (then nothing is written). Commits when the body returns;
    when it raises, the connection closes, and the transaction (claim included) with it."""
    from onceflow.ledger.fencing import check_attempt

    a = target.attempt
    with kept_connection(target.ledger) as conn:
        with conn.cursor() as cur:
            # Timestamps are written as UTC wall times without a zone (Arrow formats a zoned
            # timestamp ~20x slower): the session reads them in UTC.
            cur.execute(
                "set local application_name = %s; set local time zone 'UTC'",
                (f"onceflow-stage-{part}",),
            )
            try:
                check_attempt(cur, a.pipeline, a.txid, a.attempt, context=f"stage of part {part}: ")
            except (FencedAttemptError, AbandonedTxidError) as e:
                raise for_driver(e) from None  # Spark hands the driver only its text
            if not stage_parts.claim_part(cur, a.pipeline, a.txid, a.attempt, part):
                conn.rollback()
                yield None
                return
            yield cur
        failpoints.hit("stage.before_part_commit", a.txid)
        conn.commit()
        failpoints.hit("stage.after_part_commit", a.txid)


def record_part(
    cur: Any,
    target: StageTarget,
    part: int,
    rows: int,
    dead: int,
    checksum: int | None,
    valid: int | None = None,
) -> None:
    """What the claimed part staged, on its fence row (ledger.fencing.mark_staged sums them);
    `valid`: the records its valid rows account for, one per valid row by default. (The
    fence row's `bytes` stays NULL: process counts the bytes read in the reader.)"""
    a = target.attempt
    valid = rows - dead if valid is None else valid
    stage_parts.record_part(
        cur,
        a.pipeline,
        a.txid,
        a.attempt,
        part,
        rows=rows,
        valid=valid,
        dead=dead,
        checksum=checksum,
    )
