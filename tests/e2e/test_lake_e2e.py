"""The lake sinks end to end on the shared test stack: the shipped inventory transform
appending to an Iceberg table (pipeline it_lake: a real spark-submit per run;
it_lake_connect: a session of the stack's Spark Connect server) and to a Delta table
(it_delta_connect; the Delta upsert below runs spark-submit), a backlog drained by three DAG
runs at once through the scheduler whose tasks write their parts' Parquet files. The table, scanned (pyiceberg; the Delta table's
live files with pyarrow), holds every valid record once (tombstones too, as rows without
values); each committed txid's snapshot or version is the one the ledger names; the audit,
re-reading the broker, says exactly-once."""

from __future__ import annotations

import pytest
from onceflow.audit import run_audit
from onceflow.config.pipelines_file import get_pipeline
from onceflow.hooks.sink import sink_for
from onceflow.kafka import broker
from onceflow.kafka.recount import count_records
from onceflow.ledger import views
from onceflow.ledger.db import transaction
from onceflow.sinks.iceberg.catalog import open_catalog
from onceflow_dev import demo
from test_example_e2e import update

pytestmark = pytest.mark.integration

PARTITIONS = 2
COLUMNS = ("partition", "offset", "txid", "sku", "quantity")


def iceberg_table(dsn, sink):
    """The rows and {txid: snapshot id} of an Iceberg table."""
    with transaction(dsn) as cur, open_catalog(cur, sink.warehouse) as catalog:
        table = catalog.load_table(sink.identifier)
    rows = table.scan(selected_fields=COLUMNS).to_arrow().to_pylist()
    return rows, {s.summary["onceflow.txid"]: str(s.snapshot_id) for s in table.snapshots()}


def delta_table(dsn, sink):
    """The rows and {txid: version} of a Delta table."""
    table = sink.open_table()
    rows = sink.scan(table, COLUMNS).to_pylist()
    history = [h for h in table.history() if "onceflow.txid" in h]
    return rows, {h["onceflow.txid"]: str(h["version"]) for h in history}


