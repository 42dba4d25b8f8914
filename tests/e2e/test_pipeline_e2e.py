"""End to end on real parts: the shared test stack (PostgreSQL, Apache Kafka, Airflow's
api-server, scheduler, dag-processor and triggerer) runs DAG runs through the scheduler, each
process step a real spark-submit. Every test ends with the audit, re-reading the broker."""

from __future__ import annotations

import time

import pytest
from onceflow.audit import run_audit
from onceflow.config.pipelines_file import get_pipeline
from onceflow.errors import UnknownTxidError
from onceflow.hooks.sink import sink_for
from onceflow.kafka import broker
from onceflow.kafka.recount import count_records
from onceflow.ledger.batches import get_batch
from onceflow.ledger.db import transaction
from onceflow.ledger.fencing import claim_attempt
from onceflow.ledger.ordering import blocking_predecessor
from onceflow.ledger.planning import plan
from onceflow.transforms import load_module
from onceflow_dev import producer

pytestmark = pytest.mark.integration

# the scenarios that run in both process modes: each mode's pipeline is it_<scenario> (a
# spark-submit per attempt) or it_<scenario>_connect (a session of the stack's Spark
# Connect server)
MODES = pytest.mark.parametrize("mode", ["", "_connect"], ids=["spark-submit", "connect"])
# a rule of the ledger and the command line, which the way process reaches Spark does not
# change: in connect mode alone (the spark-submit runs of this file and of the demo cover
# that way; each took 2-5 times a connect run's time)
CONNECT_ONLY = pytest.mark.parametrize("mode", ["_connect"], ids=["connect"])


def orders_sample(malformed_rate: float):
    """The orders example's sample (spark_jobs/orders.py) with this share malformed."""
    return load_module("orders:transform").sample_with(malformed_rate)


def audit(stack, name):
    cfg = get_pipeline(stack.pipelines_file, name)
    report = run_audit(stack.postgres_dsn, cfg, lambda rs: count_records(stack.kafka_bootstrap, rs))
    assert report.verdict == "exactly-once", report.violations
    return report


def feed(stack, topic, count, start=0, partitions=2, malformed_rate=0.05):
    broker.create_topic(stack.kafka_bootstrap, topic, partitions)
    return producer.produce(
        stack.kafka_bootstrap,
        topic,
        partitions,
        count,
        sample=orders_sample(malformed_rate),
        start=start,
        seed=7,
    )


def run_and_wait(client, dag_id, run_ids, timeout=600):
    for run_id in run_ids:
        client.trigger(dag_id, run_id)
    return client.wait_for_runs(dag_id, run_ids, timeout=timeout, echo=None)


def test_runs_through_the_scheduler_publish_exactly_the_produced_records(stack, airflow):
    produced = feed(stack, "it_basic", 2000)
    # cap 700/partition over 2 partitions: 2000 records need two batches
    # the third run id uses every character Airflow allows in a run id
    run_ids = ["basic-1", "basic-2", "Basic_3.x~y:z+w-v"]
    states = run_and_wait(airflow, "onceflow_it_basic", run_ids)
    assert set(states.values()) == {"success"}, states
    report = audit(stack, "it_basic")
    assert report.batches_committed == 3
    assert report.records_in_ranges == produced == report.records_in_sink + report.dead_lettered
    assert report.dead_lettered > 0
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            'select topic, partition, "offset", reason from onceflow.dead_letters'
            " where pipeline = 'it_basic' order by partition, \"offset\""
        )
        dead = cur.fetchall()
        cur.execute("select count(*) from it_basic.orders")
        assert cur.fetchone()[0] == report.records_in_sink
    assert all(t == "it_basic" and r for t, _, _, r in dead)
    assert len(dead) == report.dead_lettered
    # the summary lines: plan, process and commit report their counts in the task logs
    seqs = {r: get_batch(stack.postgres_dsn, "it_basic", r).seq for r in states}
    assert set(seqs.values()) == {1, 2, 3}
    # each commit is an event of the sink's Asset, with what it published
    events = airflow.asset_events("onceflow_it_basic")
    assert {e["uri"] for e in events} == {"x-onceflow-postgres://onceflow_ledger/it_basic/orders"}
    assert sorted((e["extra"]["txid"], e["extra"]["seq"]) for e in events) == sorted(seqs.items())
    assert sum(e["extra"]["published"] for e in events) == report.records_in_sink
    assert sum(e["extra"]["dead_lettered"] for e in events) == report.dead_lettered


