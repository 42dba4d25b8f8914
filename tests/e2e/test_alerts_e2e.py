"""Alerts on the shared stack: the triggerer checks a pipeline's lag every second
(AlertsTrigger, the watcher of its alerts DAG), and a user's notifier records each call
(tests/outside_pipeline/acme_pipelines/alert_recorder.py). The lag alert fires once when the
records arrive and clears once when a run commits them, however many looks see each."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from onceflow.config.pipelines_file import get_pipeline
from onceflow.kafka import broker
from onceflow.ledger.db import transaction
from test_pipeline_e2e import audit, feed

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

TOPIC = "it_alerts"


def calls(stack) -> list[dict]:
    path = Path(stack.home) / "alert-calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_calls(stack, n: int, timeout: float = 90) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(calls(stack)) < n:
        assert time.monotonic() < deadline, f"{len(calls(stack))} of {n} notifier calls"
        time.sleep(1)
    return calls(stack)


def test_a_lag_alert_fires_once_and_clears_once(stack, airflow):
    cfg = get_pipeline(stack.pipelines_file, "it_alerts")
    broker.create_topic(stack.kafka_bootstrap, TOPIC, 2)
    # a first, empty run: the ledger knows the partitions, at offset 0
    airflow.trigger(cfg.dag_id, "alerts-0")
    assert airflow.wait_for_runs(cfg.dag_id, ["alerts-0"], timeout=300)["alerts-0"] == "success"
    time.sleep(3)  # three looks at lag 0: nothing fires
    assert calls(stack) == []

    produced = feed(stack, TOPIC, 300)
    (fired,) = wait_calls(stack, 1)
    assert (fired["alert"], fired["state"]) == ("lag", "firing")
    # the lag of the look that fired: at the threshold or past it, and at most what was
    # produced (a look may come while the producer is still writing: a run under load saw 150)
    lag = fired["value"]
    assert 100 <= lag <= produced, fired
    assert fired["subject"] == "[firing] it_alerts"  # the notifier's template, rendered
    assert fired["dag_id"] == f"{cfg.dag_id}_alerts"
    assert (
        f"lag {lag:.0f} records" in fired["message"] and "alert_lag_records 100" in fired["message"]
    )
    time.sleep(4)  # four more looks at lag 300: the incident is open, nothing more is sent
    assert len(calls(stack)) == 1

    airflow.trigger(cfg.dag_id, "alerts-1")
    assert airflow.wait_for_runs(cfg.dag_id, ["alerts-1"], timeout=300)["alerts-1"] == "success"
    _, cleared = wait_calls(stack, 2)
    assert (cleared["alert"], cleared["state"], cleared["value"]) == ("lag", "cleared", 0)
    time.sleep(4)
    assert len(calls(stack)) == 2  # cleared once
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            "select alert, fired_value, cleared_value from onceflow.alert_incidents"
            " where pipeline = %s",
            (cfg.name,),
        )
        assert cur.fetchall() == [("lag", lag, 0)]
    audit(stack, "it_alerts")
