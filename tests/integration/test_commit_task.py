"""The commit task and its trigger on a real PostgreSQL ledger.

The Airflow triggerer and task runner are not started here (the end-to-end tests run them):
the operator's `execute` / `execute_complete` and the trigger's `run` are called directly,
which is exactly what those two processes do with them.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from onceflow.airflow.tasks import CommitOperator
from onceflow.airflow.triggers import CommitReadyTrigger
from onceflow.commit import commit
from onceflow.compat.airflow_exceptions import TaskDeferred
from onceflow.config.pipelines_file import get_pipeline
from onceflow.errors import OnceflowError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.batches import get_batch
from onceflow.ledger.db import transaction
from onceflow.ledger.planning import plan
from test_ledger import T, process, snap

pytestmark = pytest.mark.integration


def pipeline_file(path, name: str, commit_wait_seconds: float):
    path.write_text(
        f'[pipelines.{name}]\ntopics = ["{T}"]\nmax_records_per_partition = 100\n'
        'transform = "orders:transform"\nsink = { table = "orders" }\n'
        f"commit_wait_seconds = {commit_wait_seconds}\n"
    )
    return get_pipeline(path, name)


@pytest.fixture
def cfg(unique_name, ledger_dsn, tmp_path, monkeypatch):
    path = tmp_path / "pipelines.toml"
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(path))
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", ledger_dsn)
    return pipeline_file(path, unique_name, commit_wait_seconds=1)


def first_event(trigger: CommitReadyTrigger, within: float):
    """The trigger's first event, or None if it is still waiting after `within` seconds."""

    async def go():
        agen = trigger.run()
        try:
            return await asyncio.wait_for(agen.__anext__(), within)
        except TimeoutError:
            return None
        finally:
            await agen.aclose()

    return asyncio.run(go())


def test_trigger_serialises_without_credentials(cfg):
    path, kwargs = CommitReadyTrigger(cfg.name, "run/1", 0.5, "prod_ledger").serialize()
    assert path == "onceflow.airflow.triggers.CommitReadyTrigger"
    # the ledger's connection id, never its DSN
    assert kwargs == {
        "pipeline": cfg.name,
        "txid": "run/1",
        "poll_interval": 0.5,
        "ledger_conn_id": "prod_ledger",
    }
    assert CommitReadyTrigger(**kwargs).serialize() == (path, kwargs)


def test_trigger_waits_for_the_predecessor_then_fires(ledger_dsn, cfg, capsys):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 16}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "b", 6)
    trigger = CommitReadyTrigger(cfg.name, "b", 0.2)
    # the triggerer's log (structlog, to stdout here) is what the task log shows; a loaded
    # machine (CI's parallel tests) can take more than 1.5 s to the trigger's first look
    waiting = "commit of txid b waits for txid a (seq 1), which is planned"
    out = ""
    for _ in range(10):
        assert first_event(trigger, within=1.5) is None  # a is only planned
        out += capsys.readouterr().out
        if waiting in out:
            break
    assert waiting in out
    process(ledger_dsn, cfg, "a", 10)
    commit(ledger_dsn, cfg, "a")
    event = first_event(trigger, within=5)
    assert event is not None and event.payload["status"] == "ready"


def test_trigger_keeps_waiting_while_the_ledger_is_unreachable(cfg, monkeypatch, capsys):
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", "postgresql://nobody@127.0.0.1:1/none")
    assert first_event(CommitReadyTrigger(cfg.name, "a", 0.2), within=1.5) is None
    assert "cannot read the ledger (OperationalError" in capsys.readouterr().out


def test_trigger_reports_an_unknown_txid(cfg):
    event = first_event(CommitReadyTrigger(cfg.name, "nope", 0.2), within=5)
    assert event.payload["status"] == "error"
    assert "'nope' is not in the ledger" in event.payload["message"]


