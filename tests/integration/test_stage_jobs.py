"""The stage job's rows in the ledger: what process's driver and its tasks hand each other
(onceflow.ledger.stage_jobs), in place of accumulators and local properties."""

from __future__ import annotations

import pytest
from onceflow.hooks.sink import sink_for
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import Ledger, transaction
from onceflow.ledger.fencing import claim_attempt
from onceflow.ledger.planning import plan
from onceflow.ledger.range_digest import RangeRead, RecordPrint
from onceflow.ledger.stage_jobs import (
    InputRangeRead,
    fast_stage_of,
    open_stage_job,
    range_reads,
    record_range_read,
    set_fast_stage,
    stage_job_rows,
)
from onceflow.staging.fast_stage import FastStage
from onceflow.staging.target import StageTarget
from test_ledger import pipeline, snap

pytestmark = pytest.mark.integration


def _read(records: int) -> InputRangeRead:
    seen = RangeRead("t", 0, records, {0: 12345, 3: 7}, RecordPrint(99, "ab" * 16))
    return InputRangeRead(records, records * 10, seen)


def test_a_range_read_again_records_the_same_row_once(ledger_dsn):
    with stage_job_rows(ledger_dsn, "p", "tx", 1) as job:
        record_range_read(job, 0, _read(5))
        record_range_read(job, 0, _read(5))  # a retried task, a recomputed cache
        record_range_read(job, 2, _read(3))
        reads = range_reads(job)
        assert sorted(reads) == [0, 2]
        assert reads[0] == _read(5)  # the digest and the print survive the round trip
        assert reads[2].records == 3 and reads[2].bytes == 30


def test_each_job_counts_its_own_reads_and_its_rows_go_with_it(ledger_dsn):
    with stage_job_rows(ledger_dsn, "p", "tx", 1) as first:
        record_range_read(first, 0, _read(5))
        with stage_job_rows(ledger_dsn, "p", "tx", 1) as second:  # e.g. after poison found
            assert range_reads(second) == {}
            record_range_read(second, 0, _read(4))
            assert range_reads(first)[0].records == 5
    with transaction(ledger_dsn) as cur:
        cur.execute(
            "select count(*) from onceflow.job_reads where job in (%s, %s)",
            (first.job, second.job),
        )
        assert cur.fetchone()[0] == 0
        cur.execute("select count(*) from onceflow.stage_jobs where txid = 'tx'")
        assert cur.fetchone()[0] == 0


def test_the_fast_stage_is_kept_without_the_dsn(ledger_dsn):
    ledger = Ledger(ledger_dsn)
    target = StageTarget(ledger, Attempt("p", "tx", 3, 1), "s", "stage_t", ("a",))
    with stage_job_rows(ledger, "p", "tx", 1) as job:
        assert fast_stage_of(job) is None  # not set yet: the task refuses (fast_stage)
        set_fast_stage(job, FastStage(target, None))
        with transaction(ledger_dsn) as cur:
            cur.execute("select fast_stage from onceflow.stage_jobs where job = %s", (job.job,))
            stored = bytes(cur.fetchone()[0])
        password = ledger_dsn.partition("://")[2].partition("@")[0].encode()
        assert ledger_dsn.encode() not in stored and (not password or password not in stored)
        got = fast_stage_of(job)
        assert got.target == target  # the task's own ledger put back


def _jobs(dsn: str, *refs) -> tuple[set[str], set[str]]:
    """Which of the jobs `refs` still have their row, and which their reads."""
    jobs = tuple(r.job for r in refs)
    with transaction(dsn) as cur:
        cur.execute("select job::text from onceflow.stage_jobs where job::text in %s", (jobs,))
        rows = {r[0] for r in cur.fetchall()}
        cur.execute("select job::text from onceflow.job_reads where job::text in %s", (jobs,))
        return rows, {r[0] for r in cur.fetchall()}


def test_a_claim_drops_what_dead_drivers_and_outliving_tasks_left(ledger_dsn, unique_name):
    """A driver killed inside its job leaves the job's rows, and a task that outlives its
    job records its read after the job's rows went: the next claim drops both, and keeps
    the rows of the job that is running."""
    cfg = pipeline(unique_name)
    plan(ledger_dsn, cfg, "a", snap({("orders", 0): 10}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({("orders", 0): 20}), sink=sink_for(cfg))
    dead = open_stage_job(
        ledger_dsn, cfg.name, "a", claim_attempt(ledger_dsn, cfg.name, "a").attempt
    )
    record_range_read(dead, 0, _read(5))  # its driver was killed: no block ended
    live = open_stage_job(
        ledger_dsn, cfg.name, "b", claim_attempt(ledger_dsn, cfg.name, "b").attempt
    )
    record_range_read(live, 0, _read(7))
    with stage_job_rows(ledger_dsn, cfg.name, "b", 1) as ended:
        pass
    record_range_read(ended, 0, _read(7))  # a task of it, after its rows went
    assert _jobs(ledger_dsn, dead, live, ended) == (
        {dead.job, live.job},
        {dead.job, live.job, ended.job},
    )

    claim_attempt(ledger_dsn, cfg.name, "a")  # the retry of "a" fences the dead driver's attempt
    assert _jobs(ledger_dsn, dead, live, ended) == ({live.job}, {live.job})
    assert range_reads(live)[0].records == 7
