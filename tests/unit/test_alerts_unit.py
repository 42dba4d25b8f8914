"""The alerts' rule (onceflow.airflow.alert_rules), their keys, their DAG and watcher, and
how a notifier is found, without a server."""

from __future__ import annotations

from pathlib import Path

import pytest
from onceflow.airflow.alert_rules import Measures, changes
from onceflow.config.alerts import Alerts
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError, PipelineKeyError

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
ALERTS = Alerts("m:f", lag_records=100, commit_blocked_minutes=5, no_commit_minutes=None)


def m(lag=0, blocked=0.0, idle=0.0) -> Measures:
    return Measures(lag, blocked, idle)


def test_an_alert_fires_when_its_value_reaches_the_threshold_and_clears_below_it():
    (fired,) = changes(ALERTS, m(lag=100), set())
    assert (fired.alert, fired.state, fired.value, fired.threshold) == ("lag", "firing", 100, 100)
    assert changes(ALERTS, m(lag=99), set()) == []  # below: nothing
    assert changes(ALERTS, m(lag=5000), {"lag"}) == []  # open: not again
    (cleared,) = changes(ALERTS, m(lag=99), {"lag"})
    assert (cleared.state, cleared.value) == ("cleared", 99)
    # an unmeasured value changes nothing; an alert that is off never fires
    assert changes(ALERTS, Measures(None, 0.0, 10**6), {"lag"}) == []
    (blocked,) = changes(ALERTS, m(blocked=5.0), set())
    assert blocked.alert == "commit_blocked"
    assert "a staged batch has waited 5.0 minutes" in blocked.message("p")
    assert fired.as_extra("orders")["message"] == (
        "onceflow pipeline orders: lag 100 records past the committed offsets "
        "(>= alert_lag_records 100)"
    )


def test_alert_keys_are_checked_by_name():
    base = {"topics": ["t"], "transform": "orders:transform", "sink": {"table": "t"}}
    cfg = parse_pipeline("p", {**base, "alert_no_commit_minutes": 30, "alert_notifier": "a.b:c"})
    assert cfg.alerts == Alerts("a.b:c", no_commit_minutes=30)
    assert parse_pipeline("p", base).alerts is None
    for bad, key in (
        ({"alert_notifier": "a:b"}, "alert_notifier"),  # no alert
        ({"alert_lag_records": 10}, "alert_notifier"),  # no notifier
        ({"alert_lag_records": 1.5, "alert_notifier": "a:b"}, "alert_lag_records"),
        ({"alert_lag_records": 1, "alert_notifier": "a:b", "alert_interval_seconds": 0}, None),
    ):
        with pytest.raises(PipelineKeyError) as e:
            parse_pipeline("p", {**base, **bad})
        assert f"key '{key or 'alert_interval_seconds'}'" in str(e.value)


def test_a_pipeline_with_alerts_gets_an_alerts_dag_watched_in_the_triggerer(tmp_path, monkeypatch):
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        '[pipelines.watched]\ntopics = ["a"]\ntransform = "orders:transform"\n'
        'sink = { table = "orders" }\nalert_lag_records = 500\nalert_interval_seconds = 5\n'
        'alert_notifier = "mine:notifier"\nledger_conn_id = "l"\n'
    )
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(ROOT / "spark_jobs"))
    from onceflow.airflow.alerts_trigger import AlertsTrigger
    from onceflow.airflow.dag_factory import build_dags

    dags = build_dags(pipelines)
    assert set(dags) == {"onceflow_watched", "onceflow_watched_alerts"}
    alerts = dags["onceflow_watched_alerts"]
    assert [t.task_id for t in alerts.tasks] == ["notify"]
    (asset,) = alerts.timetable.asset_condition.objects
    assert asset.name == "onceflow_watched_alerts"
    (watcher,) = asset.watchers
    path, kwargs = watcher.trigger.serialize()
    assert path == "onceflow.airflow.alerts_trigger.AlertsTrigger"
    assert kwargs == {
        "pipeline": "watched",
        "topics": ["a"],
        "lag_records": 500,
        "commit_blocked_minutes": None,
        "no_commit_minutes": None,
        "interval_seconds": 5.0,
        "ledger_conn_id": "l",
        "kafka_conn_id": None,
    }
    assert AlertsTrigger(**kwargs).serialize() == (path, kwargs)  # round trip, no notifier


def test_a_notifier_that_is_not_one_is_refused_naming_it(tmp_path, monkeypatch):
    (tmp_path / "my_alerts.py").write_text("def nothing():\n    return None\n")
    monkeypatch.setenv("ONCEFLOW_PYTHONPATH", str(tmp_path))
    from onceflow.airflow.alerts_dag import notifiers

    with pytest.raises(ConfigError, match=r"alert notifier 'my_alerts:nothing' returned \[None\]"):
        notifiers("my_alerts:nothing")
    with pytest.raises(ConfigError, match="alert notifier 'my_alerts:missing'"):
        notifiers("my_alerts:missing")
    with pytest.raises(Exception, match="alert notifier 'nowhere:x': module 'nowhere' not found"):
        notifiers("nowhere:x")


def test_the_example_prometheus_rules_name_metrics_the_endpoint_serves():
    """docs/prometheus/onceflow-alerts.yml must follow the metric names (ui.metrics)."""
    import re

    import yaml
    from onceflow.ui.metrics import PipelineMetrics, render

    served = {
        line.split()[2]
        for line in render([PipelineMetrics("p")]).splitlines()
        if line.startswith("# TYPE")
    }
    rules = yaml.safe_load((ROOT / "docs" / "prometheus" / "onceflow-alerts.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    named = {n for e in exprs for n in re.findall(r"\bonceflow_[a-z_]+", e)}
    assert len(exprs) == 4 and named and named <= served, named - served