def test_commit_waits_for_its_predecessor_and_commits_in_seq_order(stack, airflow):
    cfg = get_pipeline(stack.pipelines_file, "it_order")
    feed(stack, "it_order", 400)
    # seq 1 is planned outside the scheduler and left unprocessed: it blocks later commits
    first = plan(
        stack.postgres_dsn,
        cfg,
        "order-1",
        lambda at: broker.snapshot(stack.kafka_bootstrap, cfg.name, cfg.topics, at),
        sink=sink_for(cfg),
    )
    assert first.seq == 1
    feed(stack, "it_order", 300, start=400)
    airflow.trigger(cfg.dag_id, "order-2")
    deadline = time.monotonic() + 900
    state, commit_ti = None, {}
    while time.monotonic() < deadline:
        try:
            state = get_batch(stack.postgres_dsn, cfg.name, "order-2").state
        except UnknownTxidError:  # its plan task has not run yet
            state = None
        commit_ti = {
            t["task_id"]: t["state"] for t in airflow.task_instances(cfg.dag_id, "order-2")
        }
        if state == "staged" and commit_ti.get("commit") == "deferred":
            break
        time.sleep(1)
    else:
        pytest.fail(f"order-2 never reached staged with a waiting commit: {state} {commit_ti}")
    wait = blocking_predecessor(stack.postgres_dsn, cfg.name, "order-2")
    assert (wait.txid, wait.seq, wait.state) == ("order-1", 1, "planned")
    # now run seq 1 through the scheduler: its plan replays the recorded ranges
    states = run_and_wait(airflow, cfg.dag_id, ["order-1"])
    states.update(airflow.wait_for_runs(cfg.dag_id, ["order-2"], timeout=300, echo=None))
    assert set(states.values()) == {"success"}, states
    assert get_batch(stack.postgres_dsn, cfg.name, "order-1").ranges == first.ranges
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            "select txid from onceflow.batches where pipeline = 'it_order' order by committed_at"
        )
        assert [r[0] for r in cur.fetchall()] == ["order-1", "order-2"]
    report = audit(stack, "it_order")
    assert report.records_in_ranges == 700


@MODES
def test_cleared_and_retried_runs_replay_the_same_ranges_without_duplicates(stack, airflow, mode):
    name, dag_id = f"it_rerun{mode}", f"onceflow_it_rerun{mode}"
    feed(stack, name, 1000)
    assert set(run_and_wait(airflow, dag_id, ["rerun-1"]).values()) == {"success"}
    before = audit(stack, name)
    ranges_before = get_batch(stack.postgres_dsn, name, "rerun-1").ranges
    feed(stack, name, 500, start=1000)  # new data must not leak into the replayed txid
    airflow.clear_run(dag_id, "rerun-1")
    states = airflow.wait_for_runs(dag_id, ["rerun-1"], timeout=600, echo=None)
    assert states == {"rerun-1": "success"}
    after = audit(stack, name)
    batch = get_batch(stack.postgres_dsn, name, "rerun-1")
    assert batch.ranges == ranges_before
    assert (after.records_in_sink, after.dead_lettered, after.batches_committed) == (
        before.records_in_sink,
        before.dead_lettered,
        1,
    )
    with transaction(stack.postgres_dsn) as cur:
        cur.execute(
            "select attempt, staged_attempt, published_attempt from onceflow.batches"
            " where pipeline = %s and txid = 'rerun-1'",
            (name,),
        )
        attempt, staged, published = cur.fetchone()
    assert attempt == staged == published == 2
    # the next run picks up exactly the records produced meanwhile
    assert set(run_and_wait(airflow, dag_id, ["rerun-2"]).values()) == {"success"}
    assert audit(stack, name).records_in_ranges == 1500


