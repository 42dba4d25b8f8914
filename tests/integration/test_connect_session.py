"""Sessions of a real Spark Connect server (the test session's): what several process
tasks of one pipeline do at once (onceflow.process.connect_session)."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.process.connect_session import ConnectSpark

pytestmark = pytest.mark.integration


def test_runs_in_flight_open_the_pipelines_session_at_once(
    spark_connect_server, tmp_path, monkeypatch
):
    """Three runs in flight add the same module to the same session at the same moment: each
    gets the session, and each can import the module in the server's Python workers.
    Afterwards the process is no longer in Connect mode: a spark-submit it starts later
    (another pipeline's process task) must not inherit pyspark's switch."""
    url, _ = spark_connect_server
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)
    name = f"user_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("ANSWER = 42\n\ndef transform(df):\n    return df\n")
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(tmp_path))
    cfg = parse_pipeline(
        "inflight", {"topics": ["t"], "transform": f"{name}:transform", "sink": {"table": "t"}}
    )
    start, results = threading.Barrier(3), []

    def run() -> None:
        start.wait()
        try:
            with ConnectSpark(url).session(cfg, False) as spark:

                def answer(batches):
                    import importlib

                    import pyarrow as pa

                    for _ in batches:
                        yield pa.RecordBatch.from_pylist(
                            [{"a": importlib.import_module(name).ANSWER}]
                        )

                row = spark.range(1).mapInArrow(answer, "a long").collect()[0]
                results.append(row.a)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            results.append(repr(e))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == [42, 42, 42]
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ


def test_interrupt_stops_the_job_a_killed_task_left_running_on_the_server(
    spark_connect_server, tmp_path, monkeypatch
):
    """A killed process task (ConnectProcessOperator.on_kill) interrupts its job: the server
    would otherwise run it on for as long as it takes, after the task is gone."""
    url, _ = spark_connect_server
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)
    name = f"user_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("def transform(df):\n    return df\n")
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(tmp_path))
    cfg = parse_pipeline(
        "killed", {"topics": ["t"], "transform": f"{name}:transform", "sink": {"table": "t"}}
    )
    source, outcome = ConnectSpark(url), {}

    def run() -> None:
        with source.session(cfg, False) as spark:

            def slow(batches):
                import time

                for batch in batches:
                    time.sleep(120)
                    yield batch

            started = time.monotonic()
            try:
                spark.range(1).mapInArrow(slow, "id long").collect()
                outcome["ended"] = "completed"
            except Exception as e:  # noqa: BLE001 - asserted below
                outcome["ended"] = type(e).__name__
            outcome["after_s"] = time.monotonic() - started

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while not source._running and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # the job's task sleeping on the server
    assert source.interrupt() == 1
    thread.join(60)
    assert outcome.get("ended") not in (None, "completed"), outcome
    assert outcome["after_s"] < 60
    assert source.interrupt() == 0  # the session closed: nothing left to interrupt


def test_a_warm_session_is_prepared_once_and_again_when_the_settings_change(
    spark_connect_server, tmp_path, monkeypatch, caplog
):
    """The pipeline's first batch sets the session's settings and ships its module; the next
    batch finds them there and sends neither again; a changed spark_conf is set anew."""
    url, _ = spark_connect_server
    name = f"user_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("def transform(df):\n    return df\n")
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(tmp_path))

    def batch(spark_conf: dict[str, str]) -> tuple[str, list[str]]:
        cfg = parse_pipeline(
            "prepared",
            {
                "topics": ["t"],
                "transform": f"{name}:transform",
                "sink": {"table": "t"},
                "spark_conf": spark_conf,
            },
        )
        caplog.clear()
        with (
            caplog.at_level("INFO", "onceflow.process"),
            ConnectSpark(url).session(cfg, False) as spark,
        ):
            value = spark.conf.get("spark.sql.shuffle.partitions")
        return value, [
            r.getMessage().split(":")[0] for r in caplog.records if name in r.getMessage()
        ]

    first = batch({"spark.sql.shuffle.partitions": "3"})
    assert first == ("3", ["shipped to the session's Python path"])
    again = batch({"spark.sql.shuffle.partitions": "3"})
    assert again == ("3", ["on the session's Python path already"])
    changed = batch({"spark.sql.shuffle.partitions": "5"})
    assert changed == ("5", ["shipped to the session's Python path"])
