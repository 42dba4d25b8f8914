"""OpenLineage on the shared stack: one DAG run of a pipeline marked `openlineage = true`,
its events as Airflow's OpenLineage provider writes them (file transport, configured for the
test stack in conftest.py): plan, process and commit name the topic and the sink's table,
with the run's exact ranges and the sink's counts (onceflow.airflow.lineage)."""

from __future__ import annotations

import json
import time

import pytest
from conftest import OPENLINEAGE_EVENTS
from onceflow.config.pipelines_file import get_pipeline
from onceflow.ledger.db import transaction
from psycopg2.extensions import parse_dsn
from test_pipeline_e2e import audit, feed

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

TXID = "lineage-1"


def run_events(txid: str, timeout: float = 60) -> dict[tuple[str, str], dict]:
    """(task, eventType) -> the provider's event of txid's run, once commit's COMPLETE is in."""
    deadline = time.monotonic() + timeout
    while True:
        found = {}
        lines = OPENLINEAGE_EVENTS.read_text().splitlines() if OPENLINEAGE_EVENTS.exists() else []
        for line in lines:
            event = json.loads(line)
            airflow = event["run"]["facets"].get("airflow") or {}
            if (airflow.get("dagRun") or {}).get("run_id") != txid:
                continue
            task = event["job"]["name"].rsplit(".", 1)[-1]
            found[(task, event["eventType"])] = event
        if ("commit", "COMPLETE") in found or time.monotonic() > deadline:
            return found
        time.sleep(1)


def test_a_runs_lineage_holds_its_exact_ranges_and_the_sinks_counts(stack, airflow):
    cfg = get_pipeline(stack.pipelines_file, "it_lineage")
    produced = feed(stack, "it_lineage", 400)
    airflow.trigger(cfg.dag_id, TXID)
    assert airflow.wait_for_runs(cfg.dag_id, [TXID], timeout=300)[TXID] == "success"
    events = run_events(TXID)
    for task in ("plan", "process", "commit"):
        assert (task, "START") in events and (task, "COMPLETE") in events, sorted(events)

    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            "select topic, partition, from_offset, until_offset from onceflow.ranges"
            " where pipeline = %s and txid = %s order by topic, partition",
            (cfg.name, TXID),
        )
        ranges = [
            {"topic": t, "partition": p, "from_offset": f, "until_offset": u}
            for t, p, f, u in cur.fetchall()
        ]
        cur.execute(
            "select seq, records_read, records_out from onceflow.batches"
            " where pipeline = %s and txid = %s",
            (cfg.name, TXID),
        )
        seq, records_read, records_out = cur.fetchone()
    assert sum(r["until_offset"] - r["from_offset"] for r in ranges) == produced == records_read

    kafka = f"kafka://{stack.kafka_bootstrap.split(',')[0]}"
    db = parse_dsn(stack.postgres_dsn)
    table = (f"postgres://{db['host']}:{db['port']}", f"{db['dbname']}.{cfg.sink_schema}.orders")
    for task in ("plan", "process", "commit"):
        event = events[(task, "COMPLETE")]
        facet = event["run"]["facets"]["onceflow_batch"]
        # the exact ranges the ledger recorded at plan, in every step's event
        assert (facet["pipeline"], facet["txid"], facet["seq"], facet["step"]) == (
            cfg.name,
            TXID,
            seq,
            task,
        )
        assert facet["ranges"] == ranges
        assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [(kafka, "it_lineage")]
        outputs = [(d["namespace"], d["name"]) for d in event["outputs"]]
        assert outputs == ([] if task == "plan" else [table])
    commit = events[("commit", "COMPLETE")]
    read = commit["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"]
    published = commit["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"]
    assert (read, published) == (records_read, records_out)
    assert records_out > 0 and records_out < records_read  # the sample's malformed ones: dead
    assert commit["outputs"][0]["facets"]["version"]["datasetVersion"] == f"seq {seq}"
    report = audit(stack, "it_lineage")
    assert report.records_in_sink == records_out
