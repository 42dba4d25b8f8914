"""The bench's pipelines (bench/run.py's Ledger) plan exactly their topic's ranges through
the library's own plan, and lake.check_snapshots reads the summary key commit writes: a
change of either interface fails here, not minutes into `make bench` (both had drifted
unnoticed while only single sections of the bench were run)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import run as bench_run  # noqa: E402
from common import Topic  # noqa: E402


@pytest.mark.integration
def test_a_bench_pipeline_plans_exactly_its_topics_ranges(ledger_dsn, unique_name, tmp_path):
    from onceflow.ledger.batches import read_ranges
    from onceflow.ledger.db import transaction
    from onceflow.ranges import OffsetRange

    ranges = [OffsetRange(unique_name, 0, 0, 700), OffsetRange(unique_name, 1, 0, 300)]
    topic = Topic(unique_name, partitions=2, records=1000, ranges=ranges, bytes=0)
    led = bench_run.Ledger(ledger_dsn, 0, tmp_path, prefix=unique_name)
    cfg, path = led.new_pipeline(topic)
    assert path.is_file()
    with transaction(ledger_dsn) as cur:
        assert sorted(read_ranges(cur, cfg.name, "run-1")) == ranges


@pytest.mark.unit
def test_the_lake_bench_reads_the_seq_under_the_key_commit_writes():
    import lake
    from onceflow.ledger.attempt import Attempt
    from onceflow.sinks.lake.records import publication_summary

    target = Attempt(pipeline="p", txid="t", seq=1, attempt=1)
    summary = publication_summary(target, 10)
    assert summary[lake.SEQ_KEY] == "1"