def test_commit_task_defers_while_blocked_and_commits_when_resumed(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 16}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "b", 5, 1)
    op = CommitOperator(task_id="commit", pipeline=cfg.name, poll_interval=0.5)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"run_id": "b"})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CommitReadyTrigger)
    assert (trigger.pipeline, trigger.txid, trigger.poll_interval) == (cfg.name, "b", 0.5)
    assert deferred.value.method_name == "execute_complete"
    assert get_batch(ledger_dsn, cfg.name, "b").state == "staged"

    process(ledger_dsn, cfg, "a", 10)
    first = CommitOperator(task_id="commit", pipeline=cfg.name)
    assert first.execute({"run_id": "a"})["outcome"] == "committed"  # free: commits at once
    out = op.execute_complete({"run_id": "b"}, {"status": "ready", "waited": 3.0})
    assert (out["seq"], out["outcome"], out["published"], out["dead_lettered"]) == (
        2,
        "committed",
        5,
        1,
    )
    assert get_batch(ledger_dsn, cfg.name, "b").state == "committed"
    # a retry of the task after commit changes nothing
    assert op.execute({"run_id": "b"})["outcome"] == "already-committed"


def staged_b_behind_planned_a(ledger_dsn, cfg, tmp_path, commit_wait_seconds: float) -> None:
    """Txid b staged, its commit blocked by a (seq 1, only planned); the pipeline's commits
    wait `commit_wait_seconds` in their task."""
    pipeline_file(tmp_path / "pipelines.toml", cfg.name, commit_wait_seconds)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 16}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "b", 6)


def test_a_blocked_commit_waits_in_its_task_and_commits_once_its_predecessor_closes(
    ledger_dsn, cfg, tmp_path
):
    staged_b_behind_planned_a(ledger_dsn, cfg, tmp_path, commit_wait_seconds=60)

    def commit_a_later():
        time.sleep(1.0)
        process(ledger_dsn, cfg, "a", 10)
        commit(ledger_dsn, cfg, "a")

    closer = threading.Thread(target=commit_a_later)
    closer.start()
    t0 = time.monotonic()
    out = CommitOperator(task_id="commit", pipeline=cfg.name).execute({"run_id": "b"})
    took = time.monotonic() - t0
    closer.join()
    assert (out["seq"], out["outcome"]) == (2, "committed")  # no deferral
    # woken by a's closing, not by the end of its 60 s
    assert 1.0 <= took < 10, took


def test_a_commit_whose_wait_in_its_task_loses_the_ledger_defers_to_the_trigger(
    ledger_dsn, cfg, tmp_path
):
    staged_b_behind_planned_a(ledger_dsn, cfg, tmp_path, commit_wait_seconds=60)

    def cut_the_listener():  # as a ledger restart would
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with transaction(ledger_dsn) as cur:
                cur.execute(
                    "select pg_terminate_backend(pid) from pg_stat_activity"
                    " where query like 'listen onceflow_batch_closed%'"
                )
                if cur.fetchall():
                    return
            time.sleep(0.2)

    cutter = threading.Thread(target=cut_the_listener)
    cutter.start()
    t0 = time.monotonic()
    with pytest.raises(TaskDeferred):  # the trigger waits out the ledger's absence
        CommitOperator(task_id="commit", pipeline=cfg.name).execute({"run_id": "b"})
    took = time.monotonic() - t0
    cutter.join()
    assert took < 30, took
    assert get_batch(ledger_dsn, cfg.name, "b").state == "staged"


def test_commit_task_defers_again_when_resumed_while_a_predecessor_is_open(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 16}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "b", 6)
    op = CommitOperator(task_id="commit", pipeline=cfg.name)
    # resumed as if the trigger had fired while seq 1 (a) is still open (a trigger that fired
    # before a was cleared, say): the task asks the ledger again and waits, never skips a
    with pytest.raises(TaskDeferred):
        op.execute_complete({"run_id": "b"}, {"status": "ready"})
    assert get_batch(ledger_dsn, cfg.name, "b").state == "staged"


def test_commit_task_fails_clearly_on_a_trigger_error(cfg):
    op = CommitOperator(task_id="commit", pipeline=cfg.name)
    with pytest.raises(OnceflowError, match="commit of txid x: txid 'x' is not in the ledger"):
        op.execute_complete(
            {"run_id": "x"}, {"status": "error", "message": "txid 'x' is not in the ledger"}
        )
