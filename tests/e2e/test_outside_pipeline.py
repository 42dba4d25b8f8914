"""A user's pipeline defined in a package outside the repository runs through the real
scheduler and audits exactly-once, with no change to Onceflow (issue 13).

The package `acme_pipelines` (tests/outside_pipeline, copied by conftest's outside_package
fixture into a temporary folder) is on the path only through ONCEFLOW_PYTHONPATH, given to
`onceflow-dev up` as a user gives it: the process task passes it to spark-submit, whose driver
imports the transform from that folder, and to the executors, whose Python workers import
the module again to run the transform's Python UDF. In process_mode = "connect"
(it_outside_connect), the task ships the module to its session of the stack's Spark Connect
server, whose Python workers import it from there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from onceflow.audit import run_audit
from onceflow.config.pipelines_file import get_pipeline
from onceflow.kafka import broker
from onceflow.kafka.recount import count_records
from onceflow.ledger.db import transaction

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

PAGES = {"/": "home", "/docs/intro": "docs", "/shop/cart/": "shop"}  # page -> its section
NOT_A_CLICK = "not a click: needs user and page"


def produce_clicks(bootstrap: str, topic: str, count: int) -> list[tuple[int, int, bytes]]:
    """Clicks on two partitions, every tenth record not JSON and every tenth one without a
    page; returns (partition, offset, value) of each acknowledged record."""
    from confluent_kafka import Producer

    broker.create_topic(bootstrap, topic, 2)
    sent, errors = [], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            sent.append((msg.partition(), msg.offset(), msg.value()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    pages = list(PAGES)
    for i in range(count):
        if i % 10 == 3:
            value = b"{not json"
        elif i % 10 == 7:
            value = json.dumps({"user": f"u{i}"}).encode()
        else:
            value = json.dumps({"user": f"u{i % 13}", "page": pages[i % 3], "ms": 10 * i}).encode()
        producer.produce(topic, value, partition=i % 2, on_delivery=on_delivery)
        # one record per produce request: the embedded broker reports a partition's end
        # offset as its last batch's base offset + 1
        assert producer.flush(30) == 0
    assert errors == [], errors
    return sorted(sent)


def click(value: bytes) -> dict | None:
    try:
        c = json.loads(value)
    except ValueError:
        return None
    return c if "user" in c and "page" in c else None


@pytest.mark.parametrize("name", ["it_outside", "it_outside_connect"])
def test_a_pipeline_from_a_package_outside_the_repository_runs_exactly_once(
    stack, airflow, outside_package, name
):
    assert not outside_package.resolve().is_relative_to(ROOT)
    for folder in (ROOT / "include" / "onceflow", ROOT / "spark_jobs"):
        for path in folder.rglob("*.py"):
            assert "acme_pipelines" not in path.read_text(), f"{path} names the user's package"

    sent = produce_clicks(stack.kafka_bootstrap, name, 200)  # 100 per partition: two batches of 60
    cfg = get_pipeline(stack.pipelines_file, name)
    run_ids = ["outside-1", "outside-2"]
    for run_id in run_ids:
        airflow.trigger(cfg.dag_id, run_id)
    states = airflow.wait_for_runs(cfg.dag_id, run_ids, timeout=900, echo=None)
    if set(states.values()) != {"success"}:
        with transaction(stack.postgres_dsn) as cur:
            cur.execute(
                "select txid, state, last_error from onceflow.batches"
                " where pipeline = %s order by seq",
                (name,),
            )
            pytest.fail(f"runs {states}; batches {cur.fetchall()}")

    report = run_audit(stack.postgres_dsn, cfg, lambda rs: count_records(stack.kafka_bootstrap, rs))
    assert report.verdict == "exactly-once", report.violations
    valid = [(p, o, c) for p, o, v in sent if (c := click(v)) is not None]
    invalid = [(p, o) for p, o, v in sent if click(v) is None]
    assert len(valid) == 160 and len(invalid) == 40
    assert report.batches_committed == 2
    assert report.records_in_ranges == len(sent)
    assert (report.records_in_sink, report.dead_lettered) == (len(valid), len(invalid))

    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            'select partition, "offset", user_id, page, section, dwell_ms'
            f' from {name}.clicks order by partition, "offset"'
        )
        rows = cur.fetchall()
        cur.execute(
            'select partition, "offset", reason from onceflow.dead_letters'
            ' where pipeline = %s order by partition, "offset"',
            (name,),
        )
        dead = cur.fetchall()
    # section is the user's Python UDF: computed in the executors from the outside module
    assert rows == [(p, o, c["user"], c["page"], PAGES[c["page"]], c["ms"]) for p, o, c in valid]
    assert dead == [(p, o, NOT_A_CLICK) for p, o in invalid]