@CONNECT_ONLY
def test_rerun_and_backfill_through_the_cli_keep_the_audit_clean(stack, airflow, capsys, mode):
    from onceflow.cli.main import main

    name, dag_id = f"it_rerun{mode}", f"onceflow_it_rerun{mode}"
    feed(stack, name, 10, start=5000)  # it_rerun has committed runs from the test above
    assert set(run_and_wait(airflow, dag_id, ["rerun-3"]).values()) == {"success"}
    before = audit(stack, name)
    assert main(["rerun", "rerun-3", "--pipeline", name, "--timeout", "600"]) == 0
    assert (
        main(
            [
                "backfill",
                "--pipeline",
                name,
                "--from-seq",
                "1",
                "--to-seq",
                "2",
                "--timeout",
                "600",
            ]
        )
        == 0
    )
    after = audit(stack, name)
    assert (after.records_in_sink, after.dead_lettered, after.batches_committed) == (
        before.records_in_sink,
        before.dead_lettered,
        before.batches_committed,
    )
    out = capsys.readouterr().out
    assert "[2/2] seq 2" in out and "backfilled seq 1..2" in out
    # unknown run ids and ranges get clear errors, exit code 2
    assert main(["rerun", "no-such-run", "--pipeline", name]) == 2
    assert main(["backfill", "--pipeline", name, "--from-seq", "1", "--to-seq", "99"]) == 2
    assert main(["audit", "--pipeline", "no_such_pipeline"]) == 2
    err = capsys.readouterr().err
    assert f"txid 'no-such-run' is not in the ledger of pipeline '{name}'" in err
    assert "has no batch with seq 4" in err
    assert "no pipeline named 'no_such_pipeline'" in err


