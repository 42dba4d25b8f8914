"""The chaos harness's reading of a Kafka sink on Apache Kafka (the disposable broker of the
`real_kafka` fixture): after a commit whose Kafka transaction was aborted and two that
committed, SinkSnapshot.topic_output reads what a read_committed consumer sees, no aborted
record, and the truth of the topic holds."""

from __future__ import annotations

import json

import pytest
from onceflow.commit import commit
from onceflow.failpoints import FailpointError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.db import transaction
from onceflow.ledger.planning import plan
from onceflow_dev.chaos import sink_snapshot
from onceflow_dev.chaos.truth import compare
from onceflow_dev.chaos.truth.accounting import account
from onceflow_dev.chaos.truth.records import Acked, SinkRecord
from onceflow_dev.chaos.truth.topic import TopicMarker, TopicRecord, topic_truth
from sink_support import XY, T, consume, kafka_pipeline, process, snap

pytestmark = pytest.mark.integration


def test_the_harness_reads_the_committed_output_and_its_markers(
    ledger_dsn, unique_name, real_kafka, tmp_path, monkeypatch
):
    monkeypatch.setenv("ONCEFLOW_FAILPOINTS_DIR", str(tmp_path))
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", real_kafka.bootstrap)  # the source cluster
    topic = f"out-{unique_name}"
    cfg = kafka_pipeline(unique_name, real_kafka.bootstrap, topic, partitions=2, key="sku")
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    (tmp_path / "commit.before_sink_commit@a").write_text("raise")
    with pytest.raises(FailpointError):  # produced, then aborted
        commit(ledger_dsn, cfg, "a")
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 4}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "b", [(0, 3, "w", 4)])
    assert commit(ledger_dsn, cfg, "b").outcome == "committed"
    # the aborted transaction's two records are in the log all the same
    assert len(consume(real_kafka.bootstrap, topic, committed=False)) == 5

    with transaction(ledger_dsn) as cur:
        read = sink_snapshot.SinkSnapshot(cur, cfg, T)
        records, markers = read.topic_output(sink_for(cfg))
        ranges = read.committed_ranges()
        dead = read.dead_letters()
    got = sorted(
        (r["partition"], r["offset"], r["txid"], r["seq"], r["columns"]["sku"]) for r in records
    )
    assert got == [(0, 0, "a", 1, "x"), (0, 1, "a", 1, "y"), (0, 3, "b", 2, "w")]
    assert sorted((m.seq, m.txid, m.records) for m in markers) == [(1, "a", 2), (2, "b", 1)]
    assert all(isinstance(m, TopicMarker) for m in markers)
    tops = [
        TopicRecord(r["epoch"], r["partition"], r["offset"], r["txid"], r["seq"]) for r in records
    ]
    assert topic_truth(tops, markers, ranges) == []

    def value(sku, qty):
        return json.dumps({"sku": sku, "qty": qty}).encode()

    acked = {
        0: {
            (0, 0): Acked(0, b"x", value("x", 1)),
            (0, 1): Acked(1, b"y", value("y", 2)),
            (0, 2): Acked(2, b"k", b"bad"),
            (0, 3): Acked(3, b"w", value("w", 4)),
        }
    }
    rows = [
        SinkRecord(r["epoch"], r["partition"], r["offset"], "row", r["columns"]) for r in records
    ]
    counts = account(acked, rows + dead, [], 0, None, row_agrees=compare.fields_row(("sku",)))
    assert (counts["in_sink"], counts["dead_lettered"]) == (3, 1)
    assert (counts["lost"], counts["duplicated"], counts["mismatched"]) == (0, 0, 0)
