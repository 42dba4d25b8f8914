"""When an `on_records` pipeline starts a run (onceflow.airflow.arrivals: the watcher's
rule), how the schedule keys are read (onceflow.config.schedule), and what the DAG declares
for them."""

from __future__ import annotations

from pathlib import Path

import pytest
from onceflow.airflow.arrivals import ArrivalWatch, unplanned
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.config.schedule import OnRecords
from onceflow.errors import ConfigError

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
BASE = {"topics": ["t"], "transform": "orders:transform", "sink": {"table": "x"}}


def test_records_count_past_the_next_plans_start():
    assert unplanned({("t", 0): 10, ("t", 1): 5}, {("t", 0): 4, ("t", 1): 5}) == 6
    assert unplanned({("t", 0): 10}, {("t", 0): 12}) == 0  # a reset ahead of the end
    assert unplanned({("t", 0): 10, ("t", 1): 3}, {("t", 0): 10}) == 3  # a partition added


def test_a_pipeline_never_planned_starts_one_run_to_record_where_it_starts():
    watch = ArrivalWatch(OnRecords(min_records=100))
    assert watch.look(0.0, {}, None) is None  # no topic yet: nothing to start
    first = watch.look(1.0, {("t", 0): 0}, None)
    assert first is not None and "where the pipeline starts" in first.reason
    # that run has not planned yet: it is not started again, whatever the clock says
    assert watch.look(500.0, {("t", 0): 0}, None) is None


def test_a_run_starts_at_min_records_and_not_again_for_the_same_records():
    watch = ArrivalWatch(OnRecords(min_records=10, max_wait_seconds=60))
    starts = {("t", 0): 100, ("t", 1): 50}
    assert watch.look(0.0, {("t", 0): 105, ("t", 1): 54}, starts) is None  # 9 records
    due = watch.look(1.0, {("t", 0): 106, ("t", 1): 54}, starts)
    assert due is not None and due.records == 10 and due.waited_seconds == 1.0
    # the run is started but has not planned: the ledger still starts at 100 and 50
    assert watch.look(2.0, {("t", 0): 106, ("t", 1): 54}, starts) is None
    assert watch.look(3.0, {("t", 0): 115, ("t", 1): 54}, starts) is None  # 9 new ones
    # it planned through its ends; ten more records past them start the next run
    planned = {("t", 0): 106, ("t", 1): 54}
    nxt = watch.look(4.0, {("t", 0): 116, ("t", 1): 54}, planned)
    assert nxt is not None and nxt.records == 10


def test_fewer_than_min_records_start_a_run_once_they_have_waited_max_wait_seconds():
    watch = ArrivalWatch(OnRecords(min_records=1000, max_wait_seconds=30))
    starts = {("t", 0): 0}
    assert watch.look(10.0, {("t", 0): 3}, starts) is None
    assert watch.look(39.0, {("t", 0): 4}, starts) is None
    due = watch.look(40.0, {("t", 0): 5}, starts)
    assert due is not None and due.records == 5 and "max_wait_seconds" in due.reason
    # caught up: the wait starts over with the next record
    assert watch.look(41.0, {("t", 0): 5}, {("t", 0): 5}) is None
    assert watch.look(50.0, {("t", 0): 6}, {("t", 0): 5}) is None
    assert watch.look(79.0, {("t", 0): 6}, {("t", 0): 5}) is None
    assert watch.look(80.0, {("t", 0): 6}, {("t", 0): 5}) is not None


def test_schedule_keys():
    assert parse_pipeline("p", BASE).max_active_runs == 3
    cont = parse_pipeline("p", {**BASE, "schedule": "continuous"})
    assert (cont.schedule, cont.max_active_runs, cont.on_records) == ("continuous", 1, None)
    assert parse_pipeline("p", {**BASE, "schedule": "@continuous"}).schedule == "continuous"
    rec = parse_pipeline(
        "p", {**BASE, "schedule": "on_records", "min_records": 500, "max_wait_seconds": 5}
    )
    assert rec.on_records == OnRecords(500, 5.0, 1.0) and rec.max_active_runs == 3
    assert parse_pipeline("p", {**BASE, "schedule": "@hourly"}).on_records is None


@pytest.mark.parametrize(
    ("raw", "key", "why"),
    [
        ({"schedule": "continuous", "max_active_runs": 3}, "max_active_runs", "one at a time"),
        ({"schedule": "@hourly", "min_records": 5}, "min_records", "only schedule 'on_records'"),
        ({"max_wait_seconds": 5}, "max_wait_seconds", "only schedule 'on_records'"),
        ({"schedule": "on_records", "min_records": 0}, "min_records", "positive integer"),
        ({"schedule": "on_records", "max_wait_seconds": -1}, "max_wait_seconds", "seconds in"),
        ({"schedule": "on_records", "watch_interval_seconds": 0.01}, "watch_interval_seconds", ""),
        ({"schedule": 5}, "schedule", "on_records"),
    ],
)
def test_bad_schedule_keys_are_refused_by_name(raw, key, why):
    with pytest.raises(ConfigError, match=f"key '{key}'.*{why}"):
        parse_pipeline("p", {**BASE, **raw}, "pipelines.toml")


def test_the_dag_of_each_schedule(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        '[pipelines.watched]\ntopics = ["a", "b"]\ntransform = "orders:transform"\n'
        'schedule = "on_records"\nmin_records = 50\nkafka_conn_id = "k"\n'
        'sink = { table = "orders" }\n'
        '[pipelines.looped]\ntopics = ["t"]\ntransform = "orders:transform"\n'
        'schedule = "continuous"\nsink = { table = "looped" }\n'
    )
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(ROOT / "spark_jobs"))
    from airflow.sdk import Asset
    from onceflow.airflow.dag_factory import build_dags
    from onceflow.airflow.records_trigger import RecordsArrivedTrigger

    dags = build_dags(pipelines)
    watched = dags["onceflow_watched"]
    (asset,) = watched.timetable.asset_condition.objects
    assert isinstance(asset, Asset) and asset.name == "onceflow_watched_records"
    (watcher,) = asset.watchers
    trigger = watcher.trigger
    assert isinstance(trigger, RecordsArrivedTrigger)
    path, kwargs = trigger.serialize()
    assert path == "onceflow.airflow.records_trigger.RecordsArrivedTrigger"
    assert kwargs == {
        "pipeline": "watched",
        "topics": ["a", "b"],
        "min_records": 50,
        "max_wait_seconds": 60.0,
        "watch_interval_seconds": 1.0,
        "ledger_conn_id": None,
        "kafka_conn_id": "k",
    }
    assert RecordsArrivedTrigger(**kwargs).serialize() == (path, kwargs)  # round trip
    looped = dags["onceflow_looped"]
    assert type(looped.timetable).__name__ == "ContinuousTimetable"
    assert looped.max_active_runs == 1
    # runs after its first from a start date in the past; waits to be unpaused
    assert looped.start_date is not None and looped.is_paused_upon_creation is True
    assert watched.start_date is None and watched.is_paused_upon_creation is None