@MODES
def test_reset_offsets_abandons_uncommitted_batches_and_fails_their_runs(
    stack, airflow, capsys, mode
):
    from onceflow.cli.main import main

    name = f"it_reset{mode}"
    feed(stack, name, 100)
    cfg = get_pipeline(stack.pipelines_file, name)
    snapshot = lambda at: broker.snapshot(stack.kafka_bootstrap, cfg.name, cfg.topics, at)  # noqa: E731
    plan(stack.postgres_dsn, cfg, "reset-0", snapshot, sink=sink_for(cfg))  # seq 1: no Airflow run
    feed(stack, name, 50, start=100)
    airflow.trigger(cfg.dag_id, "reset-1")  # seq 2: processed, its commit waits for seq 1
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        tis = {t["task_id"]: t["state"] for t in airflow.task_instances(cfg.dag_id, "reset-1")}
        if tis.get("commit") == "deferred":
            break
        time.sleep(1)
    else:
        pytest.fail(f"reset-1 never reached a waiting commit: {tis}")
    assert main(["reset-offsets", "--pipeline", name, "--reason", "test", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "abandoned: reset-0, reset-1" in out
    assert f"run reset-0 is not in Airflow's DAG {cfg.dag_id}: nothing to stop" in out
    assert f"marked run reset-1 of {cfg.dag_id} failed" in out
    assert airflow.get_run(cfg.dag_id, "reset-1")["state"] == "failed"
    for txid in ("reset-0", "reset-1"):
        assert get_batch(stack.postgres_dsn, cfg.name, txid).state == "abandoned"
    # new runs plan from the new offsets and commit; the audit accounts for the reset
    states = run_and_wait(airflow, cfg.dag_id, ["reset-2"])
    assert states == {"reset-2": "success"}
    audit(stack, name)


@MODES
def test_a_fenced_process_attempt_ends_without_retries_and_a_cleared_run_commits(
    stack, airflow, mode
):
    """A newer attempt claims the txid while the scheduler's attempt runs: the running one is
    fenced (exit 3) and its task fails at once, visibly, although process has retries. (In
    connect mode the transform is slowed down: the job would otherwise end before the
    newer attempt's claim.)"""
    name = f"it_fence{mode}"
    cfg = get_pipeline(stack.pipelines_file, name)
    produced = feed(stack, name, 300)
    airflow.trigger(cfg.dag_id, "fence-1")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # process claimed attempt 1 and is starting Spark
        with transaction(stack.postgres_dsn) as cur:
            cur.execute(
                "select attempt, state from onceflow.batches"
                " where pipeline = %s and txid = 'fence-1'",
                (name,),
            )
            row = cur.fetchone()
        if row and row[0] == 1:
            break
        time.sleep(0.1)
    else:
        pytest.fail("process never claimed attempt 1 of fence-1")
    assert row[1] == "processing"
    newer = claim_attempt(stack.postgres_dsn, cfg.name, "fence-1")  # e.g. a manual run
    assert newer.attempt == 2

    states = airflow.wait_for_runs(cfg.dag_id, ["fence-1"], timeout=600, echo=None)
    assert states == {"fence-1": "failed"}
    process = {t["task_id"]: t for t in airflow.task_instances(cfg.dag_id, "fence-1")}["process"]
    assert (process["state"], process["try_number"]) == ("failed", 1)
    text = airflow.task_log(cfg.dag_id, "fence-1", "process", 1)
    assert "onceflow process txid=fence-1 ended FENCED (exit 3)" in text
    if not mode:
        submitted = next(line for line in text.splitlines() if "Spark-Submit cmd" in line)
        assert "-XX:TieredStopAtLevel=1" in submitted  # 300 records: a small batch's JVM
    assert "not retried" in text
    assert get_batch(stack.postgres_dsn, cfg.name, "fence-1").state == "processing"

    # on call: clear the run; a new attempt stages and commits the same ranges once
    airflow.clear_run(cfg.dag_id, "fence-1")
    states = airflow.wait_for_runs(cfg.dag_id, ["fence-1"], timeout=600, echo=None)
    assert states == {"fence-1": "success"}
    report = audit(stack, name)
    assert report.records_in_ranges == produced == report.records_in_sink + report.dead_lettered


def test_connect_mode_runs_publish_exactly_once_in_the_servers_session(stack, airflow):
    """process_mode = "connect": the process task runs the attempt itself, its job in a
    session of the stack's Spark Connect server, and the runs land as with spark-submit."""
    cfg = get_pipeline(stack.pipelines_file, "it_connect")
    produced = feed(stack, "it_connect", 2000)
    run_ids = ["connect-1", "connect-2", "connect-3"]  # cap 700/partition: two batches + one
    states = run_and_wait(airflow, cfg.dag_id, run_ids)
    assert set(states.values()) == {"success"}, states
    report = audit(stack, "it_connect")
    assert report.batches_committed == 3
    assert report.records_in_ranges == produced == report.records_in_sink + report.dead_lettered
    tries = {
        r: {t["task_id"]: t for t in airflow.task_instances(cfg.dag_id, r)}["process"]["try_number"]
        for r in run_ids
    }
    assert tries == dict.fromkeys(run_ids, 1), tries  # runs in flight share the session
    logs = [airflow.task_log(cfg.dag_id, r, "process", 1) for r in run_ids]
    assert all("on the Spark Connect server 127.0.0.1:" in text for text in logs)
    assert not any("Spark-Submit cmd" in text for text in logs)
    # the runs planned in any order: the one with an empty batch needs no session
    assert sum("spark connect session" in text for text in logs) == 2


def test_a_spark_connect_server_killed_mid_job_fails_the_attempt_and_a_retry_replays_it(
    stack, airflow
):
    """The server dies while the job runs (SIGKILL): the attempt fails within seconds rather
    than waiting for the client's default ten minutes of retries, and once the server is
    back a retry (the task's own, or the on-call's clear) stages the same ranges; the batch
    commits exactly once."""
    from onceflow_dev import stack as local_stack

    cfg = get_pipeline(stack.pipelines_file, "it_connect_kill")

    def kill_batch() -> tuple:
        with transaction(stack.postgres_dsn) as cur:
            cur.execute(
                "select attempt, last_error, state from onceflow.batches"
                " where pipeline = 'it_connect_kill' and txid = 'kill-1'"
            )
            return cur.fetchone()

    produced = feed(stack, "it_connect_kill", 400)
    airflow.trigger(cfg.dag_id, "kill-1")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # the stage job is open: its row is in the ledger
        with transaction(stack.postgres_dsn) as cur:
            cur.execute(
                "select count(*) from onceflow.stage_jobs"
                " where pipeline = 'it_connect_kill' and txid = 'kill-1'"
            )
            if cur.fetchone()[0]:
                break
        time.sleep(0.2)
    else:
        pytest.fail("the stage job of kill-1 never started")
    time.sleep(1.0)
    server = local_stack.service_process(stack, "spark-connect")
    server.kill()
    server.wait(30)
    killed = time.monotonic()
    while time.monotonic() < killed + 60:  # the attempt fails, not the client's 10 minutes
        attempt, last_error, state = kill_batch()
        if last_error:
            break
        time.sleep(0.5)
    assert last_error and last_error.startswith("process attempt 1:"), last_error
    assert time.monotonic() - killed < 60
    local_stack._connect_start(stack)
    local_stack._connect_wait(stack)
    states = airflow.wait_for_runs(cfg.dag_id, ["kill-1"], timeout=600, echo=None)
    if states != {"kill-1": "success"}:  # the task's retries ran out before the server was up
        airflow.clear_run(cfg.dag_id, "kill-1")
        states = airflow.wait_for_runs(cfg.dag_id, ["kill-1"], timeout=600, echo=None)
    assert states == {"kill-1": "success"}
    attempt, _, state = kill_batch()
    assert attempt >= 2 and state == "committed"
    report = audit(stack, "it_connect_kill")
    assert report.records_in_ranges == produced == report.records_in_sink + report.dead_lettered
