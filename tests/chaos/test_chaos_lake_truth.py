"""The chaos harness's verdict on a lake upsert or merge table (SinkChecks.check, as a
chaos run ends): the versions read back by coordinates (upsert) or folded into partials
(merge), each checked against the acknowledged records, every check holding on a correct
table and a changed row caught. On a real PostgreSQL and a local warehouse under tmp_path."""

from __future__ import annotations

import json

import pytest
from onceflow.commit import commit
from onceflow.hooks.sink import sink_for
from onceflow.ledger.planning import plan
from onceflow_dev.chaos.sink_checks import SinkChecks
from onceflow_dev.chaos.truth.records import Acked
from sink_support import T, pipeline, process, snap, tamper

pytestmark = pytest.mark.integration

RECORDS = [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "x", 4), (0, 3, "z", 3, "bad")]


def sink_checks(dsn, cfg):
    """The checks of the pipeline's sink, as the harness makes them as a run ends."""
    return SinkChecks(dsn, cfg, sink_for(cfg), T, 0)


def acked():
    """What the broker acknowledged: three records, and the one the transform refused (its
    key and value as sink_support.records stages a refused record's)."""
    records = {
        (0, o): Acked(o, sku.encode(), json.dumps({"sku": sku, "qty": q}).encode())
        for o, sku, q in ((0, "x", 1), (1, "y", 2), (2, "x", 4))
    }
    return {0: {**records, (0, 3): Acked(3, b"k", b"bad")}}


@pytest.mark.parametrize("mode", ["delta_upsert", "iceberg_upsert", "delta_merge", "iceberg_merge"])
def test_the_chaos_verdict_on_a_lake_upsert_or_merge_table(ledger_dsn, unique_name, tmp_path, mode):
    cfg = pipeline(unique_name, mode, tmp_path / "warehouse")
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 4}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", RECORDS[:2])
    process(ledger_dsn, cfg, "b", RECORDS[2:])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    counts, checks = sink_checks(ledger_dsn, cfg).check(acked(), [], {0: 4})
    assert (counts["lost"], counts["duplicated"], counts["mismatched"]) == (0, 0, 0)
    assert [c["violations"] for c in checks] == [[]] * len(checks)
    tamper(ledger_dsn, cfg, "x", 100)
    _, checks = sink_checks(ledger_dsn, cfg).check(acked(), [], {0: 4})
    assert any(c["violations"] for c in checks)
