"""Issue 51's acceptance, end to end on real parts: the demo's `shop` database (three tables,
onceflow_dev.shop) receives 50,000 random row changes (inserts, updates, deletes,
primary-key changes, transactions across tables) in rounds while txids run; Debezium's
PostgreSQL connector in a Kafka Connect worker captures them; the worker is killed with
SIGKILL in the middle of a round and restarted, so it sends changes again; malformed
records are produced among the change events. After every round, each sink table equals
its source table row for row, in PostgreSQL, Iceberg and Delta (a pipeline of each, a table
per topic); every audit says exactly-once, and the only dead letters are the malformed
records.

Process runs in the test session's Spark Connect server (the rule does not depend on how
the job reaches Spark: test_cdc_pipeline.py runs spark-submit)."""

from __future__ import annotations

import contextlib

import pytest
from cdc_support import (
    assert_mirrors,
    cdc_source,
    change_events,
    run_txid,
    sink_rows,
    source_rows,
    sql,
)
from kafka import KafkaProducer

pytestmark = pytest.mark.integration

CHANGES = 50_000
ROUNDS = 5  # the worker is killed in the middle of the third
MALFORMED = (  # (record key, value, the dead letter's reason)
    (b'{"id": 7}', b'{"before": null, "after": {"id": 7}}', "the envelope has no `op`"),
    (b'{"id": 8}', b"{not json", "the record's value is not JSON"),
)


def pipelines() -> str:
    from onceflow_dev import shop

    text = ""
    for name, kind in (
        ("mirror_pg", "postgres"),
        ("mirror_iceberg", "iceberg"),
        ("mirror_delta", "delta"),
    ):
        text += f"""
[pipelines.{name}]
topics = {shop.topics()!r}
envelope = "debezium"
[pipelines.{name}.sink]
kind = "{kind}"
mode = "upsert"
tables = "{{table}}"
"""
    return text.replace("'", '"')


def names() -> tuple[str, ...]:
    return ("mirror_pg", "mirror_iceberg", "mirror_delta")


@pytest.fixture(scope="module")
def source(tmp_path_factory, spark_connect_server):
    from onceflow_dev import shop

    def connector(login: dict) -> dict:
        return shop.connector(login["host"], int(login["port"]), login["user"], "")

    root = tmp_path_factory.mktemp("cdc_mirror")
    with cdc_source(
        root, pipelines(), shop.prepare, connector, connect_url=spark_connect_server[0]
    ) as found:
        yield found


def mirrored(src) -> None:
    """Every sink table of every pipeline equals its source table, row for row."""
    from onceflow_dev import shop

    for table, (_, key, _) in shop.TABLES.items():
        columns, rows = source_rows(src.shop, table)
        topic = f"{shop.TOPIC_PREFIX}.public.{table}"

        def explain(value, topic=topic, key=key) -> str:
            dead = sql(src.ledger, "select pipeline, reason from onceflow.dead_letters")
            return f"{change_events(src.bootstrap, topic, key[0], value)}; dead letters {dead}"

        for name in names():
            sink = sink_rows(src.env, name, table, columns)
            assert_mirrors(sink, rows, f"{name} {table}", explain)


def test_50000_changes_with_a_killed_worker_land_exactly_once_in_every_sink(source):
    from cdc_support import pipeline
    from onceflow.audit import run_audit
    from onceflow_dev import shop

    per_round = CHANGES // ROUNDS
    made = 0
    for n in range(1, ROUNDS + 1):
        if n == 3:  # SIGKILL in the middle: its offsets since the last flush are sent again
            made += shop.workload(source.shop, per_round // 2, seed=n)
            source.worker.kill()
            made += shop.workload(source.shop, per_round - per_round // 2, seed=100 + n)
            source.worker.start()
        else:
            made += shop.workload(source.shop, per_round, seed=n)
        if n == 2:
            producer = KafkaProducer(bootstrap_servers=source.bootstrap)
            with contextlib.closing(producer):
                for key, value, _ in MALFORMED:
                    producer.send("shop.public.customers", key=key, value=value)
                producer.flush()
        shop.settle(source.shop, source.bootstrap, f"round-{n}")
        run_txid(source.env, f"round-{n}", names())
        mirrored(source)
    assert made >= CHANGES
    for name in names():
        report = run_audit(source.ledger, pipeline(source.env, name))
        assert report.violations == [] and report.verdict == "exactly-once", name
    reasons = sql(source.ledger, "select pipeline, reason from onceflow.dead_letters order by 1, 2")
    readers = sorted(names())
    expected = sorted((p, why) for p in readers for _, _, why in MALFORMED)
    assert len(reasons) == len(expected)
    for (pipe, reason), (want, why) in zip(reasons, expected, strict=True):
        assert pipe == want and reason.startswith(why), (pipe, reason)
