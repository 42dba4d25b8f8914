"""Points in time on the shared stack, through the real scheduler: `reset-offsets --to-time`
reprocesses a topic from the middle, `backfill --since` re-runs the committed batches that
hold records from a time on. Every record carries a Kafka timestamp the test chose: record i
was written at T0 + i seconds, on partition i % 2."""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest
from onceflow.cli.main import main
from onceflow.config.pipelines_file import get_pipeline
from onceflow.kafka import broker
from onceflow.ledger.db import transaction
from test_pipeline_e2e import audit, orders_sample, run_and_wait

pytestmark = pytest.mark.integration

PARTITIONS = 2
# an hour ago: record times inside the broker's retention, whatever day the test runs
T0_MS = (int(time.time()) - 3600) * 1000


def at(i: int) -> str:
    """The time of record i, as the command line takes it."""
    return dt.datetime.fromtimestamp((T0_MS + i * 1000) / 1000, dt.timezone.utc).isoformat()


def produce_timed(bootstrap: str, topic: str, first: int, n: int) -> None:
    """Records first..first+n-1 of the orders sample (none malformed), record i at T0 + i s."""
    from confluent_kafka import Producer

    broker.create_topic(bootstrap, topic, PARTITIONS)
    sample, rng = orders_sample(0.0), random.Random(first)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors = []
    for i in range(first, first + n):
        key, value = sample(i, rng)
        p.produce(
            topic,
            value,
            key=key,
            partition=i % PARTITIONS,
            timestamp=T0_MS + i * 1000,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert p.flush(30) == 0 and errors == []


def sink_rows(dsn: str, pipeline: str) -> dict[tuple[int, int, int], int]:
    """(epoch, partition, offset) -> how many rows the sink holds for that source record."""
    with transaction(dsn) as cur:
        cur.execute(
            f'select epoch, partition, "offset", count(*) from {pipeline}.orders'
            ' group by epoch, partition, "offset"'
        )
        return {(e, p, o): n for e, p, o, n in cur.fetchall()}


def test_a_reset_to_a_time_in_the_middle_of_the_topic_publishes_from_there_again(
    stack, airflow, capsys
):
    name = "it_time_reset"
    cfg = get_pipeline(stack.pipelines_file, name)
    produce_timed(stack.kafka_bootstrap, name, 0, 1000)
    assert run_and_wait(airflow, cfg.dag_id, ["time-1"]) == {"time-1": "success"}
    # records 600..999 (offsets 300..499 of each partition) are at or after record 600's time
    capsys.readouterr()
    argv = ["reset-offsets", "--pipeline", name, "--to-time", at(600)]
    assert main([*argv, "--reason", "reprocess from 600", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "abandoned: none" in out
    for partition in range(PARTITIONS):
        assert f"{name}[{partition}]: committed 500 -> restarts at 300 (a new epoch)" in out, out
    assert run_and_wait(airflow, cfg.dag_id, ["time-2"]) == {"time-2": "success"}

    rows = sink_rows(stack.postgres_dsn, name)
    first_epoch = {(p, o) for (e, p, o) in rows if e == 0}
    second_epoch = {(p, o) for (e, p, o) in rows if e == 1}
    assert set(rows.values()) == {1}  # once per record and epoch
    assert first_epoch == {(p, o) for p in range(PARTITIONS) for o in range(500)}  # 1000 records
    assert second_epoch == {(p, o) for p in range(PARTITIONS) for o in range(300, 500)}  # 400
    print(
        f"reset to record 600's time: 1000 records in epoch 0, {len(second_epoch)} again in "
        f"epoch 1, {sum(rows.values())} rows"
    )
    report = audit(stack, name)
    assert report.records_in_sink == 1400 and report.batches_committed == 2
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            "select reason, old_offset, new_offset from onceflow.resets where pipeline = %s",
            (name,),
        )
        assert sorted(cur.fetchall()) == [("reprocess from 600", 500, 300)] * PARTITIONS


def test_backfill_since_a_time_re_runs_exactly_the_batches_holding_records_from_then(
    stack, airflow, capsys
):
    name = "it_time_backfill"
    cfg = get_pipeline(stack.pipelines_file, name)
    for run_id, first, n in (("bf-1", 0, 600), ("bf-2", 600, 400), ("bf-3", 1000, 300)):
        produce_timed(stack.kafka_bootstrap, name, first, n)
        assert run_and_wait(airflow, cfg.dag_id, [run_id]) == {run_id: "success"}
    before = sink_rows(stack.postgres_dsn, name)
    assert len(before) == 1300

    capsys.readouterr()
    assert main(["backfill", "--pipeline", name, "--since", at(5000)]) == 0  # none that late
    assert "0 committed batch(es) hold records at or after" in capsys.readouterr().out
    # record 800 is in bf-2 (600..999): bf-2 and bf-3 are re-run, bf-1 is not
    assert main(["backfill", "--pipeline", name, "--since", at(800), "--timeout", "600"]) == 0
    out = capsys.readouterr().out
    assert f"2 committed batch(es) hold records at or after {at(800)}: seq 2..3" in out, out
    assert f"{name}[0]: first record at or after {at(800)}: offset 400" in out
    assert "backfilled seq 2..3: 2 batch(es) republished" in out

    after = sink_rows(stack.postgres_dsn, name)
    assert after == before  # each record once: the re-runs replaced their own output
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            "select txid, staged_attempt from onceflow.batches where pipeline = %s order by seq",
            (name,),
        )
        attempts = dict(cur.fetchall())
    assert attempts == {"bf-1": 1, "bf-2": 2, "bf-3": 2}
    print(f"backfill since record 800's time: re-ran {attempts}; {len(after)} rows, each once")
    report = audit(stack, name)
    assert report.records_in_sink == 1300 and report.batches_committed == 3
