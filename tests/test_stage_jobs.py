"""The stage job's rows in the ledger: what process's driver and its tasks hand each other
(onceflow.ledger.stage_jobs), in place of accumulators and local properties."""

from __future__ import annotations

import pytest
from onceflow.db import transaction
from onceflow.ledger.stage_jobs import (
    InputRangeRead,
    fast_stage_of,
    range_reads,
    record_range_read,
    set_fast_stage,
    stage_job_rows,
)
from onceflow.range_digest import RangeRead, RecordPrint
from onceflow.staging.fast_stage import FastStage
from onceflow.staging.target import StageTarget

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
    target = StageTarget(ledger_dsn, "s", "stage_t", ("a",), "p", "tx", 1, seq=3)
    with stage_job_rows(ledger_dsn, "p", "tx", 1) as job:
        assert fast_stage_of(job) is None  # not set yet: the task refuses (fast_stage)
        set_fast_stage(job, FastStage(target, None))
        with transaction(ledger_dsn) as cur:
            cur.execute("select fast_stage from onceflow.stage_jobs where job = %s", (job.job,))
            stored = bytes(cur.fetchone()[0])
        password = ledger_dsn.partition("://")[2].partition("@")[0].encode()
        assert ledger_dsn.encode() not in stored and (not password or password not in stored)
        got = fast_stage_of(job)
        assert got.target == target  # the task's own DSN put back
