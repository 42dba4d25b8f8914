"""A topic deleted, re-created and refilled past the committed offset, through the real
scheduler: plan refuses before a record is skipped, the audit of the ledger names the
replaced log, and after reset-offsets every record of the new log lands. On the shared test
stack's Apache Kafka.

The sequence issue 21 measured with `make demo`, `onceflow-dev down`/`up` and a million records
on a broker that lost its log, scaled down: deleting and re-creating the topic replaces the
log the same way.
"""

from __future__ import annotations

import time

import pytest
from onceflow.audit import run_audit
from onceflow.config.pipelines_file import get_pipeline
from onceflow.errors import UnknownTxidError
from onceflow.kafka import broker
from onceflow.kafka.recount import count_records
from onceflow.ledger.batches import get_batch
from onceflow.ledger.db import transaction
from onceflow_dev import producer
from onceflow_dev.lost_logs import lost_logs
from test_pipeline_e2e import orders_sample, run_and_wait

pytestmark = pytest.mark.integration


def recreate(bootstrap: str, topic: str, partitions: int) -> None:
    broker.delete_topic(bootstrap, topic)
    deadline = time.monotonic() + 30
    while not broker.create_topic(bootstrap, topic, partitions):
        if time.monotonic() > deadline:
            pytest.fail(f"topic {topic} could not be re-created")
        time.sleep(0.2)


def test_a_recreated_topic_refilled_past_the_committed_offset_stops_plan_until_reset(
    stack, airflow, capsys
):
    recreated_topic(stack, airflow, capsys, "it_recreate")


def recreated_topic(stack, airflow, capsys, name: str) -> None:
    from onceflow.cli.main import main

    cfg = get_pipeline(stack.pipelines_file, name)
    broker.create_topic(stack.kafka_bootstrap, name, 2)
    producer.produce(stack.kafka_bootstrap, name, 2, 400, sample=orders_sample(0.05), seed=7)
    assert run_and_wait(airflow, cfg.dag_id, ["recreate-1"]) == {"recreate-1": "success"}
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            "select partition, committed_offset, topic_id, print_offset from onceflow.offsets"
            " where pipeline = %s order by partition",
            (name,),
        )
        offsets = cur.fetchall()
    assert [(p, c) for p, c, _, _ in offsets] == [(0, 200), (1, 200)]
    assert all(topic_id and print_offset == 199 for _, _, topic_id, print_offset in offsets)

    # the topic is deleted and re-created, and its new log refilled past offset 200
    recreate(stack.kafka_bootstrap, name, 2)
    produced = producer.produce(
        stack.kafka_bootstrap, name, 2, 1000, sample=orders_sample(0.05), start=10_000, seed=8
    )
    assert produced == 1000
    assert min(broker.snapshot(stack.kafka_bootstrap, name, (name,)).ends.values()) == 500

    # what `onceflow-dev up` would say of this pipeline, before anything plans
    lost = lost_logs(stack.postgres_dsn, stack.kafka_bootstrap, [cfg])
    assert [(x.topic, x.partition) for x in lost] == [(name, 0), (name, 1)]
    assert lost[0].why.startswith(
        f"the broker's log for {name}[0] is not the one committed up to offset 200: "
    )

    # plan refuses, names the partition and what to do, is not retried, plans nothing
    assert run_and_wait(airflow, cfg.dag_id, ["recreate-2"]) == {"recreate-2": "failed"}
    tis = {t["task_id"]: t for t in airflow.task_instances(cfg.dag_id, "recreate-2")}
    text = airflow.task_log(cfg.dag_id, "recreate-2", "plan", 1)
    assert (tis["plan"]["state"], tis["plan"]["try_number"]) == ("failed", 1), text[-3000:]
    assert (
        f"the broker's log for {name}[0] is not the one pipeline '{name}' committed up to " in text
    )
    assert f"onceflow reset-offsets --pipeline {name}" in text
    with pytest.raises(UnknownTxidError):
        get_batch(stack.postgres_dsn, name, "recreate-2")

    # the audit of this ledger re-reads the committed ranges: same counts, other records
    reread = lambda rs: count_records(stack.kafka_bootstrap, rs)  # noqa: E731
    report = run_audit(stack.postgres_dsn, cfg, reread)
    assert report.verdict == "violated"
    assert any(
        f"{name}[0] [0, 200) are not the ones process read: the first difference lies in "
        "offsets [0, 200)" in v
        for v in report.violations
    ), report.violations

    # on call: reset to the new log's first offset; every record of it is then published
    assert main(["reset-offsets", "--pipeline", name, "--reason", "topic re-created", "--yes"]) == 0
    out = capsys.readouterr().out
    assert (
        f"the broker's log for {name}[1] is not the one committed up to offset 200: "
        "the topic's id is" in out
    )
    states = run_and_wait(airflow, cfg.dag_id, ["recreate-3"])
    assert states == {"recreate-3": "success"}
    report = run_audit(stack.postgres_dsn, cfg, reread)
    assert report.verdict == "exactly-once", report.violations
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(f"select count(*) from {name}.orders where epoch = 1")
        rows = cur.fetchone()[0]
        cur.execute(
            "select count(*) from onceflow.dead_letters where pipeline = %s and epoch = 1", (name,)
        )
        dead = cur.fetchone()[0]
    assert rows + dead == produced  # the new log's records below offset 200 included
    assert report.ranges_compared >= 2  # the new epoch's ranges, compared by content