def produce(topic: str, bootstrap: str, records: list[tuple[str, bytes | None]]) -> None:
    """Each sku on one partition, in order, one record per request (as test_example_e2e)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors = []
    for sku, value in records:
        p.produce(
            topic,
            value,
            key=sku.encode(),
            partition=int(sku[1:]) % PARTITIONS,
            on_delivery=lambda err, _msg: err and errors.append(err),
        )
        p.flush(30)
    assert not errors, errors


@pytest.mark.parametrize(
    ("pipeline", "read_table"),
    [
        ("it_lake", iceberg_table),
        # process_mode = "connect": the parts' files written by the server's Python workers
        ("it_lake_connect", iceberg_table),
        ("it_delta_connect", delta_table),
    ],
)
def test_a_lake_pipeline_through_the_scheduler_is_exactly_once(
    stack, airflow, pipeline, read_table
):
    import json

    broker.create_topic(stack.kafka_bootstrap, pipeline, PARTITIONS)
    # ten skus updated five times, three tombstones, one update refused (negative quantity)
    records = [(f"s{i}", update(f"s{i}", 10 * r + i)) for r in range(5) for i in range(10)]
    records += [("s3", None), ("s6", None), ("s7", None), ("s4", update("s4", -1))]
    produce(pipeline, stack.kafka_bootstrap, records)
    cfg = get_pipeline(stack.pipelines_file, pipeline)
    runs = demo.runs_to_drain(stack.postgres_dsn, stack.kafka_bootstrap, cfg)
    assert runs == 3  # 27 records per partition at 10 per batch
    airflow.wait_for_dag(cfg.dag_id, timeout=180)
    airflow.unpause(cfg.dag_id)
    run_ids = [f"lake-{n}" for n in range(runs)]
    for run_id in run_ids:  # all at once: the scheduler runs several, commits go in seq order
        airflow.trigger(cfg.dag_id, run_id)
    states = airflow.wait_for_runs(cfg.dag_id, run_ids, timeout=900, echo=None)
    assert states == dict.fromkeys(run_ids, "success")

    report = run_audit(stack.postgres_dsn, cfg, lambda rs: count_records(stack.kafka_bootstrap, rs))
    assert report.verdict == "exactly-once", report.violations
    assert report.batches_committed == 3
    assert (report.records_in_ranges, report.dead_lettered) == (len(records), 1)

    rows, commit_of = read_table(stack.postgres_dsn, sink_for(cfg))
    valid = [
        (sku, None if value is None else json.loads(value)["quantity"])
        for sku, value in records
        if value is None or json.loads(value)["quantity"] >= 0
    ]
    assert sorted(((r["sku"], r["quantity"]) for r in rows), key=str) == sorted(valid, key=str)
    assert len({(r["partition"], r["offset"]) for r in rows}) == len(rows) == len(valid)
    assert report.records_in_sink == len(valid) == demo.sink_rows(stack.postgres_dsn, cfg)[1]

    # the ledger names each committed txid's table commit, the one that records it
    batches = views.batches(stack.postgres_dsn, pipeline)
    assert sorted(b["txid"] for b in batches) == run_ids
    assert {b["txid"]: b["sink_commit"] for b in batches} == commit_of
    assert {r["txid"] for r in rows} == set(run_ids)


def test_a_delta_upsert_pipeline_through_the_scheduler_keeps_each_skus_last_update(stack, airflow):
    """Each sku's row is its last valid update; a tombstone removes it; a refused update
    leaves the one before. Every run's rows are rewritten, by spark-submit's staged
    versions, in one Delta version."""
    import json

    pipeline = "it_delta_upsert"
    broker.create_topic(stack.kafka_bootstrap, pipeline, PARTITIONS)
    records = [(f"s{i}", update(f"s{i}", 10 * r + i)) for r in range(5) for i in range(10)]
    records += [("s3", None), ("s6", None), ("s7", None), ("s4", update("s4", -1))]
    produce(pipeline, stack.kafka_bootstrap, records)
    cfg = get_pipeline(stack.pipelines_file, pipeline)
    runs = demo.runs_to_drain(stack.postgres_dsn, stack.kafka_bootstrap, cfg)
    airflow.wait_for_dag(cfg.dag_id, timeout=180)
    airflow.unpause(cfg.dag_id)
    run_ids = [f"upsert-{n}" for n in range(runs)]
    for run_id in run_ids:
        airflow.trigger(cfg.dag_id, run_id)
    states = airflow.wait_for_runs(cfg.dag_id, run_ids, timeout=900, echo=None)
    assert states == dict.fromkeys(run_ids, "success")

    report = run_audit(stack.postgres_dsn, cfg, lambda rs: count_records(stack.kafka_bootstrap, rs))
    assert report.verdict == "exactly-once", report.violations
    assert (report.records_in_ranges, report.dead_lettered) == (len(records), 1)
    last: dict[str, int | None] = {}
    for sku, value in records:
        if value is None:
            last[sku] = None
        elif json.loads(value)["quantity"] >= 0:
            last[sku] = json.loads(value)["quantity"]
    rows, commit_of = delta_table(stack.postgres_dsn, sink_for(cfg))
    assert sorted((r["sku"], r["quantity"]) for r in rows) == sorted(
        (sku, q) for sku, q in last.items() if q is not None
    )
    batches = views.batches(stack.postgres_dsn, pipeline)
    assert {b["txid"]: b["sink_commit"] for b in batches} == commit_of
    # maintain_every = 2: the run that committed seq 2 maintained the table, the others
    # skipped it
    by_seq = {b["seq"]: b["txid"] for b in batches}
    states = {
        r: {t["task_id"]: t["state"] for t in airflow.task_instances(cfg.dag_id, r)}["maintain"]
        for r in run_ids
    }
    assert states == {r: "success" if r == by_seq[2] else "skipped" for r in run_ids}
    history = sink_for(cfg).open_table().history()
    assert any("onceflow.maintenance" in h for h in history)
