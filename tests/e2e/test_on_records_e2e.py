"""The schedules that need nobody to trigger a run, on the shared stack: "on_records" (the
pipeline's watcher runs in the stack's Airflow triggerer, sees each of three bursts of
records arrive, and the scheduler starts the runs that plan, process and commit them) and
"continuous" (runs back to back while the DAG is unpaused)."""

from __future__ import annotations

import time

import pytest
from onceflow.config.pipelines_file import get_pipeline
from onceflow.kafka import broker
from onceflow.ledger.db import transaction
from test_pipeline_e2e import audit, feed

pytestmark = pytest.mark.integration

PIPELINE = TOPIC = "it_on_records"
BURST = 600


def committed(dsn: str, pipeline: str = PIPELINE) -> int:
    with transaction(dsn) as cur:
        cur.execute(
            "select coalesce(sum(committed_offset - start_offset), 0) from onceflow.offsets"
            " where pipeline = %s",
            (pipeline,),
        )
        return int(cur.fetchone()[0])


def test_each_burst_of_records_is_committed_without_a_trigger(stack, airflow):
    cfg = get_pipeline(stack.pipelines_file, PIPELINE)
    assert cfg.schedule == "on_records"
    produced, seconds = 0, []
    for burst in range(3):
        produced += feed(stack, TOPIC, BURST, start=burst * BURST)
        ends = broker.partition_ends(stack.kafka_bootstrap, [TOPIC]).ends
        assert sum(ends.values()) == produced
        sent = time.monotonic()
        while committed(stack.postgres_dsn) < produced:
            assert time.monotonic() - sent < 180, (
                f"burst {burst + 1}: {committed(stack.postgres_dsn)} of {produced} records "
                f"committed after 180s; runs: {airflow.runs(cfg.dag_id)}"
            )
            time.sleep(0.25)
        seconds.append(time.monotonic() - sent)
        if burst < 2:
            time.sleep(3)  # quiet between bursts: the watcher must not start runs for nothing
    print(f"on_records: each burst committed {', '.join(f'{s:.1f}' for s in seconds)}s after it")

    runs = airflow.runs(cfg.dag_id)
    assert runs and {r["run_type"] for r in runs} == {"asset_triggered"}, runs
    run_ids = [r["dag_run_id"] for r in runs]
    states = airflow.wait_for_runs(cfg.dag_id, run_ids, timeout=120, echo=None)
    assert set(states.values()) == {"success"}, states
    report = audit(stack, PIPELINE)
    assert report.records_in_ranges == produced == report.records_in_sink + report.dead_lettered
    # every run is a txid of the ledger, in the order the scheduler started them
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            "select txid from onceflow.batches where pipeline = %s order by seq", (PIPELINE,)
        )
        txids = [r[0] for r in cur.fetchall()]
    assert sorted(txids) == sorted(run_ids)
    assert report.batches_committed == len(runs)
    # quiet topics start no run: a few empty batches at most (a burst seen while it was
    # still being produced), never one per look
    assert len(runs) <= 3 * 4, run_ids


def test_a_continuous_pipeline_runs_back_to_back_while_unpaused(stack, airflow):
    name = "it_continuous"
    cfg = get_pipeline(stack.pipelines_file, name)
    produced = feed(stack, name, 500)
    airflow.unpause(cfg.dag_id)
    try:
        started = time.monotonic()
        done: list[dict] = []
        # every record committed, and runs after that too: a continuous DAG keeps running
        while committed(stack.postgres_dsn, name) < produced or len(done) < 3:
            assert time.monotonic() - started < 240, (committed(stack.postgres_dsn, name), done)
            time.sleep(0.5)
            done = [r for r in airflow.runs(cfg.dag_id) if r["state"] == "success"]
    finally:
        airflow.pause(cfg.dag_id)
    assert {r["run_type"] for r in done} == {"scheduled"}, done
    report = audit(stack, name)
    assert report.records_in_ranges == produced == report.records_in_sink + report.dead_lettered
    with transaction(stack.postgres_dsn) as cur:
        cur.execute("select txid from onceflow.batches where pipeline = %s", (name,))
        txids = {r[0] for r in cur.fetchall()}
    assert {r["dag_run_id"] for r in done} <= txids
