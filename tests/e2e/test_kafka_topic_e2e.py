"""The Kafka topic sink end to end on the shared test stack's Apache Kafka (source and output
on it): the shipped inventory transform
publishing to a topic (pipeline rk_topic), a backlog drained by three DAG runs at once
through the real scheduler, each a real spark-submit. A read_committed consumer of the
output sees every valid source record exactly once, with its columns, keyed by sku and
headed by its txid; the commit log holds one marker per committed seq; `onceflow audit
--reread` says exactly-once."""

from __future__ import annotations

import json

import pytest
from onceflow.cli.main import main
from onceflow.config.pipelines_file import get_pipeline
from onceflow.kafka import broker
from onceflow.ledger import views
from onceflow.sinks.kafka.markers import Marker
from onceflow.sinks.kafka.output_records import SEQ_HEADER, SOURCE_HEADER, TXID_HEADER
from onceflow_dev import demo
from sink_support import consume
from test_example_e2e import update

pytestmark = pytest.mark.integration

PIPELINE = TOPIC = "rk_topic"
PARTITIONS = 2


def produce(bootstrap: str, records: list[tuple[str, bytes | None]]) -> dict[tuple[int, int], int]:
    """Each sku on one partition, in order; returns (partition, offset) -> record index."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    acked: dict[tuple[int, int], int] = {}
    errors = []

    def delivered(err, msg, i):
        if err:
            errors.append(err)
        else:
            acked[(msg.partition(), msg.offset())] = i

    for i, (sku, value) in enumerate(records):
        p.produce(
            TOPIC,
            value,
            key=sku.encode(),
            partition=int(sku[1:]) % PARTITIONS,
            on_delivery=lambda err, msg, i=i: delivered(err, msg, i),
        )
    assert p.flush(30) == 0
    assert not errors, errors
    return acked


def test_a_kafka_topic_pipeline_through_the_scheduler_is_exactly_once(stack, airflow, capsys):
    bootstrap = stack.kafka_bootstrap
    broker.create_topic(bootstrap, TOPIC, PARTITIONS)
    # ten skus updated five times, three tombstones, one update refused (negative quantity)
    records = [(f"s{i}", update(f"s{i}", 10 * r + i)) for r in range(5) for i in range(10)]
    records += [("s3", None), ("s6", None), ("s7", None), ("s4", update("s4", -1))]
    acked = produce(bootstrap, records)
    cfg = get_pipeline(stack.pipelines_file, PIPELINE)
    runs = demo.runs_to_drain(stack.postgres_dsn, bootstrap, cfg)
    assert runs == 3  # 27 records per partition at 10 per batch
    run_ids = [f"topic-{n}" for n in range(runs)]
    for run_id in run_ids:  # all at once: the scheduler runs several, commits go in seq order
        airflow.trigger(cfg.dag_id, run_id)
    states = airflow.wait_for_runs(cfg.dag_id, run_ids, timeout=900, echo=None)
    assert states == dict.fromkeys(run_ids, "success")

    # every valid source record exactly once, by its coordinates, with its own columns
    out = consume(bootstrap, cfg.sink.topic)
    sources = [json.loads(h[SOURCE_HEADER]) for _, _, _, _, h in out]
    coords = [(s["topic"], s["partition"], s["offset"]) for s in sources]
    valid = {
        (TOPIC, p, o): i
        for (p, o), i in acked.items()
        if records[i][1] is None or json.loads(records[i][1])["quantity"] >= 0
    }
    assert len(coords) == len(set(coords)) == len(valid) == len(records) - 1
    assert set(coords) == set(valid)
    for (_, _, key, value, _), coord in zip(out, coords, strict=True):
        sku, raw = records[valid[coord]]
        assert key == sku.encode()
        row = json.loads(value)
        want = None if raw is None else json.loads(raw)["quantity"]
        assert (row["sku"], row["quantity"]) == (sku, want)

    # each record headed by the txid and seq that published it, one marker per seq
    batches = {b["txid"]: b for b in views.batches(stack.postgres_dsn, PIPELINE)}
    assert sorted(batches) == run_ids
    per_seq: dict[int, int] = {}
    for _, _, _, _, h in out:
        txid, seq = h[TXID_HEADER].decode(), int(h[SEQ_HEADER])
        assert batches[txid]["seq"] == seq
        per_seq[seq] = per_seq.get(seq, 0) + 1
    markers = [Marker.parse(v, o) for _, o, _, v, _ in consume(bootstrap, cfg.sink.commit_log)]
    assert sorted((m.seq, m.txid, m.records) for m in markers) == sorted(
        (b["seq"], t, per_seq.get(b["seq"], 0)) for t, b in batches.items()
    )
    assert {t: b["sink_commit"] for t, b in batches.items()} == {
        m.txid: str(m.offset) for m in markers
    }

    capsys.readouterr()
    assert main(["audit", "--pipeline", PIPELINE, "--reread"]) == 0
    said = capsys.readouterr().out
    assert f"audit of pipeline {PIPELINE}: exactly-once" in said, said
